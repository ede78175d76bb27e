#include "torch_instance.h"

#include <malloc.h>
#include <pthread.h>
#include <torch/cuda.h>

#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "torch_device_tensor.h"
#include "torch_direct.h"
#include "torch_job.h"

#ifdef GALLEY_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace galley {

namespace {

bool Flag(const Napi::Object& options, const char* key, bool fallback) {
  Napi::Value value = options.Get(key);
  return value.IsBoolean() ? value.As<Napi::Boolean>().Value() : fallback;
}

/**
 * Whether the tensor's bytes lie in memory the job borrowed (a model that returns an input as it
 * is). Host and device addresses do not collide: CUDA's unified addressing keeps them apart.
 */
bool Overlaps(const torch::Tensor& tensor, const std::vector<std::pair<uintptr_t, size_t>>& borrowed) {
  auto begin = reinterpret_cast<uintptr_t>(tensor.data_ptr());
  auto end = begin + tensor.nbytes();
  for (const auto& [from, length] : borrowed) {
    if (begin < from + length && from < end) return true;
  }
  return false;
}

/** Whether an input is host bytes (not on a device, not parts). */
bool IsHost(const InputView& input) {
  return input.parts.empty() && !input.resident && input.device_pointer == 0;
}

/** Input stage bytes a batch needs: its host inputs, and parts that are all host bytes. */
size_t StagedBytes(const InputView& input) {
  if (IsHost(input)) return PinnedStage::Aligned(input.byte_length);
  if (!input.parts.empty()) {
    bool all_host = true;
    size_t sum = 0, each = 0;
    for (const InputView& part : input.parts) {
      all_host = all_host && IsHost(part);
      sum += part.byte_length;
      each += StagedBytes(part);
    }
    return all_host ? PinnedStage::Aligned(sum) : each;
  }
  return 0;
}

/** Keep a stage up to this size between batches. */
constexpr size_t kStageKeep = size_t{256} << 20;

/** A non-negative integer that a double holds exactly (a dimension, a length, an id). */
bool Whole(const Napi::Value& value, double* out) {
  if (!value.IsNumber()) return false;
  double v = value.As<Napi::Number>().DoubleValue();
  if (!(v >= 0) || v > 9007199254740991.0 || std::floor(v) != v) return false;
  *out = v;
  return true;
}

/** Open instances by number, for calls from other threads (TorchDirect). */
std::mutex registry_mutex;
std::unordered_map<uint32_t, TorchInstance*> registry;
uint32_t next_id = 1;

}  // namespace

void PinnedStage::Reset(size_t bytes) {
  if (!buffer_.defined() || static_cast<size_t>(buffer_.numel()) < bytes) {
    size_t capacity = size_t{1} << 20;
    while (capacity < bytes) capacity <<= 1;
    buffer_ = torch::Tensor();
    buffer_ = torch::empty({static_cast<int64_t>(capacity)},
                           torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
  }
  used_ = 0;
}

uint8_t* PinnedStage::Take(size_t bytes) {
  uint8_t* slice = buffer_.data_ptr<uint8_t>() + used_;
  used_ += Aligned(bytes);
  if (used_ > static_cast<size_t>(buffer_.numel())) throw std::logic_error("pinned stage overrun");
  return slice;
}

void PinnedStage::Trim() {
  if (buffer_.defined() && static_cast<size_t>(buffer_.numel()) > kStageKeep) buffer_ = torch::Tensor();
}

Napi::Function TorchInstance::Define(Napi::Env env) {
  return DefineClass(env, "TorchInstance",
                     {
                         InstanceMethod<&TorchInstance::Load>("load"),
                         InstanceMethod<&TorchInstance::Execute>("execute"),
                         InstanceMethod<&TorchInstance::Close>("close"),
                         InstanceAccessor<&TorchInstance::Id>("id"),
                     });
}

TorchInstance::TorchInstance(const Napi::CallbackInfo& info) : Napi::ObjectWrap<TorchInstance>(info) {
  Napi::Env env = info.Env();
  Napi::Object options = info[0].IsObject() ? info[0].As<Napi::Object>() : Napi::Object::New(env);
  Napi::Value device = options.Get("device");
  settings_.cuda = device.IsString() && device.As<Napi::String>().Utf8Value() == "cuda";
  Napi::Value format = options.Get("format");
  settings_.aoti = format.IsString() && format.As<Napi::String>().Utf8Value() == "aoti";
  Napi::Value id = options.Get("deviceId");
  settings_.device_id = id.IsNumber() ? id.As<Napi::Number>().Int32Value() : 0;
  settings_.inference_mode = Flag(options, "inferenceMode", true);
  settings_.optimized_execution = Flag(options, "optimizedExecution", true);
  settings_.cache_cleaning = Flag(options, "cacheCleaning", false);
  settings_.cudnn = Flag(options, "cudnn", true);
  settings_.cuda_graphs = Flag(options, "cudaGraphs", false);
  Napi::Value limit = options.Get("cudaGraphLimit");
  double graph_limit = 0;
  settings_.cuda_graph_limit = Whole(limit, &graph_limit) && graph_limit <= 4096 ? static_cast<size_t>(graph_limit) : 16;
  if (settings_.cuda) device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(settings_.device_id));

  shared_ = std::make_shared<Shared>();
  auto* finalizer_data = new std::shared_ptr<Shared>(shared_);
  tsfn_ = Tsfn::New(env, "galley:torch", 0, 1, this,
                    [](Napi::Env, std::shared_ptr<Shared>* shared, TorchInstance*) {
                      (*shared)->tsfn_alive = false;
                      delete shared;
                    },
                    finalizer_data);
  // Only pending jobs keep the process alive (see Enqueue and Settle).
  tsfn_.Unref(env);
  thread_ = std::thread(&TorchInstance::Run, this);
  std::lock_guard<std::mutex> lock(registry_mutex);
  id_ = next_id++;
  registry[id_] = this;
}

