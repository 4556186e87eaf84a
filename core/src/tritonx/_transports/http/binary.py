"""Triton's binary tensor data extension: tensors as raw buffers after the JSON header.

Decoding makes each binary input a view on the request body (``np.frombuffer``, no copy);
BYTES inputs are read from their 4-byte little-endian length-prefixed form. Encoding gives
each binary output's raw bytes (a memoryview on the array when it is already contiguous
little-endian, so the body is assembled with one copy).
"""

from __future__ import annotations

import struct

import numpy as np

from tritonx.datatypes import DataType, serialize_bytes_tensor
from tritonx.errors import invalid_arg
from tritonx.types import InferenceRequest
from tritonx.wire import request_prefix

#: An ``/infer`` request body (a memoryview for large bodies); binary inputs are views on it.
Body = bytes | bytearray | memoryview

_LE = struct.Struct("<I")
#: DataType → (numpy dtype, bytes per element), for the fixed-size types
_FIXED = {d: (d.numpy_dtype, d.itemsize) for d in DataType if d is not DataType.BYTES}


def binary_tensor(
    name: str,
    dtype: DataType,
    shape: list[int],
    count: int,
    body: Body,
    offset: int,
    size: int,
    request: InferenceRequest,
    model_name: str,
) -> np.ndarray:
    """The ``size`` bytes of ``body`` at ``offset`` as input ``name`` (a view, not a copy,
    except for BYTES)."""
    if dtype is DataType.BYTES:
        return bytes_from_buffer(
            memoryview(body)[offset : offset + size], shape, count, name, request, model_name
        )
    np_dtype, itemsize = _FIXED[dtype]
    expected = count * itemsize
    if size != expected:
        raise invalid_arg(
            f"{request_prefix(request.id)}input byte size mismatch for input '{name}' for model "
            f"'{model_name}'. Expected {expected}, got {size}"
        )
    return np.frombuffer(body, dtype=np_dtype, count=count, offset=offset).reshape(shape)


def bytes_from_buffer(
    view: memoryview,
    shape: list[int],
    count: int,
    name: str,
    request: InferenceRequest,
    model_name: str,
) -> np.ndarray:
    """A serialized BYTES tensor (length-prefixed elements) as an object array of ``shape``."""
    items: list[bytes] = []
    pos, end = 0, len(view)
    checked = 0
    truncated = False
    unpack = _LE.unpack_from
    while pos < end:
        checked += 1
        if pos + 4 > end:
            truncated = True
            break
        (n,) = unpack(view, pos)
        pos += 4
        if checked > count:
            raise invalid_arg(
                f"{request_prefix(request.id)}unexpected number of string elements {checked} "
                f"for inference input '{name}' for model '{model_name}', expecting {count}"
            )
        if pos + n > end:
            truncated = True
            break
        items.append(bytes(view[pos : pos + n]))
        pos += n
    if truncated or checked != count:
        raise invalid_arg(
            f"{request_prefix(request.id)}expected {count} string elements for inference "
            f"input '{name}' for model '{model_name}', got {checked}"
        )
    out = np.empty(count, dtype=object)
    out[:] = items
    return out.reshape(shape)


def raw_bytes(array: np.ndarray, dtype: DataType) -> bytes | memoryview:
    """The binary form of an output: serialized strings for BYTES, else its little-endian
    elements in row-major order."""
    if dtype is DataType.BYTES:
        return serialize_bytes_tensor(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    array = np.ascontiguousarray(array)
    return array.data.cast("B") if array.size else b""
