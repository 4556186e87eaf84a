"""What crosses between the server and a model's worker process, and how.

Messages (:mod:`tritonx_backend_python.messages`) are small pickles sent over two socket
pairs, each end a :class:`Channel` (the data socket and the control socket). Tensors never
travel inside them when they are large: :func:`pack_tensors` writes the tensor bytes of one
message into a shared-memory segment and the message carries only names, datatypes, shapes
and offsets. The receiver maps the segment (pages populated at once) and builds numpy arrays
directly on the mapping (no copy on receive).

A segment is an anonymous file (``memfd_create``): it has no name in ``/dev/shm`` or anywhere
else, so no other process can open it, and a client of the server cannot register it as a
shared-memory region (``shm_open`` reaches only named objects). Its descriptor travels beside
the message that uses it, on the same Unix socket (``SCM_RIGHTS``): a :class:`Segment` in a
message stands for it, and the channel carries the descriptor with the message's first bytes.
Only the two processes of a link hold it; it disappears when both have let go of it (a killed
process lets go of everything), so nothing can be left behind. A segment is sealed once sized
(its size can never change: a model cannot shrink it under the server's mapping, whose next
read would kill the server with SIGBUS), and a receiver maps only sealed segments.

A writer keeps its segments for reuse (:data:`POOL_LIMIT` bytes in all): the first page of
a kept segment holds one byte that says whether a message occupies it; the receiver clears
it when the last array built on that message is gone, and the writer then writes the next
message into the same, already allocated, pages. The receiver maps a kept segment once and
recognises it in later messages (its writer's tag and number; the descriptor that comes with
each message is checked against the mapping and closed). A message that fits no free kept
segment goes into a one-off segment, which only its receiver maps. Tensors of a message
totalling less than :data:`INLINE_LIMIT` bytes go inline, which is faster than any segment.

This module needs only the standard library and numpy: it is imported by worker processes,
including ones running in another interpreter (``EXECUTION_ENV_PATH``).
"""

from __future__ import annotations

import array as _array
import collections
import fcntl
import itertools
import mmap
import os
import select
import socket
import struct
import tempfile
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

#: Tensors of one message below this many bytes in total are sent inside the message.
INLINE_LIMIT = 64 * 1024

#: Bytes of kept (reusable) segments one writer may hold; beyond it messages use one-off
#: segments.
POOL_LIMIT = 64 << 20

#: The smallest kept segment (capacities are powers of two from here).
POOL_MIN = 1 << 20

#: Default name prefix of shared-memory segments (``shm-region-prefix-name``). Segments have
#: no file name: the prefix only names them in ``/proc/<pid>/fd`` and ``/proc/<pid>/maps``
#: (``/memfd:<prefix>...``), for whoever inspects a process.
DEFAULT_PREFIX = "tritonx_python_backend_shm_"

#: Triton datatype names → numpy dtypes (BF16 travels as its uint16 bits).
NUMPY_OF: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": np.dtype(np.uint16),
    "BYTES": np.dtype(object),
}
_DATATYPE_OF: dict[np.dtype, str] = {
    v: k for k, v in NUMPY_OF.items() if k not in ("BF16", "BYTES")
}

#: A tensor's name on the wire (``str``, or ``(request index, name)`` in a batch).
K = TypeVar("K")

#: A tensor on the wire: (name, datatype, shape, inline bytes | (offset, nbytes)).
TensorDesc = tuple[K, str, tuple[int, ...], Any]


def datatype_of(array: np.ndarray) -> str:
    """The Triton datatype name of a numpy array (object/str/bytes arrays are BYTES)."""
    dtype = array.dtype
    known = _DATATYPE_OF.get(dtype)
    if known is not None:
        return known
    if dtype.kind in "OSU":
        return "BYTES"
    if dtype.name == "bfloat16":
        return "BF16"
    raise TypeError(f"unsupported numpy dtype '{dtype}' for a Triton tensor")


def to_bytes_item(item: Any) -> bytes:
    """One element of a BYTES tensor as ``bytes`` (str is UTF-8 encoded, as Triton does)."""
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, (bytearray, memoryview, np.bytes_)):
        return bytes(item)
    return str(item).encode("utf-8")