void TorchInstance::Unregister() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry.erase(id_);
}

Napi::Value TorchInstance::Id(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), id_); }

bool TorchInstance::QueueDirect(uint32_t id, Napi::Env env, const Napi::Array& inputs, std::unique_ptr<TorchJob>& job) {
  TorchSettings settings;
  torch::Device device{torch::kCPU};
  {
    std::lock_guard<std::mutex> registered(registry_mutex);
    auto found = registry.find(id);
    if (found == registry.end()) return false;
    settings = found->second->settings_;
    device = found->second->device_;
  }
  // Parsed without the lock: reading the inputs runs JavaScript, which may close instances.
  for (uint32_t i = 0; i < inputs.Length(); i++) {
    job->inputs.push_back(ParseInput(env, inputs.Get(i), "input " + std::to_string(i), *job, true, settings, device));
  }
  // Held while queueing: the instance cannot close or be collected meanwhile, so a call is either
  // queued before its stop job (and runs) or refused.
  std::lock_guard<std::mutex> registered(registry_mutex);
  auto found = registry.find(id);
  if (found == registry.end()) return false;
  TorchInstance& instance = *found->second;
  {
    std::lock_guard<std::mutex> lock(instance.mutex_);
    instance.queue_.push_back(std::move(job));
  }
  instance.wake_.notify_one();
  return true;
}

TorchInstance::~TorchInstance() {
  Unregister();
  // Collected without close(): nothing is pending (pending jobs hold a reference), so stop quietly.
  if (!stopping_) {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::make_unique<TorchJob>(JobKind::kStop, std::nullopt));
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  if (shared_->tsfn_alive.exchange(false)) tsfn_.Release();
}

Napi::Value TorchInstance::Load(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw Napi::TypeError::New(env, "load(path): path must be a string");
  auto job = std::make_unique<TorchJob>(JobKind::kLoad, Napi::Promise::Deferred::New(env));
  job->path = info[0].As<Napi::String>().Utf8Value();
  return Enqueue(env, std::move(job));
}

Napi::Value TorchInstance::Execute(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArray()) throw Napi::TypeError::New(env, "execute(inputs): inputs must be an array");
  Napi::Array inputs = info[0].As<Napi::Array>();
  auto job = std::make_unique<TorchJob>(JobKind::kExecute, Napi::Promise::Deferred::New(env));
  for (uint32_t i = 0; i < inputs.Length(); i++) {
    job->inputs.push_back(ParseInput(env, inputs.Get(i), "input " + std::to_string(i), *job, true, settings_, device_));
  }
  ParseExecuteOptions(env, info[1], *job);
  return Enqueue(env, std::move(job));
}

void ParseExecuteOptions(Napi::Env env, const Napi::Value& value, TorchJob& job) {
  if (!value.IsObject()) return;
  Napi::Object options = value.As<Napi::Object>();
  job.graph = Flag(options, "graph", false);
  job.defer = Flag(options, "defer", false);
  Napi::Value resident = options.Get("resident");
  if (!resident.IsArray()) return;
  Napi::Array positions = resident.As<Napi::Array>();
  for (uint32_t k = 0; k < positions.Length(); k++) {
    double position = 0;
    // Past what forward returns is harmless: such positions are never looked at.
    if (!Whole(positions.Get(k), &position) || position > 65535) {
      throw Napi::RangeError::New(env, "execute: resident output positions must be small non-negative integers");
    }
    if (job.resident.size() <= position) job.resident.resize(static_cast<size_t>(position) + 1, false);
    job.resident[static_cast<size_t>(position)] = true;
  }
}

