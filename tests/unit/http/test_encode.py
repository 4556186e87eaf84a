"""``tritonx._transports.http.encode`` without sockets: InferenceResponses into ``/infer`` bodies."""

from __future__ import annotations

import struct

import numpy as np
import orjson
import pytest
from google.protobuf import text_format

from tritonx._transports.http.decode import DecodedRequest, decode_infer_request
from tritonx._transports.http.encode import encode_infer_response
from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError
from tritonx.proto import model_config_pb2
from tritonx.types import InferenceResponse

LIMIT = 1 << 20


def decode(header: dict, *blobs: bytes, header_length: bool = True):  # type: ignore[no-untyped-def]
    head = orjson.dumps(header)
    body = bytearray(head + b"".join(blobs))
    return decode_infer_request(body, len(head) if header_length else None, "m", None, LIMIT)


def test_encode_json_and_binary() -> None:
    decoded = decode(
        {
            "inputs": [],
            "outputs": [{"name": "A"}, {"name": "B", "parameters": {"binary_data": True}}],
        }
    )
    response = InferenceResponse(
        outputs={"A": np.array([[1.5, 2.0]], np.float32), "B": np.array([b"xy"], dtype=object)},
        model_name="m",
        model_version=2,
        id="q",
        parameters={"p": 1},
    )
    encoded = encode_infer_response(response, decoded, None)
    assert encoded.header_length is not None
    body = b"".join(encoded.parts)
    head = orjson.loads(body[: encoded.header_length])
    assert head["id"] == "q" and head["model_version"] == "2" and head["parameters"] == {"p": 1}
    assert head["outputs"][0] == {
        "name": "A",
        "datatype": "FP32",
        "shape": [1, 2],
        "data": [1.5, 2.0],
    }
    assert head["outputs"][1]["parameters"] == {"binary_data_size": 6}
    assert body[encoded.header_length :] == struct.pack("<I", 2) + b"xy"


def test_encode_bytes_parameter_unsupported() -> None:
    decoded = decode({"inputs": []})
    response = InferenceResponse(outputs={}, parameters={"b": b"x"})
    with pytest.raises(TritonXError) as err:
        encode_infer_response(response, decoded, None)
    assert err.value.code is Code.UNSUPPORTED


CONFIG = ModelConfig(
    text_format.Parse(
        'name: "m" max_batch_size: 4 '
        'output [ { name: "P" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "l.txt" }, '
        '{ name: "H" data_type: TYPE_BF16 dims: [ 2 ] }, '
        '{ name: "U" data_type: TYPE_UINT16 dims: [ 2 ] } ]',
        model_config_pb2.ModelConfig(),
    )
)


def test_bf16_outputs_are_typed_from_the_config() -> None:
    response = InferenceResponse(
        outputs={"H": np.array([[1, 2]], np.uint16), "U": np.array([[1, 2]], np.uint16)},
        model_name="m",
    )
    decoded = DecodedRequest(decode({"inputs": []}).request, binary_default=True)
    encoded = encode_infer_response(response, decoded, CONFIG)
    assert encoded.header_length is not None
    head = orjson.loads(b"".join(encoded.parts)[: encoded.header_length])
    assert [o["datatype"] for o in head["outputs"]] == ["BF16", "UINT16"]
    assert encode_infer_response(response, decoded, None).parts[0].count(b'"UINT16"') == 2


def test_classification_uses_labels_of_that_output_only() -> None:
    decoded = decode(
        {
            "inputs": [],
            "outputs": [
                {"name": "P", "parameters": {"classification": 2}},
                {"name": "U"},
            ],
        }
    )
    scores = np.array([[0.1, 0.7, 0.2]], np.float32)
    response = InferenceResponse(
        outputs={"P": scores, "U": np.array([[1, 2]], np.uint16)}, model_name="m"
    )
    asked: list[str] = []

    def labels(name: str) -> list[str]:
        asked.append(name)
        return ["a", "b", "c"]

    encoded = encode_infer_response(response, decoded, CONFIG, labels)
    head = orjson.loads(encoded.parts[0])
    assert head["outputs"][0] == {
        "name": "P",
        "datatype": "BYTES",
        "shape": [1, 2],
        "data": ["0.700000:1:b", "0.200000:2:c"],
    }
    assert asked == ["P"]
    assert response.outputs["P"] is scores  # the response itself is left as it is
