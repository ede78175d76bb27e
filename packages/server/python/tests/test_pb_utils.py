# pb_utils and the stub's allocator without a server: `python3 -m unittest discover -s tests`
# from packages/server/python (run by test/python-utils.test.ts with the tests' interpreter).
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import triton_python_backend_utils as pb_utils  # noqa: E402
from galley_python_stub import describe  # noqa: E402
from galley_stub_ipc import _Arena  # noqa: E402


class BytesTensors(unittest.TestCase):
    def test_round_trip(self):
        values = np.array([[b"", b"a\x00b"], ["\u00fcn\u00efc\u00f6d\u00e9", 7]], dtype=np.object_)
        wire = pb_utils.serialize_byte_tensor(values)
        self.assertEqual(wire.dtype, np.uint8)
        self.assertEqual(bytes(wire[:4]), (0).to_bytes(4, "little"))
        back = pb_utils.deserialize_bytes_tensor(wire)
        self.assertEqual(list(back), [b"", b"a\x00b", "\u00fcn\u00efc\u00f6d\u00e9".encode(), b"7"])
        self.assertEqual(pb_utils.serialize_byte_tensor(np.empty([0], dtype=np.object_)).size, 0)

    def test_truncated(self):
        with self.assertRaises(pb_utils.TritonModelException):
            pb_utils.deserialize_bytes_tensor(np.frombuffer((9).to_bytes(4, "little") + b"abc", dtype=np.uint8))

    def test_tensor_datatypes(self):
        self.assertEqual(pb_utils.Tensor("x", np.array([b"a"])).triton_dtype(), 13)
        self.assertEqual(pb_utils.Tensor("x", np.zeros(2, np.float16)).triton_dtype(), 10)
        self.assertEqual(pb_utils.Tensor("x", np.zeros(2, np.bool_)).as_numpy().dtype, np.bool_)
        with self.assertRaises(pb_utils.TritonModelException):
            pb_utils.Tensor("x", np.zeros(2, np.complex64))
        # Triton's binding takes a numpy array only: anything else is pybind11's TypeError.
        with self.assertRaises(TypeError):
            pb_utils.Tensor("x", [1, 2])
        self.assertEqual(pb_utils.numpy_to_triton_type(np.int64), 9)
        self.assertIs(pb_utils.triton_to_numpy_type(11), np.float32)
        self.assertIs(pb_utils.triton_string_to_numpy("TYPE_STRING"), np.object_)

    def test_dlpack(self):
        t = pb_utils.Tensor("x", np.arange(6, dtype=np.int32).reshape(2, 3))
        back = pb_utils.Tensor.from_dlpack("y", t.to_dlpack())
        self.assertEqual(back.name(), "y")
        self.assertEqual(back.as_numpy().tolist(), [[0, 1, 2], [3, 4, 5]])
        with self.assertRaises(pb_utils.TritonModelException) as raised:
            pb_utils.Tensor("s", np.array([b"a"], dtype=np.object_)).to_dlpack()
        self.assertEqual(str(raised.exception), "DLPack does not have support for string tensors.")

    def test_dlpack_of_a_read_only_array(self):
        # numpy takes an old-style capsule as a read-only array and will not export that as DLPack 0.x
        # (NVIDIA's dlpack_test: from_dlpack(pb_tensor.to_dlpack()) of a tensor made from a capsule).
        source = pb_utils.Tensor("x", np.arange(4, dtype=np.float32))
        taken = pb_utils.Tensor.from_dlpack("y", source.to_dlpack())
        frozen = np.arange(3, dtype=np.int16)
        frozen.flags.writeable = False
        for tensor, expected in ((taken, [0, 1, 2, 3]), (pb_utils.Tensor("z", frozen), [0, 1, 2])):
            again = pb_utils.Tensor.from_dlpack("w", tensor.to_dlpack())
            self.assertEqual(again.as_numpy().tolist(), expected)
            self.assertEqual(np.from_dlpack(tensor).tolist(), expected)


