#include "cuda_memory.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace galley {
namespace {

// The few driver types we need, as cuda.h declares them (no CUDA headers at build time).
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUdeviceptr = unsigned long long;
struct CUipcMemHandle {
  char reserved[64];
};
using CUevent = void*;
struct CUipcEventHandle {
  char reserved[64];
};
constexpr unsigned kIpcLazyEnablePeerAccess = 1;    // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
constexpr int kPointerAttributeDeviceOrdinal = 9;   // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr double kMaxSafeInteger = 9007199254740991.0;  // 2^53 - 1

struct Driver {
  std::string error;  // why the driver is unusable; empty when loaded
  int device_count = 0;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuIpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned) = nullptr;
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr) = nullptr;
  CUresult (*cuIpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemcpyPeer)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t) = nullptr;
  CUresult (*cuMemGetAddressRange)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  CUresult (*cuPointerGetAttribute)(void*, int, CUdeviceptr) = nullptr;
  CUresult (*cuIpcOpenEventHandle)(CUevent*, CUipcEventHandle) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;

  std::mutex mutex;
  std::vector<CUcontext> contexts;  // each device's primary context, retained for the process's life
};

// "<call> failed: CUDA_ERROR_X (<driver's text>)", or "" for CUDA_SUCCESS.
std::string Check(const Driver& d, CUresult result, const char* call) {
  if (result == 0) return "";
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.cuGetErrorName == nullptr || d.cuGetErrorName(result, &name) != 0) name = nullptr;
  if (d.cuGetErrorString == nullptr || d.cuGetErrorString(result, &text) != 0) text = nullptr;
  std::string out = std::string(call) + " failed: " + (name ? name : "CUresult " + std::to_string(result));
  if (text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

template <typename F>
bool Resolve(void* library, F& target, const char* versioned, const char* plain) {
  void* symbol = versioned != nullptr ? dlsym(library, versioned) : nullptr;
  if (symbol == nullptr) symbol = dlsym(library, plain);
  target = reinterpret_cast<F>(symbol);
  return symbol != nullptr;
}

// Loaded once per process, on the first call (from a worker thread: cuInit can take ~200 ms).
Driver& GetDriver() {
  static Driver driver;
  static std::once_flag once;
  std::call_once(once, [] {
    Driver& d = driver;
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* reason = dlerror();
      d.error = std::string("the CUDA driver is unavailable: ") + (reason ? reason : "libcuda.so.1 could not be loaded");
      return;
    }
    // The _v2 names are the ones cuda.h maps the plain names to since CUDA 4 (11 for IPC open).
    bool ok = Resolve(library, d.cuInit, nullptr, "cuInit") &&
              Resolve(library, d.cuDeviceGetCount, nullptr, "cuDeviceGetCount") &&
              Resolve(library, d.cuDeviceGet, nullptr, "cuDeviceGet") &&
              Resolve(library, d.cuDevicePrimaryCtxRetain, nullptr, "cuDevicePrimaryCtxRetain") &&
              Resolve(library, d.cuCtxSetCurrent, nullptr, "cuCtxSetCurrent") &&
              Resolve(library, d.cuCtxSynchronize, nullptr, "cuCtxSynchronize") &&
              Resolve(library, d.cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle") &&
              Resolve(library, d.cuIpcCloseMemHandle, nullptr, "cuIpcCloseMemHandle") &&
              Resolve(library, d.cuIpcGetMemHandle, nullptr, "cuIpcGetMemHandle") &&
              Resolve(library, d.cuMemAlloc, "cuMemAlloc_v2", "cuMemAlloc") &&
              Resolve(library, d.cuMemFree, "cuMemFree_v2", "cuMemFree") &&
              Resolve(library, d.cuMemcpyDtoH, "cuMemcpyDtoH_v2", "cuMemcpyDtoH") &&
              Resolve(library, d.cuMemcpyHtoD, "cuMemcpyHtoD_v2", "cuMemcpyHtoD") &&
              Resolve(library, d.cuMemcpyDtoD, "cuMemcpyDtoD_v2", "cuMemcpyDtoD") &&
              Resolve(library, d.cuMemcpyPeer, nullptr, "cuMemcpyPeer") &&
              Resolve(library, d.cuMemGetAddressRange, "cuMemGetAddressRange_v2", "cuMemGetAddressRange") &&
              Resolve(library, d.cuPointerGetAttribute, nullptr, "cuPointerGetAttribute") &&
              Resolve(library, d.cuIpcOpenEventHandle, nullptr, "cuIpcOpenEventHandle") &&
              Resolve(library, d.cuEventSynchronize, nullptr, "cuEventSynchronize") &&
              Resolve(library, d.cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy") &&
              Resolve(library, d.cuGetErrorName, nullptr, "cuGetErrorName") &&
              Resolve(library, d.cuGetErrorString, nullptr, "cuGetErrorString");
    if (!ok) {
      d.error = "the CUDA driver is unusable: libcuda.so.1 lacks a driver API entry point";
      return;
    }
    if (std::string e = Check(d, d.cuInit(0), "cuInit"); !e.empty()) {
      d.error = "the CUDA driver is unusable: " + e;
      return;
    }
    if (std::string e = Check(d, d.cuDeviceGetCount(&d.device_count), "cuDeviceGetCount"); !e.empty()) {
      d.error = "the CUDA driver is unusable: " + e;
      return;
    }
    d.contexts.assign(static_cast<size_t>(d.device_count), nullptr);
  });
  return driver;
}

// `device`'s primary context, retained on first use. Returns the error, or "".
std::string PrimaryContext(Driver& d, int device, CUcontext* out) {
  if (!d.error.empty()) return d.error;
  if (device < 0 || device >= d.device_count) {
    return "CUDA device " + std::to_string(device) + " does not exist (the driver reports " +
           std::to_string(d.device_count) + ")";
  }
  CUcontext context = nullptr;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    context = d.contexts[static_cast<size_t>(device)];
    if (context == nullptr) {
      CUdevice handle = 0;
      if (std::string e = Check(d, d.cuDeviceGet(&handle, device), "cuDeviceGet"); !e.empty()) return e;
      if (std::string e = Check(d, d.cuDevicePrimaryCtxRetain(&context, handle), "cuDevicePrimaryCtxRetain");
          !e.empty()) {
        return e;
      }
      d.contexts[static_cast<size_t>(device)] = context;
    }
  }
  *out = context;
  return "";
}

// Makes `device`'s primary context current on this thread (threads of the pool are reused, so
// every operation sets it). Returns the error, or "".
std::string UseDevice(Driver& d, int device) {
  CUcontext context = nullptr;
  if (std::string e = PrimaryContext(d, device, &context); !e.empty()) return e;
  return Check(d, d.cuCtxSetCurrent(context), "cuCtxSetCurrent");
}

// Device memory this process opened from a handle (closed with cuIpcCloseMemHandle) or allocated
// (freed with cuMemFree). Shared by the JS object and the copies in flight: whichever drops it
// last releases it, so closing during a copy never pulls the memory from under it.
struct DeviceMemory {
  bool allocated = false;
  int device = 0;
  CUdeviceptr pointer = 0;
  size_t byte_size = 0;     // the whole allocation the pointer starts
  int pointer_device = -1;  // where the memory lives (may differ from `device` with peer access)
  CUipcMemHandle handle{};  // allocations only

  std::string Release() {
    if (pointer == 0) return "";
    CUdeviceptr p = std::exchange(pointer, 0);
    Driver& d = GetDriver();
    if (std::string e = UseDevice(d, device); !e.empty()) return e;
    return allocated ? Check(d, d.cuMemFree(p), "cuMemFree") : Check(d, d.cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle");
  }
  ~DeviceMemory() { Release(); }
};

using Memory = std::shared_ptr<DeviceMemory>;

// What the JS object's methods share: the memory until close().
struct Slot {
  Memory memory;
};

// Size and device of the allocation `memory->pointer` starts (Triton checks byte_size against it).
std::string Describe(Driver& d, DeviceMemory& memory) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (std::string e = Check(d, d.cuMemGetAddressRange(&base, &size, memory.pointer), "cuMemGetAddressRange");
      !e.empty()) {
    return e;
  }
  // An IPC handle maps a whole allocation, so its pointer is the base; be exact anyway.
  memory.byte_size = size - static_cast<size_t>(memory.pointer - base);
  int ordinal = -1;
  if (std::string e = Check(d, d.cuPointerGetAttribute(&ordinal, kPointerAttributeDeviceOrdinal, memory.pointer),
                            "cuPointerGetAttribute(DEVICE_ORDINAL)");
      !e.empty()) {
    return e;
  }
  memory.pointer_device = ordinal;
  return "";
}

Napi::Object MakeObject(Napi::Env env, Memory memory);

// Opens or allocates off the JS thread (cuInit, context creation and IPC mapping are slow).
class AcquireWorker : public Napi::AsyncWorker {
 public:
  AcquireWorker(Napi::Env env, bool allocate, int device, size_t byte_size, const CUipcMemHandle& handle)
      : Napi::AsyncWorker(env, allocate ? "galley:cudaAlloc" : "galley:cudaIpcOpen"),
        deferred_(Napi::Promise::Deferred::New(env)),
        allocate_(allocate),
        device_(device),
        byte_size_(byte_size),
        handle_(handle) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    Driver& d = GetDriver();
    if (std::string e = UseDevice(d, device_); !e.empty()) return SetError(e);
    auto memory = std::make_shared<DeviceMemory>();
    memory->device = device_;
    memory->allocated = allocate_;
    std::string e;
    if (allocate_) {
      e = Check(d, d.cuMemAlloc(&memory->pointer, byte_size_), "cuMemAlloc");
      if (e.empty()) e = Check(d, d.cuIpcGetMemHandle(&memory->handle, memory->pointer), "cuIpcGetMemHandle");
    } else {
      e = Check(d, d.cuIpcOpenMemHandle(&memory->pointer, handle_, kIpcLazyEnablePeerAccess), "cuIpcOpenMemHandle");
    }
    if (e.empty()) e = Describe(d, *memory);
    if (!e.empty()) {
      memory->Release();
      return SetError(e);
    }
    memory_ = std::move(memory);
  }

  void OnOK() override { deferred_.Resolve(MakeObject(Env(), std::move(memory_))); }
  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  bool allocate_;
  int device_;
  size_t byte_size_;
  CUipcMemHandle handle_;
  Memory memory_;
};

