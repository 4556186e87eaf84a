"""Loading and unloading models: per-version states, repository agents, control modes.

``ModelManager`` is the only owner of loaded models. It reads each model's config (with core
and backend auto-complete, normalization and validation), runs the repository agents in
Triton's order, starts a :class:`VersionScheduler` per version, and keeps every model's state
(LOADING, READY, UNLOADING, UNAVAILABLE + reason) for readiness, the repository index and the
start-up table. A reload that fails leaves the old version serving; an unload waits for the
requests already accepted.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonx._core import normalize as cfg
from tritonx._core.metrics import MetricsOptions
from tritonx._core.rate_limiter import RateLimiter
from tritonx._core.repository import (
    CONFIG_FILENAME,
    ModelSource,
    scan,
    select_versions,
    version_folders,
)
from tritonx._core.scheduler import VersionScheduler
from tritonx._proto import model_config_pb2
from tritonx.backend import AutoCompleteContext, Backend, InstanceSpec, LoadContext
from tritonx.config import ModelConfig, ServerSettings
from tritonx.errors import Code, TritonXError, invalid_arg, not_found, unavailable
from tritonx.plugins import Registries
from tritonx.repoagent import AgentContext, RepoAgent
from tritonx.types import ModelEvent, ModelState, RepositoryEntry

log = logging.getLogger("tritonx.lifecycle")

DUPLICATE_REASON = "model appears in two or more repositories"
UNLOADED_REASON = "unloaded"


@dataclass
class VersionEntry:
    """One version of a model and its state."""

    version: int
    state: ModelState = ModelState.UNKNOWN
    reason: str = ""
    config: ModelConfig | None = None
    scheduler: VersionScheduler | None = None
    #: seconds the last successful load took (``nv_model_load_duration_secs``)
    load_seconds: float = 0.0

    @property
    def ready(self) -> bool:
        return (
            self.state is ModelState.READY
            and self.scheduler is not None
            and self.scheduler.is_ready()
        )


@dataclass
class ModelEntry:
    """A model the manager was asked to load, with its versions (or a model-level error)."""

    name: str
    versions: dict[int, VersionEntry] = field(default_factory=dict)
    #: a failure that concerns the whole model (config error, duplicate, no versions)
    error: str = ""
    fingerprint: tuple[Any, ...] | None = None
    agents: list[tuple[RepoAgent, dict[str, str]]] = field(default_factory=list)
    model_dir: Path | None = None
    config_pb: model_config_pb2.ModelConfig | None = None
    temp_dir: Path | None = None
    #: a config override given with the last load (kept until a plain load)
    override: bool = False
    #: versions the last load attempt failed to load (an old version may still serve)
    last_failures: list[VersionEntry] = field(default_factory=list)

    def ready_versions(self) -> list[int]:
        return sorted(v for v, e in self.versions.items() if e.ready)


@dataclass
class _Prepared:
    """The outcome of reading and completing a model's config, before loading versions."""

    config: model_config_pb2.ModelConfig
    model_dir: Path
    versions: dict[int, Path]
    selected: list[int]
    missing: list[int]
    backend: Backend | None
    fingerprint: tuple[Any, ...]
    agents: list[tuple[RepoAgent, dict[str, str]]] = field(default_factory=list)


