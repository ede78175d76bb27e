#include "shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

namespace galley {
namespace {

// One mapping, shared by the ArrayBuffer's finalizer and the unmap function: whichever runs
// first munmaps, the other finds `unmapped` set. Both run on the JS thread; the flag is atomic
// anyway so that exactly-once does not depend on that.
struct Mapping {
  void* base = nullptr;   // page-aligned, as mmap returned it
  size_t length = 0;      // mapped length, from base
  char* data = nullptr;   // base + (offset - aligned offset): what the ArrayBuffer exposes
  size_t byte_length = 0;
  std::atomic<bool> unmapped{false};

  void Unmap() {
    if (!unmapped.exchange(true)) munmap(base, length);
  }
};

// 2^53: larger numbers are not exact in JS.
constexpr double kMaxSafeInteger = 9007199254740992.0;

[[noreturn]] void Fail(Napi::Env env, const std::string& path, const std::string& reason) {
  throw Napi::Error::New(env, "Unable to map shared memory '" + path + "': " + reason);
}

uint64_t SizeArgument(Napi::Env env, const std::string& path, const Napi::Value& value, const char* name,
                      bool positive) {
  double number = value.IsNumber() ? value.As<Napi::Number>().DoubleValue() : -1;
  if (!(number >= (positive ? 1 : 0)) || number >= kMaxSafeInteger || std::floor(number) != number) {
    Fail(env, path,
         std::string(name) + (positive ? " must be a positive integer" : " must be a non-negative integer"));
  }
  return static_cast<uint64_t>(number);
}

// Closes the descriptor, and removes the file if this call created it, unless released.
class OpenFile {
 public:
  OpenFile(int fd, std::string path, bool created) : fd_(fd), path_(std::move(path)), created_(created) {}
  ~OpenFile() {
    if (fd_ >= 0) close(fd_);
    if (created_) unlink(path_.c_str());
  }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  int fd() const { return fd_; }
  void Keep() { created_ = false; }

 private:
  int fd_;
  std::string path_;
  bool created_;
};

}  // namespace

Napi::Value MapSharedMemory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 4 || !info[0].IsString() || !info[3].IsBoolean()) {
    throw Napi::TypeError::New(env, "mapSharedMemory(path: string, byteLength, offset, create: boolean)");
  }
  const std::string path = info[0].As<Napi::String>().Utf8Value();
  const uint64_t byte_length = SizeArgument(env, path, info[1], "byteLength", true);
  const uint64_t offset = SizeArgument(env, path, info[2], "offset", false);
  const bool create = info[3].As<Napi::Boolean>().Value();
  if (path.empty() || path.find('\0') != std::string::npos) Fail(env, path, "the path must be a non-empty string");
  const uint64_t end = offset + byte_length;  // both < 2^53: no overflow

  int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
  OpenFile file(open(path.c_str(), flags, 0600), path, create);
  if (file.fd() < 0) {
    file.Keep();  // nothing was created
    Fail(env, path, std::strerror(errno));
  }
  if (create) {
    if (ftruncate(file.fd(), static_cast<off_t>(end)) != 0) Fail(env, path, std::strerror(errno));
  } else {
    struct stat st;
    if (fstat(file.fd(), &st) != 0) Fail(env, path, std::strerror(errno));
    const uint64_t size = st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : 0;
    if (end > size) {
      Fail(env, path,
           "byteLength " + std::to_string(byte_length) + " at offset " + std::to_string(offset) +
               " is beyond the file's size (" + std::to_string(size) + " bytes)");
    }
  }

  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t aligned = offset - offset % page;
  const uint64_t delta = offset - aligned;
  auto mapping = std::make_shared<Mapping>();
  mapping->length = static_cast<size_t>(byte_length + delta);
  mapping->byte_length = static_cast<size_t>(byte_length);
  void* base = mmap(nullptr, mapping->length, PROT_READ | PROT_WRITE, MAP_SHARED, file.fd(),
                    static_cast<off_t>(aligned));
  if (base == MAP_FAILED) Fail(env, path, std::strerror(errno));
  mapping->base = base;
  mapping->data = static_cast<char*>(base) + delta;
  file.Keep();  // the mapping outlives the descriptor, closed here

  Napi::ArrayBuffer buffer;
  try {
    // The finalizer runs when the ArrayBuffer is collected (or at environment teardown), whether
    // or not unmap ran first.
    buffer = Napi::ArrayBuffer::New(env, mapping->data, mapping->byte_length,
                                    [mapping](Napi::Env, void*) { mapping->Unmap(); });
  } catch (const Napi::Error& error) {
    mapping->Unmap();
    Fail(env, path,
         "cannot create an ArrayBuffer over the mapping (" + error.Message() +
             "); Node.js builds with the V8 sandbox, such as Electron's, do not allow external ArrayBuffers");
  }

  // unmap(buffer): detach the ArrayBuffer (views over it become empty), then munmap. Idempotent.
  // Detach comes first so that no JS value can reach the pages once they are gone. A buffer that
  // is already detached was transferred (structuredClone, postMessage): its new owner still uses
  // the pages, so they are unmapped when that one is collected, not now.
  Napi::Function unmap = Napi::Function::New(
      env,
      [mapping](const Napi::CallbackInfo& call) {
        if (mapping->unmapped.load()) return;
        if (call.Length() < 1 || !call[0].IsArrayBuffer()) {
          throw Napi::TypeError::New(call.Env(), "unmap(buffer): the mapping's ArrayBuffer expected");
        }
        Napi::ArrayBuffer ab = call[0].As<Napi::ArrayBuffer>();
        if (ab.IsDetached()) return;
        if (ab.Data() != mapping->data || ab.ByteLength() != mapping->byte_length) {
          throw Napi::TypeError::New(call.Env(), "unmap(buffer): not this mapping's ArrayBuffer");
        }
        ab.Detach();
        mapping->Unmap();
      },
      "unmap");

  Napi::Object out = Napi::Object::New(env);
  out.Set("buffer", buffer);
  out.Set("unmap", unmap);
  return out;
}

}  // namespace galley
