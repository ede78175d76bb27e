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
        with self.assertRaises(pb_utils.TritonModelException):
            pb_utils.Tensor("x", [1, 2])
        self.assertEqual(pb_utils.numpy_to_triton_type(np.int64), 9)
        self.assertIs(pb_utils.triton_to_numpy_type(11), np.float32)
        self.assertIs(pb_utils.triton_string_to_numpy("TYPE_STRING"), np.object_)

    def test_dlpack(self):
        t = pb_utils.Tensor("x", np.arange(6, dtype=np.int32).reshape(2, 3))
        back = pb_utils.Tensor.from_dlpack("y", t.to_dlpack())
        self.assertEqual(back.name(), "y")
        self.assertEqual(back.as_numpy().tolist(), [[0, 1, 2], [3, 4, 5]])
        with self.assertRaises(pb_utils.TritonModelException):
            pb_utils.Tensor("s", np.array([b"a"], dtype=np.object_)).to_dlpack()


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


if __name__ == "__main__":
    unittest.main()
