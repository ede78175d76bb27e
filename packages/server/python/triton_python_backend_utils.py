# triton_python_backend_utils for Galley: the names and behaviour of Triton's Python backend
# utilities (`import triton_python_backend_utils as pb_utils`), written for Galley's stub.
# Standard library and numpy only; works with numpy 1.24 and 2.x.

import asyncio
import base64
import enum
import json
import operator
import threading
import weakref

import numpy as np

import galley_cuda

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2

# A keyword argument left out (Triton's default), told apart from one given as None.
_DEFAULT = object()

# The stub's runtime (the pipe, shared memory, BLS calls); see galley_python_stub. A process that
# runs several instances (SHARED_STUB_PROCESS) has one runtime per instance: the threads of each
# know theirs (`_local.runtime`), and `_runtime` is then the first still open, for threads that
# none of them started.
_runtime = None
_local = threading.local()


# The model's version folder (the folder of `model.py`; for a Python-based backend, the model's own),
# set by the stub before the model file is imported.
_model_dir = None


def get_model_dir():
    """The model's version folder (`<repository>/<model>/<version>`), as Triton's stub answers it."""
    if _model_dir is None:
        raise TritonModelException("get_model_dir() is only available in a model run by Galley's Python backend stub")
    return _model_dir


def _current():
    """The runtime of the instance this thread works for, or None outside a stub."""
    runtime = getattr(_local, "runtime", None)
    return runtime if runtime is not None else _runtime


def _rt():
    runtime = _current()
    if runtime is None:
        raise TritonModelException("triton_python_backend_utils is used outside a Galley Python backend stub")
    return runtime


class _using:  # noqa: N801 - used as a statement: `with _using(runtime):`
    """Work for `runtime` on this thread meanwhile (its shared memory, its pipe)."""

    __slots__ = ("runtime", "before")

    def __init__(self, runtime):
        self.runtime = runtime

    def __enter__(self):
        self.before = getattr(_local, "runtime", None)
        _local.runtime = self.runtime

    def __exit__(self, *_):
        _local.runtime = self.before


# ---- errors --------------------------------------------------------------------------------


class TritonError(Exception):
    """An error with a Triton code, given to InferenceResponse(error=...) or raised."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    _NAMES = {
        0: "UNKNOWN",
        1: "INTERNAL",
        2: "NOT_FOUND",
        3: "INVALID_ARG",
        4: "UNAVAILABLE",
        5: "UNSUPPORTED",
        6: "ALREADY_EXISTS",
        7: "CANCELLED",
    }

    def __init__(self, message, code=INTERNAL):
        super().__init__(message)
        self._message = str(message)
        self._code = code if code in TritonError._NAMES else TritonError.INTERNAL

    def message(self):
        return self._message

    def code(self):
        return self._code

    def __str__(self):
        return self._message


class TritonModelException(Exception):
    """Raised by pb_utils when a call cannot be done (Triton's pb_utils.TritonModelException)."""

    def message(self):
        return str(self)


def _code_name(code):
    return TritonError._NAMES.get(code, "INTERNAL")


def _code_from_name(name):
    for code, text in TritonError._NAMES.items():
        if text == name:
            return code
    return TritonError.INTERNAL


# ---- datatypes -----------------------------------------------------------------------------

_TRITON_TO_NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}

# Triton's TRITONSERVER_DataType numbers, for triton_to_numpy_type / numpy_to_triton_type.
_TYPE_NUMBERS = {
    "BOOL": 1,
    "UINT8": 2,
    "UINT16": 3,
    "UINT32": 4,
    "UINT64": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FP16": 10,
    "FP32": 11,
    "FP64": 12,
    "BYTES": 13,
    "BF16": 14,
}


# A config's `data_type` as numpy's type (Triton's table: TYPE_BF16 has none).
TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


def triton_string_to_numpy(triton_type_string):
    """`TYPE_FP32` (a config's data_type) as numpy's type; KeyError for a name not in the table, as Triton."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def using_decoupled_model_transaction_policy(model_config):
    """Whether a model's config (the dict of `json.loads(args["model_config"])`) makes it decoupled."""
    if "model_transaction_policy" in model_config:
        return model_config["model_transaction_policy"]["decoupled"]
    return False


def triton_to_numpy_type(data_type):
    for name, number in _TYPE_NUMBERS.items():
        if number == data_type:
            return _TRITON_TO_NUMPY.get(name)
    return None


_NUMPY_TO_TRITON = {np.dtype(t): name for name, t in _TRITON_TO_NUMPY.items() if t is not np.object_}


def _datatype_of(array):
    kind = array.dtype
    if kind.kind in "OSU":
        return "BYTES"
    return _NUMPY_TO_TRITON.get(kind)


def numpy_to_triton_type(data_type):
    name = _datatype_of(np.empty(0, dtype=data_type))
    return _TYPE_NUMBERS.get(name) if name else None


def serialize_byte_tensor(input_tensor):
    """A BYTES array as Triton's wire form: each element's length (4 bytes, little-endian), then its bytes."""
    if input_tensor.size == 0:
        return np.empty([0], dtype=np.object_)
    parts = []
    for item in input_tensor.reshape(-1, order="C"):
        if isinstance(item, np.ndarray):
            item = item.item()
        if isinstance(item, (bytes, bytearray, np.bytes_)):
            data = bytes(item)
        else:
            data = str(item).encode("utf-8")
        parts.append(len(data).to_bytes(4, "little"))
        parts.append(data)
    flat = b"".join(parts)
    return np.frombuffer(flat, dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor):
    """Triton's wire form of a BYTES tensor as a flat object array of bytes."""
    data = memoryview(np.asarray(encoded_tensor, dtype=np.uint8).reshape(-1)).cast("B")
    items = []
    at = 0
    end = len(data)
    while at + 4 <= end:
        length = int.from_bytes(data[at : at + 4], "little")
        at += 4
        if at + length > end:
            raise TritonModelException("Invalid bytes tensor data: string extends beyond buffer")
        items.append(bytes(data[at : at + length]))
        at += length
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


