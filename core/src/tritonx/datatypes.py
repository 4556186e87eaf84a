"""Tensor datatypes: protocol names, config enum names, numpy dtypes, BYTES encoding.

Inside the core every tensor is a ``numpy.ndarray``. BYTES tensors are object arrays of
``bytes``; BF16 tensors (numpy has no bfloat16) are ``uint16`` arrays holding the raw bits.
"""

from __future__ import annotations

import enum
import struct

import numpy as np

from tritonx.errors import invalid_arg


class DataType(enum.Enum):
    """A tensor datatype as the KServe v2 protocol names it (``"FP32"``, ``"BYTES"`` ...)."""

    BOOL = "BOOL"
    UINT8 = "UINT8"
    UINT16 = "UINT16"
    UINT32 = "UINT32"
    UINT64 = "UINT64"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FP16 = "FP16"
    FP32 = "FP32"
    FP64 = "FP64"
    BYTES = "BYTES"
    BF16 = "BF16"

    @property
    def numpy_dtype(self) -> np.dtype:
        """The numpy dtype tensors of this type are held in (object for BYTES, uint16 for BF16)."""
        return _NUMPY[self]

    @property
    def itemsize(self) -> int:
        """Bytes per element on the wire; 0 for BYTES (variable length)."""
        return 0 if self is DataType.BYTES else _NUMPY[self].itemsize

    @property
    def config_name(self) -> str:
        """The model-config enum name (``TYPE_FP32``; ``TYPE_STRING`` for BYTES)."""
        return "TYPE_STRING" if self is DataType.BYTES else f"TYPE_{self.value}"

    @classmethod
    def from_protocol(cls, name: str) -> DataType:
        """Parse a protocol datatype name; unknown names are INVALID_ARG as in Triton."""
        try:
            return cls(name)
        except ValueError:
            raise invalid_arg(f"invalid datatype for input: '{name}'") from None

    @classmethod
    def from_config(cls, name: str) -> DataType:
        """Parse a config enum name such as ``TYPE_INT32`` or ``TYPE_STRING``."""
        if name == "TYPE_STRING":
            return cls.BYTES
        if name.startswith("TYPE_"):
            try:
                return cls(name[5:])
            except ValueError:
                pass
        raise invalid_arg(f"unsupported datatype '{name}'")

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DataType:
        """The datatype for a numpy dtype (object/str/bytes arrays map to BYTES)."""
        dtype = np.dtype(dtype)
        if dtype.kind in "OSU":
            return cls.BYTES
        try:
            return _FROM_NUMPY[dtype]
        except KeyError:
            raise invalid_arg(f"unsupported numpy dtype '{dtype}'") from None


_NUMPY: dict[DataType, np.dtype] = {
    DataType.BOOL: np.dtype(np.bool_),
    DataType.UINT8: np.dtype(np.uint8),
    DataType.UINT16: np.dtype(np.uint16),
    DataType.UINT32: np.dtype(np.uint32),
    DataType.UINT64: np.dtype(np.uint64),
    DataType.INT8: np.dtype(np.int8),
    DataType.INT16: np.dtype(np.int16),
    DataType.INT32: np.dtype(np.int32),
    DataType.INT64: np.dtype(np.int64),
    DataType.FP16: np.dtype(np.float16),
    DataType.FP32: np.dtype(np.float32),
    DataType.FP64: np.dtype(np.float64),
    DataType.BYTES: np.dtype(object),
    DataType.BF16: np.dtype(np.uint16),
}
_FROM_NUMPY: dict[np.dtype, DataType] = {
    v: k for k, v in _NUMPY.items() if k not in (DataType.BYTES, DataType.BF16)
}


def serialize_bytes_tensor(array: np.ndarray) -> bytes:
    """Encode a BYTES tensor in Triton's wire form: each element a 4-byte LE length + bytes."""
    parts: list[bytes] = []
    pack = struct.Struct("<I").pack
    for item in array.reshape(-1):
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray, memoryview)):
            item = str(item).encode("utf-8")
        parts.append(pack(len(item)))
        parts.append(bytes(item))
    return b"".join(parts)


def deserialize_bytes_tensor(buffer: bytes | memoryview, count: int | None = None) -> np.ndarray:
    """Decode Triton's length-prefixed BYTES encoding into a 1-D object array.

    ``count`` is the number of elements the shape promises; a buffer holding more or fewer
    elements, or a truncated element, is INVALID_ARG.
    """
    view = memoryview(buffer).cast("B")
    items: list[bytes] = []
    offset, end = 0, len(view)
    while offset < end:
        if offset + 4 > end:
            raise invalid_arg("BYTES tensor is truncated: incomplete 4-byte length prefix")
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > end:
            raise invalid_arg(
                f"BYTES tensor is truncated: element of {length} bytes runs past the buffer"
            )
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if count is not None and len(items) != count:
        raise invalid_arg(f"expected {count} string elements but got {len(items)}")
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def bytes_tensor_byte_size(array: np.ndarray) -> int:
    """The serialized size of a BYTES tensor (4 bytes of length per element + contents)."""
    total = 0
    for item in array.reshape(-1):
        if isinstance(item, str):
            total += len(item.encode("utf-8"))
        elif isinstance(item, (bytes, bytearray, memoryview)):
            total += len(item)
        else:
            total += len(str(item).encode("utf-8"))
    return total + 4 * array.size


__all__ = [
    "DataType",
    "bytes_tensor_byte_size",
    "deserialize_bytes_tensor",
    "serialize_bytes_tensor",
]
