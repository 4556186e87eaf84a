"""The load pipeline, in Triton's order: a model's steps 1-4 (the repository localizes its
folder, the raw config is read, the repository agents' LOAD actions run, core and backend
auto-complete, normalization and validation run on the folder the agents returned:
:meth:`LoadPipeline.prepare`) and each version's step 5 (its instances created, started and
warmed up behind a scheduler: :meth:`LoadPipeline.load_version`).

The pipeline owns what every load shares: the backend objects (one per backend name), the
rate limiter, the latency metrics options and the ``--model-load-thread-count`` slots. The
model manager (:mod:`tritonx._core.lifecycle`) decides what to load and swaps the results in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonx._core import model_config as cfg
from tritonx._core.agents import AgentChain
from tritonx._core.config_file import read_config_file
from tritonx._core.ensemble_config import is_ensemble
from tritonx._core.entries import Prepared, VersionEntry
from tritonx._core.metrics import MetricsOptions
from tritonx._core.rate_limiter import RateLimiter
from tritonx._core.scheduler import Scheduler, make_scheduler
from tritonx._core.warmup import warm_up, warm_up_instances
from tritonx._runtime.plugins import Registries, missing_backend_advice
from tritonx.backend import AutoCompleteContext, Backend, InstanceSpec, LoadContext
from tritonx.config import EditableModelConfig, ModelConfig, ServerSettings
from tritonx.errors import Code, PluginError, TritonXError, invalid_arg
from tritonx.proto import model_config_pb2
from tritonx.repository import Repository, walk_files
from tritonx.types import ModelState

if TYPE_CHECKING:
    from tritonx.handle import ServerHandle

log = logging.getLogger("tritonx.lifecycle")

#: an ensemble's step 4b: load its composing models and validate it against their configs
#: (``(name, config) -> composing configs``, :meth:`ModelManager._link_ensemble`)
LinkEnsemble = Callable[[str, Any], Awaitable[dict[str, ModelConfig]]]


class PollError(TritonXError):
    """A model's config failed where Triton checks it while it polls the repository (reading
    it, ``GetNormalizedModelConfig``, ``ValidateModelConfig``, the directory name): Triton's
    load API then answers "failed to load '<m>', failed to poll from model repository"
    (``load_request.poll_failed``) and logs the reason."""


@contextlib.contextmanager
def polling() -> Iterator[None]:
    """Raise the errors of the steps run under it as :class:`PollError` (message and code
    kept)."""
    try:
        yield
    except PollError:
        raise
    except TritonXError as exc:
        raise PollError(exc.message, exc.code) from exc


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


class LoadPipeline:
    """The steps of a load, with what every load shares."""

    def __init__(
        self,
        settings: ServerSettings,
        registries: Registries,
        *,
        server: ServerHandle | None = None,
        cache_enabled: bool = False,
    ) -> None:
        # the config file's path is built from it: never outside a model folder, however
        # this pipeline was made (Server.start() has refused it already)
        cfg.check_config_name(settings.model_config_name)
        self.settings = settings
        self.registries = registries
        self.server = server
        self.cache_enabled = cache_enabled
        self.backends: dict[str, Backend] = {}
        #: models are completed in worker threads at once: one backend object per name
        self._backends_lock = threading.Lock()
        self._load_slots = asyncio.Semaphore(max(1, settings.model_load_thread_count))
        self.rate_limiter = RateLimiter.from_settings(
            settings.rate_limit, settings.rate_limit_resource
        )
        self.metrics_options = MetricsOptions.from_config(settings.metrics_config)

    def close(self) -> None:
        """Close every backend the loads created."""
        for backend in self.backends.values():
            try:
                backend.close()
            except Exception:
                log.exception("closing backend '%s' failed", backend.name)
        self.backends.clear()

    # ------------------------------------------------------------------ steps 1-4

    async def prepare(
        self,
        name: str,
        repo: Repository | None,
        override_dir: Path | None,
        override: Any,
        link: LinkEnsemble,
        *,
        rename: bool = False,
    ) -> tuple[Prepared, tuple[Repository, Path] | None]:
        """Steps 1-4 of a load: localize, read the raw config, run the agents' LOAD actions,
        complete and validate the config on the folder the agents returned; an ensemble is
        then linked to its composing models (``link``).

        :param rename: the model is served under a name its repository maps to its folder
            (``_core.registration``): its config gets that name, as Triton renames it."""
        if override_dir is not None:
            return await self._prepare_in(name, override_dir, override, link), None
        assert repo is not None
        try:
            folder = await asyncio.to_thread(repo.localize, name)
        except TritonXError:
            raise
        except Exception as exc:  # a plugin's bug: this model fails, the server goes on
            raise TritonXError(
                f"failed to localize model '{name}': {exc or type(exc).__name__}", Code.INTERNAL
            ) from exc
        try:
            prepared = await self._prepare_in(name, folder, override, link, rename)
        except BaseException:  # nothing will serve from the localized copy
            await asyncio.to_thread(repo.release, name, folder)
            raise
        return prepared, (repo, folder)

    async def _prepare_in(
        self, name: str, folder: Path, override: Any, link: LinkEnsemble, rename: bool = False
    ) -> Prepared:
        """Steps 2-4 on the localized (or override) ``folder`` (``rename``: as
        :meth:`prepare`)."""
        raw = await asyncio.to_thread(self.read_config, name, folder, override)
        agents = AgentChain.resolve(name, raw, self.registries.repoagents)
        loaded_from = await agents.load(folder) if agents else folder
        try:
            if loaded_from != folder:
                if override is None:
                    raw = await asyncio.to_thread(self.read_config, name, loaded_from, None)
                    agents.config = raw
                folder = loaded_from
            if rename:
                raw.name = name
            prepared = await asyncio.to_thread(self.complete, name, raw, folder)
            if is_ensemble(prepared.config):
                prepared.composing = await link(name, prepared.config)
        except BaseException:
            if agents:
                await agents.load_failed()
            raise
        prepared.agents = agents if agents else None
        return prepared

    def read_config(self, name: str, folder: Path, override: Any) -> Any:
        """The model's raw config (``override``, the load API's, else its file); the errors
        are :class:`PollError` (Triton reads it as it polls)."""
        if override is not None:
            config = model_config_pb2.ModelConfig()
            config.CopyFrom(override)
            return config
        path = cfg.config_path(folder, self.settings.model_config_name)
        with polling():
            if path.exists():
                return read_config_file(path)
            if self.settings.disable_auto_complete_config:
                raise TritonXError(
                    f"model configuration is not provided for model '{name}' (no {path})",
                    Code.NOT_FOUND,
                )
        return model_config_pb2.ModelConfig()

    def complete(self, name: str, raw: Any, folder: Path, check_only: bool = False) -> Prepared:
        """Core and backend auto-complete, normalization and validation (worker thread);
        ``check_only`` (``tritonx check``): the backend builds nothing and adds its notes.

        As Triton's: what it checks as it polls the model raises :class:`PollError`; what
        it runs as it creates each version (``TritonModel::Create``: the backend lookup, its
        auto-complete, the IO and instance group checks) fails each version of a model
        (``Prepared.version_error``); an ensemble's errors concern the whole model."""
        config = model_config_pb2.ModelConfig()
        config.CopyFrom(raw)
        versions = cfg.version_folders(folder)
        first = versions[min(versions)] if versions else None
        with polling():
            cfg.auto_complete_backend_fields(config, name, first, self.registries.backends)
            cfg.validate_at_poll(config, name, strict=self.settings.disable_auto_complete_config)
        cfg.check_runtime(config)
        selected, missing = cfg.versions_to_load(config, versions)
        try:
            backend, ctx = self._complete_for_backend(name, config, folder, first, check_only)
        except TritonXError as exc:
            if is_ensemble(config):
                raise
            return Prepared(config, folder, versions, selected, missing, None, exc)
        cfg.check_model_files(config, folder)
        notes: dict[str, str] = {}
        if check_only and backend is not None:  # on a copy: notes change nothing
            completed = model_config_pb2.ModelConfig()
            completed.CopyFrom(config)
            try:
                notes = backend.check_notes(replace(ctx, config=EditableModelConfig(completed)))
            except TritonXError:
                raise
            except Exception as exc:  # a plugin's bug: this model's check fails, not the run
                raise TritonXError(
                    f"backend '{backend.name}' failed to describe model '{name}': {exc!r}",
                    Code.INTERNAL,
                ) from exc
        if config.response_cache.enable and not self.cache_enabled:
            log.warning(
                "model '%s' enables response_cache but the server has no cache "
                "(--cache-config <cache>,<key>=<value>): responses are not cached",
                name,
            )
        return Prepared(config, folder, versions, selected, missing, backend, notes=notes)

    def _complete_for_backend(
        self, name: str, config: Any, folder: Path, first: Path | None, check_only: bool
    ) -> tuple[Backend | None, AutoCompleteContext]:
        """The backend (None: an ensemble), its auto-complete of ``config``, normalization
        and validation."""
        backend = None if is_ensemble(config) else self.backend(config.backend, name, folder)
        filename = backend.default_model_filename if backend is not None else None
        filename = config.default_model_filename or filename
        ctx = AutoCompleteContext(
            config=EditableModelConfig(config),
            model_dir=folder,
            version_path=first if first is not None else folder,
            model_path=first / filename if first is not None and filename else None,
            backend_config=backend.config if backend is not None else {},
            check_only=check_only,
        )
        if backend is not None and not self.settings.disable_auto_complete_config:
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
        return backend, ctx

    async def check(self, name: str, repo: Repository) -> Prepared:
        """Steps 1-4 of a load and no more (``tritonx check``): localize, read the config,
        run the repository agents' LOAD actions (a checksum is verified, a decrypt agent
        decrypts), complete and validate on the folder they returned. No instance is loaded;
        the agents then get LOAD_FAIL (nothing will serve: a decrypt agent wipes its folder)
        and the localized copy is released."""
        folder = await asyncio.to_thread(repo.localize, name)
        try:
            raw = await asyncio.to_thread(self.read_config, name, folder, None)
            agents = AgentChain.resolve(name, raw, self.registries.repoagents)
            loaded_from = await agents.load(folder) if agents else folder
            try:
                if loaded_from != folder:
                    raw = await asyncio.to_thread(self.read_config, name, loaded_from, None)
                prepared = await asyncio.to_thread(self.complete, name, raw, loaded_from, True)
                if prepared.version_error is not None:
                    raise prepared.version_error
                return prepared
            finally:
                if agents:
                    await agents.load_failed()
        finally:
            await asyncio.to_thread(repo.release, name, folder)

    def backend(self, name: str, model: str, folder: Path) -> Backend:
        """The backend object of ``name``, created at its first model (any thread)."""
        backend = self.backends.get(name)
        if backend is not None:
            return backend
        with self._backends_lock:
            return self._create_backend(name, model, folder)

    def _create_backend(self, name: str, model: str, folder: Path) -> Backend:
        backend = self.backends.get(name)
        if backend is not None:  # created by another model's thread meanwhile
            return backend
        cls = self.registries.backends.get(name)
        if cls is None:  # Triton's text; where it came from, and the cure, in the log
            log.warning(
                "model '%s' at %s names backend '%s', which no installed tritonx plugin "
                "provides: %s",
                model,
                folder,
                name,
                missing_backend_advice(name),
            )
            raise invalid_arg(
                f"unable to find backend library for backend '{name}', try specifying runtime "
                "on the model configuration."
            )
        settings = dict(self.settings.backend_config.get("", {}))
        settings.update(self.settings.backend_config.get(name, {}))
        backend = self.backends[name] = cls(settings)
        return backend

    # ------------------------------------------------------------------ step 5

    async def load_version(
        self, ventry: VersionEntry, config: ModelConfig, prepared: Prepared, version_path: Path
    ) -> None:
        name, v = config.name, ventry.version
        log.info("loading: %s:%d", name, v)
        attempts = 1 + self.settings.model_load_retry_count
        for attempt in range(1, attempts + 1):
            try:
                scheduler = await self.create_version(ventry, config, prepared, version_path)
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

    async def create_version(
        self, ventry: VersionEntry, config: ModelConfig, prepared: Prepared, version_path: Path
    ) -> Scheduler:
        """Create one version's scheduler: its instances loaded and warmed up (Triton's
        ``CreateModel``); on failure nothing of it is left running."""
        name, v = config.name, ventry.version
        if prepared.version_error is not None:  # as Triton's TritonModel::Create
            raise prepared.version_error
        backend = prepared.backend
        contexts: list[LoadContext] = []
        passive: list[bool] = []
        if backend is not None:
            filename = config.raw.default_model_filename or backend.default_model_filename
            model_path = version_path / filename if filename else None
            if (
                model_path is not None
                and not backend.reports_missing_model_file
                and not model_path.exists()
            ):
                raise TritonXError(
                    f"unable to find '{model_path}' for model '{name}' version {v}",
                    Code.NOT_FOUND,
                )
            contexts, passive = self.instance_contexts(
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

    async def update_version(
        self, ventry: VersionEntry, config: ModelConfig, prepared: Prepared, version_path: Path
    ) -> None:
        """Give the serving version ``ventry`` the instance groups of ``config`` in place
        (Triton's ``UpdateModelConfig``: a reload whose config changed only there and whose
        files did not): only the difference is loaded or unloaded, the other instances
        serve on; then ``config`` becomes the version's. Raises when an added instance fails
        (the version serves on as it was)."""
        name, v = config.name, ventry.version
        if prepared.version_error is not None:
            raise prepared.version_error
        scheduler = ventry.scheduler
        backend = prepared.backend
        assert scheduler is not None and backend is not None
        filename = config.raw.default_model_filename or backend.default_model_filename
        model_path = version_path / filename if filename else None
        contexts, passive = self.instance_contexts(
            config, v, prepared.model_dir, version_path, model_path, backend
        )
        async with self._load_slots:
            added, removed = await scheduler.update_instances(  # type: ignore[attr-defined]
                config,
                contexts,
                passive,
                lambda pairs: warm_up_instances(pairs, config, prepared.model_dir, v),
            )
        ventry.config = config
        log.info(
            "updated '%s' version %d in place (only its instance groups changed): %d "
            "instances added, %d removed",
            name,
            v,
            added,
            removed,
        )

    def instance_contexts(
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


def only_instances_changed(old: Any, new: Any) -> bool:
    """Whether two normalized configs differ in ``instance_group`` / ``version_policy`` at
    most (Triton's ``ConfigChangeRequiresReload`` is False)."""
    a, b = type(old)(), type(new)()
    a.CopyFrom(old)
    b.CopyFrom(new)
    for field_name in ("instance_group", "version_policy"):
        a.ClearField(field_name)
        b.ClearField(field_name)
    return bool(a == b)


def version_files(model_dir: Path, version: int) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime, size) of the files a version's load reads besides ``config.pbtxt``: its
    version folder and the model folder's other files (Triton's
    ``IsModelVersionModified``). Called from a worker thread."""
    others = {str(version)}
    files: list[tuple[str, int, int]] = []
    for rel, _, st in walk_files(model_dir):
        top, sep, _ = rel.partition(os.sep)
        if not sep and rel == "config.pbtxt":
            continue
        if sep and top.isdigit() and top not in others:
            continue
        files.append((rel, st.st_mtime_ns, st.st_size))
    return tuple(sorted(files))
