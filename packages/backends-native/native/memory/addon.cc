// Entry point of the galley_native addon. Arguments are validated in TypeScript (src/binding.ts);
// blocking work runs in AsyncWorker::Execute, and JS values are built only in OnOK.
#include <napi.h>

#include "cuda_memory.h"
#include "cuda_probe.h"
#include "nvml.h"
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
    Napi::Array peer = Napi::Array::New(env, result_.peer.size());
    for (size_t a = 0; a < result_.peer.size(); a++) {
      Napi::Array row = Napi::Array::New(env, result_.peer[a].size());
      for (size_t b = 0; b < result_.peer[a].size(); b++) row.Set(static_cast<uint32_t>(b), Napi::Boolean::New(env, result_.peer[a][b]));
      peer.Set(static_cast<uint32_t>(a), row);
    }
    out.Set("peerAccess", peer);
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

Napi::Value ReadingValue(Napi::Env env, const NvmlReading& reading) {
  Napi::Object out = Napi::Object::New(env);
  if (reading.ok) {
    out.Set("value", reading.value);
  } else {
    out.Set("error", reading.error);
  }
  return out;
}

class NvmlSampleWorker : public Napi::AsyncWorker {
 public:
  explicit NvmlSampleWorker(Napi::Env env)
      : Napi::AsyncWorker(env, "galley:sampleGpus"), deferred_(Napi::Promise::Deferred::New(env)) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override { result_ = SampleNvml(); }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::Object out = Napi::Object::New(env);
    out.Set("available", result_.available);
    out.Set("error", result_.error);
    out.Set("driverVersion", result_.driver_version);
    Napi::Array gpus = Napi::Array::New(env, result_.gpus.size());
    for (size_t i = 0; i < result_.gpus.size(); i++) {
      const NvmlGpuSample& gpu = result_.gpus[i];
      Napi::Object g = Napi::Object::New(env);
      g.Set("index", gpu.index);
      g.Set("uuid", gpu.uuid);
      g.Set("name", gpu.name);
      g.Set("utilizationPercent", ReadingValue(env, gpu.utilization));
      g.Set("memoryTotalBytes", ReadingValue(env, gpu.memory_total));
      g.Set("memoryUsedBytes", ReadingValue(env, gpu.memory_used));
      g.Set("powerUsageMilliwatts", ReadingValue(env, gpu.power_usage));
      g.Set("powerLimitMilliwatts", ReadingValue(env, gpu.power_limit));
      g.Set("energyMillijoules", ReadingValue(env, gpu.energy));
      gpus.Set(static_cast<uint32_t>(i), g);
    }
    out.Set("gpus", gpus);
    deferred_.Resolve(out);
  }

  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  NvmlSample result_;
};

Napi::Value SampleGpusAsync(const Napi::CallbackInfo& info) {
  auto* worker = new NvmlSampleWorker(info.Env());
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

class NvmlMemoryWorker : public Napi::AsyncWorker {
 public:
  explicit NvmlMemoryWorker(Napi::Env env)
      : Napi::AsyncWorker(env, "galley:sampleGpuMemory"), deferred_(Napi::Promise::Deferred::New(env)) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override { result_ = SampleNvmlMemory(); }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::Object out = Napi::Object::New(env);
    out.Set("available", result_.available);
    out.Set("error", result_.error);
    Napi::Array gpus = Napi::Array::New(env, result_.gpus.size());
    for (size_t i = 0; i < result_.gpus.size(); i++) {
      const NvmlDeviceMemory& gpu = result_.gpus[i];
      Napi::Object g = Napi::Object::New(env);
      g.Set("index", gpu.index);
      g.Set("uuid", gpu.uuid);
      g.Set("freeBytes", ReadingValue(env, gpu.free));
      g.Set("totalBytes", ReadingValue(env, gpu.total));
      g.Set("usedBytes", ReadingValue(env, gpu.used));
      if (gpu.processes_ok) {
        Napi::Array processes = Napi::Array::New(env, gpu.processes.size());
        for (size_t p = 0; p < gpu.processes.size(); p++) {
          Napi::Object process = Napi::Object::New(env);
          process.Set("pid", gpu.processes[p].pid);
          if (gpu.processes[p].used_known) process.Set("usedBytes", gpu.processes[p].used);
          processes.Set(static_cast<uint32_t>(p), process);
        }
        g.Set("processes", processes);
      } else {
        g.Set("processesError", gpu.processes_error);
      }
      gpus.Set(static_cast<uint32_t>(i), g);
    }
    out.Set("gpus", gpus);
    deferred_.Resolve(out);
  }

  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  NvmlMemorySample result_;
};

Napi::Value SampleGpuMemoryAsync(const Napi::CallbackInfo& info) {
  auto* worker = new NvmlMemoryWorker(info.Env());
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace
}  // namespace galley

// NODE_API_MODULE pastes this name into an identifier, so it must be unqualified.
static Napi::Object InitGalleyNative(Napi::Env env, Napi::Object exports) {
  exports.Set("abiVersion", Napi::Number::New(env, 7));
  exports.Set("probeCuda", Napi::Function::New(env, galley::ProbeCudaAsync, "probeCuda"));
  exports.Set("mapSharedMemory", Napi::Function::New(env, galley::MapSharedMemory, "mapSharedMemory"));
  exports.Set("cudaIpcOpen", Napi::Function::New(env, galley::CudaIpcOpen, "cudaIpcOpen"));
  exports.Set("cudaAlloc", Napi::Function::New(env, galley::CudaAlloc, "cudaAlloc"));
  exports.Set("cudaExport", Napi::Function::New(env, galley::CudaExport, "cudaExport"));
  exports.Set("cudaWaitEvent", Napi::Function::New(env, galley::CudaWaitEvent, "cudaWaitEvent"));
  exports.Set("sampleGpus", Napi::Function::New(env, galley::SampleGpusAsync, "sampleGpus"));
  exports.Set("sampleGpuMemory", Napi::Function::New(env, galley::SampleGpuMemoryAsync, "sampleGpuMemory"));
  return exports;
}

NODE_API_MODULE(galley_native, InitGalleyNative)