class ModelManager:
    """Loads, reloads and unloads models from the configured repositories."""

    def __init__(
        self,
        settings: ServerSettings,
        registries: Registries,
        on_event: Callable[[ModelEvent], None] | None = None,
    ) -> None:
        self.settings = settings
        self.registries = registries
        self.models: dict[str, ModelEntry] = {}
        self.dataplane: Any = None  # set by DataPlane, handed to backends for BLS
        self._on_event = on_event
        self._backends: dict[str, Backend] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._load_slots = asyncio.Semaphore(max(1, settings.model_load_thread_count))
        self.rate_limiter = RateLimiter.from_settings(
            settings.rate_limit, settings.rate_limit_resource
        )
        self.metrics_options = MetricsOptions.from_config(settings.metrics_config)
        self._poll_task: asyncio.Task[None] | None = None
        self._custom_filenames = {
            cls.default_model_filename: name
            for name, cls in registries.backends.items()
            if cls.default_model_filename
        }

    # ------------------------------------------------------------------ start / stop

    async def start(self) -> None:
        """Load the start-up models for the control mode; with ``exit_on_error`` a failure raises."""
        sources, duplicates = scan(self.settings.model_repository)
        mode = self.settings.model_control_mode
        if mode == "explicit":
            wanted = list(self.settings.load_model)
            names = sorted(set(sources) | set(duplicates)) if "*" in wanted else wanted
        else:
            names = sorted(set(sources) | set(duplicates))
        await asyncio.gather(*(self._load_logged(n) for n in names))
        if self.settings.exit_on_error and any(not self._entry_ok(n) for n in names):
            raise TritonXError("failed to load all models", Code.INTERNAL)
        if mode == "poll" and self.settings.repository_poll_secs > 0:
            self._poll_task = asyncio.create_task(self._poll_loop(), name="tritonx-repository-poll")

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop polling, drain every version (up to ``timeout`` s) and unload everything."""
        if self._poll_task is not None:
            self._poll_task.cancel()
            await asyncio.gather(self._poll_task, return_exceptions=True)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        await asyncio.gather(*(self._unload(n, deadline) for n in list(self.models)))
        for backend in self._backends.values():
            try:
                backend.close()
            except Exception:
                log.exception("closing backend '%s' failed", backend.name)
        self._backends.clear()

    # ------------------------------------------------------------------ queries

    def get(self, name: str, version: int | None) -> VersionEntry:
        """The READY version to serve (the highest ready one when ``version`` is None).

        Raises Triton's "Request for unknown model" errors.
        """
        entry = self.models.get(name)
        if entry is None or (not entry.versions and not entry.error and entry.fingerprint is None):
            raise not_found(f"Request for unknown model: '{name}' is not found")
        if version is None:
            best: VersionEntry | None = None
            for candidate in entry.versions.values():
                if (best is None or candidate.version > best.version) and candidate.ready:
                    best = candidate
            if best is None:
                raise not_found(f"Request for unknown model: '{name}' has no available versions")
            return best
        ventry = entry.versions.get(version)
        if ventry is None:
            raise not_found(f"Request for unknown model: '{name}' version {version} is not found")
        if not ventry.ready:
            raise unavailable(
                f"Request for unknown model: '{name}' version {version} is not at ready state"
            )
        return ventry

    def find(self, name: str) -> ModelEntry:
        """The entry for ``name`` whatever its state (NOT_FOUND if never seen)."""
        entry = self.models.get(name)
        if entry is None:
            raise not_found(f"Request for unknown model: '{name}' is not found")
        return entry

    def all_ready(self) -> bool:
        """Triton's strict readiness: every model has versions, each READY or unloaded."""
        for entry in self.models.values():
            if entry.error:
                return False
            if not entry.versions and entry.fingerprint is not None:
                return False
            for v in entry.versions.values():
                if not v.ready and v.reason != UNLOADED_REASON:
                    return False
        return True

    def index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        """The repository index: every model on disk or known, with version states."""
        sources, duplicates = scan(self.settings.model_repository)
        names = sorted(set(sources) | set(duplicates) | set(self.models))
        rows: list[RepositoryEntry] = []
        for name in names:
            entry = self.models.get(name)
            if name in duplicates and (entry is None or not entry.versions):
                if not ready_only:
                    rows.append(
                        RepositoryEntry(name, None, ModelState.UNAVAILABLE, DUPLICATE_REASON)
                    )
                continue
            if entry is None:
                if not ready_only:
                    rows.append(RepositoryEntry(name))
                continue
            if entry.error and not entry.versions:
                if not ready_only:
                    rows.append(RepositoryEntry(name, None, ModelState.UNAVAILABLE, entry.error))
                continue
            for version in sorted(entry.versions):
                v = entry.versions[version]
                state, reason = _reported_state(v)
                if not ready_only or state is ModelState.READY:
                    rows.append(RepositoryEntry(name, version, state, reason))
        return rows

    def status_rows(self) -> list[tuple[str, str, str]]:
        """(model, version, status) rows of the start-up table, as Triton prints them."""
        rows: list[tuple[str, str, str]] = []
        for name in sorted(self.models):
            entry = self.models[name]
            if not entry.versions:
                status = (
                    f"UNAVAILABLE: {entry.error}"
                    if entry.error
                    else ("Not loaded: No model version was found")
                )
                rows.append((name, "-", status))
                continue
            for version in sorted(entry.versions):
                v = entry.versions[version]
                state, reason = _reported_state(v)
                status = state.value + (f": {reason}" if reason else "")
                rows.append((name, str(version), status))
        return rows

    # ------------------------------------------------------------------ load / unload API

    async def load(self, name: str, parameters: Mapping[str, Any] | None = None) -> None:
        """The repository load API (explicit mode): load or reload ``name``.

        :param parameters: ``config`` (a JSON ModelConfig string) and ``file:<path>`` entries
            (bytes, or base64 text from HTTP) as Triton's load request carries them.
        """
        self._check_explicit()
        _check_model_name(name)
        config_json: str | None = None
        files: dict[str, bytes] = {}
        for key, value in (parameters or {}).items():
            if key == "config":
                if not isinstance(value, str):
                    raise invalid_arg(
                        f"Unrecognized load parameter '{key}' with type '{_type_name(value)}'"
                    )
                config_json = value
            elif key.startswith("file:"):
                files[key[5:]] = _file_bytes(key, value)
            else:
                raise invalid_arg(
                    f"Unrecognized load parameter '{key}' with type '{_type_name(value)}'"
                )
        if files and config_json is None:
            raise invalid_arg("Load parameter 'config' must be specified for model file override")
        override = cfg.parse_config_json(config_json) if config_json is not None else None
        entry = await self._load(name, override, files)
        if entry is None:
            raise TritonXError(
                f"failed to load '{name}', failed to poll from model repository", Code.INTERNAL
            )
        if entry.error and not entry.versions:
            raise invalid_arg(f"load failed for model '{name}': {entry.error}\n")
        failed = entry.last_failures
        if failed:
            reasons = "".join(
                f"version {v.version} is at {v.state.value} state: {v.reason};" for v in failed
            )
            raise invalid_arg(f"load failed for model '{name}': {reasons}\n")

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """The repository unload API (explicit mode); unloading an unknown model succeeds."""
        self._check_explicit()
        _check_model_name(name)
        await self._unload(name, None)

    def _check_explicit(self) -> None:
        if self.settings.model_control_mode != "explicit":
            raise unavailable("explicit model load / unload is not allowed if polling is enabled")

    # ------------------------------------------------------------------ internals: load

    async def _load_logged(self, name: str) -> None:
        try:
            await self._load(name, None, {})
        except TritonXError as exc:
            log.error("failed to load '%s': %s", name, exc.message)

    def _entry_ok(self, name: str) -> bool:
        entry = self.models.get(name)
        if entry is None or entry.error or not entry.versions:
            return False
        return all(v.ready for v in entry.versions.values())

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    async def _load(
        self,
        name: str,
        override: model_config_pb2.ModelConfig | None,
        files: Mapping[str, bytes],
    ) -> ModelEntry | None:
        async with self._lock(name):
            sources, duplicates = scan(self.settings.model_repository)
            entry = self.models.get(name)
            if name in duplicates:
                new = entry or ModelEntry(name)
                if not new.versions:
                    new.error = DUPLICATE_REASON
                    new.fingerprint = None
                    self.models[name] = new
                log.error(
                    "failed to poll model '%s': not unique across all model repositories", name
                )
                return new if files or override else None
            source = sources.get(name)
            temp_dir: Path | None = None
            if files:
                temp_dir = _write_override_dir(name, files)
                source = ModelSource(name, temp_dir, temp_dir.parent)
            if source is None:
                log.error(
                    "failed to poll model '%s': model not found in any model repository.", name
                )
                return None
            if entry is None:
                entry = self.models[name] = ModelEntry(name)
            try:
                prepared = await asyncio.to_thread(self._prepare, source, override)
            except TritonXError as exc:
                if temp_dir is not None:
                    shutil.rmtree(temp_dir, ignore_errors=True)
                if entry.versions and any(v.ready for v in entry.versions.values()):
                    # a failed reload leaves the old versions serving
                    log.error("failed to reload '%s': %s (keeping the loaded versions)", name, exc)
                    raise invalid_arg(f"load failed for model '{name}': {exc.message}\n") from exc
                entry.error = exc.message
                entry.fingerprint = None
                self._emit(name, 0, ModelState.UNAVAILABLE, exc.message)
                log.error("failed to load '%s': %s", name, exc.message)
                return entry
            if (
                prepared.fingerprint == entry.fingerprint
                and override is None
                and not files
                and not entry.override
                and entry.versions
                and all(v.ready for v in entry.versions.values())
            ):
                entry.last_failures = []
                return entry  # nothing changed: a load is a no-op
            await self._apply(entry, prepared, source)
            old_temp, entry.temp_dir = entry.temp_dir, temp_dir
            if old_temp is not None and old_temp != temp_dir:
                shutil.rmtree(old_temp, ignore_errors=True)
            entry.override = override is not None or bool(files)
            return entry

    def _prepare(
        self, source: ModelSource, override: model_config_pb2.ModelConfig | None
    ) -> _Prepared:
        """Read, complete, normalize and validate the config (runs in a worker thread)."""
        name = source.name
        if override is not None:
            config = model_config_pb2.ModelConfig()
            config.CopyFrom(override)
        elif source.config_path.exists():
            config = cfg.read_config_file(source.config_path)
        else:
            config = model_config_pb2.ModelConfig()
            if self.settings.disable_auto_complete_config:
                raise TritonXError(
                    f"model configuration is not provided for model '{name}' "
                    f"(no {source.config_path})",
                    Code.NOT_FOUND,
                )
        versions = version_folders(source.path)
        first = versions[min(versions)] if versions else None
        cfg.auto_complete_backend_fields(config, name, first, self._custom_filenames)
        backend: Backend | None = None
        if config.platform == cfg.ENSEMBLE:
            raise TritonXError(
                f"ensemble models are not supported yet (model '{name}', {source.config_path})",
                Code.UNSUPPORTED,
            )
        backend = self._backend(config.backend, source)
        if not self.settings.disable_auto_complete_config:
            ctx = AutoCompleteContext(
                config=config,
                model_dir=source.path,
                version_path=first if first is not None else source.path,
                model_path=(first / config.default_model_filename)
                if first is not None and config.default_model_filename
                else None,
                backend_config=backend.config,
            )
            try:
                backend.auto_complete_config(ctx)
            except TritonXError:
                raise
            except Exception as exc:
                raise invalid_arg(f"auto-complete of model '{name}' failed: {exc}") from exc
        cfg.normalize(config)
        cfg.normalize_instance_groups(config)
        cfg.validate(config, name)
        selected = select_versions(config.version_policy, versions)
        missing: list[int] = []
        if config.version_policy.WhichOneof("policy_choice") == "specific":
            missing = [v for v in config.version_policy.specific.versions if v not in versions]
        if not selected and not missing:
            raise invalid_arg(
                f"at least one version must be available under the version policy of model '{name}'"
            )
        agents = self._agents(config)
        fingerprint = (config.SerializeToString(deterministic=True), _tree_stamp(source.path))
        return _Prepared(
            config, source.path, versions, selected, missing, backend, fingerprint, agents
        )

    def check(self, source: ModelSource) -> _Prepared:
        """Read and complete ``source``'s config and resolve its backend and agents; load
        nothing (``tritonx check-repository``)."""
        return self._prepare(source, None)

    def _backend(self, name: str, source: ModelSource) -> Backend:
        backend = self._backends.get(name)
        if backend is not None:
            return backend
        cls = self.registries.backends.get(name)
        if cls is None:
            raise invalid_arg(
                f"unable to find backend library for backend '{name}' (model '{source.name}' at "
                f"{source.path}); install a tritonx plugin that provides it"
            )
        settings = dict(self.settings.backend_config.get("", {}))
        settings.update(self.settings.backend_config.get(name, {}))
        backend = self._backends[name] = cls(settings)
        return backend

    async def _apply(self, entry: ModelEntry, prepared: _Prepared, source: ModelSource) -> None:
        """Load the prepared versions, swap them in, and unload what they replace."""
        name = entry.name
        config = ModelConfig(prepared.config)
        agents = prepared.agents
        model_dir = prepared.model_dir
        invoked: list[tuple[RepoAgent, dict[str, str]]] = []
        agent_error: TritonXError | None = None
        for agent, params in agents:
            invoked.append((agent, params))
            try:
                ctx = AgentContext(name, model_dir, prepared.config, params)
                replaced = await asyncio.to_thread(agent.on_load, ctx)
            except Exception as exc:
                agent_error = TritonXError.wrap(exc)
                break
            if replaced is not None:
                model_dir = Path(replaced)
        new_versions: dict[int, VersionEntry] = {}
        if agent_error is None:
            versions = (
                version_folders(model_dir) if model_dir != prepared.model_dir else prepared.versions
            )
            for v in prepared.selected:
                new_versions[v] = VersionEntry(v, ModelState.LOADING, config=config)
                if v not in entry.versions:
                    entry.versions[v] = new_versions[v]
                self._emit(name, v, ModelState.LOADING)
            await asyncio.gather(
                *(
                    self._load_version(
                        new_versions[v], config, prepared.backend, model_dir, versions[v]
                    )
                    for v in prepared.selected
                )
            )
        else:
            log.error("repository agent failed for '%s': %s", name, agent_error.message)
        for v in prepared.missing:
            new_versions[v] = VersionEntry(
                v,
                ModelState.UNAVAILABLE,
                f"version {v} is specified for model '{name}', but the version directory is "
                "not present",
                config=config,
            )
        if agent_error is not None:
            for v in prepared.selected:
                new_versions[v] = VersionEntry(
                    v, ModelState.UNAVAILABLE, agent_error.as_string(), config=config
                )
        succeeded = any(v.ready for v in new_versions.values())
        ctx = AgentContext(name, model_dir, prepared.config, {})
        for agent, params in reversed(invoked):
            actx = AgentContext(ctx.model_name, ctx.model_dir, ctx.config, params)
            hook = agent.on_load_complete if succeeded else agent.on_load_fail
            try:
                await asyncio.to_thread(hook, actx)
            except Exception:
                log.exception("repository agent '%s' failed after load of '%s'", agent.name, name)
        # swap: a failed version keeps an old ready one serving
        retired: list[VersionEntry] = []
        old = entry.versions
        merged: dict[int, VersionEntry] = {}
        for v, new in new_versions.items():
            prev = old.get(v)
            if new.ready:
                merged[v] = new
                if prev is not None and prev is not new:
                    retired.append(prev)
            elif prev is not None and prev is not new and prev.ready:
                log.error(
                    "failed to reload '%s' version %d: %s (keeping the loaded version)",
                    name,
                    v,
                    new.reason,
                )
                merged[v] = prev
            else:
                merged[v] = new
                if prev is not None and prev is not new:
                    retired.append(prev)
        for v, prev in old.items():
            if v not in merged:
                retired.append(prev)
        entry.versions = merged
        entry.last_failures = [v for v in new_versions.values() if not v.ready]
        entry.error = ""
        entry.fingerprint = prepared.fingerprint
        entry.agents = agents
        entry.model_dir = model_dir
        entry.config_pb = prepared.config
        for ventry in merged.values():
            self._emit(name, ventry.version, ventry.state, ventry.reason)
        for prev in retired:
            await self._retire(name, prev)
        if any(v.ready for v in merged.values()):
            log.info("successfully loaded '%s'", name)

    async def _load_version(
        self,
        ventry: VersionEntry,
        config: ModelConfig,
        backend: Backend | None,
        model_dir: Path,
        version_path: Path,
    ) -> None:
        name, v = config.name, ventry.version
        log.info("loading: %s:%d", name, v)
        try:
            assert backend is not None
            filename = config.raw.default_model_filename or backend.default_model_filename
            model_path = version_path / filename if filename else None
            if model_path is not None and not model_path.exists():
                raise TritonXError(
                    f"unable to find '{model_path}' for model '{name}' version {v}",
                    Code.NOT_FOUND,
                )
            contexts, passive = self._instance_contexts(
                config, v, model_dir, version_path, model_path, backend
            )
            scheduler = VersionScheduler(
                config,
                v,
                backend,
                contexts,
                passive,
                self.rate_limiter,
                self.metrics_options.latency_stats(config),
            )
            async with self._load_slots:
                started = time.monotonic()
                await scheduler.start()
                ventry.load_seconds = time.monotonic() - started
        except Exception as exc:
            err = TritonXError.wrap(exc)
            ventry.state, ventry.reason, ventry.scheduler = (
                ModelState.UNAVAILABLE,
                err.as_string(),
                None,
            )
            log.error("failed to load '%s' version %d: %s", name, v, err.as_string())
            return
        ventry.scheduler = scheduler
        ventry.state, ventry.reason = ModelState.READY, ""
        log.info("successfully loaded '%s' version %d", name, v)

    def _instance_contexts(
        self,
        config: ModelConfig,
        version: int,
        model_dir: Path,
        version_path: Path,
        model_path: Path | None,
        backend: Backend,
    ) -> tuple[list[LoadContext], list[bool]]:
        kinds = model_config_pb2.ModelInstanceGroup.Kind
        contexts: list[LoadContext] = []
        passive: list[bool] = []
        for group in config.raw.instance_group:
            kind = kinds.Name(group.kind)
            devices = list(group.gpus) if group.kind == kinds.KIND_GPU else [0]
            n = 0
            for device in devices:
                for _ in range(group.count):
                    spec = InstanceSpec(
                        name=f"{group.name}_{n}",
                        group_name=group.name,
                        kind=kind,
                        device_id=device,
                        index=len(contexts),
                    )
                    n += 1
                    contexts.append(
                        LoadContext(
                            model_name=config.name,
                            version=version,
                            model_dir=model_dir,
                            version_path=version_path,
                            model_path=model_path,
                            config=config,
                            instance=spec,
                            backend_config=backend.config,
                            dataplane=self.dataplane,
                            loop=asyncio.get_running_loop(),
                        )
                    )
                    passive.append(group.passive)
        if passive and all(passive):
            raise invalid_arg(f"model '{config.name}' has only passive instances")
        return contexts, passive

    def _agents(
        self, config: model_config_pb2.ModelConfig
    ) -> list[tuple[RepoAgent, dict[str, str]]]:
        agents: list[tuple[RepoAgent, dict[str, str]]] = []
        for spec in config.model_repository_agents.agents:
            cls = self.registries.repoagents.get(spec.name)
            if cls is None:
                raise invalid_arg(
                    f"unable to find repository agent '{spec.name}' for model '{config.name}'; "
                    "install a tritonx plugin that provides it"
                )
            agents.append((cls(), dict(spec.parameters)))
        return agents

    # ------------------------------------------------------------------ internals: unload

    async def _retire(self, name: str, ventry: VersionEntry, deadline: float | None = None) -> None:
        scheduler = ventry.scheduler
        if scheduler is None:
            return
        ventry.state = ModelState.UNLOADING
        self._emit(name, ventry.version, ModelState.UNLOADING)
        timeout = None
        if deadline is not None:
            timeout = max(0.0, deadline - asyncio.get_running_loop().time())
        if not await scheduler.drain(timeout):
            log.warning(
                "'%s' version %d: %d requests still in flight at unload",
                name,
                ventry.version,
                scheduler.inflight,
            )
        remaining = None
        if deadline is not None:
            remaining = max(0.0, deadline - asyncio.get_running_loop().time())
        if not await scheduler.stop(remaining):
            log.warning(
                "'%s' version %d: exit timeout reached with executions still running",
                name,
                ventry.version,
            )
        ventry.scheduler = None
        ventry.state, ventry.reason = ModelState.UNAVAILABLE, UNLOADED_REASON
        self._emit(name, ventry.version, ModelState.UNAVAILABLE, UNLOADED_REASON)
        log.info("successfully unloaded '%s' version %d", name, ventry.version)

    async def _unload(self, name: str, deadline: float | None) -> None:
        async with self._lock(name):
            entry = self.models.get(name)
            if entry is None:
                return
            loaded = [v for v in entry.versions.values() if v.scheduler is not None]
            if entry.model_dir is not None and entry.config_pb is not None:
                for agent, params in entry.agents:
                    await self._agent_call(agent.on_unload, entry, params)
            for v in entry.versions.values():
                if v.scheduler is None and v.reason != UNLOADED_REASON:
                    v.state, v.reason = ModelState.UNAVAILABLE, UNLOADED_REASON
            await asyncio.gather(*(self._retire(name, v, deadline) for v in loaded))
            if entry.model_dir is not None and entry.config_pb is not None:
                for agent, params in reversed(entry.agents):
                    await self._agent_call(agent.on_unload_complete, entry, params)
            entry.fingerprint = None
            entry.error = ""
            entry.override = False
            if entry.temp_dir is not None:
                shutil.rmtree(entry.temp_dir, ignore_errors=True)
                entry.temp_dir = None

    async def _agent_call(
        self, hook: Callable[[AgentContext], Any], entry: ModelEntry, params: dict[str, str]
    ) -> None:
        assert entry.model_dir is not None and entry.config_pb is not None
        ctx = AgentContext(entry.name, entry.model_dir, entry.config_pb, params)
        try:
            await asyncio.to_thread(hook, ctx)
        except Exception:
            log.exception("repository agent hook failed for '%s'", entry.name)

    # ------------------------------------------------------------------ poll mode

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.repository_poll_secs)
            try:
                await self.poll_once()
            except Exception:
                log.exception("repository poll failed")

    async def poll_once(self) -> None:
        """Poll mode: load new and changed models, unload removed ones."""
        sources, duplicates = scan(self.settings.model_repository)
        on_disk = set(sources) | set(duplicates)
        for name in sorted(on_disk):
            await self._load_logged(name)
        for name in sorted(set(self.models) - on_disk):
            if self.models[name].temp_dir is None:
                await self._unload(name, None)

    # ------------------------------------------------------------------ events

    def _emit(self, name: str, version: int, state: ModelState, reason: str = "") -> None:
        if self._on_event is not None:
            try:
                self._on_event(ModelEvent(name, version, state, reason))
            except Exception:
                log.exception("tritonx_model_event hook failed")


