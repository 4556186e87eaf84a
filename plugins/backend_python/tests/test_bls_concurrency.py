"""Requests of one decoupled BLS model overlap on its one instance, as under Triton (Triton's
qa/L0_backend_python/async_execute concurrency_test.py, ``*_multi_request_bls``): each
request's ``async def execute`` awaits ``async_exec(decoupled=True)``, which returns once the
call's first response is there (python_backend ``InferRequest::Exec`` waits for it,
``InferPayload`` sets its promise with the first response) and so never leaves the
coroutine iterating a stream that has not started, holding the instance's event loop.

The callee only answers once all the calls are inside its own ``execute``: the requests are
answered only if that many run at once. Four: the event loop's default executor, where
``async_exec`` waits, has at least five threads (``min(32, CPUs + 4)``, in Triton's stub as
here). In both execution modes, in-process and over a gRPC stream."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient

from tritonx import InferenceRequest, Server
from tritonx.testing import loopback_settings

BOTH_MODES = pytest.mark.parametrize("mode", ["process", "in_process"])
IO = {"inputs": [("IN", "INT32", [1])], "outputs": [("OUT", "INT32", [1])]}
DECOUPLED = "model_transaction_policy { decoupled: true }\n"
#: how many requests must run at once
AT_ONCE = 4
#: only a guard against a hang (a failure): the tests wait on answers, not on time
GUARD_S = 60


@pytest.fixture
def server_settings(model_repository, add_model):
    add_model("barrier", "async_model", extra=DECOUPLED, **IO)
    add_model("bls_fanout", "bls_fanout", extra=DECOUPLED, **IO)
    return loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("*",),
        allow_http=False,
        allow_metrics=False,
    )


def parameters(key: str) -> dict[str, str]:
    return {"callee": "barrier", "how": "barrier", "key": key, "n": str(AT_ONCE)}


async def one(server: Server, value: int, key: str) -> list[int]:
    request = InferenceRequest(
        "bls_fanout", {"IN": np.array([value], np.int32)}, parameters=parameters(key)
    )
    outs = []
    async for response in server.infer_stream(request):
        response.raise_for_error()
        if not response.empty:
            outs.extend(response.outputs["OUT"].tolist())
    return outs


@BOTH_MODES
async def test_requests_run_at_once(server: Server) -> None:
    results = await asyncio.wait_for(
        asyncio.gather(*(one(server, v, "in-process") for v in range(AT_ONCE))), GUARD_S
    )
    assert results == [[v] for v in range(AT_ONCE)]
    # and again: the instance is not left holding anything
    results = await asyncio.wait_for(
        asyncio.gather(*(one(server, v, "again") for v in range(AT_ONCE))), GUARD_S
    )
    assert results == [[v] for v in range(AT_ONCE)]


@BOTH_MODES
async def test_over_a_grpc_stream(server: Server) -> None:
    """Triton's test: the requests are sent on one stream, one after the other."""
    client = grpcclient.InferenceServerClient(server.grpc_url)

    async def requests():
        for value in range(AT_ONCE):
            x = grpcclient.InferInput("IN", [1], "INT32")
            x.set_data_from_numpy(np.array([value], np.int32))
            yield {
                "model_name": "bls_fanout",
                "inputs": [x],
                "request_id": str(value),
                "parameters": parameters("grpc"),
            }

    async def answers() -> dict[str, list[int]]:
        got: dict[str, list[int]] = {}
        async for result, error in client.stream_infer(requests()):
            assert error is None, error
            got[result.get_response().id] = result.as_numpy("OUT").tolist()
            if len(got) == AT_ONCE:
                return got
        return got

    try:
        got = await asyncio.wait_for(answers(), GUARD_S)
    finally:
        await client.close()
    assert got == {str(v): [v] for v in range(AT_ONCE)}
