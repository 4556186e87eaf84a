"""Triton's per-model counters under ``--model-load-on-demand`` and the budgets: a version
the residency policy unloads (to make room, or idle) keeps its ``nv_inference_*`` series on
``/metrics`` and they go on counting when it loads again; an explicit unload removes them
(Triton's behaviour). Through tritonclient HTTP and a scrape of ``/metrics``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import tritonclient.http.aio as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from tritonx import ModelState, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, identity, loopback_settings

ON_DEMAND: dict[str, Any] = {
    "model_control_mode": "explicit",
    "model_load_on_demand": True,
    "model_min_residency_secs": 0,  # every request may evict the other model
}
DATA = np.arange(4, dtype=np.float32)


@pytest.fixture
def repo(tmp_path: Path) -> ModelRepositoryBuilder:
    builder = ModelRepositoryBuilder(tmp_path / "models")
    for name in ("a", "b"):
        builder.add(
            name,
            backend="identity",
            inputs=[("INPUT0", "FP32", [-1])],
            outputs=[("OUTPUT0", "FP32", [-1])],
        )
    return builder


@contextlib.asynccontextmanager
async def serving(repo: ModelRepositoryBuilder, **overrides: Any) -> AsyncIterator[Server]:
    settings = loopback_settings(repo.root, **{**ON_DEMAND, **overrides})
    manager = make_plugin_manager(autoload=False, extra=[identity])
    async with Server(settings, plugin_manager=manager) as server:
        yield server


@contextlib.asynccontextmanager
async def client(server: Server) -> AsyncIterator[Any]:
    c = httpclient.InferenceServerClient(server.http_url)
    try:
        yield c
    finally:
        await c.close()


async def infer(c: Any, model: str) -> None:
    inp = httpclient.InferInput("INPUT0", [4], "FP32")
    inp.set_data_from_numpy(DATA)
    result = await c.infer(model, [inp])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA)


async def counters(server: Server, family: str) -> dict[str, float]:
    """The samples of ``family`` on ``/metrics``, summed by model."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{server.metrics_url}/metrics") as resp:
            text = await resp.text()
    out: dict[str, float] = {}
    names = (family.removesuffix("_total"), family.removesuffix("_total") + "_total")
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:  # (the parser's names of counters vary with _total)
            if fam.name in names and sample.name in names:
                model = sample.labels["model"]
                out[model] = out.get(model, 0.0) + sample.value
    return out


async def test_evicted_models_keep_counting_and_an_explicit_unload_resets(
    repo: ModelRepositoryBuilder,
) -> None:
    async with serving(repo, max_loaded_models=1) as server, client(server) as c:
        served = {"a": 0, "b": 0}
        for i in range(32):  # each request loads its model and evicts the other one
            model = "ab"[i % 2]
            await infer(c, model)
            served[model] += 1
        success = await counters(server, "nv_inference_request_success")
        assert success == served  # the evicted model's series stays, with every request
        assert sum(success.values()) == 32
        assert await counters(server, "nv_inference_count") == served
        assert await counters(server, "nv_inference_exec_count") == served
        evictions = await counters(server, "tritonx_model_evictions_total")
        assert evictions == {"a": 16, "b": 15}
        # the gauges are the loaded model's only
        assert set(await counters(server, "nv_model_load_duration_secs")) == {"b"}
        assert await counters(server, "nv_inference_pending_request_count") == {"b": 0}
        # the statistics extension goes on counting too; it answers for loaded models only
        stats = await c.get_inference_statistics("b")
        assert int(stats["model_stats"][0]["inference_stats"]["success"]["count"]) == 16
        with pytest.raises(InferenceServerException, match="requested model 'a' is not available"):
            await c.get_inference_statistics("a")

        await c.unload_model("a")  # "b" is loaded: "a" was evicted, now unloaded for good
        success = await counters(server, "nv_inference_request_success")
        assert success == {"b": 16}
        await c.unload_model("b")  # the loaded one: its series go too (Triton)
        assert await counters(server, "nv_inference_request_success") == {}

        await infer(c, "a")  # a later load starts from zero
        assert await counters(server, "nv_inference_request_success") == {"a": 1}


async def test_a_load_api_eviction_keeps_the_counters(repo: ModelRepositoryBuilder) -> None:
    async with serving(repo, max_loaded_models=1) as server, client(server) as c:
        for _ in range(3):
            await infer(c, "a")
        await infer(c, "b")  # evicts "a"
        await c.load_model("a")  # the load API makes room too: "b" is evicted
        await infer(c, "a")
        assert await counters(server, "nv_inference_request_success") == {"a": 4, "b": 1}


async def test_idle_unloaded_models_keep_their_counters(repo: ModelRepositoryBuilder) -> None:
    async with serving(repo, model_idle_unload_secs=0.2) as server, client(server) as c:
        for _ in range(3):
            await infer(c, "a")
        deadline = time.monotonic() + 30
        # (the idle unload's own timer: wait, bounded, for the eviction it counts)
        while await counters(server, "tritonx_model_evictions_total") != {"a": 1}:
            assert time.monotonic() < deadline, "'a' was not unloaded when idle"
            await asyncio.sleep(0.05)
        assert ready(server) == []
        assert await counters(server, "nv_inference_request_success") == {"a": 3}
        await infer(c, "a")
        assert await counters(server, "nv_inference_request_success") == {"a": 4}


def ready(server: Server) -> list[str]:
    return sorted(r.name for r in server.repository_index() if r.state is ModelState.READY)
