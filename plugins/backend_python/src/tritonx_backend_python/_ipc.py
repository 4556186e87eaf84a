"""What crosses between the server and a model's worker process, and how.

Messages (:mod:`tritonx_backend_python.messages`) are small pickles sent over a socket pair
(a :class:`Channel` for the data socket, a ``multiprocessing.connection.Connection`` for the
control socket). Tensors never travel inside them
when they are large: :func:`pack_tensors` writes the tensor bytes of one message into a
shared-memory segment (a file in ``/dev/shm``, written with ``pwrite``) and the
message carries only names, datatypes, shapes and offsets. The receiver maps the segment
(pages populated at once) and builds numpy arrays directly on the mapping (no copy on
receive).

A writer keeps its segments for reuse (:data:`POOL_LIMIT` bytes in all): the first page of
a kept segment holds one byte that says whether a message occupies it; the receiver clears
it when the last array built on that message is gone, and the writer then writes the next
message into the same, already allocated, pages. A message that fits no free kept segment
goes into a one-off segment, which the receiver unlinks as soon as it has mapped it.
Tensors of a message totalling less than :data:`INLINE_LIMIT` bytes go inline, which is
faster than any segment.

This module needs only the standard library and numpy: it is imported by worker processes,
including ones running in another interpreter (``EXECUTION_ENV_PATH``).
"""

from __future__ import annotations

import glob
import itertools
import mmap
import os
import select
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

#: Default file-name prefix of shared-memory segments (``shm-region-prefix-name``).
DEFAULT_PREFIX = "tritonx_python_backend_shm_"

_SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()

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


