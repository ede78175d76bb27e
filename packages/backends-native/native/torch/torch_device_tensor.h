// A libtorch tensor kept by the addon instead of being copied into Node's memory: an output left
// on its GPU for the next model on that GPU (an ensemble step), handed back to an instance as an
// input without a device→host→device round trip. JavaScript holds it as an opaque handle; its
// memory goes back to libtorch's caching allocator on dispose() (or when the handle is collected).
#pragma once

#include <napi.h>
#include <torch/script.h>

#include <memory>
#include <optional>
#include <string>

#include "torch_ready.h"

namespace galley {

/** A kept tensor and, when its batch was answered before its work ended, the event that ends it. */
struct KeptTensor {
  torch::Tensor tensor;
  std::shared_ptr<ReadyEvent> ready;
};

/** Per-environment state of the torch addon: the handle class, to make handles from C++. */
struct TorchAddonData {
  Napi::FunctionReference device_tensor;
};

class TorchDeviceTensor : public Napi::ObjectWrap<TorchDeviceTensor> {
 public:
  static Napi::Function Define(Napi::Env env);
  /**
   * A handle holding `tensor` (one more reference to its storage) and `ready`, the event after
   * which its bytes are complete (none: complete now). On the thread of `env` (the instance's
   * owner, or a direct caller's: `TorchDirect`).
   */
  static Napi::Object Wrap(Napi::Env env, const torch::Tensor& tensor, std::shared_ptr<ReadyEvent> ready = nullptr);
  /** The tensor behind `value`, or nullopt when it is not a live handle of this addon. */
  static std::optional<KeptTensor> From(Napi::Env env, const Napi::Value& value, std::string* why);

  explicit TorchDeviceTensor(const Napi::CallbackInfo& info);

 private:
  Napi::Value DeviceId(const Napi::CallbackInfo& info);
  Napi::Value ByteSize(const Napi::CallbackInfo& info);
  Napi::Value Pointer(const Napi::CallbackInfo& info);
  Napi::Value Datatype(const Napi::CallbackInfo& info);
  Napi::Value Shape(const Napi::CallbackInfo& info);
  Napi::Value Disposed(const Napi::CallbackInfo& info);
  /** The IPC handle of the event its bytes are complete after (a Uint8Array), or null. */
  Napi::Value ReadyEventHandle(const Napi::CallbackInfo& info);
  /** A promise settled once its bytes are complete (off the event loop). */
  Napi::Value WhenReady(const Napi::CallbackInfo& info);
  Napi::Value Narrow(const Napi::CallbackInfo& info);
  Napi::Value ToHost(const Napi::CallbackInfo& info);
  Napi::Value CopyTo(const Napi::CallbackInfo& info);
  Napi::Value Dispose(const Napi::CallbackInfo& info);
  const torch::Tensor& Live(Napi::Env env) const;

  /** Undefined once disposed. */
  torch::Tensor tensor_;
  std::shared_ptr<ReadyEvent> ready_;
};

}  // namespace galley
