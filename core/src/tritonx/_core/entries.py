"""What the model manager keeps about models: a version's state (:class:`VersionEntry`), a
model's versions and load history (:class:`ModelEntry`), a load prepared up to its instances
(:class:`Prepared`), one load operation (:class:`LoadSession`) and the swap of a load's
versions for the old ones (:func:`merge_versions`, :func:`carry_stats`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tritonx._core.agents import AgentChain
from tritonx._core.cache_scope import CacheScope
from tritonx._core.scheduler import Scheduler
from tritonx._dataplane.classification import LabelCache
from tritonx._dataplane.stats import LatencyStats, ModelStats
from tritonx.backend import Backend
from tritonx.config import ModelConfig
from tritonx.errors import TritonXError
from tritonx.repository import Repository
from tritonx.types import ModelState

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
    #: the files its load read besides config.pbtxt (``version_files``): a reload whose
    #: config changed only in its instance groups, with these unchanged, updates in place
    files: tuple[tuple[str, int, int], ...] | None = None
    #: the statistics of a version the residency policy unloaded (an eviction for room,
    #: an idle unload): reported while it is unloaded, continued by its next load
    #: (:func:`merge_versions`); None once unloaded explicitly
    kept_stats: ModelStats | None = None
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

    #: the manager's key: the model's name, ``<namespace>::<name>`` with
    #: ``--model-namespacing`` (Triton's ``ModelIdentifier::str``)
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
    #: when a request last asked for it, or it loaded (``time.monotonic()``; kept only with
    #: ``--model-load-on-demand``, for the least-recently-used order)
    last_used: float = 0.0
    #: when its last load succeeded (``time.monotonic()``; ``--model-min-residency-secs``
    #: counts from it)
    loaded_at: float = 0.0
    #: its last load was a request's (``--model-load-on-demand``) and failed: the server's
    #: strict readiness ignores it (any client could make the server unready otherwise)
    demand_failed: bool = False
    #: with ``--model-namespacing``: the repository the model comes from ("" without)
    namespace: str = ""
    #: the name it is served and reported under ("": ``name``)
    model: str = ""

    @property
    def shown(self) -> str:
        """The name requests, the repository index and statistics use."""
        return self.model or self.name

    @property
    def known(self) -> bool:
        return bool(self.versions) or bool(self.error) or self.stamp is not None

    @property
    def resident(self) -> bool:
        """A version is loaded and READY (its instances may be recovering)."""
        return any(
            v.state is ModelState.READY and v.scheduler is not None for v in self.versions.values()
        )

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
    #: None for ensembles, and with a ``version_error``
    backend: Backend | None
    #: why each version's load fails before it starts, as Triton's ``TritonModel::Create``
    #: (the backend is not installed, its auto-complete or the IO checks failed)
    version_error: TritonXError | None = None
    agents: AgentChain | None = None
    #: ensembles: the composing models' configs it was validated against
    composing: dict[str, ModelConfig] = field(default_factory=dict)
    #: ``tritonx check`` only: the backend's :meth:`~tritonx.backend.Backend.check_notes`
    notes: dict[str, str] = field(default_factory=dict)


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


def merge_versions(
    name: str, old: dict[int, VersionEntry], new: dict[int, VersionEntry], selected: list[int]
) -> tuple[dict[int, VersionEntry], list[VersionEntry], bool]:
    """Swap the versions a load produced (``new``; ``selected`` are those it loaded, the
    others are missing ones) in for the ``old`` ones, as Triton's ``OnLoadFinal`` does.

    When a selected version failed while the model had a version serving, the load is
    aborted: every old version keeps serving, the new versions it loaded are unloaded (a
    failed version without an old one shows its failure, and keeps the statistics the
    old one kept). Otherwise each new version replaces the old one of its number, whose
    statistics it continues (:func:`carry_stats`; those an evicted version kept too), and
    the old versions no longer selected go.

    Returns the merged versions, the entries to retire (unload; those without a scheduler
    only change state) and whether the load succeeded (a version of it serves)."""
    serving = any(e.ready for e in old.values())
    failed = [new[v] for v in selected if not new[v].ready]
    retired: list[VersionEntry] = []
    merged: dict[int, VersionEntry]
    if failed and serving:
        merged = dict(old)
        for v, entry in new.items():
            if old.get(v) is entry:  # updated in place (its instance groups): it serves on
                continue
            if entry.scheduler is not None:
                # loaded, but the load is aborted: it never serves (not READY from now on,
                # before its unload begins)
                entry.state = ModelState.UNLOADING
                retired.append(entry)
            prev = old.get(v)
            if prev is None or not prev.ready:
                merged[v] = entry  # no old one serves this number: show how the load went
                if prev is not None:  # an evicted version's statistics stay
                    entry.kept_stats = prev.kept_stats
        for entry in failed:
            log.error(
                "failed to reload '%s' version %d: %s (keeping the loaded versions)",
                name,
                entry.version,
                entry.reason,
            )
        return merged, retired, False
    merged = dict(new)
    for v, entry in new.items():
        prev = old.get(v)
        if prev is None or prev is entry:
            continue
        if entry.scheduler is not None:
            if prev.scheduler is not None:
                carry_stats(prev.scheduler.stats, entry.scheduler)
            elif prev.kept_stats is not None:  # evicted, loaded again: counting goes on
                carry_stats(prev.kept_stats, entry.scheduler)
        retired.append(prev)
    retired.extend(prev for v, prev in old.items() if v not in merged)
    return merged, retired, any(e.ready for e in new.values())


def carry_stats(stats: ModelStats, new: Scheduler) -> None:
    """A reload of a version: ``new`` goes on counting in ``stats``, the old version's
    statistics (the statistics extension and the Prometheus counters stay continuous, as
    Triton's counters per model version are), also when the residency policy unloaded the
    old one. The requests still finishing on the old scheduler count there too; nothing
    changes per request. The latency distributions stay unless the new config asks for
    others (response cache, histogram buckets)."""
    fresh = new.stats
    if _latency_layout(stats.latency) != _latency_layout(fresh.latency):
        stats.latency = fresh.latency
    new.stats = stats


def _latency_layout(latency: LatencyStats | None) -> tuple[Any, ...] | None:
    """Which distributions ``latency`` keeps (and the histogram's buckets)."""
    if latency is None:
        return None
    kept = tuple(getattr(latency, f.name) is not None for f in fields(latency))
    histogram = latency.first_response
    return kept, histogram.buckets if histogram is not None else None
