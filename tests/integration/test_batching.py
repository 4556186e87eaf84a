"""Dynamic batching, queue policies, priorities, ordering and the rate limiter, made
deterministic with a recording test backend (no timing assertions on speed)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import tritonx
from tritonx import InferenceRequest, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.errors import Code, TritonXError
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

NO_LISTENERS = {"allow_http": False, "allow_grpc": False, "allow_metrics": False}


class Recorder(tritonx.Backend):
    """Input VALUE [1] INT32; the instance sleeps VALUE ms (or ``delay_ms``), records each
    execution as (model, [values]) in order, and tracks concurrency across all models."""

    name = "recorder"
    log: ClassVar[list[tuple[str, list[int]]]] = []
    active = 0
    max_active = 0
    lock = threading.Lock()

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return RecorderInstance(ctx.model_name, float(ctx.parameters.get("delay_ms", "-1")))


class RecorderInstance(tritonx.ModelInstance):
    def __init__(self, model: str, delay_ms: float) -> None:
        self.model, self.delay_ms = model, delay_ms

    def execute(self, requests: Sequence[InferenceRequest]) -> list[tritonx.InferenceResponse]:
        values = [int(v) for r in requests for v in r.inputs["VALUE"].reshape(-1)]
        cls = Recorder
        with cls.lock:
            cls.log.append((self.model, values))
            cls.active += 1
            cls.max_active = max(cls.max_active, cls.active)
        delay = self.delay_ms if self.delay_ms >= 0 else max(values)
        time.sleep(delay / 1000)
        with cls.lock:
            cls.active -= 1
        return tritonx.split_outputs(requests, {"OUT": tritonx.concat_inputs(requests)["VALUE"]})


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(Recorder)


@pytest.fixture(autouse=True)
def clear_log() -> None:
    Recorder.log.clear()
    Recorder.active = Recorder.max_active = 0


def model(
    repo: ModelRepositoryBuilder, name: str, extra: str = "", max_batch_size: int = 8, **params: str
) -> Path:
    return repo.add(
        name,
        backend="recorder",
        max_batch_size=max_batch_size,
        inputs=[("VALUE", "INT32", [1])],
        outputs=[("OUT", "INT32", [1])],
        parameters=params,
        extra=extra,
    )


def server(repo: ModelRepositoryBuilder, **overrides: Any) -> Server:
    pm = make_plugin_manager(autoload=False, extra=[Plugin()])
    return Server(loopback_settings(repo.root, **{**NO_LISTENERS, **overrides}), plugin_manager=pm)


def infer(srv: Server, name: str, value: int, **kw: Any) -> Any:
    return srv.infer(InferenceRequest(name, {"VALUE": np.array([[value]], np.int32)}, **kw))


def batches(name: str) -> list[list[int]]:
    return [values for model_name, values in Recorder.log if model_name == name]


async def gather(*aws: Any) -> list[Any]:
    return await asyncio.gather(*aws, return_exceptions=True)


async def test_without_dynamic_batching_each_request_runs_alone(
    model_repository: ModelRepositoryBuilder,
) -> None:
    model(model_repository, "plain", delay_ms="20")
    async with server(model_repository) as srv:
        await gather(*(infer(srv, "plain", i) for i in range(4)))
    assert sorted(len(b) for b in batches("plain")) == [1, 1, 1, 1]


async def test_delay_bounded_batch_formation(model_repository: ModelRepositoryBuilder) -> None:
    model(
        model_repository,
        "delayed",
        "dynamic_batching { max_queue_delay_microseconds: 300000 }",
        delay_ms="0",
    )
    async with server(model_repository) as srv:
        results = await gather(*(infer(srv, "delayed", i) for i in range(3)))
    assert [int(r.outputs["OUT"][0, 0]) for r in results] == [0, 1, 2]
    # nothing reached the preferred size (8), so the three waited for the delay and ran together
    assert batches("delayed") == [[0, 1, 2]]


async def test_preferred_sizes(model_repository: ModelRepositoryBuilder) -> None:
    model(
        model_repository,
        "pref",
        "dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 200000 }",
        delay_ms="0",
    )
    async with server(model_repository) as srv:
        await gather(*(infer(srv, "pref", i) for i in range(5)))
    # two preferred batches at once, the fifth request after the delay
    assert batches("pref") == [[0, 1], [2, 3], [4]]


async def test_max_batch_size_caps_batches(
    model_repository: ModelRepositoryBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "10")
    model(model_repository, "cap", "dynamic_batching { }", max_batch_size=4, delay_ms="0")
    async with server(model_repository) as srv:
        await gather(*(infer(srv, "cap", i) for i in range(10)))
    assert [len(b) for b in batches("cap")] == [4, 4, 2]
    assert [v for b in batches("cap") for v in b] == list(range(10))


async def test_requests_with_different_shapes_do_not_batch(
    model_repository: ModelRepositoryBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    model_repository.add(
        "shapes",
        backend="recorder",
        max_batch_size=8,
        inputs=[("VALUE", "INT32", [-1])],
        outputs=[("OUT", "INT32", [-1])],
        parameters={"delay_ms": "0"},
        extra="dynamic_batching { }",
    )
    async with server(model_repository) as srv:
        await gather(
            srv.infer(InferenceRequest("shapes", {"VALUE": np.array([[1]], np.int32)})),
            srv.infer(InferenceRequest("shapes", {"VALUE": np.array([[2]], np.int32)})),
            srv.infer(InferenceRequest("shapes", {"VALUE": np.array([[3, 3]], np.int32)})),
        )
    assert batches("shapes") == [[1, 2], [3, 3]]


async def test_request_larger_than_max_batch_is_rejected_not_hung(
    model_repository: ModelRepositoryBuilder,
) -> None:
    model(model_repository, "small", "dynamic_batching { }", max_batch_size=2, delay_ms="0")
    async with server(model_repository) as srv:
        with pytest.raises(TritonXError, match="batch-size must be <= 2"):
            await srv.infer(InferenceRequest("small", {"VALUE": np.zeros((3, 1), np.int32)}))


async def test_priorities(
    model_repository: ModelRepositoryBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "4")
    model(
        model_repository,
        "prio",
        "dynamic_batching { priority_levels: 2 default_priority_level: 2 }",
        max_batch_size=1,
        delay_ms="0",
    )
    async with server(model_repository) as srv:
        await gather(
            infer(srv, "prio", 20),  # default level 2
            infer(srv, "prio", 21, priority=2),
            infer(srv, "prio", 10, priority=1),
            infer(srv, "prio", 22, priority=9),  # out of range: default level
        )
    assert batches("prio") == [[10], [20], [21], [22]]


async def test_queue_policy_reject_and_timeout_override(
    model_repository: ModelRepositoryBuilder,
) -> None:
    model(
        model_repository,
        "rej",
        "dynamic_batching { default_queue_policy { timeout_action: REJECT "
        "default_timeout_microseconds: 10000000 allow_timeout_override: true } }",
        max_batch_size=1,
    )
    async with server(model_repository) as srv:
        busy = asyncio.ensure_future(infer(srv, "rej", 300))
        await asyncio.sleep(0.05)
        late = infer(srv, "rej", 1, timeout_us=20_000)  # shorter than the default: honoured
        fine = infer(srv, "rej", 2)
        results = await gather(busy, late, fine)
        assert isinstance(results[1], TritonXError)
        assert (
            results[1].code is Code.UNAVAILABLE and results[1].message == "Request timeout expired"
        )
        assert int(results[2].outputs["OUT"][0, 0]) == 2
        stats = srv.model_statistics("rej")[0][2]
        assert stats.fail_reasons["REJECTED"] == 1 and stats.fail.count == 1
    assert batches("rej") == [[300], [2]]


async def test_queue_policy_delay(model_repository: ModelRepositoryBuilder) -> None:
    model(
        model_repository,
        "dly",
        "dynamic_batching { default_queue_policy { timeout_action: DELAY "
        "default_timeout_microseconds: 10000000 allow_timeout_override: true } }",
        max_batch_size=1,
    )
    async with server(model_repository) as srv:
        busy = asyncio.ensure_future(infer(srv, "dly", 300))
        await asyncio.sleep(0.05)
        expired = infer(srv, "dly", 1, timeout_us=20_000)
        on_time = infer(srv, "dly", 2)
        results = await gather(busy, expired, on_time)
    assert all(not isinstance(r, Exception) for r in results)
    # the expired request is delayed behind the one still within its timeout
    assert batches("dly") == [[300], [2], [1]]


async def test_max_queue_size(model_repository: ModelRepositoryBuilder) -> None:
    model(
        model_repository,
        "full",
        "dynamic_batching { default_queue_policy { max_queue_size: 2 } }",
        max_batch_size=1,
    )
    async with server(model_repository) as srv:
        busy = asyncio.ensure_future(infer(srv, "full", 300))
        await asyncio.sleep(0.05)
        results = await gather(
            busy, infer(srv, "full", 1), infer(srv, "full", 2), infer(srv, "full", 3)
        )
    errors = [r for r in results if isinstance(r, TritonXError)]
    assert len(errors) == 1 and errors[0].message == "Exceeds maximum queue size"
    assert errors[0].code is Code.UNAVAILABLE


async def test_several_instances_pull_from_one_queue(
    model_repository: ModelRepositoryBuilder,
) -> None:
    model(
        model_repository,
        "multi",
        "dynamic_batching { } instance_group [ { count: 2, kind: KIND_CPU } ]",
        max_batch_size=1,
        delay_ms="100",
    )
    async with server(model_repository) as srv:
        await gather(*(infer(srv, "multi", i) for i in range(4)))
    assert Recorder.max_active == 2 and len(batches("multi")) == 4


async def test_preserve_ordering(model_repository: ModelRepositoryBuilder) -> None:
    group = "instance_group [ { count: 2, kind: KIND_CPU } ]"
    model(
        model_repository,
        "ordered",
        f"dynamic_batching {{ preserve_ordering: true }} {group}",
        max_batch_size=1,
    )
    model(model_repository, "unordered", f"dynamic_batching {{ }} {group}", max_batch_size=1)
    async with server(model_repository) as srv:
        for name, expected in (("ordered", [300, 10]), ("unordered", [10, 300])):
            done: list[int] = []

            async def one(value: int, name: str = name, done: list[int] = done) -> None:
                await infer(srv, name, value)
                done.append(value)

            slow = asyncio.ensure_future(one(300))
            await asyncio.sleep(0.05)
            await asyncio.gather(slow, one(10))
            assert done == expected, name


async def test_rate_limiter_excludes_instances_sharing_a_resource(
    model_repository: ModelRepositoryBuilder,
) -> None:
    group = 'instance_group [ { count: 1, kind: KIND_CPU, rate_limiter { resources [ { name: "R", count: 1 } ] } } ]'
    model(model_repository, "a", group, max_batch_size=1, delay_ms="100")
    model(model_repository, "b", group, max_batch_size=1, delay_ms="100")
    async with server(model_repository, rate_limit="execution_count") as srv:
        await gather(*(infer(srv, n, i) for i in range(2) for n in ("a", "b")))
    assert Recorder.max_active == 1
    Recorder.max_active = 0
    async with server(model_repository, rate_limit="off") as srv:
        await gather(*(infer(srv, n, i) for i in range(2) for n in ("a", "b")))
    assert Recorder.max_active == 2


async def test_rate_limiter_resource_pool_override(
    model_repository: ModelRepositoryBuilder,
) -> None:
    group = 'instance_group [ { count: 2, kind: KIND_CPU, rate_limiter { resources [ { name: "R", count: 1 } ] } } ]'
    model(model_repository, "pool", group, max_batch_size=1, delay_ms="100")
    async with server(
        model_repository, rate_limit="execution_count", rate_limit_resource=("R:2",)
    ) as srv:
        await gather(*(infer(srv, "pool", i) for i in range(4)))
    assert Recorder.max_active == 2


async def test_rate_limiter_priority(
    model_repository: ModelRepositoryBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two instances share R; the lower execution_count * priority goes first
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "4")

    def rl(priority: int) -> str:
        return f'rate_limiter {{ resources [ {{ name: "R", count: 1 }} ] priority: {priority} }}'

    model(
        model_repository,
        "pr",
        "dynamic_batching { } instance_group [ "
        f"{{ count: 1, kind: KIND_CPU, {rl(1)} }}, {{ count: 1, kind: KIND_CPU, {rl(4)} }} ]",
        max_batch_size=1,
        delay_ms="30",
    )
    async with server(model_repository, rate_limit="execution_count") as srv:
        await gather(*(infer(srv, "pr", i) for i in range(4)))
    assert Recorder.max_active == 1 and len(batches("pr")) == 4


def test_statistics_batch_sizes(
    model_repository: ModelRepositoryBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "5")
    model(model_repository, "st", "dynamic_batching { }", max_batch_size=4, delay_ms="0")

    async def run() -> None:
        async with server(model_repository) as srv:
            await gather(*(infer(srv, "st", i) for i in range(5)))
            stats = srv.model_statistics("st")[0][2]
            assert stats.inference_count == 5 and stats.execution_count == 2
            assert sorted(stats.batch_stats) == [1, 4]
            assert stats.success.count == 5 and stats.queue.count == 5

    asyncio.run(run())
