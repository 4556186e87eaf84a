"""What crosses between the server and a model's worker process, and how.

Messages (:mod:`tritonx_backend_python.messages`) are small pickles sent over a socket pair
(a :class:`Channel` for the data socket, a ``multiprocessing.connection.Connection`` for the
control socket). Tensors never travel inside them
when they are large: :func:`pack_tensors` writes the tensor bytes of one message into a
single shared-memory segment (a file in ``/dev/shm``, written with ``pwrite``) and the
message carries only names, datatypes, shapes and offsets. The receiver maps the segment
(pages populated at once), unlinks it and builds numpy arrays directly on the mapping (no copy
on receive; the mapping goes away with the last array). Tensors of a message totalling less than
:data:`INLINE_LIMIT` bytes go inline, which is faster than any segment.

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
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

#: Tensors of one message below this many bytes in total are sent inside the message.
INLINE_LIMIT = 64 * 1024

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

    The worker's data socket: each request is one write and one read each way.
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
            view = view[os.write(self._fd, view) :]

    def poll(self, timeout: float | None = None) -> bool:
        """Whether a message (or the end) can be read within ``timeout`` seconds."""
        if self._buffer:
            return True
        if self._fd < 0:
            raise OSError("the channel is closed")
        ready, _, _ = select.select([self._fd], [], [], timeout)
        return bool(ready)

    def _read(self) -> bytes:
        chunk = os.read(self._fd, 1 << 16)
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

    def close(self) -> None:
        """Close the socket."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


class ShmWriter:
    """Creates the shared-memory segments this process sends; names carry ``tag``."""

    def __init__(self, prefix: str = DEFAULT_PREFIX, tag: str = "") -> None:
        self.prefix = prefix
        self.tag = tag or str(os.getpid())
        self._seq = itertools.count()

    def pattern(self) -> str:
        """A glob matching every segment this writer may have left behind."""
        return os.path.join(_SHM_DIR, f"{self.prefix}{self.tag}_*")

    def cleanup(self) -> None:
        """Unlink the segments of this writer nobody consumed (after a peer died)."""
        for path in glob.glob(self.pattern()):
            try:
                os.unlink(path)
            except OSError:
                pass

    def write(self, buffers: Sequence[memoryview], total: int) -> str:
        """One segment holding ``buffers`` back to back; returns its file name."""
        name = f"{self.prefix}{self.tag}_{next(self._seq)}"
        path = os.path.join(_SHM_DIR, name)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            # written with pwrite, not through a mapping: one copy into the file's pages with no
            # page faults (a fresh mapping faults each 4 KiB page in)
            os.ftruncate(fd, max(total, 1))
            offset = 0
            for buf in buffers:
                view = buf
                while view.nbytes:
                    written = os.pwrite(fd, view, offset)
                    offset += written
                    view = view[written:]
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        return name


def unlink_segment(segment: str) -> None:
    """Remove a segment nobody will consume (its receiver is gone)."""
    try:
        os.unlink(os.path.join(_SHM_DIR, segment))
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

    Arrays read from a segment are views of a mapping of it: writable, never copied, and
    the segment file is already unlinked when this returns (so what a model writes into its
    inputs reaches no other process).
    """
    if segment is None:
        return [(n, _decode(dt, shape, data), dt) for n, dt, shape, data in descs]
    path = os.path.join(_SHM_DIR, segment)
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
    out: list[tuple[K, np.ndarray, str]] = []
    for name, datatype, shape, (offset, nbytes) in descs:
        view = memoryview(mm)[offset : offset + nbytes]
        out.append((name, _decode(datatype, shape, view), datatype))
    return out