// One synchronous copy on the legacy default stream, off the JS thread. The host buffer is kept
// referenced until the copy is done.
class CopyWorker : public Napi::AsyncWorker {
 public:
  CopyWorker(Napi::Env env, Memory memory, bool to_device, size_t offset, uint8_t* host, size_t length,
             Napi::Object keep)
      : Napi::AsyncWorker(env, to_device ? "galley:cudaWrite" : "galley:cudaRead"),
        deferred_(Napi::Promise::Deferred::New(env)),
        memory_(std::move(memory)),
        to_device_(to_device),
        offset_(offset),
        host_(host),
        length_(length),
        keep_(Napi::Persistent(keep)) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    Driver& d = GetDriver();
    if (std::string e = UseDevice(d, memory_->device); !e.empty()) return SetError(e);
    CUdeviceptr at = memory_->pointer + offset_;
    std::string e = to_device_ ? Check(d, d.cuMemcpyHtoD(at, host_, length_), "cuMemcpyHtoD")
                               : Check(d, d.cuMemcpyDtoH(host_, at, length_), "cuMemcpyDtoH");
    // From pageable memory cuMemcpyHtoD may return before the data reaches the device; the
    // caller tells another process the bytes are there as soon as this resolves.
    if (e.empty() && to_device_) e = Check(d, d.cuCtxSynchronize(), "cuCtxSynchronize");
    if (!e.empty()) SetError(e);
  }

  void OnOK() override {
    if (to_device_) {
      deferred_.Resolve(Env().Undefined());
    } else {
      deferred_.Resolve(keep_.Value());
    }
  }
  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  Memory memory_;
  bool to_device_;
  size_t offset_;
  uint8_t* host_;
  size_t length_;
  Napi::ObjectReference keep_;
};

