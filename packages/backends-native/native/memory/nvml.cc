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

}  // namespace

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
