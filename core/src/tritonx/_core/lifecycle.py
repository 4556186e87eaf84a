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

A reload loads the new versions beside the serving ones and swaps them in when the whole load
is ready (a version loading beside a serving one keeps the server ready); requests in flight
finish on the old versions, which are then unloaded, and a reloaded version goes on counting
in the old one's statistics. A reload that fails leaves the old versions serving (Triton's
all-or-nothing load: ``merge_versions``). ``--reload`` (``_core.reloader``) watches the local
repositories and reloads the models whose files change (:meth:`ModelManager.reload_changed`).

An unload waits for the requests already accepted, up to ``--model-unload-timeout-secs`` (or
the server's ``--exit-timeout-secs`` when it exits): then the requests still queued fail, and
instances still executing are aborted (a python model's worker process is killed) or their
threads abandoned. States (LOADING, READY, UNLOADING, UNAVAILABLE + reason) feed readiness,
the repository index and the start-up table (``_core.status``).

With ``--model-load-on-demand`` a lookup (:meth:`ModelManager.get`) of a model that is not
loaded raises :class:`~tritonx.errors.NotLoaded`, and ``_core.residency`` loads it, within
the budgets it keeps (least-recently-used unloads, idle unloads).

With ``--model-namespacing`` each repository is a namespace: models are keyed
``<repository>::<name>``, so several repositories may have a model of one name; the load and
unload APIs act on every namespace's model of the name, a request finds the one model known
under its name (``_core.queries``), and an ensemble's steps resolve in its own namespace first
and again when that changes (``_core.namespaces``, Triton's rules).

Beside this module: the entries (``_core.entries``), the repositories and what they list
(``_core.repository_listing``, ``_core.registration``), steps 1-4 of a load
(``_core.load_pipeline``), 5-6 (``_core.version_swap``), the ensembles' dependency graph
(``_core.dependencies``), the unload of a version (``_core.unloading``), what is reported
(``_core.status``), loads on demand (``_core.residency``). :class:`ModelManager` decides what
to load and when, and unloads; names others import from here stay here (``__all__``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonx._core.agents import AgentLoadError
from tritonx._core.dependencies import DependencyError, DependencyGraph, composing_configs
from tritonx._core.ensemble_config import composing_models
from tritonx._core.entries import (
    LoadSession,
    ModelEntry,
    Prepared,
    VersionEntry,
)
from tritonx._core.load_pipeline import (
    LoadPipeline,
    PollError,
    open_repository,
)
from tritonx._core.load_request import (
    LoadRequest,
    check_model_name,
    poll_failed,
    remove_override_dir,
    write_override_dir,
)
from tritonx._core.namespaces import Namespaces
from tritonx._core.queries import ModelQueries
from tritonx._core.registration import renamed
from tritonx._core.reloader import Reloader, watched_folder
from tritonx._core.repository_listing import RepositoryListing
from tritonx._core.residency import Residency
from tritonx._core.status import (
    DUPLICATE_REASON,
    raise_load_error,
)
from tritonx._core.unloading import Unloads
from tritonx._core.version_swap import VersionSwap, keep_files, release_files
from tritonx._dataplane.stats import LoadedVersion
from tritonx._runtime.plugins import Registries
from tritonx.config import ModelConfig, ServerSettings
from tritonx.errors import Code, TritonXError, invalid_arg, unavailable
from tritonx.repository import Repository
from tritonx.types import ModelEvent, ModelState

if TYPE_CHECKING:
    from tritonx.handle import ServerHandle

__all__ = [
    "DependencyError",
    "LoadSession",
    "LoadedVersion",
    "ModelEntry",
    "ModelManager",
    "Prepared",
    "VersionEntry",
    "open_repository",
]

log = logging.getLogger("tritonx.lifecycle")


class ModelManager(ModelQueries):
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
        # the settings themselves are checked by tritonx._runtime.settings_check (Server.start, and
        # the check command); keys a backend does not read stop the start here, where the
        # backends are known (``serve`` and ``check`` alike)
        registries.backends.check_config(settings.backend_config)
        self.settings = settings
        self.registries = registries
        self.server = server
        self.models: dict[str, ModelEntry] = {}
        repositories = [open_repository(url, registries) for url in settings.model_repository]
        #: the repositories and what they list (:meth:`scan`, :meth:`listed`)
        self.listing = RepositoryListing(
            repositories, settings.unknown_model_rescan_secs, settings.model_namespacing
        )
        #: ``--model-namespacing``: models are keyed ``<repository>::<name>``
        self.namespaces = Namespaces(self.listing.ids) if settings.model_namespacing else None
        self._explicit = settings.model_control_mode == "explicit"
        self.pipeline = LoadPipeline(
            settings, registries, server=server, cache_enabled=cache_enabled
        )
        self._on_event = on_event
        self._locks: dict[str, asyncio.Lock] = {}
        self._poll_task: asyncio.Task[None] | None = None
        #: ``--reload``: watches the local repositories (started after the start-up loads)
        self._reloader: Reloader | None = None
        self._deps = DependencyGraph()
        #: the versions' unloads; they hurry to the exit deadline once :meth:`shutdown` begins
        self._unloads = Unloads(settings.model_unload_timeout_secs, self._emit)
        #: steps 5-6 of a load: load the versions, swap them in, unload what they replace
        self._swap = VersionSwap(self.pipeline, self._unloads, self._emit)
        #: ``--model-load-on-demand``: loads on first request, budgets, idle unload
        self.residency = (
            Residency(self, self._deps, settings) if settings.model_load_on_demand else None
        )

    # ------------------------------------------------------------------ start / stop

    async def start(self) -> None:
        """Load the start-up models for the control mode; with ``exit_on_error`` a failure raises."""
        sources, duplicates = await asyncio.to_thread(self.scan, strict=True)
        mode = self.settings.model_control_mode
        found = sorted(set(sources) | set(duplicates))
        if mode == "explicit":
            wanted = list(self.settings.load_model)
            names = found if "*" in wanted else [k for n in wanted for k in self._keys(n, found)]
        else:
            names = found
        if self.residency is not None:
            await self._start_resident(names if mode == "explicit" else [])
            return
        session = LoadSession()
        for name in names:
            self._session_load(session, name, explicit=True)
        await session.wait()
        if self.settings.exit_on_error and any(not self._entry_ok(n) for n in names):
            raise TritonXError("failed to load all models", Code.INTERNAL)
        await self._start_watching()

    async def _start_watching(self) -> None:
        """After the start-up loads: the repository poll (poll mode), the ``--reload``
        watcher."""
        mode = self.settings.model_control_mode
        if mode == "poll" and self.settings.repository_poll_secs > 0:
            self._poll_task = asyncio.create_task(self._poll_loop(), name="tritonx-repository-poll")
        if self.settings.reload:
            folders = [watched_folder(url) for url in self.settings.model_repository]
            self._reloader = Reloader([f for f in folders if f is not None], self.reload_changed)
            await self._reloader.start()

    async def _start_resident(self, names: list[str]) -> None:
        """Start-up with ``--model-load-on-demand``: the ``--load-model`` models are loaded
        (and pinned) one at a time, each measured; the rest wait for their first request."""
        residency = self.residency
        assert residency is not None
        residency.pinned.update(names)
        residency.start()
        for name in names:  # (budgets too small for the pinned models: NoRoom, at start)
            await residency.admit(name, functools.partial(self._start_one, name))
        if self.settings.exit_on_error and any(not self._entry_ok(n) for n in names):
            raise TritonXError("failed to load all models", Code.INTERNAL)
        await self._start_watching()

    async def _start_one(self, name: str) -> None:
        session = LoadSession()
        self._session_load(session, name, explicit=True)
        await session.wait()

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop polling and watching, drain every version (up to ``timeout`` s) and unload
        everything."""
        if self._reloader is not None:
            await self._reloader.stop()
            self._reloader = None
        if self.residency is not None:
            await self.residency.stop()
        if self._poll_task is not None:
            self._poll_task.cancel()
            await asyncio.gather(self._poll_task, return_exceptions=True)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        self._unloads.begin_exit(deadline)  # unloads under way end by the exit deadline
        # ensembles first, outer before inner, so their requests drain while the composing
        # models still serve (the layers listed first: unloading drops dependency entries)
        for outer in list(self._deps.outer_first(self.models)):
            await asyncio.gather(*(self._unload(n, deadline) for n in outer))
        await asyncio.gather(*(self._unload(n, deadline) for n in list(self.models)))
        self.pipeline.close()

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
        if self.residency is None:
            keys = [name]  # (with namespacing: every namespace's model of that name)
            if self.namespaces is not None and not request.files:
                keys = self._keys(name, (await asyncio.to_thread(self.scan))[0])
            for key in keys:
                await self._load_and_report(key, request)
            return
        self.residency.forget_failure(name)
        entry = self.models.get(name)
        if entry is not None:
            entry.demand_failed = False  # the load API's failure counts, as in Triton
        await self.residency.admit(name, lambda: self._load_and_report(name, request))

    async def load_named(self, name: str) -> None:
        """Load ``name`` as the repository API would, without a request's parameters (a load
        on demand); raises the load API's errors (the model then does not count in the
        server's strict readiness, :meth:`all_ready`)."""
        try:
            await self._load_and_report(name, None)
        except TritonXError:
            entry = self.models.get(name)
            if entry is not None:
                entry.demand_failed = True
            raise

    async def _load_and_report(self, name: str, request: LoadRequest | None) -> None:
        session = LoadSession()
        task = self._session_load(session, name, request, explicit=True)
        await session.wait()
        raise_load_error(name, task.result())  # (result() raises what the load raised)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """The repository unload API (explicit mode); unloading an unknown model succeeds."""
        self._check_explicit()
        check_model_name(name)
        self.relist()
        for key in self._keys(name, self.models):
            composing = self._deps.of(key)
            await self._unload(key, None)
            if unload_dependents:
                await self._unload_composing(composing)
        if self.residency is not None:
            for gone in [name, *composing]:
                if not self._has_loaded(gone):
                    self.residency.forget(gone)

    async def _unload_composing(self, names: tuple[str, ...]) -> None:
        """Triton's cascading removal: composing models that were not loaded by name and
        that no loaded ensemble uses any more are unloaded, and theirs in turn."""
        queue = list(names)
        while queue:
            name = queue.pop(0)
            entry = self.models.get(name)
            if entry is None or entry.explicit or not self._has_loaded(name):
                continue
            if any(self._has_loaded(ensemble) for ensemble in self._deps.users(name)):
                continue
            queue.extend(self._deps.of(name))
            await self._unload(name, None)

    def _keys(self, name: str, found: Iterable[str]) -> list[str]:
        """The keys of the models named ``name`` (every namespace's, with namespacing)."""
        return self.namespaces.keys(name, found) if self.namespaces is not None else [name]

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
            if name in duplicates:
                return self._duplicate(name, overrides)
            repo = sources.get(name)
            override_dir: Path | None = None
            if request is not None and request.files:
                override_dir = await asyncio.to_thread(write_override_dir, name, request.files)
            elif repo is None:
                log.error(
                    "failed to poll model '%s': model not found in any model repository.", name
                )
                return None
            entry = self.models.get(name)
            if entry is None:
                entry = self.models[name] = ModelEntry(name)
            shown = self.namespaces.adopt(entry) if self.namespaces is not None else name
            stamp: Hashable | None = None
            if override_dir is None and repo is not None:
                stamp = await asyncio.to_thread(repo.stamp, shown)
                if not force and not overrides and await self._unchanged(entry, stamp, session):
                    entry.last_failures = []
                    return entry  # nothing changed: a load is a no-op
            try:
                prepared, localized = await self.pipeline.prepare(
                    shown,
                    repo,
                    override_dir,
                    request.config if request is not None else None,
                    lambda _, config: self._link_ensemble(name, config, session),
                    rename=override_dir is None and renamed(repo, shown),
                )
            except TritonXError as exc:
                remove_override_dir(override_dir)
                return await self._prepare_failed(entry, exc)
            entry.invalid = False
            await self._swap.apply(entry, prepared)
            session.changed.add(name)
            self._reload_dependents(name, session)
            entry.stamp = stamp if stamp is not None else ("override", id(prepared))
            await keep_files(entry, prepared, override_dir, localized)
            entry.override = overrides
            return entry

    def _duplicate(self, name: str, overrides: bool) -> ModelEntry | None:
        """``name`` is in two or more repositories: Triton refuses to serve it (a version
        already serving stays)."""
        entry = self.models.get(name) or ModelEntry(name)
        if not entry.versions:
            entry.error = DUPLICATE_REASON
            entry.stamp = None
            self.models[name] = entry
        log.error("failed to poll model '%s': not unique across all model repositories", name)
        return entry if overrides else None

    async def _unchanged(self, entry: ModelEntry, stamp: Hashable, session: LoadSession) -> bool:
        """Whether a load of ``entry`` is a no-op: same files, no config override kept, every
        version ready, and (an ensemble) none of its composing models reloaded."""
        return (
            stamp == entry.stamp
            and not entry.override
            and bool(entry.versions)
            and all(v.ready for v in entry.versions.values())
            and not await self._composing_changed(entry.name, session)
            and not await self._steps_moved(entry)
        )

    async def _steps_moved(self, entry: ModelEntry) -> bool:
        """With namespacing: whether an ensemble's steps now resolve to other models (one
        appeared in its namespace, or the one it used is gone): it is then loaded again."""
        if self.namespaces is None or entry.name not in self._deps:
            return False
        found, _ = await asyncio.to_thread(self.scan)
        return self.namespaces.moved(entry, found, self._deps.of(entry.name))

    async def _prepare_failed(self, entry: ModelEntry, exc: TritonXError) -> ModelEntry:
        """Steps 1-4 of ``entry``'s load failed: record it (a failed reload raises and leaves
        the old versions serving; an agent's or Triton's poll-time config check's failure
        raises Triton's poll failure)."""
        name = entry.name
        if isinstance(exc, DependencyError):
            # the ensemble no longer fits its composing models (or they are gone):
            # Triton's dependency graph unloads it, whatever was serving
            for ventry in list(entry.versions.values()):
                await self._unloads.retire(name, ventry)
            entry.versions = {}
        elif entry.versions and any(v.ready for v in entry.versions.values()):
            # a failed reload leaves the old versions serving
            log.error("failed to reload '%s': %s (keeping the loaded versions)", name, exc)
            if isinstance(exc, (AgentLoadError, PollError)):
                raise poll_failed(name, exc.message) from exc
            raise invalid_arg(f"load failed for model '{name}': {exc.message}\n") from exc
        entry.error = exc.message
        entry.invalid = isinstance(exc, DependencyError)
        entry.stamp = None
        self._emit(name, 0, ModelState.UNAVAILABLE, exc.message)
        log.error("failed to load '%s': %s", name, exc.message)
        if isinstance(exc, (AgentLoadError, PollError)):
            raise poll_failed(name, exc.message) from exc
        return entry

    async def _composing_changed(self, name: str, session: LoadSession) -> bool:
        """For an ensemble whose own files did not change: load its composing models (as
        Triton polls them with it) and tell whether any of them was reloaded."""
        deps = [d for d in self._deps.of(name) if d != name]
        if not deps:
            return False
        await asyncio.gather(
            *(self._session_load(session, d) for d in deps), return_exceptions=True
        )
        return any(d in session.changed for d in deps)

    def _reload_dependents(self, name: str, session: LoadSession) -> None:
        """``name`` was (re)loaded: reload the loaded ensembles that use it, so they are
        validated again against its new config (in-flight requests finish on the old ones)."""
        for ensemble in self._deps.users(name):
            if not self._has_loaded(ensemble):
                continue
            task = session.tasks.get(ensemble)
            if task is None or task.done():
                self._session_load(session, ensemble, force=True)

    async def _link_ensemble(
        self, name: str, config: Any, session: LoadSession
    ) -> dict[str, ModelConfig]:
        """Load an ensemble's composing models (in ``session``), check them as Triton's
        dependency graph does and validate the ensemble against their completed configs."""
        steps = {d: d for d in composing_models(config)}  # step's model → its key
        if self.namespaces is not None:
            found, _ = await asyncio.to_thread(self.scan)
            try:
                steps = self.namespaces.steps(name, config, found)
            except TritonXError as exc:
                raise DependencyError(exc.message) from None
            self.namespaces.stamp_steps(config, steps)
        self._deps.link(name, tuple(dict.fromkeys(steps.values())))
        others = {d: k for d, k in steps.items() if k != name}
        results = await asyncio.gather(
            *(self._session_load(session, k) for k in others.values()), return_exceptions=True
        )
        self._deps.check_cycles(name)
        models = {d: self.models[k] for d, k in others.items() if k in self.models}
        return composing_configs(name, config, dict(zip(others, results, strict=True)), models)

    async def check(self, name: str, repo: Repository) -> Prepared:
        """Steps 1-4 of a load and no more (``tritonx check``, :meth:`LoadPipeline.check`)."""
        return await self.pipeline.check(name, repo)

    # ------------------------------------------------------------------ internals: unload

    async def _unload(self, name: str, deadline: float | None) -> None:
        async with self._lock(name):
            entry = self.models.get(name)
            if entry is None:
                return
            await self._unloads.unload_model(entry, deadline)
            self._deps.drop(name)
            if self.namespaces is not None:
                self.namespaces.known.discard(self.namespaces.id_of(name))
            await release_files(entry)

    # ------------------------------------------------------------------ residency

    def resident(self, name: str) -> bool:
        """Whether ``name`` has a version loaded and READY (its instances may be recovering)."""
        entry = self.models.get(name)
        return entry is not None and entry.resident

    async def evict(self, name: str) -> None:
        """Unload ``name`` (the budgets or the idle unload chose it)."""
        await self._unload(name, None)

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
        polled = on_disk
        if self.residency is not None:  # new models wait for their first request
            polled = {name for name in on_disk if self._has_loaded(name)}
        for name in sorted(polled):
            task = self._session_load(session, name, explicit=True)
            await asyncio.wait([task])
        await session.wait()
        for name in sorted(set(self.models) - on_disk):
            if self.models[name].override_dir is None:
                await self._unload(name, None)
                if self.residency is not None:
                    self.residency.forget(name)

    # ------------------------------------------------------------------ --reload

    async def reload_changed(self, changed: Mapping[str, str]) -> None:
        """``--reload``: the folders of the models in ``changed`` (``{model: a file of it
        that changed}``) changed on disk. A loaded model is reloaded (a no-op when its files
        are as loaded); outside explicit mode a new model folder is loaded and a removed one
        unloaded, as a poll does (with ``--model-load-on-demand`` a new model waits for its
        first request). A model loaded with a load-API override is left alone. Each action
        and its cause is logged, and a failure (the loaded versions keep serving)."""
        sources, duplicates = await asyncio.to_thread(self.scan)
        on_disk = set(sources) | set(duplicates)
        explicit = self.settings.model_control_mode == "explicit"
        session = LoadSession()
        loads: dict[str, asyncio.Task[ModelEntry | None]] = {}
        for name, path in sorted(changed.items()):
            entry = self.models.get(name)
            loaded = self._has_loaded(name)
            if loaded and entry is not None and (entry.override or entry.override_dir):
                log.info(
                    "model '%s': %s changed; not reloaded: it was loaded with a load-API "
                    "override (load it again)",
                    name,
                    path,
                )
                continue
            if name not in on_disk:
                if not loaded:
                    continue
                if explicit:
                    log.warning(
                        "model '%s': %s removed; it stays loaded (explicit mode: unload it "
                        "with the repository API)",
                        name,
                        path,
                    )
                    continue
                log.info("unloading model '%s': %s removed", name, path)
                await self._unload(name, None)
                if self.residency is not None:
                    self.residency.forget(name)
            elif loaded:
                log.info("reloading model '%s': %s changed", name, path)
                loads[name] = self._session_load(session, name)
            elif not explicit and self.residency is None:
                log.info("loading model '%s': %s changed", name, path)
                loads[name] = self._session_load(session, name, explicit=True)
        await session.wait()
        for name, task in loads.items():
            try:
                raise_load_error(name, task.result())
            except TritonXError as exc:
                log.error("--reload: %s", exc.message.strip())

    # ------------------------------------------------------------------ events

    def _emit(self, name: str, version: int, state: ModelState, reason: str = "") -> None:
        if self._on_event is not None:
            try:
                self._on_event(ModelEvent(name, version, state, reason))
            except Exception:
                log.exception("tritonx_model_event hook failed")