def as_object_bytes(array: np.ndarray) -> np.ndarray:
    """A BYTES tensor as an object array of ``bytes`` (the core's representation)."""
    if array.dtype == object and all(type(x) is bytes for x in array.reshape(-1)):
        return array
    out = np.empty(array.shape, dtype=object)
    flat = out.reshape(-1)
    for i, item in enumerate(array.reshape(-1)):
        flat[i] = to_bytes_item(item)
    return out


def serialize_bytes(array: np.ndarray) -> bytes:
    """Triton's BYTES encoding: each element as a 4-byte little-endian length + its bytes."""
    pack = struct.Struct("<I").pack
    parts: list[bytes] = []
    for item in array.reshape(-1):
        data = to_bytes_item(item)
        parts.append(pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes(buffer: bytes | memoryview) -> np.ndarray:
    """Decode Triton's BYTES encoding into a 1-D object array of ``bytes``."""
    view = memoryview(buffer).cast("B")
    items: list[bytes] = []
    offset, end = 0, len(view)
    unpack = struct.Struct("<I").unpack_from
    while offset < end:
        if offset + 4 > end:
            raise ValueError("Invalid bytes tensor data: incomplete length field")
        (length,) = unpack(view, offset)
        offset += 4
        if offset + length > end:
            raise ValueError("Invalid bytes tensor data: string extends beyond buffer")
        items.append(bytes(view[offset : offset + length]))
        offset += length
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


#: A message's header: its length and how many descriptors came with it.
_HEAD = struct.Struct("!IB")
#: The most descriptors one message may carry (messages carry at most one segment).
MAX_FDS = 4
_ANCILLARY = socket.CMSG_SPACE(MAX_FDS * _array.array("i").itemsize)
#: Received descriptors are close-on-exec at once (a model that starts a program leaks none).
_RECV_FLAGS = getattr(socket, "MSG_CMSG_CLOEXEC", 0)
#: ``MAP_POPULATE`` where the platform has it (Linux)
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def close_fds(fds: Iterable[int]) -> None:
    """Close descriptors nobody will use."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class Channel:
    """One end of a Unix socket carrying length-prefixed messages, each with the descriptors
    that go with it (``SCM_RIGHTS``), with the fewest system calls: a message is one write
    and, when small, one read (what arrives beyond it is kept for the next one). One thread
    sends and one receives at a time.

    Works on a blocking or a non-blocking socket (an event loop watching a duplicate of the
    descriptor makes it non-blocking); :meth:`recv_ready` is the event loop's non-blocking
    read. The descriptors of a message arrive with its first bytes, in the order the
    messages were sent: the channel queues them and hands each message its own.
    """

    def __init__(self, fd: int) -> None:
        self._sock = socket.socket(fileno=fd)
        self._fd = fd
        self._buffer = b""
        #: descriptors received and not yet handed out with their message
        self._fds: collections.deque[int] = collections.deque()

    def fileno(self) -> int:
        """The socket's file descriptor (-1 once closed)."""
        return self._fd

    def send_bytes(self, data: bytes, fds: Sequence[int] = ()) -> None:
        """Send one message with ``fds`` (duplicated into the receiver; the caller keeps and
        closes its own). Raises OSError once the peer is gone."""
        if self._fd < 0:
            raise OSError("the channel is closed")
        if len(fds) > MAX_FDS:
            raise ValueError(f"a message carries at most {MAX_FDS} descriptors")
        view = memoryview(_HEAD.pack(len(data), len(fds)) + data)
        if fds:
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _array.array("i", fds))]
            while True:
                try:
                    view = view[self._sock.sendmsg([view], rights) :]
                    break
                except BlockingIOError:
                    select.select([], [self._fd], [])
        while view:
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:  # a non-blocking socket whose buffer is full
                select.select([], [self._fd], [])

    def poll(self, timeout: float | None = None) -> bool:
        """Whether a message (or the end) can be read within ``timeout`` seconds."""
        if self._buffer:
            return True
        if self._fd < 0:
            raise OSError("the channel is closed")
        ready, _, _ = select.select([self._fd], [], [], timeout)
        return bool(ready)

    def _recv(self) -> bytes:
        """What one read returns (the descriptors that came with it are queued); raises
        BlockingIOError on a non-blocking socket with nothing to read."""
        chunk, ancillary, _flags, _ = self._sock.recvmsg(1 << 16, _ANCILLARY, _RECV_FLAGS)
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = _array.array("i")
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                self._fds.extend(fds)
        if not chunk:
            raise EOFError("the peer closed the channel")
        return chunk

    def _read(self) -> bytes:
        while True:
            try:
                return self._recv()
            except BlockingIOError:  # a non-blocking socket: wait for the bytes
                select.select([self._fd], [], [])

    def _take(self, buffer: bytes) -> tuple[bytes, list[int]] | None:
        """The first message of ``buffer`` and its descriptors, if it is complete (the rest is
        kept)."""
        if len(buffer) < _HEAD.size:
            self._buffer = buffer
            return None
        size, count = _HEAD.unpack_from(buffer)
        end = _HEAD.size + size
        if len(buffer) < end:
            self._buffer = buffer
            return None
        self._buffer = buffer[end:]
        if count > len(self._fds):  # lost on the way (never, unless the peer is broken)
            close_fds(self._fds)
            self._fds.clear()
            raise ValueError(f"a message announced {count} descriptors that did not arrive")
        return buffer[_HEAD.size : end], [self._fds.popleft() for _ in range(count)]

    def recv(self) -> tuple[bytes, list[int]]:
        """The next message and the descriptors that came with it (the caller's to close).

        :raises EOFError: the peer is gone.
        """
        if self._fd < 0:
            raise OSError("the channel is closed")
        buffer = self._buffer or self._read()
        while len(buffer) < _HEAD.size:
            buffer += self._read()
        end = _HEAD.size + _HEAD.unpack_from(buffer)[0]
        if len(buffer) < end:
            parts = [buffer]
            have = len(buffer)
            while have < end:
                chunk = self._read()
                parts.append(chunk)
                have += len(chunk)
            buffer = b"".join(parts)
        message = self._take(buffer)
        assert message is not None
        return message

    def recv_bytes(self) -> bytes:
        """The next message, for messages that carry no descriptor (any that came is closed).

        :raises EOFError: the peer is gone.
        """
        data, fds = self.recv()
        close_fds(fds)
        return data

    def recv_ready(self) -> tuple[bytes, list[int]] | None:
        """The next message and its descriptors if the bytes that can be read without
        waiting complete it, else None (what arrived is kept: call again when the socket is
        readable).

        :raises EOFError: the peer is gone.
        """
        if self._fd < 0:
            raise OSError("the channel is closed")
        buffer = self._buffer
        while True:
            message = self._take(buffer)
            if message is not None:
                return message
            try:
                chunk = self._recv()
            except BlockingIOError:
                return None
            except EOFError:
                self._buffer = buffer
                raise
            buffer = buffer + chunk if buffer else chunk

    def close(self) -> None:
        """Close the socket (and descriptors received for messages nobody read)."""
        if self._fd < 0:
            return
        self._fd = -1
        self._sock.close()
        close_fds(self._fds)
        self._fds.clear()


