# Galley's Python backend stub: the pipe to the server and the shared-memory segments.
#
# Frames on fd 3 (a socket both ways): a 4-byte little-endian length, then a UTF-8 JSON body.
# Tensor bytes never travel in frames: they lie in /dev/shm segments, referenced by
# {"s": segment, "z": segment size, "o": offset, "n": length}. Each side writes into its own
# segments (the server's are "<prefix>n<k>", ours "<prefix>p<k>") and the reader releases blocks
# it is done with. A segment's file is unlinked as soon as its reader has mapped it.
# Standard library and numpy only.

import collections
import json
import mmap
import os
import socket
import struct
import threading
import weakref

import numpy as np

SHM_DIR = "/dev/shm"
ALIGN = 64
MIB = 1024 * 1024
FIRST_SEGMENT = 4 * MIB
_LEN = struct.Struct("<I")
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
_DECODE = json.JSONDecoder().decode
# What one read asks for when no bigger frame is pending (see Channel.receive).
READ_BYTES = 64 * 1024


class Channel:
    """The framed socket to the server. `send` is safe from any thread."""

    def __init__(self, fd=3):
        self.fd = fd
        self._fd = fd
        self._lock = threading.Lock()
        self._buffer = bytearray()
        self.closed = False
        # Called as each frame goes out: pending releases (a list of messages, or None) follow it
        # in the same write (after it, so that a block or a device tensor the frame hands to the
        # server is taken there before we let it go).
        self.before_send = None

    def send(self, message):
        body = _ENCODE(message).encode("utf-8")
        hook = self.before_send
        extra = hook() if hook is not None else None
        data = _LEN.pack(len(body)) + body
        for message in extra or ():
            extra_body = _ENCODE(message).encode("utf-8")
            data += _LEN.pack(len(extra_body)) + extra_body
        with self._lock:
            if self.closed:
                return
            view = memoryview(data)
            try:
                while view:
                    written = os.write(self._fd, view)
                    view = view[written:]
            except (BrokenPipeError, ConnectionResetError):
                # The server closed this instance's socket: its reader sees the end next.
                self.closed = True

    def close(self):
        """The server closed the socket: it is shut down both ways and what is sent later is
        dropped. The descriptor stays open, so that no file opened later takes its number."""
        with self._lock:
            self.closed = True
        try:
            sock = socket.socket(fileno=os.dup(self._fd))
        except OSError:
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.close()

    def pending(self):
        """Whether a whole frame is already buffered."""
        return len(self._buffer) >= 4 and len(self._buffer) >= 4 + _LEN.unpack_from(self._buffer, 0)[0]

    def receive(self):
        """The next message, or None at the end of the stream."""
        buffer = self._buffer
        while True:
            need = 4
            if len(buffer) >= 4:
                (length,) = _LEN.unpack_from(buffer, 0)
                need = 4 + length
                if len(buffer) >= need:
                    body = buffer[4:need].decode("utf-8")
                    del buffer[:need]
                    return _DECODE(body)
            # os.read allocates the size it is asked for: 1 MiB there cost ~90 us a call (a fresh
            # mapping each time), most of a small request's round trip. A big frame asks for the
            # rest of itself at once; appending to a bytearray keeps its assembly linear.
            chunk = os.read(self._fd, max(READ_BYTES, need - len(buffer)))
            if not chunk:
                return None
            buffer += chunk


