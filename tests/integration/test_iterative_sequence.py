"""Iterative sequences and request rescheduling (Triton's ``sequence_batching {
iterative_sequence: true }`` with ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``).

One request is a whole sequence: it gets a correlation ID and the START flag from the
scheduler, and each execution may release it with ``REQUEST_RELEASE_RESCHEDULE`` so that it
runs again in a later batch (beside other sequences' iterations and new requests), with its
implicit state, until an execution releases it and answers it. Driven through the real
tritonclient over HTTP and gRPC, against an in-process server with a counting backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

import tritonx
from tritonx import REQUEST_RELEASE_RESCHEDULE, InferenceRequest, InferenceResponse, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

# ---------------------------------------------------------------------------- test backend


class Countdown(tritonx.Backend):
    """Counts a request's IN down by one per execution, rescheduling it until it reaches 0.

    Non-decoupled models keep the count in the implicit state (LEFT, DONE) and answer OUT =
    the executions the request took; decoupled ones keep it per correlation ID and send OUT =
    what is left after every execution, the last one final. ``log`` holds, per execution,
    (model, [(correlation ID, START, left) per row]), fillers of idle slots left out."""

    name = "countdown"
    log: ClassVar[list[tuple[str, list[tuple[int, int, int]]]]] = []
    lock = threading.Lock()

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return CountdownInstance(ctx.model_name, ctx.config.decoupled)


def _first(request: InferenceRequest, name: str, default: int) -> int:
    array = request.inputs.get(name)
    return default if array is None else int(array.reshape(-1)[0])


class CountdownInstance(tritonx.ModelInstance):
    def __init__(self, model: str, decoupled: bool) -> None:
        self.model, self.decoupled = model, decoupled
        self.left: dict[int, int] = {}

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse] | None:
        rows: list[tuple[int, int, int]] = []
        responses: list[InferenceResponse] = []
        for request in requests:
            start = _first(request, "START", 1)
            corrid = _first(request, "CORRID", 0)
            shape = request["IN"].shape
            if not corrid and "CORRID" in request.inputs:  # a filler of an idle slot
                responses.append(InferenceResponse())
                continue
            if self.decoupled:
                left = (_first(request, "IN", 0) if start else self.left[corrid]) - 1
                self.left[corrid] = left
                out = {"OUT": np.full(shape, left, np.int32)}
                request.get_response_sender().send(InferenceResponse(outputs=out), final=left <= 0)
            else:
                left = (_first(request, "IN", 0) if start else _first(request, "LEFT_IN", 0)) - 1
                done = (0 if start else _first(request, "DONE_IN", 0)) + 1
                outputs = {"OUT": np.full(shape, done, np.int32)}
                if "LEFT_IN" in request.inputs:
                    outputs["LEFT_OUT"] = np.full(shape, left, np.int32)
                    outputs["DONE_OUT"] = np.full(shape, done, np.int32)
                responses.append(InferenceResponse(outputs=outputs))
            if left > 0:
                request.release_flags = REQUEST_RELEASE_RESCHEDULE
            rows.append((corrid, start, left))
        with Countdown.lock:
            Countdown.log.append((self.model, rows))
        return None if self.decoupled else responses


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(Countdown)


@pytest.fixture(autouse=True)
def _reset_log() -> None:
    Countdown.log.clear()


def executions(model: str) -> list[list[tuple[int, int, int]]]:
    return [rows for name, rows in Countdown.log if name == model]


# ---------------------------------------------------------------------------- models

STATES = """
  state [
    { input_name: "LEFT_IN" output_name: "LEFT_OUT" data_type: TYPE_INT32 dims: [ 1 ] },
    { input_name: "DONE_IN" output_name: "DONE_OUT" data_type: TYPE_INT32 dims: [ 1 ] }
  ]
"""
CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
"""


def countdown(
    repo: ModelRepositoryBuilder,
    name: str,
    scheduling: str = "",
    *,
    decoupled: bool = False,
    iterative: bool = True,
) -> None:
    if not scheduling:
        sb = "iterative_sequence: true\n" if iterative else ""
        sb += CONTROLS + ("" if decoupled else STATES)
        scheduling = f"sequence_batching {{\n{sb}}}\n"
    if decoupled:
        scheduling += "model_transaction_policy { decoupled: true }\n"
    repo.add(
        name,
        backend="countdown",
        max_batch_size=4,
        inputs=[("IN", "INT32", [1])],
        outputs=[("OUT", "INT32", [1])],
        extra=scheduling,
    )


@contextlib.asynccontextmanager
async def serve(repo: ModelRepositoryBuilder) -> AsyncIterator[Server]:
    pm = make_plugin_manager(autoload=False, extra=[Plugin()])
    async with Server(loopback_settings(repo.root), plugin_manager=pm) as srv:
        yield srv


def _input(module: Any, value: int) -> list[Any]:
    tensor = module.InferInput("IN", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.full((1, 1), value, np.int32))
    return [tensor]


# ---------------------------------------------------------------------------- tests


