"""Non-decoupled python models that answer through ``request.get_response_sender()``, as
under Triton (python_backend ``src/response_sender.cc``, ``src/pb_stub.cc``): one response
with the final flag, sent before or after ``execute`` returns (which returns None, or None
for those requests), for every request of a batch; Triton's errors for a second response and
a final flag without a response (a response both sent and returned:
test_sender_non_decoupled.py). In both execution modes, in-process and over HTTP/gRPC."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

from tritonx import InferenceRequest, Server, TritonXError
from tritonx.errors import Code
from tritonx.testing import loopback_settings

BOTH_MODES = pytest.mark.parametrize("mode", ["process", "in_process"])
BATCH = 3


@pytest.fixture
def server_settings(model_repository, add_model):
    io = {"inputs": [("X", "INT32", [1])], "outputs": [("Y", "INT32", [1]), ("N", "INT32", [1])]}
    add_model("sender", "sender", **io)
    # batches of 3: three requests sent at once run in one execute call
    add_model(
        "sender_batch",
        "sender",
        max_batch_size=4,
        extra=(
            f"dynamic_batching {{ preferred_batch_size: [ {BATCH} ] "
            "max_queue_delay_microseconds: 600000000 }\n"
        ),
        **io,
    )
    return loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("*",),
        allow_metrics=False,
    )


def infer_request(model: str, how: str, value: int = 5) -> InferenceRequest:
    x = np.array([[value]] if model == "sender_batch" else [value], np.int32)
    return InferenceRequest(model, {"X": x}, parameters={"how": how})


def failure(model: str, message: str) -> str:
    return f"Failed to process the request(s) for model '{model}_0', message: {message}"


@BOTH_MODES
@pytest.mark.parametrize("how", ["final", "split", "after"])
async def test_one_response_through_the_sender(server: Server, how: str) -> None:
    response = await server.infer(infer_request("sender", how, 7))
    assert response.outputs["Y"].tolist() == [7]
    assert response.outputs["N"].tolist() == [1]


@BOTH_MODES
@pytest.mark.parametrize("how", ["final", "split", "after", "mixed"])
async def test_every_request_of_a_batch(server: Server, how: str) -> None:
    responses = await asyncio.gather(
        *(server.infer(infer_request("sender_batch", how, v)) for v in range(BATCH))
    )
    assert [r.outputs["Y"].tolist() for r in responses] == [[[v]] for v in range(BATCH)]
    assert [r.outputs["N"].tolist() for r in responses] == [[[BATCH]]] * BATCH


@BOTH_MODES
async def test_second_response_is_refused(server: Server, caplog) -> None:
    caplog.set_level(logging.INFO)
    response = await server.infer(infer_request("sender", "two", 3))
    assert response.outputs["Y"].tolist() == [3]
    assert any(
        "second send: Unable to send response. Non-decoupled model cannot send more than "
        "one response." in r.getMessage()
        for r in caplog.records
    )


@BOTH_MODES
@pytest.mark.parametrize(
    ("how", "message"),
    [
        (
            "final_only",
            "TritonModelException: Unable to send response. Non-decoupled model cannot send "
            "complete final before sending a response.",
        ),
    ],
)
async def test_triton_errors(server: Server, how: str, message: str) -> None:
    with pytest.raises(TritonXError) as err:
        await server.infer(infer_request("sender", how))
    assert err.value.code is Code.INTERNAL
    assert err.value.message.startswith(failure("sender", message))
    # the model keeps serving
    response = await server.infer(infer_request("sender", "final", 2))
    assert response.outputs["Y"].tolist() == [2]


@BOTH_MODES
async def test_no_response_at_all(server: Server) -> None:
    """``execute`` returned None and never took the request's sender: no response can come,
    so the request fails at once (under Triton its client would wait)."""
    with pytest.raises(TritonXError) as err:
        await server.infer(infer_request("sender", "nothing"))
    assert "did not take its response sender" in err.value.message


async def check_client(client, module) -> None:
    x = module.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([4], np.int32))
    for how in ("final", "split", "after"):
        result = await client.infer("sender", [x], parameters={"how": how})
        assert result.as_numpy("Y").tolist() == [4]
    with pytest.raises(InferenceServerException) as err:
        await client.infer("sender", [x], parameters={"how": "final_only"})
    assert "cannot send complete final before sending a response." in err.value.message()


async def test_over_http(http_client) -> None:
    await check_client(http_client, httpclient)


async def test_over_grpc(grpc_client) -> None:
    await check_client(grpc_client, grpcclient)
