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
import unittest.mock

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
        mappings = gc_.IpcMappings(drv, idle=0)
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

    def test_idle_mappings_stay_for_the_next_tensor_then_the_oldest_close(self):
        drv = FakeDriver()
        mappings = gc_.IpcMappings(drv, idle=2)
        wire = lambda n: {"handle": base64.b64encode(bytes([n]) * 64).decode(), "offset": 0, "deviceId": 0}
        t = gc_.open_tensor(mappings, wire(1), "FP32", [1])
        del t
        gc.collect()
        # Released, still mapped: the same allocation again opens nothing.
        self.assertEqual((len(mappings), mappings.in_use(), drv.closed), (1, 0, []))
        again = gc_.open_tensor(mappings, wire(1), "FP32", [1])
        self.assertEqual(len(drv.opened), 1)
        self.assertEqual(mappings.in_use(), 1)
        for n in (2, 3, 4):
            x = gc_.open_tensor(mappings, wire(n), "FP32", [1])
            del x
            gc.collect()
        # Three idle, two kept: the least recently released (2) closed; 1 is in use whatever its age.
        self.assertEqual(drv.closed, [(0x7002000, 0)])
        self.assertEqual((len(mappings), mappings.in_use()), (3, 1))
        mappings.close_all()
        self.assertEqual(sorted(drv.closed), [(0x7002000, 0), (0x7003000, 0), (0x7004000, 0)])
        self.assertEqual(mappings.in_use(), 1)
        del again
        gc.collect()
        self.assertEqual(len(mappings), 1)


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


class HostBackedDriver:
    """A CUDA driver stand-in over host memory: 'allocations' are numpy buffers named by handles."""

    def __init__(self):
        self.buffers = {}  # handle -> numpy buffer
        self.opened = []
        self.closed = []
        self.synced = 0
        self.events = []
        self.pending = set()
        self.waited = []  # (handle, device) of other processes' events the current stream waited on

    def allocation(self, size, fill):
        handle = bytes([len(self.buffers) + 1]) * 64
        self.buffers[handle] = np.full(size, fill, dtype=np.uint8)
        return handle, self.buffers[handle]

    def open(self, handle, device):
        self.opened.append(handle)
        return _pointer(self.buffers[handle])

    def close(self, pointer, device):
        self.closed.append(pointer)

    def export(self, pointer, device):
        for handle, buffer in self.buffers.items():
            base = _pointer(buffer)
            if base <= pointer < base + buffer.nbytes:
                return handle, pointer - base, buffer.nbytes
        raise gc_.CudaError("cuMemGetAddressRange failed: not an allocation")

    def synchronize(self, device):
        self.synced += 1

    def use(self, device):
        pass

    # Events: each a dict; a test marks one not done yet by putting its id in `pending`.
    def event(self, device, interprocess):
        made = {"id": len(self.events), "interprocess": interprocess, "records": 0, "destroyed": False}
        self.events.append(made)
        return made

    def event_handle(self, event):
        return bytes([100 + event["id"]]) * 64

    def record(self, event, device):
        event["records"] += 1

    def done(self, event):
        return event["id"] not in self.pending

    def wait_event(self, event):
        self.pending.discard(event["id"])

    def destroy_event(self, event):
        event["destroyed"] = True

    def wait_imported(self, handle, device):
        self.waited.append((bytes(handle), device))


class Channel:
    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)


