# Galley's Python backend stub: runs one instance of a Triton Python model (model.py with
# TritonPythonModel) for the server, which started it with a private socket on fd 3. With the
# model parameter SHARED_STUB_PROCESS, one process runs several instances of a model (one CUDA
# context for all): GALLEY_STUB_CHANNELS sockets on fd 3, 4, ..., one `Runtime` per socket, each
# on a thread of its own, with its own shared memory and model object. Everything below is per
# runtime; the process ends when the server has closed every socket (or when it dies).
#
# Reading: whichever thread needs a frame reads the socket (one at a time, under a lock), and
# hands out what it reads: work (start/execute/stop) to the instance's thread (the main thread in
# a process of one instance), BLS and metric replies to the thread waiting for them, cancellations
# and releases applied at once. The instance's thread, idle, is the reader, so an execute starts
# without a thread hand-off; `is_cancelled()` reads whatever has arrived without waiting. An
# instance ends when the server closes its socket; the process exits when the last one does, and
# asks the kernel to kill it when the server dies, so it never outlives the server.
#
# Coroutines (`async def execute`) run as in Triton's stub: on one asyncio loop in a thread of its
# own, started with the first and running between calls. A request's response sender that the
# model drops before its final flag is failed by the courier thread (see `watch`).

import asyncio
import base64
import ctypes
import importlib
import inspect
import json
import os
import collections
import contextvars
import select
import sys
import threading
import traceback
import weakref

import galley_cuda

try:
    from galley_stub_ipc import Channel, SharedMemory

    import triton_python_backend_utils as pb_utils
except ImportError as missing:  # numpy, most likely: say so to the server instead of dying
    _MISSING = missing
else:
    _MISSING = None


def _die_with_parent():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
    except Exception:  # noqa: BLE001 - not Linux: the closed socket still ends us
        pass
    if os.getppid() == 1:
        os._exit(0)


_HERE = os.path.dirname(os.path.abspath(__file__))
# Galley's Python-based backends' runtimes (backends/<name>/model.py): their frames are ours too.
_RUNTIMES = os.path.join(_HERE, "backends") + os.sep
# Where the frames a model's traceback leaves out live: the stub, and the loop that runs coroutines.
_OURS = {_HERE, os.path.dirname(asyncio.__file__), os.path.dirname(importlib.import_module("concurrent.futures").__file__)}

# The keys of the batch whose execute (or a task it started) runs: a BLS call's parents.
PARENTS = contextvars.ContextVar("galley_batch_keys", default=[])

# The runtimes whose socket is still open: the last one's end is the process's.
_OPEN = []
_OPEN_LOCK = threading.Lock()
# The server's allocations mapped here, for every runtime: CUDA maps a handle once per context.
_MAPPINGS = []


class Closed(Exception):
    """The server closed this instance's socket (an unload, or the end of one instance of several)."""

    def __init__(self):
        super().__init__("the server ended this model instance")


def inherit_runtime():
    """A thread started by a thread of an instance works for that instance (pb_utils calls in it go
    through its runtime), as in a process of its own, where every thread does."""
    start = threading.Thread.start

    def started(thread):
        runtime = getattr(pb_utils._local, "runtime", None)
        if runtime is not None:
            run = thread.run

            def bound():
                pb_utils._local.runtime = runtime
                run()

            thread.run = bound
        start(thread)

    threading.Thread.start = started


def describe(error):
    """An exception as Triton's stub words it: `Type: message`, then where it was raised."""
    text = "%s: %s" % (type(error).__name__, error)
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if os.path.dirname(f.filename) not in _OURS
        and not f.filename.startswith(_RUNTIMES)
        and not f.filename.startswith("<frozen ")
    ]
    if frames:
        text += "\n\nAt:\n" + "\n".join("  %s(%d): %s" % (f.filename, f.lineno, f.name) for f in reversed(frames))
    return text


class Flag:
    """A request's cancellation: set by whichever thread reads the server's cancel."""

    __slots__ = ("value",)

    def __init__(self, value=False):
        self.value = value

    def set(self):
        self.value = True

    def is_set(self):
        return self.value


