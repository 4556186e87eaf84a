"""Frontends: protocols a plugin serves beside the built-in HTTP and gRPC ones.

A distribution adds one with the ``tritonx_register_frontends`` hook. An installed frontend
starts with the server, on a listener of its own, when ``--frontend-config <name>,...`` names
it (``<name>,allow=true`` with its defaults; ``allow=false`` keeps it off);
``address=...,port=...`` place it (default: ``--http-address`` and the frontend's
:attr:`Frontend.default_port`), and the HTTP TLS flags (``--http-use-ssl``...) apply to it. The other ``<key>=<value>`` settings are the
frontend's own (:attr:`Frontend.config_keys`): a key it does not read stops the start. It is
stopped after the models are drained, with the other listeners.

A frontend gets a :class:`~tritonx.handle.ServerHandle` (never the data plane): requests go
through :meth:`ServerHandle.pipeline`, the same per-request steps the built-in transports
take (:mod:`tritonx.pipeline`); a frontend that takes Triton's KServe v2 HTTP requests under
other paths (SageMaker's ``/invocations``, Vertex AI's predict route) hands them to
:meth:`ServerHandle.kserve_http` (:class:`KServeHTTP`). An :class:`AiohttpFrontend` listens
behind the HTTP port's connection limits (``--http-max-connections``, the header and idle
deadlines, the TLS handshake bounds). An aiohttp frontend subclasses :class:`AiohttpFrontend` and
writes only its routes::

    import tritonx
    from aiohttp import web

    class Hello(tritonx.AiohttpFrontend):
        name = "hello"
        title = "Hello frontend"
        default_port = 9100

        def make_app(self) -> web.Application:
            app = web.Application()
            app.router.add_get("/ready", self.ready)
            return app

        async def ready(self, request: web.Request) -> web.Response:
            return web.json_response({"ready": self.server.model_ready("my_model")})

    @tritonx.hookimpl
    def tritonx_register_frontends(registry):
        registry.add(Hello)
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from aiohttp import web

    from tritonx.config import ServerSettings
    from tritonx.handle import ServerHandle

#: The ``--frontend-config`` keys the core reads for every frontend.
COMMON_KEYS: Mapping[str, str] = {
    "allow": "true: start it with its defaults; false: do not start it",
    "address": "address to listen on (default: --http-address)",
    "port": "port to listen on (0: any free port)",
}


class Frontend:
    """A protocol served on a listener of its own (see the module docstring).

    :cvar name: its ``--frontend-config`` name.
    :cvar title: how the start-up log names it (``<title> at <base URL>``).
    :cvar default_port: the port it listens on unless configured.
    :cvar config_keys: the frontend's own ``--frontend-config`` keys, with a line of help each.
    :ivar server: the server's handle.
    :ivar settings: the server's settings (read-only).
    :ivar config: this frontend's own ``--frontend-config`` settings.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    default_port: ClassVar[int]
    config_keys: ClassVar[Mapping[str, str]] = {}

    def __init__(
        self, server: ServerHandle, settings: ServerSettings, config: Mapping[str, str]
    ) -> None:
        self.server = server
        self.settings = settings
        self.config = dict(config)

    async def start(self, address: str, port: int, ssl_context: ssl.SSLContext | None) -> str:
        """Bind ``address``:``port`` (0: a free port) and serve; return the base URL clients
        use (e.g. ``http://127.0.0.1:9000/v1``). Raise to stop the server's start."""
        raise NotImplementedError

    async def stop(self, timeout: float) -> None:
        """Stop accepting, let the requests in flight end for at most ``timeout`` s, close."""
        raise NotImplementedError


