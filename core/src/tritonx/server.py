"""``tritonx.Server``: the plugin manager, the models, the data plane and the listeners.

Usable in-process without any network frontend::

    async with tritonx.Server(model_repository=["./models"], allow_http=False,
                              allow_grpc=False, allow_metrics=False) as server:
        response = await server.infer(tritonx.InferenceRequest("simple", inputs={...}))
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import socket
import ssl
from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

import pluggy
from aiohttp import web

from tritonx._core.extensions import (
    PlacedFrontend,
    SinkExporter,
    build_cache,
    build_frontends,
    build_metric_sinks,
)
from tritonx._core.metrics import LoopMetrics, TritonMetrics
from tritonx._core.metrics_app import export_registry, make_metrics_app
from tritonx._core.watchdog import LoopWatchdog
from tritonx._dataplane.dataplane import DataPlane
from tritonx._dataplane.stats import ModelStats
from tritonx._runtime.plugins import collect, make_plugin_manager
from tritonx._runtime.security import open_repository_api_warnings
from tritonx._runtime.settings_check import validate_settings
from tritonx.config import ServerSettings
from tritonx.errors import Code, TritonXError
from tritonx.handle import InProcessAPI
from tritonx.types import (
    ModelEvent,
    ServerMetadata,
)

log = logging.getLogger("tritonx.server")


def _settings(settings: ServerSettings | None, overrides: dict[str, Any]) -> ServerSettings:
    settings = settings or ServerSettings()
    if not overrides:
        return settings
    known = {f.name for f in fields(ServerSettings)}
    unknown = set(overrides) - known
    if unknown:
        raise TypeError(f"unknown server settings: {', '.join(sorted(unknown))}")
    repo = overrides.get("model_repository")
    if repo is not None:
        if isinstance(repo, (str, os.PathLike)):
            repo = [repo]
        overrides["model_repository"] = tuple(os.fspath(p) for p in repo)
    for key in ("load_model", "rate_limit_resource"):
        if key in overrides and isinstance(overrides[key], str):
            overrides[key] = (overrides[key],)
        elif key in overrides:
            overrides[key] = tuple(overrides[key])
    return replace(settings, **overrides)


def check_ports_free(listeners: Sequence[tuple[str, int, bool, str]]) -> None:
    """Raise the listener's own error (UNAVAILABLE) for the first listener whose port another
    socket holds (``listeners``: address, port, SO_REUSEPORT, the error's text; port 0 picks
    a free one, unchecked)."""
    for host, port, reuse_port, taken in listeners:
        if port == 0:
            continue
        probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise TritonXError(taken, Code.UNAVAILABLE) from None
        finally:
            probe.close()


class Server(InProcessAPI):
    """A tritonx server: an async context manager that loads models and starts listeners.

    :param settings: a :class:`ServerSettings`; keyword arguments override its fields.
    :param plugin_manager: the plugin manager to use (default: one built from the installed
        plugins, honouring ``TRITONX_PLUGINS`` / ``TRITONX_DISABLE_PLUGINS``).
    """

    def __init__(
        self,
        settings: ServerSettings | None = None,
        *,
        plugin_manager: pluggy.PluginManager | None = None,
        **overrides: Any,
    ) -> None:
        self.settings = _settings(settings, overrides)
        self.plugin_manager = plugin_manager
        self._dataplane: DataPlane | None = None
        self._exporter: SinkExporter | None = None
        self._runners: list[web.AppRunner] = []
        self._grpc: Any = None
        self._watchdog: LoopWatchdog | None = None
        self._frontends: list[PlacedFrontend] = []
        #: the base URL of each started frontend plugin, by name (``tritonx.frontend``)
        self.frontend_urls: dict[str, str] = {}
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self.metrics_port: int | None = None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Server:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Check the settings (:func:`~tritonx._runtime.settings_check.validate_settings`), register
        plugins, build the configured cache and metric sinks, start the event-loop watchdog,
        load models, then bind the enabled listeners.

        :raises tritonx._runtime.settings_check.SettingsError: a setting refused, before anything starts.
        """
        validate_settings(self.settings)
        threshold = self.settings.event_loop_watchdog_secs
        pm = self.plugin_manager or make_plugin_manager()
        self.plugin_manager = pm
        registries = collect(pm)
        cache = build_cache(registries, self.settings.cache_config)
        sinks = build_metric_sinks(registries, self.settings.metric_sinks)

        def on_event(event: ModelEvent) -> None:
            pm.hook.tritonx_model_event(event=event)

        dataplane = self._dataplane = DataPlane(self.settings, registries, on_event, cache)
        from tritonx._transports.http.frontend_http import ServerFrontendHTTP

        dataplane.frontend_http = frontend_http = ServerFrontendHTTP(dataplane, self.settings)
        self._frontends = build_frontends(registries, self.settings, dataplane.handle)
        frontend_http.listeners = self._http_listeners()
        try:  # before the models load: a taken port is told at once, not after every load
            check_ports_free(self._listeners())
        except BaseException:
            await self.stop(timeout=0)
            raise
        for sink in sinks:
            for collector in sink.collectors():
                dataplane.metrics_registry.register(collector)
        triton = TritonMetrics(self.settings, dataplane.loaded_versions)
        frontend_http.metrics_source(triton, dataplane.metrics_registry)
        if sinks:
            self._exporter = SinkExporter(
                sinks,
                export_registry(triton, dataplane.metrics_registry),
                self.settings.metrics_interval_ms / 1000,
            )
            self._exporter.start()
        if threshold > 0:
            self._watchdog = LoopWatchdog(asyncio.get_running_loop(), threshold)
            dataplane.metrics_registry.register(LoopMetrics(self._watchdog))
            self._watchdog.start()
        dataplane.live = True
        try:
            await dataplane.start_models()
        except BaseException:
            log.info("%s", self.status_table(), extra={"raw": True})
            await self.stop(timeout=0)
            raise
        log.info("%s", self.status_table(), extra={"raw": True})
        dataplane.ready = True
        for warning in open_repository_api_warnings(self.settings):
            log.warning("%s", warning)
        try:
            with dataplane.servers_own_memory():
                await self._start_listeners(triton)
        except BaseException:
            await self.stop(timeout=0)
            raise
        pm.hook.tritonx_server_started(server=self)

    async def stop(self, timeout: float | None = None) -> None:
        """Refuse new requests, drain in-flight ones (up to ``exit_timeout_secs``), unload
        every model and close the listeners. Executions still running at the timeout are
        aborted (a python model's worker process is killed) or abandoned, their requests
        failed; the stop does not wait for them."""
        if timeout is None:
            timeout = self.settings.exit_timeout_secs
        deadline = asyncio.get_running_loop().time() + timeout
        if self._grpc is not None and hasattr(self._grpc, "go_away"):
            self._grpc.go_away()  # the event-loop engine: GOAWAY, new calls refused
        if self._dataplane is not None:
            # readiness turns false first, before the last metrics export and the drain, so
            # load balancers (Kubernetes readiness probes) stop sending at once
            self._dataplane.exiting = True
        if self._exporter is not None:  # a last export while the models are still listed
            await asyncio.to_thread(self._exporter.stop)
            self._exporter = None
        if self._dataplane is not None:
            await self._dataplane.shutdown(timeout)
        if self._grpc is not None:
            if hasattr(self._grpc, "go_away"):  # calls in progress get what is left
                await self._grpc.stop(max(0.0, deadline - asyncio.get_running_loop().time()))
            else:
                await self._grpc.stop(0)
            self._grpc = None
        for placed in reversed(self._frontends):
            try:
                await placed.frontend.stop(0.5)
            except Exception:
                log.exception("frontend '%s' failed to stop", placed.frontend.name)
        self._frontends = []
        self.frontend_urls.clear()
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
        if self._dataplane is not None:
            self._dataplane.live = False
            await self._dataplane.tracer.aclose()  # the trace file's last traces, queued spans
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None

    async def serve_forever(self) -> None:
        """Block until cancelled (the CLI cancels on SIGINT/SIGTERM)."""
        await asyncio.Event().wait()

    def _http_listeners(self) -> int:
        """How many HTTP listeners the start opens (the HTTP and metrics ports, each
        frontend): they share the descriptors left for connections
        (:meth:`HTTPLimits.from_settings`)."""
        s = self.settings
        return int(s.allow_http) + int(s.allow_metrics) + len(self._frontends)

    def _listeners(self) -> list[tuple[str, int, bool, str]]:
        """(address, port, SO_REUSEPORT, error if taken) of each listener the start opens:
        tritonserver's ``Socket '<address>:<port>' already in use`` with the flag that chose
        the port, a frontend's own text."""
        s = self.settings
        core = (
            (s.allow_grpc, "--grpc-port", s.grpc_address, s.grpc_port, s.reuse_grpc_port),
            (s.allow_http, "--http-port", s.http_address, s.http_port, s.reuse_http_port),
            (
                s.allow_metrics,
                "--metrics-port",
                s.metrics_address or s.http_address,
                s.metrics_port,
                False,
            ),
        )
        out = [
            (
                host,
                port,
                reuse,
                f"Socket '{host}:{port}' already in use ({flag} {port}: pick "
                "another port, or 0 for a free one)",
            )
            for allowed, flag, host, port, reuse in core
            if allowed
        ]
        for placed in self._frontends:
            frontend = placed.frontend
            taken = (
                f"{frontend.title} cannot listen on {placed.address}:{placed.port}: Address "
                f"already in use (--frontend-config {frontend.name},port=...)"
            )
            out.append((placed.address, placed.port, False, taken))
        return out

    async def _start_listeners(self, triton: TritonMetrics) -> None:
        s = self.settings
        assert self._dataplane is not None
        if s.allow_grpc:
            from tritonx._transports.grpc.server import start_grpc_server

            self._grpc, self.grpc_port = await start_grpc_server(self._dataplane, s)
            log.info("Started GRPCInferenceService at %s:%d", s.grpc_address, self.grpc_port)
        if s.allow_http:
            from tritonx._transports.http.app import http_ssl_context, make_app

            self.http_port = await self._serve_app(
                make_app(self._dataplane, s),
                s.http_address,
                s.http_port,
                http_ssl_context(s),
                reuse_port=s.reuse_http_port,
                fast_infer=True,
            )
            log.info("Started HTTPService at %s:%d", s.http_address, self.http_port)
        if s.allow_metrics:
            address = s.metrics_address or s.http_address
            self.metrics_port = await self._serve_app(
                make_metrics_app(triton, self._dataplane.metrics_registry), address, s.metrics_port
            )
            log.info("Started Metrics Service at %s:%d", address, self.metrics_port)
        if self._frontends:
            from tritonx._transports.http.app import http_ssl_context

            tls = http_ssl_context(s)
            for placed in self._frontends:
                frontend = placed.frontend
                try:
                    url = await frontend.start(placed.address, placed.port, tls)
                except OSError as exc:
                    raise TritonXError(
                        f"{frontend.title} cannot listen on {placed.address}:{placed.port}: "
                        f"{exc.strerror or exc} (--frontend-config {frontend.name},port=...)",
                        Code.UNAVAILABLE,
                    ) from exc
                self.frontend_urls[frontend.name] = url
                log.info("%s at %s", frontend.title, url)

    async def _serve_app(
        self,
        app: web.Application,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        *,
        reuse_port: bool = False,
        fast_infer: bool = False,
    ) -> int:
        """Serve ``app`` on ``host:port`` behind the ``http_*`` connection limits
        (:mod:`tritonx._transports.http.listener`); returns the bound port. ``reuse_port``: bind with
        ``SO_REUSEPORT`` (``--reuse-http-port``); ``fast_infer``: the listener serves plain
        ``/infer`` requests itself (the inference app only: never the metrics listener)."""
        from tritonx._transports.http.listener import HTTPLimits, serve_limited

        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:  # tritonserver's words
                raise TritonXError(
                    f"Socket '{host}:{port}' already in use", Code.UNAVAILABLE
                ) from None
            raise
        fast = None
        # forwarded headers keep their names as sent: aiohttp's path has them
        if (
            fast_infer
            and self.settings.http_fast_infer
            and not self.settings.http_header_forward_pattern
        ):
            from tritonx._transports.http.fast_infer import FastInfer

            fast = FastInfer(self.dataplane, self.settings)
        limits = HTTPLimits.from_settings(self.settings, self._http_listeners())
        # models are drained (up to --exit-timeout-secs) before listeners close, so handlers
        # still running then only wait for work the exit timeout gave up on
        try:
            runner = await serve_limited(
                app, sock, limits, ssl_context=ssl_context, fast=fast, shutdown_timeout=0.5
            )
        except BaseException:
            sock.close()
            raise
        self._runners.append(runner)
        return int(sock.getsockname()[1])

    # ------------------------------------------------------------------ addresses

    def _plane(self) -> DataPlane:
        return self.dataplane

    @property
    def dataplane(self) -> DataPlane:
        """The data plane the transports call (available once started)."""
        if self._dataplane is None:
            raise RuntimeError("the server is not started")
        return self._dataplane

    def _url(self, port: int | None, address: str) -> str:
        if port is None:
            raise RuntimeError("that listener is not running")
        host = "127.0.0.1" if address in ("0.0.0.0", "") else address
        return f"{host}:{port}"

    @property
    def http_url(self) -> str:
        """``host:port`` of the HTTP listener (tritonclient's ``url`` form)."""
        return self._url(self.http_port, self.settings.http_address)

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the gRPC listener."""
        return self._url(self.grpc_port, self.settings.grpc_address)

    @property
    def metrics_url(self) -> str:
        """``host:port`` of the metrics listener."""
        return self._url(
            self.metrics_port, self.settings.metrics_address or self.settings.http_address
        )

    # ------------------------------------------------------------------ in-process API

    def server_live(self) -> bool:
        """Whether the server is live (False before it starts, or when its start failed
        before the models: a setting refused)."""
        return self._dataplane is not None and self._dataplane.server_live()

    def server_ready(self) -> bool:
        return self._dataplane is not None and self._dataplane.server_ready()

    def server_metadata(self) -> ServerMetadata:
        return self.dataplane.server_metadata()

    def model_statistics(
        self, name: str = "", version: int | None = None
    ) -> list[tuple[str, int, ModelStats]]:
        return self.dataplane.model_statistics(name, version)

    async def poll_repository(self) -> None:
        """Rescan the repositories now (poll mode): load new and changed models, unload
        removed ones, as Triton's ``TRITONSERVER_ServerPollModelRepository``."""
        await self.dataplane.poll_repository()

    def status_table(self) -> str:
        """The Model | Version | Status table Triton prints at start-up."""
        return format_table(("Model", "Version", "Status"), self.dataplane.status_rows())