class Errors(unittest.TestCase):
    def test_codes_and_messages(self):
        e = pb_utils.TritonError("nope", pb_utils.TritonError.NOT_FOUND)
        self.assertEqual((e.message(), e.code()), ("nope", 2))
        self.assertEqual(pb_utils.TritonError("x").code(), pb_utils.TritonError.INTERNAL)
        response = pb_utils.InferenceResponse(error=pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG))
        self.assertTrue(response.has_error())
        self.assertEqual(response._to_wire(), {"outputs": [], "error": {"message": "bad", "code": "INVALID_ARG"}})
        self.assertEqual(json.loads(pb_utils.InferenceResponse(parameters={"a": 1}).parameters()), {"a": 1})

    def test_describe_leaves_the_stub_out(self):
        try:
            raise ValueError("boom")
        except ValueError as error:
            text = describe(error)
        self.assertTrue(text.startswith("ValueError: boom\n\nAt:\n  "), text)
        self.assertIn("test_pb_utils.py(", text)


class AutoComplete(unittest.TestCase):
    def test_fills_and_refuses(self):
        config = pb_utils.ModelConfig({"name": "m", "max_batch_size": 0, "input": [], "output": []})
        config.set_max_batch_size(8)
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [3]})
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [3]})
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [3]})
        config.set_dynamic_batching()
        config.set_model_transaction_policy({"decoupled": True})
        d = config.as_dict()
        self.assertEqual(d["max_batch_size"], 8)
        self.assertEqual([i["name"] for i in d["input"]], ["X"])
        self.assertEqual(d["model_transaction_policy"], {"decoupled": True})
        self.assertIn("dynamic_batching", d)
        with self.assertRaises(ValueError):
            config.set_max_batch_size(4)
        with self.assertRaises(ValueError):
            config.add_input({"name": "Z", "dims": [1]})
        with self.assertRaises(ValueError):
            config.add_input({"name": "X", "data_type": "TYPE_INT32", "dims": [3]})
        with self.assertRaises(ValueError):
            config.set_model_transaction_policy({"other": 1})


# Triton's public pb_utils: its module's names, and those its stub adds from c_python_backend_utils.
TRITON_NAMES = [
    "TRITON_STRING_TO_NUMPY", "serialize_byte_tensor", "deserialize_bytes_tensor", "get_input_tensor_by_name",
    "get_output_tensor_by_name", "get_input_config_by_name", "get_output_config_by_name",
    "using_decoupled_model_transaction_policy", "triton_to_numpy_type", "numpy_to_triton_type",
    "triton_string_to_numpy", "ModelConfig", "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END", "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITONSERVER_REQUEST_RELEASE_ALL", "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE", "TritonError",
    "TritonModelException", "Tensor", "InferenceRequest", "InferenceResponse", "Logger", "PreferredMemory",
    "TRITONSERVER_MEMORY_GPU", "TRITONSERVER_MEMORY_CPU", "MetricFamily", "load_model", "unload_model",
    "is_model_ready", "get_model_dir",
]
TRITON_MEMBERS = {
    "Tensor": ["name", "as_numpy", "triton_dtype", "to_dlpack", "is_cpu", "shape", "from_dlpack", "__dlpack__", "__dlpack_device__"],
    "InferenceRequest": [
        "inputs", "request_id", "correlation_id", "flags", "set_flags", "timeout", "parameters", "trace", "exec",
        "async_exec", "requested_output_names", "get_response_sender", "is_cancelled", "set_release_flags",
    ],
    "InferenceResponse": ["output_tensors", "has_error", "error", "parameters"],
    "Logger": ["log", "log_info", "log_warn", "log_error", "log_verbose", "LogLevel", "INFO", "WARNING", "ERROR", "VERBOSE"],
    "MetricFamily": ["Metric", "COUNTER", "GAUGE", "HISTOGRAM"],
    "TritonError": ["code", "message", "UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED", "ALREADY_EXISTS", "CANCELLED"],
    "ModelConfig": ["as_dict", "set_max_batch_size", "set_dynamic_batching", "add_input", "add_output", "set_model_transaction_policy"],
}