class AiohttpFrontend(Frontend):
    """A :class:`Frontend` that is an aiohttp application: :meth:`make_app` returns it; the
    listener, TLS and the drain at stop are this class's.

    :cvar base_path: the path its URL ends with (``/v1``).
    """

    base_path: ClassVar[str] = ""

    def __init__(
        self, server: ServerHandle, settings: ServerSettings, config: Mapping[str, str]
    ) -> None:
        super().__init__(server, settings, config)
        self._runner: web.AppRunner | None = None

    def make_app(self) -> web.Application:
        """The application serving this frontend's routes."""
        raise NotImplementedError

    async def start(self, address: str, port: int, ssl_context: ssl.SSLContext | None) -> str:
        host = address or "0.0.0.0"
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(1024)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        try:
            runner = await self.server.listen_http(self.make_app(), sock, ssl_context)
        except BaseException:
            sock.close()
            raise
        self._runner = runner
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        if ":" in shown:
            shown = f"[{shown}]"
        scheme = "https" if ssl_context is not None else "http"
        return f"{scheme}://{shown}:{sock.getsockname()[1]}{self.base_path}"

    async def stop(self, timeout: float) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        try:
            await asyncio.wait_for(runner.shutdown(), timeout)
        except TimeoutError:
            pass
        await runner.cleanup()


class KServeHTTP:
    """Triton's KServe v2 HTTP endpoints for a frontend's own routes
    (:meth:`tritonx.handle.ServerHandle.kserve_http`).

    :meth:`handle` serves a request that arrived at the frontend as if it had arrived at the
    HTTP port under another path: the same handlers, JSON and binary bodies, validation,
    limits (``--http-max-input-size``, the body deadline), statistics, traces, and Triton's
    error bodies and status codes. It is how Triton's SageMaker and Vertex AI servers answer
    (they are its HTTP server with other routes). The HTTP port need not be open.
    ``--http-restricted-api`` is not applied: the frontend decides what it exposes; nor is
    ``--http-header-forward-pattern``: no header reaches the model, as in those servers.

    :param serve: serves a request at the path it carries, as the HTTP port's routes do
        (the server makes it).
    """

    __slots__ = ("_serve",)

    def __init__(self, serve: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> None:
        self._serve = serve

    async def handle(
        self,
        request: web.Request,
        path: str,
        *,
        headers: Mapping[str, str | None] | None = None,
    ) -> web.StreamResponse:
        """Serve ``request`` (its method, query string, body and headers, with ``headers``
        added or replacing; a value ``None`` removes that header) at ``path``, a KServe v2
        path such as ``/v2/models/m/infer``.

        Returns the response, not yet sent unless it streams (``generate_stream``), so the
        caller may still change its headers. A path no endpoint serves answers 404 as the
        HTTP port does. Call it before reading the request's body.
        """
        if not path.startswith("/"):
            raise ValueError(f"KServeHTTP.handle: path must start with '/', got {path!r}")
        query = request.query_string
        target = path + ("?" + query if query else "")
        if headers:
            from multidict import CIMultiDict

            merged = CIMultiDict(request.headers)
            for key, value in headers.items():
                if value is None:
                    merged.popall(key, None)
                else:
                    merged[key] = value
            return await self._serve(request.clone(rel_url=target, headers=merged))
        return await self._serve(request.clone(rel_url=target))


class FrontendHTTP(Protocol):
    """What the server lends frontends for HTTP (:meth:`ServerHandle.kserve_http`,
    :meth:`ServerHandle.listen_http`); the server makes it at start."""

    def kserve(self) -> KServeHTTP:
        """Triton's KServe v2 HTTP endpoints for frontends."""
        ...

    async def listen(
        self, app: web.Application, sock: socket.socket, ssl_context: ssl.SSLContext | None
    ) -> web.AppRunner:
        """Serve ``app`` on the bound socket ``sock`` behind the HTTP port's limits; the
        runner to clean up at stop."""
        ...

    def metrics_text(self) -> str:
        """The Prometheus text ``GET /metrics`` answers on the metrics port."""
        ...


__all__ = ["COMMON_KEYS", "AiohttpFrontend", "Frontend", "FrontendHTTP", "KServeHTTP"]
