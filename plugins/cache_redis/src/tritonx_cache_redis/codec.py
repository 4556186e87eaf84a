"""How a response is stored in Redis: a small explicit format, never pickle.

::

    b"TXC1"                    magic and format version
    u32 little-endian          length of the JSON header
    JSON header                {"outputs": [[name, dtype, shape, nbytes], ...],
                                "parameters": {name: str | int | float | bool}}
    tensor bytes               each output's raw bytes, in header order

``dtype`` is a numpy type string limited to booleans, integers and floats (``"<f4"``,
``"|b1"``...) or ``"bytes"`` for BYTES tensors, whose bytes are Triton's length-prefixed
serialization. :func:`decode` checks every field (magic, JSON shape, dtype, sizes that add up
to the value's length) and raises :class:`CodecError` on anything else, so a value written by
something other than this plugin is a miss, never an arbitrary object.
"""

from __future__ import annotations

import json
import math
import re
import struct
from typing import Any

import numpy as np

from tritonx import InferenceResponse
from tritonx.datatypes import deserialize_bytes_tensor, serialize_bytes_tensor

MAGIC = b"TXC1"
_HEADER_LEN = struct.Struct("<I")
_NUMERIC = re.compile(r"^[<>|=]?[biuf][1248]$")
BYTES = "bytes"


class CodecError(ValueError):
    """A stored value that is not a response in this plugin's format."""


def _dtype_name(array: np.ndarray) -> str:
    if array.dtype.kind in "OSU":
        return BYTES
    name = array.dtype.str
    if not _NUMERIC.match(name):
        raise CodecError(f"cannot store a tensor of dtype {array.dtype}")
    return name


def encode(response: InferenceResponse) -> bytes:
    """The stored form of ``response`` (its outputs and scalar parameters).

    :raises CodecError: an output whose dtype has no stored form (complex, datetime, ...).
    """
    outputs: list[list[Any]] = []
    chunks: list[bytes | memoryview] = []
    for name, array in response.outputs.items():
        dtype = _dtype_name(array)
        if dtype == BYTES:
            data: bytes | memoryview = serialize_bytes_tensor(array)
        else:
            data = np.ascontiguousarray(array).reshape(-1).view(np.uint8).data
        outputs.append([name, dtype, [int(d) for d in array.shape], len(data)])
        chunks.append(data)
    parameters = {
        k: v for k, v in response.parameters.items() if isinstance(v, (str, int, float, bool))
    }
    header = json.dumps(
        {"outputs": outputs, "parameters": parameters}, separators=(",", ":")
    ).encode()
    return b"".join([MAGIC, _HEADER_LEN.pack(len(header)), header, *chunks])


def decode(value: bytes) -> InferenceResponse:
    """The response :func:`encode` stored; its arrays are private and writable.

    :raises CodecError: ``value`` is not in this format or is inconsistent.
    """
    view = memoryview(value)
    if len(view) < len(MAGIC) + _HEADER_LEN.size or bytes(view[: len(MAGIC)]) != MAGIC:
        raise CodecError("not a tritonx cache entry (bad magic)")
    (header_len,) = _HEADER_LEN.unpack_from(view, len(MAGIC))
    offset = len(MAGIC) + _HEADER_LEN.size
    if header_len > len(view) - offset:
        raise CodecError("truncated header")
    try:
        header = json.loads(bytes(view[offset : offset + header_len]))
    except ValueError as exc:
        raise CodecError(f"bad header: {exc}") from None
    offset += header_len
    if not isinstance(header, dict):
        raise CodecError("bad header: not an object")
    specs, parameters = header.get("outputs"), header.get("parameters", {})
    if not isinstance(specs, list) or not isinstance(parameters, dict):
        raise CodecError("bad header: 'outputs' must be a list, 'parameters' an object")
    if not all(isinstance(v, (str, int, float, bool)) for v in parameters.values()):
        raise CodecError("bad header: parameters must be scalars")
    outputs: dict[str, np.ndarray] = {}
    for spec in specs:
        name, dtype, shape, nbytes = _check_spec(spec)
        if nbytes > len(view) - offset:
            raise CodecError(f"output '{name}' runs past the end of the entry")
        data = view[offset : offset + nbytes]
        offset += nbytes
        count = math.prod(shape)
        if dtype == BYTES:
            try:
                array = deserialize_bytes_tensor(data, count)
            except Exception as exc:
                raise CodecError(f"output '{name}': {exc}") from None
        else:
            np_dtype = np.dtype(dtype)
            if nbytes != count * np_dtype.itemsize:
                raise CodecError(f"output '{name}': {nbytes} bytes do not fit shape {shape}")
            array = np.frombuffer(data, dtype=np_dtype).copy()
        outputs[name] = array.reshape(shape)
    if offset != len(view):
        raise CodecError("trailing bytes after the last output")
    return InferenceResponse(outputs=outputs, parameters=dict(parameters))


def _check_spec(spec: object) -> tuple[str, str, list[int], int]:
    if not (isinstance(spec, list) and len(spec) == 4):
        raise CodecError("bad output description")
    name, dtype, shape, nbytes = spec
    if not isinstance(name, str) or not isinstance(dtype, str):
        raise CodecError("bad output description")
    if dtype != BYTES and not _NUMERIC.match(dtype):
        raise CodecError(f"output '{name}': unsupported dtype '{dtype}'")
    if not (
        isinstance(shape, list)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise CodecError(f"output '{name}': bad shape")
    if not (isinstance(nbytes, int) and not isinstance(nbytes, bool) and nbytes >= 0):
        raise CodecError(f"output '{name}': bad size")
    return name, dtype, shape, nbytes