// One device-to-device copy from this memory to another device address (the legacy default
// stream; then a synchronize, since a copy between device addresses returns before it is done and
// the caller hands the target on as soon as this resolves). A target on another GPU
// (`target_device`) is one cuMemcpyPeer between the two primary contexts: direct where the GPUs
// are peers, staged by the driver otherwise; never through memory this process sees.
class DeviceCopyWorker : public Napi::AsyncWorker {
 public:
  DeviceCopyWorker(Napi::Env env, Memory memory, size_t offset, CUdeviceptr target, size_t length, int target_device)
      : Napi::AsyncWorker(env, "galley:cudaCopy"),
        deferred_(Napi::Promise::Deferred::New(env)),
        memory_(std::move(memory)),
        offset_(offset),
        target_(target),
        length_(length),
        target_device_(target_device) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    Driver& d = GetDriver();
    if (std::string e = UseDevice(d, memory_->device); !e.empty()) return SetError(e);
    std::string e;
    if (target_device_ < 0 || target_device_ == memory_->device) {
      e = Check(d, d.cuMemcpyDtoD(target_, memory_->pointer + offset_, length_), "cuMemcpyDtoD");
    } else {
      CUcontext source = nullptr;
      CUcontext target = nullptr;
      e = PrimaryContext(d, memory_->device, &source);
      if (e.empty()) e = PrimaryContext(d, target_device_, &target);
      if (e.empty()) {
        e = Check(d, d.cuMemcpyPeer(target_, target, memory_->pointer + offset_, source, length_), "cuMemcpyPeer");
      }
      // A copy between device addresses may return before it is done: wait in both contexts.
      if (e.empty()) e = Check(d, d.cuCtxSynchronize(), "cuCtxSynchronize");
      if (e.empty()) e = Check(d, d.cuCtxSetCurrent(target), "cuCtxSetCurrent");
    }
    if (e.empty()) e = Check(d, d.cuCtxSynchronize(), "cuCtxSynchronize");
    if (!e.empty()) SetError(e);
  }

  void OnOK() override { deferred_.Resolve(Env().Undefined()); }
  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  Memory memory_;
  size_t offset_;
  CUdeviceptr target_;
  size_t length_;
  int target_device_;
};

