// Entry point of the galley_native addon. Arguments are validated in TypeScript (src/binding.ts);
// blocking work runs in AsyncWorker::Execute, and JS values are built only in OnOK.
#include <napi.h>

#include "cuda_probe.h"
#include "shared_memory.h"

namespace galley {
namespace {

class CudaProbeWorker : public Napi::AsyncWorker {
 public:
  explicit CudaProbeWorker(Napi::Env env)
      : Napi::AsyncWorker(env, "galley:probeCuda"), deferred_(Napi::Promise::Deferred::New(env)) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override { result_ = ProbeCuda(); }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::Object out = Napi::Object::New(env);
    out.Set("available", result_.available);
    out.Set("driverVersion", result_.driver_version);
    out.Set("deviceCount", result_.device_count);
    out.Set("error", result_.error);
    deferred_.Resolve(out);
  }

  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  CudaProbeResult result_;
};

Napi::Value ProbeCudaAsync(const Napi::CallbackInfo& info) {
  auto* worker = new CudaProbeWorker(info.Env());
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace
}  // namespace galley

// NODE_API_MODULE pastes this name into an identifier, so it must be unqualified.
static Napi::Object InitGalleyNative(Napi::Env env, Napi::Object exports) {
  exports.Set("abiVersion", Napi::Number::New(env, 2));
  exports.Set("probeCuda", Napi::Function::New(env, galley::ProbeCudaAsync, "probeCuda"));
  exports.Set("mapSharedMemory", Napi::Function::New(env, galley::MapSharedMemory, "mapSharedMemory"));
  return exports;
}

NODE_API_MODULE(galley_native, InitGalleyNative)
