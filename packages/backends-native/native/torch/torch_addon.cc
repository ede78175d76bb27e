// Entry point of the galley_torch addon: Galley's PyTorch (libtorch) backend. Built only where
// libtorch is found (native/torch_find.cjs); loaded lazily by src/torch.ts.
#include <napi.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/version.h>

#include <cstdlib>

#include "torch_device_tensor.h"
#include "torch_direct.h"
#include "torch_instance.h"
#include "torch_runner.h"

namespace {

Napi::Value CudaDeviceCount(const Napi::CallbackInfo& info) {
  try {
    return Napi::Number::New(info.Env(), static_cast<double>(torch::cuda::device_count()));
  } catch (const std::exception&) {
    return Napi::Number::New(info.Env(), 0);
  }
}

}  // namespace

static Napi::Object InitGalleyTorch(Napi::Env env, Napi::Object exports) {
  exports.Set("abiVersion", Napi::Number::New(env, 5));
  // AOTInductor packages check each input's datatype, sizes (within the export's dynamic ranges)
  // and strides only when this is set, read once per package at its first run: without it a
  // request of a shape the export does not allow reads past its tensors. "0" turns it off.
  setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", /*overwrite=*/0);
  exports.Set("aotiCompiled", Napi::Boolean::New(env, galley::AotiCompiled()));
  exports.Set("torchVersion", Napi::String::New(env, TORCH_VERSION));
#ifdef GALLEY_TORCH_CUDA
  exports.Set("cudaCompiled", Napi::Boolean::New(env, true));
#else
  exports.Set("cudaCompiled", Napi::Boolean::New(env, false));
#endif
  exports.Set("cudaDeviceCount", Napi::Function::New(env, CudaDeviceCount, "cudaDeviceCount"));
  // Defined for the handles execute() returns; not constructible from JavaScript.
  galley::TorchDeviceTensor::Define(env);
  exports.Set("TorchInstance", galley::TorchInstance::Define(env));
  exports.Set("TorchDirect", galley::TorchDirect::Define(env));
  return exports;
}

NODE_API_MODULE(galley_torch, InitGalleyTorch)
