// Finds the CUDA driver at run time. Nothing links against CUDA: the addon loads on machines
// without a GPU, and a GPU machine needs only its driver (libcuda.so.1), never a download.
#pragma once

#include <string>
#include <vector>

namespace galley {

struct CudaProbeResult {
  bool available = false;
  int driver_version = 0;  // e.g. 13000 for CUDA 13.0
  int device_count = 0;
  std::string error;       // why CUDA is unavailable; empty when available
  // peer[a][b]: device a can access device b's memory directly (cuDeviceCanAccessPeer; true for
  // a == b). Copies between two GPUs without it still run, staged through host memory by the driver.
  std::vector<std::vector<bool>> peer;
};

// Blocking (cuInit can take hundreds of milliseconds): call it off the JS thread.
CudaProbeResult ProbeCuda();

}  // namespace galley
