#include "nvml.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace galley {
namespace {

// The few NVML types we need, laid out as in nvml.h (nvmlReturn_t is an int enum, 0 = success).
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
// nvmlProcessInfo_t as _v2 and _v3 fill it.
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
constexpr NvmlReturn kInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
constexpr unsigned long long kValueNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE
// NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE.
constexpr unsigned int kUuidSize = 96;
constexpr unsigned int kNameSize = 96;
constexpr unsigned int kDriverVersionSize = 80;

struct Nvml {
  void* library = nullptr;
  bool initialized = false;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*get_count)(unsigned int*) = nullptr;
  NvmlReturn (*get_handle)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*get_uuid)(NvmlDevice, char*, unsigned int) = nullptr;
  NvmlReturn (*get_utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*get_memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*get_power_usage)(NvmlDevice, unsigned int*) = nullptr;
  NvmlReturn (*get_power_management_limit)(NvmlDevice, unsigned int*) = nullptr;
  NvmlReturn (*get_enforced_power_limit)(NvmlDevice, unsigned int*) = nullptr;
  NvmlReturn (*get_energy)(NvmlDevice, unsigned long long*) = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  // Optional: missing from very old drivers, and only for logs.
  NvmlReturn (*get_name)(NvmlDevice, char*, unsigned int) = nullptr;
  NvmlReturn (*get_driver_version)(char*, unsigned int) = nullptr;
  // Optional: per-process memory (drivers from 470 on have _v3, 450 on _v2).
  NvmlReturn (*get_compute_processes)(NvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
};

std::mutex nvml_mutex;
Nvml nvml;  // guarded by nvml_mutex until initialized, read-only after

template <typename F>
bool Resolve(void* library, const char* symbol, F* out) {
  *out = reinterpret_cast<F>(dlsym(library, symbol));
  return *out != nullptr;
}

std::string ErrorText(NvmlReturn status) {
  const char* text = nvml.error_string != nullptr ? nvml.error_string(status) : nullptr;
  return (text != nullptr ? std::string(text) : std::string("NVML error")) + " (nvmlReturn_t " +
         std::to_string(status) + ")";
}

// Loads and initialises NVML once; on failure returns why (and tries again on the next call).
std::string EnsureNvml() {
  std::lock_guard<std::mutex> lock(nvml_mutex);
  if (nvml.initialized) return "";
  if (nvml.library == nullptr) {
    const char* override_path = std::getenv("GALLEY_NVML_LIBRARY");
    const char* path = override_path != nullptr && *override_path != '\0' ? override_path : "libnvidia-ml.so.1";
    void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* reason = dlerror();
      return reason != nullptr ? reason : std::string(path) + " could not be loaded";
    }
    Nvml loaded;
    loaded.library = library;
    bool all = Resolve(library, "nvmlInit_v2", &loaded.init) &&
               Resolve(library, "nvmlDeviceGetCount_v2", &loaded.get_count) &&
               Resolve(library, "nvmlDeviceGetHandleByIndex_v2", &loaded.get_handle) &&
               Resolve(library, "nvmlDeviceGetUUID", &loaded.get_uuid) &&
               Resolve(library, "nvmlDeviceGetUtilizationRates", &loaded.get_utilization) &&
               Resolve(library, "nvmlDeviceGetMemoryInfo", &loaded.get_memory) &&
               Resolve(library, "nvmlDeviceGetPowerUsage", &loaded.get_power_usage) &&
               Resolve(library, "nvmlDeviceGetTotalEnergyConsumption", &loaded.get_energy) &&
               Resolve(library, "nvmlErrorString", &loaded.error_string);
    if (!all) {
      dlclose(library);
      return std::string(path) + " lacks a function Galley needs (nvmlInit_v2 ... nvmlErrorString): driver too old";
    }
    // Either limit will do; both are optional so that a card without one still reports the rest.
    Resolve(library, "nvmlDeviceGetPowerManagementLimit", &loaded.get_power_management_limit);
    Resolve(library, "nvmlDeviceGetEnforcedPowerLimit", &loaded.get_enforced_power_limit);
    Resolve(library, "nvmlDeviceGetName", &loaded.get_name);
    Resolve(library, "nvmlSystemGetDriverVersion", &loaded.get_driver_version);
    if (!Resolve(library, "nvmlDeviceGetComputeRunningProcesses_v3", &loaded.get_compute_processes)) {
      Resolve(library, "nvmlDeviceGetComputeRunningProcesses_v2", &loaded.get_compute_processes);
    }
    nvml = loaded;
  }
  if (NvmlReturn status = nvml.init(); status != 0) return "nvmlInit_v2 failed: " + ErrorText(status);
  nvml.initialized = true;
  return "";
}

NvmlReading Reading(NvmlReturn status, double value) {
  NvmlReading reading;
  if (status == 0) {
    reading.ok = true;
    reading.value = value;
  } else {
    reading.error = ErrorText(status);
  }
  return reading;
}

