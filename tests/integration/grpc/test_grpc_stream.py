"""ModelStreamInfer through tritonclient.grpc (sync and aio streams): ordering, in-stream
errors, decoupled models with ``triton_final_response`` and empty final responses,
``triton_grpc_error`` mode, cancellation and disconnects."""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tritonx import Server
from tritonx.testing import ServerThread


def int_input(value: int, client: Any = grpcclient) -> Any:
    inp = client.InferInput("INPUT0", [1], "INT32")
    inp.set_data_from_numpy(np.array([value], np.int32))
    return inp


def fp_input(shape: list[int], client: Any = grpcclient) -> Any:
    inp = client.InferInput("INPUT0", shape, "FP32")
    inp.set_data_from_numpy(np.ones(shape, np.float32))
    return inp


class Collector:
    """A stream callback that queues (result, error) pairs."""

    def __init__(self) -> None:
        self.items: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def __call__(self, result: Any, error: Any) -> None:
        self.items.put((result, error))

    def take(self, n: int, timeout: float = 10) -> list[tuple[Any, Any]]:
        return [self.items.get(timeout=timeout) for _ in range(n)]


@pytest.fixture
def client(server_thread: ServerThread):
    c = grpcclient.InferenceServerClient(server_thread.server.grpc_url)
    yield c
    c.close()


def final_flag(result: Any) -> bool:
    return result.get_response().parameters["triton_final_response"].bool_param


# ---------------------------------------------------------------------- ordinary models


def test_stream_responses_in_request_order(client) -> None:
    """A slow request sent first is answered first, although the fast ones finish earlier."""
    got = Collector()
    client.start_stream(callback=got)
    client.async_stream_infer("slow", [fp_input([3])], request_id="slow-1")
    for i in range(5):
        client.async_stream_infer("simple", [fp_input([1, 2])], request_id=f"fast-{i}")
    items = got.take(6)
    client.stop_stream()
    assert [e for _, e in items] == [None] * 6
    assert [r.get_response().id for r, _ in items] == ["slow-1"] + [f"fast-{i}" for i in range(5)]
    assert all(final_flag(r) for r, _ in items)
    assert items[0][0].as_numpy("OUTPUT0").shape == (3,)


def test_stream_errors_do_not_close_the_stream(client) -> None:
    got = Collector()
    client.start_stream(callback=got)
    client.async_stream_infer("nope", [fp_input([1, 2])], request_id="r1")
    client.async_stream_infer("simple", [fp_input([1, 2])], request_id="r2")
    client.async_stream_infer("failing", [int_input(13)], request_id="r3")
    client.async_stream_infer("simple", [int_input(1)], request_id="r4")  # wrong datatype
    client.async_stream_infer("simple", [fp_input([1, 2])], request_id="r5")
    items = got.take(5)
    client.stop_stream()
    (r1, e1), (r2, e2), (r3, e3), (r4, e4), (r5, e5) = items
    assert r1 is None and "Request for unknown model: 'nope' is not found" in e1.message()
    assert e2 is None and r2.get_response().id == "r2"
    assert r3 is None and "fail_value 13 seen" in e3.message()
    assert r4 is None and "data-type is 'INT32'" in e4.message()
    assert e5 is None and r5.get_response().id == "r5"