_LENGTH = struct.Struct("!I")
#: ``MAP_POPULATE`` where the platform has it (Linux)
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class Channel:
    """One end of a socket carrying length-prefixed messages, with the fewest system calls:
    a message is one ``write`` and, when small, one ``read`` (what arrives beyond it is kept
    for the next :meth:`recv_bytes`). One thread sends and one receives at a time.

    The worker's data socket: each request is one write and one read each way. Works on a
    blocking or a non-blocking socket (an event loop watching a duplicate of the descriptor
    makes it non-blocking); :meth:`recv_ready` is the event loop's non-blocking read.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""

    def fileno(self) -> int:
        """The socket's file descriptor (-1 once closed)."""
        return self._fd

    def send_bytes(self, data: bytes) -> None:
        """Send one message (raises OSError once the peer is gone)."""
        if self._fd < 0:
            raise OSError("the channel is closed")
        view = memoryview(_LENGTH.pack(len(data)) + data)
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

    def _read(self) -> bytes:
        while True:
            try:
                chunk = os.read(self._fd, 1 << 16)
            except BlockingIOError:  # a non-blocking socket: wait for the bytes
                select.select([self._fd], [], [])
                continue
            if not chunk:
                raise EOFError("the peer closed the channel")
            return chunk

    def recv_bytes(self) -> bytes:
        """The next message. :raises EOFError: the peer is gone."""
        if self._fd < 0:
            raise OSError("the channel is closed")
        buffer = self._buffer or self._read()
        while len(buffer) < 4:
            buffer += self._read()
        (size,) = _LENGTH.unpack_from(buffer)
        end = 4 + size
        if len(buffer) < end:
            parts = [buffer]
            have = len(buffer)
            while have < end:
                chunk = self._read()
                parts.append(chunk)
                have += len(chunk)
            buffer = b"".join(parts)
        self._buffer = buffer[end:]
        return buffer[4:end]

    def recv_ready(self) -> bytes | None:
        """The next message if the bytes that can be read without waiting complete it, else
        None (what arrived is kept: call again when the socket is readable).

        :raises EOFError: the peer is gone.
        """
        if self._fd < 0:
            raise OSError("the channel is closed")
        buffer = self._buffer
        while True:
            if len(buffer) >= 4:
                end = 4 + _LENGTH.unpack_from(buffer)[0]
                if len(buffer) >= end:
                    self._buffer = buffer[end:]
                    return buffer[4:end]
            try:
                chunk = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                self._buffer = buffer
                return None
            if not chunk:
                self._buffer = buffer
                raise EOFError("the peer closed the channel")
            buffer = buffer + chunk if buffer else chunk

    def close(self) -> None:
        """Close the socket."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


#: A kept segment's first page: byte 0 is :data:`_BUSY` while a message occupies the segment.
_HEADER = mmap.PAGESIZE
_FREE, _BUSY = 0, 1
#: The last part of a kept segment's name starts with this (one-off ones are a number).
_KEPT = "k"


class _Kept:
    """A segment a writer keeps: its name, capacity (bytes after the header) and a mapping
    of it (header included) that lives as long as the writer keeps it."""

    __slots__ = ("capacity", "data", "mm", "name")

    def __init__(self, name: str, fd: int, capacity: int) -> None:
        self.name = name
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

    def close(self) -> None:
        self.data.release()
        try:
            self.mm.close()
        except BufferError:  # an array of this process still uses it: unmapped with it
            pass


def _pwrite_all(fd: int, buffers: Sequence[memoryview], offset: int) -> None:
    for buf in buffers:
        view = buf
        while view.nbytes:
            written = os.pwrite(fd, view, offset)
            offset += written
            view = view[written:]


class ShmWriter:
    """Creates the shared-memory segments this process sends; names carry ``tag``.

    Thread-safe: several threads of a process may send through one writer.
    """

    def __init__(self, prefix: str = DEFAULT_PREFIX, tag: str = "") -> None:
        self.prefix = prefix
        self.tag = tag or str(os.getpid())
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._kept: list[_Kept] = []
        self._kept_bytes = 0

    def pattern(self) -> str:
        """A glob matching every segment this writer may have left behind."""
        return os.path.join(_SHM_DIR, f"{self.prefix}{self.tag}_*")

    def cleanup(self) -> None:
        """Unlink the segments of this writer (its kept ones, and one-off ones nobody
        consumed after a peer died). Arrays a receiver built on them stay valid."""
        with self._lock:
            kept, self._kept, self._kept_bytes = self._kept, [], 0
        for segment in kept:
            segment.close()
        _forget(f"{self.prefix}{self.tag}_")
        for path in glob.glob(self.pattern()):
            try:
                os.unlink(path)
            except OSError:
                pass

    def write(self, buffers: Sequence[memoryview], total: int) -> str:
        """One segment holding ``buffers`` back to back; returns its name."""
        segment = self._take(total)
        if segment is None:
            return self._write_once(buffers, total)
        try:
            segment.write(buffers)
        except BaseException:
            segment.mm[0] = _FREE
            raise
        return segment.name

    def _take(self, total: int) -> _Kept | None:
        """A kept segment of at least ``total`` bytes, now marked busy (None: none to keep)."""
        with self._lock:
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
        """A new kept segment, its pages allocated now (None: /dev/shm is full). Writing into
        a mapping of pages tmpfs cannot allocate would kill the process (SIGBUS), so they
        are all allocated here, where running out is an error."""
        name = f"{self.prefix}{self.tag}_{_KEPT}{next(self._seq)}"
        path = os.path.join(_SHM_DIR, name)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, _HEADER + capacity)
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, _HEADER + capacity)
            segment = _Kept(name, fd, capacity)
        except OSError:
            os.unlink(path)
            return None
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        self._kept.append(segment)
        self._kept_bytes += capacity
        return segment

    def _drop(self, segment: _Kept) -> None:
        self._kept.remove(segment)
        self._kept_bytes -= segment.capacity
        segment.close()
        try:
            os.unlink(os.path.join(_SHM_DIR, segment.name))
        except OSError:
            pass

    def _write_once(self, buffers: Sequence[memoryview], total: int) -> str:
        name = f"{self.prefix}{self.tag}_{next(self._seq)}"
        path = os.path.join(_SHM_DIR, name)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            # written with pwrite, not through a mapping: one copy into the file's pages with no
            # page faults (a fresh mapping faults each 4 KiB page in)
            os.ftruncate(fd, max(total, 1))
            _pwrite_all(fd, buffers, 0)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        return name


def remove_orphans(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Unlink the segments named ``<prefix><pid>...`` whose process ``pid`` is gone (left by
    a server or worker that was killed); returns their names."""
    removed: list[str] = []
    for path in glob.glob(os.path.join(_SHM_DIR, f"{glob.escape(prefix)}*")):
        name = os.path.basename(path)
        rest = name[len(prefix) :]
        digits = len(rest) - len(rest.lstrip("0123456789"))
        if not digits:
            continue
        try:
            os.kill(int(rest[:digits]), 0)
        except ProcessLookupError:
            try:
                os.unlink(path)
                removed.append(name)
            except OSError:
                pass
        except OSError:  # alive, someone else's
            pass
    return removed


