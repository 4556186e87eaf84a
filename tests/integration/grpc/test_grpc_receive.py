"""How the gRPC frontend receives request messages (:mod:`tritonx._transports.grpc.receive`): compressed
messages inflated up to ``--grpc-max-decompressed-message-size`` and refused past it, large
messages decoded with their input tensors as views of the received message, unparsable ones
answered INVALID_ARGUMENT; the server keeps serving after every refusal.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

import tritonx
from tritonx import InferenceRequest, InferenceResponse, Server
from tritonx._transports.grpc.health import HealthCheckRequest, HealthCheckResponse
from tritonx.config import ServerSettings
from tritonx.proto import service_pb2
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

#: the limit of these servers' compressed messages
LIMIT = 1 << 20
#: over the limit once inflated, a few KiB compressed
OVER = np.zeros(LIMIT // 4 + 1024, np.float32)
#: under the limit, inflated past the part inflated in the deserializer (256 KiB)
UNDER = np.arange(LIMIT // 8, dtype=np.float32)


class ViewsBackend(tritonx.Backend):
    """OUTPUT0 = INPUT0; response parameter ``owner_bytes``: the size of the buffer INPUT0's
    data lives in (-1 when INPUT0 owns its data), seen through numpy's and memoryview's
    public attributes."""

    name = "views"

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return ViewsInstance()


class ViewsInstance(tritonx.ModelInstance):
    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        out = []
        for r in requests:
            array = r.inputs["INPUT0"]
            base = array.base
            while isinstance(base, np.ndarray):
                base = base.base
            if isinstance(base, memoryview):
                base = base.obj
            owner = len(base) if isinstance(base, (bytes, bytearray)) else -1
            out.append(
                InferenceResponse(outputs={"OUTPUT0": array}, parameters={"owner_bytes": owner})
            )
        return out


@tritonx.hookimpl
def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
    registry.add(ViewsBackend)


class _ViewsPlugin:
    tritonx_register_backends = staticmethod(tritonx_register_backends)


@pytest.fixture(autouse=True)
def _views(register_plugin: Any) -> None:
    register_plugin(_ViewsPlugin(), name="views-test-backend")


@pytest.fixture
def server_settings(model_repository: ModelRepositoryBuilder) -> ServerSettings:
    model_repository.add_identity("big", dims=[-1])
    model_repository.add(
        "two",
        backend="identity",
        inputs=[("INPUT0", "FP32", [-1]), ("INPUT1", "BYTES", [-1])],
        outputs=[("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "BYTES", [-1])],
    )
    model_repository.add(
        "views",
        backend="views",
        inputs=[("INPUT0", "FP32", [-1])],
        outputs=[("OUTPUT0", "FP32", [-1])],
    )
    return loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_metrics=False,
        grpc_max_decompressed_message_size=LIMIT,
    )


def tensor(name: str, array: np.ndarray) -> grpcclient.InferInput:
    datatype = "BYTES" if array.dtype == object else "FP32"
    out = grpcclient.InferInput(name, list(array.shape), datatype)
    out.set_data_from_numpy(array)
    return out


async def assert_serving(client: grpcclient.InferenceServerClient) -> None:
    assert await client.is_server_live()
    small = np.arange(4, dtype=np.float32)
    result = await client.infer("big", [tensor("INPUT0", small)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), small)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
async def test_compressed_message_over_the_limit_is_refused(
    grpc_client: grpcclient.InferenceServerClient, algorithm: str
) -> None:
    with pytest.raises(InferenceServerException) as info:
        await grpc_client.infer("big", [tensor("INPUT0", OVER)], compression_algorithm=algorithm)
    assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert info.value.message() == (
        "Received message larger than max after decompression: more than "
        f"{LIMIT} bytes (--grpc-max-decompressed-message-size)"
    )
    await assert_serving(grpc_client)


async def test_compressed_stream_message_over_the_limit_ends_the_stream(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": "big", "inputs": [tensor("INPUT0", UNDER)]}
        yield {"model_name": "big", "inputs": [tensor("INPUT0", OVER)]}

    results: list[Any] = []
    with pytest.raises(grpc.aio.AioRpcError) as info:  # tritonclient's aio stream raises it
        async for result, error in grpc_client.stream_infer(
            requests(), compression_algorithm="gzip"
        ):
            results.append(error or result)
    assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"more than {LIMIT} bytes" in (info.value.details() or "")
    assert len(results) <= 1  # the first one's answer may come before the status
    await assert_serving(grpc_client)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
async def test_compressed_messages_under_the_limit_are_served(
    grpc_client: grpcclient.InferenceServerClient, algorithm: str
) -> None:
    small = np.arange(16, dtype=np.float32)
    for data in (small, UNDER):
        result = await grpc_client.infer(
            "big", [tensor("INPUT0", data)], compression_algorithm=algorithm
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)

    async def requests() -> AsyncIterator[dict[str, Any]]:
        for data in (small, UNDER):
            yield {"model_name": "big", "inputs": [tensor("INPUT0", data)]}

    got = []
    async for result, error in grpc_client.stream_infer(
        requests(), compression_algorithm=algorithm
    ):
        assert error is None
        got.append(result.as_numpy("OUTPUT0"))
    assert len(got) == 2
    np.testing.assert_array_equal(got[1], UNDER)


async def test_large_uncompressed_message_is_decoded(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    """Over 1 MiB: the raw contents are taken out of the message before it is parsed."""
    floats = np.arange(3 << 18, dtype=np.float32)  # 3 MiB
    strings = np.array([b"x" * n for n in range(2000)], dtype=object)
    inputs = [tensor("INPUT0", floats), tensor("INPUT1", strings)]
    result = await grpc_client.infer("two", inputs, request_id="big-one")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), floats)
    assert result.as_numpy("OUTPUT1").tolist() == strings.tolist()
    assert result.get_response().id == "big-one"

    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": "two", "inputs": inputs}

    async for streamed, error in grpc_client.stream_infer(requests()):
        assert error is None
        np.testing.assert_array_equal(streamed.as_numpy("OUTPUT0"), floats)


async def test_large_message_inputs_are_views_of_the_message(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    data = np.arange(1 << 19, dtype=np.float32)  # 2 MiB
    result = await grpc_client.infer("views", [tensor("INPUT0", data)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    owner = result.get_response().parameters["owner_bytes"].int64_param
    assert owner > data.nbytes  # the whole received message, not a copy of the tensor


async def test_unparsable_messages_are_invalid_argument(server: Server) -> None:
    async with grpc.aio.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=None,
            response_deserializer=None,
        )
        # a length running past the end; the same with 2 MiB of raw contents before it
        raw = b"\x3a\x80\x80\x80\x01" + bytes(2 << 20)
        for message in (b"\x0a\x05ab", raw + b"\x0a\x05ab"):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call(message)
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "Error parsing message" in (info.value.details() or "")
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            await assert_serving(client)
        finally:
            await client.close()


async def test_control_and_health_calls_take_compressed_messages(server: Server) -> None:
    async with grpc.aio.insecure_channel(server.grpc_url) as channel:
        ready = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelReady",
            request_serializer=service_pb2.ModelReadyRequest.SerializeToString,
            response_deserializer=service_pb2.ModelReadyResponse.FromString,
        )
        for name, expected in (("big", True), ("nope" * 100, False)):
            answer = await ready(
                service_pb2.ModelReadyRequest(name=name), compression=grpc.Compression.Gzip
            )
            assert answer.ready is expected
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=HealthCheckRequest.SerializeToString,
            response_deserializer=HealthCheckResponse.FromString,
        )
        answer = await check(HealthCheckRequest(service=""), compression=grpc.Compression.Deflate)
        assert answer.status == 1  # SERVING
        load = channel.unary_unary(
            "/inference.GRPCInferenceService/RepositoryModelLoad",
            request_serializer=service_pb2.RepositoryModelLoadRequest.SerializeToString,
            response_deserializer=service_pb2.RepositoryModelLoadResponse.FromString,
        )
        request = service_pb2.RepositoryModelLoadRequest(model_name="big")
        request.parameters["file:1/blob"].bytes_param = bytes(2 * LIMIT)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await load(request, compression=grpc.Compression.Gzip)
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_message_that_only_looks_compressed_is_parsed_as_it_is() -> None:
    """A protobuf message whose first bytes read as a zlib header (field 3, varint 25) and
    that does not inflate is parsed as the message it is."""
    from tritonx._transports.grpc.receive import Limit, compression_of, deserializer

    request = service_pb2.CudaSharedMemoryRegisterRequest(device_id=25, byte_size=7)
    data = request.SerializeToString()
    assert compression_of(data) == "deflate" and struct.unpack("BB", data[:2]) == (0x18, 25)
    parse = deserializer(service_pb2.CudaSharedMemoryRegisterRequest.FromString, Limit())
    assert parse(data) == request


def test_split_raw_contents_keeps_the_message() -> None:
    """The message without its raw contents, parsed, plus the views in order, is the message,
    whatever the order of its fields; what cannot be split is left to protobuf."""
    from tritonx._transports.grpc.receive import MAX_SPLIT_FIELDS, split_raw_contents

    msg = service_pb2.ModelInferRequest(model_name="m", id="x")
    msg.inputs.add(name="A", datatype="FP32", shape=[2])
    msg.inputs.add(name="B", datatype="BYTES", shape=[1])
    msg.raw_input_contents.extend([b"\1" * 8, struct.pack("<I", 3) + b"abc"])
    msg.parameters["p"].int64_param = 5
    data = msg.SerializeToString()
    # the same fields, raw contents first and an over-long (non-canonical) tag on one of them
    first = b"\xba\x00" + data[data.index(b"\x3a\x08") + 1 :][:9]
    shuffled = first + data.replace(data[data.index(b"\x3a\x08") :][:10], b"")
    for wire in (data, shuffled):
        split = split_raw_contents(wire)
        assert split is not None
        head, raws = split
        rebuilt = service_pb2.ModelInferRequest.FromString(head)
        rebuilt.raw_input_contents.extend(bytes(r) for r in raws)
        assert rebuilt == msg
        assert all(r.obj is wire for r in raws)  # views of the received bytes
    assert (
        split_raw_contents(service_pb2.ModelInferRequest(model_name="m").SerializeToString())
        is None
    )
    assert split_raw_contents(data + b"\x0b") is None  # a group
    assert split_raw_contents(data[:-1]) is None  # truncated
    many = b"\x12\x00" * MAX_SPLIT_FIELDS + b"\x3a\x01a"
    assert split_raw_contents(many) is None
