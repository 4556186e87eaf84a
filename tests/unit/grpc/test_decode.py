"""``tritonx._transports.grpc.decode`` without a server: ``ModelInferRequest`` into InferenceRequests."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from tritonx._transports.grpc.decode import DecodedRequest, decode_infer_request
from tritonx.errors import Code, TritonXError
from tritonx.types import SEQUENCE_END, SEQUENCE_START
from tritonx.wire import parse_version

Tensor = service_pb2.ModelInferRequest.InferInputTensor


def decode(msg: service_pb2.ModelInferRequest) -> DecodedRequest:
    return decode_infer_request(msg, parse_version(msg.model_version))


def test_raw_input_is_not_copied() -> None:
    raw = np.arange(6, dtype=np.float32).tobytes()
    msg = service_pb2.ModelInferRequest(
        model_name="m",
        model_version="3",
        id="r",
        inputs=[Tensor(name="X", datatype="FP32", shape=[2, 3])],
        raw_input_contents=[raw],
    )
    decoded = decode(msg)
    request = decoded.request
    x = request.inputs["X"]
    assert x.shape == (2, 3) and x.dtype == np.float32 and not x.flags.owndata
    assert request.model_version == 3 and request.id == "r" and request.requested_outputs is None
    assert decoded.enable_empty_final_response is False


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
    request = decode(msg).request
    assert request.inputs["A"].dtype == np.int8 and request.inputs["A"].tolist() == [-1, 44]
    assert request.inputs["B"].dtype == np.uint16 and request.inputs["B"].tolist() == [
        70000 % 65536
    ]


def test_empty_contents_means_zero_elements() -> None:
    t = Tensor(name="A", datatype="FP32", shape=[0])
    t.contents.SetInParent()
    request = decode(service_pb2.ModelInferRequest(model_name="m", inputs=[t])).request
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
    decoded = decode(msg)
    request = decoded.request
    assert request.correlation_id == "s1"
    assert request.flags == SEQUENCE_START | SEQUENCE_END
    assert request.priority == 2 and request.timeout_us == 500
    assert request.parameters == {"custom": 1.5}
    assert decoded.enable_empty_final_response is True


def test_requested_outputs_and_classification() -> None:
    msg = service_pb2.ModelInferRequest(model_name="m")
    out = msg.outputs.add(name="A")
    out.parameters["classification"].int64_param = 3
    msg.outputs.add(name="B")
    request = decode(msg).request
    assert request.requested_outputs == ("A", "B")
    assert request.output_parameters == {"A": {"classification": 3}}


def test_shared_memory_without_a_registry_is_not_found() -> None:
    t = Tensor(name="A", datatype="FP32", shape=[1])
    t.parameters["shared_memory_region"].string_param = "r"
    t.parameters["shared_memory_byte_size"].int64_param = 4
    with pytest.raises(TritonXError) as info:
        decode(service_pb2.ModelInferRequest(model_name="m", inputs=[t]))
    assert info.value.code is Code.NOT_FOUND
    assert info.value.message == "Unable to find shared memory region: 'r'"


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
        decode(msg)


def test_model_version_is_the_parsed_one() -> None:
    msg = service_pb2.ModelInferRequest(model_name="m", model_version="7")
    assert decode_infer_request(msg, None).request.model_version is None
    assert decode_infer_request(msg, 7).request.model_version == 7
