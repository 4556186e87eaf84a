"""Asynchronous instances (``ModelInstance.async_execution``, ``tritonx._core.execution``):
batches start on the event loop through ``execute_async`` and their answers come back as loop
callbacks, batched as the queue would batch them, one batch at a time per instance; whatever
the loop cannot start goes to the instance threads and ``execute``.

A ``later`` test backend answers ``execute_async`` after ``delay_ms`` on the loop (a stand-in
for a worker process) and records each execution as (model, instance, path, values);
``execute`` (the threads' path) records itself as ``thread``. The python backend's worker
instances take this path with real worker processes (``plugins/backend_python/tests``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pytest

import tritonx
from tritonx import InferenceRequest, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.errors import Code, TritonXError
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

NO_LISTENERS = {"allow_http": False, "allow_grpc": False, "allow_metrics": False}


class Later(tritonx.Backend):
    """Input VALUE [1] INT32 echoed as OUT after ``delay_ms``. Parameters: ``fail_value``
    (``execute_async`` raises for it), ``bad_value`` (its future fails), ``cancel_value`` (its
    future is cancelled), ``async``
    ("false": no ``async_execution``); the instances of the models in :attr:`unready` are not ready."""

    name = "later"
    log: ClassVar[list[tuple[str, str, str, list[int]]]] = []
    #: the most executions running at once on one instance, and overall
    most_per_instance: ClassVar[int] = 0
    most_overall: ClassVar[int] = 0
    running: ClassVar[int] = 0
    unready: ClassVar[set[str]] = set()
    lock = threading.Lock()

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return LaterInstance(ctx)


class LaterInstance(tritonx.ModelInstance):
    def __init__(self, ctx: tritonx.LoadContext) -> None:
        params = ctx.parameters
        self.model, self.name = ctx.model_name, ctx.instance.name
        self.delay_s = float(params.get("delay_ms", "0")) / 1000
        self.fail_value = int(params.get("fail_value", "-1"))
        self.bad_value = int(params.get("bad_value", "-1"))
        self.cancel_value = int(params.get("cancel_value", "-1"))
        self.async_execution = params.get("async", "true") == "true"
        self.running = 0

    def is_ready(self) -> bool:
        return self.model not in Later.unready

    def _enter(self, path: str, requests: Sequence[InferenceRequest]) -> list[int]:
        values = [int(v) for r in requests for v in r.inputs["VALUE"].reshape(-1)]
        with Later.lock:
            Later.log.append((self.model, self.name, path, values))
            self.running += 1
            Later.running += 1
            Later.most_per_instance = max(Later.most_per_instance, self.running)
            Later.most_overall = max(Later.most_overall, Later.running)
        return values

    def _leave(self) -> None:
        with Later.lock:
            self.running -= 1
            Later.running -= 1

    def execute(self, requests: Sequence[InferenceRequest]) -> list[tritonx.InferenceResponse]:
        while not self.is_ready():  # as a python worker instance waits for its restart
            time.sleep(0.01)
        self._enter("thread", requests)
        time.sleep(self.delay_s)
        self._leave()
        return tritonx.split_outputs(requests, {"OUT": tritonx.concat_inputs(requests)["VALUE"]})

    def execute_async(
        self, requests: Sequence[InferenceRequest]
    ) -> asyncio.Future[Sequence[tritonx.InferenceResponse] | None]:
        values = self._enter("loop", requests)
        if self.fail_value in values:
            self._leave()
            raise TritonXError("could not start the batch", Code.UNAVAILABLE)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Sequence[tritonx.InferenceResponse] | None] = loop.create_future()

        def answer() -> None:
            self._leave()
            if self.bad_value in values:
                future.set_exception(RuntimeError("the worker broke"))
                return
            if self.cancel_value in values:
                future.cancel()
                return
            outputs = tritonx.concat_inputs(requests)["VALUE"]
            future.set_result(tritonx.split_outputs(requests, {"OUT": outputs}))

        loop.call_later(self.delay_s, answer)
        return future


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(Later)


@pytest.fixture(autouse=True)
def clear_log() -> None:
    Later.log.clear()
    Later.most_per_instance = Later.most_overall = Later.running = 0
    Later.unready.clear()


def model(
    repo: ModelRepositoryBuilder, name: str, extra: str = "", count: int = 1, **params: str
) -> None:
    repo.add(
        name,
        backend="later",
        max_batch_size=8,
        inputs=[("VALUE", "INT32", [1])],
        outputs=[("OUT", "INT32", [1])],
        parameters=params,
        extra=f"instance_group [ {{ count: {count}, kind: KIND_CPU }} ]\n{extra}",
    )


def server(repo: ModelRepositoryBuilder, **overrides: Any) -> Server:
    pm = make_plugin_manager(autoload=False, extra=[Plugin()])
    return Server(loopback_settings(repo.root, **{**NO_LISTENERS, **overrides}), plugin_manager=pm)


def infer(srv: Server, name: str, value: int) -> Any:
    return srv.infer(InferenceRequest(name, {"VALUE": np.array([[value]], np.int32)}))


async def infer_all(srv: Server, name: str, values: range) -> list[int]:
    responses = await asyncio.gather(*(infer(srv, name, v) for v in values))
    return [int(r.outputs["OUT"][0, 0]) for r in responses]


def executions(name: str) -> list[tuple[str, list[int]]]:
    """(path, values) of each execution of ``name``, in order of starting."""
    return [(path, values) for m, _, path, values in Later.log if m == name]


async def test_waiting_requests_start_as_the_queue_would_batch_them_one_batch_at_a_time(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """20 requests at once on one instance answering after 20 ms: with dynamic batching
    the loop starts 8, then 8, then 4, each when the one before has answered; without it,
    one request per execution. Every execution starts on the loop, none overlaps."""
    model(model_repository, "batched", "dynamic_batching { }", delay_ms="20")
    model(model_repository, "direct", delay_ms="2")
    async with server(model_repository) as srv:
        assert await infer_all(srv, "batched", range(100, 120)) == list(range(100, 120))
        assert await infer_all(srv, "direct", range(10)) == list(range(10))
        batched = srv.model_statistics("batched")[0][2]
    assert executions("batched") == [
        ("loop", list(range(start, min(start + 8, 120)))) for start in (100, 108, 116)
    ]
    assert executions("direct") == [("loop", [v]) for v in range(10)]
    assert Later.most_per_instance == 1
    assert (batched.inference_count, batched.execution_count) == (20, 3)
    assert batched.compute_infer.ns >= 3 * 20_000_000  # from start to answer, per execution


async def test_each_idle_instance_takes_a_batch(model_repository: ModelRepositoryBuilder) -> None:
    """Two instances: two batches run at once, never two on one instance."""
    model(model_repository, "m", "dynamic_batching { }", count=2, delay_ms="30")
    async with server(model_repository) as srv:
        assert await infer_all(srv, "m", range(24)) == list(range(24))
    ran = executions("m")
    assert all(path == "loop" for path, _ in ran)
    assert sorted(v for _, values in ran for v in values) == list(range(24))
    assert Later.most_per_instance == 1
    assert Later.most_overall == 2


async def test_a_batch_that_cannot_start_or_breaks_fails_alone(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """``execute_async`` raising, its future failing or cancelled: that batch's requests fail
    (the error's code, INTERNAL, or Triton's bare CANCELLED), counted as failures, and the
    next requests are served."""
    model(model_repository, "m", fail_value="13", bad_value="14", cancel_value="15", delay_ms="1")
    async with server(model_repository) as srv:
        for value, code, text in (
            (13, Code.UNAVAILABLE, "could not start"),
            (14, Code.INTERNAL, "the worker broke"),
            (15, Code.CANCELLED, ""),
        ):
            with pytest.raises(TritonXError) as failed:
                await infer(srv, "m", value)
            assert failed.value.code is code and text in failed.value.message
            assert await infer_all(srv, "m", range(3)) == [0, 1, 2]
        stats = srv.model_statistics("m")[0][2]
    assert stats.fail.count == 3
    assert stats.success.count == 9


async def test_requests_the_loop_cannot_start_go_to_the_instance_thread(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """Requests wait behind a running batch; the instance turns not ready (as a python
    model's worker dying) before that batch answers: nothing can start them on the loop and
    nothing running will come back for them, so they go to the queue, and the instance's
    thread runs them once the instance is ready again. Then the loop takes over again."""
    model(model_repository, "m", delay_ms="100")
    async with server(model_repository) as srv:
        running = asyncio.ensure_future(infer(srv, "m", 1))
        await asyncio.sleep(0.02)  # started on the loop
        waiting = asyncio.gather(*(infer(srv, "m", v) for v in (2, 3)))
        await asyncio.sleep(0.02)
        Later.unready.add("m")
        assert int((await running).outputs["OUT"][0, 0]) == 1
        await asyncio.sleep(0.1)  # queued for the thread, which waits for the instance
        assert [path for path, _ in executions("m")] == ["loop"]
        Later.unready.clear()
        assert [int(r.outputs["OUT"][0, 0]) for r in await waiting] == [2, 3]
        await asyncio.sleep(0.05)  # the thread has let go of the instance
        assert await infer_all(srv, "m", range(4, 6)) == [4, 5]
    assert executions("m") == [
        ("loop", [1]),
        ("thread", [2]),
        ("thread", [3]),
        ("loop", [4]),
        ("loop", [5]),
    ]


@pytest.mark.parametrize(
    ("extra", "params", "overrides"),
    [
        ("", {"async": "false"}, {}),
        ("dynamic_batching { max_queue_delay_microseconds: 100 }", {}, {}),
        ("dynamic_batching { priority_levels: 2 default_priority_level: 1 }", {}, {}),
        ("", {}, {"rate_limit": "execution_count"}),
    ],
    ids=["not asynchronous", "queue delay", "priorities", "rate limiter"],
)
async def test_what_keeps_to_the_instance_threads(
    model_repository: ModelRepositoryBuilder,
    extra: str,
    params: dict[str, str],
    overrides: dict[str, Any],
) -> None:
    model(model_repository, "m", extra, **params)
    async with server(model_repository, **overrides) as srv:
        for value in range(4):
            assert int((await infer(srv, "m", value)).outputs["OUT"][0, 0]) == value
    assert [path for path, _ in executions("m")] == ["thread"] * 4


async def test_a_request_cancelled_while_waiting_is_not_executed(
    model_repository: ModelRepositoryBuilder,
) -> None:
    model(model_repository, "m", delay_ms="50")
    async with server(model_repository) as srv:
        requests = [InferenceRequest("m", {"VALUE": np.array([[v]], np.int32)}) for v in (1, 2)]
        running, waiting = (asyncio.ensure_future(srv.infer(r)) for r in requests)
        await asyncio.sleep(0.01)  # the first started, the second waits for the instance
        requests[1].cancel()
        assert int((await running).outputs["OUT"][0, 0]) == 1
        with pytest.raises(TritonXError) as failed:
            await waiting
        assert failed.value.code is Code.CANCELLED
    assert executions("m") == [("loop", [1])]


@pytest.mark.parametrize("exit_timeout", [5.0, 0.1], ids=["drained", "drain cut short"])
async def test_stopping_answers_every_request(
    model_repository: ModelRepositoryBuilder, exit_timeout: float
) -> None:
    """At shutdown the drain waits for the running batch and the waiting requests (started
    one after the other, as always); when the exit timeout cuts it short, every request gets
    Triton's "Server exiting": the waiting ones, and the running one, whose instance cannot
    be aborted (it is abandoned; its answer, should it come, is dropped)."""
    model(model_repository, "m", delay_ms="300")
    srv = server(model_repository, exit_timeout_secs=exit_timeout)
    await srv.start()
    try:
        running = asyncio.ensure_future(infer(srv, "m", 1))
        await asyncio.sleep(0.05)  # started on the instance
        waiting = [asyncio.ensure_future(infer(srv, "m", v)) for v in (2, 3)]
        await asyncio.sleep(0)
    finally:
        await srv.stop()
    if exit_timeout > 1:
        assert int((await asyncio.wait_for(running, 5)).outputs["OUT"][0, 0]) == 1
        assert [int((await w).outputs["OUT"][0, 0]) for w in waiting] == [2, 3]
        assert executions("m") == [("loop", [1]), ("loop", [2]), ("loop", [3])]
        return
    for future in [running, *waiting]:
        with pytest.raises(TritonXError) as failed:
            await future
        assert failed.value.code is Code.UNAVAILABLE and "exiting" in failed.value.message
    assert executions("m") == [("loop", [1])]