#: Seals of a segment once sized: its size can never change again (a process that holds it
#: cannot shrink it under another's mapping, whose next read would be a SIGBUS), where the
#: platform has them (Linux memfd).
_F_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 0)
_F_GET_SEALS = getattr(fcntl, "F_GET_SEALS", 0)
_SEAL_SHRINK = getattr(fcntl, "F_SEAL_SHRINK", 0)
_SEALS = _SEAL_SHRINK | getattr(fcntl, "F_SEAL_GROW", 0) | getattr(fcntl, "F_SEAL_SEAL", 0)
_SEALED = bool(hasattr(os, "memfd_create") and hasattr(os, "MFD_ALLOW_SEALING") and _SEALS)


def _anonymous_file(name: str) -> int:
    """A new, empty, nameless file in memory (``memfd_create``; elsewhere a temporary file
    unlinked at once): its descriptor is the only way to it."""
    if hasattr(os, "memfd_create"):
        flags = os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if _SEALED else 0)
        return os.memfd_create(name.encode()[:249].decode(errors="ignore"), flags)
    with tempfile.TemporaryFile() as file:
        return os.dup(file.fileno())


def describe_segments() -> str:
    """Where tensors between the server and its workers live, for the start-up log: memfd
    segments need no mount (``/dev/shm`` may be small or absent); elsewhere unlinked files
    in the temporary folder (``TMPDIR``)."""
    if hasattr(os, "memfd_create"):
        return (
            "tensors cross to worker processes in memfd segments (anonymous memory: "
            "/dev/shm is not used, so its size does not limit tensors)"
        )
    return (
        "tensors cross to worker processes in unlinked files in "
        f"{tempfile.gettempdir()} (no memfd on this platform; /dev/shm is not used)"
    )