class TritonSurface(unittest.TestCase):
    def test_every_public_name(self):
        self.assertEqual([n for n in TRITON_NAMES if not hasattr(pb_utils, n)], [])
        missing = [c + "." + m for c, ms in TRITON_MEMBERS.items() for m in ms if not hasattr(getattr(pb_utils, c), m)]
        self.assertEqual(missing, [])
        self.assertTrue(hasattr(pb_utils.Metric, "observe"))

    def test_types(self):
        self.assertIs(pb_utils.TRITON_STRING_TO_NUMPY["TYPE_BOOL"], bool)
        self.assertIs(pb_utils.triton_string_to_numpy("TYPE_FP16"), np.float16)
        with self.assertRaises(KeyError):
            pb_utils.triton_string_to_numpy("TYPE_BF16")
        self.assertEqual(pb_utils.numpy_to_triton_type(np.bytes_), 13)
        self.assertIsNone(pb_utils.triton_to_numpy_type(14))

    def test_decoupled_policy(self):
        policy = pb_utils.using_decoupled_model_transaction_policy
        self.assertFalse(policy({"name": "m"}))
        self.assertTrue(policy({"model_transaction_policy": {"decoupled": True}}))
        self.assertFalse(policy({"model_transaction_policy": {"decoupled": False}}))

    def test_logger_levels(self):
        Logger = pb_utils.Logger
        self.assertEqual([int(x) for x in (Logger.INFO, Logger.WARNING, Logger.ERROR, Logger.VERBOSE)], [0, 1, 2, 3])
        self.assertIs(Logger.LogLevel.WARNING, Logger.WARNING)
        self.assertEqual(Logger.LogLevel.VERBOSE.name, "VERBOSE")

    def test_request_arguments(self):
        self.assertEqual(pb_utils.InferenceRequest(inputs=[], requested_output_names=[], model_name="m", correlation_id="abc").correlation_id(), "abc")
        with self.assertRaisesRegex(pb_utils.TritonModelException, "^Correlation ID must be integer or string$"):
            pb_utils.InferenceRequest(inputs=[], requested_output_names=[], model_name="m", correlation_id=1.5)
        request = pb_utils.InferenceRequest(inputs=[], requested_output_names=[], model_name="m")
        request.set_flags(pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START)
        self.assertEqual(request.flags(), 1)
        request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL)
        self.assertEqual(request.release_flags(), pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL)
        request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        self.assertEqual(request.release_flags(), pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        with self.assertRaisesRegex(pb_utils.TritonModelException, "^release flags must be .* got 3$"):
            request.set_release_flags(3)
        with self.assertRaises(TypeError):
            request.set_release_flags(None)
        request._released = True
        with self.assertRaisesRegex(pb_utils.TritonModelException, "the request was released"):
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL)

    def test_arguments_as_triton_binds_them(self):
        # L0_backend_python/argument_validation's cases: pybind11 refuses None (TypeError); Triton's
        # constructors refuse a None tensor or an empty output name (TritonModelException, its words).
        tensor = pb_utils.Tensor("INPUT0", np.asarray([1, 2], dtype=np.int32))
        ok = {"inputs": [tensor], "model_name": "my_model", "requested_output_names": ["out"]}
        with self.assertRaisesRegex(
            pb_utils.TritonModelException, "^Input tensor for request with id '' and model name 'my_model' should not be empty.$"
        ):
            pb_utils.InferenceRequest(**{**ok, "inputs": [None]})
        with self.assertRaisesRegex(
            pb_utils.TritonModelException,
            "^Requested output name for request with id 'r' and model name 'my_model' should not be empty.$",
        ):
            pb_utils.InferenceRequest(**{**ok, "requested_output_names": [""], "request_id": "r"})
        for key in ("inputs", "model_name", "requested_output_names", "correlation_id", "request_id", "model_version", "flags", "timeout", "preferred_memory", "trace"):
            with self.assertRaisesRegex(TypeError, "^__init__\\(\\): incompatible constructor arguments", msg=key):
                pb_utils.InferenceRequest(**{**ok, key: None})
        for bad in ({"requested_output_names": [None]}, {"inputs": ["x"]}, {"inputs": "x"}, {"flags": -1}, {"model_version": 1.5}):
            with self.assertRaises(TypeError, msg=bad):
                pb_utils.InferenceRequest(**{**ok, **bad})
        self.assertEqual(pb_utils.InferenceRequest(**{**ok, "correlation_id": 5}).correlation_id(), 5)
        self.assertEqual(pb_utils.InferenceRequest(**{**ok, "correlation_id": "s-5"}).correlation_id(), "s-5")
        self.assertEqual(pb_utils.InferenceRequest(**ok).correlation_id(), 0)
        pb_utils.InferenceRequest(inputs=[], requested_output_names=[], model_name="m")

        with self.assertRaisesRegex(pb_utils.TritonModelException, "^Output tensor for inference response should not be empty.$"):
            pb_utils.InferenceResponse(output_tensors=[None])
        for bad in (None, [1], "x"):
            with self.assertRaises(TypeError, msg=bad):
                pb_utils.InferenceResponse(output_tensors=bad)
        self.assertEqual(pb_utils.InferenceResponse([tensor]).output_tensors(), [tensor])
        self.assertEqual(pb_utils.InferenceResponse(output_tensors=[]).output_tensors(), [])

        for name, data in ((None, np.zeros(1)), ("OUTPUT0", None), ("", None)):
            with self.assertRaises(TypeError):
                pb_utils.Tensor(name, data)
        with self.assertRaisesRegex(pb_utils.TritonModelException, "^Provided tensor is not supported. Tensor must be a DLPack capsule"):
            pb_utils.Tensor.from_dlpack("OUTPUT0", None)
        with self.assertRaisesRegex(pb_utils.TritonModelException, "^Tensor name cannot be an empty string.$"):
            pb_utils.Tensor.from_dlpack("", None)

    def test_logger_arguments(self):
        lines = []
        previous = pb_utils._runtime
        pb_utils._runtime = type("R", (), {"log": lambda self, level, message: lines.append((level, message))})()
        try:
            Logger = pb_utils.Logger
            for level in (None, 1):
                with self.assertRaisesRegex(TypeError, "^log\\(\\): incompatible function arguments"):
                    Logger.log("Invalid Level", level)
            for log in (Logger.log_info, Logger.log_warn, Logger.log_error, Logger.log_verbose):
                with self.assertRaises(TypeError):
                    log(None)
            Logger.log("Level unspecified")
            Logger.log_warn(b"bytes too")
            self.assertEqual(lines, [("info", "Level unspecified"), ("warn", "bytes too")])
        finally:
            pb_utils._runtime = previous

    def test_parameters_rules(self):
        for make in (lambda p: pb_utils.InferenceResponse(parameters=p), lambda p: pb_utils.InferenceRequest(inputs=[], requested_output_names=[], model_name="m", parameters=p)):
            self.assertEqual(json.loads(make({"a": 1, "b": True, "c": "x"}).parameters()), {"a": 1, "b": True, "c": "x"})
            self.assertEqual(json.loads(make(None).parameters()), {})
            with self.assertRaisesRegex(pb_utils.TritonModelException, "^Expect N8pybind114dictE, got <class 'str'>$"):
                make('{"a": 1}')
            with self.assertRaisesRegex(pb_utils.TritonModelException, "^Expect parameters keys to have type str, found type <class 'int'>$"):
                make({1: "x"})
            with self.assertRaisesRegex(
                pb_utils.TritonModelException, "^Expect parameters values to have type bool/int/str, found type <class 'float'>$"
            ):
                make({"a": 1.5})

    def test_bytes_for_strings(self):
        request = pb_utils.InferenceRequest(model_name=b"add_sub", inputs=[], requested_output_names=[b"OUT"], request_id=b"r")
        wire = json.loads(json.dumps(request._to_wire()))
        self.assertEqual((wire["model"], wire["outputs"], wire["id"]), ("add_sub", ["OUT"], "r"))
        self.assertEqual(pb_utils.Tensor(b"X", np.zeros(1)).name(), "X")
        with self.assertRaises(TypeError):
            pb_utils.InferenceRequest(model_name=7, inputs=[], requested_output_names=[])
        # model_name, inputs and requested_output_names have no default (Triton's binding).
        for missing in ("model_name", "inputs", "requested_output_names"):
            given = {k: v for k, v in {"model_name": "m", "inputs": [], "requested_output_names": []}.items() if k != missing}
            with self.assertRaisesRegex(TypeError, "incompatible constructor arguments"):
                pb_utils.InferenceRequest(**given)

    def test_tensor_is_a_dlpack_producer(self):
        t = pb_utils.Tensor("x", np.arange(4, dtype=np.float32))
        self.assertEqual(t.__dlpack_device__(), (1, 0))
        self.assertEqual(np.from_dlpack(t).tolist(), [0, 1, 2, 3])


