"""The response cache never answers for a model that was replaced (issue 29).

A model ``calc`` (ONNX, ``OUTPUT0 = INPUT0 <op> INPUT1``, ``response_cache { enable: true }``)
is served with the local cache, asked once (a miss) and again (a hit); then its files are
replaced in the repository by a model computing something else, same name and version, and
it is loaded again (the load API in explicit mode, unload then load, or a repository poll):
the same request gets the new model's answer, and the old model's entries are gone from the
cache. ``ObservedLocalCache`` (the built-in local cache registered under another name) lets
the tests read the cache's public ``len()`` and ``used``.

The contract every cache plugin inherits (``tritonx.testing.cache_contract``) runs here on the
local cache.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient

import tritonx
from tritonx import InferenceRequest, Server
from tritonx.builtin.local_cache import LocalCache
from tritonx.testing import ModelRepositoryBuilder, loopback_settings
from tritonx.testing.cache_contract import ResponseCacheContract

pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper

from tritonx_backend_onnx.models import make_model

CACHED = "response_cache { enable: true }"
A = np.array([1, 2, 3, 4], np.float32)
B = np.array([10, 20, 30, 40], np.float32)
ANSWERS = {"Add": A + B, "Sub": A - B, "Mul": A * B}


def calc(op: str) -> bytes:
    """INPUT0, INPUT1 (FP32 [4]) → OUTPUT0 = INPUT0 <op> INPUT1."""
    io = [("INPUT0", TensorProto.FLOAT, [4]), ("INPUT1", TensorProto.FLOAT, [4])]
    return make_model(
        [helper.make_node(op, ["INPUT0", "INPUT1"], ["OUTPUT0"])],
        io,
        [("OUTPUT0", TensorProto.FLOAT, [4])],
    ).SerializeToString()


def add_calc(repo: ModelRepositoryBuilder, op: str) -> Path:
    return repo.add(
        "calc",
        backend="onnxruntime",
        inputs=[("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4])],
        versions={1: {"model.onnx": calc(op)}},
        extra=CACHED,
    )


def replace(repo: ModelRepositoryBuilder, op: str) -> None:
    """Overwrite the served model file in place (same name, same version)."""
    (repo.root / "calc" / "1" / "model.onnx").write_bytes(calc(op))


class ObservedLocalCache(LocalCache):
    """The local cache, remembering its instances so tests can read ``len()`` / ``used``."""

    name = "observed_local"
    instances: ClassVar[list[ObservedLocalCache]] = []

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        ObservedLocalCache.instances.append(self)


class ObservedPlugin:
    @tritonx.hookimpl
    def tritonx_register_caches(self, registry: tritonx.CacheRegistry) -> None:
        registry.add(ObservedLocalCache)


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    return ("backend_onnx",)


@pytest.fixture
async def serve(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: Any,
    register_plugin: Callable[[object], None],
) -> AsyncIterator[Callable[..., Any]]:
    """Start a server over the test's repository with the observed local cache."""
    register_plugin(ObservedPlugin())
    ObservedLocalCache.instances.clear()
    started: list[Server] = []

    async def start(**overrides: Any) -> tuple[Server, ObservedLocalCache]:
        settings = loopback_settings(
            model_repository.root,
            cache_config={"observed_local": {"size": str(1 << 20)}},
            **overrides,
        )
        server = Server(settings, plugin_manager=plugin_manager)
        await server.start()
        started.append(server)
        return server, ObservedLocalCache.instances[-1]

    yield start
    for server in started:
        await server.stop()


def hits(server: Server) -> tuple[int, int]:
    ((_, _, stats),) = server.model_statistics("calc")
    return stats.cache_hit.count, stats.cache_miss.count


