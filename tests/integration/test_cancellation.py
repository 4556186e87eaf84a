"""Cancellation of abandoned requests (Triton's request cancellation): a request whose client
went away (HTTP disconnect, gRPC deadline or cancel, stream cancelled, in-process task
cancelled or ``request.cancel()``) is dropped before it executes, answered CANCELLED and
counted as a ``CANCELED`` failure in statistics and ``nv_inference_request_failure``.

The models are Triton ``model.py`` files with one instance: each execution appends the INPUT0
values it ran to ``executions.log`` in the model's folder, and an execution holding the value
0 waits until the test creates the file ``open`` there, so requests queue behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import numpy as np
import orjson
import pytest
import tritonclient.grpc as grpcclient_sync
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

import tritonx
from tritonx import InferenceRequest, InferenceResponse, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.errors import Code, TritonXError
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

pytest.importorskip("tritonx_backend_python")

SLOW_MODEL = """import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.folder = args["model_repository"]
        params = json.loads(args["model_config"]).get("parameters", {})
        self.delay = float(params.get("delay_ms", {}).get("string_value", "0")) / 1000

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        values = [int(x.reshape(-1)[0]) for x in inputs]
        with open(os.path.join(self.folder, "executions.log"), "a") as log:
            log.write(" ".join(str(v) for v in values) + "\\n")
        if 0 in values:
            gate = os.path.join(self.folder, "open")
            deadline = time.monotonic() + 30
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.005)
        time.sleep(self.delay)
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", x)])
            for x in inputs
        ]
