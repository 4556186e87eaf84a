"""The data plane: everything a transport (HTTP, gRPC, in-process) can ask of the server.

Transports decode the wire into :class:`~tritonx.types.InferenceRequest` objects and call
these methods; they hold no state of their own. Errors are :class:`~tritonx.errors.TritonXError`
with Triton's codes and messages.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CollectorRegistry

from tritonx._core.lifecycle import ModelManager, VersionEntry
from tritonx._core.stats import ModelStats
from tritonx._core.validation import validate_request
from tritonx.config import ModelConfig, ServerSettings
from tritonx.errors import Code, TritonXError, invalid_arg, unsupported
from tritonx.types import (
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    RepositoryEntry,
    ServerMetadata,
)

#: The Triton release whose protocol tritonx follows (what ``/v2`` reports as ``version``).
TRITON_VERSION = "2.73.0"

#: The protocol extensions this server implements (``/v2`` ``extensions``).
EXTENSIONS: tuple[str, ...] = (
    "classification",
    "model_repository",
    "model_repository(unload_dependents)",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
)

DECOUPLED_MESSAGES = {
    "http": "HTTP end point doesn't support models with decoupled transaction policy",
    "grpc": "ModelInfer RPC doesn't support models with decoupled transaction policy",
    "inprocess": "infer() doesn't support models with decoupled transaction policy: use infer_stream()",
}


def parse_version(text: str | None) -> int | None:
    """A version string from a URL or message: "" → None (latest), else a non-negative int."""
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise invalid_arg(
            f"failed to parse model version '{text}', expected a non-negative integer"
        )
    return value


def tritonx_version() -> str:
    try:
        return version("tritonx")
    except PackageNotFoundError:
        return "0+unknown"


class DataPlane:
    """Readiness, metadata, inference and repository calls over the loaded models."""

    def __init__(self, settings: ServerSettings, models: ModelManager) -> None:
        self.settings = settings
        self.models = models
        models.dataplane = self
        self.live = False
        self.ready = False
        self.exiting = False
        self._metadata = ServerMetadata(settings.id, TRITON_VERSION, EXTENSIONS)
        #: The Prometheus registry served on ``/metrics``; backends may register collectors
        #: (e.g. python models' custom metrics) through ``LoadContext.dataplane``.
        self.metrics_registry = CollectorRegistry(auto_describe=True)

    # ------------------------------------------------------------------ health and metadata

    def server_live(self) -> bool:
        return self.live

    def server_ready(self) -> bool:
        """Ready: started, not exiting and (with strict readiness) every model READY."""
        if not self.ready or self.exiting:
            return False
        return self.models.all_ready() if self.settings.strict_readiness else True

    def server_metadata(self) -> ServerMetadata:
        return self._metadata

    def model_ready(self, name: str, version: int | None = None) -> bool:
        """Whether the version (or, without one, any version) is READY; False if unknown."""
        try:
            self.models.get(name, version)
        except TritonXError:
            return False
        return True

    def model_metadata(self, name: str, version: int | None = None) -> ModelMetadata:
        entry = self.models.get(name, version)
        config = _config(entry)
        if version is None:
            versions = tuple(str(v) for v in self.models.find(name).ready_versions())
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
        return _config(self.models.get(name, version))

    def model_statistics(
        self, name: str = "", version: int | None = None
    ) -> list[tuple[str, int, ModelStats]]:
        """(model, version, stats) for ready versions; all models when ``name`` is empty."""
        if name:
            try:
                entry = self.models.find(name)
                if version is not None:
                    self.models.get(name, version)
            except TritonXError:
                raise invalid_arg(f"requested model '{name}' is not available") from None
            versions = [version] if version is not None else entry.ready_versions()
            if not versions:
                raise invalid_arg(f"requested model '{name}' is not available")
            return [(name, v, _stats(entry.versions[v])) for v in versions]
        out: list[tuple[str, int, ModelStats]] = []
        for model_name in sorted(self.models.models):
            entry = self.models.models[model_name]
            out.extend((model_name, v, _stats(entry.versions[v])) for v in entry.ready_versions())
        return out

    # ------------------------------------------------------------------ inference

    def _accept(
        self, request: InferenceRequest, decoupled_message: str | None = None
    ) -> VersionEntry:
        if self.exiting:
            raise TritonXError("Server exiting", Code.UNAVAILABLE)
        entry = self.models.get(request.model_name, request.model_version)
        assert entry.config is not None and entry.scheduler is not None
        if decoupled_message is not None and entry.scheduler.decoupled:
            raise unsupported(decoupled_message)  # before validation, as Triton
        try:
            validate_request(request, entry.config)
        except TritonXError:
            entry.scheduler.stats.record_failure("OTHER", 0)
            raise
        return entry

    async def infer(
        self, request: InferenceRequest, *, protocol: str = "inprocess"
    ) -> InferenceResponse:
        """Run one request and return its response; raises TritonXError on any failure.

        :param protocol: which transport asks (``http``, ``grpc``, ``inprocess``); it only
            selects Triton's message for decoupled models, which must be streamed.
        """
        entry = self._accept(
            request, DECOUPLED_MESSAGES.get(protocol, DECOUPLED_MESSAGES["inprocess"])
        )
        scheduler = entry.scheduler
        assert scheduler is not None
        try:
            future = scheduler.submit(request)
        except TritonXError:
            scheduler.stats.record_failure("REJECTED", 0)
            raise
        response = await future
        if response.error is not None:
            raise response.error
        return response

    async def infer_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        """Run one request and yield its responses: one for ordinary models, zero or more
        (the last with ``final=True``) for decoupled ones. Once the request is accepted,
        errors are yielded as responses carrying ``error``; validation errors raise."""
        entry = self._accept(request)
        scheduler = entry.scheduler
        assert scheduler is not None
        if not scheduler.decoupled:
            try:
                future = scheduler.submit(request)
            except TritonXError:
                scheduler.stats.record_failure("REJECTED", 0)
                raise
            yield await future
            return
        async for response in scheduler.stream(request):
            yield response

    def is_decoupled(self, name: str, version: int | None = None) -> bool:
        return _config(self.models.get(name, version)).decoupled

    # ------------------------------------------------------------------ repository

    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        return self.models.index(ready_only)

    async def load_model(self, name: str, parameters: dict[str, object] | None = None) -> None:
        """Load or reload ``name`` (explicit mode); ``parameters`` as Triton's load request."""
        await self.models.load(name, parameters)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload ``name`` (explicit mode), waiting for its in-flight requests."""
        await self.models.unload(name, unload_dependents)


def _config(entry: VersionEntry) -> ModelConfig:
    assert entry.config is not None
    return entry.config


def _stats(entry: VersionEntry) -> ModelStats:
    return entry.scheduler.stats if entry.scheduler is not None else ModelStats()
