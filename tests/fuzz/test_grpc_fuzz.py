"""hypothesis-generated gRPC requests against a real ``tritonx serve``.

``ModelInferRequest`` messages with any mix of known and unknown models, versions, inputs,
datatypes, shapes, typed contents, raw contents, parameters and requested outputs; model
metadata/config/readiness and repository load/unload with arbitrary names and configs. Every
call must end with a status Triton uses for such a request (never UNKNOWN, and INTERNAL only for
what Triton documents), and the server must stay live after each. Bounded by
``TRITONX_FUZZ_EXAMPLES`` (default 25) per test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tritonx.proto import service_pb2, service_pb2_grpc

EXAMPLES = int(os.environ.get("TRITONX_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)

MODELS = ["simple", "simple_string", "simple_identity", "simple_int8", "simple_sequence"]
DATATYPES = ["BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "UINT64", "FP16", "FP32"]
DATATYPES += ["FP64", "BYTES", "BF16"]

#: Statuses an infer/metadata/repository call may end with (Triton's mapping of its errors).
ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
#: INTERNAL answers Triton gives for the same requests (a part of the details text).
DOCUMENTED_INTERNAL = ("failed to load '",)

names = st.one_of(st.sampled_from(MODELS), st.text(max_size=40))
versions = st.one_of(
    st.just(""), st.sampled_from(["1", "2", "0", "-1", "1_0"]), st.text(max_size=8)
)
tensor_names = st.one_of(
    st.sampled_from(["INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1"]), st.text(max_size=12)
)
datatypes = st.one_of(st.sampled_from(DATATYPES), st.text(max_size=6))
shapes = st.lists(st.one_of(st.integers(-2, 20), st.integers(-(2**63), 2**63 - 1)), max_size=4)
parameter_values = st.one_of(
    st.builds(service_pb2.InferParameter, bool_param=st.booleans()),
    st.builds(service_pb2.InferParameter, int64_param=st.integers(-(2**63), 2**63 - 1)),
    st.builds(service_pb2.InferParameter, string_param=st.text(max_size=20)),
    st.builds(service_pb2.InferParameter, double_param=st.floats(allow_nan=True)),
    st.builds(service_pb2.InferParameter, uint64_param=st.integers(0, 2**64 - 1)),
)
parameter_keys = st.one_of(
    st.sampled_from(
        [
            "sequence_id",
            "sequence_start",
            "sequence_end",
            "priority",
            "timeout",
            "binary_data_size",
            "classification",
            "shared_memory_region",
            "shared_memory_byte_size",
            "triton_x",
        ]
    ),
    st.text(max_size=12),
)
parameters = st.dictionaries(parameter_keys, parameter_values, max_size=3)


@st.composite
def contents(draw: st.DrawFn) -> service_pb2.InferTensorContents:
    """Typed contents in one (sometimes two) of the typed fields."""
    small = st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40)
    chosen = draw(
        st.lists(
            st.sampled_from(["int", "int64", "uint", "uint64", "fp32", "fp64", "bool", "bytes"]),
            max_size=2,
        )
    )
    out = service_pb2.InferTensorContents()
    for kind in chosen:
        if kind == "int":
            out.int_contents.extend(draw(small))
        elif kind == "int64":
            out.int64_contents.extend(draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20)))
        elif kind == "uint":
            out.uint_contents.extend(draw(st.lists(st.integers(0, 2**32 - 1), max_size=20)))
        elif kind == "uint64":
            out.uint64_contents.extend(draw(st.lists(st.integers(0, 2**64 - 1), max_size=20)))
        elif kind == "fp32":
            out.fp32_contents.extend(draw(st.lists(st.floats(width=32), max_size=20)))
        elif kind == "fp64":
            out.fp64_contents.extend(draw(st.lists(st.floats(), max_size=20)))
        elif kind == "bool":
            out.bool_contents.extend(draw(st.lists(st.booleans(), max_size=20)))
        else:
            out.bytes_contents.extend(draw(st.lists(st.binary(max_size=12), max_size=20)))
    return out


@st.composite
def infer_requests(draw: st.DrawFn) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(
        model_name=draw(names), model_version=draw(versions), id=draw(st.text(max_size=10))
    )
    for key, value in draw(parameters).items():
        request.parameters[key].CopyFrom(value)
    use_raw = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        tensor = request.inputs.add(
            name=draw(tensor_names), datatype=draw(datatypes), shape=draw(shapes)
        )
        for key, value in draw(parameters).items():
            tensor.parameters[key].CopyFrom(value)
        if use_raw:
            request.raw_input_contents.append(draw(st.binary(max_size=256)))
        else:
            tensor.contents.CopyFrom(draw(contents()))
    if draw(st.booleans()):  # a stray raw content beside typed contents
        request.raw_input_contents.append(draw(st.binary(max_size=64)))
    for _ in range(draw(st.integers(0, 2))):
        output = request.outputs.add(name=draw(tensor_names))
        for key, value in draw(parameters).items():
            output.parameters[key].CopyFrom(value)
    return request


@st.composite
def near_valid_requests(draw: st.DrawFn) -> service_pb2.ModelInferRequest:
    """A correct request for ``simple`` (INT32 [batch, 16] x2), then a few mutations."""
    batch = draw(st.integers(0, 9))
    request = service_pb2.ModelInferRequest(model_name="simple")
    raw = draw(st.booleans())
    for name in ("INPUT0", "INPUT1"):
        values = draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=16, max_size=16))
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[batch, 16])
        if raw:
            request.raw_input_contents.append(
                b"".join(v.to_bytes(4, "little", signed=True) for v in values) * batch
            )
        else:
            tensor.contents.int_contents.extend(values * batch)
    mutation = draw(st.sampled_from(["none", "shape", "datatype", "drop", "extra", "params"]))
    if mutation == "shape":
        request.inputs[draw(st.integers(0, 1))].shape[:] = draw(shapes)
    elif mutation == "datatype":
        request.inputs[draw(st.integers(0, 1))].datatype = draw(datatypes)
    elif mutation == "drop" and raw:
        request.raw_input_contents.pop()
    elif mutation == "extra":
        request.inputs.add(name=draw(tensor_names), datatype="INT32", shape=[batch, 16])
    elif mutation == "params":
        for key, value in draw(parameters).items():
            request.parameters[key].CopyFrom(value)
    for _ in range(draw(st.integers(0, 2))):
        request.outputs.add(name=draw(tensor_names))
    return request


@pytest.fixture(scope="module")
def stub(served: Any) -> Iterator[Any]:
    channel = grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}")
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def _check(call: Any, request: Any, served: Any) -> None:
    """Make ``call(request)``; its status must be one Triton uses; the server stays live."""
    try:
        call(request, timeout=30)
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details() or ""
        documented = code is grpc.StatusCode.INTERNAL and any(
            part in details for part in DOCUMENTED_INTERNAL
        )
        assert code in ALLOWED or documented, f"{code} {details[:300]}\n{request}"[:3000]
    served.assert_alive()


@given(request=st.one_of(infer_requests(), near_valid_requests()))
@FUZZ
def test_model_infer(request: service_pb2.ModelInferRequest, stub: Any, served: Any) -> None:
    _check(stub.ModelInfer, request, served)


@given(name=names, version=versions, rpc=st.sampled_from(["metadata", "config", "ready"]))
@FUZZ
def test_model_queries(name: str, version: str, rpc: str, stub: Any, served: Any) -> None:
    if rpc == "metadata":
        _check(
            stub.ModelMetadata, service_pb2.ModelMetadataRequest(name=name, version=version), served
        )
    elif rpc == "config":
        _check(stub.ModelConfig, service_pb2.ModelConfigRequest(name=name, version=version), served)
    else:
        _check(stub.ModelReady, service_pb2.ModelReadyRequest(name=name, version=version), served)


@given(
    name=st.one_of(st.just("fuzz_model"), st.text(max_size=30)),
    config=st.one_of(
        st.none(),
        st.text(max_size=80),
        st.sampled_from(
            [
                '{"backend": "onnxruntime"}',
                '{"backend": "python", "max_batch_size": -3}',
                '{"name": "other", "platform": "nope"}',
                "[]",
                '{"input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [-5]}]}',
            ]
        ),
    ),
)
@FUZZ
def test_repository_load(name: str, config: str | None, stub: Any, served: Any) -> None:
    request = service_pb2.RepositoryModelLoadRequest(model_name=name)
    if config is not None:
        request.parameters["config"].string_param = config
    _check(stub.RepositoryModelLoad, request, served)
    unload = service_pb2.RepositoryModelUnloadRequest(model_name=name)
    if name not in MODELS:
        _check(stub.RepositoryModelUnload, unload, served)