# ---- tensors -------------------------------------------------------------------------------


class PreferredMemory:
    """Where a BLS call's outputs should be (Triton's PreferredMemory). TRITONSERVER_MEMORY_GPU keeps
    the outputs a model makes on that GPU there: tensors with is_cpu() False, handed to the next
    call without a copy through host memory. From a model elsewhere the outputs are host tensors."""

    def __init__(self, preferred_memory_type=TRITONSERVER_MEMORY_CPU, preferred_device_id=0):
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class _Held:
    """A tensor the server holds on a GPU for this model (a BLS output): released when no Tensor
    refers to it any more (or when the requests of the batch that made the call have ended).
    `loan`: the server's CUDA IPC loan of its memory, sent with the reply where it cost no copy;
    mapped on first use, given back unopened if never used."""

    def __init__(self, device, datatype, shape, loan=None):
        self.device = device
        self.datatype = datatype
        self.shape = shape
        self._loan = [loan] if loan is not None else []
        # The instance that holds it: the garbage collector may drop it in another's thread.
        self._runtime = _current()
        weakref.finalize(self, _drop_held, self._runtime, device["ref"], self._loan)

    _mapped = None

    def __dlpack__(self, stream=None):
        return self.mapped().__dlpack__()

    def mapped(self):
        """The tensor mapped here (a DLPackTensor on its GPU): the server lends it on first use."""
        if self._mapped is None:
            if _cuda_driver() is None:
                raise TritonModelException(
                    "this tensor is held on GPU %d in the server and this Python stub cannot use CUDA (%s): "
                    "pass it to another BLS call or return it, or ask for TRITONSERVER_MEMORY_CPU"
                    % (self.device["deviceId"], _cuda_problem())
                )
            runtime = self._runtime or _rt()
            if self._loan:
                loan = self._loan.pop()
                try:
                    self._mapped = runtime.open_loan(loan, self.datatype, self.shape)[0]
                except Exception:
                    runtime.ipc_drops.append(loan["key"])
                    raise
            else:
                self._mapped = runtime.device_export(self.device["ref"], self.datatype, self.shape)
        return self._mapped

    def __dlpack_device__(self):
        return (2, self.device["deviceId"])


_GPU_UNAVAILABLE = (
    "DLPack capsule passed pointer to memory allocated on GPU device, " "          when GPU is not available"
)


def _cuda_driver():
    """The CUDA driver for this stub, or None when it has none (see _cuda_problem)."""
    try:
        return galley_cuda.driver()
    except galley_cuda.CudaUnavailable:
        return None


def _cuda_problem():
    try:
        galley_cuda.driver()
    except galley_cuda.CudaUnavailable as error:
        return str(error)
    return ""


class _OnGpu:
    """A tensor on a GPU the model reads through DLPack: memory the server lent (`loan`, its wire),
    or a framework's tensor (`owner`, kept alive while this is)."""

    def __init__(self, dlpack, loan=None):
        self.dlpack = dlpack  # a galley_cuda.DLPackTensor
        self.loan = loan

    @property
    def device_id(self):
        return self.dlpack.device[1]


def _device_problem(device_type):
    return TritonModelException("DLDevice type %d is not support by Python backend." % device_type)


_DLPACK_STRINGS = "DLPack does not have support for string tensors."
_NOT_CONTIGUOUS = "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in C-Order are supported."


def _gpu_tensor(name, owner, capsule):
    """Tensor.from_dlpack of memory on a GPU: `capsule` (unconsumed) describes it, `owner` keeps it alive."""
    if _cuda_driver() is None:
        raise TritonModelException(_GPU_UNAVAILABLE)
    device_type, device_id, datatype, shape, pointer = galley_cuda.capsule_info(capsule)
    if datatype is None:
        raise TritonModelException("Tensor '%s': its DLPack data type has no Triton datatype" % name)
    if not galley_cuda.capsule_contiguous(capsule):
        raise TritonModelException(_NOT_CONTIGUOUS)
    # No synchronisation here: when the tensor goes to the server, it goes with an event recorded
    # after the work queued on it (Runtime.lend_gpu), which the server's readers wait for.
    runtime = _current()
    located = runtime.locate_loan(pointer) if runtime is not None else None
    dlpack = galley_cuda.DLPackTensor(pointer, galley_cuda.kDLCUDA, device_id, datatype, shape, keep=owner)
    return Tensor._on_gpu(name, datatype, shape, _OnGpu(dlpack, located))


def _drop_held(runtime, ref, unopened=()):
    # Queued, not sent: the frame that hands this tensor to the server (a response, a BLS call)
    # may not have gone out yet; the drop follows the next frame.
    if runtime is not None:
        runtime.drop(ref)
        for loan in unopened:
            runtime.ipc_drops.append(loan["key"])


