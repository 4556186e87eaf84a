"""The data plane: everything a transport (HTTP, gRPC, in-process) can ask of the server.

Transports decode the wire into :class:`~tritonx.types.InferenceRequest` objects and call
these methods; they hold no state of their own. Errors are :class:`~tritonx.errors.TritonXError`
with Triton's codes and messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TypeVar, cast

from prometheus_client import CollectorRegistry

from tritonx._core.lifecycle import LoadedVersion, ModelManager, VersionEntry
from tritonx._core.residency import Residency
from tritonx._core.residency_metrics import ResidencyMetrics
from tritonx._core.response_cache import CacheFront
from tritonx._core.validation import validate_request
from tritonx._dataplane.shared_memory import SharedMemoryManager
from tritonx._dataplane.stats import ModelStats
from tritonx._dataplane.trace import TraceManager
from tritonx._dataplane.trace_settings import config_from_settings
from tritonx._runtime.plugins import Registries
from tritonx.cache import ResponseCache
from tritonx.config import ModelConfig, ServerSettings
from tritonx.errors import (
    Code,
    NotLoaded,
    TritonXError,
    invalid_arg,
    unavailable,
    unsupported,
)
from tritonx.frontend import FrontendHTTP
from tritonx.handle import ServerHandle
from tritonx.pipeline import DECOUPLED_MESSAGES, ServedModel
from tritonx.types import (
    InferenceRequest,
    InferenceResponse,
    ModelEvent,
    ModelMetadata,
    RepositoryEntry,
    ServerMetadata,
)

T = TypeVar("T")

#: The Triton release whose protocol tritonx follows (what ``/v2`` reports as ``version``).
TRITON_VERSION = "2.73.0"

#: The protocol extensions this server implements (``/v2`` ``extensions``).
EXTENSIONS: tuple[str, ...] = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)

log = logging.getLogger("tritonx.dataplane")


def tritonx_version() -> str:
    try:
        return version("tritonx")
    except PackageNotFoundError:
        return "0+unknown"


#: How many model events :attr:`DataPlane.recent_events` keeps.
EVENT_HISTORY = 200


class ResolvedModel:
    """A ready model version as the data plane resolved it for one request (a
    :class:`tritonx.pipeline.ServedModel`).

    :ivar name: the model's name.
    :ivar version: the version requests go to.
    :ivar config: its completed, normalized config.
    """

    __slots__ = ("_entry", "config", "name", "version")

    def __init__(self, entry: VersionEntry) -> None:
        assert entry.config is not None
        self._entry = entry
        self.config: ModelConfig = entry.config
        self.name = self.config.name
        self.version = entry.version

    @property
    def decoupled(self) -> bool:
        """Whether the model is decoupled (its responses must be streamed)."""
        return self.config.decoupled

    def labels(self, output: str) -> list[str] | None:
        """The classification labels of ``output`` (its ``label_filename``, read from the
        model's folder), or None when it has none."""
        return self._entry.labels(output)


class DataPlane:
    """Readiness, metadata, inference and repository calls over the loaded models."""

    def __init__(
        self,
        settings: ServerSettings,
        registries: Registries,
        on_event: Callable[[ModelEvent], None] | None = None,
        cache: ResponseCache | None = None,
    ) -> None:
        self.settings = settings
        #: What the server lends frontends for HTTP (``ServerHandle.kserve_http``,
        #: ``listen_http``): set by the server when it starts.
        self.frontend_http: FrontendHTTP | None = None
        #: The narrow view of this server handed to backends (BLS) and schedulers.
        self.handle = ServerHandle(self, asyncio.get_running_loop())
        self._cache = CacheFront(cache) if cache is not None else None
        #: When this data plane was made (wall clock, s): the status page's uptime.
        self.started_at = time.time()
        #: The last model events, (wall-clock time, event), oldest first (status page).
        self.recent_events: deque[tuple[float, ModelEvent]] = deque(maxlen=EVENT_HISTORY)

        def record_event(event: ModelEvent) -> None:
            self.recent_events.append((time.time(), event))
            if on_event is not None:
                on_event(event)

        self._models = ModelManager(
            settings, registries, self.handle, record_event, cache_enabled=cache is not None
        )
        self.live = False
        self.ready = False
        self.exiting = False
        self._metadata = ServerMetadata(settings.id, TRITON_VERSION, EXTENSIONS)
        #: The Prometheus registry served on ``/metrics``; backends may register collectors
        #: (e.g. python models' custom metrics) through ``LoadContext.server``.
        self.metrics_registry = CollectorRegistry(auto_describe=True)
        #: The client shared-memory regions (system and CUDA) both transports read and write.
        self.shared_memory = SharedMemoryManager(settings.allow_client_shm)
        #: Trace settings and sampling (the trace extension); transports sample requests.
        self.tracer = TraceManager(config_from_settings(settings))
        if self._models.residency is not None:
            self.metrics_registry.register(ResidencyMetrics(self._models.residency))

    # ------------------------------------------------------------------ models (server side)

    @property
    def residency(self) -> Residency | None:
        """Loads on demand, budgets and idle unloads (``--model-load-on-demand``), or None."""
        return self._models.residency

    async def loaded(self, call: Callable[[], T]) -> T:
        """``call()`` (a lookup of a model: :meth:`resolve`, :meth:`model_metadata`...); a
        model it finds not loaded while models load on demand is loaded first, then
        ``call()`` runs again (a model unloaded again meanwhile is loaded again)."""
        while True:
            try:
                return call()
            except NotLoaded as missing:
                await self._load_on_demand(missing.name)

    async def _load_on_demand(self, name: str) -> None:
        residency = self._models.residency
        assert residency is not None  # (NotLoaded is raised only with one)
        if self.exiting:
            raise TritonXError("Server exiting", Code.UNAVAILABLE)
        await residency.ensure(name)

    async def start_models(self) -> None:
        """Load the start-up models for the control mode (raises with ``exit_on_error``)."""
        await self._models.start()

    def servers_own_memory(self) -> contextlib.AbstractContextManager[None]:
        """A block whose allocations are the server's own, not the loaded models' (the
        listeners, started after the pinned models loaded): ``--model-memory-budget`` does
        not bill them."""
        residency = self._models.residency
        return residency.servers_own() if residency is not None else contextlib.nullcontext()

    async def poll_repository(self) -> None:
        """Rescan the repositories now: load new and changed models, unload removed ones
        (Triton's ``TRITONSERVER_ServerPollModelRepository``; poll mode only)."""
        if self.settings.model_control_mode != "poll":
            raise unavailable("poll not allowed if polling is not enabled")
        await self._models.poll_once()

    async def shutdown(self, timeout: float | None = None) -> None:
        """Drain in-flight requests (up to ``timeout`` s) and unload every model."""
        self.exiting = True
        await self._models.shutdown(timeout)
        self.shared_memory.close()
        if self._cache is not None:
            await self._cache.close()

    def status_rows(self) -> list[tuple[str, str, str]]:
        """(model, version, status) rows of the start-up table."""
        return self._models.status_rows()

    def loaded_versions(self) -> Iterator[LoadedVersion]:
        """Every version with running instances, by model name then version (metrics)."""
        return self._models.loaded_versions()

    # ------------------------------------------------------------------ health and metadata

    def server_live(self) -> bool:
        return self.live

    def server_ready(self) -> bool:
        """Ready: started, not exiting and (with strict readiness) every model READY."""
        if not self.ready or self.exiting:
            return False
        return self._models.all_ready() if self.settings.strict_readiness else True

    async def server_ready_probed(self) -> bool:
        """:meth:`server_ready`, and with strict readiness every READY version asked as well
        (``ModelInstance.probe_ready``: a python model's dead stub, its ``is_ready()``), as
        Triton's strict server readiness asks each model's ``IsReady`` (core
        ``InferenceServer::IsReady``, since 26.04); what the health endpoints answer."""
        if not self.server_ready():
            return False
        if not self.settings.strict_readiness:
            return True
        asked = [
            (name, v.version, v.scheduler)
            for name, entry in self._models.models.items()
            for v in entry.versions.values()
            if v.ready and v.scheduler is not None
        ]
        reasons = await asyncio.gather(*(scheduler.probe_ready() for _, _, scheduler in asked))
        for (name, number, _), reason in zip(asked, reasons, strict=True):
            if reason is not None:
                log.debug(
                    "Model '%s' version %d is in READY lifecycle state but failed runtime "
                    "readiness check during server readiness evaluation: %s",
                    name,
                    number,
                    reason,
                )
                return False
        return True

    def server_metadata(self) -> ServerMetadata:
        return self._metadata

    def model_ready(self, name: str, version: int | None = None) -> bool:
        """Whether the version (or, without one, any version) is READY; False if unknown."""
        try:
            self._models.get(name, version)
        except TritonXError:
            return False
        return True

    async def model_ready_probed(self, name: str, version: int | None = None) -> bool:
        """:meth:`model_ready`, and the model asked as well (``ModelInstance.probe_ready``,
        e.g. a python model's ``is_ready()``), as Triton's model-readiness endpoints do; a
        version found not ready logs Triton's ``Model '<m>' version <v> is not ready: <why>``."""
        try:
            entry = self._models.get(name, version)
        except TritonXError:
            found = self._loaded_version(name, version)
            if found is not None and found.scheduler is not None:
                why = found.scheduler.not_ready_reason()
                log.info("Model '%s' version %d is not ready: %s", name, found.version, why)
            return False
        for _ in range(2):
            scheduler = entry.scheduler
            reason = await scheduler.probe_ready() if scheduler is not None else None
            if reason is None:
                return True
            try:
                current = self._models.get(name, version)
            except TritonXError:
                break
            if current is entry:
                break
            entry = current  # a reload swapped the asked version out meanwhile: ask the new one
        log.info("Model '%s' version %d is not ready: %s", name, entry.version, reason)
        return False

    def _loaded_version(self, name: str, version: int | None) -> VersionEntry | None:
        """A loaded (not necessarily ready) version of ``name``: ``version``, or the latest."""
        try:
            versions = self._models.find(name).versions
        except TritonXError:
            return None
        if version is not None:
            return versions.get(version)
        loaded = [v for v in versions.values() if v.scheduler is not None]
        return max(loaded, key=lambda v: v.version) if loaded else None

    def model_metadata(self, name: str, version: int | None = None) -> ModelMetadata:
        entry = self._models.get(name, version)
        config = _config(entry)
        if version is None:
            versions = tuple(str(v) for v in self._models.find(name).ready_versions())
        else:
            versions = (str(version),)
        return ModelMetadata(
            name=name,
            versions=versions,
            platform=config.platform or config.backend,
            inputs=config.metadata_specs(),
            outputs=config.metadata_specs(outputs=True),
        )

    def model_config(self, name: str, version: int | None = None) -> ModelConfig:
        """The completed, normalized config of a ready version."""
        return _config(self._models.get(name, version))

    def model_folder(self, name: str, version: int | None = None) -> Path | None:
        """The folder a ready version was loaded from: its repository folder, the local copy
        of a cloud repository's, the folder a repository agent or a load-API file override
        made (None when unknown)."""
        return self._models.get(name, version).model_dir

    def model_statistics(
        self, name: str = "", version: int | None = None
    ) -> list[tuple[str, int, ModelStats]]:
        """(model, version, stats) for ready versions; all models when ``name`` is empty."""
        if name:
            try:
                entry = self._models.find(name)
                if version is not None:
                    self._models.get(name, version)
            except TritonXError:
                raise invalid_arg(f"requested model '{name}' is not available") from None
            versions = [version] if version is not None else entry.ready_versions()
            if not versions:
                raise invalid_arg(f"requested model '{name}' is not available")
            return [(name, v, _stats(entry.versions[v])) for v in versions]
        out: list[tuple[str, int, ModelStats]] = []
        for key in sorted(self._models.models):
            entry = self._models.models[key]  # (two of one name with --model-namespacing)
            out.extend((entry.shown, v, _stats(entry.versions[v])) for v in entry.ready_versions())
        return out

    # ------------------------------------------------------------------ inference

    def resolve(self, name: str, version: int | None = None) -> ServedModel:
        """The ready version a request for ``name`` (and ``version``) goes to.

        Transports resolve once per request (for the config: raw-binary inputs, BF16 outputs,
        classification labels) and pass the result back to :meth:`infer`. While the server
        exits every request is refused with UNAVAILABLE "Server exiting".
        """
        if self.exiting:
            raise TritonXError("Server exiting", Code.UNAVAILABLE)
        return ResolvedModel(self._models.get(name, version))

    def _accept(
        self,
        request: InferenceRequest,
        model: ServedModel | None,
        decoupled_message: str | None = None,
    ) -> VersionEntry:
        if self.exiting:
            raise TritonXError("Server exiting", Code.UNAVAILABLE)
        entry = cast(ResolvedModel, model)._entry if model is not None else None
        if entry is None or not entry.ready:  # not resolved, or unloaded since
            entry = self._models.get(request.model_name, request.model_version)
        config, scheduler = entry.config, entry.scheduler
        assert config is not None and scheduler is not None
        if decoupled_message is not None and config.decoupled:
            raise unsupported(decoupled_message)  # before validation, as Triton
        try:
            validate_request(request, config)
        except TritonXError:
            scheduler.stats.record_failure("OTHER", 0)
            raise
        return entry

    async def infer(
        self,
        request: InferenceRequest,
        *,
        protocol: str = "inprocess",
        model: ServedModel | None = None,
    ) -> InferenceResponse:
        """Run one request and return its response; raises TritonXError on any failure.

        Cancelling the awaiting task (or calling ``request.cancel()``) cancels the request:
        if it has not started executing, it is dropped and fails with CANCELLED (counted as
        a ``CANCELED`` failure); an execution already running goes on to its end.

        :param protocol: which transport asks (``http``, ``grpc``, ``inprocess``); it only
            selects Triton's message for decoupled models, which must be streamed.
        :param model: the version :meth:`resolve` returned for this request, if the caller
            resolved it already.
        """
        message = DECOUPLED_MESSAGES.get(protocol, DECOUPLED_MESSAGES["inprocess"])
        try:
            entry = self._accept(request, model, message)
        except NotLoaded:
            entry = await self.loaded(lambda: self._accept(request, None, message))
        trace = request.trace
        if trace is None:
            return await self._infer(entry, request)
        trace.start(request.model_name, entry.version, request.id)
        try:
            return await self._infer(entry, request)
        finally:
            trace.end()

    def infer_future(
        self,
        request: InferenceRequest,
        *,
        protocol: str = "inprocess",
        model: ServedModel | None = None,
    ) -> asyncio.Future[InferenceResponse] | None:
        """:meth:`infer` without a coroutine, for a transport that answers from a callback
        (the HTTP ``/infer`` fast path): validate and queue ``request`` now and return the
        future of its response, or None when the request needs :meth:`infer` (a traced
        request, a model behind the response cache): nothing is queued then.

        The response's ``error`` is the caller's to answer (:meth:`infer` raises it). To
        cancel, call ``request.cancel()`` and cancel the future. Raises as :meth:`infer`
        does when the request is refused (validation, a full queue, the server exiting).
        """
        if request.trace is not None:
            return None
        if (
            self._cache is not None
            and model is not None
            and cast(ResolvedModel, model)._entry.cached
        ):
            return None  # infer() validates and asks the cache
        try:
            entry = self._accept(
                request, model, DECOUPLED_MESSAGES.get(protocol, DECOUPLED_MESSAGES["inprocess"])
            )
        except NotLoaded:
            return None  # unloaded since it was resolved: infer() loads it again
        if entry.cached and self._cache is not None:
            return None  # reloaded with the cache on since it was resolved: infer() serves it
        return self._enqueue(entry, request)

    async def _infer(self, entry: VersionEntry, request: InferenceRequest) -> InferenceResponse:
        cache = self._cache if entry.cached else None
        if cache is not None:
            hit, key = await cache.lookup(request, entry)
            if hit is not None:
                return hit
            entry = self._after_lookup(entry, request)
        future = self._enqueue(entry, request)
        try:
            response = await future
        except asyncio.CancelledError:
            # the caller stopped waiting (client gone, gRPC deadline, task cancelled): the
            # request is cancelled and its scheduler drops it if it has not run yet
            request.cancel()
            raise
        if response.error is not None:
            raise response.error
        if cache is not None:
            await cache.insert(key, entry, response)
        return response

    def _after_lookup(self, entry: VersionEntry, request: InferenceRequest) -> VersionEntry:
        """The version to queue a request on after a cache miss: ``entry``, or the version
        that replaced it while a cache plugin awaited (a reload swapped it out), accepted as
        any request is (validated against its config)."""
        if entry.ready:
            return entry
        return self._accept(request, None)

    def _enqueue(
        self, entry: VersionEntry, request: InferenceRequest
    ) -> asyncio.Future[InferenceResponse]:
        """Queue ``request`` on its scheduler; the future gets its response."""
        scheduler = entry.scheduler
        assert scheduler is not None
        try:
            return scheduler.submit(request)
        except TritonXError:
            scheduler.stats.record_failure("REJECTED", 0)
            raise

    async def _submit(self, entry: VersionEntry, request: InferenceRequest) -> InferenceResponse:
        future = self._enqueue(entry, request)
        try:
            return await future
        except asyncio.CancelledError:
            # the caller stopped waiting (client gone, gRPC deadline, task cancelled): the
            # request is cancelled and its scheduler drops it if it has not run yet
            request.cancel()
            raise

    async def infer_stream(
        self, request: InferenceRequest, *, model: ServedModel | None = None
    ) -> AsyncGenerator[InferenceResponse, None]:
        """Run one request and yield its responses: one for ordinary models, zero or more
        (the last with ``final=True``) for decoupled ones. Once the request is accepted,
        errors are yielded as responses carrying ``error``; validation errors raise.

        Leaving before the final response (closing the iterator, cancelling the task)
        cancels the request: it is dropped if it has not started, and a decoupled model's
        further responses are discarded while ``request.is_cancelled()`` tells it to stop."""
        try:
            entry = self._accept(request, model)
        except NotLoaded:
            entry = await self.loaded(lambda: self._accept(request, None))
        trace = request.trace
        if trace is not None:
            trace.start(request.model_name, entry.version, request.id)
        try:
            scheduler = entry.scheduler
            assert scheduler is not None
            if not scheduler.decoupled:
                cache = self._cache if entry.cached else None
                if cache is not None:
                    hit, key = await cache.lookup(request, entry)
                    if hit is not None:
                        yield hit
                        return
                    entry = self._after_lookup(entry, request)
                response = await self._submit(entry, request)
                if cache is not None:
                    await cache.insert(key, entry, response)
                if trace is not None:
                    trace.end()  # REQUEST_END before the consumer handles the response
                yield response
                return
            async for response in scheduler.stream(request):
                yield response
        finally:
            if trace is not None:
                trace.end()

    # ------------------------------------------------------------------ repository

    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        return self._models.index(ready_only)

    async def load_model(self, name: str, parameters: dict[str, object] | None = None) -> None:
        """Load or reload ``name`` (explicit mode); ``parameters`` as Triton's load request."""
        await self._models.load(name, parameters)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload ``name`` (explicit mode), waiting for its in-flight requests."""
        await self._models.unload(name, unload_dependents)

    async def register_model_repository(
        self, path: str, mapping: Mapping[str, str] | None = None
    ) -> None:
        """Add a model repository (explicit mode); ``mapping``: ``{subfolder: name}``."""
        await self._models.register_repository(path, mapping)

    async def unregister_model_repository(self, path: str) -> None:
        """Remove a registered model repository (explicit mode)."""
        self._models.unregister_repository(path)


def _config(entry: VersionEntry) -> ModelConfig:
    assert entry.config is not None
    return entry.config


def _stats(entry: VersionEntry) -> ModelStats:
    return entry.scheduler.stats if entry.scheduler is not None else ModelStats()
