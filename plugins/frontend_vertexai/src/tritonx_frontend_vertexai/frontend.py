"""The frontend ``vertex_ai``: Triton's Vertex AI server (``src/vertex_ai_server.cc``) on a
listener of its own, port 8080 by default.

- ``AIP_HEALTH_ROUTE`` (a path, matched whole as a regular expression, as Triton does):
  the server's readiness, as ``GET /v2/health/ready`` answers it (200, or 400 when not ready).
- ``AIP_PREDICT_ROUTE``: a KServe v2 inference request (JSON, or the binary form whose JSON
  header size is in the content type, :mod:`.binary`) for the default model; with the
  ``X-Vertex-Ai-Triton-Redirect`` header, the v2 endpoint it names (:mod:`.redirect`).
- Any other path: 400 with an empty body.

Both variables must be set (Vertex AI sets them); the server does not start without them,
with Triton's messages. The default model is ``default_model`` (``--vertex-ai-default-model``)
when set, which must be loaded when the frontend starts, else the only model loaded.

Requests are served by the server's own KServe v2 HTTP endpoints
(:meth:`tritonx.ServerHandle.kserve_http`): the same validation, limits
(``--http-max-input-size``, the body deadline), statistics and error bodies as the HTTP port.
``--http-restricted-api`` applies here as on Triton's Vertex AI port: each endpoint's
category is checked before it is served.
"""

from __future__ import annotations

import json
import logging
import os
import re
import ssl
from collections.abc import Mapping
from typing import ClassVar
from urllib.parse import quote

import orjson
from aiohttp import web

import tritonx
from tritonx.errors import Code, TritonXError
from tritonx_frontend_vertexai.binary import json_header_size
from tritonx_frontend_vertexai.redirect import REDIRECT_HEADER, RedirectRefused, route_redirect

log = logging.getLogger("tritonx.frontend.vertex_ai")

#: The frontend's own ``--frontend-config vertex_ai,...`` keys (the CLI maps Triton's
#: ``--vertex-ai-*`` flags onto them).
CONFIG_KEYS: Mapping[str, str] = {
    "thread_count": (
        "--vertex-ai-thread-count: a positive integer, accepted for compatibility (requests "
        "are served on the server's event loop; default 8)"
    ),
    "default_model": (
        "--vertex-ai-default-model: the model the predict route infers without a redirect "
        "(default: the only model loaded)"
    ),
}

#: Headers of the client's request the KServe endpoints do not get: Triton's Vertex AI
#: server reads the binary header size from the content type only, and answers uncompressed.
_DROPPED_HEADERS = ("Inference-Header-Content-Length", "Accept-Encoding")


def route_pattern(variable: str, environ: Mapping[str, str]) -> re.Pattern[str]:
    """The route in environment ``variable``, compiled (Triton matches the whole path
    against it as a regular expression).

    :raises TritonXError: INVALID_ARG when it is unset or empty (Triton's messages) or not
        a regular expression.
    """
    value = environ.get(variable, "")
    if not value:
        # Triton's message names the predict route "API_PREDICT_ROUTE" (sic)
        shown = "API_PREDICT_ROUTE" if variable == "AIP_PREDICT_ROUTE" else variable
        raise TritonXError(f"{shown} is not defined for Vertex AI endpoint", Code.INVALID_ARG)
    try:
        return re.compile(value)
    except (re.error, OverflowError) as exc:
        raise TritonXError(
            f"{variable} '{value}' is not a valid regular expression: {exc}", Code.INVALID_ARG
        ) from None