def _text(value, what):
    """A string argument as Triton's bindings take it: str, or bytes (UTF-8)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, np.bytes_)):
        return bytes(value).decode("utf-8")
    raise TypeError("%s must be str or bytes, not %s" % (what, type(value).__name__))


# ---- argument checks as Triton's pybind11 bindings make them ------------------------------------
#
# An argument pybind11 cannot convert (None where the binding says `.none(false)`, an int for an
# enum, a list holding something other than a Tensor) is a TypeError naming the signature; what the
# C++ constructors then refuse (a None tensor in a list, an empty output name) is a
# TritonModelException in Triton's words.


class _Incompatible(Exception):
    """One argument pybind11 would not convert (turned into the call's TypeError)."""


def _incompatible(function, signature, args, kwargs, constructor=False):
    invoked = ", ".join([repr(a) for a in args] + (["kwargs: " + ", ".join("%s=%r" % kv for kv in kwargs.items())] if kwargs else []))
    what = "constructor arguments" if constructor else "function arguments"
    return TypeError(
        "%s(): incompatible %s. The following argument types are supported:\n    1. %s\n\nInvoked with: %s"
        % (function, what, signature, invoked)
    )


def _is_text(value):
    return isinstance(value, (str, bytes, bytearray, np.bytes_))


def _is_int(value, unsigned=False):
    """An integer pybind11 converts (Python's or numpy's; never a float, None or, unsigned, a negative one)."""
    if isinstance(value, (float, np.floating)) or value is None:
        return False
    try:
        number = value.__index__()
    except (AttributeError, TypeError):
        return False
    return not (unsigned and number < 0)


def _sequence(value):
    """A list argument as pybind11's list caster takes it: any sequence but a string; else None."""
    if value is None or _is_text(value) or isinstance(value, (dict, set, frozenset)):
        return None
    try:
        return list(value)
    except TypeError:
        return None


class Tensor:
    """A named tensor over a numpy array (a view over shared memory for the server's tensors)."""

    _SIGNATURE = "triton_python_backend_utils.Tensor(arg0: str, arg1: numpy.ndarray)"

    def __init__(self, name, data, dtype=None):
        # Triton's binding takes a str and a numpy array, nothing else (TypeError, as pybind11's).
        if not _is_text(name) or not isinstance(data, np.ndarray):
            raise _incompatible("__init__", Tensor._SIGNATURE, (name, data), {}, constructor=True)
        name = _text(name, "name")
        datatype = dtype or _datatype_of(data)
        if datatype is None:
            raise TritonModelException("Tensor '%s': numpy dtype %s has no Triton datatype" % (name, data.dtype))
        if datatype == "BYTES" and data.dtype != np.object_:
            data = data.astype(np.object_)
        self._name = name
        self._array = data
        self._datatype = datatype

    @classmethod
    def _on_device(cls, name, datatype, shape, held):
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = None
        tensor._datatype = datatype
        tensor._shape = [int(d) for d in shape]
        tensor._held = held
        return tensor

    @classmethod
    def _on_gpu(cls, name, datatype, shape, gpu):
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = None
        tensor._datatype = datatype
        tensor._shape = [int(d) for d in shape]
        tensor._gpu = gpu
        return tensor

    @classmethod
    def _from_shm(cls, ref):
        ipc = ref.get("ipc")
        device = ref.get("device")
        if device is not None:
            # Held by the server (a BLS output), with a loan of its memory mapped on first use.
            held = _Held(device, ref["datatype"], ref["shape"], ipc)
            return cls._on_device(ref["name"], ref["datatype"], ref["shape"], held)
        if ipc is not None:
            dlpack, loan = _rt().open_loan(ipc, ref["datatype"], ref["shape"])
            return cls._on_gpu(ref["name"], ref["datatype"], ref["shape"], _OnGpu(dlpack, loan))
        rt = _rt()
        datatype = ref["datatype"]
        shape = ref["shape"]
        raw = rt.shm.view(ref)
        if datatype == "BYTES":
            array = deserialize_bytes_tensor(raw).reshape(shape)
            del raw
        elif datatype == "BF16":
            array = raw.view(np.uint16).reshape(shape)
        else:
            array = raw.view(_TRITON_TO_NUMPY[datatype]).reshape(shape)
        tensor = cls.__new__(cls)
        tensor._name = ref["name"]
        tensor._array = array
        tensor._datatype = datatype
        return tensor

    def name(self):
        return self._name

    _held = None
    _gpu = None

    def as_numpy(self):
        if self._held is not None or self._gpu is not None:
            raise TritonModelException("Tensor is stored in GPU and cannot be converted to NumPy.")
        return self._array

    def is_cpu(self):
        return self._held is None and self._gpu is None

    def triton_dtype(self):
        return _TYPE_NUMBERS.get(self._datatype)

    def shape(self):
        if self._held is not None or self._gpu is not None:
            return list(self._shape)
        return list(self._array.shape)

    def to_dlpack(self):
        if self._held is not None:
            # from_dlpack takes it as it is (a renamed tensor on the same GPU memory); a framework
            # (torch.from_dlpack) maps it here.
            return self._held
        if self._gpu is not None:
            return self._gpu.dlpack.__dlpack__()
        return self._host_capsule()

    def __dlpack__(self, stream=None):
        """The tensor as a DLPack capsule for `torch.from_dlpack(tensor)` and the like (CPU tensors)."""
        if self._held is not None:
            return self._held.__dlpack__(stream)
        if self._gpu is not None:
            return self._gpu.dlpack.__dlpack__()
        return self._host_capsule()

    def _host_capsule(self):
        if self._datatype == "BYTES":
            raise TritonModelException(_DLPACK_STRINGS)
        array = self._array
        if array.flags.writeable or array.dtype == np.bool_:
            return array.__dlpack__()
        # numpy will not export a read-only array (one it took from an old-style capsule) as DLPack 0.x;
        # the memory is writable where it lives, as Triton's tensors in shared memory are.
        array = np.ascontiguousarray(array)
        return galley_cuda.DLPackTensor(array.ctypes.data, galley_cuda.kDLCPU, 0, self._datatype, array.shape, array).__dlpack__()

    def __dlpack_device__(self):
        if self._held is not None:
            return self._held.__dlpack_device__()
        if self._gpu is not None:
            return self._gpu.dlpack.__dlpack_device__()
        return (1, 0)

    @staticmethod
    def from_dlpack(name, capsule):
        if not _is_text(name):
            raise _incompatible(
                "from_dlpack", "(arg0: str, arg1: object) -> triton_python_backend_utils.Tensor", (name, capsule), {}
            )
        name = _text(name, "name")
        # Triton's checks and words (pb_tensor.cc, FromDLPack).
        if name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        if isinstance(capsule, _Held):
            return Tensor._on_device(name, capsule.datatype, capsule.shape, capsule)
        if type(capsule).__name__ == "PyCapsule":
            try:
                device_type = galley_cuda.capsule_info(capsule)[0]
            except ValueError:
                device_type = galley_cuda.kDLCPU  # consumed: numpy says why
            if device_type == galley_cuda.kDLCUDA:
                # The capsule itself, unconsumed, keeps the producer's memory alive.
                return _gpu_tensor(name, capsule, capsule)
            if device_type not in (galley_cuda.kDLCPU, galley_cuda.kDLCUDAHost):
                raise _device_problem(device_type)
            array = _from_capsule(capsule)
        elif hasattr(capsule, "__dlpack__") and hasattr(capsule, "__dlpack_device__"):
            if isinstance(capsule, Tensor) and capsule._held is not None:
                return Tensor._on_device(name, capsule._datatype, capsule._shape, capsule._held)
            device_type = int(capsule.__dlpack_device__()[0])
            if device_type == galley_cuda.kDLCUDA:
                if _cuda_driver() is None:
                    raise TritonModelException(_GPU_UNAVAILABLE)
                if isinstance(capsule, Tensor) and capsule._gpu is not None:
                    return Tensor._on_gpu(name, capsule._datatype, capsule._shape, capsule._gpu)
                return _gpu_tensor(name, capsule, capsule.__dlpack__())
            if device_type not in (galley_cuda.kDLCPU, galley_cuda.kDLCUDAHost):
                raise _device_problem(device_type)
            array = np.from_dlpack(capsule)
        else:
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule "
                "or have `__dlpack__` and `__dlpack_device__` attributes"
            )
        if not array.flags.c_contiguous:
            raise TritonModelException(_NOT_CONTIGUOUS)
        return Tensor(name, array)

    def _to_shm(self):
        """Write the tensor into the stub's shared memory: its reference for a frame."""
        if self._held is not None:
            device = {k: self._held.device[k] for k in ("ref", "deviceId", "byteSize")}
            return {"name": self._name, "datatype": self._datatype, "shape": list(self._shape), "s": -1, "z": 0, "o": 0, "n": 0, "device": device}
        rt = _rt()
        if self._gpu is not None:
            wire = {"name": self._name, "datatype": self._datatype, "shape": list(self._shape), "s": -1, "z": 0, "o": 0, "n": 0}
            if 0 in self._shape:
                # An empty GPU tensor has no device memory to share: it goes as an empty host tensor.
                return wire
            wire["ipc"] = rt.lend_gpu(self._gpu, self._datatype, self._shape)
            return wire
        array = self._array
        if self._datatype == "BYTES":
            flat = serialize_byte_tensor(array)
        else:
            flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            # Only a view can lie in the server's memory (its base is then a view over a mapping).
            base = array.base
            found = rt.shm.locate(flat) if base is not None and flat.nbytes > 0 else None
            if found is not None:
                # A view of one of the server's tensors (an identity, a slice of an input): the server
                # reads it where it is; its block stays ours until this array is gone, after the answer.
                s, size, offset = found
                shape = [int(d) for d in array.shape]
                return {"name": self._name, "datatype": self._datatype, "shape": shape, "s": s, "z": size, "o": offset, "n": flat.nbytes, "r": 1}
        return rt.shm.put(self._name, self._datatype, array.shape, flat)