InputView TorchInstance::ParseInput(Napi::Env env, const Napi::Value& value, const std::string& where, TorchJob& job,
                                    bool top, const TorchSettings& settings, const torch::Device& device) {
  if (!value.IsObject()) throw Napi::TypeError::New(env, where + ": must be an object");
  Napi::Object input = value.As<Napi::Object>();
  Napi::Value datatype_value = input.Get("datatype");
  if (!datatype_value.IsString()) throw Napi::TypeError::New(env, where + ": datatype must be a string");
  std::string datatype = datatype_value.As<Napi::String>().Utf8Value();
  auto type = TorchType(datatype);
  if (!type) throw Napi::TypeError::New(env, where + ": libtorch has no " + datatype + " type");
  Napi::Value shape_value = input.Get("shape");
  if (!shape_value.IsArray()) throw Napi::TypeError::New(env, where + ": shape must be an array");
  Napi::Array shape = shape_value.As<Napi::Array>();
  InputView view;
  view.type = *type;
  double count = 1;
  for (uint32_t d = 0; d < shape.Length(); d++) {
    double dim = 0;
    if (!Whole(shape.Get(d), &dim)) throw Napi::RangeError::New(env, where + ": dimensions must be non-negative integers");
    view.shape.push_back(static_cast<int64_t>(dim));
    count *= dim;
  }
  double element = static_cast<double>(c10::elementSize(*type));
  if (count * element > 9007199254740991.0) throw Napi::RangeError::New(env, where + ": the shape is too large");
  size_t expected = static_cast<size_t>(count * element);
  auto size_error = [&](size_t got) {
    return Napi::RangeError::New(env, where + ": " + std::to_string(got) + " bytes do not fit its shape and datatype");
  };

  Napi::Value parts = input.Get("parts");
  if (parts.IsArray()) {
    if (!top || view.shape.empty()) throw Napi::TypeError::New(env, where + ": parts only make a batched input");
    Napi::Array list = parts.As<Napi::Array>();
    int64_t rows = 0;
    for (uint32_t k = 0; k < list.Length(); k++) {
      InputView part = ParseInput(env, list.Get(k), where + " part " + std::to_string(k), job, false, settings, device);
      bool same = part.type == view.type && part.shape.size() == view.shape.size();
      for (size_t d = 1; same && d < view.shape.size(); d++) same = part.shape[d] == view.shape[d];
      if (!same) throw Napi::RangeError::New(env, where + " part " + std::to_string(k) + ": not a slice of the batch");
      rows += part.shape[0];
      view.parts.push_back(std::move(part));
    }
    if (rows != view.shape[0]) throw Napi::RangeError::New(env, where + ": the parts do not add up to the batch");
    return view;
  }

  Napi::Value tensor = input.Get("tensor");
  if (!tensor.IsUndefined()) {
    std::string why;
    auto held = TorchDeviceTensor::From(env, tensor, &why);
    if (!held) throw Napi::TypeError::New(env, where + ": the tensor " + why);
    if (held->tensor.device() != device) {
      throw Napi::TypeError::New(env, where + ": the tensor is on " + held->tensor.device().str() +
                                          ", this instance runs on " + device.str());
    }
    if (held->tensor.scalar_type() != view.type) {
      throw Napi::TypeError::New(env, where + ": the tensor is " + ProtocolType(held->tensor.scalar_type()) + ", not " +
                                          datatype);
    }
    if (held->tensor.nbytes() != expected) throw size_error(held->tensor.nbytes());
    view.resident = std::move(held->tensor);
    view.resident_ready = std::move(held->ready);
    return view;
  }

  Napi::Value pointer = input.Get("pointer");
  if (!pointer.IsUndefined()) {
    // Client device memory (a CUDA shared-memory region), read in place: the TypeScript side
    // checked the range against the region; here the device, the address and the size.
    if (!pointer.IsBigInt()) throw Napi::TypeError::New(env, where + ": pointer must be a bigint");
    double gpu = -1;
    if (!Whole(input.Get("deviceId"), &gpu)) throw Napi::TypeError::New(env, where + ": deviceId must be a GPU id");
    if (!settings.cuda) {
      throw Napi::TypeError::New(env, where + ": device memory on GPU " + std::to_string(static_cast<int64_t>(gpu)) +
                                          " needs a GPU instance, this one runs on the CPU");
    }
    if (static_cast<int>(gpu) != settings.device_id) {
      throw Napi::TypeError::New(env, where + ": the memory is on GPU " + std::to_string(static_cast<int64_t>(gpu)) +
                                          ", this instance runs on GPU " + std::to_string(settings.device_id));
    }
    bool lossless = false;
    uint64_t address = pointer.As<Napi::BigInt>().Uint64Value(&lossless);
    if (!lossless || address == 0) throw Napi::RangeError::New(env, where + ": not a device address");
    if (address % c10::elementSize(*type) != 0) {
      throw Napi::RangeError::New(env, where + ": the device address is not aligned for " + datatype);
    }
    double length = -1;
    if (!Whole(input.Get("byteLength"), &length)) throw Napi::TypeError::New(env, where + ": byteLength must be a number");
    if (static_cast<size_t>(length) != expected) throw size_error(static_cast<size_t>(length));
    view.device_pointer = static_cast<uintptr_t>(address);
    view.device_id = static_cast<int>(gpu);
    view.byte_length = expected;
    Napi::Value event = input.Get("event");
    if (!event.IsUndefined()) {
      // Memory another process wrote (a Python stub's tensor): its event, recorded after that work.
      if (!event.IsTypedArray() || event.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array ||
          event.As<Napi::Uint8Array>().ByteLength() != kIpcEventHandleBytes) {
        throw Napi::TypeError::New(env, where + ": event must be a 64-byte CUDA IPC event handle (Uint8Array)");
      }
      Napi::Uint8Array bytes = event.As<Napi::Uint8Array>();
      view.wait_event.assign(reinterpret_cast<const char*>(bytes.Data()), bytes.ByteLength());
    }
    job.borrowed.emplace_back(view.device_pointer, view.byte_length);
    return view;
  }

  Napi::Value data = input.Get("data");
  if (!data.IsTypedArray() || data.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throw Napi::TypeError::New(env, where + ": data must be a Uint8Array");
  }
  Napi::Uint8Array bytes = data.As<Napi::Uint8Array>();
  view.data = bytes.Data();
  view.byte_length = bytes.ByteLength();
  if (view.byte_length != expected) throw size_error(view.byte_length);
  job.borrowed.emplace_back(reinterpret_cast<uintptr_t>(view.data), view.byte_length);
  job.keep.push_back(Napi::Persistent(bytes));
  return view;
}

