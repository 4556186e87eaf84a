"""Triton datatypes on this backend's wire: datatype names ↔ numpy dtypes, and the BYTES
encoding (each element as a 4-byte little-endian length and its bytes).

Part of what crosses between the server and a worker (:mod:`tritonx_backend_python._ipc`,
which re-exports these names). Needs only the standard library and numpy: worker processes
import it, including ones running in another interpreter (``EXECUTION_ENV_PATH``).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

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