def test_stream_error_message_carries_request_id(server_thread: ServerThread) -> None:
    with grpc.insecure_channel(server_thread.server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        requests = [
            service_pb2.ModelInferRequest(
                model_name="nope",
                id="x1",
                # malformed too: the unknown model is reported first, as in Triton
                inputs=[
                    service_pb2.ModelInferRequest.InferInputTensor(
                        name="INPUT0", datatype="FLOAT", shape=[1]
                    )
                ],
            ),
            service_pb2.ModelInferRequest(
                model_name="failing",
                id="x2",
                inputs=[
                    service_pb2.ModelInferRequest.InferInputTensor(
                        name="INPUT0", datatype="INT32", shape=[1]
                    )
                ],
                raw_input_contents=[np.int32([13]).tobytes()],
            ),
        ]
        responses = list(stub.ModelStreamInfer(iter(requests)))
    assert [r.infer_response.id for r in responses] == ["x1", "x2"]
    assert "Request for unknown model: 'nope' is not found" in responses[0].error_message
    assert all(r.error_message for r in responses)
    # an error reported after the request was accepted names the model and is final
    assert responses[1].infer_response.model_name == "failing"
    assert responses[1].infer_response.parameters["triton_final_response"].bool_param


def test_triton_grpc_error_metadata_closes_stream(client) -> None:
    got = Collector()
    client.start_stream(callback=got, headers={"triton_grpc_error": "true"})
    client.async_stream_infer("simple", [fp_input([1, 2])], request_id="ok")
    client.async_stream_infer("nope", [fp_input([1, 2])], request_id="bad")
    (r1, e1), (r2, e2) = got.take(2)
    client.stop_stream()
    assert e1 is None and r1.get_response().id == "ok"
    assert r2 is None and e2.status() == "StatusCode.NOT_FOUND"
    assert "Request for unknown model" in e2.message()


# ---------------------------------------------------------------------- decoupled models


def test_decoupled_many_responses_with_final_flag(client) -> None:
    got = Collector()
    client.start_stream(callback=got)
    client.async_stream_infer("decoupled", [int_input(3)], request_id="d1")
    items = got.take(3)
    client.async_stream_infer("decoupled", [int_input(0)], request_id="d0")  # no responses
    client.async_stream_infer("decoupled", [int_input(1)], request_id="d2")
    items += got.take(1)
    client.stop_stream()
    assert all(e is None for _, e in items)
    assert [r.get_response().id for r, _ in items] == ["d1", "d1", "d1", "d2"]
    assert [final_flag(r) for r, _ in items] == [False, False, False, False]
    for r, _ in items:
        assert r.as_numpy("OUTPUT0").tolist() == [r.as_numpy("OUTPUT0")[0]]
    assert got.items.empty()


def test_decoupled_empty_final_response(client) -> None:
    got = Collector()
    client.start_stream(callback=got)
    client.async_stream_infer(
        "decoupled", [int_input(2)], request_id="e1", enable_empty_final_response=True
    )
    items = got.take(3)
    client.async_stream_infer(
        "decoupled", [int_input(0)], request_id="e0", enable_empty_final_response=True
    )
    items += got.take(1)
    client.stop_stream()
    assert [final_flag(r) for r, _ in items] == [False, False, True, True]
    assert [r.get_response().id for r, _ in items] == ["e1", "e1", "e1", "e0"]
    empty = items[2][0].get_response()
    assert len(empty.outputs) == 0 and len(empty.raw_output_contents) == 0
    assert empty.model_name == "decoupled"


async def test_aio_stream_ordinary_and_decoupled(
    grpc_client: aioclient.InferenceServerClient,
) -> None:
    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": "simple", "inputs": [fp_input([1, 4], aioclient)], "request_id": "a"}
        yield {"model_name": "decoupled", "inputs": [int_input(2, aioclient)], "request_id": "b"}

    got = []
    async for result, error in grpc_client.stream_infer(requests()):
        assert error is None
        got.append((result.get_response().id, final_flag(result)))
    # decoupled responses are written as they come, so "a" and "b" may interleave
    assert [g for g in got if g[0] == "a"] == [("a", True)]
    assert [g for g in got if g[0] == "b"] == [("b", False), ("b", False)]  # no empty final


# ---------------------------------------------------------------------- cancellation / disconnects


def _finished(server: Server, model: str) -> int:
    """Requests of ``model`` that ended (succeeded or failed), from its statistics."""
    ((_, _, stats),) = server.model_statistics(model)
    return stats.success.count + stats.fail.count


def _wait_finished(server: Server, model: str, count: int, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while _finished(server, model) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _finished(server, model) == count


def test_client_cancels_mid_stream(server_thread: ServerThread) -> None:
    server = server_thread.server
    c1 = grpcclient.InferenceServerClient(server.grpc_url)
    c2 = grpcclient.InferenceServerClient(server.grpc_url)
    other = Collector()
    c2.start_stream(callback=other)
    try:
        got = Collector()
        c1.start_stream(callback=got)
        c1.async_stream_infer("decoupled_slow", [int_input(5)], request_id="c1")
        c1.async_stream_infer("slow", [fp_input([2])], request_id="c2")
        time.sleep(0.1)
        c1.stop_stream(cancel_requests=True)
        _, error = got.take(1)[0]
        assert error is not None and "CANCELLED" in error.status()
        # the other stream and the server keep working
        c2.async_stream_infer("decoupled", [int_input(2)], request_id="o1")
        assert [e for _, e in other.take(2)] == [None, None]
        # dropped at once, long before decoupled_slow's 1 s execution would have ended
        _wait_finished(server, "decoupled_slow", 1, timeout=0.6)
        _wait_finished(server, "slow", 1)
        c1.start_stream(callback=got)  # a new stream on the same client works
        c1.async_stream_infer("simple", [fp_input([1, 1])], request_id="after")
        ((result, error),) = got.take(1)
        assert error is None and result.get_response().id == "after"
        c1.stop_stream()
    finally:
        c2.stop_stream()
        c1.close()
        c2.close()


async def test_client_disconnects_mid_stream(server: Server) -> None:
    """Closing the channel under an open stream frees its requests; the server goes on."""
    channel = grpc.aio.insecure_channel(server.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = service_pb2.ModelInferRequest(
        model_name="decoupled_slow",
        inputs=[
            service_pb2.ModelInferRequest.InferInputTensor(
                name="INPUT0", datatype="INT32", shape=[1]
            )
        ],
        raw_input_contents=[np.int32([3]).tobytes()],
    )
    call = stub.ModelStreamInfer()
    await call.write(request)
    await asyncio.sleep(0.1)
    assert _finished(server, "decoupled_slow") == 0
    await channel.close(grace=None)
    # dropped at once, long before the model's 1 s execution would have ended
    deadline = time.monotonic() + 0.6
    while not _finished(server, "decoupled_slow") and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert _finished(server, "decoupled_slow") == 1
    client = aioclient.InferenceServerClient(server.grpc_url)
    try:
        inp = fp_input([1, 2], aioclient)
        assert (await client.infer("simple", [inp])).as_numpy("OUTPUT0").shape == (1, 2)
    finally:
        await client.close()


def test_many_requests_on_one_stream(client) -> None:
    got = Collector()
    client.start_stream(callback=got)
    for i in range(200):
        client.async_stream_infer("simple", [fp_input([1, 8])], request_id=str(i))
    items = got.take(200)
    client.stop_stream()
    assert [r.get_response().id for r, _ in items] == [str(i) for i in range(200)]
