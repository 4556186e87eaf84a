"""Unit tests of the gRPC wire conversion (no server): requests, responses, stream errors."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from tritonx.config import ServerSettings
from tritonx.errors import Code, TritonXError
from tritonx.grpc.convert import (
    fill_response,
    request_from_proto,
    response_to_proto,
    set_parameter,
    stream_error,
)
from tritonx.grpc.errors import STATUS, status_code
from tritonx.grpc.server import grpc_options, listen_address
from tritonx.types import SEQUENCE_END, SEQUENCE_START, InferenceResponse

Tensor = service_pb2.ModelInferRequest.InferInputTensor


def test_status_table_matches_triton() -> None:
    import grpc

    assert STATUS == {
        Code.UNKNOWN: grpc.StatusCode.UNKNOWN,
        Code.INTERNAL: grpc.StatusCode.INTERNAL,
        Code.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
        Code.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
        Code.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
        Code.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
        Code.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
        Code.CANCELLED: grpc.StatusCode.CANCELLED,
    }
    assert status_code(TritonXError("x", Code.UNSUPPORTED)) is grpc.StatusCode.UNIMPLEMENTED


def test_raw_input_is_not_copied() -> None:
    raw = np.arange(6, dtype=np.float32).tobytes()
    msg = service_pb2.ModelInferRequest(
        model_name="m",
        model_version="3",
        id="r",
        inputs=[Tensor(name="X", datatype="FP32", shape=[2, 3])],
        raw_input_contents=[raw],
    )
    request, options = request_from_proto(msg)
    x = request.inputs["X"]
    assert x.shape == (2, 3) and x.dtype == np.float32 and not x.flags.owndata
    assert request.model_version == 3 and request.id == "r" and request.requested_outputs is None
    assert options.enable_empty_final_response is False


def test_typed_small_ints_take_low_bytes_like_triton() -> None:
    msg = service_pb2.ModelInferRequest(
        model_name="m",
        inputs=[
            Tensor(
                name="A",
                datatype="INT8",
                shape=[2],
                contents=service_pb2.InferTensorContents(int_contents=[-1, 300]),
            ),
            Tensor(
                name="B",
                datatype="UINT16",
                shape=[1],
                contents=service_pb2.InferTensorContents(uint_contents=[70000]),
            ),
        ],
    )
    request, _ = request_from_proto(msg)
    assert request.inputs["A"].dtype == np.int8 and request.inputs["A"].tolist() == [-1, 44]
    assert request.inputs["B"].dtype == np.uint16 and request.inputs["B"].tolist() == [
        70000 % 65536
    ]


def test_empty_contents_means_zero_elements() -> None:
    t = Tensor(name="A", datatype="FP32", shape=[0])
    t.contents.SetInParent()
    request, _ = request_from_proto(service_pb2.ModelInferRequest(model_name="m", inputs=[t]))
    assert request.inputs["A"].shape == (0,)


def test_parameters_to_request_fields() -> None:
    msg = service_pb2.ModelInferRequest(
        model_name="m",
        inputs=[Tensor(name="X", datatype="INT32", shape=[0])],
        raw_input_contents=[b""],
    )
    msg.parameters["sequence_id"].string_param = "s1"
    msg.parameters["sequence_start"].bool_param = True
    msg.parameters["sequence_end"].bool_param = True
    msg.parameters["priority"].uint64_param = 2
    msg.parameters["timeout"].int64_param = 500
    msg.parameters["triton_enable_empty_final_response"].bool_param = True
    msg.parameters["custom"].double_param = 1.5
    request, options = request_from_proto(msg)
    assert request.correlation_id == "s1"
    assert request.flags == SEQUENCE_START | SEQUENCE_END
    assert request.priority == 2 and request.timeout_us == 500
    assert request.parameters == {"custom": 1.5}
    assert options.enable_empty_final_response is True


def test_requested_outputs_and_classification() -> None:
    msg = service_pb2.ModelInferRequest(model_name="m")
    out = msg.outputs.add(name="A")
    out.parameters["classification"].int64_param = 3
    msg.outputs.add(name="B")
    request, _ = request_from_proto(msg)
    assert request.requested_outputs == ("A", "B")
    assert request.output_parameters == {"A": {"classification": 3}}


def test_shared_memory_is_unsupported() -> None:
    t = Tensor(name="A", datatype="FP32", shape=[1])
    t.parameters["shared_memory_region"].string_param = "r"
    with pytest.raises(TritonXError) as info:
        request_from_proto(service_pb2.ModelInferRequest(model_name="m", inputs=[t]))
    assert info.value.code is Code.UNSUPPORTED


def test_duplicate_input_rejected() -> None:
    msg = service_pb2.ModelInferRequest(
        model_name="m",
        inputs=[
            Tensor(name="A", datatype="INT8", shape=[1]),
            Tensor(name="A", datatype="INT8", shape=[1]),
        ],
        raw_input_contents=[b"\x01", b"\x02"],
    )
    with pytest.raises(TritonXError, match="already exists"):
        request_from_proto(msg)


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
    msg = response_to_proto(response, lambda model, version, name: "BF16" if name == "U" else None)
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
        fill_response(service_pb2.ModelInferResponse(), response)


def test_stream_error_message() -> None:
    req = service_pb2.ModelInferRequest(model_name="m", model_version="1", id="r9")
    msg = stream_error(req, TritonXError("boom", Code.INVALID_ARG))
    assert msg.error_message == "boom" and msg.infer_response.id == "r9"
    assert "triton_final_response" not in msg.infer_response.parameters
    msg = stream_error(req, ValueError("bad"), final=True, model_name="m", model_version="1")
    assert msg.error_message == "bad"
    assert msg.infer_response.parameters["triton_final_response"].bool_param is True


def test_listener_options() -> None:
    options = dict(grpc_options(ServerSettings()))
    assert options["grpc.max_send_message_length"] == 2**31 - 1
    assert options["grpc.so_reuseport"] == 0
    assert options["grpc.keepalive_time_ms"] == 7_200_000
    assert options["grpc.http2.max_ping_strikes"] == 2
    assert listen_address("0.0.0.0", 8001) == "0.0.0.0:8001"
    assert listen_address("::1", 0) == "[::1]:0"
