"""ModelInfer through the official ``tritonclient.grpc`` clients: raw and typed contents, all
datatypes, requested outputs, parameters, request ids, classification, bad input."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tritonx.testing import ServerThread

# ---------------------------------------------------------------------- helpers


def sample(datatype: str, n: int = 5) -> np.ndarray:
    """A small 1-D tensor of ``datatype`` with distinctive values."""
    if datatype == "BOOL":
        return np.array([True, False, True, True, False][:n])
    if datatype == "BYTES":
        return np.array([b"a", b"", b"\x00bin\xff", "ünï".encode(), b"x" * 300][:n], dtype=object)
    if datatype == "BF16":
        return np.array([0x3F80, 0x4000, 0xBF80, 0x0000, 0x7F80][:n], dtype=np.uint16)
    if datatype.startswith("FP"):
        dtype = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}[datatype]
        return np.array([1.5, -2.25, 0.0, 1e3, -7.125][:n], dtype=dtype)
    dtype = np.dtype(datatype.lower())
    info = np.iinfo(dtype)
    return np.array([info.min, info.max, 0, 1, info.max // 3][:n], dtype=dtype)


def raw_input(name: str, datatype: str, array: np.ndarray) -> grpcclient.InferInput:
    inp = grpcclient.InferInput(name, list(array.shape), datatype)
    if datatype == "BF16":  # tritonclient wants float32 for BF16; send the raw bits instead
        inp._raw_content = array.astype("<u2").tobytes()
    else:
        inp.set_data_from_numpy(array)
    return inp


def as_numpy(result: grpcclient.InferResult, name: str, datatype: str) -> np.ndarray:
    if datatype == "BF16":
        outputs = result.get_response().outputs
        index = next(i for i, o in enumerate(outputs) if o.name == name)
        raw = result.get_response().raw_output_contents[index]
        return np.frombuffer(raw, dtype="<u2")
    return result.as_numpy(name)


@pytest.fixture
def stub(server_thread: ServerThread):
    """A bare GRPCInferenceService stub (for messages tritonclient cannot build)."""
    channel = grpc.insecure_channel(server_thread.server.grpc_url)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


@pytest.fixture
def client(server_thread: ServerThread):
    """A synchronous tritonclient.grpc client."""
    c = grpcclient.InferenceServerClient(server_thread.server.grpc_url)
    yield c
    c.close()


def request(model: str, *inputs: service_pb2.ModelInferRequest.InferInputTensor, **kw):
    return service_pb2.ModelInferRequest(model_name=model, inputs=list(inputs), **kw)


def tensor(name: str, datatype: str, shape, **contents):
    t = service_pb2.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)
    if contents:
        t.contents.CopyFrom(service_pb2.InferTensorContents(**contents))
    return t


def expect_error(stub_call, message: service_pb2.ModelInferRequest, code, fragment: str):
    with pytest.raises(grpc.RpcError) as info:
        stub_call(message)
    assert info.value.code() == code, info.value.details()
    assert fragment in info.value.details()


# ---------------------------------------------------------------------- raw contents


def test_infer_all_datatypes_raw_sync(client, datatypes) -> None:
    """One request carrying all 14 datatypes as raw_input_contents round-trips exactly."""
    inputs = [raw_input(f"INPUT{i}", dt, sample(dt)) for i, dt in enumerate(datatypes)]
    result = client.infer("all_types", inputs, request_id="all-1")
    response = result.get_response()
    assert response.id == "all-1"
    assert response.model_name == "all_types" and response.model_version == "1"
    assert len(response.raw_output_contents) == len(datatypes)
    for i, dt in enumerate(datatypes):
        out = result.get_output(f"OUTPUT{i}")
        assert out.datatype == dt and list(out.shape) == [5]
        got = as_numpy(result, f"OUTPUT{i}", dt)
        np.testing.assert_array_equal(got, sample(dt))
        assert not out.HasField("contents")  # always raw_output_contents


async def test_infer_each_datatype_aio(
    grpc_client: aioclient.InferenceServerClient, datatype: str, datatypes
) -> None:
    i = datatypes.index(datatype)
    array = sample(datatype, 3)
    inp = aioclient.InferInput(f"INPUT{i}", [3], datatype)
    if datatype == "BF16":
        inp._raw_content = array.tobytes()
    else:
        inp.set_data_from_numpy(array)
    result = await grpc_client.infer("all_types", [inp])
    assert [o.name for o in result.get_response().outputs] == [f"OUTPUT{i}"]
    np.testing.assert_array_equal(as_numpy(result, f"OUTPUT{i}", datatype), array)


def test_multidimensional_and_empty_tensors(client) -> None:
    data = np.arange(24, dtype=np.float32).reshape(3, 8)
    result = client.infer("simple", [raw_input("INPUT0", "FP32", data)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    empty = np.zeros((2, 0), dtype=np.float32)
    result = client.infer("simple", [raw_input("INPUT0", "FP32", empty)])
    assert result.as_numpy("OUTPUT0").shape == (2, 0)


def test_large_message_beyond_grpc_default_limit(client) -> None:
    """16 MiB each way: the server's message limits are INT32_MAX, not grpc's 4 MiB."""
    data = np.random.default_rng(0).random((1, 4 * 1024 * 1024), dtype=np.float32)
    result = client.infer("simple", [raw_input("INPUT0", "FP32", data)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_request(client, algorithm: str) -> None:
    data = np.zeros((1, 50_000), dtype=np.float32)
    result = client.infer(
        "simple", [raw_input("INPUT0", "FP32", data)], compression_algorithm=algorithm
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_model_version_and_request_id(client) -> None:
    data = np.ones((1, 2), dtype=np.float32)
    result = client.infer(
        "simple", [raw_input("INPUT0", "FP32", data)], model_version="1", request_id="abc"
    )
    assert result.get_response().id == "abc"
    assert result.get_response().model_version == "1"


# ---------------------------------------------------------------------- typed contents

TYPED = [
    ("BOOL", "bool_contents", [True, False, True]),
    ("INT8", "int_contents", [-128, 127, 5]),
    ("INT16", "int_contents", [-32768, 32767, 5]),
    ("INT32", "int_contents", [-(2**31), 2**31 - 1, 5]),
    ("INT64", "int64_contents", [-(2**63), 2**63 - 1, 5]),
    ("UINT8", "uint_contents", [0, 255, 5]),
    ("UINT16", "uint_contents", [0, 65535, 5]),
    ("UINT32", "uint_contents", [0, 2**32 - 1, 5]),
    ("UINT64", "uint64_contents", [0, 2**64 - 1, 5]),
    ("FP32", "fp32_contents", [1.5, -2.25, 3.0]),
    ("FP64", "fp64_contents", [1.5, -2.25, 1e300]),
    ("BYTES", "bytes_contents", [b"a", b"", b"xyz"]),
]


@pytest.mark.parametrize("typed", TYPED, ids=[t[0] for t in TYPED])
def test_typed_contents(stub, typed, datatypes) -> None:
    datatype, field, values = typed
    i = datatypes.index(datatype)
    message = request("all_types", tensor(f"INPUT{i}", datatype, [3], **{field: values}))
    response = stub.ModelInfer(message)
    assert len(response.outputs) == 1 and not response.outputs[0].HasField("contents")
    assert response.outputs[0].datatype == datatype
    assert len(response.raw_output_contents) == 1  # typed in, raw out
    raw = response.raw_output_contents[0]
    if datatype == "BYTES":
        from tritonclient.utils import deserialize_bytes_tensor

        assert list(deserialize_bytes_tensor(raw)) == values
    else:
        np_name = {"BOOL": "bool", "FP32": "float32", "FP64": "float64"}.get(
            datatype, datatype.lower()
        )
        expected = np.array(values, dtype=np_name)
        np.testing.assert_array_equal(np.frombuffer(raw, dtype=expected.dtype), expected)


def test_typed_contents_multiple_inputs_in_order(stub) -> None:
    message = request(
        "all_types",
        tensor("INPUT7", "INT32", [2], int_contents=[1, 2]),
        tensor("INPUT10", "FP32", [1], fp32_contents=[0.5]),
    )
    response = stub.ModelInfer(message)
    assert {o.name for o in response.outputs} == {"OUTPUT7", "OUTPUT10"}


def test_mixing_typed_and_raw_rejected(stub) -> None:
    message = request(
        "all_types",
        tensor("INPUT7", "INT32", [2], int_contents=[1, 2]),
        tensor("INPUT10", "FP32", [1]),
        raw_input_contents=[np.float32([0.5]).tobytes()],
    )
    expect_error(
        stub.ModelInfer,
        message,
        grpc.StatusCode.INVALID_ARGUMENT,
        "contents field must not be specified when using raw_input_contents",
    )


def test_typed_contents_wrong_field_for_datatype(stub) -> None:
    message = request("all_types", tensor("INPUT10", "FP32", [2], int_contents=[1, 2]))
    expect_error(
        stub.ModelInfer,
        message,
        grpc.StatusCode.INVALID_ARGUMENT,
        "unexpected explicit tensor data for input tensor 'INPUT10'",
    )


def test_typed_contents_fp16_must_be_raw(stub) -> None:
    message = request("all_types", tensor("INPUT9", "FP16", [1], fp32_contents=[1.0]))
    expect_error(
        stub.ModelInfer, message, grpc.StatusCode.INVALID_ARGUMENT, "expected datatype 'FP16'"
    )


def test_typed_contents_count_mismatch(stub) -> None:
    message = request("all_types", tensor("INPUT10", "FP32", [3], fp32_contents=[1.0, 2.0]))
    expect_error(
        stub.ModelInfer,
        message,
        grpc.StatusCode.INVALID_ARGUMENT,
        "input byte size mismatch for input 'INPUT10' for model 'all_types'. Expected 12, got 8",
    )
    message = request("all_types", tensor("INPUT12", "BYTES", [3], bytes_contents=[b"a"]))
    expect_error(
        stub.ModelInfer, message, grpc.StatusCode.INVALID_ARGUMENT, "expected 3 string elements"
    )


# ---------------------------------------------------------------------- bad raw input


def test_raw_contents_fewer_than_inputs(stub) -> None:
    message = request(
        "all_types",
        tensor("INPUT7", "INT32", [1]),
        tensor("INPUT10", "FP32", [1]),
        raw_input_contents=[np.int32([1]).tobytes()],
    )
    expect_error(
        stub.ModelInfer,
        message,
        grpc.StatusCode.INVALID_ARGUMENT,
        "unable to find data for input tensor 'INPUT10' for model 'all_types' in request.",
    )


def test_raw_contents_more_than_inputs(stub) -> None:
    message = request(
        "all_types",
        tensor("INPUT7", "INT32", [1]),
        raw_input_contents=[np.int32([1]).tobytes(), np.int32([2]).tobytes()],
    )
    expect_error(stub.ModelInfer, message, grpc.StatusCode.INVALID_ARGUMENT, "raw_input_contents")


def test_raw_byte_size_mismatch(client) -> None:
    inp = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), np.float32))
    inp.set_shape([1, 5])  # 20 bytes expected, 16 sent
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", [inp])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert (
        "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 20, got 16"
        in info.value.message()
    )


def test_raw_bytes_tensor_element_count_mismatch(stub) -> None:
    raw = b"\x01\x00\x00\x00a\x01\x00\x00\x00b"  # two elements
    message = request("all_types", tensor("INPUT12", "BYTES", [3]), raw_input_contents=[raw])
    expect_error(
        stub.ModelInfer, message, grpc.StatusCode.INVALID_ARGUMENT, "expected 3 string elements"
    )
    message = request(
        "all_types", tensor("INPUT12", "BYTES", [1]), raw_input_contents=[b"\x05\x00\x00\x00ab"]
    )
    expect_error(stub.ModelInfer, message, grpc.StatusCode.INVALID_ARGUMENT, "truncated")


def test_unknown_datatype(stub) -> None:
    message = request("simple", tensor("INPUT0", "FLOAT", [1, 1]), raw_input_contents=[b"\0" * 4])
    expect_error(stub.ModelInfer, message, grpc.StatusCode.INVALID_ARGUMENT, "FLOAT")


def test_wrong_datatype_for_model(client) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", [raw_input("INPUT0", "INT32", np.ones((1, 2), np.int32))])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "data-type is 'INT32', but model 'simple' expects 'FP32'" in info.value.message()


def test_negative_dimension_rejected(stub) -> None:
    message = request("simple", tensor("INPUT0", "FP32", [1, -1]), raw_input_contents=[b""])
    expect_error(stub.ModelInfer, message, grpc.StatusCode.INVALID_ARGUMENT, "INPUT0")


def test_unknown_model_version_output(client) -> None:
    data = raw_input("INPUT0", "FP32", np.ones((1, 2), np.float32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("nope", [data])
    assert info.value.status() == "StatusCode.NOT_FOUND"
    assert "Request for unknown model: 'nope' is not found" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", [data], model_version="7")
    assert info.value.status() == "StatusCode.NOT_FOUND"
    assert "Request for unknown model" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", [data], model_version="x")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", [data], outputs=[grpcclient.InferRequestedOutput("NOPE")])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected inference output 'NOPE' for model 'simple'" in info.value.message()
    # and the server still answers
    assert client.infer("simple", [data]).as_numpy("OUTPUT0").shape == (1, 2)


def test_model_failure_is_reported_with_its_code(client) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.infer("failing", [raw_input("INPUT0", "INT32", np.array([13], np.int32))])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "fail_value 13 seen" in info.value.message()


def test_decoupled_model_rejected_on_unary(client) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.infer("decoupled", [raw_input("INPUT0", "INT32", np.array([2], np.int32))])
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
        in info.value.message()
    )
    # the decoupled check comes before input validation, as in Triton
    with pytest.raises(InferenceServerException) as info:
        client.infer("decoupled", [raw_input("INPUT0", "FP32", np.array([2], np.float32))])
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"


def test_model_checks_come_before_decoding(stub) -> None:
    """As Triton's ModelInferHandler: version, model and decoupled checks, then the request."""
    bad = tensor("INPUT0", "FLOAT", [1])  # an unknown datatype, reported only for a good model
    message = request("decoupled", bad, raw_input_contents=[b"\0" * 4])
    expect_error(stub.ModelInfer, message, grpc.StatusCode.UNIMPLEMENTED, "decoupled")
    message = request("nope", bad, raw_input_contents=[b"\0" * 4])
    expect_error(stub.ModelInfer, message, grpc.StatusCode.NOT_FOUND, "unknown model")
    message = request("nope", bad, raw_input_contents=[b"\0" * 4], model_version="x")
    expect_error(stub.ModelInfer, message, grpc.StatusCode.INVALID_ARGUMENT, "model version 'x'")


