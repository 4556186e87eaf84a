"""``tritonx._transports.grpc.encode`` without a server: InferenceResponses into ``ModelInferResponse``."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import service_pb2

from tritonx._transports.grpc.decode import DecodedRequest
from tritonx._transports.grpc.encode import encode_infer_response, set_parameter, stream_error
from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError
from tritonx.proto import model_config_pb2
from tritonx.types import InferenceRequest, InferenceResponse

CONFIG = ModelConfig(
    text_format.Parse(
        'name: "m" max_batch_size: 4 '
        'output [ { name: "P" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "l.txt" }, '
        '{ name: "U" data_type: TYPE_BF16 dims: [ 2 ] } ]',
        model_config_pb2.ModelConfig(),
    )
)


def test_response_outputs_always_raw() -> None:
    response = InferenceResponse(
        outputs={
            "F": np.arange(4, dtype=">f4").reshape(2, 2),  # big-endian: sent little-endian
            "S": np.array([[b"ab"], ["c"]], dtype=object),
            "T": np.arange(6, dtype=np.int16).reshape(2, 3).T,  # non-contiguous
            "U": np.array([1, 2], dtype=np.uint16),
        },
        parameters={"b": True, "i": 3, "f": 0.5, "s": "x"},
        model_name="m",
        model_version=2,
        id="q",
    )
    msg = service_pb2.ModelInferResponse()
    encode_infer_response(msg, response, None, CONFIG)
    assert (msg.model_name, msg.model_version, msg.id) == ("m", "2", "q")
    assert [(o.name, o.datatype, list(o.shape)) for o in msg.outputs] == [
        ("F", "FP32", [2, 2]),
        ("S", "BYTES", [2, 1]),
        ("T", "INT16", [3, 2]),
        ("U", "BF16", [2]),
    ]
    assert np.frombuffer(msg.raw_output_contents[0], "<f4").tolist() == [0, 1, 2, 3]
    assert msg.raw_output_contents[1] == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
    assert np.frombuffer(msg.raw_output_contents[2], "<i2").tolist() == [0, 3, 1, 4, 2, 5]
    params = msg.parameters
    assert params["b"].bool_param is True and params["i"].int64_param == 3
    assert params["f"].double_param == 0.5 and params["s"].string_param == "x"
    assert not any(o.HasField("contents") for o in msg.outputs)


def test_bytes_response_parameter_unsupported() -> None:
    with pytest.raises(TritonXError) as info:
        set_parameter(service_pb2.InferParameter(), b"x")
    assert info.value.code is Code.UNSUPPORTED


def test_unsupported_output_dtype() -> None:
    response = InferenceResponse(outputs={"C": np.array([1j])}, model_name="m")
    with pytest.raises(TritonXError, match="unsupported numpy dtype"):
        encode_infer_response(service_pb2.ModelInferResponse(), response, None, None)


def test_stream_error_message() -> None:
    req = service_pb2.ModelInferRequest(model_name="m", model_version="1", id="r9")
    msg = stream_error(req, TritonXError("boom", Code.INVALID_ARG))
    assert msg.error_message == "boom" and msg.infer_response.id == "r9"
    assert "triton_final_response" not in msg.infer_response.parameters
    msg = stream_error(req, ValueError("bad"), final=True, model_name="m", model_version="1")
    assert msg.error_message == "bad"
    assert msg.infer_response.parameters["triton_final_response"].bool_param is True


def test_uint16_output_without_config_is_uint16() -> None:
    response = InferenceResponse(outputs={"U": np.array([1, 2], np.uint16)}, model_name="m")
    msg = service_pb2.ModelInferResponse()
    encode_infer_response(msg, response, None, None)
    assert msg.outputs[0].datatype == "UINT16"


def test_classification_uses_labels_of_that_output_only() -> None:
    request = InferenceRequest("m", {})
    request.output_parameters["P"] = {"classification": 2}
    scores = np.array([[0.1, 0.7, 0.2]], np.float32)
    response = InferenceResponse(
        outputs={"P": scores, "U": np.array([[1, 2]], np.uint16)}, model_name="m"
    )
    asked: list[str] = []

    def labels(name: str) -> list[str]:
        asked.append(name)
        return ["a", "b", "c"]

    msg = service_pb2.ModelInferResponse()
    encode_infer_response(msg, response, DecodedRequest(request), CONFIG, labels)
    assert [(o.name, o.datatype, list(o.shape)) for o in msg.outputs] == [
        ("P", "BYTES", [1, 2]),
        ("U", "BF16", [1, 2]),
    ]
    assert msg.raw_output_contents[0] == (
        b"\x0c\x00\x00\x000.700000:1:b\x0c\x00\x00\x000.200000:2:c"
    )
    assert asked == ["P"]
    assert response.outputs["P"] is scores  # the response itself is left as it is