// A non-negative integer argument below 2^53, or a thrown RangeError naming it.
size_t SizeArgument(Napi::Env env, const Napi::Value& value, const char* what) {
  double number = value.IsNumber() ? value.As<Napi::Number>().DoubleValue() : -1;
  if (!(number >= 0) || number > kMaxSafeInteger || std::floor(number) != number) {
    throw Napi::RangeError::New(env, std::string(what) + " must be a non-negative integer");
  }
  return static_cast<size_t>(number);
}

int DeviceArgument(Napi::Env env, const Napi::Value& value) {
  double number = value.IsNumber() ? value.As<Napi::Number>().DoubleValue() : -1;
  if (!(number >= 0) || number > 2147483647.0 || std::floor(number) != number) {
    throw Napi::RangeError::New(env, "device must be a non-negative integer");
  }
  return static_cast<int>(number);
}

// A 64-byte CUDA IPC handle (memory or event) from a typed array; `what` names it in the error.
template <typename Handle>
Handle HandleArgument(Napi::Env env, const Napi::TypedArray& bytes, const char* what) {
  Handle handle{};
  if (bytes.ByteLength() != sizeof(handle.reserved)) {
    throw Napi::RangeError::New(env, std::string(what) + " is " + std::to_string(sizeof(handle.reserved)) +
                                         " bytes, got " + std::to_string(bytes.ByteLength()));
  }
  std::memcpy(handle.reserved, static_cast<const uint8_t*>(bytes.ArrayBuffer().Data()) + bytes.ByteOffset(),
              sizeof(handle.reserved));
  return handle;
}

Memory OpenMemory(Napi::Env env, const std::shared_ptr<Slot>& slot) {
  if (!slot->memory || slot->memory->pointer == 0) throw Napi::Error::New(env, "the CUDA memory is closed");
  return slot->memory;
}

void CheckRange(Napi::Env env, const DeviceMemory& memory, size_t offset, size_t length) {
  if (offset > memory.byte_size || length > memory.byte_size - offset) {
    throw Napi::RangeError::New(env, "offset " + std::to_string(offset) + " + length " + std::to_string(length) +
                                         " is past the end of the CUDA memory (" +
                                         std::to_string(memory.byte_size) + " bytes)");
  }
}