def _seal(fd: int) -> None:
    """Fix the size of a segment that has its final size."""
    if _SEALED:
        fcntl.fcntl(fd, _F_ADD_SEALS, _SEALS)


def _check_sealed(fd: int) -> None:
    """Refuse a descriptor that is not a segment whose size is fixed (another kind of file,
    or one a peer could shrink under this process's mapping).

    :raises ValueError: it is not.
    """
    if not _SEALED:
        return
    try:
        seals = fcntl.fcntl(fd, _F_GET_SEALS)
    except OSError:
        seals = 0
    if not seals & _SEAL_SHRINK:
        raise ValueError("a shared-memory segment arrived that is not a sealed memfd")


#: A kept segment's first page: byte 0 is :data:`_BUSY` while a message occupies the segment.
_HEADER = mmap.PAGESIZE
_FREE, _BUSY = 0, 1


class _Kept:
    """A segment a writer keeps: its number, descriptor, capacity (bytes after the header)
    and a mapping of it (header included) that lives as long as the writer keeps it."""

    __slots__ = ("capacity", "data", "fd", "mm", "number")

    def __init__(self, number: int, fd: int, capacity: int) -> None:
        self.number = number
        self.fd = fd
        self.capacity = capacity
        self.mm = mmap.mmap(fd, _HEADER + capacity)
        self.data = memoryview(self.mm)[_HEADER:]

    def write(self, buffers: Sequence[memoryview]) -> None:
        """Copy ``buffers`` back to back into the segment (a plain memory copy: the pages
        stay mapped from one message to the next)."""
        offset = 0
        data = self.data
        for buf in buffers:
            end = offset + buf.nbytes
            data[offset:end] = buf
            offset = end

    def free(self) -> None:
        """The message in it will not be read: the segment is free again."""
        try:
            self.mm[0] = _FREE
        except ValueError:  # closed: the writer let go of it
            pass

    def close(self) -> None:
        fd, self.fd = self.fd, -1  # (a message not sent yet cannot send it any more)
        self.data.release()
        try:
            self.mm.close()
        except BufferError:  # an array of this process still uses it: unmapped with it
            pass
        close_fds((fd,))


#: The states of a :class:`Segment`.
_PENDING, _SENT, _WIRE, _RECEIVED, _DONE = range(5)


