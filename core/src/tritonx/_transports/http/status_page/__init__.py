"""The live status page: ``GET /`` on the HTTP port (tritonx only; ``--http-status-page``).

The page (``static/index.html``, ``status.js``, ``status.css``, shipped in this package: no
external CDN) polls ``GET /status/data`` once a second and draws, without reloading, per model
version: the request rate, the latency (p50/p95/p99 when the server keeps latency summaries,
``--metrics-config summary_latencies=true``; else the mean of each interval) and the queue
time, over the last five minutes; the table of every model with its state, reason and config
summary; the recent load/unload events; with ``--model-load-on-demand``, what each loaded
model added to the server's memory and the budgets' use (``residency``). Everything comes
from the server's own statistics (:meth:`DataPlane.loaded_versions`,
:meth:`DataPlane.repository_index`, :attr:`DataPlane.residency`).

Read-only: only GET/HEAD. Restricted API (``--http-restricted-api``): the page and its assets
are in the ``metadata`` category; ``/status/data`` shows metadata, the repository index,
config summaries and statistics, so it needs the header of each of ``metadata``,
``model-repository``, ``model-config`` and ``statistics`` that is restricted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

import orjson
from aiohttp import web

from tritonx._dataplane.dataplane import DataPlane, tritonx_version
from tritonx._runtime.security import Restrictions
from tritonx._transports.http.errors import JSON_CONTENT_TYPE, error_response
from tritonx.config import ModelConfig
from tritonx.errors import TritonXError

#: Restricted-API categories of the page and its assets.
PAGE_CATEGORIES: tuple[str, ...] = ("metadata",)
#: Restricted-API categories of ``/status/data`` (it shows what each of them guards).
DATA_CATEGORIES: tuple[str, ...] = ("metadata", "model-repository", "model-config", "statistics")

DATA_PATH = "/status/data"
_ASSETS = {
    "status.js": "application/javascript",
    "status.css": "text/css",
}
_QUANTILES = (0.5, 0.95, 0.99)
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def _refused(
    request: web.Request, restrictions: Restrictions, categories: tuple[str, ...]
) -> web.Response | None:
    """tritonserver's restricted-API answer for the first category whose header is missing."""
    for category in categories:
        rule = restrictions.get(category)
        if rule is not None and request.headers.get(rule[0]) != rule[1]:
            return error_response(f"This API is restricted, expecting header '{rule[0]}'", 403)
    return None


