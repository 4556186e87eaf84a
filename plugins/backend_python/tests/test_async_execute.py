"""``async def execute`` as under Triton (python_backend ``src/pb_stub.cc``,
``Stub::ProcessRequests``): a decoupled model's coroutine runs in the background on the
instance's event loop, so the requests of one instance overlap; a non-decoupled model's
coroutine is awaited before the instance takes its next batch. BLS ``async_exec`` inside,
and an exception in the coroutine fails the request(s) and is logged with its text. In
both execution modes."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest

from tritonx import InferenceRequest, Server, TritonXError
from tritonx.errors import Code
from tritonx.testing import loopback_settings

BOTH_MODES = pytest.mark.parametrize("mode", ["process", "in_process"])
IO = {"inputs": [("IN", "INT32", [1])], "outputs": [("OUT", "INT32", [1])]}
DECOUPLED = "model_transaction_policy { decoupled: true }\n"
#: only a guard against a hang (a failure): the tests wait on events, not on time
GUARD_S = 60


@pytest.fixture
def server_settings(model_repository, add_model):
    add_model(
        "add_sub",
        "add_sub",
        inputs=[("INPUT0", "FP32", [1]), ("INPUT1", "FP32", [1])],
        outputs=[("OUTPUT0", "FP32", [1]), ("OUTPUT1", "FP32", [1])],
    )
    add_model("plain", "async_model", **IO)
    add_model("streaming", "async_model", extra=DECOUPLED, **IO)
    return loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("*",),
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )


def infer_request(model: str, value: int = 1, **parameters: str) -> InferenceRequest:
    return InferenceRequest(model, {"IN": np.array([value], np.int32)}, parameters=parameters)


async def outcome(server: Server, request: InferenceRequest):
    """The one response of a plain or decoupled model (or its error)."""
    try:
        if request.model_name == "plain":
            return await server.infer(request)
        responses = [r async for r in server.infer_stream(request) if not r.empty]
        assert len(responses) == 1
        return responses[0].raise_for_error()
    except TritonXError as exc:
        return exc


@BOTH_MODES
async def test_decoupled_requests_overlap_on_one_instance(server: Server) -> None:
    """Three requests on the model's one instance each wait until all three are inside
    ``execute``: they can only be answered if their coroutines run at once."""
    requests = [infer_request("streaming", v, how="barrier", key="k", n="3") for v in range(3)]
    results = await asyncio.wait_for(
        asyncio.gather(*(outcome(server, r) for r in requests)), GUARD_S
    )
    assert [r.outputs["OUT"].tolist() for r in results] == [[0], [1], [2]]


@BOTH_MODES
@pytest.mark.parametrize("model", ["plain", "streaming"])
async def test_bls_async_exec_inside(server: Server, model: str) -> None:
    result = await outcome(server, infer_request(model, 4, how="bls"))
    assert not isinstance(result, TritonXError), result
    assert result.outputs["OUT"].tolist() == [8]


@BOTH_MODES
@pytest.mark.parametrize("model", ["plain", "streaming"])
async def test_exception_fails_the_request_and_is_logged(
    server: Server, model: str, caplog
) -> None:
    caplog.set_level(logging.INFO)
    result = await outcome(server, infer_request(model, how="raise"))
    expected = (
        f"Failed to process the request(s) for model '{model}_0', message: "
        "ValueError: boom in the coroutine"
    )
    assert isinstance(result, TritonXError), result
    assert result.message.startswith(expected)
    if model == "plain":
        assert result.code is Code.INTERNAL
    # a plain model's failure is logged with Triton's message, a decoupled coroutine's
    # traceback as Triton's stub logs it (Stub::BackgroundFutureDone)
    logged = expected if model == "plain" else "ValueError: boom in the coroutine"
    assert any(logged in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]
    # the instance keeps serving
    result = await outcome(server, infer_request(model, 2, how="bls"))
    assert result.outputs["OUT"].tolist() == [4]