class Client:
    """The calls the tests make, over tritonclient HTTP or gRPC."""

    def __init__(self, server: Server, protocol: str) -> None:
        self.module: Any = httpclient if protocol == "http" else grpcclient
        url = server.http_url if protocol == "http" else server.grpc_url
        self.client = self.module.InferenceServerClient(url)

    async def ask(self, a: np.ndarray = A, b: np.ndarray = B) -> list[float]:
        inputs = [
            self.module.InferInput("INPUT0", [4], "FP32"),
            self.module.InferInput("INPUT1", [4], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = await self.client.infer("calc", inputs)
        return list(result.as_numpy("OUTPUT0").tolist())

    async def close(self) -> None:
        await self.client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("how", ["load", "unload+load"])
async def test_a_model_replaced_in_place_answers_with_its_new_files(
    model_repository: ModelRepositoryBuilder, serve: Any, protocol: str, how: str
) -> None:
    add_calc(model_repository, "Add")
    server, cache = await serve(model_control_mode="explicit", load_model=("calc",))
    client = Client(server, protocol)
    try:
        assert await client.ask() == ANSWERS["Add"].tolist()
        assert await client.ask() == ANSWERS["Add"].tolist()
        assert hits(server) == (1, 1)  # the second answer came from the cache
        assert len(cache) == 1
        for loads, op in enumerate(("Sub", "Mul"), start=2):
            replace(model_repository, op)
            if how == "unload+load":
                await client.client.unload_model("calc")
                assert len(cache) == 0  # unloaded: its entries are dropped
            await client.client.load_model("calc")
            assert len(cache) == 0  # replaced: the old load's entries are dropped
            assert await client.ask() == ANSWERS[op].tolist()
            assert await client.ask() == ANSWERS[op].tolist()
            # the new load caches its own answers: one more miss, one more hit (a reload
            # goes on counting in the version's statistics; after an unload they restart)
            counted = loads if how == "load" else 1
            assert hits(server) == (counted, counted)
            assert len(cache) == 1
    finally:
        await client.close()


async def test_a_repository_poll_that_reloads_a_replaced_model(
    model_repository: ModelRepositoryBuilder, serve: Any
) -> None:
    add_calc(model_repository, "Add")
    server, cache = await serve(model_control_mode="poll", repository_poll_secs=0)
    request = {"INPUT0": A, "INPUT1": B}
    first = await server.infer(InferenceRequest("calc", dict(request)))
    assert first.outputs["OUTPUT0"].tolist() == ANSWERS["Add"].tolist()
    replace(model_repository, "Sub")
    await server.poll_repository()
    again = await server.infer(InferenceRequest("calc", dict(request)))
    assert again.outputs["OUTPUT0"].tolist() == ANSWERS["Sub"].tolist()
    assert len(cache) == 1 and cache.used > 0


async def test_a_model_reloaded_with_unchanged_files_keeps_its_answers(
    model_repository: ModelRepositoryBuilder, serve: Any
) -> None:
    """Unchanged files: the same scope, so a server restarted on them (or sharing a cache)
    still finds its entries; here an unload drops them, and the next load caches anew."""
    add_calc(model_repository, "Add")
    server, cache = await serve(model_control_mode="explicit", load_model=("calc",))
    request = {"INPUT0": A, "INPUT1": B}
    await server.infer(InferenceRequest("calc", dict(request)))
    await server.load_model("calc")  # nothing changed: no reload, the entry stays
    assert len(cache) == 1
    await server.infer(InferenceRequest("calc", dict(request)))
    assert hits(server) == (1, 1)


async def test_other_models_keep_their_entries(
    model_repository: ModelRepositoryBuilder, serve: Any
) -> None:
    add_calc(model_repository, "Add")
    model_repository.add_identity("echo", extra=CACHED)
    server, cache = await serve(model_control_mode="explicit", load_model=("calc", "echo"))
    await server.infer(InferenceRequest("echo", {"INPUT0": A}))
    await server.infer(InferenceRequest("calc", {"INPUT0": A, "INPUT1": B}))
    assert len(cache) == 2
    replace(model_repository, "Sub")
    await server.load_model("calc")
    assert len(cache) == 1
    await server.infer(InferenceRequest("echo", {"INPUT0": A}))
    ((_, _, stats),) = server.model_statistics("echo")
    assert stats.cache_hit.count == 1


class TestLocalCacheContract(ResponseCacheContract):
    @pytest.fixture
    async def cache(self) -> AsyncIterator[LocalCache]:
        cache = LocalCache({"size": str(1 << 20)})
        yield cache
        await cache.close()

    async def test_evict_model_gives_the_bytes_back(self, cache: LocalCache) -> None:
        from tritonx.testing.cache_contract import response, scope_of, scoped_key

        await cache.put(scoped_key(scope_of("keep"), 1), response(1))
        used = cache.used
        for request in range(5):
            await cache.put(scoped_key(scope_of("gone"), request), response(2))
        await cache.evict_model("gone", 1, scope_of("gone"))
        assert (cache.used, len(cache), cache.evictions) == (used, 1, 0)


async def test_a_fifo_in_the_model_folder_is_not_read_for_the_scope(
    model_repository: ModelRepositoryBuilder, serve: Any
) -> None:
    """The load's scope reads regular files only: a named pipe beside the model (nothing
    ever writes to it) would block the load forever if it were opened."""
    folder = add_calc(model_repository, "Add")
    os.mkfifo(folder / "1" / "notes.fifo")
    server, _ = await serve()
    response = await server.infer(InferenceRequest("calc", {"INPUT0": A, "INPUT1": B}))
    assert response.outputs["OUTPUT0"].tolist() == ANSWERS["Add"].tolist()


class GatedLocalCache(LocalCache):
    """The local cache whose lookups can be held (a cache plugin that really awaits, as a
    remote one does): while ``gate`` is clear, ``get`` sets ``entered`` and waits."""

    name = "gated_local"
    gate: ClassVar[asyncio.Event | None] = None
    entered: ClassVar[asyncio.Event | None] = None

    async def get(self, key: bytes) -> Any:
        if GatedLocalCache.gate is not None and GatedLocalCache.entered is not None:
            GatedLocalCache.entered.set()
            await GatedLocalCache.gate.wait()
        return await super().get(key)


class GatedPlugin:
    @tritonx.hookimpl
    def tritonx_register_caches(self, registry: tritonx.CacheRegistry) -> None:
        registry.add(GatedLocalCache)


async def test_a_reload_during_a_cache_lookup_serves_the_request(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: Any,
    register_plugin: Callable[[object], None],
) -> None:
    """Requests whose lookups are still awaiting the cache when a reload swaps their version
    out are queued on the version that replaced it, never failed (the reload evicted the old
    model's entries, so even the request that would have hit misses: no stale answer)."""
    register_plugin(GatedPlugin())
    add_calc(model_repository, "Add")
    settings = loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("calc",),
        cache_config={"gated_local": {"size": str(1 << 20)}},
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        await server.infer(InferenceRequest("calc", {"INPUT0": A, "INPUT1": B}))  # cached
        GatedLocalCache.gate, GatedLocalCache.entered = asyncio.Event(), asyncio.Event()
        try:
            other = A * 2
            miss = asyncio.create_task(
                server.infer(InferenceRequest("calc", {"INPUT0": other, "INPUT1": B}))
            )
            await GatedLocalCache.entered.wait()
            GatedLocalCache.entered.clear()
            hit = asyncio.create_task(
                server.infer(InferenceRequest("calc", {"INPUT0": A, "INPUT1": B}))
            )
            await GatedLocalCache.entered.wait()
            replace(model_repository, "Sub")
            await server.load_model("calc")  # the old version is retired meanwhile
            GatedLocalCache.gate.set()
            assert (await miss).outputs["OUTPUT0"].tolist() == (other - B).tolist()
            assert (await hit).outputs["OUTPUT0"].tolist() == ANSWERS["Sub"].tolist()
        finally:
            GatedLocalCache.gate = GatedLocalCache.entered = None
        after = await server.infer(InferenceRequest("calc", {"INPUT0": A, "INPUT1": B}))
        assert after.outputs["OUTPUT0"].tolist() == ANSWERS["Sub"].tolist()