class Segment:
    """The shared-memory segment of one message.

    On the wire it is ``(tag, number)``: the writer that made it and the number of one of its
    kept segments (-1: a one-off segment). Its descriptor goes beside the message, on the same
    socket (:func:`messages.send <tritonx_backend_python.messages.send>`); the receiver gives
    the one that came to the segment (:meth:`attach`) and :func:`unpack_tensors` maps and
    closes it.

    A segment that never reaches its reader goes back to its writer when it is discarded
    (:meth:`discard`) or garbage collected: a kept one is free again, a one-off one's
    descriptor is closed (its memory goes with the last descriptor).
    """

    __slots__ = ("_fd", "_slot", "_state", "number", "tag")

    def __init__(self, tag: str, number: int, fd: int = -1, slot: _Kept | None = None) -> None:
        self.tag = tag
        self.number = number
        self._fd = fd
        self._slot = slot
        self._state = _PENDING if fd >= 0 else _WIRE

    def __reduce__(self) -> tuple[Any, ...]:
        return (Segment, (self.tag, self.number))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Segment):
            return NotImplemented
        return (self.tag, self.number) == (other.tag, other.number)

    def __hash__(self) -> int:
        return hash((self.tag, self.number))

    def __repr__(self) -> str:
        return f"Segment({self.tag!r}, {self.number})"

    @property
    def kept(self) -> bool:
        """Whether this is one of its writer's kept segments."""
        return self.number >= 0

    def descriptor(self) -> int:
        """(Sending side) the descriptor to send with the message.

        :raises ValueError: the segment was sent or given up already.
        """
        if self._state != _PENDING:
            raise ValueError(f"{self!r} has no descriptor to send")
        return self._slot.fd if self._slot is not None else self._fd

    def sent(self) -> None:
        """(Sending side) the message left with the descriptor: the receiver has its own
        copy, a one-off segment's is closed here."""
        if self._state == _PENDING:
            self._state = _SENT
            if self._slot is None:
                fd, self._fd = self._fd, -1
                close_fds((fd,))

    def attach(self, fd: int) -> None:
        """(Receiving side) the descriptor that came with the message."""
        if self._state != _WIRE:
            close_fds((fd,))
            raise ValueError(f"{self!r} has a descriptor already")
        self._fd = fd
        self._state = _RECEIVED

    def take(self) -> int:
        """(Receiving side) the segment's descriptor, now the caller's to close.

        :raises ValueError: no descriptor came with it (or it was taken already).
        """
        if self._state != _RECEIVED:
            raise ValueError(f"shared-memory segment {self!r} came without its descriptor")
        fd, self._fd, self._state = self._fd, -1, _DONE
        return fd

    def discard(self) -> None:
        """Nobody will read the message: its segment goes back to its writer (a kept one is
        free again, a one-off one's descriptor here is closed). Idempotent; a segment sent or
        read already is left alone."""
        state, self._state = self._state, _DONE
        fd, self._fd = self._fd, -1
        if state == _PENDING:
            if self._slot is not None:
                self._slot.free()
            else:
                close_fds((fd,))
        elif state == _RECEIVED:
            if self.kept:
                try:
                    os.pwrite(fd, bytes((_FREE,)), 0)
                except OSError:
                    pass
            close_fds((fd,))

    def __del__(self) -> None:
        try:
            self.discard()
        except Exception:  # interpreter shutdown
            pass


