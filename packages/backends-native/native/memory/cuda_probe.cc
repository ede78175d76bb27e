#include "cuda_probe.h"

#include <dlfcn.h>

namespace galley {
namespace {

// The three driver entry points we need, typed as in cuda.h (CUresult is an int enum).
using CuInit = int (*)(unsigned int);
using CuDriverGetVersion = int (*)(int*);
using CuDeviceGetCount = int (*)(int*);

}  // namespace

CudaProbeResult ProbeCuda() {
  CudaProbeResult result;
  // Kept open for the life of the process: later CUDA work reuses the same handle.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    const char* reason = dlerror();
    result.error = reason != nullptr ? reason : "libcuda.so.1 could not be loaded";
    return result;
  }
  auto cu_init = reinterpret_cast<CuInit>(dlsym(driver, "cuInit"));
  auto cu_version = reinterpret_cast<CuDriverGetVersion>(dlsym(driver, "cuDriverGetVersion"));
  auto cu_count = reinterpret_cast<CuDeviceGetCount>(dlsym(driver, "cuDeviceGetCount"));
  if (cu_init == nullptr || cu_version == nullptr || cu_count == nullptr) {
    result.error = "libcuda.so.1 lacks cuInit, cuDriverGetVersion or cuDeviceGetCount";
    return result;
  }
  if (int status = cu_init(0); status != 0) {
    result.error = "cuInit failed with CUresult " + std::to_string(status);
    return result;
  }
  if (int status = cu_version(&result.driver_version); status != 0) {
    result.error = "cuDriverGetVersion failed with CUresult " + std::to_string(status);
    return result;
  }
  if (int status = cu_count(&result.device_count); status != 0) {
    result.error = "cuDeviceGetCount failed with CUresult " + std::to_string(status);
    return result;
  }
  if (result.device_count == 0) {
    result.error = "the CUDA driver reports no devices";
    return result;
  }
  result.available = true;
  return result;
}

}  // namespace galley