Napi::Value TorchInstance::Close(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (stopping_) {
    auto done = Napi::Promise::Deferred::New(env);
    done.Resolve(env.Undefined());
    return done.Promise();
  }
  Unregister();
  auto promise = Enqueue(env, std::make_unique<TorchJob>(JobKind::kStop, Napi::Promise::Deferred::New(env)));
  stopping_ = true;
  return promise;
}

Napi::Value TorchInstance::Enqueue(Napi::Env env, std::unique_ptr<TorchJob> job) {
  Napi::Promise promise = job->deferred->Promise();
  if (stopping_) {
    job->deferred->Reject(Napi::Error::New(env, "the libtorch instance is closed").Value());
    return promise;
  }
  if (pending_++ == 0) {
    // While work is pending, the process stays alive and this object is not collected.
    tsfn_.Ref(env);
    Ref();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  return promise;
}

void DeliverTorchJob(Napi::Env env, Napi::Function, TorchInstance* self, TorchJob* raw) {
  std::unique_ptr<TorchJob> job(raw);
  if (env == nullptr) {
    // The environment is going away: its references cannot be deleted any more.
    for (auto& ref : job->keep) ref.SuppressDestruct();
    return;
  }
  Napi::HandleScope scope(env);
  self->Settle(env, *job);
}

Napi::Object ExecutionResult(Napi::Env env, TorchJob& job) {
  Napi::Object out = Napi::Object::New(env);
  Napi::Array outputs = Napi::Array::New(env, job.outputs.size());
  for (size_t i = 0; i < job.outputs.size(); i++) {
    torch::Tensor& tensor = job.outputs[i];
    Napi::Object output = Napi::Object::New(env);
    output.Set("datatype", ProtocolType(tensor.scalar_type()));
    Napi::Array shape = Napi::Array::New(env, tensor.dim());
    for (int64_t d = 0; d < tensor.dim(); d++) shape.Set(d, Napi::Number::New(env, tensor.size(d)));
    output.Set("shape", shape);
    if (i < job.resident.size() && job.resident[i]) {
      // Kept where the model made it: a handle, no bytes for Node.
      output.Set("tensor", TorchDeviceTensor::Wrap(env, tensor, job.ready));
      outputs.Set(i, output);
      continue;
    }
    // The tensor's own bytes become the ArrayBuffer's: the tensor lives until it is collected.
    output.Set("data", OwnedBytes(env, tensor));
    outputs.Set(i, output);
  }
  out.Set("outputs", outputs);
  out.Set("inferNs", Napi::Number::New(env, static_cast<double>(job.infer_ns)));
  if (job.peak_bytes >= 0) out.Set("peakBytes", Napi::Number::New(env, static_cast<double>(job.peak_bytes)));
  out.Set("hostToDeviceBytes", Napi::Number::New(env, static_cast<double>(job.host_to_device)));
  out.Set("deviceToHostBytes", Napi::Number::New(env, static_cast<double>(job.device_to_host)));
  if (!job.graph_state.empty()) out.Set("cudaGraph", job.graph_state);
  if (!job.graph_error.empty()) out.Set("cudaGraphError", job.graph_error);
  return out;
}

void TorchInstance::Settle(Napi::Env env, TorchJob& job) {
  if (job.kind == JobKind::kStop && !joined_) {
    thread_.join();
    joined_ = true;
  }
  job.keep.clear();
  Napi::Promise::Deferred& deferred = *job.deferred;
  if (!job.error.empty()) {
    deferred.Reject(Napi::Error::New(env, job.error).Value());
  } else if (job.kind == JobKind::kLoad) {
    const RunnerInfo& loaded = job.loaded;
    Napi::Object out = Napi::Object::New(env);
    out.Set("format", loaded.format);
    Napi::Array arguments = Napi::Array::New(env, loaded.arguments.size());
    for (size_t i = 0; i < loaded.arguments.size(); i++) {
      Napi::Object argument = Napi::Object::New(env);
      argument.Set("name", loaded.arguments[i].first);
      argument.Set("type", loaded.arguments[i].second);
      arguments.Set(i, argument);
    }
    out.Set("arguments", arguments);
    out.Set("returns", loaded.returns);
    if (loaded.format == "aoti") {
      Napi::Array spec = Napi::Array::New(env, loaded.call_spec.size());
      for (size_t i = 0; i < loaded.call_spec.size(); i++) spec.Set(i, loaded.call_spec[i]);
      out.Set("callSpec", spec);
      Napi::Object metadata = Napi::Object::New(env);
      for (const auto& [name, value] : loaded.metadata) metadata.Set(name, value);
      out.Set("metadata", metadata);
    }
    deferred.Resolve(out);
  } else if (job.kind == JobKind::kExecute) {
    deferred.Resolve(ExecutionResult(env, job));
  } else {
    deferred.Resolve(env.Undefined());
  }
  if (job.kind == JobKind::kStop && shared_->tsfn_alive.exchange(false)) tsfn_.Release();
  if (--pending_ == 0) {
    if (shared_->tsfn_alive) tsfn_.Unref(env);
    Unref();
  }
}

void TorchInstance::Run() {
  // Named, so per-thread CPU (top -H, /proc/<pid>/task) tells instances from Node's own threads.
  pthread_setname_np(pthread_self(), "galley:torch");
  for (;;) {
    std::unique_ptr<TorchJob> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return !queue_.empty(); });
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    switch (job->kind) {
      case JobKind::kLoad:
        RunLoad(*job);
        break;
      case JobKind::kExecute:
        RunExecute(*job);
        break;
      case JobKind::kStop:
        RunStop();
        break;
    }
    bool stop = job->kind == JobKind::kStop;
    if (job->channel) {
      std::shared_ptr<DirectChannel> channel = job->channel;
      channel->Deliver(job.release());
    } else if (job->deferred) {
      TorchJob* raw = job.release();
      // napi_closing: the environment is gone, and so is whoever waited.
      if (tsfn_.BlockingCall(raw) != napi_ok) {
        for (auto& ref : raw->keep) ref.SuppressDestruct();
      }
    }
    if (stop) return;
  }
}