class CustomMetrics(unittest.TestCase):
    """The stub's side of custom metrics: what it asks the server, and Triton's lifetime rule."""

    def setUp(self):
        self.sent = []
        self.drops = []
        test = self

        class Runtime:
            def metric(self, request):
                test.sent.append(request)
                return 0.0

            def drop_metric(self, request):
                test.drops.append(request)

        self.previous = pb_utils._runtime
        pb_utils._runtime = Runtime()

    def tearDown(self):
        pb_utils._runtime = self.previous

    def test_deleting_the_family_deletes_its_metrics(self):
        family = pb_utils.MetricFamily(name="lifetime", description="d", kind=pb_utils.MetricFamily.GAUGE)
        metric = family.Metric(labels={"b": "2", "a": "1"})
        metric.set(3)
        self.assertEqual([r["op"] for r in self.sent], ["family", "metric", "set"])
        del family
        self.assertEqual(
            self.drops,
            [
                {"op": "metric-delete", "family": "lifetime", "labels": {"b": "2", "a": "1"}},
                {"op": "family-delete", "family": "lifetime"},
            ],
        )
        words = "Invalid metric operation as the corresponding 'MetricFamily' has been deleted."
        for call, what in ((lambda: metric.set(1), "set"), (lambda: metric.increment(1), "increment"), (metric.value, "get")):
            with self.assertRaises(pb_utils.TritonModelException) as raised:
                call()
            self.assertTrue(str(raised.exception).startswith("Failed to %s metric value: %s" % (what, words)))
        self.assertEqual(len(self.sent), 3)

    def test_histogram_arguments(self):
        family = pb_utils.MetricFamily(name="h", description="d", kind=pb_utils.MetricFamily.HISTOGRAM)
        for buckets in (None, (1.0,)):
            with self.assertRaises(pb_utils.TritonModelException):
                family.Metric(labels={}, buckets=buckets)
        family.Metric(labels={}, buckets=[])
        self.assertEqual(self.sent[-1], {"op": "metric", "family": "h", "labels": {}, "buckets": []})