"""


def slow_model(
    repo: ModelRepositoryBuilder,
    name: str,
    *,
    max_batch_size: int = 0,
    delay_ms: int = 0,
    extra: str = "",
    group: str = "",
) -> Path:
    """A python model with one instance (see the module docstring); ``group`` is added to
    its ``instance_group``."""
    return repo.add(
        name,
        backend="python",
        max_batch_size=max_batch_size,
        inputs=[("INPUT0", "INT32", [1])],
        outputs=[("OUTPUT0", "INT32", [1])],
        versions={1: {"model.py": SLOW_MODEL}},
        parameters={"delay_ms": str(delay_ms)},
        extra=f"instance_group [ {{ count: 1 kind: KIND_CPU {group} }} ]\n" + extra,
    )


def executions(repo: ModelRepositoryBuilder, name: str) -> list[list[int]]:
    """The INPUT0 values of each execution of ``name`` so far."""
    log = repo.root / name / "executions.log"
    if not log.exists():
        return []
    return [[int(v) for v in line.split()] for line in log.read_text().splitlines()]


def open_gate(repo: ModelRepositoryBuilder, name: str) -> None:
    (repo.root / name / "open").touch()


async def wait_until(predicate: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def wait_running(repo: ModelRepositoryBuilder, name: str, value: int) -> None:
    """Wait until an execution of ``name`` holding ``value`` started."""
    await wait_until(lambda: any(value in e for e in executions(repo, name)), f"{value} to run")


# ---------------------------------------------------------------- the server and its numbers


@contextlib.asynccontextmanager
async def serve(
    repo: ModelRepositoryBuilder, *extra: object, **settings: Any
) -> AsyncIterator[Server]:
    pm = make_plugin_manager(autoload=True, only=("backend_python",), extra=list(extra))
    async with Server(loopback_settings(repo.root, **settings), plugin_manager=pm) as srv:
        yield srv


async def metric(srv: Server, family: str, model: str, **labels: str) -> float:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{srv.metrics_url}/metrics") as resp:
            text = await resp.text()
    for fam in text_string_to_metric_families(text):
        if fam.name == family:
            for sample in fam.samples:
                wanted = {"model": model, **labels}
                if all(sample.labels.get(k) == v for k, v in wanted.items()):
                    return float(sample.value)
    raise AssertionError(f"no {family} sample for {model} {labels}")


async def failures(srv: Server, model: str, reason: str) -> float:
    return await metric(srv, "nv_inference_request_failure", model, reason=reason)


async def wait_pending(srv: Server, model: str, count: int) -> None:
    deadline = time.monotonic() + 20
    while (got := await metric(srv, "nv_inference_pending_request_count", model)) != count:
        assert time.monotonic() < deadline, f"{got} pending, expected {count}"
        await asyncio.sleep(0.01)


async def wait_cancelled(srv: Server, model: str, count: int) -> None:
    deadline = time.monotonic() + 20
    while (got := await failures(srv, model, "CANCELED")) != count:
        assert time.monotonic() < deadline, f"{got} cancelled, expected {count}"
        await asyncio.sleep(0.01)


async def http_stats(srv: Server, model: str) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(srv.http_url)
    try:
        stats = await client.get_inference_statistics(model)
    finally:
        await client.close()
    return dict(stats["model_stats"][0])


def inputs(module: Any, value: int, batching: bool = False) -> list[Any]:
    shape = [1, 1] if batching else [1]
    tensor = module.InferInput("INPUT0", shape, "INT32")
    tensor.set_data_from_numpy(np.full(shape, value, np.int32))
    return [tensor]


def inprocess(model: str, value: int, batching: bool = False) -> InferenceRequest:
    shape = (1, 1) if batching else (1,)
    return InferenceRequest(model, {"INPUT0": np.full(shape, value, np.int32)})


# ---------------------------------------------------------------- transports


async def test_http_clients_that_disconnect_while_queued_are_not_executed(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """tritonclient.http.aio clients whose timeout closes their connection while the request
    waits (3), and raw connections closed by the client (2): none of them executes; each is
    one CANCELED failure; the requests around them are served."""
    slow_model(model_repository, "slow")
    async with serve(model_repository) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        impatient = httpclient.InferenceServerClient(srv.http_url, conn_timeout=1.0)
        raw: list[asyncio.StreamWriter] = []
        try:
            blocker = asyncio.create_task(client.infer("slow", inputs(httpclient, 0)))
            await wait_running(model_repository, "slow", 0)
            abandoned = [
                asyncio.create_task(impatient.infer("slow", inputs(httpclient, v)))
                for v in (1, 2, 3)
            ]
            host, port = srv.http_url.rsplit(":", 1)
            for value in (4, 5):
                body = orjson.dumps(
                    {
                        "inputs": [
                            {"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [value]}
                        ]
                    }
                )
                _, writer = await asyncio.open_connection(host, int(port))
                writer.write(
                    b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
                raw.append(writer)
            await wait_pending(srv, "slow", 5)
            for writer in raw:
                writer.close()
            for task in abandoned:
                with pytest.raises((asyncio.TimeoutError, aiohttp.ClientError)):
                    await task
            await asyncio.sleep(0.2)  # the server sees the connections close
            open_gate(model_repository, "slow")
            assert (await blocker).as_numpy("OUTPUT0").tolist() == [0]
            after = await client.infer("slow", inputs(httpclient, 9))
            assert after.as_numpy("OUTPUT0").tolist() == [9]
            await wait_cancelled(srv, "slow", 5)
            stats = await http_stats(srv, "slow")
            other = await failures(srv, "slow", "OTHER") + await failures(srv, "slow", "BACKEND")
        finally:
            open_gate(model_repository, "slow")
            await client.close()
            await impatient.close()
    assert executions(model_repository, "slow") == [[0], [9]]
    inference = stats["inference_stats"]
    assert inference["fail"]["count"] == 5 and other == 0
    assert inference["success"]["count"] == 2
    assert stats["execution_count"] == 2 and stats["inference_count"] == 2


async def test_grpc_deadlines_and_cancelled_calls_cancel_the_queued_requests(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """``client_timeout`` (a gRPC deadline) passing while the request waits (DEADLINE_EXCEEDED
    for the client), or the client cancelling the RPC: the request never executes and counts
    as CANCELED."""
    slow_model(model_repository, "slow")
    async with serve(model_repository) as srv:
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            blocker = asyncio.create_task(client.infer("slow", inputs(grpcclient, 0)))
            await wait_running(model_repository, "slow", 0)
            abandoned = [
                asyncio.create_task(client.infer("slow", inputs(grpcclient, v), client_timeout=0.5))
                for v in (1, 2, 3)
            ]
            given_up = asyncio.create_task(client.infer("slow", inputs(grpcclient, 4)))
            await wait_pending(srv, "slow", 4)
            given_up.cancel()  # the RPC is cancelled by the client
            for task in abandoned:
                with pytest.raises(InferenceServerException) as err:
                    await task
                assert err.value.status() == "StatusCode.DEADLINE_EXCEEDED"
            await asyncio.sleep(0.2)
            open_gate(model_repository, "slow")
            assert (await blocker).as_numpy("OUTPUT0").tolist() == [0]
            after = await client.infer("slow", inputs(grpcclient, 9), client_timeout=10)
            assert after.as_numpy("OUTPUT0").tolist() == [9]
            await wait_cancelled(srv, "slow", 4)
            stats = await client.get_inference_statistics("slow", as_json=True)
        finally:
            open_gate(model_repository, "slow")
            await client.close()
    assert executions(model_repository, "slow") == [[0], [9]]
    inference = stats["model_stats"][0]["inference_stats"]
    assert inference["fail"]["count"] == "4" and inference["success"]["count"] == "2"


async def test_grpc_stream_cancelled_cancels_its_pending_requests(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """``stop_stream(cancel_requests=True)`` (tritonclient.grpc): every request of the stream
    still waiting is cancelled; a request of another client is not."""
    slow_model(model_repository, "slow")
    async with serve(model_repository) as srv:
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        streaming = grpcclient_sync.InferenceServerClient(srv.grpc_url)
        results: list[Any] = []
        try:
            blocker = asyncio.create_task(client.infer("slow", inputs(grpcclient, 0)))
            await wait_running(model_repository, "slow", 0)

            def start() -> None:
                streaming.start_stream(lambda result, error: results.append((result, error)))
                for value in (1, 2, 3):
                    streaming.async_stream_infer("slow", inputs(grpcclient_sync, value))

            await asyncio.to_thread(start)
            other = asyncio.create_task(client.infer("slow", inputs(grpcclient, 7)))
            await wait_pending(srv, "slow", 4)
            await asyncio.to_thread(streaming.stop_stream, cancel_requests=True)
            await asyncio.sleep(0.2)
            open_gate(model_repository, "slow")
            assert (await blocker).as_numpy("OUTPUT0").tolist() == [0]
            assert (await other).as_numpy("OUTPUT0").tolist() == [7]
            await wait_cancelled(srv, "slow", 3)
        finally:
            open_gate(model_repository, "slow")
            await client.close()
            streaming.close()
    assert executions(model_repository, "slow") == [[0], [7]]
    assert all(result is None for result, _ in results)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_abandoned_backlog_does_not_delay_a_fresh_request(
    model_repository: ModelRepositoryBuilder, protocol: str
) -> None:
    """The issue's case: 50 requests to a 50 ms model whose clients give up after 0.3 s leave
    no 2.5 s backlog: a fresh request is answered in about one execution."""
    slow_model(model_repository, "slow", delay_ms=50)
    async with serve(model_repository) as srv:
        if protocol == "http":
            impatient: Any = httpclient.InferenceServerClient(srv.http_url, conn_timeout=0.3)
            calls = [impatient.infer("slow", inputs(httpclient, v)) for v in range(1, 51)]
        else:
            impatient = grpcclient.InferenceServerClient(srv.grpc_url)
            calls = [
                impatient.infer("slow", inputs(grpcclient, v), client_timeout=0.3)
                for v in range(1, 51)
            ]
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
            gave_up = sum(isinstance(o, BaseException) for o in outcomes)
            await asyncio.sleep(0.1)
            start = time.monotonic()
            result = await client.infer("slow", inputs(grpcclient, 99))
            elapsed = time.monotonic() - start
            ran = [v for e in executions(model_repository, "slow") for v in e if v != 99]
            await wait_cancelled(srv, "slow", 50 - len(ran))
        finally:
            await impatient.close()
            await client.close()
    assert result.as_numpy("OUTPUT0").tolist() == [99]
    assert gave_up >= 40
    assert len(ran) <= 12, f"{len(ran)} abandoned requests executed"
    assert elapsed < 1.0, f"a fresh request waited {elapsed:.2f} s behind abandoned ones"


async def test_dynamic_batcher_leaves_cancelled_requests_out_of_batches(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """With dynamic batching, the batch formed after the cancelled requests' deadlines holds
    only the requests still wanted."""
    slow_model(model_repository, "batched", max_batch_size=8, extra="dynamic_batching { }\n")
    async with serve(model_repository) as srv:
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            blocker = asyncio.create_task(client.infer("batched", inputs(grpcclient, 0, True)))
            await wait_running(model_repository, "batched", 0)
            wanted = []
            abandoned = []
            for value in range(1, 7):
                if value % 2:
                    call = client.infer(
                        "batched", inputs(grpcclient, value, True), client_timeout=0.5
                    )
                    abandoned.append(asyncio.create_task(call))
                else:
                    call = client.infer("batched", inputs(grpcclient, value, True))
                    wanted.append(asyncio.create_task(call))
            await wait_pending(srv, "batched", 6)
            for task in abandoned:
                with pytest.raises(InferenceServerException):
                    await task
            await asyncio.sleep(0.2)
            open_gate(model_repository, "batched")
            await blocker
            got = [(await t).as_numpy("OUTPUT0").tolist() for t in wanted]
            await wait_cancelled(srv, "batched", 3)
            stats = await http_stats(srv, "batched")
        finally:
            open_gate(model_repository, "batched")
            await client.close()
    assert got == [[[2]], [[4]], [[6]]]
    assert executions(model_repository, "batched") == [[0], [2, 4, 6]]
    assert sorted(b["batch_size"] for b in stats["batch_stats"]) == [1, 3]
    assert stats["inference_stats"]["fail"]["count"] == 3


async def test_a_request_cancelled_while_waiting_for_the_rate_limiter_is_not_executed(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """``--rate-limit=execution_count``, two models sharing one resource: a request taken by
    its instance while the other model holds the resource, cancelled before the resource
    frees, gives the resource back unused and never executes."""
    shared = 'rate_limiter { resources [ { name: "R" global: true count: 1 } ] }'
    slow_model(model_repository, "holder", group=shared)
    slow_model(model_repository, "waiter", group=shared)
    async with serve(model_repository, rate_limit="execution_count") as srv:
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            blocker = asyncio.create_task(client.infer("holder", inputs(grpcclient, 0)))
            await wait_running(model_repository, "holder", 0)
            with pytest.raises(InferenceServerException):  # taken, waits for R, gives up
                await client.infer("waiter", inputs(grpcclient, 1), client_timeout=0.5)
            assert await metric(srv, "nv_inference_pending_request_count", "waiter") == 0
            await asyncio.sleep(0.2)
            open_gate(model_repository, "holder")
            await blocker
            await wait_cancelled(srv, "waiter", 1)
            after = await client.infer("waiter", inputs(grpcclient, 2))
        finally:
            open_gate(model_repository, "holder")
            await client.close()
    assert after.as_numpy("OUTPUT0").tolist() == [2]
    assert executions(model_repository, "waiter") == [[2]]


async def test_inprocess_cancellation(model_repository: ModelRepositoryBuilder) -> None:
    """In process: a caller whose task is cancelled (``wait_for`` timing out) cancels its
    request; ``request.cancel()`` on a queued request answers it CANCELLED; callers that never
    cancel are served as before."""
    slow_model(model_repository, "slow")
    async with serve(model_repository) as srv:
        try:
            blocker = asyncio.create_task(srv.infer(inprocess("slow", 0)))
            await wait_running(model_repository, "slow", 0)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(srv.infer(inprocess("slow", 1)), 0.2)
            request = inprocess("slow", 2)
            queued = asyncio.create_task(srv.infer(request))
            kept = asyncio.create_task(srv.infer(inprocess("slow", 3)))
            await wait_pending(srv, "slow", 3)
            request.cancel()
            assert request.is_cancelled()
            open_gate(model_repository, "slow")
            with pytest.raises(TritonXError) as err:
                await queued
            assert err.value.code is Code.CANCELLED
            assert (await blocker).outputs["OUTPUT0"].tolist() == [0]
            assert (await kept).outputs["OUTPUT0"].tolist() == [3]
            await wait_cancelled(srv, "slow", 2)
        finally:
            open_gate(model_repository, "slow")
    assert executions(model_repository, "slow") == [[0], [3]]


async def test_normal_traffic_is_unaffected(model_repository: ModelRepositoryBuilder) -> None:
    """Concurrent requests over HTTP, gRPC and the stream that nobody cancels all run."""
    slow_model(model_repository, "batched", max_batch_size=8, extra="dynamic_batching { }\n")
    async with serve(model_repository) as srv:
        http = httpclient.InferenceServerClient(srv.http_url)
        grpc = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            calls = [http.infer("batched", inputs(httpclient, v, True)) for v in range(1, 21)]
            calls += [grpc.infer("batched", inputs(grpcclient, v, True)) for v in range(21, 41)]
            results = await asyncio.gather(*calls)

            async def stream_requests() -> AsyncIterator[dict[str, Any]]:
                for v in range(41, 51):
                    yield {"model_name": "batched", "inputs": inputs(grpcclient, v, True)}

            streamed = [
                r.as_numpy("OUTPUT0").tolist()
                async for r, e in grpc.stream_infer(stream_requests())
                if e is None
            ]
            stats = await http_stats(srv, "batched")
            cancelled = await failures(srv, "batched", "CANCELED")
        finally:
            await http.close()
            await grpc.close()
    assert [r.as_numpy("OUTPUT0").tolist() for r in results] == [[[v]] for v in range(1, 41)]
    assert streamed == [[[v]] for v in range(41, 51)]
    assert sorted(v for e in executions(model_repository, "batched") for v in e) == list(
        range(1, 51)
    )
    assert stats["inference_stats"]["success"]["count"] == 50
    assert stats["inference_stats"]["fail"]["count"] == 0 and cancelled == 0


# ---------------------------------------------------------------- sequences and ensembles


async def test_a_cancelled_sequence_request_cancels_its_sequence(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """Triton: cancelling a queued request of a sequence cancels every request of that
    sequence still queued (each CANCELED; clients still waiting get HTTP 400 and gRPC
    CANCELLED); the sequence then needs a new START."""
    slow_model(
        model_repository,
        "seq",
        max_batch_size=1,
        extra="sequence_batching { max_sequence_idle_microseconds: 30000000 }\n",
    )
    async with serve(model_repository) as srv:

        def step(value: int, start: bool = False) -> InferenceRequest:
            request = inprocess("seq", value, batching=True)
            request.correlation_id = 7
            request.flags = tritonx.SEQUENCE_START if start else 0
            return request

        http = httpclient.InferenceServerClient(srv.http_url)
        grpc = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            first = asyncio.create_task(srv.infer(step(0, start=True)))
            await wait_running(model_repository, "seq", 0)
            cancelled = step(1)
            queued = asyncio.create_task(srv.infer(cancelled))
            await wait_pending(srv, "seq", 1)
            over_http = asyncio.create_task(
                http.infer("seq", inputs(httpclient, 2, True), sequence_id=7)
            )
            await wait_pending(srv, "seq", 2)
            over_grpc = asyncio.create_task(
                grpc.infer("seq", inputs(grpcclient, 3, True), sequence_id=7)
            )
            await wait_pending(srv, "seq", 3)
            cancelled.cancel()
            open_gate(model_repository, "seq")
            await first
            with pytest.raises(TritonXError) as err:
                await queued
            assert err.value.code is Code.CANCELLED
            with pytest.raises(InferenceServerException) as http_err:
                await over_http
            with pytest.raises(InferenceServerException) as grpc_err:
                await over_grpc
            await wait_cancelled(srv, "seq", 3)
            with pytest.raises(TritonXError) as err:
                await srv.infer(step(4))
        finally:
            open_gate(model_repository, "seq")
            await http.close()
            await grpc.close()
    assert http_err.value.status() == "400"
    assert grpc_err.value.status() == "StatusCode.CANCELLED"
    assert "must specify the START flag" in err.value.message
    assert executions(model_repository, "seq") == [[0]]


ENSEMBLE = """name: "pipeline"
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "first" model_version: -1
    input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "mid" } },
  { model_name: "second" model_version: -1
    input_map { key: "INPUT0" value: "mid" } output_map { key: "OUTPUT0" value: "OUTPUT0" } }
] }
"""


def pipeline(repo: ModelRepositoryBuilder) -> None:
    slow_model(repo, "first")
    slow_model(repo, "second")
    repo.add("pipeline", config=ENSEMBLE)


async def test_a_cancelled_ensemble_request_cancels_its_pending_steps(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """An ensemble request whose gRPC deadline passes while its step waits in a composing
    model's queue: the step is dropped there (CANCELED in that model) and never runs."""
    pipeline(model_repository)
    async with serve(model_repository) as srv:
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            blocker = asyncio.create_task(client.infer("first", inputs(grpcclient, 0)))
            await wait_running(model_repository, "first", 0)
            with pytest.raises(InferenceServerException) as err:
                await client.infer("pipeline", inputs(grpcclient, 5), client_timeout=0.5)
            assert err.value.status() == "StatusCode.DEADLINE_EXCEEDED"
            await asyncio.sleep(0.2)
            open_gate(model_repository, "first")
            await blocker
            await wait_cancelled(srv, "first", 1)
            ensemble_failures = await failures(srv, "pipeline", "OTHER")
        finally:
            open_gate(model_repository, "first")
            await client.close()
    assert executions(model_repository, "first") == [[0]]
    assert executions(model_repository, "second") == []
    assert ensemble_failures == 1  # Triton counts an ensemble's failures as OTHER


