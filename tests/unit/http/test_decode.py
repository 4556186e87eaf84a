"""``tritonx._transports.http.decode`` without sockets: ``/infer`` bodies into InferenceRequests."""

from __future__ import annotations

import struct

import numpy as np
import orjson
import pytest

from tritonx._transports.http.decode import decode_infer_request, element_count
from tritonx.errors import Code, TritonXError

LIMIT = 1 << 20


def decode(header: dict, *blobs: bytes, header_length: bool = True):  # type: ignore[no-untyped-def]
    head = orjson.dumps(header)
    body = bytearray(head + b"".join(blobs))
    return decode_infer_request(body, len(head) if header_length else None, "m", None, LIMIT)


def test_binary_inputs_are_views_on_the_body() -> None:
    data = np.arange(6, dtype=np.float32)
    head = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "X",
                    "datatype": "FP32",
                    "shape": [2, 3],
                    "parameters": {"binary_data_size": 24},
                }
            ]
        }
    )
    body = bytearray(head + data.tobytes())
    decoded = decode_infer_request(body, len(head), "m", 3, LIMIT)
    x = decoded.request.inputs["X"]
    assert x.shape == (2, 3) and x.dtype == np.float32
    assert np.shares_memory(x, np.frombuffer(body, np.uint8))  # zero-copy
    assert decoded.request.model_version == 3


def test_json_inputs_parameters_and_outputs() -> None:
    decoded = decode(
        {
            "id": "7",
            "parameters": {
                "sequence_id": 5,
                "sequence_start": True,
                "priority": 2,
                "timeout": 100,
                "binary_data_output": True,
                "custom": "v",
            },
            "inputs": [
                {"name": "A", "datatype": "INT8", "shape": [2, 2], "data": [[1, -2], [3, 4]]},
                {"name": "B", "datatype": "BYTES", "shape": [2], "data": ["x", "\u00e9"]},
                {"name": "C", "datatype": "BOOL", "shape": [1], "data": [True]},
            ],
            "outputs": [{"name": "O", "parameters": {"binary_data": False, "classification": 2}}],
        },
        header_length=False,
    )
    r = decoded.request
    assert r.id == "7" and r.correlation_id == 5 and r.flags == 1
    assert r.priority == 2 and r.timeout_us == 100 and r.parameters == {"custom": "v"}
    assert decoded.binary_default
    assert r.inputs["A"].dtype == np.int8 and r.inputs["A"].tolist() == [[1, -2], [3, 4]]
    assert r.inputs["B"].tolist() == [b"x", "\u00e9".encode()]
    assert r.inputs["C"].dtype == np.bool_
    assert r.requested_outputs == ("O",)
    assert r.output_parameters["O"] == {"binary_data": False, "classification": 2}


def test_bytes_binary_input() -> None:
    raw = b"".join(struct.pack("<I", len(s)) + s for s in (b"ab", b""))
    decoded = decode(
        {
            "inputs": [
                {
                    "name": "S",
                    "datatype": "BYTES",
                    "shape": [2],
                    "parameters": {"binary_data_size": len(raw)},
                }
            ]
        },
        raw,
    )
    assert decoded.request.inputs["S"].tolist() == [b"ab", b""]


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([2**62, 4], "exceed maximum size"),
        ([2**63 + 1], "invalid dimensions"),
    ],
)
def test_element_count_errors(shape: list[int], message: str) -> None:
    with pytest.raises(TritonXError) as err:
        element_count("X", shape)
    assert message in err.value.message and err.value.code is Code.INVALID_ARG


def test_element_count_zero() -> None:
    assert element_count("X", [0, 2**62]) == 0
    assert element_count("X", []) == 1
