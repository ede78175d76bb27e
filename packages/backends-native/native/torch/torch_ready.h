// Deferred completion on a GPU (issue 50): a batch whose outputs all stay on the device is answered
// as soon as its work is queued, with an interprocess CUDA event recorded after that work. Whoever
// reads the outputs waits for the event first: another stream of this process (cudaStreamWaitEvent),
// a Python stub (which opens the event by its IPC handle and makes its stream wait), or a host
// thread. Events of other processes (a stub's inputs, recorded after the work that wrote them) are
// opened here by their handles and waited on by the instance's stream.
#pragma once

#include <memory>
#include <string>

#ifdef GALLEY_TORCH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace galley {

/** CUDA IPC event handles are this many bytes (cudaIpcEventHandle_t). */
constexpr size_t kIpcEventHandleBytes = 64;

/**
 * An event recorded after a deferred batch's work on its instance's stream. Pooled per device:
 * back in the pool (to be recorded again) only when every holder — the batch's kept outputs and
 * their views — has let it go, so no reader ever waits on a later record than its own.
 */
struct ReadyEvent {
  int device = 0;
#ifdef GALLEY_TORCH_CUDA
  cudaEvent_t event = nullptr;
  cudaIpcEventHandle_t handle{};
#endif
};

#ifdef GALLEY_TORCH_CUDA
/** A pooled event of `device` recorded on `stream` (the device is current on the calling thread). */
std::shared_ptr<ReadyEvent> RecordReady(int device, cudaStream_t stream);

/** Make `stream` wait for `ready` (the device is current). */
void WaitReady(const ReadyEvent& ready, cudaStream_t stream);

/**
 * Make `stream` wait for another process's event, named by its IPC handle bytes (64). Each handle
 * is opened once and kept (the 256 most recently used; a stub reuses its events).
 */
void WaitImported(int device, const std::string& handle, cudaStream_t stream);
#endif

/** The IPC handle bytes of `ready` (empty without CUDA). */
std::string ReadyHandle(const ReadyEvent& ready);

}  // namespace galley
