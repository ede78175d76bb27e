"""Galley's PyTorch-2 runtime: the Python-based backend that a `backend: "pytorch"` model with
`runtime: "model.py"` is served by, as Triton's PyTorch backend serves it (its `src/model.py`,
installed as `backends/pytorch/model.py`). Galley's Python backend starts it in a stub process
per instance, like any `model.py`; this file then loads the user's model from the version folder:

- `model.py` (or `default_model_filename`) defining a `torch.nn.Module` subclass, built with no
  arguments; its `state_dict` from `model.pt` beside it when present; then `torch.compile` with
  the JSON object of the `TORCH_COMPILE_OPTIONAL_PARAMETERS` parameter as keyword arguments;
- or, where the version folder holds only `model.pt`, that TorchScript file (`torch.jit.load`).

Inputs are `forward`'s positional arguments in the config's order, outputs the tensor or the
tuple/list it returns, in the config's order. With batching the requests of a batch are joined
along the first dimension, run once, and split back. Tensors move through DLPack (no copy on the
CPU). Parameters: `NUM_THREADS`, `NUM_INTEROP_THREADS` (default 1 each, as in Triton),
`TORCH_COMPILE_OPTIONAL_PARAMETERS`, `INFERENCE_MODE` (default true).
"""

import importlib.util
import json
import os

try:
    import torch
except ModuleNotFoundError as error:
    raise RuntimeError("Missing/Incomplete PyTorch package installation") from error

import triton_python_backend_utils as pb_utils

# The model files looked for, in order, after `default_model_filename` (Triton's order: a Python
# class beats a sibling `model.pt`, which is then its state dict).
MODEL_FILES = ("model.py", "model.pt")

# Protocol datatypes torch has; BF16 arrives as 16-bit words and is reinterpreted.
_TORCH_DTYPES = {
    "BOOL": torch.bool,
    "UINT8": torch.uint8,
    "INT8": torch.int8,
    "INT16": torch.int16,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "FP16": torch.float16,
    "BF16": torch.bfloat16,
    "FP32": torch.float32,
    "FP64": torch.float64,
}
_DATATYPES = {dtype: name for name, dtype in _TORCH_DTYPES.items()}


# The module-level names Triton's runtime has (`_get_model_path`, `_gather_torch_tensors`,
# `_scatter_torch_tensors`) are kept, so that tests written against it run against this one.


def _get_model_path(config):
    """The file to load from the version folder: `default_model_filename`, else `model.py`, else `model.pt`."""
    model_dir = pb_utils.get_model_dir()
    names = list(MODEL_FILES)
    if config.get("default_model_filename"):
        names.insert(0, config["default_model_filename"])
    for name in names:
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            return path
    raise pb_utils.TritonModelException("No model found in " + model_dir + "/" + str(names))


def _gather_torch_tensors(per_request):
    """The requests' tensors (a list of argument lists) joined along the first dimension: the
    joined arguments, and each request's batch size (its first argument's first dimension)."""
    sections = [int(args[0].shape[0]) for args in per_request]
    count = max((len(args) for args in per_request), default=0)
    joined = [torch.cat([args[j] for args in per_request if j < len(args)]) for j in range(count)]
    return joined, sections


def _scatter_torch_tensors(joined, sections):
    """The inverse of `_gather_torch_tensors`: each request's slices of the joined tensors."""
    parts = [torch.split(tensor, sections) for tensor in joined]
    return [[part[i] for part in parts] for i in range(len(sections))]


def find_state_dict(model_path):
    """`model.pt` beside `model.py` (the same name with `.pt`), or None."""
    path = os.path.splitext(model_path)[0] + ".pt"
    return path if path != model_path and os.path.isfile(path) else None


def module_class(module):
    """The `nn.Module` subclass `module` defines (by name, as Triton picks it); else one it imports."""
    found = []
    for name in sorted(dir(module)):
        value = getattr(module, name)
        if isinstance(value, type) and issubclass(value, torch.nn.Module) and value is not torch.nn.Module:
            found.append(value)
    own = [c for c in found if c.__module__ == module.__name__]
    if own or found:
        return (own or found)[0]
    raise pb_utils.TritonModelException("Cannot find a subclass of torch.nn.Module")