void TorchInstance::RunLoad(TorchJob& job) {
  try {
    if (settings_.cuda) {
#ifdef GALLEY_TORCH_CUDA
      if (!torch::cuda::is_available()) throw std::runtime_error("no usable CUDA device (libtorch sees none)");
      if (settings_.device_id < 0 || static_cast<size_t>(settings_.device_id) >= torch::cuda::device_count()) {
        throw std::runtime_error("GPU " + std::to_string(settings_.device_id) + " is not available (libtorch sees " +
                                 std::to_string(torch::cuda::device_count()) + ")");
      }
      stream_ = c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(settings_.device_id));
      // The caching allocator starts lazily, at the first CUDA tensor: a model with no parameters
      // (x + 1) makes none at load, and its allocator statistics would throw "Invalid device
      // argument ...: did you call init?" at its first execution.
      (void)torch::empty({1}, torch::TensorOptions().device(device_));
      if (settings_.cuda_graphs && settings_.cuda_graph_limit > 0) {
        graphs_ = std::make_unique<TorchGraphs>(settings_.cuda_graph_limit);
      }
#else
      throw std::runtime_error("this galley_torch was built against a libtorch without CUDA");
#endif
    }
#ifdef GALLEY_TORCH_CUDA
    std::optional<c10::cuda::CUDAStreamGuard> on_stream;
    if (stream_) on_stream.emplace(*stream_);
#endif
    runner_ = settings_.aoti ? LoadAotiPackage(job.path, device_, job.loaded)
                             : LoadTorchScript(job.path, device_, job.loaded);
  } catch (const std::exception& error) {
    job.error = Describe(error);
  } catch (...) {
    job.error = settings_.aoti ? "unknown error while loading the AOTInductor package"
                               : "unknown error while loading the TorchScript module";
  }
}

