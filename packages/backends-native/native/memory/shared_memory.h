// Maps a POSIX shared-memory object (or any file) into this process as an external ArrayBuffer:
// JS reads and writes the mapped pages themselves, no copy. Used by the Python backend (tensors
// exchanged through /dev/shm) and the system-shared-memory registry.
#pragma once

#include <napi.h>

namespace galley {

// mapSharedMemory(path, byteLength, offset, create) -> { buffer, unmap(buffer) }.
// Arguments are validated in TypeScript (src/shared-memory.ts); this checks them again and
// throws a JS Error, never crashes. open + mmap of tmpfs do not block, so this runs on the JS thread.
Napi::Value MapSharedMemory(const Napi::CallbackInfo& info);

}  // namespace galley
