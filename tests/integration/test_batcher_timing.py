"""Dynamic batcher timing as Triton's (core ``dynamic_batch_scheduler.cc``): batches cut at
the preferred sizes Triton forms, a leftover that completes no preferred size waits for the
queue delay, and a queued request past its queue policy's timeout is rejected while the
instance is busy. Batch formation is forced with ``TRITONSERVER_DELAY_SCHEDULER`` (the first
batch waits until that many requests are queued) and a gated test backend; nothing sleeps
and no duration is asserted."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import pluggy
import pytest
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

import tritonx
from tritonx import InferenceRequest, Server
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

#: how long a test waits for an event before it fails (never reached when it passes)
WAIT_S = 60.0
#: a queue delay no test waits for: a batch that waits for it shows as a missing batch
LONG_DELAY_US = 600_000_000


class Gated(tritonx.Backend):
    """Input VALUE [1] INT32, echoed as OUT. Each execution records its values and sets
    ``entered``; a batch holding the value 0 then blocks until ``release`` is set."""

    name = "gated"
    log: ClassVar[list[list[int]]] = []
    entered = threading.Event()
    release = threading.Event()

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return GatedInstance()


class GatedInstance(tritonx.ModelInstance):
    def execute(self, requests: Sequence[InferenceRequest]) -> list[tritonx.InferenceResponse]:
        values = [int(v) for r in requests for v in r.inputs["VALUE"].reshape(-1)]
        Gated.log.append(values)
        Gated.entered.set()
        if 0 in values:
            Gated.release.wait(WAIT_S)
        return tritonx.split_outputs(requests, {"OUT": tritonx.concat_inputs(requests)["VALUE"]})


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(Gated)


@pytest.fixture(autouse=True)
def _gated(register_plugin: Callable[[object], None]) -> None:
    register_plugin(Plugin())
    Gated.log.clear()
    Gated.entered.clear()
    Gated.release.clear()


def add_model(repo: ModelRepositoryBuilder, batching: str, max_batch_size: int = 8) -> None:
    repo.add(
        "m",
        backend="gated",
        max_batch_size=max_batch_size,
        inputs=[("VALUE", "INT32", [1])],
        outputs=[("OUT", "INT32", [1])],
        extra=f"instance_group [ {{ count: 1, kind: KIND_CPU }} ]\ndynamic_batching {{ {batching} }}",
    )


def server(repo: ModelRepositoryBuilder, pm: pluggy.PluginManager) -> Server:
    return Server(loopback_settings(repo.root, allow_grpc=False), plugin_manager=pm)


async def infer(client: Any, *values: int) -> Any:
    """One request of batch size ``len(values)``; its OUT values (or the exception)."""
    data = np.array([[v] for v in values], np.int32)
    inp = httpclient.InferInput("VALUE", list(data.shape), "INT32")
    inp.set_data_from_numpy(data)
    try:
        result = await client.infer("m", [inp])
    except InferenceServerException as exc:
        return exc
    return result.as_numpy("OUT").reshape(-1).tolist()


async def test_batches_cut_at_the_preferred_size_without_a_queue_delay(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: pluggy.PluginManager,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # five requests queued together, preferred size 2 and no delay: Triton sends 2, 2, 1
    # (the best preferred size first), not one batch of five
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "5")
    add_model(model_repository, "preferred_batch_size: [ 2 ]")
    async with server(model_repository, plugin_manager) as srv:
        async with httpclient.InferenceServerClient(srv.http_url) as client:
            results = await asyncio.wait_for(
                asyncio.gather(*(infer(client, v) for v in (1, 2, 3, 4, 5))), WAIT_S
            )
    assert results == [[1], [2], [3], [4], [5]]
    # (the five arrive in any order)
    assert [len(b) for b in Gated.log] == [2, 2, 1]
    assert sorted(v for b in Gated.log for v in b) == [1, 2, 3, 4, 5]


async def test_a_leftover_waits_for_the_queue_delay(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: pluggy.PluginManager,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # three queued together: [1, 2] completes the preferred size and runs at once; 3 does not
    # complete one, so it waits for the (long) delay, until 4 arrives and completes [3, 4]
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    add_model(
        model_repository,
        f"preferred_batch_size: [ 2 ] max_queue_delay_microseconds: {LONG_DELAY_US}",
        max_batch_size=4,
    )
    async with server(model_repository, plugin_manager) as srv:
        async with httpclient.InferenceServerClient(srv.http_url) as client:
            sent = {v: asyncio.ensure_future(infer(client, v)) for v in (1, 2, 3)}
            await asyncio.wait_for(asyncio.to_thread(Gated.entered.wait), WAIT_S)
            # (the three arrive in any order: the first two queued form the batch)
            ran = Gated.log[0]
            assert len(ran) == 2
            assert [await asyncio.wait_for(sent[v], WAIT_S) for v in ran] == [[v] for v in ran]
            (left,) = set(sent) - set(ran)
            assert not sent[left].done()
            results = await asyncio.wait_for(asyncio.gather(sent[left], infer(client, 4)), WAIT_S)
    assert results == [[left], [4]]
    assert Gated.log == [ran, [left, 4]]


async def test_the_batch_before_the_largest_preferred_size_is_exceeded_runs_at_once(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: pluggy.PluginManager,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # requests of batch size 2 and 2 with preferred size 3: adding the second would exceed it,
    # so Triton sends the first alone at once and the second waits for the delay (here: for a
    # request of batch size 1 that completes the preferred size 3)
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "2")
    add_model(
        model_repository,
        f"preferred_batch_size: [ 3 ] max_queue_delay_microseconds: {LONG_DELAY_US}",
    )
    async with server(model_repository, plugin_manager) as srv:
        async with httpclient.InferenceServerClient(srv.http_url) as client:
            sent = {1: asyncio.ensure_future(infer(client, 1, 2))}
            sent[3] = asyncio.ensure_future(infer(client, 3, 4))
            await asyncio.wait_for(asyncio.to_thread(Gated.entered.wait), WAIT_S)
            # (the two arrive in any order: the first queued runs alone)
            ran = Gated.log[0]
            assert ran in ([1, 2], [3, 4])
            assert await asyncio.wait_for(sent[ran[0]], WAIT_S) == ran
            left = 4 - ran[0]
            assert not sent[left].done()
            results = await asyncio.wait_for(asyncio.gather(sent[left], infer(client, 5)), WAIT_S)
    assert results == [[left, left + 1], [5]]
    assert Gated.log == [ran, [left, left + 1, 5]]


async def test_a_queued_request_times_out_while_the_instance_is_busy(
    model_repository: ModelRepositoryBuilder, plugin_manager: pluggy.PluginManager
) -> None:
    add_model(
        model_repository,
        "default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 500000 }",
    )
    async with server(model_repository, plugin_manager) as srv:
        async with httpclient.InferenceServerClient(srv.http_url) as client:
            busy = asyncio.ensure_future(infer(client, 0))
            assert await asyncio.to_thread(Gated.entered.wait, WAIT_S)
            # the only instance is blocked: the queued request is answered by its timeout
            queued = await asyncio.wait_for(infer(client, 7), WAIT_S)
            assert not busy.done()
            Gated.release.set()
            assert await asyncio.wait_for(busy, WAIT_S) == [0]
    assert isinstance(queued, InferenceServerException)
    assert queued.message() == "Request timeout expired"
    assert Gated.log == [[0]]
