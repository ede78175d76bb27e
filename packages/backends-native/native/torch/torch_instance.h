// One libtorch model instance: a TorchScript module or an AOTInductor package on its own native thread. Jobs (load, execute,
// stop) are queued from the main thread; the thread runs them one at a time and answers through a
// thread-safe function, so the event loop never waits and no C++ exception leaves the thread.
#pragma once

#include <napi.h>
#include <torch/script.h>

#include <atomic>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "torch_ready.h"
#include "torch_runner.h"
#include "torch_tensors.h"

#ifdef GALLEY_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>

#include "torch_graphs.h"
#endif

namespace galley {

/** How an instance runs its module (Triton's PyTorch backend parameters). */
struct TorchSettings {
  /** An AOTInductor package (`model.pt2`) instead of a TorchScript file. */
  bool aoti = false;
  bool cuda = false;
  int device_id = 0;
  bool inference_mode = true;
  bool optimized_execution = true;
  bool cache_cleaning = false;
  bool cudnn = true;
  /** `optimization { cuda { graphs: true } }`: capture forward as CUDA graphs (GPU only). */
  bool cuda_graphs = false;
  /** The most graphs the instance keeps (distinct input shapes). */
  size_t cuda_graph_limit = 0;
};

/**
 * Pinned host memory an instance reuses for every batch (issue 18: staging decides end-to-end
 * speed): inputs are gathered into it and copied to the device once per batch, outputs copied
 * into it and then once into memory Node owns. Fresh pinned blocks per batch, handed to Node,
 * stayed out of libtorch's host cache until collected and made it allocate more. Only the
 * instance's thread uses it, and only between a batch's start and its stream's synchronisation.
 */
class PinnedStage {
 public:
  /** Room for slices of these sizes (each 256-byte aligned), from the start. */
  void Reset(size_t bytes);
  /** The next slice of `bytes`. */
  uint8_t* Take(size_t bytes);
  /** Give back a buffer grown past what is worth keeping (one unusually large batch). */
  void Trim();
  void Release() { buffer_ = torch::Tensor(); }
  static size_t Aligned(size_t bytes) { return (bytes + 255) & ~static_cast<size_t>(255); }

 private:
  torch::Tensor buffer_;
  size_t used_ = 0;
};

struct TorchJob;
class TorchInstance;

/** Runs on the main thread with a finished job (see TorchInstance::Settle). */
void DeliverTorchJob(Napi::Env env, Napi::Function unused, TorchInstance* self, TorchJob* job);

class TorchInstance : public Napi::ObjectWrap<TorchInstance> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit TorchInstance(const Napi::CallbackInfo& info);
  ~TorchInstance() override;

  /**
   * Queue an execute of `inputs` (execute()'s first argument, parsed here on the calling thread)
   * on the instance numbered `id`, from any thread: `job` carries its own channel back. False when
   * no such instance is open (never made, or closing: calls queued before its close still run).
   */
  static bool QueueDirect(uint32_t id, Napi::Env env, const Napi::Array& inputs, std::unique_ptr<TorchJob>& job);

 private:
  friend void DeliverTorchJob(Napi::Env, Napi::Function, TorchInstance*, TorchJob*);
  using Tsfn = Napi::TypedThreadSafeFunction<TorchInstance, TorchJob, DeliverTorchJob>;
  /** Lives as long as whichever of the instance and its thread-safe function lasts longer. */
  struct Shared {
    std::atomic<bool> tsfn_alive{true};
  };

  // Main thread: the JavaScript methods.
  Napi::Value Load(const Napi::CallbackInfo& info);
  Napi::Value Execute(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  /** The instance's number, for TorchDirect calls from other threads. */
  Napi::Value Id(const Napi::CallbackInfo& info);
  /** Leave the registry, so that no other thread queues a job after this. */
  void Unregister();
  Napi::Value Enqueue(Napi::Env env, std::unique_ptr<TorchJob> job);
  /**
   * One input of execute(), checked on the calling thread (`top`: parts are allowed) against an
   * instance's settings and device (fixed once made, so read without a lock).
   */
  static InputView ParseInput(Napi::Env env, const Napi::Value& value, const std::string& where, TorchJob& job,
                              bool top, const TorchSettings& settings, const torch::Device& device);
  void Settle(Napi::Env env, TorchJob& job);

  // The instance's thread.
  void Run();
  void RunLoad(TorchJob& job);
  void RunExecute(TorchJob& job);
  void RunStop();
  /** An input as a tensor on the instance's device (staged, in place, or concatenated). */
  torch::Tensor Place(const InputView& input, TorchJob& job, std::vector<torch::Tensor>& held);
  /** Copy host bytes into the input stage and queue one copy of them to the device. */
  torch::Tensor Stage(const std::vector<const InputView*>& parts, std::vector<int64_t> shape, c10::ScalarType type,
                      TorchJob& job);
  /** Outputs on the device copied to host memory Node will own, through the output stage. */
  void ReturnToHost(std::vector<torch::Tensor>& outputs, TorchJob& job);
  /** Wait for the stream after a failed batch, so the stages are free again. */
  void Quiesce();

  TorchSettings settings_;
  torch::Device device_{torch::kCPU};
  /** The TorchScript module or AOTInductor package, once loaded. */
  std::unique_ptr<TorchRunner> runner_;
#ifdef GALLEY_TORCH_CUDA
  std::optional<c10::cuda::CUDAStream> stream_;
  std::unique_ptr<TorchGraphs> graphs_;
#endif
  PinnedStage stage_in_;
  PinnedStage stage_out_;
  /** The last deferred batch that staged inputs: the input stage is free once it fires. */
  std::shared_ptr<ReadyEvent> stage_busy_;

  Tsfn tsfn_;
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<TorchJob>> queue_;
  /** Its number in the process's registry of open instances. */
  uint32_t id_ = 0;
  // Main thread only.
  size_t pending_ = 0;
  bool stopping_ = false;
  bool joined_ = false;
};

}  // namespace galley