class Call:
    """One BLS call: its replies, in order."""

    def __init__(self, runtime, number):
        self.runtime = runtime
        self.number = number
        self.model = ""
        self.replies = collections.deque()

    def result(self):
        response, _ = self.next()
        return response

    def next(self):
        self.runtime.pump(lambda: self.replies)
        message = self.replies.popleft()
        final = bool(message.get("final"))
        if final:
            self.runtime.calls.pop(self.number, None)
        error = message.get("error")
        if error is not None and error.get("refused"):
            # Refused before the model ran: Triton's stub words it as its request executor does.
            error = dict(error, message="Model %s - Error when running inference: %s" % (self.model, error.get("message", "")))
        with pb_utils._using(self.runtime):
            return pb_utils.InferenceResponse._from_wire(message.get("response"), error), final

    def cancel(self):
        self.runtime.channel.send({"kind": "bls-cancel", "call": self.number})


class Runtime:
    def __init__(self, channel):
        self.channel = channel
        self.shm = None
        self.model = None
        self.decoupled = False
        self.outputs = []
        self.work = collections.deque()
        self.dropped = collections.deque()  # device tensor refs the model let go, not yet sent
        # The server's GPU loans the model let go, not yet sent: (key, device) for those it mapped
        # (their reads may still run on the GPU), a bare key for those it never opened.
        self.ipc_drops = collections.deque()
        self.pending_drops = collections.deque()  # (driver, local event, keys): sent once the GPU is past the event
        self.drops_lock = threading.Lock()
        self.lent = {}  # key -> (the model's GPU tensor lent to the server, device, its event), until it says it is done
        self.events = None  # galley_cuda.EventPool, made at the first tensor lent
        self.next_lent = 1
        self.mappings = None  # galley_cuda.IpcMappings, made at the first loan
        self.loans = {}  # id(DLPackTensor) -> the server's loan it maps (see locate_loan)
        self.metric_drops = collections.deque()  # deletes of custom metrics the model let go, not yet sent
        self.cancels = {}  # key -> threading.Event, for requests not yet finished
        self.calls = {}
        self.next_call = 1
        self.lock = threading.Lock()
        self.loop = None
        # Senders the model let go before the final flag (see `watch`), and the courier that fails them.
        self.abandoned = collections.deque()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.closed = False
        self.thread(self._courier, "courier")

        self.read_lock = threading.Lock()
        self.arrived = threading.Condition()

    def thread(self, target, name, *args):
        """A daemon thread working for this instance."""

        def bound():
            pb_utils._local.runtime = self
            target(*args)

        thread = threading.Thread(target=bound, name=name, daemon=True)
        thread.start()
        return thread

    # ---- reading ----

    def pump(self, ready, block=True):
        """Read frames until `ready()`; without `block`, only those already arrived. Raises Closed
        once the server has closed the socket."""
        while not ready():
            if self.closed:
                raise Closed()
            if not self.read_lock.acquire(blocking=False):
                if not block:
                    return False
                with self.arrived:
                    if not ready():
                        # Woken when the reader hands something out or stops reading.
                        self.arrived.wait(0.05)
                continue
            try:
                while not ready():
                    if not block and not self.channel.pending() and not select.select([self.channel.fd], [], [], 0)[0]:
                        return False
                    try:
                        message = self.channel.receive()
                    except Exception:  # noqa: BLE001 - an unreadable stream ends the instance
                        message = None
                    if message is None:
                        self.end()
                    self.dispatch(message)
                    with self.arrived:
                        self.arrived.notify_all()
            finally:
                self.read_lock.release()
                with self.arrived:
                    self.arrived.notify_all()
        return True

    def end(self):
        """The server closed the socket: the process ends with its last instance; another's thread
        ends (Closed), its requests read as cancelled, and what it still sends is dropped."""
        with _OPEN_LOCK:
            if self in _OPEN:
                _OPEN.remove(self)
            if not _OPEN:
                os._exit(0)
            pb_utils._runtime = _OPEN[0]
        self.closed = True
        self.channel.close()
        for flag in list(self.cancels.values()):
            flag.set()
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
        try:
            os.write(self.wake_w, b"x")
        except BlockingIOError:
            pass
        raise Closed()

    def dispatch(self, message):
        kind = message.get("kind")
        if kind == "cancel":
            event = self.cancels.get(message["key"])
            if event is not None:
                event.set()
        elif kind == "ipc-release":
            for key in message["keys"]:
                entry = self.lent.pop(key, None)
                if entry is not None and entry[2] is not None:
                    self.events.give(entry[1], entry[2])
        elif kind == "bls-reply" or kind == "reply" or kind == "device-exported":
            call = self.calls.get(message["call"])
            if call is not None:
                call.replies.append(message)
        elif kind == "release":
            if self.shm is not None:
                self.shm.release(message["blocks"])
        elif kind == "is-ready":
            # Beside whatever runs (an execute may be under way), as Triton's stub does.
            self.thread(self.is_ready, "is_ready", message["probe"])
        else:
            self.work.append(message)

    def poll(self):
        """Apply whatever the server has sent (cancellations, above all) without waiting."""
        try:
            self.pump(lambda: False, block=False)
        except Closed:
            pass  # its requests now read as cancelled

    def flush(self):
        for message in self.before_send() or ():
            self.channel.send(message)

    def before_send(self):
        """What follows the next frame out: blocks of the server's we have read, device tensors
        the model let go (after the frame, which may still hand them to the server)."""
        extra = []
        released = self.shm.take_released() if self.shm is not None else None
        if released is not None:
            extra.append(released)
        refs = []
        while True:
            try:
                refs.append(self.dropped.popleft())
            except IndexError:
                break
        if refs:
            extra.append({"kind": "bls-drop", "refs": refs})
        keys = self._drops_ready()
        if keys:
            extra.append({"kind": "ipc-drop", "keys": keys})
        drops = self._take_metric_drops()
        if drops:
            extra.append({"kind": "metric-drop", "requests": drops})
        return extra or None

    def _drops_ready(self, wait=False):
        """Keys of the server's loans to give back now: those never mapped, and those whose reads
        the GPU has finished (the work queued before they were let go; with `wait`, all of them,
        the host waiting). A loan given back too early could be handed out again by the server
        while a kernel here still reads it."""
        with self.drops_lock:
            mapped = {}  # device -> keys
            ready = []
            while True:
                try:
                    item = self.ipc_drops.popleft()
                except IndexError:
                    break
                if isinstance(item, tuple):
                    mapped.setdefault(item[1], []).append(item[0])
                else:
                    ready.append(item)
            for device, keys in mapped.items():
                try:
                    drv = galley_cuda.driver()
                    event = drv.event(device, False)
                    drv.record(event, device)
                except Exception:  # noqa: BLE001 - no event: the host waits for the device instead
                    try:
                        galley_cuda.driver().synchronize(device)
                    except Exception:  # noqa: BLE001 - a failed device: nothing reads the memory any more
                        pass
                    ready.extend(keys)
                    continue
                self.pending_drops.append((drv, event, keys))
            while self.pending_drops:
                drv, event, keys = self.pending_drops[0]
                try:
                    if wait:
                        drv.wait_event(event)
                    elif not drv.done(event):
                        break
                    drv.destroy_event(event)
                except galley_cuda.CudaError:
                    pass  # a failed device: nothing reads the memory any more
                self.pending_drops.popleft()
                ready.extend(keys)
            return ready

    def settle_drops(self):
        """Before the stub goes idle: give back every loan the model let go, once the GPU is past it."""
        if not self.ipc_drops and not self.pending_drops:
            return
        keys = self._drops_ready(wait=True)
        if keys:
            self.channel.send({"kind": "ipc-drop", "keys": keys})

    def _take_metric_drops(self):
        drops = []
        while True:
            try:
                drops.append(self.metric_drops.popleft())
            except IndexError:
                return drops

    def drop_metric(self, request):
        """A custom metric or family the model let go: deleted in the server before the next
        metric call (so a family of the same name can be declared again), or after the next frame."""
        self.metric_drops.append(request)

    def drop(self, ref):
        """The model no longer refers to device tensor `ref` (sent after the next frame)."""
        self.dropped.append(ref)

    # ---- GPU tensors through CUDA IPC (galley_cuda) ----

    def _mappings(self):
        if self.mappings is None:
            drv = galley_cuda.driver()
            with _OPEN_LOCK:
                if not _MAPPINGS or _MAPPINGS[0]._driver is not drv:
                    _MAPPINGS[:] = [galley_cuda.IpcMappings(drv)]
                self.mappings = _MAPPINGS[0]
        return self.mappings

    def open_loan(self, wire, datatype, shape):
        """Memory the server lends (an input on its GPU, a BLS output): a DLPackTensor over it, and
        the loan (given back after the next frame once nothing here uses it)."""
        key = wire["key"]
        device = int(wire["deviceId"])
        dlpack = galley_cuda.open_tensor(self._mappings(), wire, datatype, shape, lambda: self.ipc_drops.append((key, device)))
        loan = {"wire": wire, "delta": 0, "base": dlpack.pointer}
        self._remember(dlpack, loan)
        return dlpack, loan

    def locate_loan(self, pointer):
        """The server's loan whose memory holds `pointer` (a view of a lent tensor), if any."""
        for loan in list(self.loans.values()):
            start = loan["base"]
            if start <= pointer < start + loan["wire"]["byteSize"]:
                return {"wire": loan["wire"], "delta": pointer - start, "base": start}
        return None

    def device_export(self, ref, datatype, shape):
        """A held BLS output mapped here: the server lends it (one copy on its GPU)."""
        call = self._call()
        self.channel.send({"kind": "device-export", "call": call.number, "ref": ref})
        self.pump(lambda: call.replies)
        reply = call.replies.popleft()
        self.calls.pop(call.number, None)
        if reply.get("error"):
            raise pb_utils.TritonModelException(reply["error"])
        return self.open_loan(reply["tensor"], datatype, shape)[0]

    def _remember(self, dlpack, loan):
        # Loans by their mapped address, for locate_loan; forgotten with the DLPackTensor.
        key = id(dlpack)
        self.loans[key] = loan
        weakref.finalize(dlpack, self.loans.pop, key, None)

    def lend_gpu(self, gpu, datatype, shape):
        """A GPU tensor going to the server: the server's own loan back (with the view's offset), or
        the model's memory exported (kept alive here until the server says it is done)."""
        count = 1
        for d in shape:
            count *= int(d)
        size = count * galley_cuda.DATATYPES[datatype][1] // 8
        if gpu.loan is not None:
            # The server's own memory, which the model may have written: done before it goes back.
            galley_cuda.driver().synchronize(gpu.device_id)
            wire = gpu.loan["wire"]
            return {
                "handle": wire["handle"],
                "offset": wire["offset"] + gpu.loan["delta"],
                "deviceId": wire["deviceId"],
                "byteSize": size,
                "key": wire["key"],
                "server": 1,
            }
        drv = galley_cuda.driver()
        device = gpu.device_id
        handle, offset, _ = drv.export(gpu.dlpack.pointer, device)
        # No synchronisation: the server's work on it waits for this event (recorded after the
        # model's work queued so far), which goes back to the pool when the server gives it back.
        with self.lock:
            if self.events is None:
                self.events = galley_cuda.EventPool(drv)
            key = self.next_lent
            self.next_lent += 1
        event = self.events.take(device)
        self.lent[key] = (gpu, device, event)
        return {
            "handle": base64.b64encode(handle).decode(),
            "offset": offset,
            "deviceId": device,
            "byteSize": size,
            "key": key,
            "event": base64.b64encode(event[1]).decode(),
        }

    # ---- services for pb_utils ----

    def log(self, level, message):
        self.channel.send({"kind": "log", "level": level, "message": message})

    def _call(self):
        with self.lock:
            number = self.next_call
            self.next_call += 1
        call = Call(self, number)
        self.calls[number] = call
        return call

    def metric(self, request):
        drops = self._take_metric_drops()
        if drops:
            self.channel.send({"kind": "metric-drop", "requests": drops})
        call = self._call()
        self.channel.send({"kind": "metric", "call": call.number, "request": request})
        self.pump(lambda: call.replies)
        reply = call.replies.popleft()
        self.calls.pop(call.number, None)
        if reply.get("error"):
            raise pb_utils.TritonModelException(reply["error"])
        return reply.get("value")

    def model_control(self, request):
        """load_model / unload_model / is_model_ready: answered by the server's model repository."""
        call = self._call()
        self.channel.send({"kind": "model-control", "call": call.number, "request": request})
        self.pump(lambda: call.replies)
        reply = call.replies.popleft()
        self.calls.pop(call.number, None)
        if reply.get("error"):
            raise pb_utils.TritonModelException(reply["error"])
        return reply.get("value")

    def bls(self, request, decoupled):
        with pb_utils._using(self):
            wire = request._to_wire()
        call = self._call()
        call.model = wire.get("model", "")
        parents = PARENTS.get()
        self.channel.send({"kind": "bls", "call": call.number, "request": wire, "stream": bool(decoupled), "parents": parents})
        return call

    def send_response(self, sender, response, final):
        """A model's `send`, with Triton's rules and words for each transaction policy."""
        state = sender._state
        with state.lock:
            if not self.decoupled:
                if response is not None and state.sent > 0:
                    raise pb_utils.TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than one response."
                    )
                if response is None and final and state.sent == 0:
                    raise pb_utils.TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete final before sending a response."
                    )
            if state.closed:
                raise pb_utils.TritonModelException("Unable to send response. Response sender has been closed.")
            if final:
                state.closed = True
            state.sent += 1
            if not self.decoupled:
                if response is not None:
                    state.answer = response
                # During execute the answer goes with the batch's; after it, alone once final.
                if not final or not state.deferred:
                    return
                response = state.answer
                state.answer = None
            if final:
                self.cancels.pop(state.key, None)
            message = {"kind": "response", "key": state.key, "final": final}
            if response is not None:
                try:
                    message["response"] = self._response_wire(sender._requested, response)
                except Exception as error:  # noqa: BLE001 - the request fails, and the model hears why
                    if final or not self.decoupled:
                        message["response"] = self._failed(describe(error))
                        message["final"] = True
                        state.closed = True
                        self.channel.send(message)
                    raise
            self.channel.send(message)

    def _response_wire(self, requested, response):
        if not isinstance(response, pb_utils.InferenceResponse):
            raise pb_utils.TritonModelException(
                "Expected an 'InferenceResponse' object in the execute function return list, found type '%s'."
                % type(response)
            )
        with pb_utils._using(self):
            return response._to_wire(set(requested or self.outputs))

    def _failed(self, text):
        return {"outputs": [], "error": {"message": self.failure(text), "code": "INTERNAL"}}

    # ---- requests the model let go ----

    def watch(self, sender):
        """Fail the request if its sender is dropped before the final flag: nothing can send it then."""
        weakref.finalize(sender, self._abandon, sender._state)

    def _abandon(self, state):
        # Runs in whichever thread let the sender go, maybe inside the garbage collector: only
        # queue it and wake the courier thread, which sends.
        if not state.closed:
            self.abandoned.append(state)
            try:
                os.write(self.wake_w, b"x")
            except BlockingIOError:  # the courier has wake-ups pending already
                pass

    def _courier(self):
        while not self.closed:
            os.read(self.wake_r, 4096)
            while self.abandoned:
                state = self.abandoned.popleft()
                with state.lock:
                    if state.closed:
                        continue
                    state.closed = True
                    self.cancels.pop(state.key, None)
                    text = (
                        "the response sender of the request was dropped before it sent the final flag "
                        "(TRITONSERVER_RESPONSE_COMPLETE_FINAL)"
                    )
                    self.channel.send({"kind": "response", "key": state.key, "final": True, "response": self._failed(text)})

    # ---- main thread ----

    def run(self):
        while True:
            try:
                if not self.work:
                    self.settle_drops()
                self.pump(lambda: self.work)
            except Closed:
                # Its model goes (and the GPU memory it holds), the process stays for the others.
                self.model = None
                return
            message = self.work.popleft()
            kind = message.get("kind")
            if kind == "start":
                self.start(message["init"])
            elif kind == "execute":
                self.execute(message["batch"], message["payload"])
            elif kind == "stop":
                self.stop()
            elif kind == "auto-complete":
                self.auto_complete(message)

    def load_class(self, path, model_dir=None, backend_folder=None):
        """Import the model file as Triton does: its version folder and the model's folder on
        sys.path, the file imported as `<version>.<file>`, so `from . import helper` finds 1/helper.py.
        A Python-based backend's `model.py` is imported as `model`, its folder on sys.path."""
        pb_utils._model_dir = model_dir if model_dir is not None else os.path.dirname(path)
        version_folder = os.path.dirname(path)
        folders = (backend_folder,) if backend_folder else (version_folder, os.path.dirname(version_folder))
        for folder in folders:
            if folder not in sys.path:
                sys.path.append(folder)
        file_name = os.path.basename(path)
        if not file_name.endswith(".py"):
            raise pb_utils.TritonModelException('Model name must end with \'.py\'. Model name is "%s".' % file_name)
        if backend_folder:
            module = importlib.import_module(file_name[:-3])
        else:
            module = importlib.import_module("%s.%s" % (os.path.basename(version_folder), file_name[:-3]))
        cls = getattr(module, "TritonPythonModel", None)
        if cls is None:
            raise AttributeError("module '%s' has no attribute 'TritonPythonModel'" % module.__name__)
        return cls

    def start(self, init):
        try:
            self.instance_name = init["args"].get("model_instance_name")
            self.shm = SharedMemory(init["shm"])
            self.decoupled = bool(init["decoupled"])
            self.outputs = init["outputs"]
            cls = self.load_class(init["file"], init.get("modelDir"), init.get("backendFolder"))
            self.model = cls()
            initialize = getattr(self.model, "initialize", None)
            if initialize is not None:
                self.await_here(initialize(init["args"]))
        except BaseException as error:  # noqa: BLE001 - reported as the load's failure
            self.channel.send({"kind": "start-failed", "message": describe(error)})
            return
        info = {"pid": os.getpid(), "isReady": hasattr(self.model, "is_ready")}
        if init.get("forceCpuOnlyInputs") is False:
            # Inputs on a GPU come as they are only to a stub that can map them. The driver is
            # only loaded here: cuInit waits for the first GPU tensor (see galley_cuda.probe).
            try:
                galley_cuda.probe()
                info["cuda"] = True
            except galley_cuda.CudaUnavailable as error:
                info["cuda"] = False
                self.log("warn", "inputs on a GPU reach this model as host copies: %s" % error)
        self.channel.send({"kind": "started", "info": info})

    def is_ready(self, probe):
        """The model's `is_ready()` (a coroutine is run on the loop), with Triton's rules."""
        answer = {"kind": "ready", "probe": probe}
        try:
            ready = self.await_here(self.model.is_ready())
            if not isinstance(ready, bool):
                raise pb_utils.TritonModelException("is_ready() must return a boolean value")
            answer["ready"] = ready
        except BaseException as error:  # noqa: BLE001 - not ready, and why
            answer["error"] = describe(error)
        self.channel.send(answer)

    # ---- coroutines ----

    def event_loop(self):
        """Triton's: one asyncio loop for the instance, running in a thread of its own from the
        first coroutine on, between calls too (tasks a coroutine starts go on after it returns)."""
        with self.lock:
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
                asyncio.set_event_loop(self.loop)
                self.thread(self.loop.run_forever, "asyncio")
        return self.loop

    def await_here(self, value):
        """A coroutine's result, run on the loop (the caller waits); anything else as it is."""
        if inspect.iscoroutine(value):
            return asyncio.run_coroutine_threadsafe(value, self.event_loop()).result()
        return value

    def in_background(self, coroutine, senders):
        """A decoupled model's `async def execute`, run on the loop without waiting, as Triton does:
        executions overlap. Should it raise, its requests not yet ended fail with what it raised."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.event_loop())

        def done(future):
            error = None if future.cancelled() else future.exception()
            if error is None:
                return
            text = describe(error)
            self.log("error", self.failure(text))
            for sender in senders:
                state = sender._state
                with state.lock:
                    if state.closed:
                        continue
                    state.closed = True
                    self.cancels.pop(state.key, None)
                    self.channel.send({"kind": "response", "key": state.key, "final": True, "response": self._failed(text)})

        future.add_done_callback(done)

    # ---- execute ----

    def execute(self, batch, payload):
        self.shm.release(payload["release"])
        payload = payload["requests"]
        requests = []
        for wire in payload:
            flag = Flag(bool(wire.get("cancelled")))
            self.cancels[wire["key"]] = flag
            requests.append(pb_utils.InferenceRequest._from_wire(wire, flag))
        senders = [r.get_response_sender() for r in requests]
        # BLS calls made for this batch (from its coroutine's tasks too) name its requests.
        token = PARENTS.set([wire["key"] for wire in payload])
        result = {}
        returned = None
        rescheduled = []
        try:
            returned = self.model.execute(requests)
            if inspect.iscoroutine(returned):
                if self.decoupled:
                    # It runs on in the background: its requests are released as it starts.
                    for request in requests:
                        request._released = True
                    self.in_background(returned, senders)
                    returned = None
                else:
                    returned = self.await_here(returned)
            # The release flags are read as execute returns; later calls raise.
            for request in requests:
                request._released = True
            asked = [
                i for i, r in enumerate(requests) if r.release_flags() == pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
            ]
            if self.decoupled:
                if returned is not None:
                    raise pb_utils.TritonModelException(
                        "Python model '%s' is using the decoupled mode and the execute function must return None."
                        % self.name()
                    )
                rescheduled = self.reschedule(senders, asked)
            else:
                rescheduled = self.reschedule(senders, asked)
                result = self.answers(senders, returned, set(asked), set(rescheduled))
            if rescheduled:
                result["rescheduled"] = rescheduled
        except BaseException as error:  # noqa: BLE001 - the batch's requests get the message
            result = {"error": {"message": self.failure(describe(error)), "code": "INTERNAL"}}
            if not self.decoupled:
                sent = self.sent_before(senders)
                if sent is not None:
                    result["sent"] = sent
            # As Triton: the senders close, so that nothing more is sent for these requests.
            for sender in senders:
                with sender._state.lock:
                    sender._state.closed = True
            rescheduled = []
        finally:
            PARENTS.reset(token)
            if not self.decoupled:
                for sender in senders:
                    state = sender._state
                    if not state.deferred:
                        state.answer = None
            for request in requests:
                request._released = True
        deferred = set(result.get("deferred", ()))
        again = set(rescheduled)
        for i, sender in enumerate(senders):
            state = sender._state
            if i in again:
                # Executed again under a new key; this execution's sender has closed.
                self.cancels.pop(state.key, None)
            elif self.decoupled and "error" not in result:
                self.watch(sender)
            elif i in deferred:
                self.watch(sender)
            else:
                self.cancels.pop(state.key, None)
            state.mark_returned()
        # Dropping the inputs' arrays releases their blocks (sent ahead of the answer).
        requests = returned = senders = sender = None
        self.channel.send({"kind": "executed", "batch": batch, "result": result})

    def sent_before(self, senders):
        """A failed non-decoupled batch: the response each request's sender had sent before execute
        raised (Triton had passed it on), and whether the final flag had closed it; None if none had."""
        sent = []
        for sender in senders:
            state = sender._state
            entry = None
            with state.lock:
                if state.answer is not None:
                    try:
                        entry = {"response": self._response_wire(sender._requested, state.answer), "final": state.closed}
                    except Exception:  # noqa: BLE001 - not one Triton could have sent: the error stands
                        entry = None
            sent.append(entry)
        return sent if any(entry is not None for entry in sent) else None

    def reschedule(self, senders, asked):
        """The requests (indexes) released with RESCHEDULE that are executed again: those whose
        sender has not sent the final flag (a request that has its final response has ended).
        Their senders close: the next execution of the request has a sender of its own."""
        again = []
        for i in asked:
            state = senders[i]._state
            with state.lock:
                if state.closed:
                    continue
                state.closed = True
                state.answer = None
            again.append(i)
        return again

    def answers(self, senders, returned, asked=(), rescheduled=()):
        """A non-decoupled batch's answers: returned, or sent through the senders (then final, or
        `deferred`: the final flag comes after execute returned, and the answer goes alone). A
        rescheduled request's returned response must be None (Triton's check); it has no answer."""
        if returned is not None:
            if not isinstance(returned, list):
                raise pb_utils.TritonModelException(
                    "Expected a list in the execute return, found type '%s'." % type(returned)
                )
            if len(returned) != len(senders):
                raise pb_utils.TritonModelException(
                    "Number of InferenceResponse objects do not match with number of InferenceRequest objects. "
                    "InferenceRequest(s) size is:%d, and InferenceResponse(s) size is:%d\n" % (len(senders), len(returned))
                )
        out = []
        deferred = []
        for i, sender in enumerate(senders):
            state = sender._state
            response = returned[i] if returned is not None else None
            if response is not None and i in asked:
                raise pb_utils.TritonModelException(
                    "Expected a None object in the execute function return list for reschduled request, found type '%s'."
                    % type(response)
                )
            if i in rescheduled:
                # Executed again: no answer now.
                out.append(None)
                continue
            with state.lock:
                if response is not None:
                    # A returned response counts as one sent with the final flag (Triton's checks).
                    if state.sent > 0:
                        raise pb_utils.TritonModelException(
                            "Unable to send response. Non-decoupled model cannot send more than one response."
                        )
                    if state.closed:
                        raise pb_utils.TritonModelException("Unable to send response. Response sender has been closed.")
                    state.closed = True
                    state.sent += 1
                elif state.closed:
                    # Kept until execute has succeeded: should a later request fail the batch,
                    # this one keeps what it sent (see `sent_before`).
                    response = state.answer
                else:
                    state.deferred = True
                    deferred.append(i)
                    out.append(None)
                    continue
            try:
                out.append(self._response_wire(sender._requested, response))
            except Exception as error:  # noqa: BLE001 - that request fails alone
                out.append(self._failed(describe(error)))
        result = {"responses": out}
        if deferred:
            result["deferred"] = deferred
        return result

    def name(self):
        return self.instance_name or "model"

    instance_name = None

    def failure(self, text):
        return "Failed to process the request(s) for model instance '%s', message: %s" % (self.name(), text)

    def stop(self):
        try:
            finalize = getattr(self.model, "finalize", None) if self.model is not None else None
            if finalize is not None:
                self.await_here(finalize())
        except BaseException as error:  # noqa: BLE001 - logged; the instance stops anyway
            self.log("error", "finalize failed: " + describe(error))
        self.channel.send({"kind": "stopped"})

    def auto_complete(self, message):
        try:
            cls = self.load_class(message["file"], message.get("modelDir"), message.get("backendFolder"))
            config = pb_utils.ModelConfig(message["config"])
            hook = getattr(cls, "auto_complete_config", None)
            if hook is not None:
                returned = hook(config)
                if isinstance(returned, pb_utils.ModelConfig):
                    config = returned
            self.channel.send({"kind": "auto-completed", "config": json.dumps(config.as_dict())})
        except BaseException as error:  # noqa: BLE001 - reported as the load's failure
            self.channel.send({"kind": "auto-completed", "error": describe(error)})


def refuse(reason, fds):
    """Answer the server's first message on each socket with why this interpreter cannot run models."""
    import struct

    for fd in fds:
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from("<I", data)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                os._exit(0)
            data += chunk
        first = json.loads(data[4 : 4 + struct.unpack_from("<I", data)[0]])
        kind = "auto-completed" if first.get("kind") == "auto-complete" else "start-failed"
        body = json.dumps({"kind": kind, "error" if kind == "auto-completed" else "message": reason}).encode()
        os.write(fd, struct.pack("<I", len(body)) + body)
    os.read(fds[0], 1)
    os._exit(0)


