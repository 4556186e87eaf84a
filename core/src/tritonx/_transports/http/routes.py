"""The HTTP endpoints, routed as Triton's ``HTTPAPIServer::Handle`` does.

One catch-all aiohttp route dispatches on the raw URL path (query strings are ignored, as in
Triton): exact paths first, then the model and repository patterns. Unknown paths answer 404
``{"error":"Not Found"}`` and known paths with a wrong method 405
``{"error":"Method Not Allowed"}``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import unquote

import orjson
from aiohttp import web

from tritonx._dataplane.dataplane import DataPlane
from tritonx._dataplane.stats import Duration, ModelStats
from tritonx._runtime.security import Restrictions
from tritonx._transports.http.body import read_body
from tritonx._transports.http.decode import (
    HEADER_LENGTH,
    OFFLOAD_JSON_BYTES,
    decode_body,
    parse_json_header,
)
from tritonx._transports.http.encode import answer_encoder, heavy_response, response_encoding
from tritonx._transports.http.errors import (
    JSON_CONTENT_TYPE,
    BodyError,
    error_response,
    internal,
    method_not_allowed,
    not_found,
    response_for,
)
from tritonx._transports.http.exchange import RequestHeaders, send_traced
from tritonx._transports.http.generate import generate
from tritonx._transports.http.keys import (
    DATAPLANE_KEY,
    FORWARD_KEY,
    PIPELINE_KEY,
    SETTINGS_KEY,
    serving_app,
)
from tritonx._transports.http.observability import log_settings, trace_setting
from tritonx._transports.http.shared_memory import shared_memory_route
from tritonx.errors import Code, TritonXError, invalid_arg, unsupported
from tritonx.pipeline import Pipeline
from tritonx.types import TensorSpec
from tritonx.wire import parse_version

log = logging.getLogger("tritonx.http")

_MODEL_RE = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
    r"(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?"
)
_REPO_RE = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")
_SHM_RE = re.compile(
    r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)"
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def setup_routes(app: web.Application, restrictions: Restrictions | None = None) -> None:
    """Install the catch-all route that serves every Triton HTTP endpoint on ``app``.

    With ``restrictions`` (``--http-restricted-api``) the route first checks the header of
    the request's category; without, requests go straight to :func:`dispatch`. With
    ``http_status_page`` the status page (:mod:`tritonx._transports.http.status_page`) is routed first.
    """
    handler = restricted_dispatch(restrictions) if restrictions else dispatch
    if DATAPLANE_KEY in app and PIPELINE_KEY not in app:
        app[PIPELINE_KEY] = Pipeline(app[DATAPLANE_KEY], "http", app.get(FORWARD_KEY))
    if SETTINGS_KEY in app and app[SETTINGS_KEY].http_status_page:
        from tritonx._transports.http.status_page import add_status_routes  # GET / (tritonx only)

        add_status_routes(app, _dataplane, restrictions)
    app.router.add_route("*", "/{tail:.*}", handler)


#: Category of each model-route action (tritonserver ``HTTPAPIServer::Handle*``).
_MODEL_ACTION_CATEGORY = {
    None: "metadata",
    "ready": "health",
    "infer": "inference",
    "generate": "inference",
    "generate_stream": "inference",
    "config": "model-config",
    "stats": "statistics",
    "trace/setting": "trace",
}

_EXACT_CATEGORY = {
    "/v2": "metadata",
    "/v2/health/live": "health",
    "/v2/health/ready": "health",
    "/v2/models/stats": "statistics",
    "/v2/logging": "logging",
    "/v2/trace/setting": "trace",
}


def restricted_category(path: str) -> str | None:
    """The restricted-API category of a request path, routed as tritonserver's
    ``HTTPAPIServer::Handle`` routes it (None for a path it answers 404).

    ``/v2/repository/index`` and load/unload are ``model-repository``, ``/config`` is
    ``model-config``, model ``/ready`` is ``health``, ``/generate*`` is ``inference``, a
    versioned ``/trace/setting`` matches no handler.
    """
    category = _EXACT_CATEGORY.get(path)
    if category is not None:
        return category
    match = _MODEL_RE.fullmatch(path)
    if match is not None:
        action = match.group(3)
        if action != "trace/setting" or match.group(2) is None:
            return _MODEL_ACTION_CATEGORY[action]
        return None
    if _SHM_RE.fullmatch(path):
        return "shared-memory"
    if _REPO_RE.fullmatch(path):
        return "model-repository"
    return None


def restricted_dispatch(restrictions: Restrictions) -> Handler:
    """:func:`dispatch` behind tritonserver's ``RespondIfRestricted``: a request to a
    restricted category whose header is missing or differs answers 403
    ``{"error":"This API is restricted, expecting header '<key>'"}`` (before the method
    check, as in tritonserver)."""
    rules = {category: (key, value) for category, (key, value) in restrictions.items()}

    async def handler(request: web.Request) -> web.StreamResponse:
        category = restricted_category(request.raw_path.split("?", 1)[0])
        if category is not None:
            rule = rules.get(category)
            if rule is not None and request.headers.get(rule[0]) != rule[1]:
                refused = error_response(
                    f"This API is restricted, expecting header '{rule[0]}'", 403
                )
                if request.body_exists:
                    _close_unread(request, refused)  # don't read a refused client's body
                return refused
        return await dispatch(request)

    return handler


async def dispatch(request: web.Request) -> web.StreamResponse:
    """Route one request by its raw path; turn errors into Triton's JSON error bodies.

    A body that could not be read (:class:`BodyError`), or a compressed body left unread,
    closes the connection after the answer: nothing more of it is read or inflated (aiohttp
    would otherwise read on for its lingering time). An unread plain body is drained by
    aiohttp, so the client still reads the answer.
    """
    path = request.raw_path.split("?", 1)[0]
    if log.isEnabledFor(logging.DEBUG):  # --log-verbose 1
        log.debug("HTTP request: %s %s", request.method, path)
    try:
        exact = _EXACT.get(path)
        if exact is not None:
            response = await exact(request)
        else:
            match = _MODEL_RE.fullmatch(path)
            if match is not None:
                response = await _model_route(request, match)
            else:
                match = _REPO_RE.fullmatch(path)
                if match is not None:
                    response = await _repository_route(request, match)
                elif (match := _SHM_RE.fullmatch(path)) is not None:
                    response = await shared_memory_route(
                        request,
                        _dataplane(request).shared_memory,
                        match.group(1),
                        unquote(match.group(2) or ""),
                        match.group(3),
                        _read_json_body,
                    )
                else:
                    response = not_found()
    except BodyError as exc:
        response = error_response(exc.message, exc.status)
        _close_unread(request, response)
        return response
    except TritonXError as exc:
        response = response_for(exc)
    except Exception as exc:  # a bug: answer 500 and keep serving
        log.exception("unexpected error handling %s %s", request.method, path)
        response = error_response(str(exc) or type(exc).__name__, 500)
    if not request.content.is_eof() and request.headers.get("Content-Encoding", "") not in (
        "",
        "identity",
    ):
        _close_unread(request, response)
    return response


def _close_unread(request: web.Request, response: web.StreamResponse) -> None:
    """Close the connection after ``response`` without reading the rest of the body."""
    response.force_close()
    close_after_response = getattr(request.protocol, "close_after_response", None)
    if close_after_response is not None:  # tritonx's listener: it owns keep-alive
        close_after_response()


# ---------------------------------------------------------------------------------- helpers


def _dataplane(request: web.Request) -> DataPlane:
    return serving_app(request)[DATAPLANE_KEY]


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type=JSON_CONTENT_TYPE)


async def _read_json(request: web.Request) -> Any:
    """A JSON control body (repository APIs); None when the body is empty."""
    settings = serving_app(request)[SETTINGS_KEY]
    limit = settings.http_max_input_size
    if request.content_length is not None and request.content_length > limit:
        raise BodyError(
            f"request JSON size of {request.content_length} bytes exceeds the maximum allowed "
            f"input size of {limit} bytes. Use --http-max-input-size to increase the limit."
        )
    body = await read_body(request, limit, settings.http_body_timeout_secs)
    if not body:
        return None
    if len(body) > OFFLOAD_JSON_BYTES:
        return await asyncio.to_thread(parse_json_header, body, len(body), limit)
    return parse_json_header(body, len(body), limit)


async def _read_json_body(request: web.Request) -> Any:
    """A JSON control body that must be there (an empty one fails to parse, as in Triton:
    shared-memory register, trace and log settings updates)."""
    doc = await _read_json(request)
    if doc is None:
        parse_json_header(b"", 0, serving_app(request)[SETTINGS_KEY].http_max_input_size)
    return doc


# ---------------------------------------------------------------------------------- server


async def health_live(request: web.Request) -> web.StreamResponse:
    """``GET /v2/health/live``: 200 or 400, empty body."""
    if request.method != "GET":
        return method_not_allowed()
    return web.Response(status=200 if _dataplane(request).server_live() else 400)


async def health_ready(request: web.Request) -> web.StreamResponse:
    """``GET /v2/health/ready``: 200 or 400, empty body."""
    if request.method != "GET":
        return method_not_allowed()
    ready = await _dataplane(request).server_ready_probed()
    return web.Response(status=200 if ready else 400)


async def server_metadata(request: web.Request) -> web.StreamResponse:
    """``GET /v2``: name, version and extensions."""
    if request.method != "GET":
        return method_not_allowed()
    md = _dataplane(request).server_metadata()
    return _json({"name": md.name, "version": md.version, "extensions": list(md.extensions)})


async def all_stats(request: web.Request) -> web.StreamResponse:
    """``GET /v2/models/stats``: statistics of every ready model version."""
    if request.method != "GET":
        return method_not_allowed()
    return _json({"model_stats": _stats_json(_dataplane(request).model_statistics())})


async def global_trace_setting(request: web.Request) -> web.StreamResponse:
    """``GET|POST /v2/trace/setting``: the global trace settings (trace extension)."""
    return await _trace_setting(request, "")


async def _trace_setting(request: web.Request, model: str) -> web.StreamResponse:
    if request.method not in ("GET", "POST"):
        return method_not_allowed()
    dp = _dataplane(request)
    if model and not dp.model_ready(model):  # checked before the body is read, as Triton
        raise invalid_arg(f"Request for unknown model : {model}")
    update = await _read_json_body(request) if request.method == "POST" else None
    return _json(trace_setting(dp, model, update))


async def logging_settings(request: web.Request) -> web.StreamResponse:
    """``GET|POST /v2/logging``: the server's log settings (logging extension)."""
    if request.method not in ("GET", "POST"):
        return method_not_allowed()
    update = await _read_json_body(request) if request.method == "POST" else None
    return _json(log_settings(update))