async def test_a_rescheduled_request_runs_again_with_its_state_until_released(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Triton's test knob: the first batch waits until two requests are queued, so both
    # sequences start in one batch; A's later iterations then run alone
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "2")
    repo = ModelRepositoryBuilder(tmp_path / "models")
    countdown(repo, "count")
    async with serve(repo) as server:
        http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            a, b = await asyncio.gather(
                http.infer("count", _input(httpclient, 3), request_id="a"),
                grpc.infer("count", _input(grpcclient, 1), request_id="b"),
            )
            stats = await http.get_inference_statistics("count")
        finally:
            await http.close()
            await grpc.close()
    assert a.as_numpy("OUT").tolist() == [[3]] and a.get_response()["id"] == "a"
    assert b.as_numpy("OUT").tolist() == [[1]]
    first, second, third = executions("count")
    (ca, _, _), (cb, _, _) = sorted(first, key=lambda row: -row[2])
    assert ca and cb and ca != cb  # each got a correlation ID of its own
    assert sorted(first) == sorted([(ca, 1, 2), (cb, 1, 0)])
    assert second == [(ca, 0, 1)] and third == [(ca, 0, 0)]  # not START, state carried
    (model,) = stats["model_stats"]
    assert model["inference_stats"]["success"]["count"] == 2
    assert model["execution_count"] == 3


async def test_iterations_of_running_sequences_batch_with_new_requests(tmp_path: Any) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    countdown(repo, "count")
    async with serve(repo) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            counts = [4, 1, 3, 2, 5, 1]
            results = await asyncio.gather(
                *(client.infer("count", _input(grpcclient, n)) for n in counts)
            )
        finally:
            await client.close()
    assert [r.as_numpy("OUT").tolist() for r in results] == [[[n]] for n in counts]
    runs = executions("count")
    per_sequence: dict[int, list[tuple[int, int]]] = {}
    for rows in runs:
        assert len(rows) <= 4
        ids = [corrid for corrid, _, _ in rows]
        assert len(set(ids)) == len(ids), "one row per sequence in a batch"
        for corrid, start, left in rows:
            per_sequence.setdefault(corrid, []).append((start, left))
    assert sorted(len(rows) for rows in per_sequence.values()) == sorted(counts)
    for rows in per_sequence.values():
        n = len(rows)
        assert rows == [(1 if i == 0 else 0, n - 1 - i) for i in range(n)]


async def test_a_decoupled_iterative_model_answers_every_iteration(tmp_path: Any) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    countdown(repo, "stream", decoupled=True)
    async with serve(repo) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": "stream", "inputs": _input(grpcclient, 3), "request_id": "s"}

        got: list[tuple[int, bool]] = []
        try:
            async for result, error in client.stream_infer(requests()):
                assert error is None
                final = result.get_response().parameters["triton_final_response"].bool_param
                got.append((int(result.as_numpy("OUT")[0][0]), final))
        finally:
            await client.close()
    assert got == [(2, False), (1, False), (0, True)]
    corrids = {corrid for rows in executions("stream") for corrid, _, _ in rows}
    assert len(corrids) == 1 and [len(r) for r in executions("stream")] == [1, 1, 1]


async def test_the_oldest_strategy_reschedules_too(tmp_path: Any) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    countdown(
        repo,
        "oldest",
        "sequence_batching {\n iterative_sequence: true\n"
        " oldest { max_candidate_sequences: 4 }\n" + CONTROLS + STATES + "}\n",
    )
    async with serve(repo) as server:
        client = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        try:
            results = await asyncio.gather(
                *(client.infer("oldest", _input(httpclient, n)) for n in (2, 3, 1))
            )
        finally:
            await client.close()
    assert [r.as_numpy("OUT").tolist() for r in results] == [[[2]], [[3]], [[1]]]
    assert sum(len(rows) for rows in executions("oldest")) == 6


async def test_rescheduling_without_an_iterative_sequence_fails_with_tritons_error(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    countdown(repo, "plain", "dynamic_batching { }\n")
    countdown(repo, "stream", decoupled=True, scheduling="dynamic_batching { }\n")
    message = (
        "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is "
        "not configured to handle such a flag."
    )
    caplog.set_level(logging.ERROR, logger="tritonx")
    async with serve(repo) as server:
        http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            with pytest.raises(InferenceServerException) as err:
                await http.infer("plain", _input(httpclient, 2))
            assert err.value.message() == message and err.value.status() == "400"
            with pytest.raises(InferenceServerException) as err:
                await grpc.infer("plain", _input(grpcclient, 2))
            assert (
                err.value.message() == message
                and err.value.status() == "StatusCode.INVALID_ARGUMENT"
            )

            async def requests() -> AsyncIterator[dict[str, Any]]:
                yield {"model_name": "stream", "inputs": _input(grpcclient, 2)}

            got: list[Any] = []
            async for result, error in grpc.stream_infer(requests()):
                got.append((result, error))
            # the execution's own response, then the refusal as the final answer
            assert got[0][1] is None and int(got[0][0].as_numpy("OUT")[0][0]) == 1
            assert str(got[1][1]) == message
            # the model keeps serving: a request that is not rescheduled is answered
            ok = await http.infer("plain", _input(httpclient, 1))
            assert ok.as_numpy("OUT").tolist() == [[1]]
        finally:
            await http.close()
            await grpc.close()
    assert f"Failed to release request: {message}" in caplog.text
