// Entry point of the galley_torch addon: Galley's PyTorch (libtorch) backend. Built only where
// libtorch is found (native/torch_find.cjs); loaded lazily by src/torch.ts.
#include <napi.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/version.h>

#include <cstdlib>
#include <string>

#ifdef GALLEY_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

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

// The caching allocator's figures for one GPU: {allocatedBytes, reservedBytes, peakAllocatedBytes},
// or null where libtorch has no CUDA or no such GPU. A mutex and a copy: cheap on the JS thread.
Napi::Value CudaMemoryStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "cudaMemoryStats(device: number)");
#ifdef GALLEY_TORCH_CUDA
  int device = info[0].As<Napi::Number>().Int32Value();
  try {
    if (device < 0 || device >= static_cast<int>(torch::cuda::device_count())) return env.Null();
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    Napi::Object out = Napi::Object::New(env);
    // Index 0 is the aggregate of every pool (StatType::AGGREGATE).
    out.Set("allocatedBytes", static_cast<double>(stats.allocated_bytes[0].current));
    out.Set("reservedBytes", static_cast<double>(stats.reserved_bytes[0].current));
    out.Set("peakAllocatedBytes", static_cast<double>(stats.allocated_bytes[0].peak));
    return out;
  } catch (const std::exception& error) {
    throw Napi::Error::New(env, std::string("cudaMemoryStats: ") + error.what());
  }
#else
  return env.Null();
#endif
}

// Gives the caching allocator's unused blocks back to the driver (cudaFree synchronises): off-thread.
class EmptyCacheWorker : public Napi::AsyncWorker {
 public:
  explicit EmptyCacheWorker(Napi::Env env)
      : Napi::AsyncWorker(env, "galley:cudaEmptyCache"), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
#ifdef GALLEY_TORCH_CUDA
    try {
      c10::cuda::CUDACachingAllocator::emptyCache();
    } catch (const std::exception& error) {
      SetError(std::string("cudaEmptyCache: ") + error.what());
    } catch (...) {
      SetError("cudaEmptyCache: unknown error");
    }
#endif
  }
  void OnOK() override { deferred_.Resolve(Env().Undefined()); }
  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
};

Napi::Value CudaEmptyCache(const Napi::CallbackInfo& info) {
  auto* worker = new EmptyCacheWorker(info.Env());
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace

static Napi::Object InitGalleyTorch(Napi::Env env, Napi::Object exports) {
  exports.Set("abiVersion", Napi::Number::New(env, 8));
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
  exports.Set("cudaMemoryStats", Napi::Function::New(env, CudaMemoryStats, "cudaMemoryStats"));
  exports.Set("cudaEmptyCache", Napi::Function::New(env, CudaEmptyCache, "cudaEmptyCache"));
  // Defined for the handles execute() returns; not constructible from JavaScript.
  galley::TorchDeviceTensor::Define(env);
  exports.Set("TorchInstance", galley::TorchInstance::Define(env));
  exports.Set("TorchDirect", galley::TorchDirect::Define(env));
  return exports;
}

NODE_API_MODULE(galley_torch, InitGalleyTorch)