_EXACT: dict[str, Handler] = {
    "/v2": server_metadata,
    "/v2/health/live": health_live,
    "/v2/health/ready": health_ready,
    "/v2/models/stats": all_stats,
    "/v2/trace/setting": global_trace_setting,
    "/v2/logging": logging_settings,
}


# ---------------------------------------------------------------------------------- models


async def _model_route(request: web.Request, match: re.Match[str]) -> web.StreamResponse:
    model = unquote(match.group(1))
    version_str = match.group(2) or ""
    action = match.group(3)
    if action == "infer":
        return await infer(request, model, version_str)
    if action in ("generate", "generate_stream"):
        return await generate(request, model, version_str, streaming=action == "generate_stream")
    if action == "trace/setting" and match.group(2) is None:
        return await _trace_setting(request, model)
    if action == "trace/setting":
        return not_found()
    if request.method != "GET":
        return method_not_allowed()
    dp = _dataplane(request)
    if action == "ready":
        try:
            version = parse_version(version_str)
        except TritonXError as exc:
            return response_for(exc)
        if await dp.model_ready_probed(model, version):
            return web.Response(status=200)
        return error_response("Model version not ready", 400)
    version = parse_version(version_str)
    pipeline = serving_app(request)[PIPELINE_KEY]
    if action is None:
        md = await pipeline.loaded(lambda: dp.model_metadata(model, version))
        return _json(
            {
                "name": md.name,
                "versions": list(md.versions),
                "platform": md.platform,
                "inputs": _specs(md.inputs),
                "outputs": _specs(md.outputs),
            }
        )
    if action == "config":
        config = await pipeline.loaded(lambda: dp.model_config(model, version))
        return _json(config.to_json_dict())
    # stats
    return _json({"model_stats": _stats_json(dp.model_statistics(model, version))})