class SeveralInstances(unittest.TestCase):
    """A process running several instances (SHARED_STUB_PROCESS): pb_utils works for the instance
    of the calling thread, and what an instance made (requests, senders, metrics) stays its own."""

    def setUp(self):
        self.calls = []
        test = self

        class Runtime:
            def __init__(self, name):
                self.name = name

            def metric(self, request):
                test.calls.append((self.name, request["op"]))
                return 0.0

            def drop_metric(self, request):
                test.calls.append((self.name, request["op"]))

            def send_response(self, sender, response, final):
                test.calls.append((self.name, "send", final))

            def poll(self):
                test.calls.append((self.name, "poll"))

            def log(self, level, message):
                test.calls.append((self.name, "log", message))

        self.a, self.b = Runtime("a"), Runtime("b")
        self.previous = pb_utils._runtime
        pb_utils._runtime = self.a

    def tearDown(self):
        pb_utils._runtime = self.previous
        pb_utils._local.runtime = None

    def on(self, runtime, work):
        """Run `work` on a thread of `runtime`'s."""
        import threading

        def bound():
            pb_utils._local.runtime = runtime
            work()

        thread = threading.Thread(target=bound)
        thread.start()
        thread.join()

    def test_the_calling_threads_instance_serves_it(self):
        self.on(self.b, lambda: pb_utils.Logger.log_info("from b"))
        pb_utils.Logger.log_info("from a thread of none")
        with pb_utils._using(self.b):
            self.assertIs(pb_utils._current(), self.b)
        self.assertIs(pb_utils._current(), self.a)
        self.assertEqual(self.calls, [("b", "log", "from b"), ("a", "log", "from a thread of none")])

    def test_what_an_instance_made_stays_its_own(self):
        made = {}

        def on_b():
            wire = {"id": "r", "correlationId": 0, "flags": 0, "timeout": 0, "outputs": [], "inputs": [], "parameters": "{}", "key": 1}
            made["request"] = pb_utils.InferenceRequest._from_wire(wire, None)
            made["family"] = pb_utils.MetricFamily(name="m", description="d", kind=pb_utils.MetricFamily.GAUGE)

        self.on(self.b, on_b)
        sender = made["request"].get_response_sender()
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        made["family"].Metric(labels={}).set(1)
        del made["family"]
        self.assertEqual(
            self.calls, [("b", "family"), ("b", "send", True), ("b", "metric"), ("b", "set"), ("b", "metric-delete"), ("b", "family-delete")]
        )

    def test_threads_an_instance_starts_work_for_it(self):
        import threading

        import galley_python_stub as stub

        start = threading.Thread.start
        try:
            stub.inherit_runtime()
            inner = []

            def starts():
                thread = threading.Thread(target=lambda: inner.append(pb_utils._current()))
                thread.start()
                thread.join()

            self.on(self.b, starts)
            self.assertEqual(inner, [self.b])
        finally:
            threading.Thread.start = start


