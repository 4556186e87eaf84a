"""Request rescheduling from ``model.py`` (python_backend README "Request Rescheduling"):
``request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)`` in a model
with ``sequence_batching { iterative_sequence: true }`` runs the request again in a later
batch, non-decoupled (returning None for it) and decoupled (a response per execution);
Triton's errors for a response returned for a rescheduled request and for rescheduling in a
model that is not configured for it. In worker processes and in-process, through
tritonclient over HTTP and gRPC."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

from tritonx import Server
from tritonx.testing import loopback_settings

BOTH_MODES = pytest.mark.parametrize("mode", ["process", "in_process"])
ITERATIVE = "sequence_batching { iterative_sequence: true }\n"
DECOUPLED = "model_transaction_policy { decoupled: true }\n"
NOT_CONFIGURED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)


@pytest.fixture
def server_settings(model_repository, add_model):
    outputs = [("OUT", "INT32", [1]), ("FLAGS", "INT32", [1]), ("CORR", "INT64", [1])]
    io = {"inputs": [("IN", "INT32", [1])], "outputs": outputs}
    add_model("iterative", "reschedule", max_batch_size=4, extra=ITERATIVE, **io)
    add_model(
        "respond_too",
        "reschedule",
        max_batch_size=4,
        extra=ITERATIVE,
        parameters={"respond_too": "1"},
        **io,
    )
    add_model("plain", "reschedule", max_batch_size=4, extra="dynamic_batching { }\n", **io)
    stream_io = {"inputs": [("IN", "INT32", [1])], "outputs": [("OUT", "INT32", [1])]}
    add_model("stream", "reschedule", extra=ITERATIVE + DECOUPLED, **stream_io)
    return loopback_settings(model_repository.root, allow_metrics=False)


def http_input(value: int) -> list[Any]:
    tensor = httpclient.InferInput("IN", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], np.int32))
    return [tensor]


def grpc_input(value: int, shape: tuple[int, ...] = (1, 1)) -> list[Any]:
    tensor = grpcclient.InferInput("IN", list(shape), "INT32")
    tensor.set_data_from_numpy(np.full(shape, value, np.int32))
    return [tensor]


@BOTH_MODES
async def test_a_rescheduled_request_runs_again_until_answered(server: Server) -> None:
    http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        results = await asyncio.gather(
            http.infer("iterative", http_input(3)),
            grpc.infer("iterative", grpc_input(1)),
            http.infer("iterative", http_input(2)),
            grpc.infer("iterative", grpc_input(4)),
        )
    finally:
        await http.close()
        await grpc.close()
    assert [int(r.as_numpy("OUT")[0][0]) for r in results] == [3, 1, 2, 4]
    # a request answered at its first execution still has its START flag; later
    # executions see no flags (Triton's IterativeSequencer)
    assert [int(r.as_numpy("FLAGS")[0][0]) for r in results] == [0, 1, 0, 0]
    corrids = [int(r.as_numpy("CORR")[0][0]) for r in results]
    assert all(corrids) and len(set(corrids)) == 4


@BOTH_MODES
async def test_a_decoupled_model_reschedules_before_returning(server: Server) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)

    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": "stream", "inputs": grpc_input(3, (1,)), "request_id": "r"}

    got: list[tuple[int, bool]] = []
    try:
        async for result, error in client.stream_infer(requests()):
            assert error is None
            final = result.get_response().parameters["triton_final_response"].bool_param
            got.append((int(result.as_numpy("OUT")[0]), final))
    finally:
        await client.close()
    assert got == [(2, False), (1, False), (0, True)]


@BOTH_MODES
async def test_a_response_for_a_rescheduled_request_is_refused(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    try:
        with pytest.raises(InferenceServerException) as err:
            await client.infer("respond_too", http_input(2))
        # the model keeps serving
        answered = await client.infer("respond_too", http_input(1))
    finally:
        await client.close()
    assert "Expected a None object in the execute function return list for reschduled " in str(
        err.value.message()
    )
    assert "InferenceResponse'>'." in str(err.value.message())
    assert int(answered.as_numpy("OUT")[0][0]) == 1


@BOTH_MODES
async def test_rescheduling_in_a_model_without_iterative_sequence(server: Server) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as err:
            await client.infer("plain", grpc_input(2))
        answered = await client.infer("plain", grpc_input(1))
    finally:
        await client.close()
    assert err.value.message() == NOT_CONFIGURED
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert int(answered.as_numpy("OUT")[0][0]) == 1