void TorchInstance::RunExecute(TorchJob& job) {
  try {
    if (!runner_) throw std::runtime_error("the model is not loaded");
    if (!settings_.aoti) torch::jit::setGraphExecutorOptimize(settings_.optimized_execution);
    at::globalContext().setUserEnabledCuDNN(settings_.cudnn);
    c10::InferenceMode inference_mode(settings_.inference_mode);
    torch::NoGradGuard no_grad;
#ifdef GALLEY_TORCH_CUDA
    std::optional<c10::cuda::CUDAStreamGuard> on_stream;
    if (stream_) on_stream.emplace(*stream_);
    void* stream = stream_ ? static_cast<void*>(stream_->stream()) : nullptr;
#else
    void* stream = nullptr;
#endif
#ifdef GALLEY_TORCH_CUDA
    int64_t allocated_before = -1;
    const auto device_index = static_cast<c10::DeviceIndex>(settings_.device_id);
    if (device_.is_cuda()) {
      // Index 0 is the aggregate of every pool (StatType::AGGREGATE). The statistics never fail a
      // request: without them the batch's peak is not reported.
      try {
        allocated_before = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index).allocated_bytes[0].current;
        c10::cuda::CUDACachingAllocator::resetPeakStats(device_index);
      } catch (const std::exception&) {
        allocated_before = -1;
      }
    }
#endif
    // The inputs, held until the outputs are checked for sharing their bytes.
    std::vector<torch::Tensor> held;
    std::vector<c10::IValue> arguments;
    size_t staged = 0;
    if (device_.is_cuda()) {
      for (const InputView& input : job.inputs) staged += StagedBytes(input);
#ifdef GALLEY_TORCH_CUDA
      // A deferred batch before this one may still be copying out of the input stage.
      if (staged > 0 && stage_busy_) {
        cudaError_t status = cudaEventSynchronize(stage_busy_->event);
        stage_busy_.reset();
        if (status != cudaSuccess) {
          cudaGetLastError();
          throw std::runtime_error(std::string("cudaEventSynchronize failed: ") + cudaGetErrorString(status));
        }
      }
#endif
      if (staged > 0) stage_in_.Reset(staged);
    }
    for (const InputView& input : job.inputs) arguments.emplace_back(Place(input, job, held));
#ifdef GALLEY_TORCH_CUDA
    // A deferred batch's stage is free again once the copies out of it are done, long before its
    // work is: the next batch that stages waits for this, so the host stays a batch ahead.
    std::shared_ptr<ReadyEvent> stage_copied;
    if (staged > 0 && job.defer && stream_) stage_copied = RecordReady(settings_.device_id, stream_->stream());
#endif
    auto start = std::chrono::steady_clock::now();
    std::vector<torch::Tensor> outputs;
    bool graphed = false;
#ifdef GALLEY_TORCH_CUDA
    if (job.graph && graphs_ && stream_) {
      GraphOutcome outcome;
      graphed = graphs_->Run(*runner_, *stream_, arguments, outputs, outcome);
      job.graph_state = std::move(outcome.state);
      job.graph_error = std::move(outcome.error);
    }
#endif
    if (!graphed) outputs = runner_->Forward(std::move(arguments), stream);
    for (size_t i = 0; i < outputs.size() && i < job.resident.size(); i++) {
      torch::Tensor& output = outputs[i];
      if (!job.resident[i] || !output.defined()) continue;
      // Kept by a handle: contiguous, and never over memory the job only borrowed (a client's
      // region may be unregistered once the request ends). Sharing a parameter's or an earlier
      // handle's storage is fine: libtorch's reference counting keeps it. Queued on the stream
      // before the synchronisation below, so the handle's bytes are complete when it is handed out.
      // A graph's outputs are overwritten by its next replay.
      if (graphed || Overlaps(output, job.borrowed)) output = output.clone(at::MemoryFormat::Contiguous);
      else output = output.contiguous();
    }
    if (device_.is_cuda()) {
#ifdef GALLEY_TORCH_CUDA
      bool everything_kept = job.defer && stream_;
      for (size_t i = 0; everything_kept && i < outputs.size(); i++) {
        everything_kept = !outputs[i].defined() || !outputs[i].is_cuda() || (i < job.resident.size() && job.resident[i]);
      }
      if (everything_kept) {
        // Deferred completion: answered now; readers of the outputs wait for this event.
        job.ready = RecordReady(settings_.device_id, stream_->stream());
        if (staged > 0) stage_busy_ = stage_copied ? stage_copied : job.ready;
      } else {
        ReturnToHost(outputs, job);
      }
#endif
    }
    job.infer_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    for (size_t i = 0; i < outputs.size(); i++) {
      torch::Tensor& output = outputs[i];
      if (!output.defined()) throw std::invalid_argument("output at index " + std::to_string(i) + " is undefined");
      if (ProtocolType(output.scalar_type()).empty()) {
        throw std::invalid_argument("output at index " + std::to_string(i) + " has type " +
                                    std::string(c10::toString(output.scalar_type())) +
                                    ", which has no protocol datatype");
      }
      if (i < job.resident.size() && job.resident[i]) continue;
      if (!output.device().is_cpu()) output = output.to(torch::kCPU);
      // Node gets bytes no one else holds: an output sharing an input's bytes, a parameter's, or
      // another output's, or a view of a larger tensor, is copied once.
      if (!output.is_contiguous() || output.storage().use_count() > 1 || output.storage_offset() != 0 ||
          output.storage().nbytes() != output.nbytes() || Overlaps(output, job.borrowed)) {
        output = output.clone(at::MemoryFormat::Contiguous);
      }
    }
    held.clear();
    job.outputs = std::move(outputs);
#ifdef GALLEY_TORCH_CUDA
    if (allocated_before >= 0) {
      try {
        int64_t peak = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index).allocated_bytes[0].peak;
        job.peak_bytes = std::max<int64_t>(0, peak - allocated_before);
      } catch (const std::exception&) {
      }
    }