class StubLoans(unittest.TestCase):
    """The stub's side of GPU tensors (issue 50), kDLCUDA over host memory with a stand-in driver:
    what pb_utils makes of a loan from the server, what it sends back, and when loans end."""

    def setUp(self):
        import galley_python_stub as stub
        import triton_python_backend_utils as pb_utils

        self.pb = pb_utils
        self.drv = HostBackedDriver()
        self.saved = (gc_._driver, gc_._driver_error, pb_utils._runtime)
        gc_._driver, gc_._driver_error = self.drv, None
        self.runtime = stub.Runtime(Channel())
        pb_utils._runtime = self.runtime

    def tearDown(self):
        gc_._driver, gc_._driver_error, self.pb._runtime = self.saved
        gc.collect()

    def test_an_input_lent_by_the_server_is_a_gpu_tensor_over_the_mapping(self):
        pb = self.pb
        handle, buffer = self.drv.allocation(64, 0)
        buffer.view(np.float32)[4:8] = [1, 2, 3, 4]
        wire = {"handle": base64.b64encode(handle).decode(), "offset": 16, "deviceId": 0, "byteSize": 16, "key": 7}
        t = pb.Tensor._from_shm({"name": "INPUT0", "datatype": "FP32", "shape": [4], "s": -1, "z": 0, "o": 0, "n": 0, "ipc": wire})
        self.assertFalse(t.is_cpu())
        self.assertEqual(t.shape(), [4])
        self.assertEqual(t.__dlpack_device__(), (gc_.kDLCUDA, 0))
        with self.assertRaises(pb.TritonModelException) as caught:
            t.as_numpy()
        self.assertEqual(caught.exception.message(), "Tensor is stored in GPU and cannot be converted to NumPy.")
        info = gc_.capsule_info(t.to_dlpack())
        self.assertEqual(info, (gc_.kDLCUDA, 0, "FP32", [4], _pointer(buffer) + 16))
        # Returned as it came (an identity), or renamed: the server's own loan goes back by its key.
        out = pb.Tensor.from_dlpack("OUTPUT0", t.to_dlpack())
        self.assertFalse(out.is_cpu())
        sent = out._to_shm()["ipc"]
        self.assertEqual(sent, {"handle": wire["handle"], "offset": 16, "deviceId": 0, "byteSize": 16, "key": 7, "server": 1})
        # A view inside the loan (a slice a framework made) keeps its offset.
        view = gc_.DLPackTensor(_pointer(buffer) + 24, gc_.kDLCUDA, 0, "FP32", [2], keep=t)
        self.assertEqual(pb.Tensor.from_dlpack("V", view)._to_shm()["ipc"]["offset"], 24)
        self.assertEqual(len(self.drv.opened), 1)
        # Nothing refers to the mapping any more: idle (kept for the server's next loan of it, closed
        # when pushed out or at the end), and the loan given back after the next frame.
        del t, out, view
        gc.collect()
        self.assertEqual(self.drv.closed, [])
        self.assertEqual(self.runtime.mappings.in_use(), 0)
        self.runtime.mappings.close_all()
        self.assertEqual(self.drv.closed, [_pointer(buffer)])
        self.runtime.flush()
        self.assertIn({"kind": "ipc-drop", "keys": [7]}, self.runtime.channel.sent)

    def test_a_bls_output_comes_with_its_loan_mapped_on_first_use_or_given_back_unopened(self):
        # The server sends a GPU BLS output as its reference and, where it cost no copy, a loan of
        # its memory: torch.from_dlpack maps that loan (no device-export round trip).
        pb = self.pb
        handle, buffer = self.drv.allocation(64, 0)
        buffer.view(np.float32)[:4] = [5, 6, 7, 8]
        wire = {"handle": base64.b64encode(handle).decode(), "offset": 0, "deviceId": 0, "byteSize": 16, "key": 11}
        device = {"ref": 4, "deviceId": 0, "byteSize": 16}
        shm = {"name": "OUT", "datatype": "FP32", "shape": [4], "s": -1, "z": 0, "o": 0, "n": 0, "device": device}
        used = pb.Tensor._from_shm({**shm, "ipc": wire})
        self.assertFalse(used.is_cpu())
        info = gc_.capsule_info(used.to_dlpack().__dlpack__())
        self.assertEqual(info, (gc_.kDLCUDA, 0, "FP32", [4], _pointer(buffer)))
        self.assertEqual(len(self.drv.opened), 1)
        unused = pb.Tensor._from_shm({**shm, "device": {**device, "ref": 5}, "ipc": {**wire, "key": 12}})
        self.assertEqual(self.runtime.channel.sent, [])  # nothing asked of the server
        del used, unused, info
        gc.collect()
        self.runtime.flush()
        sent = {m["kind"]: sorted(m.get("refs", m.get("keys", []))) for m in self.runtime.channel.sent}
        self.assertEqual(sent, {"bls-drop": [4, 5], "ipc-drop": [11, 12]})
        self.assertEqual(len(self.drv.opened), 1)  # the unused loan was never mapped

    def test_a_tensor_the_model_made_is_lent_to_the_server_until_released(self):
        pb = self.pb
        handle, buffer = self.drv.allocation(256, 0)
        made = gc_.DLPackTensor(_pointer(buffer) + 128, gc_.kDLCUDA, 0, "FP16", [2, 8], keep=buffer)
        out = pb.Tensor.from_dlpack("OUTPUT0", made)
        self.assertFalse(out.is_cpu())
        wire = out._to_shm()
        # No synchronisation: it goes with an interprocess event recorded after the work queued on it.
        self.assertEqual(self.drv.synced, 0)
        self.assertEqual([(e["interprocess"], e["records"]) for e in self.drv.events], [(True, 1)])
        self.assertEqual(base64.b64decode(wire["ipc"]["event"]), bytes([100]) * 64)
        self.assertEqual(wire["s"], -1)
        ipc = wire["ipc"]
        self.assertEqual(base64.b64decode(ipc["handle"]), handle)
        self.assertEqual((ipc["offset"], ipc["byteSize"], ipc["deviceId"]), (128, 32, 0))
        self.assertNotIn("server", ipc)
        self.assertIn(ipc["key"], self.runtime.lent)
        del out, made
        gc.collect()
        self.assertIn(ipc["key"], self.runtime.lent)  # the server still reads it
        self.runtime.dispatch({"kind": "ipc-release", "keys": [ipc["key"]]})
        self.assertEqual(self.runtime.lent, {})
        # Its event is recorded again only now, for the next tensor lent: never while the server may wait on it.
        again = pb.Tensor.from_dlpack("OUTPUT1", gc_.DLPackTensor(_pointer(buffer), gc_.kDLCUDA, 0, "UINT8", [4], keep=buffer))
        second = again._to_shm()["ipc"]
        self.assertEqual(second["event"], ipc["event"])
        self.assertEqual([e["records"] for e in self.drv.events], [2])
        third = pb.Tensor.from_dlpack("OUTPUT2", gc_.DLPackTensor(_pointer(buffer), gc_.kDLCUDA, 0, "UINT8", [4], keep=buffer))
        self.assertNotEqual(third._to_shm()["ipc"]["event"], second["event"])  # the first still lent
        self.assertEqual(len(self.drv.events), 2)

    def test_a_deferred_loan_makes_the_stream_wait_and_goes_back_once_the_gpu_is_past_its_reads(self):
        pb = self.pb
        handle, buffer = self.drv.allocation(64, 0)
        event = bytes([9]) * 64
        wire = {"handle": base64.b64encode(handle).decode(), "offset": 0, "deviceId": 0, "byteSize": 16, "key": 21}
        wire["event"] = base64.b64encode(event).decode()
        t = pb.Tensor._from_shm({"name": "INPUT0", "datatype": "FP32", "shape": [4], "s": -1, "z": 0, "o": 0, "n": 0, "ipc": wire})
        gc_.capsule_info(t.to_dlpack())
        # The model's stream waits for the server's work before anything of the model can read it.
        self.assertEqual(self.drv.waited, [(event, 0)])
        self.assertEqual(self.drv.synced, 0)
        del t
        gc.collect()
        # Let go while the GPU may still read it: held back, with a local event recorded now.
        self.drv.pending.add(0)
        self.runtime.flush()
        self.assertEqual([m for m in self.runtime.channel.sent if m["kind"] == "ipc-drop"], [])
        self.assertEqual([(e["interprocess"], e["records"]) for e in self.drv.events], [(False, 1)])
        # Past it: the next frame gives it back, and the event is destroyed.
        self.drv.pending.clear()
        self.runtime.flush()
        self.assertIn({"kind": "ipc-drop", "keys": [21]}, self.runtime.channel.sent)
        self.assertTrue(self.drv.events[0]["destroyed"])

    def test_an_idle_stub_waits_for_the_gpu_and_gives_every_loan_back(self):
        pb = self.pb
        handle, buffer = self.drv.allocation(64, 0)
        wire = {"handle": base64.b64encode(handle).decode(), "offset": 0, "deviceId": 0, "byteSize": 16, "key": 31}
        t = pb.Tensor._from_shm({"name": "INPUT0", "datatype": "FP32", "shape": [4], "s": -1, "z": 0, "o": 0, "n": 0, "ipc": wire})
        gc_.capsule_info(t.to_dlpack())
        del t
        gc.collect()
        self.drv.pending.add(0)
        self.runtime.flush()
        self.assertEqual([m for m in self.runtime.channel.sent if m["kind"] == "ipc-drop"], [])
        self.runtime.settle_drops()  # the host waits for the event
        self.assertIn({"kind": "ipc-drop", "keys": [31]}, self.runtime.channel.sent)
        self.assertEqual(self.drv.pending, set())

    def test_a_server_loan_the_model_returns_is_synchronised_first(self):
        pb = self.pb
        handle, buffer = self.drv.allocation(64, 0)
        wire = {"handle": base64.b64encode(handle).decode(), "offset": 0, "deviceId": 0, "byteSize": 16, "key": 41}
        t = pb.Tensor._from_shm({"name": "INPUT0", "datatype": "FP32", "shape": [4], "s": -1, "z": 0, "o": 0, "n": 0, "ipc": wire})
        out = pb.Tensor.from_dlpack("OUTPUT0", t.to_dlpack())
        self.assertEqual(self.drv.synced, 0)
        sent = out._to_shm()["ipc"]
        self.assertEqual((sent["key"], sent["server"]), (41, 1))
        self.assertNotIn("event", sent)
        self.assertEqual(self.drv.synced, 1)  # the model may have written the server's memory

    def test_an_empty_gpu_tensor_goes_as_an_empty_host_tensor(self):
        # Triton's dlpack_empty_output: torch.ones((0,), device="cuda") has no memory to share.
        pb = self.pb
        empty = gc_.DLPackTensor(0, gc_.kDLCUDA, 0, "FP32", [0])
        out = pb.Tensor.from_dlpack("OUTPUT", empty)
        self.assertFalse(out.is_cpu())
        wire = out._to_shm()
        self.assertEqual((wire["s"], wire["n"], wire["shape"]), (-1, 0, [0]))
        self.assertNotIn("ipc", wire)
        self.assertEqual(self.runtime.lent, {})

    def test_a_raw_cuda_capsule_keeps_its_producer(self):
        pb = self.pb
        _, buffer = self.drv.allocation(32, 1)
        deleted = []
        capsule = gc_.make_capsule(_pointer(buffer), gc_.kDLCUDA, 0, "UINT8", [32], lambda: deleted.append(1))
        t = pb.Tensor.from_dlpack("X", capsule)
        del capsule
        gc.collect()
        self.assertEqual(deleted, [])
        self.assertEqual(t._to_shm()["ipc"]["byteSize"], 32)
        del t
        gc.collect()
        self.runtime.lent.clear()
        gc.collect()
        self.assertEqual(deleted, [1])

    def test_non_contiguous_and_bytes(self):
        pb = self.pb
        t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
        with self.assertRaises(pb.TritonModelException) as caught:
            pb.Tensor.from_dlpack("X", t)
        self.assertIn("DLPack tensor is not contiguous", caught.exception.message())


