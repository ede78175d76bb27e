"""GPU tensors in the Python stub (issue 50): DLPack capsules made in pure Python and the CUDA
driver API through ctypes, with no build step and no CUDA toolkit for users.

How a device tensor crosses between the server and the stub (design)
--------------------------------------------------------------------

Both processes use CUDA IPC (`cuIpcGetMemHandle` / `cuIpcOpenMemHandle`), which works on whole
allocations, so a tensor travels as ``{handle: 64 bytes (base64), offset, byteSize, deviceId}``:

* server -> stub (a model input with ``FORCE_CPU_ONLY_INPUT_TENSORS: "no"``, a BLS output asked
  with ``preferred_memory`` GPU): the server holds the bytes in memory it allocated with an IPC
  handle (``allocateCudaMemory`` of ``@galley/backends-native``; a kept libtorch output or a client's
  CUDA region is copied there device to device, never through the host). The stub opens the
  handle once per allocation (:class:`IpcMappings`, reference-counted, closed when the last tensor
  over it is dropped) in the device's *primary* context, the one torch's runtime uses, and hands
  the model a :class:`DLPackTensor` (``kDLCUDA``, the mapped pointer + offset):
  ``torch.from_dlpack(t)`` sees that very device memory. The server keeps the allocation until the
  stub says it dropped the tensor (the capsule's deleter ran and no ``pb_utils.Tensor`` refers to it).
* stub -> server (``pb_utils.Tensor.from_dlpack(name, cuda_tensor)`` in a response or a BLS call):
  the stub finds the tensor's allocation (``cuMemGetAddressRange``: base and size), exports it
  (``cuIpcGetMemHandle``; torch's caching allocator gives plain ``cudaMalloc`` segments, which can
  be exported) and sends handle + offset; it keeps the framework tensor alive until the server says
  it has copied it or let it go. The server opens the handle with ``openCudaIpcHandle`` (once per
  allocation, reference-counted) and uses the memory in place (a libtorch model's input, a client's
  CUDA region) or copies it to the host for a client that wants bytes (counted in the host-transfer
  metrics).

Completion is deferred to the GPU (CUDA IPC events, no device-wide synchronisation on the way):

* The stub sends its tensor with the IPC handle of an event recorded on its current stream after
  the work queued so far (:class:`EventPool`); the server's GPU work on the memory waits for the
  event on its own stream, and its host waits for it before copying the bytes. The event goes back
  to the pool when the server gives the tensor back, so it is never recorded again while the server
  may still wait on it.
* A libtorch batch whose outputs all stay on the GPU is answered as soon as its work is queued, with
  the IPC handle of an event recorded after it; the stub makes its current stream wait for that
  event when it maps the tensor (before the model's code can read it).
* A loan the model let go goes back to the server only once the GPU is past the work the model
  queued on it (a local event, queried before each frame out; waited for when the stub goes idle),
  so the server never hands the memory out again while a kernel of the stub still reads it.

Everything here that needs no device (struct layouts, capsules, the device a capsule names, the
errors when ``libcuda.so.1`` is absent) is tested on CPU machines: ``tests/test_galley_cuda.py``.
"""

import base64
import ctypes
import os
import sys
import threading

# DLPack's device types and type codes (dlpack.h).
kDLCPU = 1
kDLCUDA = 2
kDLCUDAHost = 3
kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLBool = 0, 1, 2, 4, 6

IPC_HANDLE_BYTES = 64


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


# Triton datatype -> DLPack (code, bits).
DATATYPES = {
    "BOOL": (kDLBool, 8),
    "INT8": (kDLInt, 8),
    "INT16": (kDLInt, 16),
    "INT32": (kDLInt, 32),
    "INT64": (kDLInt, 64),
    "UINT8": (kDLUInt, 8),
    "UINT16": (kDLUInt, 16),
    "UINT32": (kDLUInt, 32),
    "UINT64": (kDLUInt, 64),
    "FP16": (kDLFloat, 16),
    "FP32": (kDLFloat, 32),
    "FP64": (kDLFloat, 64),
    "BF16": (kDLBfloat, 16),
}
_FROM_DL = {v: k for k, v in DATATYPES.items()}


def datatype_of(dtype):
    """The Triton datatype of a DLDataType (None for one Triton has not)."""
    if dtype.lanes != 1:
        return None
    return _FROM_DL.get((dtype.code, dtype.bits))


# ---- capsules through the C API --------------------------------------------------------------

_api = ctypes.pythonapi
_CAPSULE_DESTRUCTOR = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.c_void_p]

