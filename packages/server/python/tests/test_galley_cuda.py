# The stub's GPU-tensor module without a GPU (issue 50): struct layouts, DLPack capsules made in
# pure Python over host memory (kDLCPU) read by numpy and torch on the same bytes, the deleter
# called exactly once, the device a capsule names, and the errors when libcuda.so.1 is absent.
import base64
import ctypes
import ctypes.util
import gc
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import galley_cuda as gc_  # noqa: E402

import torch  # noqa: E402  (scripts/test-env.mjs gives the suites' interpreter torch)


def _pointer(array):
    return array.__array_interface__["data"][0]


class Layouts(unittest.TestCase):
    def test_dlpack_struct_layouts(self):
        # dlpack.h on 64-bit Linux.
        self.assertEqual(ctypes.sizeof(gc_.DLDevice), 8)
        self.assertEqual(ctypes.sizeof(gc_.DLDataType), 4)
        self.assertEqual(gc_.DLTensor.data.offset, 0)
        self.assertEqual(gc_.DLTensor.device.offset, 8)
        self.assertEqual(gc_.DLTensor.ndim.offset, 16)
        self.assertEqual(gc_.DLTensor.dtype.offset, 20)
        self.assertEqual(gc_.DLTensor.shape.offset, 24)
        self.assertEqual(gc_.DLTensor.strides.offset, 32)
        self.assertEqual(gc_.DLTensor.byte_offset.offset, 40)
        self.assertEqual(ctypes.sizeof(gc_.DLTensor), 48)
        self.assertEqual(gc_.DLManagedTensor.manager_ctx.offset, 48)
        self.assertEqual(gc_.DLManagedTensor.deleter.offset, 56)
        self.assertEqual(ctypes.sizeof(gc_._IpcHandle), 64)


class Capsules(unittest.TestCase):
    def setUp(self):
        gc.collect()
        self.live = gc_.live_count()

    def tearDown(self):
        gc.collect()
        self.assertEqual(gc_.live_count(), self.live)

    def test_numpy_reads_the_same_bytes_and_the_deleter_runs_once(self):
        data = np.arange(12, dtype=np.float32)
        calls = []
        tensor = gc_.DLPackTensor(_pointer(data), gc_.kDLCPU, 0, "FP32", [3, 4], keep=data)
        capsule = tensor.__dlpack__()
        info = gc_.capsule_info(capsule)
        self.assertEqual(info, (gc_.kDLCPU, 0, "FP32", [3, 4], _pointer(data)))
        del capsule
        gc.collect()
        # A capsule dropped unconsumed is deleted by its destructor.
        self.assertEqual(gc_.live_count(), self.live)
        capsule = gc_.make_capsule(_pointer(data), gc_.kDLCPU, 0, "FP32", [3, 4], lambda: calls.append(1))

        class Holder:
            def __dlpack__(self, stream=None):
                return capsule

            def __dlpack_device__(self):
                return (gc_.kDLCPU, 0)

        view = np.from_dlpack(Holder())
        del capsule
        self.assertEqual(view.shape, (3, 4))
        data[5] = 99.0  # the same memory, no copy
        self.assertEqual(view[1, 1], 99.0)
        self.assertEqual(calls, [])
        del view
        gc.collect()
        self.assertEqual(calls, [1])

    def test_unconsumed_capsule_calls_on_delete_once(self):
        data = np.zeros(4, dtype=np.int64)
        calls = []
        capsule = gc_.make_capsule(_pointer(data), gc_.kDLCPU, 0, "INT64", [4], lambda: calls.append(1))
        del capsule
        gc.collect()
        self.assertEqual(calls, [1])

    def test_torch_reads_the_same_pointer_and_keeps_the_owner(self):
        data = np.arange(6, dtype=np.float16)
        released = []

        class Keep:
            def __del__(self):
                released.append(1)

        tensor = gc_.DLPackTensor(_pointer(data), gc_.kDLCPU, 0, "FP16", [2, 3], keep=Keep())
        t = torch.from_dlpack(tensor)
        self.assertEqual(t.data_ptr(), _pointer(data))
        self.assertEqual(t.dtype, torch.float16)
        self.assertEqual(list(t.shape), [2, 3])
        del tensor
        gc.collect()
        self.assertEqual(released, [])  # torch's tensor holds it
        self.assertEqual((t * 2).tolist(), [[0, 2, 4], [6, 8, 10]])
        del t
        gc.collect()
        self.assertEqual(released, [1])

    def test_every_datatype_round_trips_through_torch(self):
        for datatype, dtype in [
            ("BOOL", torch.bool),
            ("INT8", torch.int8),
            ("INT16", torch.int16),
            ("INT32", torch.int32),
            ("INT64", torch.int64),
            ("UINT8", torch.uint8),
            ("FP16", torch.float16),
            ("BF16", torch.bfloat16),
            ("FP32", torch.float32),
            ("FP64", torch.float64),
        ]:
            source = torch.ones(5, dtype=dtype)
            capsule = torch.utils.dlpack.to_dlpack(source)
            info = gc_.capsule_info(capsule)
            self.assertEqual(info[:4], (gc_.kDLCPU, 0, datatype, [5]), datatype)
            self.assertTrue(gc_.capsule_contiguous(capsule))
            del capsule
            back = torch.from_dlpack(gc_.DLPackTensor(source.data_ptr(), gc_.kDLCPU, 0, datatype, [5], keep=source))
            self.assertEqual(back.dtype, dtype)
            self.assertEqual(back.data_ptr(), source.data_ptr())

    def test_strided_capsule_is_not_contiguous(self):
        t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
        capsule = torch.utils.dlpack.to_dlpack(t)
        self.assertFalse(gc_.capsule_contiguous(capsule))
        del capsule

    def test_unsupported_datatype(self):
        with self.assertRaises(ValueError):
            gc_.make_capsule(0, gc_.kDLCPU, 0, "BYTES", [1])

    def test_consumed_capsule_is_refused(self):
        data = np.zeros(2, dtype=np.int32)
        capsule = gc_.make_capsule(_pointer(data), gc_.kDLCPU, 0, "INT32", [2])
        np.from_dlpack(type("H", (), {"__dlpack__": lambda s, stream=None: capsule, "__dlpack_device__": lambda s: (1, 0)})())
        with self.assertRaises(ValueError):
            gc_.capsule_info(capsule)


