"""JSON tensor data ↔ numpy for the HTTP frontend, with Triton's type checks and messages.

Decoding turns a request input's ``data`` array (nested or flat, row-major) into a numpy array
of the declared datatype; encoding turns an output array into the flat list (or numpy array,
serialized by orjson) of a response output's ``data``. The JSON access messages and value
checks here are also the ones the request decoder uses for the rest of the JSON header.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tritonx._transports.http.errors import internal
from tritonx.datatypes import DataType
from tritonx.errors import invalid_arg
from tritonx.types import InferenceRequest
from tritonx.wire import request_prefix

#: Nesting limit of JSON ``data`` arrays (Triton's ``HTTP_MAX_JSON_NESTING_DEPTH``).
MAX_JSON_DEPTH = 100
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

# Triton's (rapidjson wrapper's) messages when a JSON value has the wrong type.
NOT_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
NOT_INT = "attempt to access JSON non-signed-integer as signed-integer"
NOT_NUMBER = "attempt to access JSON non-number as double"
NOT_BOOL = "attempt to access JSON non-boolean as boolean"
NOT_STRING = "attempt to access JSON non-string as string"
NOT_ARRAY = "attempt to access JSON non-array as array"
NOT_OBJECT = "attempt to access JSON non-object as object"


def missing(name: str) -> str:
    """Triton's message for a JSON object without member ``name``."""
    return f"attempt to access non-existing object member '{name}'"


def is_uint(v: Any) -> bool:
    return type(v) is int and 0 <= v <= UINT64_MAX


def is_int(v: Any) -> bool:
    return type(v) is int and -(2**63) <= v <= INT64_MAX


def is_number(v: Any) -> bool:
    return type(v) is int or type(v) is float


def is_bool(v: Any) -> bool:
    return type(v) is bool


def is_str(v: Any) -> bool:
    return isinstance(v, str)


# ---------------------------------------------------------------------------------- JSON → numpy

# Per datatype: (inferred numpy kinds accepted by the fast path, value check, error message).
_JSON_RULES: dict[DataType, tuple[str, Callable[[Any], bool], str]] = {
    DataType.BOOL: ("b", is_bool, NOT_BOOL),
    DataType.UINT8: ("iu", is_uint, NOT_UINT),
    DataType.UINT16: ("iu", is_uint, NOT_UINT),
    DataType.UINT32: ("iu", is_uint, NOT_UINT),
    DataType.UINT64: ("iu", is_uint, NOT_UINT),
    DataType.INT8: ("iu", is_int, NOT_INT),
    DataType.INT16: ("iu", is_int, NOT_INT),
    DataType.INT32: ("iu", is_int, NOT_INT),
    DataType.INT64: ("iu", is_int, NOT_INT),
    DataType.FP32: ("iuf", is_number, NOT_NUMBER),
    DataType.FP64: ("iuf", is_number, NOT_NUMBER),
}


def json_tensor(
    name: str,
    dtype: DataType,
    shape: list[int],
    count: int,
    data: list[Any],
    request: InferenceRequest,
    model_name: str,
) -> np.ndarray:
    """A JSON ``data`` array (nested or flat, row-major) as a numpy array of ``shape``."""
    if dtype is DataType.BYTES:
        flat = _flatten(data, is_str, NOT_STRING)
        if len(flat) != count:
            raise invalid_arg(
                f"{request_prefix(request.id)}expected {count} string elements for inference "
                f"input '{name}' for model '{model_name}', got {len(flat)}"
            )
        out = np.empty(count, dtype=object)
        out[:] = [s.encode("utf-8") for s in flat]
        return out.reshape(shape)
    kinds, check, message = _JSON_RULES[dtype]
    target = dtype.numpy_dtype
    arr: np.ndarray | None = None
    try:
        inferred = _array(data)
    except (ValueError, OverflowError):
        inferred = None
    if inferred is not None and inferred.dtype.kind in kinds:
        unsigned = dtype.value.startswith("U")
        if not (unsigned and inferred.dtype.kind == "i" and inferred.size and inferred.min() < 0):
            arr = inferred
    if arr is None:
        # Slow path: exact Triton errors (types, ragged data, nesting depth).
        flat = _flatten(data, check, message)
        arr = np.array(flat, dtype=object)
    if arr.size != count:
        if arr.size > count:
            raise internal(
                "Unable to parse 'data': Shape does not match true shape of 'data' field"
            )
        raise internal("Failed to parse 'data' field: shape does not match true shape")
    if arr.dtype.kind == "O" or arr.dtype != target:
        arr = arr.astype(target) if arr.dtype.kind != "O" else _cast_objects(arr, target)
    return arr.reshape(shape)


#: Lists longer than this are converted a slice at a time (see :func:`_array`).
ARRAY_SLICE = 1 << 20


def _array(data: list[Any]) -> np.ndarray:
    """``np.array(data)``; a long list a slice of :data:`ARRAY_SLICE` items at a time (so a
    worker thread converting it lets the event loop run between slices), then joined, when
    every slice converts to the same dtype and inner shape (else the whole list at once)."""
    if len(data) <= ARRAY_SLICE:
        return np.array(data)
    parts = [np.array(data[i : i + ARRAY_SLICE]) for i in range(0, len(data), ARRAY_SLICE)]
    first = parts[0]
    for part in parts:
        if part.dtype != first.dtype or part.shape[1:] != first.shape[1:]:
            return np.array(data)
    return np.concatenate(parts)


def _cast_objects(arr: np.ndarray, target: np.dtype) -> np.ndarray:
    # Triton casts out-of-range integers C-style (wrapping); do the same.
    if target.kind in "iu":
        wide = np.array([int(v) & UINT64_MAX for v in arr], dtype=np.uint64)
        return wide.astype(target)
    return arr.astype(target)


def _flatten(data: list[Any], check: Callable[[Any], bool], message: str) -> list[Any]:
    out: list[Any] = []
    append = out.append

    def walk(node: list[Any], depth: int) -> None:
        if depth >= MAX_JSON_DEPTH:
            raise invalid_arg(
                "Unable to parse 'data': JSON nesting depth exceeds maximum allowed limit "
                f"({MAX_JSON_DEPTH})"
            )
        for el in node:
            if type(el) is list:
                walk(el, depth + 1)
            elif check(el):
                append(el)
            else:
                if depth + 1 >= MAX_JSON_DEPTH:
                    raise invalid_arg(
                        "Unable to parse 'data': JSON nesting depth exceeds maximum allowed "
                        f"limit ({MAX_JSON_DEPTH})"
                    )
                raise internal(f"Unable to parse 'data': {message}")

    walk(data, 0)
    return out


# ---------------------------------------------------------------------------------- numpy → JSON


def json_data(array: np.ndarray, dtype: DataType) -> Any:
    """An output's ``data``: a flat list of strings for BYTES, else a flat native-endian
    array that orjson serializes (``OPT_SERIALIZE_NUMPY``) without a Python list."""
    if dtype is DataType.BYTES:
        return [_text(v) for v in array.reshape(-1).tolist()]
    if dtype in (DataType.FP16, DataType.BF16):
        raise invalid_arg(
            f"sending {dtype.value} data via JSON is not supported. Please use the binary "
            "data format for output"
        )
    flat = array.reshape(-1)
    if not flat.flags.c_contiguous or flat.dtype.byteorder == ">":
        flat = np.ascontiguousarray(flat, dtype=flat.dtype.newbyteorder("="))
    return flat


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return value if isinstance(value, str) else str(value)