def _from_capsule(capsule):
    # A raw PyCapsule (torch.utils.dlpack.to_dlpack): numpy reads objects with __dlpack__ only.
    class _Holder:
        def __dlpack__(self, stream=None):
            return capsule

        def __dlpack_device__(self):
            return (1, 0)

    return np.from_dlpack(_Holder())


def get_input_tensor_by_name(inference_request, name):
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response, name):
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config, name):
    for entry in model_config.get("input", []):
        if entry.get("name") == name:
            return entry
    return None


def get_output_config_by_name(model_config, name):
    for entry in model_config.get("output", []):
        if entry.get("name") == name:
            return entry
    return None


def _checked_parameters(parameters):
    """A request's or response's `parameters` by Triton's rules (and in its words): None or a dict
    of str keys to bool, int or str values."""
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        # Triton's binding names the C++ type it expected (pybind11's py::dict).
        raise TritonModelException("Expect N8pybind114dictE, got %s" % type(parameters))
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException("Expect parameters keys to have type str, found type %s" % type(key))
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                "Expect parameters values to have type bool/int/str, found type %s" % type(value)
            )
    return dict(parameters)


# ---- responses -----------------------------------------------------------------------------


class InferenceResponse:
    _SIGNATURE = (
        "triton_python_backend_utils.InferenceResponse(output_tensors: List[triton_python_backend_utils.Tensor] = [], "
        "error: triton_python_backend_utils.TritonError = None, parameters: object = None)"
    )

    def __init__(self, output_tensors=(), error=None, parameters=None):
        outputs = _sequence(output_tensors)
        if outputs is None or any(t is not None and not isinstance(t, Tensor) for t in outputs):
            raise _incompatible(
                "__init__",
                InferenceResponse._SIGNATURE,
                (),
                {"output_tensors": output_tensors, "error": error, "parameters": parameters},
                constructor=True,
            )
        parameters = _checked_parameters(parameters)
        # Triton's check and words (infer_response.cc).
        if any(t is None for t in outputs):
            raise TritonModelException("Output tensor for inference response should not be empty.")
        self._outputs = outputs
        if error is not None and not isinstance(error, TritonError):
            error = TritonError(str(error))
        self._error = error
        self._parameters = parameters

    def output_tensors(self):
        return self._outputs

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def parameters(self):
        return json.dumps(self._parameters)

    def _to_wire(self, requested=None):
        wire = {"outputs": []}
        if self._error is not None:
            wire["error"] = {"message": self._error.message(), "code": _code_name(self._error.code())}
            return wire
        for tensor in self._outputs:
            if not isinstance(tensor, Tensor):
                raise TritonModelException("output_tensors must be pb_utils.Tensor objects")
            if requested is not None and tensor.name() not in requested:
                continue
            wire["outputs"].append(tensor._to_shm())
        if self._parameters:
            wire["parameters"] = self._parameters
        return wire

    @classmethod
    def _from_wire(cls, wire, error=None):
        if error is not None:
            return cls(error=TritonError(error.get("message", ""), _code_from_name(error.get("code"))))
        if wire is None:
            return cls()
        outputs = [Tensor._from_shm(ref) for ref in wire.get("outputs", [])]
        response = cls(outputs)
        # The server's parameters as they came (a model's may be doubles): not the model's to check.
        response._parameters = dict(wire.get("parameters") or {})
        return response