#endif
    if (settings_.cache_cleaning && device_.is_cuda()) {
#ifdef GALLEY_TORCH_CUDA
      c10::cuda::CUDACachingAllocator::emptyCache();
#endif
    }
  } catch (const std::exception& error) {
    job.outputs.clear();
    job.error = Describe(error);
    Quiesce();
  } catch (...) {
    job.outputs.clear();
    job.error = settings_.aoti ? "unknown error while running the AOTInductor package"
                               : "unknown error while running the TorchScript module";
    Quiesce();
  }
  stage_in_.Trim();
  stage_out_.Trim();
}

void TorchInstance::Quiesce() {
#ifdef GALLEY_TORCH_CUDA
  // Copies queued from the stages must end before the next batch writes into them.
  try {
    if (stream_) stream_->synchronize();
    stage_busy_.reset();
  } catch (...) {
    stage_in_.Release();
    stage_out_.Release();
  }
#endif
}

void TorchInstance::ReturnToHost(std::vector<torch::Tensor>& outputs, TorchJob& job) {
#ifdef GALLEY_TORCH_CUDA
  std::vector<size_t> copied;
  size_t bytes = 0;
  for (size_t i = 0; i < outputs.size(); i++) {
    const torch::Tensor& output = outputs[i];
    if (!output.defined() || !output.is_cuda() || (i < job.resident.size() && job.resident[i])) continue;
    copied.push_back(i);
    bytes += PinnedStage::Aligned(output.nbytes());
  }
  std::vector<uint8_t*> slices;
  if (bytes > 0) stage_out_.Reset(bytes);
  for (size_t i : copied) {
    torch::Tensor& output = outputs[i];
    uint8_t* slice = stage_out_.Take(output.nbytes());
    torch::from_blob(slice, output.sizes(), output.options().device(torch::kCPU)).copy_(output, /*non_blocking=*/true);
    slices.push_back(slice);
  }
  stream_->synchronize();
  for (size_t k = 0; k < copied.size(); k++) {
    torch::Tensor& output = outputs[copied[k]];
    torch::Tensor host = torch::empty(output.sizes(), output.options().device(torch::kCPU));
    std::memcpy(host.data_ptr(), slices[k], output.nbytes());
    job.device_to_host += static_cast<int64_t>(output.nbytes());
    output = host;
  }
#else
  (void)outputs;
  (void)job;
#endif
}

