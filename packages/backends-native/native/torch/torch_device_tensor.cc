#include "torch_device_tensor.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "torch_tensors.h"

#ifdef GALLEY_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace galley {

namespace {

/**
 * Runs `work` on libuv's pool with the tensor's device current and a stream of the pool, waits for
 * that stream, and settles a promise. The tensor was made on an instance's stream that the
 * instance synchronised before handing it out, or that records `ready` after the work writing it:
 * the pool's stream waits for that first. No exception leaves Execute: libtorch's become the
 * rejection's message.
 */
class TensorWorker : public Napi::AsyncWorker {
 public:
  TensorWorker(Napi::Env env, torch::Tensor tensor, std::shared_ptr<ReadyEvent> ready)
      : Napi::AsyncWorker(env, "galley:torch-tensor"),
        tensor_(std::move(tensor)),
        ready_(std::move(ready)),
        deferred_(env) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  virtual void Work() = 0;

  void Execute() override {
    try {
#ifdef GALLEY_TORCH_CUDA
      std::optional<c10::cuda::CUDAStreamGuard> on_stream;
      std::optional<c10::cuda::CUDAStream> stream;
      if (tensor_.is_cuda()) {
        stream = c10::cuda::getStreamFromPool(false, tensor_.device().index());
        on_stream.emplace(*stream);
        if (ready_) WaitReady(*ready_, stream->stream());
      }
#endif
      Work();
#ifdef GALLEY_TORCH_CUDA
      if (stream) stream->synchronize();
#endif
    } catch (const std::exception& error) {
      SetError(Describe(error));
    } catch (...) {
      SetError("unknown error in libtorch");
    }
  }

  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

  torch::Tensor tensor_;
  std::shared_ptr<ReadyEvent> ready_;
  Napi::Promise::Deferred deferred_;
};

/** whenReady(): the host waits (off the event loop) for the event the tensor's bytes are complete after. */
class ReadyWorker : public Napi::AsyncWorker {
 public:
  ReadyWorker(Napi::Env env, std::shared_ptr<ReadyEvent> ready)
      : Napi::AsyncWorker(env, "galley:torch-ready"), ready_(std::move(ready)), deferred_(env) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
#ifdef GALLEY_TORCH_CUDA
    if (!ready_) return;
    cudaError_t status = cudaEventSynchronize(ready_->event);
    if (status != cudaSuccess) {
      cudaGetLastError();
      SetError(std::string("cudaEventSynchronize failed: ") + cudaGetErrorString(status));
    }
#endif
  }
  void OnOK() override { deferred_.Resolve(Env().Undefined()); }
  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

 private:
  std::shared_ptr<ReadyEvent> ready_;
  Napi::Promise::Deferred deferred_;
};

/** toHost(): one device-to-host copy into pinned memory that becomes the ArrayBuffer's. */
class ToHostWorker : public TensorWorker {
 public:
  using TensorWorker::TensorWorker;

 protected:
  void Work() override {
    torch::Tensor source = tensor_.contiguous();
    host_ = torch::empty(source.sizes(),
                         source.options().device(torch::kCPU).pinned_memory(source.is_cuda()));
    host_.copy_(source, /*non_blocking=*/true);
  }

  void OnOK() override { deferred_.Resolve(OwnedBytes(Env(), host_)); }

 private:
  torch::Tensor host_;
};

/**
 * copyTo(pointer, byteLength, deviceId?): one device-to-device copy into memory at `pointer` on the
 * tensor's GPU, or on GPU `deviceId` (libtorch's copy between devices: direct where the GPUs are
 * peers, staged by the driver otherwise; never through host memory this process sees).
 */
class CopyToWorker : public TensorWorker {
 public:
  CopyToWorker(Napi::Env env, torch::Tensor tensor, std::shared_ptr<ReadyEvent> ready, uintptr_t pointer, int device)
      : TensorWorker(env, std::move(tensor), std::move(ready)), pointer_(pointer), device_(device) {}

 protected:
  void Work() override {
    torch::Tensor source = tensor_.contiguous().view({-1}).view(torch::kUInt8);
    auto options = source.options().dtype(torch::kUInt8);
    if (device_ >= 0) options = options.device(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device_)));
    torch::Tensor target = torch::from_blob(reinterpret_cast<void*>(pointer_), {source.numel()}, options);
    target.copy_(source, /*non_blocking=*/true);
