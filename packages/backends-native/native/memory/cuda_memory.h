// Device memory shared between processes with CUDA IPC (Triton's CUDA shared-memory extension):
// open a cudaIpcMemHandle_t another process made, allocate memory and make a handle for it, and
// copy between that memory and Node buffers or other device memory. The driver API is loaded at run time (dlopen of
// libcuda.so.1, as cuda_probe.cc does): the addon builds and loads where CUDA is absent, and every
// function then rejects with the loader's reason.
#pragma once

#include <napi.h>

namespace galley {

// cudaIpcOpen(handle: Uint8Array(64), device) -> Promise<CudaMemory>: cuIpcOpenMemHandle in the
// device's primary context. cudaAlloc(byteSize, device) -> Promise<CudaMemory>: cuMemAlloc.
// The object resolved has device, byteSize (the whole allocation, from cuMemGetAddressRange),
// pointerDevice (cuPointerGetAttribute), pointer (BigInt), ipcHandle (allocations only),
// read(offset, length) -> Promise<Buffer>, write(offset, data) -> Promise<void>, close().
// Arguments are validated in TypeScript (src/cuda-memory.ts) and again here; every CUresult
// becomes an Error that names the call and the driver's text; nothing throws across a thread.
Napi::Value CudaIpcOpen(const Napi::CallbackInfo& info);
Napi::Value CudaAlloc(const Napi::CallbackInfo& info);
// cudaExport(pointer: bigint, device) -> Promise<{handle, offset, allocationSize}>: the IPC handle of
// the allocation holding device memory this process got elsewhere (libtorch's), and the offset.
Napi::Value CudaExport(const Napi::CallbackInfo& info);
// cudaWaitEvent(handle: Uint8Array(64), device) -> Promise<void>: once the work another process
// recorded the event after (its IPC handle) is done; the host waits on a worker thread.
Napi::Value CudaWaitEvent(const Napi::CallbackInfo& info);

}  // namespace galley
