"""The response cache with ensembles (Triton's ``CacheEnsembleTopLevelRequest``): the
top-level response is cached when it fits, a failed insertion logs Triton's line and counts a
miss, an ensemble with the cache whose composing model is decoupled is refused at load; and
Triton's text for more than one cache configuration."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pluggy
import pytest
import tritonclient.http.aio as httpclient

from tritonx import ModelState, Server
from tritonx.errors import PluginError
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

CACHED = "response_cache { enable: true }\n"


def pipeline(repo: ModelRepositoryBuilder, composing_extra: str = "") -> None:
    """``pipe``: IN (INT32 [16]) → identity ``inner`` → OUT, with the cache on."""
    repo.add(
        "inner",
        backend="identity",
        max_batch_size=0,
        inputs=[("INPUT0", "INT32", [16])],
        outputs=[("OUTPUT0", "INT32", [16])],
        extra=composing_extra,
    )
    repo.add(
        "pipe",
        platform="ensemble",
        max_batch_size=0,
        inputs=[("IN", "INT32", [16])],
        outputs=[("OUT", "INT32", [16])],
        extra=(
            'ensemble_scheduling { step [ { model_name: "inner" model_version: -1 '
            'input_map { key: "INPUT0" value: "IN" } '
            'output_map { key: "OUTPUT0" value: "OUT" } } ] }\n' + CACHED
        ),
    )


def _input(first: int = 0) -> Any:
    tensor = httpclient.InferInput("IN", [16], "INT32")
    tensor.set_data_from_numpy(np.arange(first, first + 16, dtype=np.int32))
    return tensor


def _stats(stats: dict[str, Any], model: str) -> dict[str, Any]:
    (entry,) = [s for s in stats["model_stats"] if s["name"] == model]
    return dict(entry)


@pytest.mark.parametrize(("size", "fits"), [("1048576", True), ("100", False)])
async def test_top_level_ensemble_response_is_cached_only_when_it_fits(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: pluggy.PluginManager,
    caplog: pytest.LogCaptureFixture,
    size: str,
    fits: bool,
) -> None:
    pipeline(model_repository)
    caplog.set_level(logging.ERROR, logger="tritonx")
    settings = loopback_settings(
        model_repository.root,
        allow_grpc=False,
        allow_metrics=False,
        cache_config={"local": {"size": size}},
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            first = await client.infer("pipe", [_input()])
            second = await client.infer("pipe", [_input()])
            stats = await client.get_inference_statistics()
        finally:
            await client.close()
    for result in (first, second):
        assert result.as_numpy("OUT").tolist() == list(range(16))
    pipe = _stats(stats, "pipe")["inference_stats"]
    inner = _stats(stats, "inner")
    assert pipe["success"]["count"] == 2
    failed = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("Failed to insert key [")
    ]
    if fits:
        assert (pipe["cache_hit"].get("count", 0), pipe["cache_miss"]["count"]) == (1, 1)
        assert inner["inference_stats"]["success"]["count"] == 1  # the hit skipped the steps
        assert failed == []
    else:  # Triton: two misses, the composing model runs twice, the insertions fail
        assert (pipe["cache_hit"].get("count", 0), pipe["cache_miss"]["count"]) == (0, 2)
        assert inner["inference_stats"]["success"]["count"] == 2
        assert len(failed) == 2
        assert all(
            m.endswith("] into response cache: Cache entry is larger than total cache size")
            for m in failed
        ), failed


async def test_an_ensemble_with_the_cache_over_a_decoupled_model_is_refused(
    model_repository: ModelRepositoryBuilder, plugin_manager: pluggy.PluginManager
) -> None:
    pipeline(model_repository, composing_extra="model_transaction_policy { decoupled: true }\n")
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        cache_config={"local": {"size": "1048576"}},
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        index = {r.name: (r.state, r.reason) for r in server.repository_index()}
    assert index["inner"][0] is ModelState.READY
    assert index["pipe"] == (
        ModelState.UNAVAILABLE,
        "Response Cache does not currently support model pipe with 'decoupled' transaction "
        "policy. Please disable the response cache.",
    )


async def test_more_than_one_cache_configuration_fails_start_up_with_tritons_text(
    tmp_path: Path, plugin_manager: pluggy.PluginManager
) -> None:
    settings = loopback_settings(
        tmp_path,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        cache_config={"local": {"size": "8192"}, "redis": {"key": "value"}},
    )
    with pytest.raises(PluginError) as info:
        async with Server(settings, plugin_manager=plugin_manager):
            pass
    assert str(info.value) == (
        "found multiple cache configurations, but only a single cache is currently supported"
    )
