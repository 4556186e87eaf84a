"""Readiness drops first on shutdown: before anything else the stop does (here a metric sink's
last export, which may be slow), so load balancers stop sending at once."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from typing import Any

import tritonx
from tritonx import Server
from tritonx.testing import ModelRepositoryBuilder, loopback_settings


def _ready_status(url: str) -> int:
    try:
        with urllib.request.urlopen(f"http://{url}/v2/health/ready", timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


async def test_readiness_is_false_during_the_last_metrics_export(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    address: dict[str, str] = {}
    seen: list[int] = []

    class Probe(tritonx.MetricSink):
        name = "probe"

        def collectors(self) -> Any:
            return []

        def export(self, registry: Any) -> None:
            # runs in the exporter's thread; the event loop keeps serving HTTP meanwhile
            seen.append(_ready_status(address["http"]))

    class Plugin:
        @tritonx.hookimpl
        def tritonx_register_metric_sinks(self, registry: tritonx.MetricSinkRegistry) -> None:
            registry.add(Probe)

    plugin_manager.register(Plugin())
    model_repository.add_identity("id", dims=[1])
    settings = loopback_settings(
        model_repository.root,
        allow_grpc=False,
        metric_sinks={"probe": {}},
        metrics_interval_ms=3_600_000,  # only the export at stop
    )
    server = Server(settings, plugin_manager=plugin_manager)
    await server.start()
    try:
        address["http"] = server.http_url
        assert await asyncio.to_thread(_ready_status, server.http_url) == 200
    finally:
        await server.stop()
    assert seen == [400]
