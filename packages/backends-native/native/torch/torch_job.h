// One job for a libtorch instance's thread (load, execute, stop), and what it hands back.
#pragma once

#include <napi.h>
#include <torch/script.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "torch_instance.h"
#include "torch_ready.h"
#include "torch_tensors.h"

namespace galley {

struct DirectChannel;

enum class JobKind { kLoad, kExecute, kStop };

struct TorchJob {
  TorchJob(JobKind kind, std::optional<Napi::Promise::Deferred> deferred) : kind(kind), deferred(std::move(deferred)) {}

  JobKind kind;
  /** Absent for the stop a collected instance sends itself: nobody waits for it. */
  std::optional<Napi::Promise::Deferred> deferred;
  // In.
  std::string path;
  std::vector<InputView> inputs;
  /** The typed arrays under `inputs`, alive until the job is settled (main thread). */
  std::vector<Napi::Reference<Napi::Uint8Array>> keep;
  // Out.
  std::string error;
  /** What a load found: the format, forward's signature or the package's call spec and metadata. */
  RunnerInfo loaded;
  std::vector<torch::Tensor> outputs;
  int64_t infer_ns = 0;
  /** On a GPU: the caching allocator's peak across the job less what was allocated before it (the
   *  batch's working memory, inputs and outputs included); -1 where unknown. Approximate when other
   *  instances run on the same GPU at the same time (the peak is the device's). */
  int64_t peak_bytes = -1;
  /** Outputs (by position) to keep where the model made them, as TorchDeviceTensor handles. */
  std::vector<bool> resident;
  /** Memory the job borrows (Node's bytes, client device memory): an output inside it is copied. */
  std::vector<std::pair<uintptr_t, size_t>> borrowed;
  /** Bytes copied host→device (inputs staged) and device→host (outputs returned), for accounting. */
  int64_t host_to_device = 0;
  int64_t device_to_host = 0;
  /** In: the batch may run as a CUDA graph. Out: "captured", "replayed" or "" (eager), and why a
   *  capture failed. */
  bool graph = false;
  /**
   * In: the batch may be answered once its work is queued (deferred completion) when every output
   * stays on the device. Out: then the event recorded after that work, which every reader of the
   * outputs waits for (none: the stream was synchronised).
   */
  bool defer = false;
  std::shared_ptr<ReadyEvent> ready;
  std::string graph_state;
  std::string graph_error;
  /** Set for an execute queued by a TorchDirect of another thread: the answer goes there. */
  std::shared_ptr<DirectChannel> channel;
};

/** What execute() resolves with, for a finished execute job (on the thread of `env`). */
Napi::Object ExecutionResult(Napi::Env env, TorchJob& job);

/**
 * execute()'s options (`graph`, `defer`, `resident` output positions) into `job`; anything but an
 * object leaves the defaults. Throws a RangeError for a position that is not a small whole number.
 */
void ParseExecuteOptions(Napi::Env env, const Napi::Value& options, TorchJob& job);

}  // namespace galley