#ifdef GALLEY_TORCH_CUDA
    // The copy was queued on the target device's current stream too: wait for it there.
    if (device_ >= 0 && device_ != source.device().index()) {
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).synchronize();
    }
#endif
  }

  void OnOK() override { deferred_.Resolve(Env().Undefined()); }

 private:
  uintptr_t pointer_;
  int device_;
};

}  // namespace

Napi::Function TorchDeviceTensor::Define(Napi::Env env) {
  Napi::Function cls = DefineClass(env, "TorchDeviceTensor",
                                   {
                                       InstanceAccessor<&TorchDeviceTensor::DeviceId>("deviceId"),
                                       InstanceAccessor<&TorchDeviceTensor::ByteSize>("byteSize"),
                                       InstanceAccessor<&TorchDeviceTensor::Pointer>("pointer"),
                                       InstanceAccessor<&TorchDeviceTensor::Datatype>("datatype"),
                                       InstanceAccessor<&TorchDeviceTensor::Shape>("shape"),
                                       InstanceAccessor<&TorchDeviceTensor::Disposed>("disposed"),
                                       InstanceAccessor<&TorchDeviceTensor::ReadyEventHandle>("readyEvent"),
                                       InstanceMethod<&TorchDeviceTensor::WhenReady>("whenReady"),
                                       InstanceMethod<&TorchDeviceTensor::Narrow>("narrow"),
                                       InstanceMethod<&TorchDeviceTensor::ToHost>("toHost"),
                                       InstanceMethod<&TorchDeviceTensor::CopyTo>("copyTo"),
                                       InstanceMethod<&TorchDeviceTensor::Dispose>("dispose"),
                                   });
  auto* data = env.GetInstanceData<TorchAddonData>();
  if (data == nullptr) {
    data = new TorchAddonData();
    env.SetInstanceData(data);
  }
  data->device_tensor = Napi::Persistent(cls);
  return cls;
}

Napi::Object TorchDeviceTensor::Wrap(Napi::Env env, const torch::Tensor& tensor, std::shared_ptr<ReadyEvent> ready) {
  auto* data = env.GetInstanceData<TorchAddonData>();
  auto* held = new KeptTensor{tensor, std::move(ready)};
  Napi::External<KeptTensor> external = Napi::External<KeptTensor>::New(env, held);
  try {
    return data->device_tensor.New({external});
  } catch (...) {
    delete held;
    throw;
  }
}

std::optional<KeptTensor> TorchDeviceTensor::From(Napi::Env env, const Napi::Value& value, std::string* why) {
  auto* data = env.GetInstanceData<TorchAddonData>();
  if (!value.IsObject() || data == nullptr || !value.As<Napi::Object>().InstanceOf(data->device_tensor.Value())) {
    *why = "is not a device tensor of this addon";
    return std::nullopt;
  }
  TorchDeviceTensor* self = Unwrap(value.As<Napi::Object>());
  if (self == nullptr || !self->tensor_.defined()) {
    *why = "is a disposed device tensor";
    return std::nullopt;
  }
  return KeptTensor{self->tensor_, self->ready_};
}

TorchDeviceTensor::TorchDeviceTensor(const Napi::CallbackInfo& info) : Napi::ObjectWrap<TorchDeviceTensor>(info) {
  // Only Wrap makes these: JavaScript cannot construct one over memory of its choosing.
  if (info.Length() != 1 || !info[0].IsExternal()) {
    throw Napi::TypeError::New(info.Env(), "TorchDeviceTensor is made by the addon, not constructed");
  }
  KeptTensor* held = info[0].As<Napi::External<KeptTensor>>().Data();
  tensor_ = std::move(held->tensor);
  ready_ = std::move(held->ready);
  delete held;
}

const torch::Tensor& TorchDeviceTensor::Live(Napi::Env env) const {
  if (!tensor_.defined()) throw Napi::Error::New(env, "the device tensor was disposed");
  return tensor_;
}

Napi::Value TorchDeviceTensor::DeviceId(const Napi::CallbackInfo& info) {
  if (!tensor_.defined()) return Napi::Number::New(info.Env(), -1);
  return Napi::Number::New(info.Env(), tensor_.is_cuda() ? tensor_.device().index() : -1);
}

Napi::Value TorchDeviceTensor::ByteSize(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), tensor_.defined() ? static_cast<double>(tensor_.nbytes()) : 0);
}