# The capsule keeps a pointer to its name: these buffers live as long as the module.
_NAME = ctypes.create_string_buffer(b"dltensor")
_USED = b"used_dltensor"

# Managed tensors not yet deleted: address -> (struct, shape array, on_delete). The deleter (called
# by the consumer, or by the capsule's destructor when nobody consumed it) takes its entry out.
_live = {}
_live_lock = threading.RLock()  # re-entered when the garbage collector runs a deleter inside it


def _delete_managed(address):
    with _live_lock:
        entry = _live.pop(address, None)
    if entry is not None and entry[2] is not None:
        try:
            entry[2]()
        except Exception:  # a deleter must not raise into C
            pass


_deleter = _DELETER(_delete_managed)


def _capsule_destructor(capsule):
    # Unconsumed (still named "dltensor"): the producer deletes; a consumer renamed it "used_dltensor".
    if _api.PyCapsule_IsValid(capsule, _NAME):
        _delete_managed(_api.PyCapsule_GetPointer(capsule, _NAME))


_destructor = _CAPSULE_DESTRUCTOR(_capsule_destructor)


def live_count():
    """Managed tensors made here whose deleter has not run (tests check leaks with it)."""
    with _live_lock:
        return len(_live)


def make_capsule(pointer, device_type, device_id, datatype, shape, on_delete=None):
    """A DLPack capsule ("dltensor") over `pointer` (C order, no strides) whose deleter calls
    `on_delete` once: when the consumer drops the tensor it made, or when the capsule is dropped unused."""
    if datatype not in DATATYPES:
        raise ValueError("DLPack does not support %s tensors" % datatype)
    code, bits = DATATYPES[datatype]
    shape = [int(d) for d in shape]
    managed = DLManagedTensor()
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    managed.dl_tensor.data = ctypes.c_void_p(int(pointer))
    managed.dl_tensor.device = DLDevice(device_type, device_id)
    managed.dl_tensor.ndim = len(shape)
    managed.dl_tensor.dtype = DLDataType(code, bits, 1)
    managed.dl_tensor.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    managed.dl_tensor.strides = None
    managed.dl_tensor.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _deleter
    address = ctypes.addressof(managed)
    with _live_lock:
        _live[address] = (managed, dims, on_delete)
    return _api.PyCapsule_New(address, _NAME, _destructor)


def capsule_info(capsule):
    """(device_type, device_id, datatype, shape, data pointer) of an unconsumed "dltensor" capsule."""
    address = id(capsule)
    if not _api.PyCapsule_IsValid(address, _NAME):
        raise ValueError("not an unconsumed DLPack capsule")
    managed = DLManagedTensor.from_address(_api.PyCapsule_GetPointer(address, _NAME))
    t = managed.dl_tensor
    shape = [t.shape[i] for i in range(t.ndim)]
    return t.device.device_type, t.device.device_id, datatype_of(t.dtype), shape, (t.data or 0) + t.byte_offset


def capsule_contiguous(capsule):
    """Whether an unconsumed "dltensor" capsule's tensor is in C order (no strides, or C strides)."""
    address = id(capsule)
    t = DLManagedTensor.from_address(_api.PyCapsule_GetPointer(address, _NAME)).dl_tensor
    if not t.strides:
        return True
    expected = 1
    for i in reversed(range(t.ndim)):
        if t.shape[i] != 1 and t.strides[i] != expected:
            return False
        expected *= t.shape[i]
    return True


class DLPackTensor:
    """Memory at `pointer` as an object `torch.from_dlpack` / `np.from_dlpack` take (`__dlpack__`).
    Each `__dlpack__` call makes a capsule; `keep` (the mapping, the server's reference) lives as long
    as this object and every tensor a consumer made from it."""

    def __init__(self, pointer, device_type, device_id, datatype, shape, keep=None):
        self.pointer = int(pointer)
        self.device = (int(device_type), int(device_id))
        self.datatype = datatype
        self.shape = [int(d) for d in shape]
        self.keep = keep

    def __dlpack__(self, stream=None):
        # No max_version: consumers (torch, numpy 2) retry without it and take an unversioned capsule.
        holder = self  # the consumer's tensor keeps this object (and so `keep`) until its deleter
        return make_capsule(self.pointer, self.device[0], self.device[1], self.datatype, self.shape, lambda: holder)

    def __dlpack_device__(self):
        return self.device


# ---- the CUDA driver -------------------------------------------------------------------------


class CudaUnavailable(Exception):
    """The stub cannot use CUDA: no libcuda.so.1 (no driver), or the driver refused to start."""


class CudaError(Exception):
    pass


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]


CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1


