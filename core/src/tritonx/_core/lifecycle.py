"""Loading and unloading models: the per-version state machine and the control modes.

``ModelManager`` is the only owner of loaded models. A load runs in Triton's order:

1. the repository localizes the model folder (``tritonx.Repository``);
2. the raw config is read (``config.pbtxt`` or a load-API override);
3. the repository agents' LOAD actions run (``_core.agents``) and may replace the folder;
4. core and backend auto-complete run on that folder, then normalization and validation
   (``_core.model_config``);
5. a scheduler per selected version starts its instances (``_core.scheduler``);
6. the agents' LOAD_COMPLETE or LOAD_FAIL actions run.

An ensemble (``platform: "ensemble"``) has no backend: after step 4 its composing models are
loaded first (in the same load operation, a :class:`LoadSession`), then it is validated
against their completed configs (``_core.ensemble``) and gets an ensemble scheduler. Like
Triton's dependency graph: a cycle between ensembles, a composing model that is missing or
failed, fails the ensemble with Triton's message; a composing model that is reloaded reloads
the ensembles that use it; ``unload_dependents`` also unloads the composing models nobody
else needs; an ensemble is READY only while its composing models are.

A reload that fails leaves the old version serving; an unload waits for the requests already
accepted, up to ``--model-unload-timeout-secs`` (or the server's ``--exit-timeout-secs`` when
it exits): then the requests still queued fail, and instances still executing are aborted (a
python model's worker process is killed) or their threads abandoned (:meth:`_retire`). States
(LOADING, READY, UNLOADING, UNAVAILABLE + reason) feed readiness, the repository index and the
start-up table (``_core.status``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonx._core import model_config as cfg
from tritonx._core.agents import AgentChain, AgentLoadError
from tritonx._core.ensemble import composing_models, is_ensemble, validate_with_composing
from tritonx._core.load_request import (
    LoadRequest,
    check_model_name,
    poll_failed,
    remove_override_dir,
    write_override_dir,
)
from tritonx._core.metrics import MetricsOptions
from tritonx._core.rate_limiter import RateLimiter
from tritonx._core.response_cache import CacheScope, load_stamp
from tritonx._core.scheduler import Scheduler, make_scheduler
from tritonx._core.status import DUPLICATE_REASON, UNLOADED_REASON, index_rows, status_rows
from tritonx._core.warmup import warm_up
from tritonx.backend import AutoCompleteContext, Backend, InstanceSpec, LoadContext
from tritonx.classification import LabelCache
from tritonx.config import EditableModelConfig, ModelConfig, ServerSettings
from tritonx.errors import Code, PluginError, TritonXError, invalid_arg, not_found, unavailable
from tritonx.plugins import Registries
from tritonx.proto import model_config_pb2
from tritonx.repository import Repository
from tritonx.stats import LoadedVersion
from tritonx.types import ModelEvent, ModelState, RepositoryEntry

if TYPE_CHECKING:
    from tritonx.handle import ServerHandle

log = logging.getLogger("tritonx.lifecycle")


@dataclass
class VersionEntry:
    """One version of a model and its state."""

    version: int
    state: ModelState = ModelState.UNKNOWN
    reason: str = ""
    config: ModelConfig | None = None
    scheduler: Scheduler | None = None
    #: seconds the last successful load took (``nv_model_load_duration_secs``)
    load_seconds: float = 0.0
    #: the folder the version was loaded from (after the repository agents)
    model_dir: Path | None = None
    #: whether the response cache sits in front of this version
    cached: bool = False
    #: the response cache's key scope for this load of the version (None: not cached)
    cache_scope: CacheScope | None = None
    _labels: LabelCache | None = field(default=None, repr=False)

    @property
    def ready(self) -> bool:
        return (
            self.state is ModelState.READY
            and self.scheduler is not None
            and self.scheduler.is_ready()
        )

    def labels(self, output: str) -> list[str] | None:
        """The classification labels of ``output`` from its ``label_filename``."""
        if self.config is None or self.model_dir is None:
            return None
        io = self.config.output_map.get(output)
        filename = io.label_filename if io is not None else ""
        if not filename:
            return None
        if self._labels is None:
            self._labels = LabelCache(self.model_dir)
        return self._labels.get(filename)


@dataclass
class ModelEntry:
    """A model the manager was asked to load, with its versions (or a model-level error)."""

    name: str
    versions: dict[int, VersionEntry] = field(default_factory=dict)
    #: a failure that concerns the whole model (config error, duplicate, no versions)
    error: str = ""
    #: the repository's change stamp when the model was last loaded (None: not loaded)
    stamp: Hashable | None = None
    agents: AgentChain | None = None
    #: where the served files came from: (repository, localized folder)
    localized: tuple[Repository, Path] | None = None
    #: a folder holding load-API file overrides (removed when replaced or unloaded)
    override_dir: Path | None = None
    #: a config override given with the last load (kept until a plain load)
    override: bool = False
    #: versions the last load attempt failed to load (an old version may still serve)
    last_failures: list[VersionEntry] = field(default_factory=list)
    #: loaded by name (start-up or the load API), not only as an ensemble's composing model
    explicit: bool = False
    #: ``error`` comes from the dependency graph (Triton's "not valid" ensembles)
    invalid: bool = False

    @property
    def known(self) -> bool:
        return bool(self.versions) or bool(self.error) or self.stamp is not None

    def ready_versions(self) -> list[int]:
        return sorted(v for v, e in self.versions.items() if e.ready)


@dataclass
class Prepared:
    """A model's config read, passed through the agents and completed; versions not loaded."""

    config: Any  # inference.ModelConfig
    model_dir: Path
    versions: dict[int, Path]
    selected: list[int]
    missing: list[int]
    #: None for ensembles
    backend: Backend | None
    agents: AgentChain | None = None
    #: ensembles: the composing models' configs it was validated against
    composing: dict[str, ModelConfig] = field(default_factory=dict)