// The device address of a contiguous CUDA tensor (another process maps its allocation by CUDA
// IPC), null otherwise (host tensors, strided views, disposed handles).
Napi::Value TorchDeviceTensor::Pointer(const Napi::CallbackInfo& info) {
  if (!tensor_.defined() || !tensor_.is_cuda() || !tensor_.is_contiguous()) return info.Env().Null();
  return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(tensor_.data_ptr())));
}

Napi::Value TorchDeviceTensor::Datatype(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), tensor_.defined() ? ProtocolType(tensor_.scalar_type()) : "");
}

Napi::Value TorchDeviceTensor::Shape(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!tensor_.defined()) return Napi::Array::New(env, 0);
  Napi::Array shape = Napi::Array::New(env, tensor_.dim());
  for (int64_t d = 0; d < tensor_.dim(); d++) shape.Set(d, Napi::Number::New(env, tensor_.size(d)));
  return shape;
}

Napi::Value TorchDeviceTensor::Disposed(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), !tensor_.defined());
}

Napi::Value TorchDeviceTensor::ReadyEventHandle(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!tensor_.defined() || !ready_) return env.Null();
  std::string handle = ReadyHandle(*ready_);
  if (handle.empty()) return env.Null();
  Napi::Uint8Array bytes = Napi::Uint8Array::New(env, handle.size());
  std::memcpy(bytes.Data(), handle.data(), handle.size());
  return bytes;
}

Napi::Value TorchDeviceTensor::WhenReady(const Napi::CallbackInfo& info) {
  auto* worker = new ReadyWorker(info.Env(), ready_);
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value TorchDeviceTensor::Narrow(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const torch::Tensor& tensor = Live(env);
  if (!info[0].IsNumber() || !info[1].IsNumber()) throw Napi::TypeError::New(env, "narrow(start, length): numbers");
  double start = info[0].As<Napi::Number>().DoubleValue();
  double length = info[1].As<Napi::Number>().DoubleValue();
  double rows = tensor.dim() > 0 ? static_cast<double>(tensor.size(0)) : 0;
  if (tensor.dim() == 0 || !(start >= 0) || !(length >= 0) || start != static_cast<int64_t>(start) ||
      length != static_cast<int64_t>(length) || start + length > rows) {
    throw Napi::RangeError::New(env, "narrow(start, length): rows out of range");
  }
  // A view of the rows: it shares (and keeps) the storage; no copy.
  return Wrap(env, tensor.narrow(0, static_cast<int64_t>(start), static_cast<int64_t>(length)), ready_);
}

Napi::Value TorchDeviceTensor::ToHost(const Napi::CallbackInfo& info) {
  auto* worker = new ToHostWorker(info.Env(), Live(info.Env()), ready_);
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value TorchDeviceTensor::CopyTo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const torch::Tensor& tensor = Live(env);
  if (!tensor.is_cuda()) throw Napi::TypeError::New(env, "copyTo: the tensor is not on a GPU");
  if (!info[0].IsBigInt() || !info[1].IsNumber()) {
    throw Napi::TypeError::New(env, "copyTo(pointer, byteLength): a bigint address and a number");
  }
  bool lossless = false;
  uint64_t pointer = info[0].As<Napi::BigInt>().Uint64Value(&lossless);
  double length = info[1].As<Napi::Number>().DoubleValue();
  if (!lossless || pointer == 0) throw Napi::RangeError::New(env, "copyTo: not a device address");
  int device = -1;
  if (info.Length() > 2 && !info[2].IsUndefined()) {
    double id = info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : -1;
    if (!(id >= 0 && id <= 0x7fff) || id != static_cast<double>(static_cast<int>(id))) {
      throw Napi::RangeError::New(env, "copyTo: deviceId must be a CUDA ordinal");
    }
    device = static_cast<int>(id);
  }
  // The caller checked the range against its region; the tensor must fit in it.
  if (!(length >= static_cast<double>(tensor.nbytes()))) {
    throw Napi::RangeError::New(env, "copyTo: " + std::to_string(tensor.nbytes()) + " bytes do not fit in " +
                                         std::to_string(static_cast<int64_t>(length)));
  }
  auto* worker = new CopyToWorker(env, tensor, ready_, static_cast<uintptr_t>(pointer), device);
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value TorchDeviceTensor::Dispose(const Napi::CallbackInfo& info) {
  // Copies still running hold their own reference; the memory is freed when the last one ends.
  tensor_ = torch::Tensor();
  ready_.reset();
  return info.Env().Undefined();
}

}  // namespace galley