def _specs(specs: Sequence[TensorSpec]) -> list[dict[str, Any]]:
    return [{"name": s.name, "datatype": s.datatype, "shape": list(s.shape)} for s in specs]


def _duration(d: Duration) -> dict[str, int]:
    return {"count": d.count, "ns": d.ns}


def _stats_json(rows: list[tuple[str, int, ModelStats]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, version, s in rows:
        out.append(
            {
                "name": name,
                "version": str(version),
                "last_inference": s.last_inference_ms,
                "inference_count": s.inference_count,
                "execution_count": s.execution_count,
                "inference_stats": {
                    "success": _duration(s.success),
                    "fail": _duration(s.fail),
                    "queue": _duration(s.queue),
                    "compute_input": _duration(s.compute_input),
                    "compute_infer": _duration(s.compute_infer),
                    "compute_output": _duration(s.compute_output),
                    "cache_hit": _duration(s.cache_hit),
                    "cache_miss": _duration(s.cache_miss),
                },
                "response_stats": {},
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": _duration(b.compute_input),
                        "compute_infer": _duration(b.compute_infer),
                        "compute_output": _duration(b.compute_output),
                    }
                    for size, b in sorted(s.batch_stats.items())
                ],
                "memory_usage": [],
            }
        )
    return out


# ---------------------------------------------------------------------------------- infer