class AutoCompleteAsTriton(unittest.TestCase):
    def config(self, **extra):
        return pb_utils.ModelConfig(json.dumps({"name": "m", "max_batch_size": 0, "input": [], "output": [], **extra}))

    def test_messages(self):
        config = self.config(max_batch_size=8)
        config.set_max_batch_size(16)  # raising it is allowed, as in Triton
        with self.assertRaisesRegex(ValueError, "^configuration specified max_batch_size 16, but in auto-complete-config function for model 'm' specified max_batch_size 4$"):
            config.set_max_batch_size(4)
        with self.assertRaisesRegex(ValueError, "contains property other than 'name', 'data_type', 'dims' and 'optional'.$"):
            config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "reshape": {}})
        with self.assertRaisesRegex(ValueError, "^output 'Y' in auto-complete-config function for model 'm' is missing 'dims' property.$"):
            config.add_output({"name": "Y", "data_type": "TYPE_FP32"})
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
        with self.assertRaisesRegex(ValueError, "^model 'm', tensor 'X': the model expects dims \\[3\\] but the model configuration specifies dims \\[2\\]$"):
            config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [3]})
        config.set_model_transaction_policy({"decoupled": False})
        with self.assertRaisesRegex(ValueError, "which is already set to 'False'.$"):
            config.set_model_transaction_policy({"decoupled": True})
        with self.assertRaisesRegex(ValueError, "tries to set scheduling_choice as 'dynamic_batching'$"):
            self.config(sequence_batching={}).set_dynamic_batching()


class Arena(unittest.TestCase):
    def test_first_fit_and_coalescing(self):
        arena = _Arena(1024)
        a, b, c = arena.alloc(10), arena.alloc(100), arena.alloc(64)
        self.assertEqual((a, b, c), (0, 64, 192))
        self.assertEqual(arena.alloc(2000), -1)
        arena.release(b)
        self.assertEqual(arena.alloc(128), 64)
        for offset in (a, 64, c):
            arena.release(offset)
        self.assertEqual(arena.free, [[0, 1024]])


class CBindings(unittest.TestCase):
    """`c_python_backend_utils`, the module name of Triton's bindings, which some models import."""

    def test_same_names_as_pb_utils(self):
        import c_python_backend_utils as c_utils

        for name in ("Tensor", "InferenceRequest", "InferenceResponse", "TritonError", "TritonModelException", "Logger"):
            self.assertIs(getattr(c_utils, name), getattr(pb_utils, name))
        self.assertFalse(hasattr(c_utils, "np"))  # pb_utils' own names, not its imports

    def test_free_memory_of_the_stub_segments(self):
        import c_python_backend_utils as c_utils
        from galley_stub_ipc import SharedMemory

        self.assertEqual(c_utils.shared_memory.free_memory(), 0)  # no stub runtime: nothing mapped
        shm = SharedMemory("triton_python_backend_shm_region_test_%d_" % os.getpid())

        class Runtime:
            pass

        runtime = Runtime()
        runtime.shm = shm
        pb_utils._runtime = runtime
        try:
            self.assertEqual(c_utils.shared_memory.free_memory(), 0)
            ref = shm.put("T", "UINT8", [100], bytes(100))
            os.unlink("/dev/shm/%sp0" % shm.prefix)
            size = ref["z"]
            self.assertEqual(c_utils.shared_memory.free_memory(), size - 128)
            shm.release([(ref["s"], ref["o"])])
            self.assertEqual(c_utils.shared_memory.free_memory(), size)
        finally:
            pb_utils._runtime = None


if __name__ == "__main__":
    unittest.main()
