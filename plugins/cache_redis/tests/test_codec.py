"""The stored form of a response: every datatype round-trips, anything else is refused."""

from __future__ import annotations

import json
import pickle
import struct

import numpy as np
import pytest

from tritonx import InferenceResponse
from tritonx_cache_redis.codec import MAGIC, CodecError, decode, encode

ARRAYS = {
    "bool": np.array([[True, False, True]]),
    "u8": np.arange(6, dtype=np.uint8).reshape(2, 3),
    "u16": np.array([1, 65535], np.uint16),
    "u32": np.array([4_000_000_000], np.uint32),
    "u64": np.array([2**63 + 5], np.uint64),
    "i8": np.array([-128, 127], np.int8),
    "i16": np.array([-2], np.int16),
    "i32": np.arange(-3, 3, dtype=np.int32),
    "i64": np.array([-(2**62)], np.int64),
    "f16": np.array([0.5, -1.25], np.float16),
    "f32": np.array([[1.5, np.nan], [np.inf, -0.0]], np.float32),
    "f64": np.array([1e300], np.float64),
    "big_endian": np.array([1, 2], dtype=">i4"),
    "scalar": np.array(7, np.int32),
    "empty": np.zeros((0, 4), np.float32),
    "strided": np.arange(20, dtype=np.int64).reshape(4, 5)[:, ::2],
    "bytes": np.array([[b"a\x00b", b""], [b"\xff" * 3, "unicode \u00e9"]], dtype=object),
    "bytes_empty": np.zeros((0,), dtype=object),
}


def test_every_datatype_round_trips() -> None:
    response = InferenceResponse(
        outputs=dict(ARRAYS), parameters={"s": "x", "i": 3, "f": 0.5, "b": True}
    )
    back = decode(encode(response))
    assert list(back.outputs) == list(ARRAYS)
    for name, array in ARRAYS.items():
        got = back.outputs[name]
        assert got.shape == array.shape, name
        if array.dtype == object:
            expected = [x.encode() if isinstance(x, str) else x for x in array.reshape(-1)]
            assert got.dtype == object and list(got.reshape(-1)) == expected
        else:
            assert got.dtype == array.dtype, name
            assert got.tobytes() == np.ascontiguousarray(array).tobytes(), name
            assert got.flags.writeable  # a private array, not a view of the Redis value
    assert back.parameters == {"s": "x", "i": 3, "f": 0.5, "b": True}


def test_non_scalar_parameters_are_left_out() -> None:
    response = InferenceResponse(outputs={}, parameters={"obj": object(), "list": [1], "k": 1})
    assert decode(encode(response)).parameters == {"k": 1}


def test_unsupported_dtypes_are_not_stored() -> None:
    with pytest.raises(CodecError, match="cannot store a tensor of dtype complex64"):
        encode(InferenceResponse(outputs={"c": np.zeros(2, np.complex64)}))


def _value(header: object, payload: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return MAGIC + struct.pack("<I", len(text)) + text + payload


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"", "bad magic"),
        (pickle.dumps(InferenceResponse()), "bad magic"),
        (MAGIC + struct.pack("<I", 100) + b"{}", "truncated header"),
        (MAGIC + struct.pack("<I", 3) + b"{x]", "bad header"),
        (_value([1, 2]), "not an object"),
        (_value({"outputs": {}}), "'outputs' must be a list"),
        (_value({"outputs": [], "parameters": {"p": [1]}}), "parameters must be scalars"),
        (_value({"outputs": [["o", "|O", [1], 8]]}, b"\0" * 8), "unsupported dtype '|O'"),
        (_value({"outputs": [["o", "<c8", [1], 8]]}, b"\0" * 8), "unsupported dtype '<c8'"),
        (_value({"outputs": [["o", "<i4", [-1], 4]]}, b"\0" * 4), "bad shape"),
        (_value({"outputs": [["o", "<i4", [True], 4]]}, b"\0" * 4), "bad shape"),
        (_value({"outputs": [["o", "<i4", [2], 4]]}, b"\0" * 4), "do not fit shape"),
        (_value({"outputs": [["o", "<i4", [1], 8]]}, b"\0" * 4), "runs past the end"),
        (_value({"outputs": [["o", "<i4", [1], 4]]}, b"\0" * 5), "trailing bytes"),
        (_value({"outputs": [["o", "bytes", [2], 5]]}, b"\1\0\0\0x"), "output 'o'"),
        (_value({"outputs": [["o", "bytes", [1], 4]]}, b"\\9\0\0\0"), "output 'o'"),
        (_value({"outputs": [["o", "<i4"]]}), "bad output description"),
    ],
)
def test_anything_else_is_refused(value: bytes, message: str) -> None:
    with pytest.raises(CodecError, match=message.replace("(", r"\(").replace("|", r"\|")):
        decode(value)