NvmlGpuSample SampleDevice(unsigned int index, NvmlDevice device) {
  NvmlGpuSample gpu;
  gpu.index = index;
  char text[kUuidSize > kNameSize ? kUuidSize : kNameSize] = {};
  if (nvml.get_uuid(device, text, kUuidSize) == 0) gpu.uuid = text;
  if (nvml.get_name != nullptr && nvml.get_name(device, text, kNameSize) == 0) gpu.name = text;

  NvmlUtilization utilization{};
  NvmlReturn status = nvml.get_utilization(device, &utilization);
  gpu.utilization = Reading(status, utilization.gpu);

  NvmlMemory memory{};
  status = nvml.get_memory(device, &memory);
  gpu.memory_total = Reading(status, static_cast<double>(memory.total));
  gpu.memory_used = Reading(status, static_cast<double>(memory.used));

  unsigned int milliwatts = 0;
  status = nvml.get_power_usage(device, &milliwatts);
  gpu.power_usage = Reading(status, milliwatts);

  // nvidia-smi's power.limit and DCGM's POWER_MGMT_LIMIT: the management limit; the enforced
  // limit (the lower of it and any other constraint) where the management limit is not readable.
  milliwatts = 0;
  status = -1;
  if (nvml.get_power_management_limit != nullptr) status = nvml.get_power_management_limit(device, &milliwatts);
  if (status != 0 && nvml.get_enforced_power_limit != nullptr) {
    NvmlReturn enforced = nvml.get_enforced_power_limit(device, &milliwatts);
    if (enforced == 0 || status == -1) status = enforced;
  }
  gpu.power_limit = status == -1 ? NvmlReading{false, 0, "this NVML has no power limit function"}
                                 : Reading(status, milliwatts);

  unsigned long long millijoules = 0;
  status = nvml.get_energy(device, &millijoules);
  gpu.energy = Reading(status, static_cast<double>(millijoules));
  return gpu;
}

NvmlDeviceMemory DeviceMemory(unsigned int index, NvmlDevice device) {
  NvmlDeviceMemory gpu;
  gpu.index = index;
  char uuid[kUuidSize] = {};
  if (nvml.get_uuid(device, uuid, kUuidSize) == 0) gpu.uuid = uuid;
  NvmlMemory memory{};
  NvmlReturn status = nvml.get_memory(device, &memory);
  gpu.free = Reading(status, static_cast<double>(memory.free));
  gpu.total = Reading(status, static_cast<double>(memory.total));
  gpu.used = Reading(status, static_cast<double>(memory.used));
  if (nvml.get_compute_processes == nullptr) {
    gpu.processes_error = "this NVML has no nvmlDeviceGetComputeRunningProcesses_v3 or _v2";
    return gpu;
  }
  // Processes may start between the two calls: room for a few more, and try again if still short.
  std::vector<NvmlProcessInfo> infos;
  for (int attempt = 0; attempt < 3; attempt++) {
    unsigned int count = static_cast<unsigned int>(infos.size());
    status = nvml.get_compute_processes(device, &count, infos.empty() ? nullptr : infos.data());
    if (status == 0) {
      infos.resize(count);
      break;
    }
    if (status != kInsufficientSize) break;
    infos.resize(count + 8);
  }
  if (status != 0) {
    gpu.processes_error = "nvmlDeviceGetComputeRunningProcesses failed: " + ErrorText(status);
    return gpu;
  }
  gpu.processes_ok = true;
  for (const NvmlProcessInfo& info : infos) {
    NvmlProcessMemory process;
    process.pid = info.pid;
    process.used_known = info.used_gpu_memory != kValueNotAvailable;
    process.used = process.used_known ? static_cast<double>(info.used_gpu_memory) : 0;
    gpu.processes.push_back(process);
  }
  return gpu;
}

}  // namespace

NvmlMemorySample SampleNvmlMemory() {
  NvmlMemorySample sample;
  sample.error = EnsureNvml();
  if (!sample.error.empty()) return sample;
  unsigned int count = 0;
  if (NvmlReturn status = nvml.get_count(&count); status != 0) {
    sample.error = "nvmlDeviceGetCount_v2 failed: " + ErrorText(status);
    return sample;
  }
  for (unsigned int i = 0; i < count; i++) {
    NvmlDevice device = nullptr;
    if (nvml.get_handle(i, &device) != 0) continue;
    sample.gpus.push_back(DeviceMemory(i, device));
  }
  if (sample.gpus.empty()) {
    sample.error = count == 0 ? "NVML reports no GPUs" : "NVML could not open any of its GPUs";
    return sample;
  }
  sample.available = true;
  return sample;
}

NvmlSample SampleNvml() {
  NvmlSample sample;
  sample.error = EnsureNvml();
  if (!sample.error.empty()) return sample;
  char version[kDriverVersionSize] = {};
  if (nvml.get_driver_version != nullptr && nvml.get_driver_version(version, kDriverVersionSize) == 0) {
    sample.driver_version = version;
  }
  unsigned int count = 0;
  if (NvmlReturn status = nvml.get_count(&count); status != 0) {
    sample.error = "nvmlDeviceGetCount_v2 failed: " + ErrorText(status);
    return sample;
  }
  if (count == 0) {
    sample.error = "NVML reports no GPUs";
    return sample;
  }
  for (unsigned int i = 0; i < count; i++) {
    NvmlDevice device = nullptr;
    if (NvmlReturn status = nvml.get_handle(i, &device); status != 0) {
      // A GPU NVML cannot open (lost, or not ours to see) is left out; the others still report.
      continue;
    }
    sample.gpus.push_back(SampleDevice(i, device));
  }
  if (sample.gpus.empty()) {
    sample.error = "NVML could not open any of its " + std::to_string(count) + " GPU(s)";
    return sample;
  }
  sample.available = true;
  return sample;
}

}  // namespace galley
