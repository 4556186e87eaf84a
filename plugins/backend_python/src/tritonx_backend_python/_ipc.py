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

This module holds the segments and the packing of tensors into them; the sockets
(:class:`Channel`, :mod:`~tritonx_backend_python._channel`) and the datatype tables and BYTES
encoding (:mod:`~tritonx_backend_python._datatypes`) are modules of their own, whose names it
re-exports.

This module needs only the standard library and numpy: it is imported by worker processes,
including ones running in another interpreter (``EXECUTION_ENV_PATH``).
"""

from __future__ import annotations

import fcntl
import itertools
import mmap
import os
import tempfile
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

from tritonx_backend_python._channel import MAX_FDS as MAX_FDS
from tritonx_backend_python._channel import Channel as Channel
from tritonx_backend_python._channel import close_fds
from tritonx_backend_python._datatypes import NUMPY_OF, deserialize_bytes, serialize_bytes
from tritonx_backend_python._datatypes import as_object_bytes as as_object_bytes
from tritonx_backend_python._datatypes import datatype_of as datatype_of
from tritonx_backend_python._datatypes import to_bytes_item as to_bytes_item

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


#: A tensor's name on the wire (``str``, or ``(request index, name)`` in a batch).
K = TypeVar("K")

#: A tensor on the wire: (name, datatype, shape, inline bytes | (offset, nbytes)).
TensorDesc = tuple[K, str, tuple[int, ...], Any]


#: ``MAP_POPULATE`` where the platform has it (Linux)
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


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