class RecordingLibrary:
    """Stands in for libcuda.so.1 (loaded through ctypes.CDLL): each entry point records its call
    and succeeds, so a test sees which driver calls a code path makes."""

    NAMES = (
        "cuInit",
        "cuDeviceGet",
        "cuDevicePrimaryCtxRetain",
        "cuCtxSetCurrent",
        "cuIpcOpenMemHandle_v2",
        "cuIpcCloseMemHandle",
        "cuIpcGetMemHandle",
        "cuMemGetAddressRange_v2",
        "cuCtxSynchronize",
        "cuEventCreate",
        "cuEventRecord",
        "cuEventQuery",
        "cuEventSynchronize",
        "cuEventDestroy_v2",
        "cuIpcGetEventHandle",
        "cuIpcOpenEventHandle",
        "cuStreamWaitEvent",
    )

    def __init__(self, init_status=0):
        self.calls = []
        recorder = self

        class Entry:
            def __init__(self, name):
                self.name, self.restype = name, None

            def __call__(self, *args):
                recorder.calls.append(self.name)
                return init_status if self.name == "cuInit" else 0

        for name in self.NAMES:
            setattr(self, name, Entry(name))


class LazyDriver(unittest.TestCase):
    """No driver call until the first GPU tensor (issue 50, item 3): a stub whose model never sees
    one makes no CUDA state at all; the start-up probe only loads the library."""

    def setUp(self):
        self.saved = (gc_._driver, gc_._loaded, gc_._driver_error)
        gc_._driver = gc_._loaded = gc_._driver_error = None
        self.library = RecordingLibrary()
        self.loads = []
        real = ctypes.CDLL

        def load(name, *args, **kwargs):
            self.loads.append(name)
            return self.library if name == "fake-libcuda" else real(name, *args, **kwargs)

        patcher = unittest.mock.patch.object(gc_.ctypes, "CDLL", load)
        patcher.start()
        self.addCleanup(patcher.stop)
        env = unittest.mock.patch.dict(os.environ, {"GALLEY_LIBCUDA": "fake-libcuda"})
        env.start()
        self.addCleanup(env.stop)

    def tearDown(self):
        gc_._driver, gc_._loaded, gc_._driver_error = self.saved

    def test_probe_loads_the_library_and_calls_nothing(self):
        self.assertTrue(gc_.probe())
        self.assertTrue(gc_.probe())
        self.assertEqual(self.loads, ["fake-libcuda"])
        self.assertEqual(self.library.calls, [])

    def test_the_first_use_calls_cuinit_once_then_retains_the_primary_context(self):
        gc_.probe()
        drv = gc_.driver()
        self.assertEqual(self.library.calls, ["cuInit"])
        self.assertIs(gc_.driver(), drv)
        drv.open(bytes(64), 0)
        drv.open(bytes(64), 0)
        self.assertEqual(
            self.library.calls,
            [
                "cuInit",
                "cuDeviceGet",
                "cuDevicePrimaryCtxRetain",
                "cuCtxSetCurrent",
                "cuIpcOpenMemHandle_v2",
                "cuCtxSetCurrent",
                "cuIpcOpenMemHandle_v2",
            ],
        )
        self.assertEqual(self.loads, ["fake-libcuda"])  # loaded once, by the probe

    def test_events_for_deferred_completion_are_made_once_and_opened_once(self):
        drv = gc_.driver()
        pool = gc_.EventPool(drv)
        entry = pool.take(0)
        self.assertEqual(len(entry[1]), 64)
        pool.give(0, entry)
        self.assertIs(pool.take(0), entry)  # recorded again, not made again
        drv.wait_imported(bytes(64), 0)
        drv.wait_imported(bytes(64), 0)
        calls = [c for c in self.library.calls if c not in ("cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent")]
        self.assertEqual(
            calls,
            ["cuEventCreate", "cuIpcGetEventHandle", "cuEventRecord", "cuEventRecord", "cuIpcOpenEventHandle", "cuStreamWaitEvent", "cuStreamWaitEvent"],
        )
        with self.assertRaises(gc_.CudaError):
            drv.wait_imported(bytes(12), 0)

    def test_a_driver_that_refuses_to_start_is_unavailable_after_the_probe_said_yes(self):
        self.library = RecordingLibrary(init_status=100)  # CUDA_ERROR_NO_DEVICE
        self.assertTrue(gc_.probe())
        with self.assertRaises(gc_.CudaUnavailable) as caught:
            gc_.driver()
        self.assertIn("cuInit failed", str(caught.exception))
        self.assertIs(gc_._driver_error, caught.exception)
        with self.assertRaises(gc_.CudaUnavailable):
            gc_.probe()
        self.assertEqual(self.library.calls, ["cuInit"])

    def test_a_missing_library_fails_the_probe(self):
        os.environ["GALLEY_LIBCUDA"] = "/nonexistent/libcuda.so.1"
        with self.assertRaises(gc_.CudaUnavailable) as caught:
            gc_.probe()
        self.assertIn("cannot be loaded", str(caught.exception))
        with self.assertRaises(gc_.CudaUnavailable):
            gc_.driver()

    def test_the_stub_starts_a_gpu_input_model_without_a_driver_call(self):
        import tempfile

        import galley_python_stub as stub
        import triton_python_backend_utils as pb_utils

        folder = tempfile.mkdtemp()
        # A version folder of its own name: the stub imports the file as `<version>.model`.
        version = os.path.join(folder, "lazy_cuda_model", "v_lazy_cuda")
        os.makedirs(version)
        with open(os.path.join(version, "model.py"), "w") as f:
            f.write("class TritonPythonModel:\n    def execute(self, requests):\n        return []\n")
        self.addCleanup(setattr, pb_utils, "_runtime", pb_utils._runtime)
        self.addCleanup(setattr, pb_utils, "_model_dir", getattr(pb_utils, "_model_dir", None))
        runtime = stub.Runtime(Channel())
        pb_utils._runtime = runtime
        init = {
            "args": {"model_instance_name": "lazy_cuda_model_0_0"},
            "shm": "galley-test-lazy-",
            "decoupled": False,
            "outputs": [],
            "file": os.path.join(version, "model.py"),
            "forceCpuOnlyInputs": False,
        }
        runtime.start(init)
        started = [m for m in runtime.channel.sent if m.get("kind") == "started"]
        self.assertEqual(len(started), 1, runtime.channel.sent)
        self.assertIs(started[0]["info"]["cuda"], True)
        self.assertEqual(self.library.calls, [])
        # The first GPU input the server lends starts the driver and maps it.
        handle = base64.b64encode(bytes(64)).decode()
        dlpack, _ = runtime.open_loan({"handle": handle, "offset": 0, "deviceId": 0, "byteSize": 16, "key": 1}, "FP32", [4])
        self.assertEqual(self.library.calls[:3], ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain"])
        self.assertIn("cuIpcOpenMemHandle_v2", self.library.calls)
        del dlpack
        gc.collect()
        runtime.mappings.close_all()
        self.assertEqual(self.library.calls[-2:], ["cuCtxSynchronize", "cuIpcCloseMemHandle"])