def add_status_routes(
    app: web.Application,
    dataplane_of: Callable[[web.Request], DataPlane],
    restrictions: Restrictions | None,
) -> None:
    """Register ``GET /``, ``GET /status/data`` and ``GET /status/<asset>`` on ``app``
    (before the catch-all route). ``dataplane_of(request)`` returns the request's data plane.
    """
    rules: Restrictions = restrictions or {}

    async def page(request: web.Request) -> web.StreamResponse:
        refused = _refused(request, rules, PAGE_CATEGORIES)
        if refused is not None:
            return refused
        return web.Response(
            body=_asset("index.html"),
            content_type="text/html",
            charset="utf-8",
            headers=_SECURITY_HEADERS,
        )

    async def asset(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in _ASSETS:
            return error_response("Not Found", 404)
        refused = _refused(request, rules, PAGE_CATEGORIES)
        if refused is not None:
            return refused
        return web.Response(
            body=_asset(name), content_type=_ASSETS[name], headers=_SECURITY_HEADERS
        )

    async def data(request: web.Request) -> web.StreamResponse:
        refused = _refused(request, rules, DATA_CATEGORIES)
        if refused is not None:
            return refused
        return web.Response(
            body=orjson.dumps(status_snapshot(dataplane_of(request))),
            content_type=JSON_CONTENT_TYPE,
            headers={"Cache-Control": "no-store"},
        )

    app.router.add_get("/", page)
    app.router.add_get(DATA_PATH, data)
    app.router.add_get("/status/{name}", asset)


# ---------------------------------------------------------------------------------- data


def config_summary(config: ModelConfig) -> dict[str, Any]:
    """What the page shows of a version's config: platform/backend, batching, instances."""
    raw = config.raw
    instances = [
        f"{group.count or 1}x {_KINDS.get(group.kind, 'AUTO')}" for group in raw.instance_group
    ]
    scheduler = "default"
    if raw.HasField("dynamic_batching"):
        db = raw.dynamic_batching
        scheduler = "dynamic batching"
        details = []
        if db.max_queue_delay_microseconds:
            details.append(f"delay {db.max_queue_delay_microseconds} µs")
        if db.preferred_batch_size:
            details.append("preferred " + ",".join(str(s) for s in db.preferred_batch_size))
        if details:
            scheduler += f" ({'; '.join(details)})"
    elif raw.HasField("sequence_batching"):
        scheduler = "sequence batching"
    elif raw.HasField("ensemble_scheduling"):
        scheduler = "ensemble"
    return {
        "platform": config.platform,
        "backend": config.backend,
        "max_batch_size": config.max_batch_size,
        "instances": ", ".join(instances) or "-",
        "scheduler": scheduler,
        "decoupled": config.decoupled,
        "inputs": [f"{i.name} {_dtype(i.datatype)} {list(i.dims)}" for i in config.inputs],
        "outputs": [f"{o.name} {_dtype(o.datatype)} {list(o.dims)}" for o in config.outputs],
    }


_KINDS = {0: "AUTO", 1: "GPU", 2: "CPU", 3: "MODEL"}


def _dtype(datatype: Any) -> str:
    return str(getattr(datatype, "value", datatype))


def _quantiles(window: Any) -> list[float | None] | None:
    if window is None:
        return None
    values = window.quantiles(_QUANTILES, time.monotonic_ns())
    return [None if math.isnan(v) else v / 1000 for _, v in values]  # µs -> ms


def _residency(dp: DataPlane) -> dict[str, Any] | None:
    """Loads on demand and the budgets (None without ``--model-load-on-demand``)."""
    r = dp.residency
    if r is None:
        return None
    return {
        "loaded_models": r.loaded_count(),
        "max_loaded_models": r.max_models,
        "memory_used_bytes": r.memory_used() if r.memory_budget else None,
        "memory_budget_bytes": r.memory_budget,
        "on_demand_loads": sum(r.loads.values()),
        "evictions": sum(r.evictions.values()),
    }


def status_snapshot(dp: DataPlane) -> dict[str, Any]:
    """The JSON the page polls: server, every model version, cumulative statistics (the
    page differentiates them), latency quantiles when kept, and recent model events."""
    now = time.time()
    md = dp.server_metadata()
    stats: dict[tuple[str, int], dict[str, Any]] = {}
    summaries = False
    for loaded in dp.loaded_versions():
        s = loaded.stats
        lat = s.latency
        request_q = _quantiles(lat.request if lat is not None else None)
        queue_q = _quantiles(lat.queue if lat is not None else None)
        summaries = summaries or request_q is not None
        stats[(loaded.name, loaded.version)] = {
            "success_count": s.success.count,
            "success_ms": s.success.ns / 1e6,
            "fail_count": s.fail.count,
            "queue_count": s.queue.count,
            "queue_ms": s.queue.ns / 1e6,
            "compute_ms": s.compute_infer.ns / 1e6,
            "inference_count": s.inference_count,
            "execution_count": s.execution_count,
            "pending": loaded.pending_count,
            "restarts": loaded.restarts,
            "latency_quantiles_ms": request_q,
            "queue_quantiles_ms": queue_q,
        }
    models: list[dict[str, Any]] = []
    for entry in dp.repository_index():
        row: dict[str, Any] = {
            "name": entry.name,
            "version": entry.version,
            "state": entry.state.value if entry.state is not None else "UNKNOWN",
            "reason": entry.reason,
            "config": None,
            "stats": None,
            "memory_bytes": entry.memory_bytes,
        }
        if entry.version is not None:
            row["stats"] = stats.get((entry.name, entry.version))
            if row["state"] == "READY":
                try:
                    row["config"] = config_summary(dp.model_config(entry.name, entry.version))
                except TritonXError:
                    pass  # unloaded between the index and this call
        models.append(row)
    return {
        "server": {
            "name": md.name,
            "version": md.version,
            "tritonx_version": tritonx_version(),
            "started_at": dp.started_at,
            "uptime_s": now - dp.started_at,
            "live": dp.server_live(),
            "ready": dp.server_ready(),
            "latency_summaries": summaries,
        },
        "time": now,
        "models": models,
        "residency": _residency(dp),
        "events": [
            {
                "time": t,
                "model": e.model_name,
                "version": e.version,
                "state": e.state.value,
                "reason": e.reason,
            }
            for t, e in dp.recent_events
        ],
    }
