// Reads GPU utilisation, memory, power and energy through NVML, loaded at run time
// (dlopen of libnvidia-ml.so.1; no NVML headers, nothing linked): the addon loads on machines
// without a GPU, and a GPU machine needs only its driver. Each reading of each GPU may fail on
// its own (a card without power readings): the failure is reported for that field alone.
#pragma once

#include <string>
#include <vector>

namespace galley {

// One reading: `ok` with its value, or the reason it failed (nvmlErrorString's text).
struct NvmlReading {
  bool ok = false;
  double value = 0;
  std::string error;
};

struct NvmlGpuSample {
  unsigned int index = 0;
  std::string uuid;  // "GPU-xxxxxxxx-...", as nvidia-smi and Triton's gpu_uuid label print it
  std::string name;  // e.g. "NVIDIA H200"; empty if NVML could not say
  NvmlReading utilization;   // percent, 0-100 (NVML's last sample period)
  NvmlReading memory_total;  // bytes
  NvmlReading memory_used;   // bytes
  NvmlReading power_usage;   // milliwatts
  NvmlReading power_limit;   // milliwatts (power management limit, else the enforced limit)
  NvmlReading energy;        // millijoules since the driver was last loaded
};

struct NvmlSample {
  bool available = false;
  std::string error;  // why NVML is unavailable; empty when available
  std::string driver_version;  // empty if NVML could not say
  std::vector<NvmlGpuSample> gpus;
};

// One process' memory on a GPU (nvmlDeviceGetComputeRunningProcesses_v3, else _v2).
struct NvmlProcessMemory {
  unsigned int pid = 0;  // in the driver's PID namespace (a container's own PIDs may differ)
  bool used_known = false;  // false where NVML cannot say (NVML_VALUE_NOT_AVAILABLE)
  double used = 0;  // bytes
};

// One GPU's memory: free and total (nvmlDeviceGetMemoryInfo), and per compute process.
struct NvmlDeviceMemory {
  unsigned int index = 0;
  std::string uuid;
  NvmlReading free;   // bytes
  NvmlReading total;  // bytes
  NvmlReading used;   // bytes
  bool processes_ok = false;
  std::string processes_error;  // why the process list is missing
  std::vector<NvmlProcessMemory> processes;
};

struct NvmlMemorySample {
  bool available = false;
  std::string error;
  std::vector<NvmlDeviceMemory> gpus;
};

// Blocking, thread-safe, as SampleNvml; never throws.
NvmlMemorySample SampleNvmlMemory();

// Blocking (nvmlInit can take hundreds of milliseconds): call it off the JS thread. Thread-safe.
// The library stays loaded and initialised for the life of the process once nvmlInit succeeds.
// GALLEY_NVML_LIBRARY, when set, names the library to load instead of libnvidia-ml.so.1.
NvmlSample SampleNvml();

}  // namespace galley