def _reported_state(v: VersionEntry) -> tuple[ModelState, str]:
    """A version's state and reason for the index: a READY version whose instance stopped
    being ready (e.g. a python model's worker process died) is UNAVAILABLE, with the
    instance's ``not_ready_reason()``."""
    if v.state is not ModelState.READY or v.ready:
        return v.state, v.reason
    for instance in v.scheduler.instances if v.scheduler is not None else ():
        if instance is not None and not instance.is_ready():
            return ModelState.UNAVAILABLE, instance.not_ready_reason()
    return ModelState.UNAVAILABLE, "model instance is not ready"


def _check_model_name(name: str) -> None:
    trimmed = name.strip()
    if not trimmed:
        raise invalid_arg("Model name cannot be empty. Please enter a valid name to deploy.")
    if trimmed == ".." or "/" in trimmed or "\\" in trimmed:
        raise invalid_arg(
            f"invalid model name '{name}', model name must not contain path traversal characters"
        )


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    return "string" if isinstance(value, str) else type(value).__name__


def _file_bytes(key: str, value: object) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError as exc:
            raise invalid_arg(f"file parameter '{key}' is not valid base64: {exc}") from exc
    raise invalid_arg(f"Unrecognized load parameter '{key}' with type '{_type_name(value)}'")