class _Arena:
    """First-fit allocation of aligned blocks in one segment."""

    def __init__(self, size):
        self.size = size
        self.free = [[0, size]]
        self.used = {}

    def alloc(self, length):
        need = max(ALIGN, -(-length // ALIGN) * ALIGN)
        for i, (offset, size) in enumerate(self.free):
            if size < need:
                continue
            if size == need:
                del self.free[i]
            else:
                self.free[i] = [offset + need, size - need]
            self.used[offset] = need
            return offset
        return -1

    def release(self, offset):
        length = self.used.pop(offset, None)
        if length is None:
            return
        i = 0
        while i < len(self.free) and self.free[i][0] < offset:
            i += 1
        self.free.insert(i, [offset, length])
        if i + 1 < len(self.free) and offset + length == self.free[i + 1][0]:
            self.free[i][1] += self.free[i + 1][1]
            del self.free[i + 1]
        if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == self.free[i][0]:
            self.free[i - 1][1] += self.free[i][1]
            del self.free[i]


def _map(path, size, create):
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if create:
            os.ftruncate(fd, size)
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


class SharedMemory:
    """This instance's shared memory: our segments (we write) and the server's (we read)."""

    def __init__(self, prefix):
        self.prefix = prefix
        self._lock = threading.Lock()
        self._own = []  # [(mmap, arena)]
        self._peer = {}  # k -> mmap
        self._released = collections.deque()  # the server's blocks we are done with
        self._watchers = {}  # weak references that release a block when its array goes
        self._ranges = []  # (k, address, size) of the server's segments

    # ---- the server's segments ----

    def _peer_segment(self, s, size):
        segment = self._peer.get(s)
        if segment is None:
            with self._lock:
                segment = self._peer.get(s)
                if segment is None:
                    path = os.path.join(SHM_DIR, "%sn%d" % (self.prefix, s))
                    segment = _map(path, size, False)
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
                    start = np.frombuffer(segment, dtype=np.uint8).ctypes.data
                    self._ranges.append((s, start, size))
                    self._peer[s] = segment
        return segment

    def view(self, ref):
        """The bytes of a tensor of the server as a uint8 array over the mapping (no copy). The
        block is released once no array made from this one is left."""
        if ref["s"] < 0 or ref["n"] == 0:
            return np.empty(0, dtype=np.uint8)
        s = ref["s"]
        segment = self._peer.get(s) or self._peer_segment(s, ref["z"])
        base = np.frombuffer(segment, dtype=np.uint8, count=ref["n"], offset=ref["o"])
        watcher = weakref.ref(base, self._dead)
        self._watchers[id(watcher)] = (watcher, s, ref["o"])
        return base

    def _dead(self, watcher):
        entry = self._watchers.pop(id(watcher), None)
        if entry is not None:
            self._released.append((entry[1], entry[2]))

    def take_released(self):
        """The server's blocks to give back, as a release message, or None."""
        if not self._released:
            return None
        blocks = []
        while True:
            try:
                blocks.append(list(self._released.popleft()))
            except IndexError:
                break
        return {"kind": "release", "blocks": blocks} if blocks else None

    def locate(self, array):
        """Where a contiguous array lies in one of the server's segments (a view of an input):
        (segment, size, offset), or None."""
        address = array.__array_interface__["data"][0]
        end = address + array.nbytes
        for s, start, size in self._ranges:
            if start <= address and end <= start + size:
                return s, size, address - start
        return None

    # ---- our segments ----

    def put(self, name, datatype, shape, data):
        """Copy `data` (a contiguous uint8 array or bytes) into a block of our segments."""
        length = len(data) if isinstance(data, (bytes, bytearray)) else data.nbytes
        ref = {"name": name, "datatype": datatype, "shape": [int(d) for d in shape]}
        if length == 0:
            ref.update(s=-1, z=0, o=0, n=0)
            return ref
        with self._lock:
            s, o = self._alloc(length)
            segment = self._own[s][0]
        segment[o : o + length] = data if isinstance(data, (bytes, bytearray)) else memoryview(data)
        ref.update(s=s, z=len(segment), o=o, n=length)
        return ref

    def free_memory(self):
        """Bytes free in our segments (Triton's `SharedMemoryManager::FreeMemory`)."""
        with self._lock:
            return sum(size for _, arena in self._own for _, size in arena.free)

    def release(self, blocks):
        with self._lock:
            for s, o in blocks:
                if 0 <= s < len(self._own):
                    self._own[s][1].release(o)

    def _alloc(self, length):
        for s, (_, arena) in enumerate(self._own):
            o = arena.alloc(length)
            if o >= 0:
                return s, o
        largest = max([arena.size for _, arena in self._own] or [0])
        size = max(FIRST_SEGMENT, min(2 * largest, 256 * MIB), -(-(length + ALIGN) // MIB) * MIB)
        s = len(self._own)
        path = os.path.join(SHM_DIR, "%sp%d" % (self.prefix, s))
        segment = _map(path, size, True)
        arena = _Arena(size)
        self._own.append((segment, arena))
        return s, arena.alloc(length)