def _is_kept(segment: str) -> bool:
    return segment.rpartition("_")[2].startswith(_KEPT)


def _path(segment: str) -> str:
    """The file of a segment a peer named (a plain file name in the shared-memory folder,
    never a path leading elsewhere).

    :raises ValueError: ``segment`` is not a plain file name.
    """
    if not segment or segment.startswith(".") or os.path.basename(segment) != segment:
        raise ValueError(f"invalid shared-memory segment name {segment!r}")
    return os.path.join(_SHM_DIR, segment)


#: Kept segments of other processes this process has mapped, by name (most recent last), and
#: the bytes they span; beyond :data:`_MAPPED_LIMIT` the least recently used are let go (a
#: mapping an array still uses goes away with the array).
_mapped: dict[str, mmap.mmap] = {}
_mapped_bytes = 0
_MAPPED_LIMIT = 4 * POOL_LIMIT
_mapped_lock = threading.Lock()


def _mapping(segment: str) -> mmap.mmap:
    """This process's mapping of the kept segment ``segment`` (made once, then reused)."""
    global _mapped_bytes
    with _mapped_lock:
        mm = _mapped.pop(segment, None)
        if mm is None:
            fd = os.open(_path(segment), os.O_RDWR)
            try:
                mm = mmap.mmap(fd, os.fstat(fd).st_size, flags=mmap.MAP_SHARED | _POPULATE)
            finally:
                os.close(fd)
            _mapped_bytes += len(mm)
            while _mapped_bytes > _MAPPED_LIMIT and _mapped:
                _mapped_bytes -= len(_mapped.pop(next(iter(_mapped))))
        _mapped[segment] = mm
        return mm


def _forget(prefix: str) -> None:
    """Let go of the mappings of kept segments whose names start with ``prefix``."""
    global _mapped_bytes
    with _mapped_lock:
        for name in [name for name in _mapped if name.startswith(prefix)]:
            _mapped_bytes -= len(_mapped.pop(name))


def _release(mm: mmap.mmap) -> None:
    """The receiver is done with the message in a kept segment: the writer may reuse it."""
    mm[0] = _FREE


def unlink_segment(segment: str) -> None:
    """Give up a segment nobody will consume (its receiver is gone)."""
    path = _path(segment)
    if _is_kept(segment):
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return
        try:
            os.pwrite(fd, bytes((_FREE,)), 0)
        except OSError:
            pass
        finally:
            os.close(fd)
        return
    try:
        os.unlink(path)
    except OSError:
        pass


def _raw(array: np.ndarray, datatype: str) -> memoryview:
    if datatype == "BYTES":
        return memoryview(serialize_bytes(array))
    if datatype == "BF16" and array.dtype != np.uint16:
        array = array.view(np.uint16)
    return np.ascontiguousarray(array).data.cast("B")


def pack_tensors(
    tensors: Iterable[tuple[K, np.ndarray, str]], writer: ShmWriter
) -> tuple[str | None, list[TensorDesc[K]]]:
    """Describe ``(name, array, datatype)`` tensors for a message.

    Returns the shared-memory segment name (``None`` when everything is inline) and one
    descriptor per tensor.
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
    segment: str | None, descs: Sequence[TensorDesc[K]]
) -> list[tuple[K, np.ndarray, str]]:
    """The ``(name, array, datatype)`` tensors a message describes; consumes its segment.

    Arrays read from a segment are views of a mapping of it: writable and never copied. A
    one-off segment's file is already unlinked when this returns; a kept one goes back to its
    writer when the last of these arrays is gone (the writer does not read it back, so what a
    model writes into its inputs reaches no other tensor).
    """
    if segment is None:
        return [(n, _decode(dt, shape, data), dt) for n, dt, shape, data in descs]
    if _is_kept(segment):
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
    path = _path(segment)
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        # shared, yet private to this process: the writer has closed the file and it is
        # unlinked below, so writes to the arrays reach nobody; populated in one system call
        # instead of one page fault per 4 KiB page
        mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | _POPULATE)
    finally:
        os.close(fd)
        os.unlink(path)
    out = []
    for name, datatype, shape, (offset, nbytes) in descs:
        view = memoryview(mm)[offset : offset + nbytes]
        out.append((name, _decode(datatype, shape, view), datatype))
    return out
