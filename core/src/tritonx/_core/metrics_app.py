"""The metrics listener (``--metrics-port``, ``GET /metrics``) in Prometheus text format, and
the registry metric sinks export (Triton's ``nv_*`` families plus every registered collector)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tritonx._core.metrics import TritonMetrics, render_registry

REGISTRY_KEY = web.AppKey("registry", CollectorRegistry)
CONTENT_TYPE = "text/plain; charset=utf-8"


class _Families:
    """A collector yielding what a function returns (adapts renderers to a registry)."""

    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self.collect = collect


def _triton_families(triton: TritonMetrics) -> Iterator[Metric]:
    """Triton's families as prometheus_client metrics, keeping Triton's sample names (the
    text parser would add ``_total`` to counters, which Triton's names do not carry)."""
    for family in text_string_to_metric_families(triton.render()):
        if family.type == "counter":
            family.samples = [
                s._replace(name=family.name) if s.name == f"{family.name}_total" else s
                for s in family.samples
            ]
        yield family


def export_registry(triton: TritonMetrics, registry: CollectorRegistry) -> CollectorRegistry:
    """A registry holding everything ``/metrics`` serves, for metric sinks to export."""
    out = CollectorRegistry(auto_describe=False)
    out.register(_Families(lambda: _triton_families(triton)))
    out.register(_Families(registry.collect))
    return out


def metrics_text(triton: TritonMetrics, registry: CollectorRegistry) -> str:
    """What ``GET /metrics`` answers: Triton's families, then every collector of
    ``registry`` (also lent to frontends: ``ServerHandle.metrics_text``)."""
    return triton.render() + render_registry(registry)


def make_metrics_app(triton: TritonMetrics, registry: CollectorRegistry) -> web.Application:
    """An app serving Triton's metrics and ``registry`` at ``/metrics`` (and ``/metrics/``).

    As in Triton, other paths answer 200 with an empty body and non-GET methods 405.
    """
    app = web.Application()
    app[REGISTRY_KEY] = registry

    async def metrics(request: web.Request) -> web.Response:
        if request.method != "GET":
            return web.json_response({"error": "Method Not Allowed"}, status=405)
        if request.path not in ("/metrics", "/metrics/"):
            return web.Response(body=b"")
        body = metrics_text(triton, request.app[REGISTRY_KEY]).encode()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    app.router.add_route("*", "/{tail:.*}", metrics)
    return app
