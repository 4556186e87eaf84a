"""The ``memory_lru`` example: the response-cache contract, then in a server: hits, eviction
of the least recently used response, and a bad setting refused at start."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import Any

import numpy as np
import pluggy
import pytest

import tritonx
from tritonx.errors import TritonXError
from tritonx.testing import ModelRepositoryBuilder, serve_repository
from tritonx.testing.cache_contract import ResponseCacheContract

NO_LISTENERS: dict[str, Any] = {"allow_http": False, "allow_grpc": False, "allow_metrics": False}


class TestLRUCacheContract(ResponseCacheContract):
    @pytest.fixture
    async def cache(self, example: ModuleType) -> AsyncIterator[tritonx.ResponseCache]:
        cache = example.LRUCache({"entries": "100"})
        yield cache
        await cache.close()


async def test_hits_and_least_recently_used_eviction(
    example: ModuleType,
    register_plugin: Callable[[object], None],
    plugin_manager: pluggy.PluginManager,
    model_repository: ModelRepositoryBuilder,
) -> None:
    model_repository.add_identity(
        "echo", datatype="INT32", dims=[1], extra="response_cache { enable: true }"
    )
    register_plugin(example)
    cache_config = {"memory_lru": {"entries": "2"}}
    async with serve_repository(
        model_repository, plugin_manager, cache_config=cache_config, **NO_LISTENERS
    ) as server:

        async def hits_and_misses(*values: int) -> tuple[int, int]:
            for value in values:
                request = tritonx.InferenceRequest("echo", {"INPUT0": np.array([value], np.int32)})
                assert (await server.infer(request)).outputs["OUTPUT0"].tolist() == [value]
            stats = server.model_statistics("echo")[0][2]
            return stats.cache_hit.count, stats.cache_miss.count

        assert await hits_and_misses(1, 2, 1) == (1, 2)  # the cache holds 2, then 1
        assert await hits_and_misses(3) == (1, 3)  # 3 evicts 2, the least recently used
        assert await hits_and_misses(1, 2) == (2, 4)  # 1 is still there, 2 is not


async def test_bad_setting_fails_start_up(
    example: ModuleType,
    register_plugin: Callable[[object], None],
    plugin_manager: pluggy.PluginManager,
    model_repository: ModelRepositoryBuilder,
) -> None:
    register_plugin(example)
    with pytest.raises(TritonXError, match="entries=0: must be >= 1"):
        async with serve_repository(
            model_repository,
            plugin_manager,
            cache_config={"memory_lru": {"entries": "0"}},
            **NO_LISTENERS,
        ):
            pass