async def infer(request: web.Request, model: str, version_str: str) -> web.StreamResponse:
    """``POST /v2/models/<m>[/versions/<v>]/infer``: JSON and binary-extension inference."""
    if request.method != "POST":
        return method_not_allowed()
    recv_start = time.perf_counter_ns()
    app = serving_app(request)
    pipeline = app[PIPELINE_KEY]
    settings = app[SETTINGS_KEY]
    limit = settings.http_max_input_size
    served, version = await pipeline.resolve_loaded(model, version_str)
    body = await read_body(request, limit, settings.http_body_timeout_secs)
    recv_end = time.perf_counter_ns()
    headers = request.headers
    decoded = await pipeline.decode(
        decode_body,
        body,
        headers.get(HEADER_LENGTH),
        served.config,
        model,
        version,
        limit,
        pipeline.dataplane.shared_memory,
    )
    del body  # the inputs keep what they need of it
    # A client that disconnects before its answer cancels the request: the handler is
    # cancelled, and the pipeline cancels the request (dropped if it has not run yet).
    on_lost = getattr(request.protocol, "on_lost", None)
    if on_lost is not None and not on_lost(request.task.cancel):
        decoded.request.cancel()  # gone already (while the body was read or decoded)
    try:
        call = pipeline.admit(served, decoded, RequestHeaders(request), (recv_start, recv_end))
        encoding = response_encoding(headers.get("Accept-Encoding"))
        payload, answer_headers = await call.run(
            answer_encoder(decoded, served.config, served.labels, encoding),
            heavy_response,
        )
    finally:
        if on_lost is not None:
            on_lost(None)
    answer_headers.update(call.reply_headers)
    reply = web.Response(body=payload, headers=answer_headers)
    if call.trace is not None:
        try:
            await send_traced(request, reply, call)
        finally:
            call.finish()
    return reply


# ---------------------------------------------------------------------------------- repository


async def _repository_route(request: web.Request, match: re.Match[str]) -> web.StreamResponse:
    if request.method != "POST":
        return method_not_allowed()
    if match.group(1):
        raise unsupported("'repository_name' specification is not supported")
    dp = _dataplane(request)
    if match.group(2) == "index":
        doc = await _read_json(request)
        ready = False
        if isinstance(doc, dict) and "ready" in doc:
            if not isinstance(doc["ready"], bool):
                raise invalid_arg("Invalid value for 'ready': expected a boolean")
            ready = doc["ready"]
        rows = []
        for entry in dp.repository_index(ready):
            row: dict[str, Any] = {"name": entry.name}
            if entry.version is not None:
                row["version"] = str(entry.version)
            if entry.state is not None:
                row["state"] = entry.state.value
            if entry.reason:
                row["reason"] = entry.reason
            if entry.memory_bytes is not None:  # tritonx only: --model-load-on-demand
                row["memory_bytes"] = entry.memory_bytes
            rows.append(row)
        return _json(rows)
    model = unquote(match.group(3))
    doc = await _read_json(request)
    params = doc.get("parameters") if isinstance(doc, dict) else None
    if params is not None and not isinstance(params, dict):
        raise internal("attempt to access JSON non-object as object")
    if match.group(4) == "load":
        load_params: dict[str, object] = {}
        for key, value in (params or {}).items():
            if not isinstance(value, str):
                raise internal("attempt to access JSON non-string as string")
            load_params[key] = value
        await dp.load_model(model, load_params)
        return web.Response(status=200)
    unload_dependents = False
    if params and "unload_dependents" in params:
        value = params["unload_dependents"]
        if not isinstance(value, bool):
            raise TritonXError(
                "Unable to parse 'unload_dependents': attempt to access JSON non-boolean as "
                "boolean",
                Code.INTERNAL,
            )
        unload_dependents = value
    await dp.unload_model(model, unload_dependents)
    return web.Response(status=200)