def _write_override_dir(name: str, files: Mapping[str, bytes]) -> Path:
    """A temporary model folder holding the override files (paths may not escape it)."""
    root = Path(tempfile.mkdtemp(prefix="tritonx-override-"))
    model_dir = root / name
    model_dir.mkdir()
    base = model_dir.resolve()
    try:
        for rel, data in files.items():
            target = (model_dir / rel).resolve()
            if target != base and base not in target.parents:
                raise invalid_arg(
                    f"Invalid file parameter 'file:{rel}' with normalized path '{target}' must "
                    "stay within model directory."
                )
            if len(Path(rel).name.encode()) > 255:
                raise TritonXError(
                    f"failed to load '{name}', failed to poll from model repository",
                    Code.INTERNAL,
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return model_dir


def _tree_stamp(path: Path) -> tuple[tuple[str, int, int], ...]:
    """(relative path, mtime, size) of every file under ``path``: changes mean a reload."""
    stamp: list[tuple[str, int, int]] = []
    for dirpath, _dirs, filenames in os.walk(path):
        for filename in filenames:
            full = os.path.join(dirpath, filename)
            try:
                st = os.stat(full)
            except OSError:
                continue
            stamp.append((os.path.relpath(full, path), st.st_mtime_ns, st.st_size))
    return tuple(sorted(stamp))


__all__ = ["CONFIG_FILENAME", "ModelManager"]