class FakeDriver:
    """Stands in for the CUDA driver: counts opens and closes."""

    def __init__(self):
        self.opened, self.closed = [], []

    def open(self, handle, device):
        self.opened.append((handle, device))
        return 0x7000000 + 0x1000 * len(self.opened)

    def close(self, pointer, device):
        self.closed.append((pointer, device))


class Mappings(unittest.TestCase):
    def test_one_mapping_per_allocation_closed_by_the_last_tensor(self):
        drv = FakeDriver()
        mappings = gc_.IpcMappings(drv)
        handle = base64.b64encode(bytes(range(64))).decode()
        released = []
        a = gc_.open_tensor(mappings, {"handle": handle, "offset": 256, "deviceId": 0}, "FP32", [4], lambda: released.append("a"))
        b = gc_.open_tensor(mappings, {"handle": handle, "offset": 512, "deviceId": 0}, "FP32", [4], lambda: released.append("b"))
        self.assertEqual(len(drv.opened), 1)
        self.assertEqual(a.pointer, 0x7001000 + 256)
        self.assertEqual(b.pointer, 0x7001000 + 512)
        self.assertEqual(a.__dlpack_device__(), (gc_.kDLCUDA, 0))
        del a
        gc.collect()
        self.assertEqual(released, ["a"])
        self.assertEqual(drv.closed, [])
        # A capsule's consumer holds the tensor (and the mapping) after the object is dropped.
        capsule = b.__dlpack__()
        del b
        gc.collect()
        self.assertEqual(drv.closed, [])
        del capsule
        gc.collect()
        self.assertEqual(drv.closed, [(0x7001000, 0)])
        self.assertEqual(released, ["a", "b"])
        self.assertEqual(len(mappings), 0)


class WithoutCuda(unittest.TestCase):
    def test_a_missing_driver_is_a_clear_error(self):
        with self.assertRaises(gc_.CudaUnavailable) as caught:
            gc_.Driver("/nonexistent/libcuda.so.1")
        self.assertIn("the CUDA driver (/nonexistent/libcuda.so.1) cannot be loaded", str(caught.exception))

    def test_a_library_without_the_api_is_a_clear_error(self):
        with self.assertRaises(gc_.CudaUnavailable) as caught:
            gc_.Driver(ctypes.util.find_library("c") or "libc.so.6")
        self.assertIn("has no cuInit", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
