"""``ServerHandle``: the narrow view of the server that backends and schedulers get.

A backend that calls other models (Python BLS), a scheduler that chains models (ensembles) or
a plugin that adds metrics receives a :class:`ServerHandle` (``LoadContext.server``), never the
data plane or the model manager. Everything on it is public and stable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry

from tritonx.config import ModelConfig
from tritonx.pipeline import DataPlaneView, Pipeline
from tritonx.types import InferenceRequest, InferenceResponse, ModelMetadata, RepositoryEntry

if TYPE_CHECKING:
    import socket
    import ssl

    from aiohttp import web

    from tritonx.frontend import FrontendHTTP, KServeHTTP

T = TypeVar("T")


class DataPlaneCalls(DataPlaneView, Protocol):
    """The server's data plane as the in-process API (:class:`InProcessAPI`) calls it: the
    server's own implements it. Adding a call to the in-process API means one method here,
    its implementation in the data plane and its delegation in :class:`InProcessAPI`."""

    #: the Prometheus registry served on ``/metrics``
    metrics_registry: CollectorRegistry
    #: what the server lends frontends for HTTP (set when it starts)
    frontend_http: FrontendHTTP | None

    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]: ...

    def model_ready(self, name: str, version: int | None = None) -> bool: ...

    def model_metadata(self, name: str, version: int | None = None) -> ModelMetadata: ...

    def model_config(self, name: str, version: int | None = None) -> ModelConfig: ...

    def model_folder(self, name: str, version: int | None = None) -> Path | None: ...

    async def load_model(self, name: str, parameters: dict[str, object] | None = None) -> None: ...

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None: ...

    async def register_model_repository(
        self, path: str, mapping: Mapping[str, str] | None = None
    ) -> None: ...

    async def unregister_model_repository(self, path: str) -> None: ...


class InProcessAPI:
    """The model calls of the in-process API, written once for :class:`tritonx.Server` and
    :class:`ServerHandle`: each delegates to the data plane :meth:`_plane` returns."""

    __slots__ = ()

    def _plane(self) -> DataPlaneCalls:
        """The data plane the calls go to (raises when there is none yet)."""
        raise NotImplementedError

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """The Prometheus registry served on ``/metrics``; add collectors to it."""
        return self._plane().metrics_registry

    async def infer(
        self, request: InferenceRequest, *, parent: InferenceRequest | None = None
    ) -> InferenceResponse:
        """Run one request on a model; raises :class:`tritonx.TritonXError` on failure.

        Decoupled models must be called with :meth:`infer_stream`.

        :param parent: the request this call is made for (a BLS call from ``execute``): when
            that request is traced, this one gets a child trace (``parent_id`` = its id), as
            python_backend's ``pb_utils.InferenceRequest(..., trace=request.trace())``.
        """
        _link(request, parent)
        return await self._plane().infer(request)

    def infer_stream(
        self, request: InferenceRequest, *, parent: InferenceRequest | None = None
    ) -> AsyncIterator[InferenceResponse]:
        """Yield the responses of one request (any number, the last ``final``, for decoupled
        models; exactly one otherwise). Errors after acceptance come as responses with
        ``error`` set. ``parent`` as in :meth:`infer`."""
        _link(request, parent)
        return self._plane().infer_stream(request)

    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        """The repository index: every model on disk or known, with its versions' states."""
        return self._plane().repository_index(ready_only)

    def model_ready(self, name: str, version: int | None = None) -> bool:
        """Whether ``name`` (that version, or any version) is READY."""
        return self._plane().model_ready(name, version)

    def model_metadata(self, name: str, version: int | None = None) -> ModelMetadata:
        """The metadata of a ready model version (raises NOT_FOUND / UNAVAILABLE)."""
        return self._plane().model_metadata(name, version)

    def model_config(self, name: str, version: int | None = None) -> ModelConfig:
        """The completed, normalized config of a ready model version."""
        return self._plane().model_config(name, version)

    def model_folder(self, name: str, version: int | None = None) -> Path | None:
        """The folder a ready model version was loaded from (a local copy for cloud
        repositories, the override folder of a load with files); raises like
        :meth:`model_config`."""
        return self._plane().model_folder(name, version)

    async def load_model(self, name: str, parameters: dict[str, object] | None = None) -> None:
        """Load or reload ``name``; allowed only in explicit model control mode, as Triton's
        repository API."""
        await self._plane().load_model(name, parameters)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload ``name``; allowed only in explicit model control mode."""
        await self._plane().unload_model(name, unload_dependents)

    async def register_model_repository(
        self, path: str, mapping: Mapping[str, str] | None = None
    ) -> None:
        """Add a model repository, as Triton's ``TRITONSERVER_ServerRegisterModelRepository``;
        allowed only in explicit model control mode (else UNSUPPORTED).

        Its models can then be loaded by name (:meth:`load_model`) and appear in the
        repository index. ``mapping`` maps a subfolder of ``path`` to the name it is served
        under (the subfolder's own name is then not served from this repository; the model's
        config takes the mapped name).

        :raises tritonx.TritonXError: ALREADY_EXISTS when ``path`` is a repository already or
            a mapped name is mapped by another registered repository; INVALID_ARG when
            ``path`` is not a readable folder or two subfolders map to one name.
        """
        await self._plane().register_model_repository(path, mapping)

    async def unregister_model_repository(self, path: str) -> None:
        """Remove a model repository (a registered one or a ``--model-repository`` one) and
        its mappings, as Triton's ``TRITONSERVER_ServerUnregisterModelRepository``; explicit
        mode only (else UNSUPPORTED). Models loaded from it stay loaded (unload them with
        :meth:`unload_model`); they can no longer be loaded from it.

        :raises tritonx.TritonXError: INVALID_ARG when ``path`` is no repository.
        """
        await self._plane().unregister_model_repository(path)


class ServerHandle(InProcessAPI):
    """Inference, readiness, metadata and repository calls on the running server.

    The coroutine methods run on the server's event loop (:attr:`loop`); from a backend's
    worker thread submit them with :meth:`run_threadsafe`.
    """

    __slots__ = ("_dataplane", "_loop")

    def __init__(self, dataplane: DataPlaneCalls, loop: asyncio.AbstractEventLoop) -> None:
        self._dataplane = dataplane
        self._loop = loop

    def _plane(self) -> DataPlaneCalls:
        return self._dataplane

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The server's event loop."""
        return self._loop

    def run_threadsafe(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the server's loop from another thread; returns its future."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def pipeline(self, protocol: str = "http") -> Pipeline:
        """The per-request steps of a transport (:mod:`tritonx.pipeline`) for a frontend
        plugin: resolve (loading on demand), admit (trace sampling, ``X-Request-ID``), run.

        :param protocol: ``http`` or ``grpc``: which of Triton's messages and trace
            timestamps the requests get.
        """
        return Pipeline(self._dataplane, protocol)

    def kserve_http(self) -> KServeHTTP:
        """Triton's KServe v2 HTTP endpoints, to serve a frontend's request under another
        path (:class:`tritonx.frontend.KServeHTTP`).

        :raises RuntimeError: before the server has started.
        """
        return self._frontend_http().kserve()

    async def listen_http(
        self, app: web.Application, sock: socket.socket, ssl_context: ssl.SSLContext | None
    ) -> web.AppRunner:
        """Serve the aiohttp application ``app`` on ``sock`` (bound) behind the HTTP port's
        connection limits (``--http-max-connections``, the header and idle deadlines, the TLS
        handshake bounds), as :class:`tritonx.AiohttpFrontend` does; returns the runner
        (``shutdown()`` and ``cleanup()`` it at stop).

        :raises RuntimeError: before the server has started.
        """
        return await self._frontend_http().listen(app, sock, ssl_context)

    def metrics_text(self) -> str:
        """The Prometheus text ``GET /metrics`` answers on the metrics port: Triton's
        ``nv_*`` families and every collector of :attr:`metrics_registry` (whether or not the
        metrics port is open).

        :raises RuntimeError: before the server has started.
        """
        return self._frontend_http().metrics_text()

    def _frontend_http(self) -> FrontendHTTP:
        services = self._dataplane.frontend_http
        if services is None:
            raise RuntimeError("the server lends frontends its HTTP services once it starts")
        return services


def _link(request: InferenceRequest, parent: InferenceRequest | None) -> None:
    if parent is not None and request.trace is None:
        trace = parent.trace
        if trace is not None:
            request.trace = trace.spawn_child()


__all__ = [
    "DataPlaneCalls",
    "InProcessAPI",
    "ServerHandle",
]