async def test_ensemble_cancellation_is_checked_between_steps(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """``request.cancel()`` on an ensemble request while its first step runs: the next step is
    sent cancelled and dropped by its model, and the ensemble answers CANCELLED."""
    pipeline(model_repository)
    async with serve(model_repository) as srv:
        try:
            request = inprocess("pipeline", 0)
            call = asyncio.create_task(srv.infer(request))
            await wait_running(model_repository, "first", 0)
            request.cancel()
            open_gate(model_repository, "first")
            with pytest.raises(TritonXError) as err:
                await call
            second_cancelled = await failures(srv, "second", "CANCELED")
        finally:
            open_gate(model_repository, "first")
    assert err.value.code is Code.CANCELLED
    assert executions(model_repository, "first") == [[0]]
    assert executions(model_repository, "second") == []
    assert second_cancelled == 1


# ---------------------------------------------------------------- decoupled models


class Ticker(tritonx.Backend):
    """A decoupled test model: sends a response every 10 ms until its request is cancelled
    (or 200 were sent), then the final flag; records what it saw in :attr:`seen`."""

    name = "ticker"
    seen: ClassVar[list[tuple[int, bool, str]]] = []
    done = threading.Event()

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return TickerInstance()


class TickerInstance(tritonx.ModelInstance):
    def execute(self, requests: Sequence[InferenceRequest]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            sent, error = 0, ""
            try:
                while not request.is_cancelled() and sent < 200:
                    value = np.full((1,), sent, np.int32)
                    sender.send(InferenceResponse(outputs={"OUTPUT0": value}))
                    sent += 1
                    time.sleep(0.01)
                sender.send(final=True)
            except Exception as exc:  # any error here is what the test looks for
                error = repr(exc)
            Ticker.seen.append((sent, request.is_cancelled(), error))
        Ticker.done.set()


class TickerPlugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(Ticker)


def ticker(repo: ModelRepositoryBuilder) -> None:
    repo.add(
        "ticker",
        backend="ticker",
        inputs=[("INPUT0", "INT32", [1])],
        outputs=[("OUTPUT0", "INT32", [1])],
        extra="model_transaction_policy { decoupled: true }\n"
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n",
    )


@pytest.mark.parametrize("how", ["grpc", "inprocess"])
async def test_a_decoupled_model_sees_its_stream_go_away(
    model_repository: ModelRepositoryBuilder, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The client reads 3 responses and leaves (gRPC call cancelled, or the in-process
    iterator closed): ``is_cancelled()`` turns true for the model, its further responses
    and its final flag are dropped quietly."""
    Ticker.seen.clear()
    Ticker.done.clear()
    ticker(model_repository)
    caplog.set_level(logging.WARNING)
    async with serve(model_repository, TickerPlugin()) as srv:
        got: list[int] = []
        if how == "grpc":
            client = grpcclient.InferenceServerClient(srv.grpc_url)

            async def requests() -> AsyncIterator[dict[str, Any]]:
                yield {"model_name": "ticker", "inputs": inputs(grpcclient, 1)}
                await asyncio.sleep(30)  # keep the stream open

            try:
                stream = client.stream_infer(requests())
                async for result, error in stream:
                    assert error is None
                    got.append(int(result.as_numpy("OUTPUT0")[0]))
                    if len(got) == 3:
                        stream.cancel()
                        break
            finally:
                await client.close()
        else:
            responses = srv.infer_stream(inprocess("ticker", 1))
            async for response in responses:
                got.append(int(response.outputs["OUTPUT0"][0]))
                if len(got) == 3:
                    break
            await responses.aclose()  # type: ignore[attr-defined]
        assert await asyncio.to_thread(Ticker.done.wait, 10)
        (sent, cancelled, error), *_ = Ticker.seen
        stats = await http_stats(srv, "ticker")
    assert got == [0, 1, 2]
    assert cancelled and error == ""
    assert sent < 150, "the model never saw the cancellation"
    assert stats["inference_stats"]["success"]["count"] == 0
    assert stats["inference_stats"]["fail"]["count"] == 1
    assert not [r for r in caplog.records if r.name.startswith("tritonx")]
