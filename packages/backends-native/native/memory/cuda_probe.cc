#include "cuda_probe.h"

#include <dlfcn.h>

namespace galley {
namespace {

// The three driver entry points we need, typed as in cuda.h (CUresult is an int enum).
using CuInit = int (*)(unsigned int);
using CuDriverGetVersion = int (*)(int*);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceCanAccessPeer = int (*)(int*, int, int);

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
  // Which pairs of GPUs reach each other's memory directly (left unknown, all false, where the
  // driver lacks the entry points: copies between GPUs still run, staged by the driver).
  auto cu_get = reinterpret_cast<CuDeviceGet>(dlsym(driver, "cuDeviceGet"));
  auto cu_peer = reinterpret_cast<CuDeviceCanAccessPeer>(dlsym(driver, "cuDeviceCanAccessPeer"));
  int n = result.device_count;
  result.peer.assign(static_cast<size_t>(n), std::vector<bool>(static_cast<size_t>(n), false));
  for (int a = 0; a < n; a++) {
    result.peer[a][a] = true;
    for (int b = 0; b < n; b++) {
      int da = 0, db = 0, can = 0;
      if (a != b && cu_get != nullptr && cu_peer != nullptr && cu_get(&da, a) == 0 && cu_get(&db, b) == 0 &&
          cu_peer(&can, da, db) == 0) {
        result.peer[a][b] = can != 0;
      }
    }
  }
  return result;
}

}  // namespace galley