torch::Tensor TorchInstance::Place(const InputView& input, TorchJob& job, std::vector<torch::Tensor>& held) {
  if (!input.parts.empty()) {
    // ParseInput checked that the parts are slices of one batch (type and trailing dimensions).
    const InputView& first = input.parts[0];
    if (device_.is_cuda() && std::all_of(input.parts.begin(), input.parts.end(), IsHost)) {
      // A batch of host requests: gathered into the stage, one copy to the device.
      std::vector<const InputView*> parts;
      std::vector<int64_t> shape = first.shape;
      shape[0] = 0;
      for (const InputView& part : input.parts) {
        parts.push_back(&part);
        shape[0] += part.shape[0];
      }
      torch::Tensor batch = Stage(parts, shape, input.type, job);
      held.push_back(batch);
      return batch;
    }
    // A batch gathered on the instance's device: each part placed there, then one concatenation.
    std::vector<torch::Tensor> parts;
    for (const InputView& part : input.parts) parts.push_back(Place(part, job, held));
    torch::Tensor batch = torch::cat(parts, 0);
    held.push_back(batch);
    return batch;
  }
  if (input.resident) {
    // An earlier output left on this device (checked on the main thread); the shape may differ
    // by a batch dimension of 1 (an ensemble between batching and non-batching models).
#ifdef GALLEY_TORCH_CUDA
    if (stream_ && input.resident_ready) WaitReady(*input.resident_ready, stream_->stream());
    // Answered before this stream has read it: its memory goes back to its allocator only once
    // this stream is past the batch (the handle may be disposed as soon as we answer).
    if (stream_ && job.defer && input.resident->is_cuda()) {
      c10::cuda::CUDACachingAllocator::recordStream(input.resident->storage().data_ptr(), *stream_);
    }
#endif
    held.push_back(*input.resident);
    return input.resident->reshape(input.shape);
  }
  if (input.device_pointer != 0) {
#ifdef GALLEY_TORCH_CUDA
    // The client's memory, used in place: no copy at all (after its writer's work, where another
    // process wrote it).
    if (stream_ && !input.wait_event.empty()) WaitImported(settings_.device_id, input.wait_event, stream_->stream());
    torch::Tensor tensor = torch::from_blob(reinterpret_cast<void*>(input.device_pointer), input.shape,
                                            torch::TensorOptions().dtype(input.type).device(device_));
    held.push_back(tensor);
    return tensor;
#else
    throw std::runtime_error("this galley_torch was built against a libtorch without CUDA");
#endif
  }
  if (device_.is_cuda()) {
    torch::Tensor tensor = Stage({&input}, input.shape, input.type, job);
    held.push_back(tensor);
    return tensor;
  }
  torch::Tensor tensor = WrapInput(input);
  held.push_back(tensor);
  return tensor;
}

torch::Tensor TorchInstance::Stage(const std::vector<const InputView*>& parts, std::vector<int64_t> shape,
                                   c10::ScalarType type, TorchJob& job) {
  size_t bytes = 0;
  for (const InputView* part : parts) bytes += part->byte_length;
  uint8_t* slice = stage_in_.Take(bytes);
  size_t at = 0;
  for (const InputView* part : parts) {
    if (part->byte_length > 0) std::memcpy(slice + at, part->data, part->byte_length);
    at += part->byte_length;
  }
  job.host_to_device += static_cast<int64_t>(bytes);
  torch::Tensor host = torch::from_blob(slice, shape, torch::TensorOptions().dtype(type).device(torch::kCPU));
  return host.to(device_, /*non_blocking=*/true);
}

void TorchInstance::RunStop() {
  try {
#ifdef GALLEY_TORCH_CUDA
    if (graphs_) {
      if (stream_) stream_->synchronize();
      graphs_.reset();
    }
#endif
    runner_.reset();
    stage_in_.Release();
    stage_out_.Release();
#ifdef GALLEY_TORCH_CUDA
    if (device_.is_cuda()) {
      if (stream_) stream_->synchronize();
      c10::cuda::CUDACachingAllocator::emptyCache();
    }
#endif
  } catch (...) {
    // Releasing must not throw past the thread.
  }
  // Give the module's freed memory back to the system (glibc keeps freed heap pages otherwise).
  malloc_trim(0);
}

}  // namespace galley