# ---------------------------------------------------------------------- outputs and parameters


def test_requested_outputs(client) -> None:
    a = sample("INT32", 3)
    b = sample("FP32", 3)
    inputs = [raw_input("INPUT7", "INT32", a), raw_input("INPUT10", "FP32", b)]
    result = client.infer(
        "all_types", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT10")]
    )
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT10"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT10"), b)
    assert result.as_numpy("OUTPUT7") is None


def test_duplicate_requested_output_rejected(client) -> None:
    data = raw_input("INPUT0", "FP32", np.ones((1, 2), np.float32))
    outputs = [
        grpcclient.InferRequestedOutput("OUTPUT0"),
        grpcclient.InferRequestedOutput("OUTPUT0"),
    ]
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", [data], outputs=outputs)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_request_and_response_parameters(client) -> None:
    data = raw_input("INPUT0", "FP32", np.ones(2, np.float32))
    result = client.infer(
        "paramecho",
        [data],
        parameters={"s": "text", "i": 42, "b": True, "f": 0.25},
        priority=3,
    )
    params = result.get_response().parameters
    assert params["s"].string_param == "text"
    assert params["i"].int64_param == 42
    assert params["b"].bool_param is True
    assert params["f"].double_param == 0.25
    assert params["priority"].int64_param == 3


