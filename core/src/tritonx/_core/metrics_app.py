"""The metrics listener (``--metrics-port``, ``GET /metrics``) in Prometheus text format."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry

from tritonx._core.metrics import TritonMetrics, render_registry

if TYPE_CHECKING:
    from tritonx.server import Server

REGISTRY_KEY = web.AppKey("registry", CollectorRegistry)
CONTENT_TYPE = "text/plain; charset=utf-8"


def make_metrics_app(server: Server) -> web.Application:
    """An app serving the server's collector registry at ``/metrics`` (and ``/metrics/``).

    As in Triton, other paths answer 200 with an empty body and non-GET methods 405.
    """
    registry = server.dataplane.metrics_registry
    assert server.registries is not None
    for name, cls in server.registries.metric_sinks.items():
        sink = cls(server.settings.metrics_config)
        for collector in sink.collectors():
            registry.register(collector)
        del name
    app = web.Application()
    app[REGISTRY_KEY] = registry
    assert server.models is not None
    triton = TritonMetrics(server.settings, server.models)

    async def metrics(request: web.Request) -> web.Response:
        if request.method != "GET":
            return web.json_response({"error": "Method Not Allowed"}, status=405)
        if request.path not in ("/metrics", "/metrics/"):
            return web.Response(body=b"")
        body = (triton.render() + render_registry(request.app[REGISTRY_KEY])).encode()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    app.router.add_route("*", "/{tail:.*}", metrics)
    return app