def serve(runtime):
    """One instance of several, on its thread: an error of the stub's own ends the process, which
    the server sees (as it would see one instance's process die)."""
    try:
        runtime.run()
    except BaseException:  # noqa: BLE001 - the instance cannot go on; its process neither
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


def main():
    _die_with_parent()
    # Triton's stub embeds Python with no arguments (sys.argv == [""]): models that run
    # unittest.main() or argparse at import must not see the stub's own command line (which names
    # the instance so that `pgrep -f triton_python_backend_stub` finds it).
    sys.argv = [""]
    # Read, then dropped: processes the model starts are not stubs.
    fds = list(range(3, 3 + max(1, int(os.environ.pop("GALLEY_STUB_CHANNELS", "1")))))
    if _MISSING is not None:
        refuse(
            "the Python backend needs numpy in %s (%s): install it (apt-get install python3-numpy, or pip install numpy) "
            "or choose another interpreter with --backend-config python,python-executable=<path> or EXECUTION_ENV_PATH"
            % (sys.executable, _MISSING),
            fds,
        )
    if len(fds) > 1:
        inherit_runtime()
    for fd in fds:
        channel = Channel(fd)
        runtime = Runtime(channel)
        channel.before_send = runtime.before_send
        _OPEN.append(runtime)
    pb_utils._runtime = _OPEN[0]
    # The first work item is `start` (or `auto-complete`). One instance runs on the main thread.
    if len(fds) == 1:
        _OPEN[0].run()
        return
    for i, runtime in enumerate(list(_OPEN)):
        runtime.thread(serve, "instance-%d" % i, runtime)
    # The process ends with its last instance (`Runtime.end`) or a signal.
    threading.Event().wait()


if __name__ == "__main__":
    main()
