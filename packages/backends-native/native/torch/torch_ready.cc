#include "torch_ready.h"

#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

namespace galley {

#ifdef GALLEY_TORCH_CUDA
namespace {

void Check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it for the next call on this thread
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(status));
  }
}

// Idle events per device. Never destroyed: a stub may have opened them, and an event must outlive
// every process's use of its handle.
std::mutex pool_mutex;
std::map<int, std::vector<ReadyEvent*>> pool;

void GiveBack(ReadyEvent* ready) {
  std::lock_guard<std::mutex> lock(pool_mutex);
  pool[ready->device].push_back(ready);
}

// Other processes' events opened here: (device, handle) -> event, most recently used last.
constexpr size_t kImportedLimit = 256;
struct Imported {
  std::mutex mutex;
  std::list<std::pair<std::string, cudaEvent_t>> order;
  std::unordered_map<std::string, std::list<std::pair<std::string, cudaEvent_t>>::iterator> by_key;
};
Imported imported;

}  // namespace

std::shared_ptr<ReadyEvent> RecordReady(int device, cudaStream_t stream) {
  ReadyEvent* ready = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool_mutex);
    auto& idle = pool[device];
    if (!idle.empty()) {
      ready = idle.back();
      idle.pop_back();
    }
  }
  if (ready == nullptr) {
    auto made = std::make_unique<ReadyEvent>();
    made->device = device;
    Check(cudaEventCreateWithFlags(&made->event, cudaEventDisableTiming | cudaEventInterprocess), "cudaEventCreateWithFlags");
    cudaError_t status = cudaIpcGetEventHandle(&made->handle, made->event);
    if (status != cudaSuccess) {
      cudaEventDestroy(made->event);
      Check(status, "cudaIpcGetEventHandle");
    }
    ready = made.release();
  }
  cudaError_t status = cudaEventRecord(ready->event, stream);
  if (status != cudaSuccess) {
    GiveBack(ready);
    Check(status, "cudaEventRecord");
  }
  return std::shared_ptr<ReadyEvent>(ready, GiveBack);
}

void WaitReady(const ReadyEvent& ready, cudaStream_t stream) {
  Check(cudaStreamWaitEvent(stream, ready.event, 0), "cudaStreamWaitEvent");
}

void WaitImported(int device, const std::string& handle, cudaStream_t stream) {
  if (handle.size() != kIpcEventHandleBytes) {
    throw std::invalid_argument("a CUDA IPC event handle is 64 bytes, got " + std::to_string(handle.size()));
  }
  std::string key = std::to_string(device) + ":" + handle;
  cudaEvent_t event = nullptr;
  std::lock_guard<std::mutex> lock(imported.mutex);
  auto found = imported.by_key.find(key);
  if (found != imported.by_key.end()) {
    imported.order.splice(imported.order.end(), imported.order, found->second);
    event = found->second->second;
  } else {
    cudaIpcEventHandle_t raw;
    std::memcpy(&raw, handle.data(), kIpcEventHandleBytes);
    Check(cudaIpcOpenEventHandle(&event, raw), "cudaIpcOpenEventHandle");
    imported.order.emplace_back(key, event);
    imported.by_key[key] = std::prev(imported.order.end());
    if (imported.order.size() > kImportedLimit) {
      // The oldest: its process has most likely gone (a restarted stub). Destroying our import is
      // allowed whatever its creator does; work already told to wait on it keeps waiting.
      cudaEventDestroy(imported.order.front().second);
      imported.by_key.erase(imported.order.front().first);
      imported.order.pop_front();
    }
  }
  Check(cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent");
}

std::string ReadyHandle(const ReadyEvent& ready) {
  return std::string(reinterpret_cast<const char*>(&ready.handle), kIpcEventHandleBytes);
}
#else
std::string ReadyHandle(const ReadyEvent&) { return std::string(); }
#endif

}  // namespace galley