class DependencyError(TritonXError):
    """An ensemble that cannot load because of its composing models (Triton's dependency
    graph status: INVALID_ARG)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Code.INVALID_ARG)


@dataclass(eq=False)
class LoadSession:
    """One load operation (start-up, a repository poll, a load API call): each model it
    touches is loaded once, ensembles after their composing models."""

    tasks: dict[str, asyncio.Task[ModelEntry | None]] = field(default_factory=dict)
    every: list[asyncio.Task[ModelEntry | None]] = field(default_factory=list)
    #: models this operation loaded or reloaded (not the no-op loads)
    changed: set[str] = field(default_factory=set)

    async def wait(self) -> None:
        """Wait for every load started in this operation (including reloads it caused)."""
        while True:
            pending = [t for t in self.every if not t.done()]
            if not pending:
                break
            await asyncio.wait(pending)
        for task in self.every:
            if not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                if not isinstance(exc, TritonXError):
                    log.error("model load failed", exc_info=exc)


class ModelManager:
    """Loads, reloads and unloads models from the configured repositories."""

    def __init__(
        self,
        settings: ServerSettings,
        registries: Registries,
        server: ServerHandle | None = None,
        on_event: Callable[[ModelEvent], None] | None = None,
        *,
        cache_enabled: bool = False,
    ) -> None:
        # keys a backend does not read stop the start (``serve`` and ``check`` alike)
        registries.backends.check_config(settings.backend_config)
        cfg.check_config_name(settings.model_config_name)
        if settings.model_load_retry_count < 0:
            raise invalid_arg(
                f"--model-load-retry-count must be 0 or more, got {settings.model_load_retry_count}"
            )
        if not settings.model_unload_timeout_secs >= 0:
            raise invalid_arg(
                "--model-unload-timeout-secs must be 0 or more, got "
                f"{settings.model_unload_timeout_secs}"
            )
        self.settings = settings
        self.registries = registries
        self.server = server
        self.models: dict[str, ModelEntry] = {}
        self.repositories = [open_repository(url, registries) for url in settings.model_repository]
        self._cache_enabled = cache_enabled
        self._on_event = on_event
        self._backends: dict[str, Backend] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._load_slots = asyncio.Semaphore(max(1, settings.model_load_thread_count))
        self.rate_limiter = RateLimiter.from_settings(
            settings.rate_limit, settings.rate_limit_resource
        )
        self.metrics_options = MetricsOptions.from_config(settings.metrics_config)
        self._poll_task: asyncio.Task[None] | None = None
        #: ensemble → its composing models, from its last prepared config (until unloaded)
        self._ensemble_deps: dict[str, tuple[str, ...]] = {}
        #: set when the server begins to exit (:meth:`shutdown`), with its deadline (loop
        #: time; None: no limit): unloads under way hurry to it
        self._exiting = asyncio.Event()
        self._exit_deadline: float | None = None

    # ------------------------------------------------------------------ start / stop

    async def start(self) -> None:
        """Load the start-up models for the control mode; with ``exit_on_error`` a failure raises."""
        sources, duplicates = await asyncio.to_thread(self.scan, strict=True)
        mode = self.settings.model_control_mode
        found = sorted(set(sources) | set(duplicates))
        if mode == "explicit":
            wanted = list(self.settings.load_model)
            names = found if "*" in wanted else wanted
        else:
            names = found
        session = LoadSession()
        for name in names:
            self._session_load(session, name, explicit=True)
        await session.wait()
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
        self._exit_deadline = deadline
        self._exiting.set()  # unloads under way (explicit, reloads) end by the exit deadline
        # ensembles first, outer before inner, so their requests drain while the composing
        # models still serve
        deps = dict(self._ensemble_deps)
        ensembles = [n for n in self.models if n in deps]
        while ensembles:
            inner = {d for e in ensembles for d in deps[e]}
            outer = [e for e in ensembles if e not in inner] or ensembles
            await asyncio.gather(*(self._unload(n, deadline) for n in outer))
            ensembles = [e for e in ensembles if e not in outer]
        await asyncio.gather(*(self._unload(n, deadline) for n in list(self.models)))
        for backend in self._backends.values():
            try:
                backend.close()
            except Exception:
                log.exception("closing backend '%s' failed", backend.name)
        self._backends.clear()

    # ------------------------------------------------------------------ repositories

    def scan(self, strict: bool = False) -> tuple[dict[str, Repository], dict[str, list[str]]]:
        """The models of every repository: those found once (with their repository), and the
        names found in two or more (with their URLs), which Triton refuses to serve.

        :param strict: raise when a repository cannot be read (start-up, as Triton); else
            log it and go on with the others.
        """
        found: dict[str, list[Repository]] = {}
        for repo in self.repositories:
            try:
                names = repo.list_models()
            except TritonXError:
                if strict:
                    raise
                log.exception("failed to read model repository %s", repo.url)
                continue
            for name in names:
                found.setdefault(name, []).append(repo)
        models = {name: repos[0] for name, repos in found.items() if len(repos) == 1}
        duplicates = {
            name: [r.url for r in repos] for name, repos in found.items() if len(repos) > 1
        }
        return models, duplicates

    # ------------------------------------------------------------------ queries

    def get(self, name: str, version: int | None) -> VersionEntry:
        """The READY version to serve (the highest ready one when ``version`` is None).

        Raises Triton's "Request for unknown model" errors.
        """
        entry = self.models.get(name)
        if entry is None or not entry.known:
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
        """Triton's strict readiness: every model has versions, each READY or unloaded.

        An ensemble waiting for a composing model that was unloaded counts as unloaded (Triton
        unloads it, and loads it again with the composing model)."""
        for name, entry in self.models.items():
            if entry.error:
                return False
            if not entry.versions and entry.stamp is not None:
                return False
            waiting = name in self._ensemble_deps
            for v in entry.versions.values():
                if v.ready or v.reason == UNLOADED_REASON:
                    continue
                if waiting and v.state is ModelState.READY:
                    continue
                return False
        return True

    def index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        """The repository index: every model on disk or known, with version states."""
        sources, duplicates = self.scan()
        return index_rows(set(sources), set(duplicates), self.models, ready_only)

    def status_rows(self) -> list[tuple[str, str, str]]:
        """(model, version, status) rows of the start-up table."""
        return status_rows(self.models)

    def loaded_versions(self) -> Iterator[LoadedVersion]:
        """Every version with a running scheduler, by name then version."""
        for name in sorted(self.models):
            entry = self.models[name]
            for version in sorted(entry.versions):
                v = entry.versions[version]
                if v.scheduler is None or v.config is None:
                    continue
                yield LoadedVersion(
                    name,
                    version,
                    tuple(sorted(v.config.raw.metric_tags.items())),
                    v.scheduler.stats,
                    v.scheduler.pending_count,
                    v.load_seconds,
                    v.cached,
                )

    # ------------------------------------------------------------------ load / unload API

    async def load(self, name: str, parameters: Mapping[str, Any] | None = None) -> None:
        """The repository load API (explicit mode): load or reload ``name``.

        :param parameters: ``config`` (a JSON ModelConfig string) and ``file:<path>`` entries
            (bytes, or base64 text from HTTP) as Triton's load request carries them.
        """
        self._check_explicit()
        check_model_name(name)
        try:
            request = LoadRequest.parse(name, parameters)
        except TritonXError as exc:
            # Triton reads the load parameters while polling the model: the poll failure
            raise poll_failed(name, exc.message) from exc
        session = LoadSession()
        task = self._session_load(session, name, request, explicit=True)
        await session.wait()
        entry = task.result()  # raises what the load raised
        if entry is None:
            raise TritonXError(
                f"failed to load '{name}', failed to poll from model repository", Code.INTERNAL
            )
        if entry.error:  # set only when no version of the model serves
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
        check_model_name(name)
        composing = self._ensemble_deps.get(name, ())
        await self._unload(name, None)
        if unload_dependents:
            await self._unload_composing(composing)

    async def _unload_composing(self, names: tuple[str, ...]) -> None:
        """Triton's cascading removal: composing models that were not loaded by name and
        that no loaded ensemble uses any more are unloaded, and theirs in turn."""
        queue = list(names)
        while queue:
            name = queue.pop(0)
            entry = self.models.get(name)
            if entry is None or entry.explicit or not self._has_loaded(name):
                continue
            if any(
                name in deps and self._has_loaded(ensemble)
                for ensemble, deps in self._ensemble_deps.items()
                if ensemble != name
            ):
                continue
            queue.extend(self._ensemble_deps.get(name, ()))
            await self._unload(name, None)

    def _check_explicit(self) -> None:
        if self.settings.model_control_mode != "explicit":
            raise unavailable("explicit model load / unload is not allowed if polling is enabled")

    # ------------------------------------------------------------------ internals: load

    def _session_load(
        self,
        session: LoadSession,
        name: str,
        request: LoadRequest | None = None,
        *,
        explicit: bool = False,
        force: bool = False,
    ) -> asyncio.Task[ModelEntry | None]:
        """The load of ``name`` in ``session``: started once (``force`` starts it again,
        bypassing the no-op check, once the earlier one is done)."""
        task = session.tasks.get(name)
        if task is not None and not (force and task.done()):
            return task
        task = asyncio.get_running_loop().create_task(
            self._load(name, request, session, explicit=explicit, force=force),
            name=f"tritonx-load-{name}",
        )
        session.tasks[name] = task
        session.every.append(task)
        return task

    def _has_loaded(self, name: str) -> bool:
        entry = self.models.get(name)
        return entry is not None and any(v.scheduler is not None for v in entry.versions.values())

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
        request: LoadRequest | None,
        session: LoadSession | None = None,
        *,
        explicit: bool = False,
        force: bool = False,
    ) -> ModelEntry | None:
        if session is None:
            session = LoadSession()
        overrides = request is not None and request.overrides
        entry = await self._load_locked(name, request, session, overrides, force)
        if entry is not None and explicit:
            entry.explicit = True
        return entry

    async def _load_locked(
        self,
        name: str,
        request: LoadRequest | None,
        session: LoadSession,
        overrides: bool,
        force: bool,
    ) -> ModelEntry | None:
        async with self._lock(name):
            sources, duplicates = await asyncio.to_thread(self.scan)
            entry = self.models.get(name)
            if name in duplicates:
                new = entry or ModelEntry(name)
                if not new.versions:
                    new.error = DUPLICATE_REASON
                    new.stamp = None
                    self.models[name] = new
                log.error(
                    "failed to poll model '%s': not unique across all model repositories", name
                )
                return new if overrides else None
            repo = sources.get(name)
            override_dir: Path | None = None
            if request is not None and request.files:
                override_dir = await asyncio.to_thread(write_override_dir, name, request.files)
            elif repo is None:
                log.error(
                    "failed to poll model '%s': model not found in any model repository.", name
                )
                return None
            if entry is None:
                entry = self.models[name] = ModelEntry(name)
            stamp: Hashable | None = None
            if override_dir is None and repo is not None:
                stamp = await asyncio.to_thread(repo.stamp, name)
                if (
                    stamp == entry.stamp
                    and not force
                    and not overrides
                    and not entry.override
                    and entry.versions
                    and all(v.ready for v in entry.versions.values())
                    and not await self._composing_changed(name, session)
                ):
                    entry.last_failures = []
                    return entry  # nothing changed: a load is a no-op
            try:
                prepared, localized = await self._prepare(
                    name,
                    repo,
                    override_dir,
                    request.config if request is not None else None,
                    session,
                )
            except TritonXError as exc:
                remove_override_dir(override_dir)
                if isinstance(exc, DependencyError):
                    # the ensemble no longer fits its composing models (or they are gone):
                    # Triton's dependency graph unloads it, whatever was serving
                    for ventry in list(entry.versions.values()):
                        await self._retire(name, ventry)
                    entry.versions = {}
                elif entry.versions and any(v.ready for v in entry.versions.values()):
                    # a failed reload leaves the old versions serving
                    log.error("failed to reload '%s': %s (keeping the loaded versions)", name, exc)
                    if isinstance(exc, AgentLoadError):
                        raise poll_failed(name, exc.message) from exc
                    raise invalid_arg(f"load failed for model '{name}': {exc.message}\n") from exc
                entry.error = exc.message
                entry.invalid = isinstance(exc, DependencyError)
                entry.stamp = None
                self._emit(name, 0, ModelState.UNAVAILABLE, exc.message)
                log.error("failed to load '%s': %s", name, exc.message)
                if isinstance(exc, AgentLoadError):
                    raise poll_failed(name, exc.message) from exc
                return entry
            entry.invalid = False
            await self._apply(entry, prepared)
            session.changed.add(name)
            self._reload_dependents(name, session)
            entry.stamp = stamp if stamp is not None else ("override", id(prepared))
            if override_dir is not None and not any(
                v.ready and v.model_dir == prepared.model_dir for v in entry.versions.values()
            ):
                remove_override_dir(override_dir)  # no version serves from it: failed load
            else:
                if entry.override_dir is not None and entry.override_dir != override_dir:
                    remove_override_dir(entry.override_dir)
                entry.override_dir = override_dir
            if entry.localized is not None and entry.localized != localized:
                old_repo, old_path = entry.localized
                await asyncio.to_thread(old_repo.release, name, old_path)
            entry.localized = localized
            entry.override = overrides
            return entry

    async def _composing_changed(self, name: str, session: LoadSession) -> bool:
        """For an ensemble whose own files did not change: load its composing models (as
        Triton polls them with it) and tell whether any of them was reloaded."""
        deps = [d for d in self._ensemble_deps.get(name, ()) if d != name]
        if not deps:
            return False
        await asyncio.gather(
            *(self._session_load(session, d) for d in deps), return_exceptions=True
        )
        return any(d in session.changed for d in deps)

    def _reload_dependents(self, name: str, session: LoadSession) -> None:
        """``name`` was (re)loaded: reload the loaded ensembles that use it, so they are
        validated again against its new config (in-flight requests finish on the old ones)."""
        for ensemble, deps in list(self._ensemble_deps.items()):
            if ensemble == name or name not in deps or not self._has_loaded(ensemble):
                continue
            task = session.tasks.get(ensemble)
            if task is None or task.done():
                self._session_load(session, ensemble, force=True)

    def _check_cycles(self, name: str) -> None:
        """Triton's ``CircularDependencyCheck`` over the ensembles known so far."""
        deps = self._ensemble_deps
        seen: set[str] = set()

        def visit(current: str) -> str | None:
            for upstream in deps.get(current, ()):
                if upstream == name:
                    return current
                if upstream in seen:
                    continue
                seen.add(upstream)
                found = visit(upstream)
                if found is not None:
                    return found
            return None

        last = visit(name)
        if last is not None:
            raise DependencyError(
                f"circular dependency between ensembles: {name} -> ... -> {last} -> {name}"
            )

    async def _link_ensemble(
        self, name: str, config: Any, session: LoadSession
    ) -> dict[str, ModelConfig]:
        """Load an ensemble's composing models (in ``session``), check them as Triton's
        dependency graph does and validate the ensemble against their completed configs."""
        deps = composing_models(config)
        self._ensemble_deps[name] = deps
        self._check_cycles(name)
        others = [d for d in deps if d != name]
        results = await asyncio.gather(
            *(self._session_load(session, d) for d in others), return_exceptions=True
        )
        self._check_cycles(name)
        missing = [
            d
            for d, result in zip(others, results, strict=True)
            if result is None or (isinstance(result, BaseException) and d not in self.models)
        ]
        if missing:
            raise DependencyError(
                f"ensemble {name} contains models that are not available or ambiguous: "
                + ", ".join(sorted(missing))
            )
        required: dict[str, set[int]] = {}
        for step in config.ensemble_scheduling.step:
            required.setdefault(step.model_name, set()).add(int(step.model_version))
        composing: dict[str, ModelConfig] = {}
        for dep in others:
            entry = self.models[dep]
            ready = entry.ready_versions()
            if entry.invalid and entry.error:
                raise DependencyError(
                    f"ensemble '{name}' depends on '{dep}' which is not valid. Model '{dep}' "
                    f"failed with error: {entry.error}"
                )
            if not ready:
                reason = entry.error or "".join(
                    f"version {v.version} is at {v.state.value} state: {v.reason};"
                    for v in entry.versions.values()
                    if v.reason and v.reason != UNLOADED_REASON
                )
                message = f"ensemble '{name}' depends on '{dep}' which has no loaded version."
                if reason:
                    message += f" Model '{dep}' loading failed with error: {reason}"
                raise DependencyError(message)
            for version in sorted(required[dep]):
                if version != -1 and version not in ready:
                    raise DependencyError(
                        f"ensemble '{name}' depends on '{dep}' whose required version "
                        f"{version} is not loaded."
                    )
            composing[dep] = self.get(dep, None).config  # type: ignore[assignment]
        try:
            validate_with_composing(config, {d: c.raw for d, c in composing.items()})
        except DependencyError:
            raise
        except TritonXError as exc:
            raise DependencyError(exc.message) from exc
        return composing

    async def _prepare(
        self,
        name: str,
        repo: Repository | None,
        override_dir: Path | None,
        override: Any,
        session: LoadSession,
    ) -> tuple[Prepared, tuple[Repository, Path] | None]:
        """Steps 1-4 of a load: localize, read the raw config, run the agents' LOAD actions,
        complete and validate the config on the folder the agents returned."""
        localized: tuple[Repository, Path] | None = None
        if override_dir is not None:
            folder = override_dir
        else:
            assert repo is not None
            folder = await asyncio.to_thread(repo.localize, name)
            localized = (repo, folder)
        raw = await asyncio.to_thread(self._read_config, name, folder, override)
        agents = AgentChain.resolve(name, raw, self.registries.repoagents)
        loaded_from = await agents.load(folder) if agents else folder
        try:
            if loaded_from != folder:
                if override is None:
                    raw = await asyncio.to_thread(self._read_config, name, loaded_from, None)
                    agents.config = raw
                folder = loaded_from
            prepared = await asyncio.to_thread(self._complete, name, raw, folder)
            if is_ensemble(prepared.config):
                prepared.composing = await self._link_ensemble(name, prepared.config, session)
        except BaseException:
            if agents:
                await agents.load_failed()
            raise
        prepared.agents = agents if agents else None
        return prepared, localized

    def _read_config(self, name: str, folder: Path, override: Any) -> Any:
        if override is not None:
            config = model_config_pb2.ModelConfig()
            config.CopyFrom(override)
            return config
        path = cfg.config_path(folder, self.settings.model_config_name)
        if path.exists():
            return cfg.read_config_file(path)
        if self.settings.disable_auto_complete_config:
            raise TritonXError(
                f"model configuration is not provided for model '{name}' (no {path})",
                Code.NOT_FOUND,
            )
        return model_config_pb2.ModelConfig()

    def _complete(self, name: str, raw: Any, folder: Path) -> Prepared:
        """Core and backend auto-complete, normalization and validation (worker thread)."""
        config = model_config_pb2.ModelConfig()
        config.CopyFrom(raw)
        versions = cfg.version_folders(folder)
        first = versions[min(versions)] if versions else None
        cfg.auto_complete_backend_fields(config, name, first, self.registries.backends)
        cfg.validate_at_poll(config, name, strict=self.settings.disable_auto_complete_config)
        selected, missing = cfg.versions_to_load(config, versions)
        backend = None if is_ensemble(config) else self._backend(config.backend, name, folder)
        if backend is not None and not self.settings.disable_auto_complete_config:
            filename = config.default_model_filename or backend.default_model_filename
            ctx = AutoCompleteContext(
                config=EditableModelConfig(config),
                model_dir=folder,
                version_path=first if first is not None else folder,
                model_path=first / filename if first is not None and filename else None,
                backend_config=backend.config,
            )
            try:
                backend.auto_complete_config(ctx)
            except TritonXError:
                raise
            except Exception as exc:
                raise invalid_arg(f"auto-complete of model '{name}' failed: {exc}") from exc
        cfg.normalize(config)
        cfg.normalize_instance_groups(
            config, type(backend).default_cpu_instance_count if backend is not None else 1
        )
        cfg.validate(config, name)
        cfg.check_model_files(config, folder)
        if config.response_cache.enable and not self._cache_enabled:
            log.warning(
                "model '%s' enables response_cache but the server has no cache "
                "(--cache-config <cache>,<key>=<value>): responses are not cached",
                name,
            )
        return Prepared(config, folder, versions, selected, missing, backend)

    async def check(self, name: str, repo: Repository) -> Prepared:
        """Steps 1-4 of a load and no more (``tritonx check``): localize, read the config,
        run the repository agents' LOAD actions (a checksum is verified, a decrypt agent
        decrypts), complete and validate on the folder they returned. No instance is loaded;
        the agents then get LOAD_FAIL (nothing will serve: a decrypt agent wipes its folder)
        and the localized copy is released."""
        folder = await asyncio.to_thread(repo.localize, name)
        try:
            raw = await asyncio.to_thread(self._read_config, name, folder, None)
            agents = AgentChain.resolve(name, raw, self.registries.repoagents)
            loaded_from = await agents.load(folder) if agents else folder
            try:
                if loaded_from != folder:
                    raw = await asyncio.to_thread(self._read_config, name, loaded_from, None)
                return await asyncio.to_thread(self._complete, name, raw, loaded_from)
            finally:
                if agents:
                    await agents.load_failed()
        finally:
            await asyncio.to_thread(repo.release, name, folder)

    def _backend(self, name: str, model: str, folder: Path) -> Backend:
        backend = self._backends.get(name)
        if backend is not None:
            return backend
        cls = self.registries.backends.get(name)
        if cls is None:
            raise invalid_arg(
                f"unable to find backend library for backend '{name}' (model '{model}' at "
                f"{folder}); install a tritonx plugin that provides it"
            )
        settings = dict(self.settings.backend_config.get("", {}))
        settings.update(self.settings.backend_config.get(name, {}))
        backend = self._backends[name] = cls(settings)
        return backend

    async def _apply(self, entry: ModelEntry, prepared: Prepared) -> None:
        """Step 5-6: load the prepared versions, swap them in, unload what they replace."""
        name = entry.name
        config = ModelConfig(prepared.config)
        new_versions: dict[int, VersionEntry] = {}
        cached = bool(prepared.config.response_cache.enable) and self._cache_enabled
        stamp = await asyncio.to_thread(load_stamp, prepared) if cached else b""
        for v in prepared.selected:
            new_versions[v] = VersionEntry(
                v, ModelState.LOADING, config=config, model_dir=prepared.model_dir, cached=cached
            )
            new_versions[v].cache_scope = CacheScope(name, v, stamp) if cached else None
            if v not in entry.versions:
                entry.versions[v] = new_versions[v]
            self._emit(name, v, ModelState.LOADING)
        await asyncio.gather(
            *(
                self._load_version(new_versions[v], config, prepared, prepared.versions[v])
                for v in prepared.selected
            )
        )
        for v in prepared.missing:
            new_versions[v] = VersionEntry(
                v,
                ModelState.UNAVAILABLE,
                f"version {v} is specified for model '{name}', but the version directory is "
                "not present",
                config=config,
            )
        succeeded = any(v.ready for v in new_versions.values())
        replaced_agents = entry.agents if succeeded else None
        if prepared.agents is not None:
            if succeeded:
                await prepared.agents.load_completed()
            else:
                await prepared.agents.load_failed()
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
        if succeeded or entry.agents is None:
            entry.agents = prepared.agents
        for ventry in merged.values():
            self._emit(name, ventry.version, ventry.state, ventry.reason)
        for prev in retired:
            await self._retire(name, prev)
        if (
            replaced_agents is not None
            and replaced_agents is not entry.agents
            and not any(old.get(v) is ventry for v, ventry in merged.items())
        ):
            # a reload replaced the whole model: its old agents get UNLOAD / UNLOAD_COMPLETE
            await replaced_agents.unload()
            await replaced_agents.unload_completed()
        if any(v.ready for v in merged.values()):
            log.info("successfully loaded '%s'", name)

    async def _load_version(
        self, ventry: VersionEntry, config: ModelConfig, prepared: Prepared, version_path: Path
    ) -> None:
        name, v = config.name, ventry.version
        log.info("loading: %s:%d", name, v)
        attempts = 1 + self.settings.model_load_retry_count
        for attempt in range(1, attempts + 1):
            try:
                scheduler = await self._create_version(ventry, config, prepared, version_path)
            except Exception as exc:
                err = TritonXError.wrap(exc)
                if attempt < attempts:  # --model-load-retry-count: Triton creates it again
                    log.warning(
                        "failed to load '%s' version %d (attempt %d of %d), retrying: %s",
                        name,
                        v,
                        attempt,
                        attempts,
                        err.as_string(),
                    )
                    continue
                ventry.state, ventry.reason, ventry.scheduler = (
                    ModelState.UNAVAILABLE,
                    err.as_string(),
                    None,
                )
                log.error("failed to load '%s' version %d: %s", name, v, err.as_string())
                return
            break
        ventry.scheduler = scheduler
        ventry.state, ventry.reason = ModelState.READY, ""
        log.info("successfully loaded '%s' version %d", name, v)

    async def _create_version(
        self, ventry: VersionEntry, config: ModelConfig, prepared: Prepared, version_path: Path
    ) -> Scheduler:
        """Create one version's scheduler: its instances loaded and warmed up (Triton's
        ``CreateModel``); on failure nothing of it is left running."""
        name, v = config.name, ventry.version
        backend = prepared.backend
        contexts: list[LoadContext] = []
        passive: list[bool] = []
        if backend is not None:
            filename = config.raw.default_model_filename or backend.default_model_filename
            model_path = version_path / filename if filename else None
            if model_path is not None and not model_path.exists():
                raise TritonXError(
                    f"unable to find '{model_path}' for model '{name}' version {v}",
                    Code.NOT_FOUND,
                )
            contexts, passive = self._instance_contexts(
                config, v, prepared.model_dir, version_path, model_path, backend
            )
        scheduler = make_scheduler(
            config,
            v,
            backend,
            contexts,
            passive,
            self.rate_limiter,
            self.metrics_options.latency_stats(config),
            server=self.server,
            composing=prepared.composing,
            inline_execution_us=self.settings.inline_execution_us,
        )
        async with self._load_slots:
            started = time.monotonic()
            await scheduler.start()
            await warm_up(scheduler, config, prepared.model_dir, v)
            ventry.load_seconds = time.monotonic() - started
        return scheduler

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
                            server=self.server,
                        )
                    )
                    passive.append(group.passive)
        if passive and all(passive):
            raise invalid_arg(f"model '{config.name}' has only passive instances")
        return contexts, passive

    # ------------------------------------------------------------------ internals: unload

    async def _retire(self, name: str, ventry: VersionEntry, deadline: float | None = None) -> None:
        """Unload one version: wait for its requests in flight until ``deadline`` (loop time;
        default: ``--model-unload-timeout-secs`` from now; never past the server's exit
        deadline), then stop its scheduler with what is left of it: requests still queued
        fail, and executions still running are aborted or abandoned (:meth:`Scheduler.stop`)."""
        scheduler = ventry.scheduler
        if scheduler is None:
            return
        ventry.state = ModelState.UNLOADING
        self._emit(name, ventry.version, ModelState.UNLOADING)
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.settings.model_unload_timeout_secs
        if not await self._drained(scheduler, deadline):
            log.warning(
                "'%s' version %d: %d requests still in flight at the end of the %s",
                name,
                ventry.version,
                scheduler.inflight,
                "exit timeout" if self._exiting.is_set() else "unload timeout",
            )
        remaining = _seconds_left(self._limit(deadline), loop.time())
        if self._exiting.is_set():
            error = TritonXError("Server exiting", Code.UNAVAILABLE)
        else:  # Triton's answer to requests for a version that is not READY
            error = unavailable(
                f"Request for unknown model: '{name}' version {ventry.version} is not at "
                "ready state"
            )
        if not await scheduler.stop(remaining, error):
            log.warning(
                "'%s' version %d: %s reached with executions still running; they were "
                "aborted or abandoned",
                name,
                ventry.version,
                "exit timeout" if self._exiting.is_set() else "unload timeout",
            )
        ventry.scheduler = None
        if ventry.cache_scope is not None:  # its cached responses go with it
            await ventry.cache_scope.retire()
        ventry.state, ventry.reason = ModelState.UNAVAILABLE, UNLOADED_REASON
        self._emit(name, ventry.version, ModelState.UNAVAILABLE, UNLOADED_REASON)
        log.info("successfully unloaded '%s' version %d", name, ventry.version)

    def _limit(self, deadline: float) -> float:
        """``deadline``, or the server's exit deadline when that comes first."""
        if self._exit_deadline is not None:
            return min(deadline, self._exit_deadline)
        return deadline

    async def _drained(self, scheduler: Scheduler, deadline: float) -> bool:
        """Wait until ``scheduler`` has no request in flight; False when :meth:`_limit`
        passed first (the server may begin to exit meanwhile, which brings it closer)."""
        if scheduler.inflight == 0:
            return True
        loop = asyncio.get_running_loop()
        drain = asyncio.ensure_future(scheduler.drain(None))
        try:
            while True:
                waiting: set[asyncio.Future[Any]] = {drain}
                exiting: asyncio.Future[Any] | None = None
                if not self._exiting.is_set():
                    exiting = asyncio.ensure_future(self._exiting.wait())
                    waiting.add(exiting)
                timeout = _seconds_left(self._limit(deadline), loop.time())
                try:
                    done, _ = await asyncio.wait(
                        waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    if exiting is not None:
                        exiting.cancel()
                if drain in done:
                    return bool(drain.result())
                if exiting is None or exiting not in done:
                    return False  # the time is up
        finally:
            drain.cancel()

    async def _unload(self, name: str, deadline: float | None) -> None:
        async with self._lock(name):
            entry = self.models.get(name)
            if entry is None:
                return
            loaded = [v for v in entry.versions.values() if v.scheduler is not None]
            agents = entry.agents
            if agents is not None:
                await agents.unload()
            for v in entry.versions.values():
                if v.scheduler is None and v.reason != UNLOADED_REASON:
                    v.state, v.reason = ModelState.UNAVAILABLE, UNLOADED_REASON
            await asyncio.gather(*(self._retire(name, v, deadline) for v in loaded))
            if agents is not None:
                await agents.unload_completed()
            entry.agents = None
            entry.stamp = None
            entry.error = ""
            entry.invalid = False
            entry.explicit = False
            entry.override = False
            self._ensemble_deps.pop(name, None)
            remove_override_dir(entry.override_dir)
            entry.override_dir = None
            if entry.localized is not None:
                repo, path = entry.localized
                entry.localized = None
                await asyncio.to_thread(repo.release, name, path)

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
        sources, duplicates = await asyncio.to_thread(self.scan)
        on_disk = set(sources) | set(duplicates)
        session = LoadSession()
        for name in sorted(on_disk):
            task = self._session_load(session, name, explicit=True)
            await asyncio.wait([task])
        await session.wait()
        for name in sorted(set(self.models) - on_disk):
            if self.models[name].override_dir is None:
                await self._unload(name, None)

    # ------------------------------------------------------------------ events

    def _emit(self, name: str, version: int, state: ModelState, reason: str = "") -> None:
        if self._on_event is not None:
            try:
                self._on_event(ModelEvent(name, version, state, reason))
            except Exception:
                log.exception("tritonx_model_event hook failed")


def _seconds_left(deadline: float, now: float) -> float | None:
    """Seconds from ``now`` to ``deadline`` (0 once past; None for an infinite one)."""
    if math.isinf(deadline):
        return None
    return max(0.0, deadline - now)


def open_repository(url: str | Path, registries: Registries) -> Repository:
    """The repository implementation for ``url``, chosen by its scheme."""
    text = str(url)
    cls = registries.repositories.for_url(text)
    if cls is None:
        raise PluginError(
            f"no repository plugin serves '{text}': install a tritonx plugin that registers "
            "its URL scheme"
        )
    return cls(text, {})
