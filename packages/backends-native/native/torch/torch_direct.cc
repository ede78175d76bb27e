#include "torch_direct.h"

#include <string>
#include <utility>

#include "torch_instance.h"
#include "torch_job.h"

namespace galley {

namespace {

/** A job whose caller is gone: its references belong to a dead environment. */
void Drop(TorchJob* job) {
  for (auto& ref : job->keep) ref.SuppressDestruct();
  delete job;
}

}  // namespace

void DirectChannel::Deliver(TorchJob* job) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!open || tsfn.NonBlockingCall(job) != napi_ok) Drop(job);
  if (--running == 0) idle.notify_all();
}

void DirectChannel::Close() {
  std::unique_lock<std::mutex> lock(mutex);
  idle.wait(lock, [this] { return running == 0; });
  open = false;
}

void DeliverDirectJob(Napi::Env env, Napi::Function, DirectChannel* channel, TorchJob* raw) {
  if (env == nullptr) {
    Drop(raw);
    return;
  }
  std::unique_ptr<TorchJob> job(raw);
  Napi::HandleScope scope(env);
  job->keep.clear();
  if (!job->error.empty()) {
    job->deferred->Reject(Napi::Error::New(env, job->error).Value());
  } else {
    job->deferred->Resolve(ExecutionResult(env, *job));
  }
  if (--channel->pending == 0) {
    channel->tsfn.Unref(env);
    channel->owner->Unref();
  }
}

Napi::Function TorchDirect::Define(Napi::Env env) {
  return DefineClass(env, "TorchDirect", {InstanceMethod<&TorchDirect::Execute>("execute")});
}

TorchDirect::TorchDirect(const Napi::CallbackInfo& info) : Napi::ObjectWrap<TorchDirect>(info) {
  Napi::Env env = info.Env();
  channel_ = std::make_shared<DirectChannel>();
  channel_->owner = this;
  auto* finalizer_data = new std::shared_ptr<DirectChannel>(channel_);
  channel_->tsfn = DirectChannel::Tsfn::New(env, "galley:torch-direct", 0, 1, channel_.get(),
                                            [](Napi::Env, std::shared_ptr<DirectChannel>* channel, DirectChannel*) {
                                              {
                                                std::lock_guard<std::mutex> lock((*channel)->mutex);
                                                (*channel)->open = false;
                                              }
                                              delete channel;
                                            },
                                            finalizer_data);
  channel_->tsfn.Unref(env);
  // Added after the thread-safe function, so run before its own cleanup (hooks run newest first):
  // a worker that ends while its call runs waits for that call, whose inputs are its bytes.
  auto* hook_data = new std::shared_ptr<DirectChannel>(channel_);
  napi_add_env_cleanup_hook(
      env,
      [](void* data) {
        auto* channel = static_cast<std::shared_ptr<DirectChannel>*>(data);
        (*channel)->Close();
        delete channel;
      },
      hook_data);
}

TorchDirect::~TorchDirect() {
  // Collected: nothing is pending (a pending call keeps this object alive). At the environment's
  // end the thread-safe function may be gone already; `open` says whether it is not.
  std::lock_guard<std::mutex> lock(channel_->mutex);
  if (channel_->open) {
    channel_->open = false;
    channel_->tsfn.Release();
  }
}

Napi::Value TorchDirect::Execute(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  double id = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : -1;
  if (!(id >= 1 && id <= 4294967295.0) || static_cast<double>(static_cast<uint32_t>(id)) != id) {
    throw Napi::TypeError::New(env, "execute(id, inputs): id must be a libtorch instance's id");
  }
  if (!info[1].IsArray()) throw Napi::TypeError::New(env, "execute(id, inputs): inputs must be an array");
  auto deferred = Napi::Promise::Deferred::New(env);
  Napi::Promise promise = deferred.Promise();
  auto job = std::make_unique<TorchJob>(JobKind::kExecute, std::move(deferred));
  // Kept outputs (`resident`) become handles of this thread's environment, as the instance's own
  // do of the main thread's; `defer` answers a GPU batch whose outputs all stay once it is queued.
  ParseExecuteOptions(env, info[2], *job);
  job->channel = channel_;
  {
    std::lock_guard<std::mutex> lock(channel_->mutex);
    if (!channel_->open) throw Napi::Error::New(env, "the libtorch instance is closed");
    channel_->running++;
  }
  bool ok = false;
  try {
    ok = TorchInstance::QueueDirect(static_cast<uint32_t>(id), env, info[1].As<Napi::Array>(), job);
  } catch (...) {
    std::lock_guard<std::mutex> lock(channel_->mutex);
    channel_->running--;
    throw;
  }
  if (!ok) {
    {
      std::lock_guard<std::mutex> lock(channel_->mutex);
      channel_->running--;
    }
    Napi::Error error = Napi::Error::New(env, "the libtorch instance is closed");
    error.Set("code", "TORCH_INSTANCE_CLOSED");
    job->deferred->Reject(error.Value());
    return promise;
  }
  if (channel_->pending++ == 0) {
    channel_->tsfn.Ref(env);
    Ref();
  }
  return promise;
}

}  // namespace galley
