# Triton's stub embeds its bindings as the module `c_python_backend_utils`, which
# triton_python_backend_utils wraps; some models import it directly (`import c_python_backend_utils
# as c_utils`). Here it is the same surface: every public name of pb_utils (Tensor,
# InferenceRequest, InferenceResponse, TritonError, TritonModelException, Logger, MetricFamily,
# load_model, ...), and `shared_memory.free_memory()`, Triton's testing hook: the bytes free in this
# stub's shared memory (its own segments, where outputs are written).

import types as _types

import triton_python_backend_utils as _pb_utils

for _name, _value in vars(_pb_utils).items():
    # pb_utils' own names, not the modules it imports (numpy, threading, ...).
    if not _name.startswith("_") and not isinstance(_value, _types.ModuleType):
        globals()[_name] = _value


class SharedMemory:
    """The stub's shared memory, as Triton's `c_python_backend_utils.shared_memory`."""

    def free_memory(self):
        runtime = _pb_utils._current()
        shm = runtime.shm if runtime is not None else None
        return shm.free_memory() if shm is not None else 0


shared_memory = SharedMemory()