def test_sequence_parameters(client) -> None:
    data = raw_input("INPUT0", "FP32", np.ones(2, np.float32))
    result = client.infer(
        "paramecho", [data], sequence_id=77, sequence_start=True, sequence_end=True
    )
    params = result.get_response().parameters
    assert params["correlation_id"].string_param == "77"
    assert params["flags"].int64_param == 3
    result = client.infer("paramecho", [data], sequence_id="seq-a", sequence_start=True)
    assert result.get_response().parameters["correlation_id"].string_param == "seq-a"


def test_bad_parameters(stub) -> None:
    base = dict(raw_input_contents=[np.float32([1]).tobytes()])

    def msg(**params):
        m = request("paramecho", tensor("INPUT0", "FP32", [1]), **base)
        for key, value in params.items():
            m.parameters[key].CopyFrom(service_pb2.InferParameter(**value))
        return m

    cases = [
        (
            msg(triton_foo={"bool_param": True}),
            "parameter keys starting with 'triton_' are reserved",
        ),
        (msg(triton_enable_empty_final_response={"int64_param": 1}), "expected bool_param"),
        (
            msg(sequence_id={"bool_param": True}),
            "'sequence_id' parameter, expected int64_param or string_param",
        ),
        (msg(sequence_start={"int64_param": 1}), "'sequence_start' parameter, expected bool_param"),
        (msg(priority={"int64_param": -1}), "invalid value for 'priority', expected value >= 0."),
        (msg(timeout={"string_param": "1"}), "'timeout' parameter, expected int64_param"),
        (msg(custom={"uint64_param": 1}), "invalid value type for 'custom' parameter"),
    ]
    for message, fragment in cases:
        expect_error(stub.ModelInfer, message, grpc.StatusCode.INVALID_ARGUMENT, fragment)


def test_classification_output(client) -> None:
    data = np.array([[0.1, 0.9, 0.5, 0.3], [4, 3, 2, 1]], dtype=np.float32)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)]
    result = client.infer("classify", [raw_input("INPUT0", "FP32", data)], outputs=outputs)
    out = result.get_output("OUTPUT0")
    assert out.datatype == "BYTES" and list(out.shape) == [2, 2]
    assert result.as_numpy("OUTPUT0").tolist() == [
        [b"0.900000:1:one", b"0.500000:2:two"],
        [b"4.000000:0:zero", b"3.000000:1:one"],
    ]
