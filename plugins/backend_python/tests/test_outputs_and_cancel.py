"""What a python model returns (passed through as Triton does) (in-process API and HTTP), and
``request.is_cancelled()`` / ``response_sender.is_cancelled()`` seeing ``cancel()`` on the
request, in both execution modes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http.aio as httpclient

from tritonx import InferenceRequest, Server, TritonXError
from tritonx.errors import Code
from tritonx.testing import loopback_settings

BOTH_MODES = pytest.mark.parametrize("mode", ["process", "in_process"])

OUTPUTS_IO = {
    "max_batch_size": 4,
    "inputs": [("COMMAND", "BYTES", [1])],
    "outputs": [("OUT", "FP32", [-1, 2]), ("AUX", "INT32", [1])],
}


@pytest.fixture
def state(tmp_path: Path) -> Path:
    folder = tmp_path / "state"
    folder.mkdir()
    return folder


@pytest.fixture
def server_settings(model_repository, add_model, state):
    """``outputs`` (plain and decoupled), ``life`` and ``stream``; HTTP on."""
    add_model("outputs", "outputs", **OUTPUTS_IO)
    add_model(
        "outputs_stream",
        "outputs",
        extra="model_transaction_policy { decoupled: true }\n",
        **OUTPUTS_IO,
    )
    add_model(
        "life",
        "lifecycle",
        parameters={"STATE_DIR": str(state)},
        inputs=[("COMMAND", "BYTES", [1])],
        outputs=[("PID", "INT64", [1]), ("SAW_CANCEL", "BOOL", [1])],
    )
    add_model(
        "stream",
        "stream",
        parameters={"STATE_DIR": str(state)},
        inputs=[("COUNT", "INT32", [1])],
        outputs=[("PID", "INT64", [1]), ("INDEX", "INT32", [1]), ("SAW_CANCEL", "BOOL", [1])],
        extra="model_transaction_policy { decoupled: true }\n",
    )
    return loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("*",),
        allow_grpc=False,
        allow_metrics=False,
    )


def command(value: str, batch: int = 1) -> dict[str, np.ndarray]:
    """COMMAND for ``outputs`` (batching: ``batch`` items)."""
    return {"COMMAND": np.array([[value.encode()]] * batch, dtype=object)}


def life_command(value: str) -> dict[str, np.ndarray]:
    """COMMAND for ``life`` (no batching)."""
    return {"COMMAND": np.array([value.encode()], dtype=object)}


# ---------------------------------------------------------------------- outputs


async def outcome(server: Server, model: str, request: InferenceRequest):
    """The response (or error) of a plain or decoupled model."""
    try:
        if model == "outputs":
            return await server.infer(request)
        responses = [r async for r in server.infer_stream(request) if not r.empty]
        assert len(responses) == 1
        return responses[0].raise_for_error()
    except TritonXError as exc:
        return exc


@BOTH_MODES
@pytest.mark.parametrize("model", ["outputs", "outputs_stream"])
@pytest.mark.parametrize(
    ("what", "dtype", "shape"),
    [
        ("dtype", np.float64, (2, 3, 2)),
        ("shape", np.float32, (2, 3, 5)),
        ("no_batch", np.float32, (3, 2)),
    ],
)
async def test_outputs_pass_as_returned(
    server: Server, model: str, what: str, dtype: type, shape: tuple[int, ...]
) -> None:
    """As in Triton: neither the datatype nor the shape of an output is checked against the
    config (config OUT FP32 [-1,2] with batching)."""
    result = await outcome(server, model, InferenceRequest(model, command(what, batch=2)))
    assert not isinstance(result, TritonXError), result
    assert result.outputs["OUT"].dtype == dtype
    assert result.outputs["OUT"].shape == shape
    np.testing.assert_array_equal(result.outputs["AUX"], [[7], [7]])


@BOTH_MODES
@pytest.mark.parametrize("model", ["outputs", "outputs_stream"])
async def test_undeclared_outputs_dropped_missing_ones_absent(server: Server, model: str) -> None:
    """As in Triton: an output the config does not declare is dropped (the stub prunes it);
    a requested output the model did not return is simply absent."""
    extra = await outcome(server, model, InferenceRequest(model, command("extra")))
    assert not isinstance(extra, TritonXError), extra
    assert sorted(extra.outputs) == ["AUX", "OUT"]
    missing = await outcome(
        server, model, InferenceRequest(model, command("missing"), requested_outputs=("AUX", "OUT"))
    )
    assert not isinstance(missing, TritonXError), missing
    assert list(missing.outputs) == ["OUT"]
    # an output the client did not request is not returned
    only_aux = await outcome(
        server, model, InferenceRequest(model, command("dtype"), requested_outputs=("AUX",))
    )
    assert not isinstance(only_aux, TritonXError), only_aux
    assert list(only_aux.outputs) == ["AUX"]


async def test_output_of_another_datatype_over_http(http_client) -> None:
    tensor = httpclient.InferInput("COMMAND", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[b"dtype"]], dtype=object))
    result = await http_client.infer("outputs", [tensor])
    assert result.get_output("OUT")["datatype"] == "FP64"
    assert result.as_numpy("OUT").shape == (1, 3, 2)


# ---------------------------------------------------------------------- cancellation


async def until(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"still not true after {timeout} s")
        await asyncio.sleep(0.01)


@BOTH_MODES
async def test_model_sees_request_cancelled(server: Server, state: Path) -> None:
    # never cancelled: is_cancelled() stays False while the model polls it
    response = await server.infer(InferenceRequest("life", life_command("wait_cancel:0.3")))
    assert response.outputs["SAW_CANCEL"].tolist() == [False]
    assert not (state / "saw_cancel").exists()
    (state / "waiting").unlink()
    request = InferenceRequest("life", life_command("wait_cancel:20"))
    call = asyncio.create_task(server.infer(request))
    await until((state / "waiting").exists)  # execute is polling is_cancelled() now
    started = time.monotonic()
    request.cancel()
    await until((state / "saw_cancel").exists)
    assert time.monotonic() - started < 5.0
    try:
        response = await asyncio.wait_for(call, 10)
    except TritonXError as exc:  # a core that drops cancelled requests' answers
        assert exc.code is Code.CANCELLED
    else:
        assert response.outputs["SAW_CANCEL"].tolist() == [True]


@BOTH_MODES
async def test_decoupled_model_sees_request_cancelled(server: Server, state: Path) -> None:
    request = InferenceRequest("stream", {"COUNT": np.array([100_000], np.int32)})
    responses = server.infer_stream(request)
    first = await anext(responses)
    assert int(first.outputs["INDEX"][0]) == 0
    request.cancel()
    await until((state / "stream_saw_cancel").exists)
    try:
        rest = [r async for r in responses]
    except TritonXError as exc:  # a core that drops cancelled requests' answers
        assert exc.code is Code.CANCELLED
    else:
        last = [r for r in rest if not r.empty][-1]
        assert last.outputs["SAW_CANCEL"].tolist() == [True]
        assert len(rest) < 1000