def import_file(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def string_parameter(config, key):
    entry = config.get("parameters", {}).get(key)
    return None if entry is None else entry.get("string_value")


def compile_parameters(config):
    """`TORCH_COMPILE_OPTIONAL_PARAMETERS`: a JSON object of `torch.compile` keyword arguments."""
    text = string_parameter(config, "TORCH_COMPILE_OPTIONAL_PARAMETERS")
    if text is None:
        return {}
    try:
        params = json.loads(text)
    except ValueError as error:
        raise pb_utils.TritonModelException(
            "parameter 'TORCH_COMPILE_OPTIONAL_PARAMETERS' must be a JSON object: %s" % error
        ) from None
    if not isinstance(params, dict):
        raise pb_utils.TritonModelException("parameter 'TORCH_COMPILE_OPTIONAL_PARAMETERS' must be a JSON object")
    if "model" in params:
        raise pb_utils.TritonModelException("'model' is not an optional parameter for 'torch.compile'")
    return params


def set_parallelism(config, log):
    """`NUM_THREADS` and `NUM_INTEROP_THREADS` (1 each unless set), as Triton words the log line."""
    text = ""
    for key in ("NUM_THREADS", "NUM_INTEROP_THREADS"):
        value = string_parameter(config, key) or "1"
        try:
            count = int(value)
        except ValueError:
            raise pb_utils.TritonModelException("parameter '%s' must be a whole number, got '%s'" % (key, value)) from None
        try:
            getattr(torch, "set_" + key.lower())(count)
        except RuntimeError as error:
            # The inter-op pool can be sized once per process, before it is used.
            log.log_warn("%s = %d not applied: %s" % (key, count, error))
        text += "%s = %s; " % (key, value)
    return text


def flag(config, key, default):
    text = string_parameter(config, key)
    if text is None:
        return default
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise pb_utils.TritonModelException("parameter '%s' must be true or false, got '%s'" % (key, text))


def device_for(kind, device_id, model):
    """KIND_GPU: `cuda:<id>`; KIND_CPU: the CPU; KIND_MODEL: where the module's first parameter is."""
    if kind in ("GPU", "KIND_GPU"):
        return torch.device("cuda:" + str(device_id))
    if kind in ("CPU", "KIND_CPU"):
        return torch.device("cpu")
    for param in model.parameters():
        return param.device
    raise pb_utils.TritonModelException("Cannot determine model device")


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]
        log = pb_utils.Logger
        for_model = "for '" + self.name + "'"
        log.log_info("Initializing model instance " + for_model)
        config = json.loads(args["model_config"])
        self.batching = config.get("max_batch_size", 0) > 0
        self.inputs = [(io["name"], io.get("data_type", "")) for io in config.get("input", [])]
        self.outputs = [io["name"] for io in config.get("output", [])]
        if not self.outputs:
            # Nothing to derive them from: a module does not declare what forward returns.
            raise pb_utils.TritonModelException(
                "model '%s' lists no outputs: a PyTorch-2 model.py's inputs and outputs are not read from the module; "
                "list them in config.pbtxt, in forward's argument order and its return order" % self.name
            )
        self.inference_mode = flag(config, "INFERENCE_MODE", True)
        log.log_verbose("Torch parallelism settings " + for_model + ": " + set_parallelism(config, log))
        params = compile_parameters(config)
        log.log_verbose("'torch.compile' optional parameter(s) " + for_model + ": " + str(params))

        kind = args["model_instance_kind"]
        device_id = args["model_instance_device_id"]
        path = _get_model_path(config)
        with self.grad_mode():
            if not path.endswith(".py"):
                log.log_info("Loading '" + self.name + "' as TorchScript")
                model = torch.jit.load(path)
                self.device = device_for(kind, device_id, model)
                self.model = model.to(self.device).eval()
                return
            cls = module_class(import_file(self.name, path))
            try:
                model = cls()
            except TypeError as error:
                raise pb_utils.TritonModelException(
                    "%s in %s cannot be built without arguments: %s" % (cls.__name__, os.path.basename(path), error)
                ) from None
            self.device = device_for(kind, device_id, model)
            state = find_state_dict(path)
            if state is not None:
                try:
                    weights = torch.load(state, map_location=self.device, weights_only=True)
                    model.load_state_dict(weights)
                except Exception as error:  # noqa: BLE001 - the load fails with torch's words
                    raise pb_utils.TritonModelException(
                        "%s does not hold a state dict for %s: %s" % (os.path.basename(state), cls.__name__, error)
                    ) from None
            else:
                log.log_info("Model parameter file not found " + for_model)
            model.to(self.device).eval()
            self.module = model
            self.model = torch.compile(model, **params)

    def grad_mode(self):
        return torch.inference_mode() if self.inference_mode else torch.no_grad()

    def execute(self, requests):
        try:
            with self.grad_mode():
                return self.run(requests)
        except pb_utils.TritonModelException:
            raise
        except Exception as error:  # noqa: BLE001 - every request of the batch gets torch's message
            raise pb_utils.TritonModelException("PyTorch execute failure: %s" % error) from None

    def run(self, requests):
        per_request = []
        for request in requests:
            args = []
            for name, datatype in self.inputs:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is None:
                    raise pb_utils.TritonModelException("input '%s' is missing" % name)
                value = torch.from_dlpack(tensor.to_dlpack())
                if datatype == "TYPE_BF16":
                    value = value.view(torch.bfloat16)
                args.append(value.to(self.device))
            per_request.append(args)

        if self.batching and len(per_request) > 1 and self.inputs:
            joined, sections = _gather_torch_tensors(per_request)
            answers = _scatter_torch_tensors(self.outputs_of(self.model(*joined)), sections)
        else:
            answers = [self.outputs_of(self.model(*args)) for args in per_request]

        responses = []
        for outputs in answers:
            tensors = [self.to_triton(name, value) for name, value in zip(self.outputs, outputs)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses

    def outputs_of(self, returned):
        values = list(returned) if isinstance(returned, (tuple, list)) else [returned]
        if len(values) < len(self.outputs):
            raise pb_utils.TritonModelException(
                "the model returned %d output(s), the configuration names %d (%s)"
                % (len(values), len(self.outputs), ", ".join(self.outputs))
            )
        for i, value in enumerate(values[: len(self.outputs)]):
            if not isinstance(value, torch.Tensor):
                raise pb_utils.TritonModelException(
                    "output '%s' is a %s, not a tensor" % (self.outputs[i], type(value).__name__)
                )
        return values[: len(self.outputs)]

    def to_triton(self, name, value):
        value = value.detach()
        if value.device.type != "cpu":
            value = value.cpu()
        if value.dtype == torch.bfloat16:
            return pb_utils.Tensor(name, value.contiguous().view(torch.uint16).numpy(), "BF16")
        if value.dtype not in _DATATYPES:
            raise pb_utils.TritonModelException("output '%s' has datatype %s, which Triton does not have" % (name, value.dtype))
        return pb_utils.Tensor.from_dlpack(name, value.contiguous())

    def finalize(self):
        pb_utils.Logger.log_info("Removing model instance for '" + self.name + "'")