class _SendState:
    """What a response sender has sent; outlives the sender (see the stub's `watch`)."""

    __slots__ = ("key", "lock", "closed", "sent", "answer", "deferred", "_returned", "_waiter")

    def __init__(self, key):
        self.key = key
        self.lock = threading.Lock()
        self.closed = False
        self.sent = 0
        # Non-decoupled: the response sent, kept until the final flag comes with or after it.
        self.answer = None
        # Non-decoupled: set once execute returned before the final flag (the answer then goes alone).
        self.deferred = False
        self._returned = False
        self._waiter = None

    def mark_returned(self):
        """The execute that got the request has returned."""
        with self.lock:
            self._returned = True
            waiter = self._waiter
        if waiter is not None:
            waiter.set()

    def wait_returned(self, timeout=None):
        """Wait until the execute that got the request has returned (for tests that act after it)."""
        with self.lock:
            if self._returned:
                return True
            if self._waiter is None:
                self._waiter = threading.Event()
            waiter = self._waiter
        return waiter.wait(timeout)


class InferenceResponseSender:
    """Sends a request's responses: any number then the final flag (decoupled), or one response
    and the final flag, together or apart, during execute or after it returned (non-decoupled).
    It refers to its request by key only: dropped without the final flag, the request fails."""

    def __init__(self, request):
        self._requested = request._requested
        self._cancelled = request._cancelled
        self._state = _SendState(request._key)
        # The instance that got the request: a thread of the model's may send for it.
        self._runtime = request._runtime or _rt()

    def send(self, response=None, flags=0):
        if flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL and flags != 0:
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException("Inference Response object must be provided when the response flags is set to zero.")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException("the response must be a pb_utils.InferenceResponse")
        self._runtime.send_response(self, response, flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def is_cancelled(self):
        if self._cancelled is None:
            return False
        if not self._cancelled.is_set():
            self._runtime.poll()
        return self._cancelled.is_set()


class InferenceTrace:
    """A request's trace (`request.trace()`); a BLS request given it as `trace=` is traced as its child.
    `get_context()` is the W3C trace context of the request's span as JSON
    (`{"traceparent": ..., "tracestate": ...}`) when the server traces it in mode opentelemetry,
    None otherwise, as Triton's."""

    def __init__(self, key=None, context=None):
        self._key = key
        self._context = context

    def get_context(self, mode="triton"):
        return self._context


class InferenceRequest:
    """A request given to `execute`, or a BLS request built by the model (`exec`, `async_exec`)."""

    _SIGNATURE = (
        "triton_python_backend_utils.InferenceRequest(request_id: str = '', correlation_id: object = 0, "
        "inputs: List[triton_python_backend_utils.Tensor], requested_output_names: List[str], model_name: str, "
        "model_version: int = -1, flags: int = 0, timeout: int = 0, "
        "preferred_memory: triton_python_backend_utils.PreferredMemory = <PreferredMemory>, "
        "trace: triton_python_backend_utils.InferenceTrace = <InferenceTrace>, parameters: object = None)"
    )

    def __init__(
        self,
        model_name=_DEFAULT,
        inputs=_DEFAULT,
        requested_output_names=_DEFAULT,
        request_id="",
        correlation_id=0,
        model_version=-1,
        flags=0,
        timeout=0,
        preferred_memory=_DEFAULT,
        trace=_DEFAULT,
        parameters=None,
    ):
        # What pybind11 converts before Triton's constructor runs: a TypeError for the call.
        given = {
            "model_name": model_name,
            "inputs": inputs,
            "requested_output_names": requested_output_names,
            "request_id": request_id,
            "correlation_id": correlation_id,
            "model_version": model_version,
            "flags": flags,
            "timeout": timeout,
            "parameters": parameters,
        }
        # model_name, inputs and requested_output_names have no default in Triton's binding: a call
        # without one is pybind's TypeError, which lists only what was given.
        given = {k: v for k, v in given.items() if v is not _DEFAULT}
        tensors = _sequence(inputs)
        names = _sequence(requested_output_names)
        if (
            not _is_text(model_name)
            or not _is_text(request_id)
            or correlation_id is None
            or tensors is None
            or any(t is not None and not isinstance(t, Tensor) for t in tensors)
            or names is None
            or not all(_is_text(n) for n in names)
            or not _is_int(model_version)
            or not _is_int(flags, unsigned=True)
            or not _is_int(timeout, unsigned=True)
            or (preferred_memory is not _DEFAULT and not isinstance(preferred_memory, PreferredMemory))
            or (trace is not _DEFAULT and not isinstance(trace, InferenceTrace))
        ):
            raise _incompatible("__init__", InferenceRequest._SIGNATURE, (), given, constructor=True)
        # Then the constructor's own checks, in Triton's order and words (pb_stub.cc, infer_request.cc).
        self._parameters = _checked_parameters(parameters)
        if not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        # Triton takes bytes wherever it takes a string (a name read from a BYTES tensor).
        self._model_name = _text(model_name, "model_name")
        self._id = _text(request_id, "request_id")
        if any(t is None for t in tensors):
            raise TritonModelException(
                "Input tensor for request with id '%s' and model name '%s' should not be empty." % (self._id, self._model_name)
            )
        self._requested = [_text(n, "requested_output_names") for n in names]
        if any(n == "" for n in self._requested):
            raise TritonModelException(
                "Requested output name for request with id '%s' and model name '%s' should not be empty."
                % (self._id, self._model_name)
            )
        self._inputs = tensors
        self._correlation_id = correlation_id
        self._model_version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._preferred_memory = None if preferred_memory is _DEFAULT else preferred_memory
        self._trace = None if trace is _DEFAULT else trace
        self._key = None
        self._cancelled = None
        self._sender = None

    @classmethod
    def _from_wire(cls, wire, cancelled):
        # The server's request, checked by the server: its fields as they came.
        request = cls.__new__(cls)
        request._model_name = ""
        request._model_version = -1
        request._id = wire["id"]
        request._correlation_id = wire["correlationId"]
        request._flags = wire["flags"]
        request._timeout = wire["timeout"]
        request._requested = list(wire["outputs"])
        request._parameters = {}
        request._preferred_memory = None
        request._trace = None
        request._sender = None
        request._inputs = [Tensor._from_shm(ref) for ref in wire["inputs"]]
        request._parameters_json = wire["parameters"]
        request._key = wire["key"]
        request._trace_context = wire.get("traceContext")
        request._cancelled = cancelled
        request._runtime = _current()
        return request

    # Server-side accessors.
    def inputs(self):
        return self._inputs

    def request_id(self):
        return self._id

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def set_flags(self, flags):
        self._flags = int(flags)

    def set_release_flags(self, flags):
        """How the request is released when `execute` returns: TRITONSERVER_REQUEST_RELEASE_ALL
        (the default), or TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, which gives the request back to
        the model's scheduler to be executed again (a model with `iterative_sequence: true`; its
        response in execute's list must then be None). Read when execute returns: set it before."""
        try:
            flags = operator.index(flags)
        except TypeError:
            raise TypeError("set_release_flags(): incompatible function arguments: flags must be an int, got %s" % type(flags)) from None
        if flags not in (TRITONSERVER_REQUEST_RELEASE_ALL, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE):
            raise TritonModelException(
                "release flags must be TRITONSERVER_REQUEST_RELEASE_ALL or TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, got %d"
                % flags
            )
        if getattr(self, "_released", False):
            raise TritonModelException(
                "Unable to set the release flags: the request was released when the execute function that got it returned"
            )
        self._release_flags = flags

    def release_flags(self):
        return getattr(self, "_release_flags", TRITONSERVER_REQUEST_RELEASE_ALL)

    def timeout(self):
        return self._timeout

    def model_name(self):
        return self._model_name

    def requested_output_names(self):
        return self._requested

    def trace(self):
        return InferenceTrace(self._key, getattr(self, "_trace_context", None))

    def parameters(self):
        text = getattr(self, "_parameters_json", None)
        return text if text is not None else json.dumps(self._parameters)

    def is_cancelled(self):
        if self._cancelled is None:
            return False
        if not self._cancelled.is_set():
            (self._runtime or _rt()).poll()
        return self._cancelled.is_set()

    _runtime = None

    def get_response_sender(self):
        if self._key is None:
            raise TritonModelException("get_response_sender is only available for requests given to execute")
        if self._sender is None:
            self._sender = InferenceResponseSender(self)
        return self._sender

    # BLS.
    def exec(self, decoupled=False):
        """The response; with `decoupled`, an iterator over the responses, returned (as Triton's)
        once the first has come."""
        call = _rt().bls(self, decoupled)
        if decoupled:
            return _ResponseIterator(call)
        return call.result()

    def async_exec(self, decoupled=False):
        """`exec` run in the loop's default executor, as Triton's: the awaited future resolves with
        the response, or with the iterator once the first response has come, so iterating a call
        that answers at once does not block the loop."""
        return asyncio.get_running_loop().run_in_executor(None, self.exec, decoupled)

    def _to_wire(self):
        parameters = dict(self._parameters)
        if self._correlation_id:
            parameters["sequence_id"] = self._correlation_id
        if self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
            parameters["sequence_start"] = True
        if self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
            parameters["sequence_end"] = True
        if self._timeout:
            parameters["timeout"] = int(self._timeout)
        for tensor in self._inputs:
            if not isinstance(tensor, Tensor):
                raise TritonModelException("inputs must be pb_utils.Tensor objects")
        wire = {
            "model": self._model_name,
            "version": "" if self._model_version is None or int(self._model_version) < 0 else str(self._model_version),
            "id": self._id or "",
            "inputs": [t._to_shm() for t in self._inputs],
            "outputs": self._requested,
            "parameters": parameters,
        }
        preferred = self._preferred_memory
        if preferred is not None and preferred.preferred_memory_type == TRITONSERVER_MEMORY_GPU:
            wire["preferredMemory"] = {"kind": "gpu", "deviceId": int(preferred.preferred_device_id)}
        if isinstance(self._trace, InferenceTrace) and self._trace._key is not None:
            wire["traceParent"] = self._trace._key
        return wire


class _ResponseIterator:
    """The responses of a decoupled BLS call, the last one carrying the final flag (possibly empty).
    Made once the first response has come (Triton's `exec` waits for it), which it holds."""

    def __init__(self, call):
        self._call = call
        first, self._done = call.next()
        # Kept, as Triton's iterator keeps them: once the last has come, a new loop starts again
        # from the first.
        self._responses = [first]
        self._index = 0

    def __iter__(self):
        if self._done and self._index >= len(self._responses):
            self._index = 0
        return self

    def __next__(self):
        if self._index < len(self._responses):
            self._index += 1
            return self._responses[self._index - 1]
        if self._done:
            raise StopIteration
        response, final = self._call.next()
        self._responses.append(response)
        self._index += 1
        if final:
            self._done = True
        return response

    def cancel(self):
        if not self._done:
            self._call.cancel()


# ---- logging -------------------------------------------------------------------------------


class Logger:
    """Lines into Galley's log, prefixed with the instance's name (Triton's pb_utils.Logger)."""

    class LogLevel(enum.IntEnum):
        INFO = 0
        WARNING = 1
        ERROR = 2
        VERBOSE = 3

    # Triton exports the levels onto the class too: Logger.INFO, Logger.WARNING, ...
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message, level=LogLevel.INFO):
        # Triton's binding takes a str and a Logger.LogLevel only (None or an int: TypeError).
        if not _is_text(message) or not isinstance(level, Logger.LogLevel):
            raise _incompatible(
                "log",
                "(message: str, level: triton_python_backend_utils.Logger.LogLevel = <LogLevel.INFO: 0>) -> None",
                (message, level),
                {},
            )
        name = {0: "info", 1: "warn", 2: "error", 3: "verbose"}[int(level)]
        _rt().log(name, _text(message, "message"))

    @staticmethod
    def _one(function, message, level):
        if not _is_text(message):
            raise _incompatible(function, "(message: str) -> None", (message,), {})
        Logger.log(message, level)

    @staticmethod
    def log_info(message):
        Logger._one("log_info", message, Logger.INFO)

    @staticmethod
    def log_warn(message):
        Logger._one("log_warn", message, Logger.WARNING)

    @staticmethod
    def log_error(message):
        Logger._one("log_error", message, Logger.ERROR)

    @staticmethod
    def log_verbose(message):
        Logger._one("log_verbose", message, Logger.VERBOSE)