Napi::Object MakeObject(Napi::Env env, Memory memory) {
  auto slot = std::make_shared<Slot>();
  slot->memory = std::move(memory);
  const DeviceMemory& m = *slot->memory;
  Napi::Object out = Napi::Object::New(env);
  out.Set("device", Napi::Number::New(env, m.device));
  out.Set("pointerDevice", Napi::Number::New(env, m.pointer_device));
  out.Set("byteSize", Napi::Number::New(env, static_cast<double>(m.byte_size)));
  out.Set("pointer", Napi::BigInt::New(env, static_cast<uint64_t>(m.pointer)));
  if (m.allocated) {
    out.Set("ipcHandle", Napi::Buffer<uint8_t>::Copy(env, reinterpret_cast<const uint8_t*>(m.handle.reserved),
                                                     sizeof(m.handle.reserved)));
  } else {
    out.Set("ipcHandle", env.Null());
  }

  // read(offset, length) -> Promise<Buffer>: one cuMemcpyDtoH into a new buffer.
  out.Set("read", Napi::Function::New(env, [slot](const Napi::CallbackInfo& info) -> Napi::Value {
            Napi::Env env = info.Env();
            Memory memory = OpenMemory(env, slot);
            size_t offset = SizeArgument(env, info[0], "offset");
            size_t length = SizeArgument(env, info[1], "length");
            CheckRange(env, *memory, offset, length);
            Napi::Buffer<uint8_t> target = Napi::Buffer<uint8_t>::New(env, length);
            if (length == 0) {
              auto done = Napi::Promise::Deferred::New(env);
              done.Resolve(target);
              return done.Promise();
            }
            auto* worker = new CopyWorker(env, memory, false, offset, target.Data(), length, target);
            Napi::Promise promise = worker->Promise();
            worker->Queue();
            return promise;
          }, "read"));

  // write(offset, data: TypedArray) -> Promise<void>: one cuMemcpyHtoD, then a synchronize.
  out.Set("write", Napi::Function::New(env, [slot](const Napi::CallbackInfo& info) -> Napi::Value {
            Napi::Env env = info.Env();
            Memory memory = OpenMemory(env, slot);
            size_t offset = SizeArgument(env, info[0], "offset");
            if (info.Length() < 2 || !info[1].IsTypedArray()) {
              throw Napi::TypeError::New(env, "write(offset, data): data must be a TypedArray");
            }
            Napi::TypedArray data = info[1].As<Napi::TypedArray>();
            size_t length = data.ByteLength();
            CheckRange(env, *memory, offset, length);
            if (length == 0) {
              auto done = Napi::Promise::Deferred::New(env);
              done.Resolve(env.Undefined());
              return done.Promise();
            }
            auto* host = static_cast<uint8_t*>(data.ArrayBuffer().Data()) + data.ByteOffset();
            auto* worker = new CopyWorker(env, memory, true, offset, host, length, data);
            Napi::Promise promise = worker->Promise();
            worker->Queue();
            return promise;
          }, "write"));

  // copyTo(offset, target: bigint, length, targetDevice?) -> Promise<void>: one cuMemcpyDtoD to
  // `target` (device memory the caller holds for the copy's length), or one cuMemcpyPeer when
  // `targetDevice` names another GPU; then a synchronize.
  out.Set("copyTo", Napi::Function::New(env, [slot](const Napi::CallbackInfo& info) -> Napi::Value {
            Napi::Env env = info.Env();
            Memory memory = OpenMemory(env, slot);
            size_t offset = SizeArgument(env, info[0], "offset");
            if (info.Length() < 3 || !info[1].IsBigInt()) {
              throw Napi::TypeError::New(env, "copyTo(offset, target, length): target must be a bigint");
            }
            bool lossless = true;
            uint64_t target = info[1].As<Napi::BigInt>().Uint64Value(&lossless);
            if (!lossless || target == 0) throw Napi::RangeError::New(env, "target must be a device address");
            size_t length = SizeArgument(env, info[2], "length");
            CheckRange(env, *memory, offset, length);
            int target_device = -1;
            if (info.Length() > 3 && !info[3].IsUndefined()) {
              double device = info[3].IsNumber() ? info[3].As<Napi::Number>().DoubleValue() : -1;
              if (!(device >= 0 && device <= 0x7fffffff) || device != std::floor(device)) {
                throw Napi::RangeError::New(env, "copyTo: targetDevice must be a CUDA ordinal");
              }
              target_device = static_cast<int>(device);
            }
            if (length == 0) {
              auto done = Napi::Promise::Deferred::New(env);
              done.Resolve(env.Undefined());
              return done.Promise();
            }
            auto* worker =
                new DeviceCopyWorker(env, memory, offset, static_cast<CUdeviceptr>(target), length, target_device);
            Napi::Promise promise = worker->Promise();
            worker->Queue();
            return promise;
          }, "copyTo"));

  // close(): idempotent. Releases now, or when the last copy in flight ends.
  out.Set("close", Napi::Function::New(env, [slot](const Napi::CallbackInfo& info) -> Napi::Value {
            Memory memory = std::move(slot->memory);
            if (memory && memory.use_count() == 1) {
              std::string e = memory->Release();
              if (!e.empty()) throw Napi::Error::New(info.Env(), e);
            }
            return info.Env().Undefined();
          }, "close"));
  return out;
}

