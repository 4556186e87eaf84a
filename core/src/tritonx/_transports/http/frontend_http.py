"""What the server lends frontend plugins for HTTP (:class:`tritonx.frontend.FrontendHTTP`):
Triton's KServe v2 endpoints under a frontend's own paths, and listeners with the HTTP port's
limits. Made by :class:`tritonx.server.Server` when it starts (the one module that imports
this), so that the public modules import no transport."""

from __future__ import annotations

import socket
import ssl
from dataclasses import replace

from aiohttp import web
from prometheus_client import CollectorRegistry

from tritonx._core.metrics import TritonMetrics
from tritonx._core.metrics_app import metrics_text
from tritonx._dataplane.dataplane import DataPlane
from tritonx._transports.http.app import make_app
from tritonx._transports.http.keys import SERVING_APP
from tritonx._transports.http.listener import HTTPLimits, serve_limited
from tritonx._transports.http.routes import dispatch
from tritonx.config import ServerSettings
from tritonx.frontend import KServeHTTP


class ServerFrontendHTTP:
    """:class:`tritonx.frontend.FrontendHTTP` over the server's data plane and settings."""

    __slots__ = ("_dataplane", "_kserve", "_metrics", "_settings", "listeners")

    def __init__(self, dataplane: DataPlane, settings: ServerSettings, listeners: int = 1) -> None:
        self._dataplane = dataplane
        self._settings = settings
        #: the server's HTTP listeners (its own and the frontends'), which share descriptors
        self.listeners = listeners
        self._kserve: KServeHTTP | None = None
        self._metrics: tuple[TritonMetrics, CollectorRegistry] | None = None

    def metrics_source(self, triton: TritonMetrics, registry: CollectorRegistry) -> None:
        """What :meth:`metrics_text` renders (the server sets it once it has made them)."""
        self._metrics = (triton, registry)

    def metrics_text(self) -> str:
        """The Prometheus text ``GET /metrics`` answers on the metrics port."""
        if self._metrics is None:
            raise RuntimeError("the server's metrics are made when it starts")
        return metrics_text(*self._metrics)

    def kserve(self) -> KServeHTTP:
        """One :class:`KServeHTTP` per server, over an application of the HTTP port's routes
        without ``--http-restricted-api`` (the frontend decides what it exposes) and without
        ``--http-header-forward-pattern`` (Triton's SageMaker and Vertex AI servers forward
        no headers)."""
        if self._kserve is None:
            settings = replace(
                self._settings, http_restricted_api={}, http_header_forward_pattern=""
            )
            app = make_app(self._dataplane, settings)

            async def serve(request: web.Request) -> web.StreamResponse:
                request[SERVING_APP] = app
                return await dispatch(request)

            self._kserve = KServeHTTP(serve)
        return self._kserve

    async def listen(
        self, app: web.Application, sock: socket.socket, ssl_context: ssl.SSLContext | None
    ) -> web.AppRunner:
        """Serve ``app`` on ``sock`` behind the HTTP port's limits (its share of them)."""
        limits = HTTPLimits.from_settings(self._settings, self.listeners)
        return await serve_limited(app, sock, limits, ssl_context=ssl_context)


__all__ = ["ServerFrontendHTTP"]