class ShmWriter:
    """Creates the shared-memory segments this process sends; ``tag`` tells its segments
    from other writers' (their names, ``<prefix><tag>_k<n>``, only label them in ``/proc``).

    Thread-safe: several threads of a process may send through one writer.
    """

    def __init__(self, prefix: str = DEFAULT_PREFIX, tag: str = "") -> None:
        self.prefix = prefix
        self.tag = tag or str(os.getpid())
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._kept: list[_Kept] = []
        self._kept_bytes = 0
        self._closed = False

    def cleanup(self) -> None:
        """Let go of this writer's kept segments (and of this process's mappings of them);
        later messages get one-off segments. Arrays a receiver built on them stay valid: the
        memory goes with the last mapping."""
        with self._lock:
            kept, self._kept, self._kept_bytes = self._kept, [], 0
            self._closed = True
        for segment in kept:
            segment.close()
        forget(self.tag)

    def kept(self) -> list[str]:
        """The names of the segments this writer keeps (as ``/proc/<pid>/fd`` shows them,
        after ``/memfd:``)."""
        with self._lock:
            return [f"{self.prefix}{self.tag}_k{s.number}" for s in self._kept]

    def write(self, buffers: Sequence[memoryview], total: int) -> Segment:
        """One segment holding ``buffers`` back to back."""
        slot = self._take(total)
        if slot is None:
            return self._write_once(buffers, total)
        try:
            slot.write(buffers)
        except BaseException:
            slot.free()
            raise
        return Segment(self.tag, slot.number, slot.fd, slot)

    def _take(self, total: int) -> _Kept | None:
        """A kept segment of at least ``total`` bytes, now marked busy (None: none to keep)."""
        with self._lock:
            if self._closed:
                return None
            best: _Kept | None = None
            for segment in self._kept:
                if segment.capacity >= total and segment.mm[0] == _FREE:
                    if best is None or segment.capacity < best.capacity:
                        best = segment
            if best is None:
                capacity = max(POOL_MIN, 1 << (max(total, 1) - 1).bit_length())
                if capacity > POOL_LIMIT:
                    return None
                while self._kept_bytes + capacity > POOL_LIMIT:
                    free = [s for s in self._kept if s.mm[0] == _FREE]
                    if not free:
                        return None
                    self._drop(min(free, key=lambda s: s.capacity))
                created = self._create(capacity)
                if created is None:
                    return None
                best = created
            best.mm[0] = _BUSY
            return best

    def _create(self, capacity: int) -> _Kept | None:
        """A new kept segment, its pages allocated now (None: no memory for it). Writing into
        a mapping of pages that cannot be allocated would kill the process (SIGBUS), so they
        are all allocated here, where running out is an error."""
        number = next(self._seq)
        fd = _anonymous_file(f"{self.prefix}{self.tag}_k{number}")
        try:
            os.ftruncate(fd, _HEADER + capacity)
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, _HEADER + capacity)
            _seal(fd)
            segment = _Kept(number, fd, capacity)
        except OSError:
            close_fds((fd,))
            return None
        except BaseException:
            close_fds((fd,))
            raise
        self._kept.append(segment)
        self._kept_bytes += capacity
        return segment

    def _drop(self, segment: _Kept) -> None:
        self._kept.remove(segment)
        self._kept_bytes -= segment.capacity
        segment.close()

    def _write_once(self, buffers: Sequence[memoryview], total: int) -> Segment:
        fd = _anonymous_file(f"{self.prefix}{self.tag}_{next(self._seq)}")
        try:
            # written with pwrite, not through a mapping: one copy into the file's pages with no
            # page faults (a fresh mapping faults each 4 KiB page in)
            os.ftruncate(fd, max(total, 1))
            _seal(fd)
            _pwrite_all(fd, buffers, 0)
        except BaseException:
            close_fds((fd,))
            raise
        return Segment(self.tag, -1, fd)


def _pwrite_all(fd: int, buffers: Sequence[memoryview], offset: int) -> None:
    for buf in buffers:
        view = buf
        while view.nbytes:
            written = os.pwrite(fd, view, offset)
            offset += written
            view = view[written:]


#: Kept segments of other processes this process has mapped, by (writer tag, number), with
#: their inode (most recent last), and the bytes they span; beyond :data:`_MAPPED_LIMIT` the
#: least recently used are let go (a mapping an array still uses goes away with the array).
_mapped: dict[tuple[str, int], tuple[int, mmap.mmap]] = {}
_mapped_bytes = 0
_MAPPED_LIMIT = 4 * POOL_LIMIT
_mapped_lock = threading.Lock()


def _mapping(segment: Segment) -> mmap.mmap:
    """This process's mapping of the kept segment ``segment`` (made once, then reused); the
    descriptor that came with it is closed."""
    global _mapped_bytes
    fd = segment.take()
    key = (segment.tag, segment.number)
    try:
        inode = os.fstat(fd).st_ino
        with _mapped_lock:
            cached = _mapped.pop(key, None)
            if cached is not None and cached[0] != inode:  # another file by that name
                _mapped_bytes -= len(cached[1])
                cached = None
            if cached is None:
                _check_sealed(fd)
                mm = mmap.mmap(fd, os.fstat(fd).st_size, flags=mmap.MAP_SHARED | _POPULATE)
                cached = (inode, mm)
                _mapped_bytes += len(mm)
                while _mapped_bytes > _MAPPED_LIMIT and _mapped:
                    _mapped_bytes -= len(_mapped.pop(next(iter(_mapped)))[1])
            _mapped[key] = cached
            return cached[1]
    finally:
        os.close(fd)


