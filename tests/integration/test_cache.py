"""The response cache with the built-in ``local`` cache: hits and misses through the real
tritonclient HTTP and gRPC clients and the in-process server, the statistics and metrics they
leave, LRU eviction by byte size, private copies, Triton's config refusals, and the
``--cache-config local,size=...`` command line. (The Redis cache has its own tests in
``plugins/cache_redis/tests``.)"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pluggy
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from prometheus_client.parser import text_string_to_metric_families

import tritonx
from tritonx import InferenceRequest, InferenceResponse, ModelState, ResponseCache, Server
from tritonx.builtin.local_cache import LocalCache, entry_size
from tritonx.config import ServerSettings
from tritonx.errors import TritonXError
from tritonx.testing import ModelRepositoryBuilder, echo_plugin_env, free_port, loopback_settings

CACHED = "response_cache { enable: true }"
MiB = "1048576"


def add_pair_model(repo: ModelRepositoryBuilder, name: str, extra: str = CACHED) -> None:
    """identity: INPUT0 INT32 [16] -> OUTPUT0, INPUT1 BYTES [2] -> OUTPUT1."""
    repo.add(
        name,
        backend="identity",
        inputs=[("INPUT0", "INT32", [16]), ("INPUT1", "BYTES", [2])],
        outputs=[("OUTPUT0", "INT32", [16]), ("OUTPUT1", "BYTES", [2])],
        parameters={"fail_value": "-1"},
        extra=extra,
    )


def pair_inputs(module: Any, first: int = 0) -> list[Any]:
    a = np.arange(first, first + 16, dtype=np.int32)
    b = np.array([b"caf\xc3\xa9", b"\x00binary\xff"], dtype=np.object_)
    inputs = [module.InferInput("INPUT0", [16], "INT32"), module.InferInput("INPUT1", [2], "BYTES")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


async def scrape(server: Server) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{server.metrics_url}/metrics") as resp:
            assert resp.status == 200
            text = await resp.text()
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(families: dict[str, Any], name: str, model: str) -> float | None:
    family = families.get(name)
    for s in family.samples if family else ():
        if s.name in (name, name + "_total") and s.labels == {"model": model, "version": "1"}:
            return float(s.value)
    return None


def execution_count(server: Server, model: str) -> int:
    ((_, _, stats),) = server.model_statistics(model)
    return stats.execution_count


@pytest.fixture
def server_settings(model_repository: ModelRepositoryBuilder) -> ServerSettings:
    add_pair_model(model_repository, "cached")
    add_pair_model(model_repository, "plain", extra="")
    return loopback_settings(model_repository.root, cache_config={"local": {"size": MiB}})


async def test_hits_and_misses_over_http_and_grpc(
    server: Server, http_client: Any, grpc_client: Any
) -> None:
    first = await http_client.infer("cached", pair_inputs(httpclient))  # miss
    executions = execution_count(server, "cached")
    hit_http = await http_client.infer("cached", pair_inputs(httpclient))
    hit_grpc = await grpc_client.infer("cached", pair_inputs(grpcclient))  # same key: a hit
    assert execution_count(server, "cached") == executions  # hits never reach the model
    other = await grpc_client.infer("cached", pair_inputs(grpcclient, first=100))  # miss
    for result in (hit_http, hit_grpc):
        for name in ("OUTPUT0", "OUTPUT1"):
            expected, got = first.as_numpy(name), result.as_numpy(name)
            assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
            assert got.tolist() == expected.tolist()
    assert hit_grpc.as_numpy("OUTPUT0").tobytes() == first.as_numpy("OUTPUT0").tobytes()
    assert list(hit_grpc.as_numpy("OUTPUT1")) == [b"caf\xc3\xa9", b"\x00binary\xff"]
    assert hit_grpc.as_numpy("OUTPUT0").dtype == np.int32
    assert other.as_numpy("OUTPUT0")[0] == 100
    await http_client.infer("plain", pair_inputs(httpclient))
    await http_client.infer("plain", pair_inputs(httpclient))

    # statistics: 2 hits, 2 misses; 4 successes, 2 executions
    stats = (await http_client.get_inference_statistics("cached"))["model_stats"][0]
    inference = stats["inference_stats"]
    assert inference["cache_hit"]["count"] == 2 and inference["cache_hit"]["ns"] > 0
    assert inference["cache_miss"]["count"] == 2 and inference["cache_miss"]["ns"] > 0
    assert inference["success"]["count"] == 4
    assert stats["execution_count"] == 2 and stats["inference_count"] == 2
    grpc_stats = (await grpc_client.get_inference_statistics("cached")).model_stats[0]
    assert grpc_stats.inference_stats.cache_hit.count == 2
    assert grpc_stats.inference_stats.cache_miss.count == 2
    plain = (await http_client.get_inference_statistics("plain"))["model_stats"][0]
    assert plain["inference_stats"]["cache_hit"]["count"] == 0
    assert plain["inference_stats"]["cache_miss"]["count"] == 0

    # metrics: Triton's per-model cache counters, only for the model with the cache on
    families = await scrape(server)
    for name in (
        "nv_cache_num_hits_per_model",
        "nv_cache_num_misses_per_model",
        "nv_cache_hit_duration_per_model",
        "nv_cache_miss_duration_per_model",
    ):
        assert families[name].type == "counter", name
    assert sample(families, "nv_cache_num_hits_per_model", "cached") == 2
    assert sample(families, "nv_cache_num_misses_per_model", "cached") == 2
    assert sample(families, "nv_cache_hit_duration_per_model", "cached") == (
        inference["cache_hit"]["ns"] // 1000
    )
    assert sample(families, "nv_cache_miss_duration_per_model", "cached") == (
        inference["cache_miss"]["ns"] // 1000
    )
    assert sample(families, "nv_cache_num_hits_per_model", "plain") is None
    assert sample(families, "nv_inference_request_success", "cached") == 4
    assert sample(families, "nv_inference_count", "cached") == 2  # hits excluded, as Triton


async def test_failed_responses_are_not_cached(server: Server) -> None:
    bad = np.full(16, -1, np.int32)  # the identity model's fail_value
    request = {"INPUT0": bad, "INPUT1": np.array([b"a", b"b"], dtype=object)}
    for _ in range(2):
        with pytest.raises(TritonXError, match="fail_value -1 seen"):
            await server.infer(InferenceRequest("cached", dict(request)))
    ((_, _, stats),) = server.model_statistics("cached")
    assert (stats.cache_hit.count, stats.cache_miss.count, stats.execution_count) == (0, 2, 2)


async def test_stored_and_returned_responses_are_private_copies(server: Server) -> None:
    def request() -> InferenceRequest:
        return InferenceRequest(
            "cached",
            {
                "INPUT0": np.arange(16, dtype=np.int32),
                "INPUT1": np.array([bytearray(b"xy"), b"z"], dtype=object),
            },
        )

    first = await server.infer(request())  # miss: the model's own arrays are returned
    first.outputs["OUTPUT0"][:] = 99  # the caller scribbles over its response ...
    first.outputs["OUTPUT1"][0][:] = b"??"  # ... and over a mutable BYTES element
    second = await server.infer(request())  # a hit
    assert second.outputs["OUTPUT0"].tolist() == list(range(16))
    assert second.outputs["OUTPUT1"].tolist() == [b"xy", b"z"]
    second.outputs["OUTPUT0"][:] = 7  # a hit's arrays are the caller's too
    third = await server.infer(request())
    assert third.outputs["OUTPUT0"].tolist() == list(range(16))
    ((_, _, stats),) = server.model_statistics("cached")
    assert (stats.cache_hit.count, stats.cache_miss.count) == (2, 1)


async def test_lru_eviction_by_byte_size(
    plugin_manager: pluggy.PluginManager, model_repository: ModelRepositoryBuilder
) -> None:
    model_repository.add_identity("big", dims=[1024], extra=CACHED)
    tensor = np.zeros(1024, np.float32)
    one = entry_size(b"k" * 32, InferenceResponse(outputs={"OUTPUT0": tensor}))
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        cache_config={"local": {"size": str(2 * one + one // 2)}},  # room for two entries
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:

        async def ask(value: float) -> None:
            data = np.full(1024, value, np.float32)
            response = await server.infer(InferenceRequest("big", {"INPUT0": data}))
            assert response.outputs["OUTPUT0"][0] == value

        def counts() -> tuple[int, int]:
            ((_, _, stats),) = server.model_statistics("big")
            return stats.cache_hit.count, stats.cache_miss.count

        await ask(1)  # miss: [1]
        await ask(2)  # miss: [1, 2]
        await ask(1)  # hit: [2, 1]
        assert counts() == (1, 2)
        await ask(3)  # miss, evicts 2, the least recently used: [1, 3]
        await ask(1)  # hit
        await ask(3)  # hit
        assert counts() == (3, 3)
        await ask(2)  # miss (evicted), evicts 1: [3, 2]
        await ask(1)  # miss
        assert counts() == (3, 5)

    # a response larger than the whole cache is not stored
    model_repository.add_identity("huge", dims=[-1], extra=CACHED)
    async with Server(
        plugin_manager=plugin_manager,
        settings=loopback_settings(
            model_repository.root,
            allow_http=False,
            allow_grpc=False,
            allow_metrics=False,
            cache_config={"local": {"size": str(one)}},
        ),
    ) as server:
        large = {"INPUT0": np.zeros(2048, np.float32)}
        for _ in range(2):
            await server.infer(InferenceRequest("huge", dict(large)))
        small = {"INPUT0": np.zeros(16, np.float32)}
        for _ in range(2):
            await server.infer(InferenceRequest("huge", dict(small)))
        ((_, _, stats),) = server.model_statistics("huge")
        assert (stats.cache_hit.count, stats.cache_miss.count) == (1, 3)


async def test_local_cache_counts_bytes_tensors_by_serialized_size() -> None:
    cache = LocalCache({"size": "1000"})
    response = InferenceResponse(outputs={"S": np.array([b"abc", b"", b"\x00" * 10], dtype=object)})
    assert entry_size(b"k", response) == 1 + 1 + (4 * 3 + 3 + 0 + 10)
    await cache.put(b"k", response)
    assert cache.used == entry_size(b"k", response) and len(cache) == 1
    hit = await cache.get(b"k")
    assert hit is not None and hit.outputs["S"].tolist() == [b"abc", b"", b"\x00" * 10]
    assert await cache.get(b"other") is None


async def test_local_cache_is_safe_from_many_threads() -> None:
    cache = LocalCache({"size": str(40 * (8 + 1 + 400))})

    def worker(seed: int) -> None:
        async def run() -> None:
            for i in range(300):
                key = f"{(seed * 7 + i) % 80:08d}".encode()
                value = np.full(100, int(key), np.int32)
                hit = await cache.get(key)
                if hit is None:
                    await cache.put(key, InferenceResponse(outputs={"V": value}))
                else:
                    assert hit.outputs["V"].tolist() == value.tolist()

        asyncio.run(run())

    threads = [asyncio.to_thread(worker, seed) for seed in range(4)]
    await asyncio.gather(*threads)
    assert 0 < len(cache) <= 40 and cache.used <= cache.capacity
    assert cache.evictions > 0


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "config didn't contain a valid 'size' field"),
        ({"size": "abc"}, "'size' must be a positive number of bytes, got 'abc'"),
        ({"size": "-5"}, "'size' must be a positive number of bytes, got '-5'"),
        ({"size": "0"}, "'size' must be a positive number of bytes, got '0'"),
        ({"size": "10", "sise": "1"}, "unknown setting(s) sise"),
    ],
)
async def test_bad_local_settings_fail_start_up(
    plugin_manager: pluggy.PluginManager,
    model_repository: ModelRepositoryBuilder,
    config: dict[str, str],
    message: str,
) -> None:
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        cache_config={"local": config},
    )
    with pytest.raises(TritonXError, match="Failed to initialize LocalCache: ") as info:
        async with Server(settings, plugin_manager=plugin_manager):
            pass
    assert message in str(info.value)


async def test_decoupled_and_sequence_models_refuse_the_cache(
    plugin_manager: pluggy.PluginManager,
    model_repository: ModelRepositoryBuilder,
) -> None:
    model_repository.add_identity(
        "stream", extra=CACHED + " model_transaction_policy { decoupled: true }"
    )
    model_repository.add_identity(
        "stateful", dims=[1], max_batch_size=2, extra=CACHED + " sequence_batching { }"
    )
    model_repository.add_identity(
        "stream_plain", extra="model_transaction_policy { decoupled: true }"
    )
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        cache_config={"local": {"size": MiB}},
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        index = {r.name: (r.state, r.reason) for r in server.repository_index()}
    assert index["stream"] == (
        ModelState.UNAVAILABLE,
        "Response Cache does not currently support model stream with "
        "'decoupled' transaction policy. Please disable the response cache.",
    )
    assert index["stateful"] == (
        ModelState.UNAVAILABLE,
        "Response Cache does not currently support model stateful with "
        "sequence batching scheduler. Please disable the response cache.",
    )
    assert index["stream_plain"][0] == ModelState.READY


async def test_cache_summaries_and_no_request_summary(
    plugin_manager: pluggy.PluginManager,
    model_repository: ModelRepositoryBuilder,
) -> None:
    add_pair_model(model_repository, "cached")
    add_pair_model(model_repository, "plain", extra="")
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        cache_config={"local": {"size": MiB}},
        metrics_config={"summary_latencies": "true"},
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        for model in ("cached", "cached", "plain"):
            request = {
                "INPUT0": np.arange(16, dtype=np.int32),
                "INPUT1": np.array([b"a", b"b"], dtype=object),
            }
            await server.infer(InferenceRequest(model, request))
        families = await scrape(server)
    hit = families["nv_cache_hit_summary_per_model"]
    miss = families["nv_cache_miss_summary_per_model"]
    assert hit.type == "summary" and miss.type == "summary"
    counts = {
        (f.name, s.labels["model"]): s.value
        for f in (hit, miss)
        for s in f.samples
        if s.name.endswith("_count")
    }
    assert counts == {
        ("nv_cache_hit_summary_per_model", "cached"): 1,
        ("nv_cache_miss_summary_per_model", "cached"): 1,
    }
    # as Triton: no request summary for a model with the cache on (hits would skew it)
    request_models = {
        s.labels.get("model") for s in families["nv_inference_request_summary_us"].samples
    }
    assert request_models == {"plain"}


# ---------------------------------------------------------------- the command line


def cli_env(tmp_path: Path) -> dict[str, str]:
    """An environment where the identity test backend is an installed plugin."""
    return echo_plugin_env(tmp_path / "site")


def test_cli_cache_config_local(model_repository: ModelRepositoryBuilder, tmp_path: Path) -> None:
    import tritonclient.http as synchttp

    add_pair_model(model_repository, "cached")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonx",
            "serve",
            "--model-repository",
            str(model_repository.root),
            "--cache-config",
            f"local,size={MiB}",
            "--http-address=127.0.0.1",
            f"--http-port={port}",
            "--allow-grpc=false",
            "--allow-metrics=false",
        ],
        env=cli_env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client = synchttp.InferenceServerClient(f"127.0.0.1:{port}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if client.is_model_ready("cached"):
                    break
            except Exception:
                pass
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.2)
        results = [client.infer("cached", pair_inputs(synchttp)) for _ in range(3)]
        assert all(r.as_numpy("OUTPUT0").tolist() == list(range(16)) for r in results)
        stats = client.get_inference_statistics("cached")["model_stats"][0]["inference_stats"]
        assert (stats["cache_hit"]["count"], stats["cache_miss"]["count"]) == (2, 1)
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("local,size=lots", "'size' must be a positive number of bytes, got 'lots'"),
        ("local,bytes=10", "unknown setting(s) bytes"),
    ],
)
def test_cli_bad_cache_settings_stop_start_up(tmp_path: Path, flag: str, message: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tritonx",
            "serve",
            "--model-repository",
            str(tmp_path),
            "--cache-config",
            flag,
            "--allow-http=false",
            "--allow-grpc=false",
            "--allow-metrics=false",
        ],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert (
        "error: creating server: Invalid argument - Failed to initialize LocalCache: " + message
    ) in result.stderr


# ---------------------------------------------------------------- a cache plugin that fails


class BrokenCache(ResponseCache):
    """Raises on every call, like a cache whose backing store is gone."""

    name = "broken"

    async def get(self, key: bytes) -> InferenceResponse | None:
        raise RuntimeError("store is gone")

    async def put(self, key: bytes, response: InferenceResponse) -> None:
        raise RuntimeError("store is gone")


class BrokenPlugin:
    @tritonx.hookimpl
    def tritonx_register_caches(self, registry: tritonx.CacheRegistry) -> None:
        registry.add(BrokenCache)


async def test_a_failing_cache_plugin_never_fails_a_request(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: pluggy.PluginManager,
    register_plugin: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    register_plugin(BrokenPlugin())
    add_pair_model(model_repository, "cached")
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        cache_config={"broken": {}},
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        for _ in range(3):
            request = {
                "INPUT0": np.arange(16, dtype=np.int32),
                "INPUT1": np.array([b"a", b"b"], dtype=object),
            }
            response = await server.infer(InferenceRequest("cached", request))
            assert response.outputs["OUTPUT0"].tolist() == list(range(16))
        ((_, _, stats),) = server.model_statistics("cached")
        assert (stats.cache_hit.count, stats.cache_miss.count, stats.fail.count) == (0, 3, 0)
    warnings = [
        r.getMessage() for r in caplog.records if "response cache 'broken'" in r.getMessage()
    ]
    assert warnings == [
        "response cache 'broken': lookup failed (RuntimeError: store is gone); serving without "
        "the cache"
    ]  # one warning, not one per call