def positive_int(key: str, text: str) -> int:
    """``text`` as a positive integer; PluginError naming ``--frontend-config
    vertex_ai,<key>`` otherwise."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise tritonx.PluginError(
            f"--frontend-config vertex_ai,{key}: must be a positive integer, got '{text}'"
        )
    return value


def choose_default_model(configured: str, ready: list[str]) -> str:
    """The default model, as Triton's ``VertexAiAPIServer::Create`` chooses it.

    :param configured: ``--vertex-ai-default-model`` (``""``: not set).
    :param ready: the name of each ready model version (the ready repository index).
    :raises TritonXError: INVALID_ARG with Triton's message when no model is configured and
        there is not exactly one, or the configured one is not loaded.
    """
    if not configured:
        if len(ready) != 1:
            raise TritonXError(
                "Expect the model repository contains only a single model if default model "
                "is not specified",
                Code.INVALID_ARG,
            )
        return ready[0]
    if configured not in ready:
        raise TritonXError(f"Expect the default model '{configured}' is loaded", Code.INVALID_ARG)
    return configured


def error_json(message: str, status: int) -> web.Response:
    """Triton's error body: ``{"error": "<message>"}``. A message quoting undecodable bytes
    of the request (lone surrogates) shows them escaped (``\\udcff``)."""
    try:
        body = orjson.dumps({"error": message})
    except TypeError:  # (orjson refuses lone surrogates; json escapes them)
        body = json.dumps({"error": message}, separators=(",", ":")).encode()
    return web.Response(body=body, status=status, content_type="application/json")


class VertexAIFrontend(tritonx.AiohttpFrontend):
    """Triton's Vertex AI serving contract (see the module docstring).

    :ivar predict_route: ``AIP_PREDICT_ROUTE``, compiled.
    :ivar health_route: ``AIP_HEALTH_ROUTE``, compiled.
    :ivar default_model: the model the predict route infers (chosen at :meth:`start`).
    """

    name = "vertex_ai"
    title = "Vertex AI frontend"
    default_port = 8080
    config_keys: ClassVar[Mapping[str, str]] = CONFIG_KEYS

    def __init__(
        self,
        server: tritonx.ServerHandle,
        settings: tritonx.ServerSettings,
        config: Mapping[str, str],
    ) -> None:
        super().__init__(server, settings, config)
        positive_int("thread_count", self.config.get("thread_count", "8"))  # checked only
        self.configured_model = self.config.get("default_model", "")
        self.predict_route = route_pattern("AIP_PREDICT_ROUTE", os.environ)
        self.health_route = route_pattern("AIP_HEALTH_ROUTE", os.environ)
        self.default_model = ""
        self._infer_path = ""
        self._restrictions = dict(settings.http_restricted_api)

    async def start(self, address: str, port: int, ssl_context: ssl.SSLContext | None) -> str:
        """Choose the default model among the models loaded, then listen; logs Triton's
        ``Started Vertex AI HTTPService at <address>:<port>``."""
        ready = [row.name for row in self.server.repository_index(ready_only=True)]
        self.default_model = choose_default_model(self.configured_model, ready)
        self._infer_path = f"/v2/models/{quote(self.default_model, safe='')}/infer"
        url = await super().start(address, port, ssl_context)
        log.info("Started Vertex AI HTTPService at %s:%s", address, url.rsplit(":", 1)[1])
        return url

    def make_app(self) -> web.Application:
        """One catch-all route: the paths are the environment's, matched as Triton does."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        """Route a request by its raw path (no query): the health route, the predict route
        (with or without a redirect), else 400."""
        path = request.rel_url.raw_path
        if self.health_route.fullmatch(path):
            return await self._kserve(request, "/v2/health/ready", "health")
        if self.predict_route.fullmatch(path):
            value = request.headers.get(REDIRECT_HEADER)
            if value is None:
                return await self._infer(request, self._infer_path)
            return await self._redirect(request, value)
        return self._refuse(request, web.Response(status=400))

    async def _redirect(self, request: web.Request, value: str) -> web.StreamResponse:
        if request.method != "POST":  # Vertex AI sends POST only
            return self._refuse(request, web.Response(status=405))
        try:
            target = route_redirect(value)
        except RedirectRefused as exc:
            return self._refuse(request, error_json(str(exc), 400))
        if target.action == "metrics":
            return self._refuse(request, self._metrics())
        if target.action == "forbidden":
            return self._refuse(request, web.Response(status=403))
        if target.action == "unknown":
            return self._refuse(request, web.Response(status=400))
        if target.category == "inference":
            return await self._infer(request, target.path)
        if target.method != request.method:
            request = request.clone(method=target.method)
        return await self._kserve(request, target.path, target.category)

    async def _infer(self, request: web.Request, path: str) -> web.StreamResponse:
        """Inference at ``path``: the binary header size from the content type, the answer
        uncompressed."""
        refused = self._restricted(request, "inference")
        if refused is not None:
            return refused
        if request.method == "POST":
            try:
                # a compressed body's length is not the inflated one: the endpoint checks
                # the size against the body it inflates
                encoding = request.headers.get("Content-Encoding", "").strip().lower()
                length = request.content_length if encoding in ("", "identity") else None
                size = json_header_size(request.headers.get("Content-Type"), length)
            except TritonXError as exc:
                return self._refuse(request, error_json(str(exc), 400))
        else:
            size = None  # the endpoint answers 405
        headers = {"Inference-Header-Content-Length": str(size)} if size is not None else None
        return await self._handed(request, path, headers)

    async def _kserve(
        self, request: web.Request, path: str, category: str | None
    ) -> web.StreamResponse:
        refused = self._restricted(request, category)
        if refused is not None:
            return refused
        return await self._handed(request, path, None)

    async def _handed(
        self, request: web.Request, path: str, headers: Mapping[str, str] | None
    ) -> web.StreamResponse:
        """``request`` served by the server's KServe endpoint at ``path``, without the
        client's headers that Triton's Vertex AI server does not read."""
        if any(name in request.headers for name in _DROPPED_HEADERS):
            kept = request.headers.copy()
            for name in _DROPPED_HEADERS:
                kept.popall(name, None)
            request = request.clone(headers=kept)
        return await self.server.kserve_http().handle(request, path, headers=headers)

    def _restricted(self, request: web.Request, category: str | None) -> web.Response | None:
        """403 as tritonserver's ``RespondIfRestricted`` when ``category`` is restricted
        (``--http-restricted-api``) and the request lacks its header and value."""
        if category is None:
            return None
        rule = self._restrictions.get(category)
        if rule is None or request.headers.get(rule[0]) == rule[1]:
            return None
        message = f"This API is restricted, expecting header '{rule[0]}'"
        return self._refuse(request, error_json(message, 403))

    def _metrics(self) -> web.Response:
        """What the metrics port's ``GET /metrics`` answers: Triton's ``nv_*`` families and
        every registered collector (Triton's ``metrics`` redirect answers 400 when metrics
        are off)."""
        if not self.settings.allow_metrics:
            return web.Response(status=400)
        body = self.server.metrics_text().encode()
        return web.Response(body=body, headers={"Content-Type": "text/plain; charset=utf-8"})

    @staticmethod
    def _refuse(request: web.Request, response: web.Response) -> web.Response:
        """``response`` to a request whose body is not read. aiohttp drains a plain body after
        it (bounded by its lingering time), as on the HTTP port; for a compressed one the
        connection is closed after the answer, so that nothing more of it is read or
        inflated."""
        if request.body_exists and not request.content.is_eof():
            encoding = request.headers.get("Content-Encoding", "").strip().lower()
            if encoding not in ("", "identity"):
                response.force_close()
                # the server's listener (the HTTP port's): it owns keep-alive and lingering
                close_after_response = getattr(request.protocol, "close_after_response", None)
                if close_after_response is not None:
                    close_after_response()
        return response


__all__ = ["CONFIG_KEYS", "VertexAIFrontend", "choose_default_model", "route_pattern"]