def format_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None
) -> str:
    """Triton's ``TablePrinter`` layout (``+---+`` dividers, left-justified cells): a cell's
    lines (split at newlines) each on a line of its own, the columns sharing ``width``
    (default: the terminal's, 500 off a terminal, as Triton) fairly, and a line longer than
    its column's share cut into lines of that share, so one long reason widens nothing."""
    if width is None:
        width = shutil.get_terminal_size((500, 24)).columns or 500
    table = [[cell.split("\n") for cell in row] for row in (header, *rows)]
    count = len(header)
    needed = [max((len(line) for row in table for line in row[i]), default=0) for i in range(count)]
    shares = _fair_shares(needed, max(width - 3 * count - 1, count))
    divider = "+" + "+".join("-" * (w + 2) for w in shares) + "+"
    out = [divider]
    for number, row in enumerate(table):
        cells = [
            [line[k : k + share] for line in cell for k in range(0, max(len(line), 1), share)]
            for cell, share in zip(row, shares, strict=True)
        ]
        for k in range(max(len(c) for c in cells)):
            parts = (c[k] if k < len(c) else "" for c in cells)
            out.append(
                "|" + "|".join(f" {p.ljust(w)} " for p, w in zip(parts, shares, strict=True)) + "|"
            )
        if number == 0:
            out.append(divider)
    out.append(divider)
    return "\n".join(out) + "\n"


def _fair_shares(needed: Sequence[int], room: int) -> list[int]:
    """Each column's width: an equal share of ``room``, what a column does not need passed
    on evenly to the wider ones (narrowest first), as Triton's ``TablePrinter::FairShare``;
    at least 1 each."""
    shares = [room / len(needed)] * len(needed)
    order = sorted(range(len(needed)), key=lambda i: needed[i])
    for position, i in enumerate(order):
        if needed[i] < shares[i]:
            excess = shares[i] - needed[i]
            shares[i] = needed[i]
            rest = order[position + 1 :]
            for j in rest:
                shares[j] += excess / len(rest)
    return [max(int(share), 1) for share in shares]