# Galley's earlier name for the levels.
LogLevel = Logger.LogLevel


# ---- custom metrics ------------------------------------------------------------------------


class MetricFamily:
    """A custom metric family, exported with Galley's metrics (`/metrics`). Deleting it (the last
    reference going) deletes its metrics too, as Triton's: a `Metric` kept longer then refuses
    every operation."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    _KINDS = {0: "counter", 1: "gauge", 2: "histogram"}

    def __init__(self, name, description, kind):
        if name is None or description is None or kind is None:
            raise _incompatible(
                "__init__",
                "triton_python_backend_utils.MetricFamily(name: str, description: str, "
                "kind: triton_python_backend_utils.MetricKind)",
                (),
                {"name": name, "description": description, "kind": kind},
                constructor=True,
            )
        if kind not in MetricFamily._KINDS:
            raise TritonModelException("Error when creating MetricFamily: Unknown metric kind")
        self._name = name
        self._kind = kind
        self._metrics = []
        try:
            # The instance that declared it owns it in the server, whichever thread uses or drops it.
            self._runtime = _rt()
            self._runtime.metric({"op": "family", "family": name, "description": description, "kind": MetricFamily._KINDS[kind]})
        except TritonModelException as error:
            raise TritonModelException("Error when creating MetricFamily: %s" % error) from None
        # Triton's ~MetricFamily: its metrics are cleared, then the family is deleted in the server
        # (queued: the garbage collector may run this anywhere, even inside another call's send).
        weakref.finalize(self, _delete_family, self._runtime, name, self._metrics).atexit = False

    def Metric(self, labels=None, buckets=None):  # noqa: N802 - Triton's name
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != MetricFamily.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
        elif self._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        metric = Metric(self, labels, buckets)
        self._metrics.append(metric)
        return metric


def _delete_family(runtime, name, metrics):
    for metric in metrics:
        metric._clear()
    if runtime is not None:
        runtime.drop_metric({"op": "family-delete", "family": name})


class Metric:
    def __init__(self, family, labels=None, buckets=None):
        # The family's name and kind only: a metric does not keep its family alive (Triton's).
        self._family_name = family._name
        self._runtime = family._runtime
        self._labels = {str(k): str(v) for k, v in (labels or {}).items()}
        self._cleared = False
        request = {"op": "metric", "family": self._family_name, "labels": self._labels}
        if buckets is not None:
            request["buckets"] = [float(b) for b in buckets]
        try:
            self._runtime.metric(request)
        except TritonModelException as error:
            raise TritonModelException("Error when creating Metric: %s" % error) from None

    def _clear(self):
        if self._cleared:
            return
        self._cleared = True
        runtime = self._runtime
        if runtime is not None:
            runtime.drop_metric({"op": "metric-delete", "family": self._family_name, "labels": self._labels})

    def _op(self, op, what, value=None):
        try:
            if self._cleared:
                raise TritonModelException(
                    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The "
                    "'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have been deleted."
                )
            request = {"op": op, "family": self._family_name, "labels": self._labels}
            if value is not None:
                request["value"] = float(value)
            return self._runtime.metric(request)
        except TritonModelException as error:
            raise TritonModelException("Failed to %s metric value: %s" % (what, error)) from None

    def increment(self, value):
        self._op("increment", "increment", value)

    def set(self, value):
        self._op("set", "set", value)

    def observe(self, value):
        self._op("observe", "observe", value)

    def value(self):
        return self._op("value", "get")


# ---- model control -------------------------------------------------------------------------


def load_model(model_name, config="", files=None):
    """Load (or reload) a model through the server's repository (model control mode EXPLICIT):
    `config` is its config as JSON, `files` maps `file:<version>/<name>` to the file's bytes."""
    if model_name is None:
        raise TypeError("load_model(): model_name must not be None")
    request = {"op": "load", "model": str(model_name), "config": str(config or "")}
    if files is not None:
        if not isinstance(files, dict):
            raise TritonModelException("files must be a dict of 'file:<version>/<path>' to bytes")
        encoded = {}
        for key, value in files.items():
            if not isinstance(key, str) or not isinstance(value, (bytes, bytearray)):
                raise TritonModelException("files must be a dict of 'file:<version>/<path>' to bytes")
            encoded[key] = base64.b64encode(bytes(value)).decode("ascii")
        request["files"] = encoded
    _rt().model_control(request)


