"""A non-decoupled python model whose request got its response (with the final flag) through
``request.get_response_sender()`` and that then sends or returns more, as under Triton: the
client gets that first response; the later error is the model's (a TritonModelException
raised by ``send``: python_backend ``src/response_sender.cc``) or is only logged ("Failed to
process the request(s) for model ..." from ``Stub::ProcessRequests``, ``src/pb_stub.cc``),
since the backend answers with the failure only the requests whose response sender did not
send its final flag (``closed_requests_``, ``src/python_be.cc``). In both execution modes,
over HTTP and gRPC."""

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
CLIENTS = pytest.mark.parametrize("client_kind", ["http", "grpc"])
BATCH = 3
MORE = "Unable to send response. Non-decoupled model cannot send more than one response."
CLOSED = "Unable to send response. Response sender has been closed."


@pytest.fixture
def server_settings(model_repository, add_model):
    io = {"inputs": [("X", "INT32", [1])], "outputs": [("Y", "INT32", [1]), ("N", "INT32", [1])]}
    add_model("sender_more", "sender_more", **io)
    # batches of 3: three requests sent at once run in one execute call
    add_model(
        "sender_more_batch",
        "sender_more",
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


def failure(model: str, message: str) -> str:
    return f"Failed to process the request(s) for model '{model}_0', message: {message}"


def logged(caplog, text: str, level: int = logging.ERROR) -> bool:
    return any(text in r.getMessage() and r.levelno == level for r in caplog.records)


async def client_infer(server: Server, client_kind: str, how: str, value: int):
    """(Y, N) of the client's answer, through a tritonclient of ``client_kind``."""
    module = httpclient if client_kind == "http" else grpcclient
    client = module.InferenceServerClient(
        server.http_url if client_kind == "http" else server.grpc_url
    )
    try:
        x = module.InferInput("X", [1], "INT32")
        x.set_data_from_numpy(np.array([value], np.int32))
        result = await client.infer("sender_more", [x], parameters={"how": how})
        return result.as_numpy("Y").tolist(), result.as_numpy("N").tolist()
    finally:
        await client.close()


@BOTH_MODES
@CLIENTS
@pytest.mark.parametrize(
    ("how", "error"),
    [
        # execute returned normally: the backend's check of its list fails (no type name)
        ("return_too", MORE),
        # send raised in the model and execute let it through
        ("second", f"TritonModelException: {MORE}"),
        ("final_again", f"TritonModelException: {CLOSED}"),
    ],
    ids=["return_too", "second", "final_again"],
)
async def test_the_client_gets_the_first_response(
    server: Server, client_kind: str, how: str, error: str, caplog
) -> None:
    caplog.set_level(logging.INFO)
    assert await client_infer(server, client_kind, how, 7) == ([7], [1])
    assert logged(caplog, failure("sender_more", error)), [r.getMessage() for r in caplog.records]


@BOTH_MODES
async def test_a_caught_error_is_the_models_own(server: Server, caplog) -> None:
    caplog.set_level(logging.INFO)
    response = await server.infer(
        InferenceRequest(
            "sender_more", {"X": np.array([4], np.int32)}, parameters={"how": "caught"}
        )
    )
    assert response.outputs["Y"].tolist() == [4]
    assert response.outputs["N"].tolist() == [1]
    assert logged(caplog, f"caught: {MORE}", logging.WARNING)
    assert not logged(caplog, "Failed to process the request(s)")


def batch_request(value: int, how: str) -> InferenceRequest:
    return InferenceRequest(
        "sender_more_batch", {"X": np.array([[value]], np.int32)}, parameters={"how": how}
    )


async def outcome(server: Server, request: InferenceRequest):
    try:
        return await server.infer(request)
    except TritonXError as exc:
        return exc


@BOTH_MODES
async def test_in_a_batch_only_the_unanswered_requests_fail(server: Server) -> None:
    """The batch's first request got its response before ``execute`` raised: it keeps it,
    the others get the failure."""
    results = await asyncio.gather(
        *(outcome(server, batch_request(v, "first_then_raise")) for v in range(BATCH))
    )
    answered = [r for r in results if not isinstance(r, TritonXError)]
    failed = [r for r in results if isinstance(r, TritonXError)]
    assert len(answered) == 1 and len(failed) == BATCH - 1, results
    assert answered[0].outputs["N"].tolist() == [[1]]
    for exc in failed:
        assert exc.code is Code.INTERNAL
        assert exc.message.startswith(
            failure("sender_more_batch", "ValueError: after the first")
        ), exc.message


@BOTH_MODES
async def test_every_request_of_a_batch_keeps_its_first_response(server: Server) -> None:
    results = await asyncio.gather(
        *(outcome(server, batch_request(v, "return_too")) for v in range(BATCH))
    )
    assert [r.outputs["Y"].tolist() for r in results] == [[[v]] for v in range(BATCH)]
    assert [r.outputs["N"].tolist() for r in results] == [[[1]]] * BATCH


async def test_http_error_of_an_unanswered_request(server: Server) -> None:
    """A request that got nothing before the failure still gets Triton's error."""
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        x = httpclient.InferInput("X", [1, 1], "INT32")
        x.set_data_from_numpy(np.array([[1]], np.int32))
        results = await asyncio.gather(
            *(
                client.infer("sender_more_batch", [x], parameters={"how": "first_then_raise"})
                for _ in range(BATCH)
            ),
            return_exceptions=True,
        )
    finally:
        await client.close()
    errors = [r for r in results if isinstance(r, InferenceServerException)]
    assert len(errors) == BATCH - 1, results
    assert all("ValueError: after the first" in e.message() for e in errors)
