"""``ServerHandle``: the narrow view of the server that backends and schedulers get.

A backend that calls other models (Python BLS), a scheduler that chains models (ensembles) or
a plugin that adds metrics receives a :class:`ServerHandle` (``LoadContext.server``), never the
data plane or the model manager. Everything on it is public and stable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import CollectorRegistry

from tritonx.config import ModelConfig
from tritonx.types import InferenceRequest, InferenceResponse, ModelMetadata, RepositoryEntry

if TYPE_CHECKING:
    from tritonx._dataplane.dataplane import DataPlane
    from tritonx.pipeline import Pipeline

T = TypeVar("T")


class ServerHandle:
    """Inference, readiness, metadata and repository calls on the running server.

    The coroutine methods run on the server's event loop (:attr:`loop`); from a backend's
    worker thread submit them with :meth:`run_threadsafe`.
    """

    __slots__ = ("_dataplane", "_loop")

    def __init__(self, dataplane: DataPlane, loop: asyncio.AbstractEventLoop) -> None:
        self._dataplane = dataplane
        self._loop = loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The server's event loop."""
        return self._loop

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """The Prometheus registry served on ``/metrics``; add collectors to it."""
        return self._dataplane.metrics_registry

    def run_threadsafe(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the server's loop from another thread; returns its future."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def infer(
        self, request: InferenceRequest, *, parent: InferenceRequest | None = None
    ) -> InferenceResponse:
        """Run one request on another model; raises :class:`tritonx.TritonXError` on failure.

        Decoupled models must be called with :meth:`infer_stream`.

        :param parent: the request this call is made for (a BLS call from ``execute``): when
            that request is traced, this one gets a child trace (``parent_id`` = its id), as
            python_backend's ``pb_utils.InferenceRequest(..., trace=request.trace())``.
        """
        _link(request, parent)
        return await self._dataplane.infer(request)

    def infer_stream(
        self, request: InferenceRequest, *, parent: InferenceRequest | None = None
    ) -> AsyncIterator[InferenceResponse]:
        """Yield the responses of one request (any number, the last ``final``, for decoupled
        models; exactly one otherwise). Errors after acceptance come as responses with
        ``error`` set. ``parent`` as in :meth:`infer`."""
        _link(request, parent)
        return self._dataplane.infer_stream(request)

    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        """The repository index: every model on disk or known, with its versions' states."""
        return self._dataplane.repository_index(ready_only)

    def pipeline(self, protocol: str = "http") -> Pipeline:
        """The per-request steps of a transport (:mod:`tritonx.pipeline`) for a frontend
        plugin: resolve (loading on demand), admit (trace sampling, ``X-Request-ID``), run.

        :param protocol: ``http`` or ``grpc``: which of Triton's messages and trace
            timestamps the requests get.
        """
        from tritonx.pipeline import Pipeline

        return Pipeline(self._dataplane, protocol)

    def model_ready(self, name: str, version: int | None = None) -> bool:
        """Whether ``name`` (that version, or any version) is READY."""
        return self._dataplane.model_ready(name, version)

    def model_metadata(self, name: str, version: int | None = None) -> ModelMetadata:
        """The metadata of a ready model version (raises NOT_FOUND / UNAVAILABLE)."""
        return self._dataplane.model_metadata(name, version)

    def model_config(self, name: str, version: int | None = None) -> ModelConfig:
        """The completed, normalized config of a ready model version."""
        return self._dataplane.model_config(name, version)

    def model_folder(self, name: str, version: int | None = None) -> Path | None:
        """The folder a ready model version was loaded from (a local copy for cloud
        repositories, the override folder of a load with files); raises like
        :meth:`model_config`."""
        return self._dataplane.model_folder(name, version)

    async def load_model(self, name: str, parameters: dict[str, object] | None = None) -> None:
        """Load or reload ``name``; allowed only in explicit model control mode, as Triton's
        repository API."""
        await self._dataplane.load_model(name, parameters)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload ``name``; allowed only in explicit model control mode."""
        await self._dataplane.unload_model(name, unload_dependents)


def _link(request: InferenceRequest, parent: InferenceRequest | None) -> None:
    if parent is not None and request.trace is None:
        trace = parent.trace
        if trace is not None:
            request.trace = trace.spawn_child()


__all__ = [
    "ServerHandle",
]