class Driver:
    """The CUDA driver API through ctypes (`GALLEY_LIBCUDA` names another library, for tests).
    With `start=False` the library is only loaded and its entry points resolved: no driver call is
    made (no `cuInit`) until `start`."""

    def __init__(self, library=None, start=True):
        name = library or os.environ.get("GALLEY_LIBCUDA") or "libcuda.so.1"
        try:
            self._lib = ctypes.CDLL(name)
        except OSError as error:
            raise CudaUnavailable("the CUDA driver (%s) cannot be loaded: %s" % (name, error))
        lib = self._lib

        def fn(*names):
            for n in names:
                f = getattr(lib, n, None)
                if f is not None:
                    f.restype = ctypes.c_int
                    return f
            raise CudaUnavailable("the CUDA driver (%s) has no %s" % (name, names[0]))

        self._init = fn("cuInit")
        self._device_get = fn("cuDeviceGet")
        self._retain = fn("cuDevicePrimaryCtxRetain")
        self._set_current = fn("cuCtxSetCurrent")
        self._ipc_open = fn("cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle")
        self._ipc_close = fn("cuIpcCloseMemHandle")
        self._ipc_get = fn("cuIpcGetMemHandle")
        self._range = fn("cuMemGetAddressRange_v2", "cuMemGetAddressRange")
        self._sync = fn("cuCtxSynchronize")
        self._event_create = fn("cuEventCreate")
        self._event_record = fn("cuEventRecord")
        self._event_query = fn("cuEventQuery")
        self._event_sync = fn("cuEventSynchronize")
        self._event_destroy = fn("cuEventDestroy_v2", "cuEventDestroy")
        self._ipc_event_get = fn("cuIpcGetEventHandle")
        self._ipc_event_open = fn("cuIpcOpenEventHandle")
        self._stream_wait = fn("cuStreamWaitEvent")
        self._events_opened = {}  # (handle bytes, device) -> CUevent: another process's events, kept
        self._error_string = getattr(lib, "cuGetErrorString", None)
        self._contexts = {}
        self._lock = threading.RLock()
        self._started = False
        if start:
            self.start()

    def start(self):
        """`cuInit` (once). It creates no context: that is `use`'s `cuDevicePrimaryCtxRetain`."""
        with self._lock:
            if not self._started:
                self._check(self._init(0), "cuInit")
                self._started = True

    def _check(self, status, what):
        if status != 0:
            text = ctypes.c_char_p()
            if self._error_string is not None:
                self._error_string(status, ctypes.byref(text))
            raise CudaError("%s failed: %s (%d)" % (what, (text.value or b"unknown error").decode(), status))

    def use(self, device):
        """Make `device`'s primary context (torch's) current on this thread."""
        with self._lock:
            context = self._contexts.get(device)
            if context is None:
                handle = ctypes.c_int()
                self._check(self._device_get(ctypes.byref(handle), device), "cuDeviceGet(%d)" % device)
                context = ctypes.c_void_p()
                self._check(self._retain(ctypes.byref(context), handle), "cuDevicePrimaryCtxRetain(%d)" % device)
                self._contexts[device] = context
        self._check(self._set_current(context), "cuCtxSetCurrent")

    def open(self, handle, device):
        """Map another process's allocation (64 handle bytes) on `device`: its address here."""
        if len(handle) != IPC_HANDLE_BYTES:
            raise CudaError("a CUDA IPC handle is %d bytes, got %d" % (IPC_HANDLE_BYTES, len(handle)))
        self.use(device)
        pointer = ctypes.c_uint64()
        raw = _IpcHandle()
        ctypes.memmove(ctypes.byref(raw), bytes(handle), IPC_HANDLE_BYTES)
        self._check(self._ipc_open(ctypes.byref(pointer), raw, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
        return pointer.value

    def close(self, pointer, device):
        """Unmap memory `open` mapped, once the work queued on the device (which may read it) is done."""
        self.use(device)
        self._check(self._sync(), "cuCtxSynchronize")
        self._check(self._ipc_close(ctypes.c_uint64(pointer)), "cuIpcCloseMemHandle")

    def export(self, pointer, device):
        """(handle bytes, offset of `pointer` in its allocation, allocation size) of device memory here."""
        self.use(device)
        base = ctypes.c_uint64()
        size = ctypes.c_size_t()
        self._check(self._range(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer)), "cuMemGetAddressRange")
        raw = _IpcHandle()
        self._check(self._ipc_get(ctypes.byref(raw), base), "cuIpcGetMemHandle")
        return ctypes.string_at(ctypes.addressof(raw), IPC_HANDLE_BYTES), pointer - base.value, size.value

    def synchronize(self, device):
        self.use(device)
        self._check(self._sync(), "cuCtxSynchronize")

    # ---- events (deferred completion) ----

    def event(self, device, interprocess):
        """A new event on `device` (timing off), shareable with other processes when `interprocess`."""
        self.use(device)
        event = ctypes.c_void_p()
        flags = CU_EVENT_DISABLE_TIMING | (CU_EVENT_INTERPROCESS if interprocess else 0)
        self._check(self._event_create(ctypes.byref(event), flags), "cuEventCreate")
        return event

    def event_handle(self, event):
        raw = _IpcHandle()
        self._check(self._ipc_event_get(ctypes.byref(raw), event), "cuIpcGetEventHandle")
        return ctypes.string_at(ctypes.addressof(raw), IPC_HANDLE_BYTES)

    def record(self, event, device):
        """Record `event` after the work queued so far on the current stream (see `current_stream`)."""
        self.use(device)
        self._check(self._event_record(event, ctypes.c_void_p(current_stream(device))), "cuEventRecord")

    def done(self, event):
        """Whether the work before the event's last record has ended (cuEventQuery)."""
        status = self._event_query(event)
        if status == CUDA_ERROR_NOT_READY:
            return False
        self._check(status, "cuEventQuery")
        return True

    def wait_event(self, event):
        self._check(self._event_sync(event), "cuEventSynchronize")

    def destroy_event(self, event):
        self._check(self._event_destroy(event), "cuEventDestroy")

    def wait_imported(self, handle, device):
        """Make the current stream wait for another process's event, named by its 64 handle bytes."""
        if len(handle) != IPC_HANDLE_BYTES:
            raise CudaError("a CUDA IPC event handle is %d bytes, got %d" % (IPC_HANDLE_BYTES, len(handle)))
        self.use(device)
        key = (bytes(handle), device)
        with self._lock:
            event = self._events_opened.get(key)
            if event is None:
                raw = _IpcHandle()
                ctypes.memmove(ctypes.byref(raw), key[0], IPC_HANDLE_BYTES)
                event = ctypes.c_void_p()
                self._check(self._ipc_event_open(ctypes.byref(event), raw), "cuIpcOpenEventHandle")
                # The server keeps its events for its life and reuses a few: this stays small.
                self._events_opened[key] = event
        self._check(self._stream_wait(ctypes.c_void_p(current_stream(device)), event, 0), "cuStreamWaitEvent")


CU_EVENT_DISABLE_TIMING = 0x2
CU_EVENT_INTERPROCESS = 0x4
CUDA_ERROR_NOT_READY = 600


def current_stream(device):
    """The stream a model's work on `device` is queued on: torch's current stream where torch has
    started CUDA in this process, else the legacy default stream (0, which also orders the
    context's other blocking streams)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return int(torch.cuda.current_stream(device).cuda_stream)
    except Exception:  # noqa: BLE001 - a torch without CUDA: the legacy stream
        pass
    return 0


class EventPool:
    """Interprocess events of one stub (every device), each lent to the server with one tensor and
    recorded again only once the server gave that tensor back."""

    def __init__(self, drv):
        self._driver = drv
        self._idle = {}  # device -> [(event, handle bytes)]
        self._lock = threading.Lock()

    def take(self, device):
        """(event, handle bytes) recorded now on `device`'s current stream."""
        with self._lock:
            idle = self._idle.setdefault(device, [])
            entry = idle.pop() if idle else None
        if entry is None:
            event = self._driver.event(device, True)
            entry = (event, self._driver.event_handle(event))
        try:
            self._driver.record(entry[0], device)
        except Exception:
            self.give(device, entry)
            raise
        return entry

    def give(self, device, entry):
        with self._lock:
            self._idle.setdefault(device, []).append(entry)


# A stub touches the driver only when a GPU tensor first comes or goes (issue 50, item 3): at start
# it only checks that the driver loads (`probe`); `driver` calls cuInit. cuInit makes no context
# (no GPU memory: the primary context is made by `Driver.use`, or by torch's runtime), but it does
# start the driver in the process (its threads and host memory, a process a model forks no longer
# able to use CUDA), none of which a model that never sees a GPU tensor should pay for.
_driver = None  # started (cuInit done)
_loaded = None  # loaded by `probe`, not started
_driver_error = None
_driver_lock = threading.Lock()


def probe():
    """Whether this process can use CUDA, without a driver call: libcuda.so.1 loads and has the
    entry points the stub uses. Raises CudaUnavailable (the same one each time) if not."""
    global _loaded, _driver_error
    with _driver_lock:
        if _driver is not None:
            return True
        if _driver_error is None and _loaded is None:
            try:
                _loaded = Driver(start=False)
            except CudaUnavailable as error:
                _driver_error = error
        if _driver_error is not None:
            raise _driver_error
        return True


def driver():
    """The process's Driver, started once; raises CudaUnavailable (the same one each time) without CUDA."""
    global _driver, _loaded, _driver_error
    with _driver_lock:
        if _driver is None and _driver_error is None:
            try:
                drv = _loaded if _loaded is not None else Driver(start=False)
                drv.start()
                _driver, _loaded = drv, None
            except (CudaUnavailable, CudaError) as error:
                _driver_error = CudaUnavailable(str(error))
        if _driver is None:
            raise _driver_error
        return _driver


class IpcMappings:
    """The allocations of the server mapped here: one mapping per handle. One no tensor uses stays
    mapped while it is among the `idle` most recently used (the server hands the same allocations
    out again: libtorch's, a client's region), and is closed when pushed out or by `close_all`."""

    IDLE = 16

    def __init__(self, drv, idle=IDLE):
        self._driver = drv
        self._idle = idle
        self._maps = {}  # (handle bytes, device) -> [pointer, count], least recently released first
        # Re-entrant: the garbage collector may drop a tensor (and release its mapping) inside it.
        self._lock = threading.RLock()

    def acquire(self, handle, device):
        key = (bytes(handle), device)
        with self._lock:
            entry = self._maps.get(key)
            if entry is None:
                entry = self._maps[key] = [self._driver.open(key[0], device), 0]
            entry[1] += 1
            return entry[0]

    def release(self, handle, device):
        key = (bytes(handle), device)
        closing = []
        with self._lock:
            entry = self._maps.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            # Idle: kept, most recently released last; the oldest idle ones beyond the limit go.
            del self._maps[key]
            self._maps[key] = entry
            idle = [k for k, e in self._maps.items() if e[1] == 0]
            for k in idle[: max(0, len(idle) - self._idle)]:
                closing.append((k, self._maps.pop(k)[0]))
        for (_, dev), pointer in closing:
            self._driver.close(pointer, dev)

    def close_all(self):
        """Close every idle mapping (those in use close when their last tensor goes)."""
        with self._lock:
            closing = [(k, e[0]) for k, e in self._maps.items() if e[1] == 0]
            for k, _ in closing:
                del self._maps[k]
        for (_, dev), pointer in closing:
            self._driver.close(pointer, dev)

    def in_use(self):
        """How many mappings tensors use now."""
        with self._lock:
            return sum(1 for e in self._maps.values() if e[1] > 0)

    def __len__(self):
        return len(self._maps)


class _Mapped:
    """One tensor's hold on a mapping (released when the DLPackTensor and its consumers are gone)."""

    def __init__(self, mappings, handle, device, on_release=None):
        self.mappings, self.handle, self.device, self.on_release = mappings, handle, device, on_release

    def __del__(self):
        try:
            self.mappings.release(self.handle, self.device)
        finally:
            if self.on_release is not None:
                self.on_release()


def open_tensor(mappings, wire, datatype, shape, on_release=None):
    """A DLPackTensor over a server allocation: `wire` is {handle (base64), offset, deviceId, and
    `event` where the work writing it may still run: the current stream waits for it}."""
    handle = base64.b64decode(wire["handle"])
    device = int(wire["deviceId"])
    if wire.get("event"):
        mappings._driver.wait_imported(base64.b64decode(wire["event"]), device)
    base = mappings.acquire(handle, device)
    keep = _Mapped(mappings, handle, device, on_release)
    return DLPackTensor(base + int(wire.get("offset", 0)), kDLCUDA, device, datatype, shape, keep)


def export_tensor(obj):
    """{handle (base64), offset, deviceId, byteSize} of a CUDA tensor with `__dlpack__` (C order),
    after the device has finished the work queued on it."""
    capsule = obj.__dlpack__()
    device_type, device_id, datatype, shape, pointer = capsule_info(capsule)
    if device_type != kDLCUDA:
        raise ValueError("not a CUDA tensor")
    if not capsule_contiguous(capsule):
        raise ValueError("DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in C-Order are supported.")
    drv = driver()
    drv.synchronize(device_id)
    handle, offset, _size = drv.export(pointer, device_id)
    count = 1
    for d in shape:
        count *= d
    bits = DATATYPES[datatype][1] if datatype else 8
    return {
        "handle": base64.b64encode(handle).decode(),
        "offset": offset,
        "deviceId": device_id,
        "byteSize": count * bits // 8,
    }