// Waits on libuv's pool for another process's event (opened from its IPC handle, closed after).
class WaitEventWorker : public Napi::AsyncWorker {
 public:
  WaitEventWorker(Napi::Env env, int device, const CUipcEventHandle& handle)
      : Napi::AsyncWorker(env, "galley:cuda-wait-event"),
        deferred_(Napi::Promise::Deferred::New(env)),
        device_(device),
        handle_(handle) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    Driver& d = GetDriver();
    if (std::string e = UseDevice(d, device_); !e.empty()) return SetError(e);
    CUevent event = nullptr;
    if (std::string e = Check(d, d.cuIpcOpenEventHandle(&event, handle_), "cuIpcOpenEventHandle"); !e.empty()) {
      return SetError(e);
    }
    std::string e = Check(d, d.cuEventSynchronize(event), "cuEventSynchronize");
    d.cuEventDestroy(event);
    if (!e.empty()) SetError(e);
  }
  void OnOK() override { deferred_.Resolve(Env().Undefined()); }
  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  int device_;
  CUipcEventHandle handle_;
};

}  // namespace

Napi::Value CudaWaitEvent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsTypedArray()) {
    throw Napi::TypeError::New(env, "cudaWaitEvent(handle: Uint8Array, device: number)");
  }
  auto handle = HandleArgument<CUipcEventHandle>(env, info[0].As<Napi::TypedArray>(), "a CUDA IPC event handle");
  int device = DeviceArgument(env, info[1]);
  auto* worker = new WaitEventWorker(env, device, handle);
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value CudaIpcOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsTypedArray()) {
    throw Napi::TypeError::New(env, "cudaIpcOpen(handle: Uint8Array, device: number)");
  }
  auto handle = HandleArgument<CUipcMemHandle>(env, info[0].As<Napi::TypedArray>(), "a CUDA IPC handle");
  int device = DeviceArgument(env, info[1]);
  auto* worker = new AcquireWorker(env, false, device, 0, handle);
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value CudaAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  size_t byte_size = SizeArgument(env, info[0], "byteSize");
  if (byte_size == 0) throw Napi::RangeError::New(env, "byteSize must be positive");
  int device = DeviceArgument(env, info[1]);
  auto* worker = new AcquireWorker(env, true, device, byte_size, CUipcMemHandle{});
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

// The IPC handle of the allocation holding `pointer` (memory another library of this process
// allocated with cudaMalloc, e.g. libtorch's caching allocator) and the pointer's offset in it.
// Two driver calls of ~1-2 us each (once a thread has the primary context current), made on the
// calling thread: a trip through libuv's pool would cost two thread wake-ups, on an idle GPU host
// ~100 us or more each, for every GPU output a BLS call hands a Python stub. A settled promise,
// as before.
Napi::Value CudaExport(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsBigInt()) {
    throw Napi::TypeError::New(env, "cudaExport(pointer: bigint, device: number)");
  }
  bool lossless = true;
  uint64_t pointer = info[0].As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless || pointer == 0) throw Napi::RangeError::New(env, "pointer must be a device address");
  int device = DeviceArgument(env, info[1]);
  Napi::Promise::Deferred deferred = Napi::Promise::Deferred::New(env);
  Driver& d = GetDriver();
  CUdeviceptr base = 0;
  size_t size = 0;
  CUipcMemHandle handle{};
  std::string e = UseDevice(d, device);
  if (e.empty()) {
    e = Check(d, d.cuMemGetAddressRange(&base, &size, static_cast<CUdeviceptr>(pointer)), "cuMemGetAddressRange");
  }
  if (e.empty()) e = Check(d, d.cuIpcGetMemHandle(&handle, base), "cuIpcGetMemHandle");
  if (!e.empty()) {
    deferred.Reject(Napi::Error::New(env, e).Value());
    return deferred.Promise();
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("handle", Napi::Buffer<uint8_t>::Copy(env, reinterpret_cast<const uint8_t*>(handle.reserved),
                                                sizeof(handle.reserved)));
  out.Set("offset", Napi::Number::New(env, static_cast<double>(static_cast<CUdeviceptr>(pointer) - base)));
  out.Set("allocationSize", Napi::Number::New(env, static_cast<double>(size)));
  deferred.Resolve(out);
  return deferred.Promise();
}

}  // namespace galley