def forget(tag: str) -> None:
    """Let go of this process's mappings of the kept segments of writer ``tag`` (its process
    is gone, or it let go of them); arrays built on them keep their memory."""
    global _mapped_bytes
    with _mapped_lock:
        for key in [key for key in _mapped if key[0] == tag]:
            _mapped_bytes -= len(_mapped.pop(key)[1])


def _release(mm: mmap.mmap) -> None:
    """The receiver is done with the message in a kept segment: the writer may reuse it."""
    mm[0] = _FREE


def _raw(array: np.ndarray, datatype: str) -> memoryview:
    if datatype == "BYTES":
        return memoryview(serialize_bytes(array))
    if datatype == "BF16" and array.dtype != np.uint16:
        array = array.view(np.uint16)
    return np.ascontiguousarray(array).data.cast("B")


def pack_tensors(
    tensors: Iterable[tuple[K, np.ndarray, str]], writer: ShmWriter
) -> tuple[Segment | None, list[TensorDesc[K]]]:
    """Describe ``(name, array, datatype)`` tensors for a message.

    Returns the shared-memory segment (``None`` when everything is inline; its descriptor must
    go with the message) and one descriptor per tensor.
    """
    items = [(name, array, datatype, _raw(array, datatype)) for name, array, datatype in tensors]
    total = sum(raw.nbytes for *_, raw in items)
    if total < INLINE_LIMIT:
        return None, [(n, dt, tuple(a.shape), raw.tobytes()) for n, a, dt, raw in items]
    segment = writer.write([raw for *_, raw in items], total)
    descs: list[TensorDesc[K]] = []
    offset = 0
    for name, array, datatype, raw in items:
        descs.append((name, datatype, tuple(array.shape), (offset, raw.nbytes)))
        offset += raw.nbytes
    return segment, descs


def _decode(datatype: str, shape: tuple[int, ...], data: Any) -> np.ndarray:
    if datatype == "BYTES":
        return deserialize_bytes(data).reshape(shape)
    dtype = NUMPY_OF[datatype]
    if isinstance(data, bytes):
        # a writable copy: models may modify their inputs in place
        return np.frombuffer(bytearray(data), dtype=dtype).reshape(shape)
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def unpack_tensors(
    segment: Segment | None, descs: Sequence[TensorDesc[K]]
) -> list[tuple[K, np.ndarray, str]]:
    """The ``(name, array, datatype)`` tensors a message describes; consumes its segment
    (whose descriptor must have come with the message).

    Arrays read from a segment are views of a mapping of it: writable and never copied. A
    kept one goes back to its writer when the last of these arrays is gone (the writer does
    not read it back, so what a model writes into its inputs reaches no other tensor); a
    one-off one is this process's alone once mapped.
    """
    if segment is None:
        return [(n, _decode(dt, shape, data), dt) for n, dt, shape, data in descs]
    if segment.kept:
        # the writer's kept segment, mapped once by this process: the arrays are views of one
        # array spanning this message; when it is gone, the segment is the writer's again
        mm = _mapping(segment)
        length = max((offset + nbytes for *_, (offset, nbytes) in descs), default=0)
        whole = np.frombuffer(mm, dtype=np.uint8, count=length, offset=_HEADER)
        weakref.finalize(whole, _release, mm)
        out: list[tuple[K, np.ndarray, str]] = []
        for name, datatype, shape, (offset, nbytes) in descs:
            part = whole[offset : offset + nbytes]
            if datatype == "BYTES":
                array = deserialize_bytes(part.data).reshape(shape)
            else:
                array = part.view(NUMPY_OF[datatype]).reshape(shape)
            out.append((name, array, datatype))
        return out
    fd = segment.take()
    try:
        _check_sealed(fd)
        size = os.fstat(fd).st_size
        # shared, yet private to this process: the writer closed its descriptor when it sent
        # it, so writes to the arrays reach nobody; populated in one system call instead of
        # one page fault per 4 KiB page
        mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | _POPULATE)
    finally:
        os.close(fd)
    out = []
    for name, datatype, shape, (offset, nbytes) in descs:
        view = memoryview(mm)[offset : offset + nbytes]
        out.append((name, _decode(datatype, shape, view), datatype))
    return out