def unload_model(model_name, unload_dependents=False):
    """Unload a model (model control mode EXPLICIT); `unload_dependents` as the repository API's."""
    _rt().model_control({"op": "unload", "model": str(model_name), "unloadDependents": bool(unload_dependents)})


def is_model_ready(model_name, model_version=""):
    """Whether a model (a version of it, or its highest) is ready for inference; False for an unknown one."""
    return bool(_rt().model_control({"op": "ready", "model": str(model_name), "version": str(model_version)}))


# ---- auto-complete -------------------------------------------------------------------------


class ModelConfig:
    """What a model's static `auto_complete_config` receives and returns: Triton's methods, rules
    and messages. Built from the config's JSON text, as Triton's (a dict is taken too)."""

    def __init__(self, model_config):
        self._model_config = json.loads(model_config) if isinstance(model_config, (str, bytes)) else model_config

    def as_dict(self):
        return self._model_config

    def _name(self):
        return self._model_config["name"]

    def max_batch_size(self):
        return int(self._model_config.get("max_batch_size", 0) or 0)

    def set_max_batch_size(self, max_batch_size):
        current = self._model_config["max_batch_size"]
        if current > max_batch_size:
            raise ValueError(
                "configuration specified max_batch_size %s, but in auto-complete-config function for model '%s' "
                "specified max_batch_size %s" % (current, self._name(), max_batch_size)
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    "Configuration specified scheduling_choice as '%s', but auto-complete-config function for model "
                    "'%s' tries to set scheduling_choice as 'dynamic_batching'" % (scheduler, self._name())
                )
        self._model_config.setdefault("dynamic_batching", {})

    def _add_tensor(self, which, tensor, allowed):
        name = self._name()
        words = ", ".join("'%s'" % p for p in allowed[:-1]) + " and '%s'" % allowed[-1]
        for key in tensor:
            if key not in allowed:
                raise ValueError(
                    "%s '%s' in auto-complete-config function for model '%s' contains property other than %s."
                    % (which, tensor["name"], name, words)
                )
        if "name" not in tensor:
            raise ValueError("%s in auto-complete-config function for model '%s' is missing 'name' property." % (which, name))
        for key in ("data_type", "dims"):
            if key not in tensor:
                raise ValueError(
                    "%s '%s' in auto-complete-config function for model '%s' is missing '%s' property."
                    % (which, tensor["name"], name, key)
                )
        for current in self._model_config[which]:
            if current["name"] != tensor["name"]:
                continue
            if current["data_type"] != "TYPE_INVALID" and current["data_type"] != tensor["data_type"]:
                raise ValueError(
                    "unable to load model '%s', configuration expects datatype %s for %s '%s', model provides %s"
                    % (name, current["data_type"], which, tensor["name"], tensor["data_type"])
                )
            if current["dims"] and current["dims"] != tensor["dims"]:
                raise ValueError(
                    "model '%s', tensor '%s': the model expects dims %s but the model configuration specifies dims %s"
                    % (name, tensor["name"], tensor["dims"], current["dims"])
                )
            if "optional" in current and "optional" in tensor and current["optional"] != tensor["optional"]:
                raise ValueError(
                    "model '%s', tensor '%s': the model expects optional %s but the model configuration specifies optional %s"
                    % (name, tensor["name"], tensor["optional"], current["optional"])
                )
            current["data_type"] = tensor["data_type"]
            current["dims"] = tensor["dims"]
            if "optional" in tensor:
                current["optional"] = tensor["optional"]
            return
        self._model_config[which].append(tensor)

    def add_input(self, input):  # noqa: A002 - Triton's name
        self._add_tensor("input", input, ["name", "data_type", "dims", "optional"])

    def add_output(self, output):
        self._add_tensor("output", output, ["name", "data_type", "dims"])

    def set_model_transaction_policy(self, transaction_policy_dict):
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model '%s' contains property "
                    "other than 'decoupled'." % self._name()
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model '%s', which is already "
                    "set to '%s'." % (self._name(), policy["decoupled"])
                )
            policy["decoupled"] = wanted
