// Execute calls on a libtorch instance from a thread other than the one that made it (a scripted
// model's worker calling a PyTorch model without the main thread): the job runs on the instance's
// thread, queued with its other work, and its answer comes back to the calling thread.
#pragma once

#include <napi.h>

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>

namespace galley {

struct TorchJob;
struct DirectChannel;

/** Runs on the calling thread with a finished job (see DirectChannel). */
void DeliverDirectJob(Napi::Env env, Napi::Function unused, DirectChannel* channel, TorchJob* job);

/**
 * The way back to one thread's environment, shared by its TorchDirect and the jobs in flight. The
 * environment's cleanup waits until no job of it is on an instance's thread any more (a job reads
 * the calling thread's bytes while it runs), and after that answers are dropped.
 */
struct DirectChannel {
  using Tsfn = Napi::TypedThreadSafeFunction<DirectChannel, TorchJob, DeliverDirectJob>;

  /** From an instance's thread: hand the finished job to the calling thread, or drop it. */
  void Deliver(TorchJob* job);
  /** The environment's cleanup: wait for the jobs still running, then take no more answers. */
  void Close();

  Tsfn tsfn;
  std::mutex mutex;
  std::condition_variable idle;
  /** Jobs queued on an instance and not yet handed back (any thread, under `mutex`). */
  size_t running = 0;
  /** False once the environment is going away or the thread-safe function is finalized. */
  bool open = true;
  // The calling thread only: calls not yet answered, and the object that made them, kept alive
  // (not collected) while there are any.
  size_t pending = 0;
  Napi::ObjectWrap<class TorchDirect>* owner = nullptr;
};

/** `new TorchDirect()`: one per thread; `execute(id, inputs, options)` as TorchInstance's. */
class TorchDirect : public Napi::ObjectWrap<TorchDirect> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit TorchDirect(const Napi::CallbackInfo& info);
  ~TorchDirect() override;

 private:
  friend void DeliverDirectJob(Napi::Env, Napi::Function, DirectChannel*, TorchJob*);
  Napi::Value Execute(const Napi::CallbackInfo& info);

  std::shared_ptr<DirectChannel> channel_;
};

}  // namespace galley
