"""What the model manager says about models: the repository index and the start-up table
(each version's state), the loaded versions' statistics, the server's strict readiness (:func:`strictly_ready`), the load
API's error for a load that failed (:func:`raise_load_error`) and a request's error for a
version whose instances are down (:func:`instances_down`)."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from tritonx._core.ensemble_config import is_ensemble
from tritonx._dataplane.stats import LoadedVersion
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.types import ModelState, RepositoryEntry

if TYPE_CHECKING:
    from tritonx._core.entries import ModelEntry, VersionEntry

DUPLICATE_REASON = "model appears in two or more repositories"
UNLOADED_REASON = "unloaded"


def reported_state(v: VersionEntry) -> tuple[ModelState, str]:
    """A version's state and reason: a READY version whose scheduler stopped being ready
    (e.g. a python model's worker process died) is UNAVAILABLE with the scheduler's reason."""
    if v.state is not ModelState.READY or v.ready:
        return v.state, v.reason
    reason = v.scheduler.not_ready_reason() if v.scheduler is not None else ""
    return ModelState.UNAVAILABLE, reason or "model instance is not ready"


def index_rows(
    on_disk: set[str],
    duplicates: set[str],
    models: Mapping[str, ModelEntry],
    ready_only: bool = False,
    footprints: Mapping[str, int] | None = None,
    shown: Callable[[str], str] = str,
) -> list[RepositoryEntry]:
    """The repository index: every model on disk or known, with version states (and the
    measured ``footprints`` of loaded models, by name, on their loaded versions).

    The models are the manager's keys; ``shown`` gives each one's name (with
    ``--model-namespacing`` two rows may have one name: Triton lists both)."""
    rows: list[RepositoryEntry] = []
    for key in sorted(on_disk | duplicates | set(models)):
        entry = models.get(key)
        name = shown(key)
        if key in duplicates and (entry is None or not entry.versions):
            if not ready_only:
                rows.append(RepositoryEntry(name, None, ModelState.UNAVAILABLE, DUPLICATE_REASON))
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
            state, reason = reported_state(entry.versions[version])
            if not ready_only or state is ModelState.READY:
                memory = None
                if footprints is not None and entry.versions[version].scheduler is not None:
                    memory = footprints.get(key)
                rows.append(RepositoryEntry(name, version, state, reason, memory))
    return rows


def status_rows(models: Mapping[str, ModelEntry]) -> list[tuple[str, str, str]]:
    """(model, version, status) rows of the start-up table, as Triton prints them."""
    rows: list[tuple[str, str, str]] = []
    for name in sorted(models):
        entry = models[name]
        if not entry.versions:
            status = (
                f"UNAVAILABLE: {entry.error}"
                if entry.error
                else "Not loaded: No model version was found"
            )
            rows.append((name, "-", status))
            continue
        for version in sorted(entry.versions):
            state, reason = reported_state(entry.versions[version])
            rows.append((name, str(version), state.value + (f": {reason}" if reason else "")))
    return rows


def strictly_ready(models: Mapping[str, ModelEntry], ensembles: Container[str]) -> bool:
    """Triton's strict readiness: every model has versions, each READY or unloaded.

    An ensemble (``ensembles``: those linked to their composing models) waiting for a
    composing model that was unloaded counts as unloaded (Triton unloads it, and loads it
    again with the composing model). A version still LOADING beside a version that serves
    (a new version folder) does not count: the model serves all along, and a reload keeps
    the server ready."""
    for name, entry in models.items():
        if entry.demand_failed:
            continue  # a request's load failed: the other models still serve
        if entry.error:
            return False
        if not entry.versions and entry.stamp is not None:
            return False
        waiting = name in ensembles
        serving: bool | None = None
        for v in entry.versions.values():
            if v.ready or v.reason == UNLOADED_REASON:
                continue
            if waiting and v.state is ModelState.READY:
                continue
            if v.state is ModelState.LOADING:
                if serving is None:
                    serving = any(other.ready for other in entry.versions.values())
                if serving:
                    continue
            return False
    return True


def raise_load_error(name: str, entry: ModelEntry | None) -> None:
    """Raise the load API's error for a load of ``name`` that ended with ``entry`` (None:
    the model was not found); return when it loaded."""
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


def loaded_versions(models: Mapping[str, ModelEntry]) -> Iterator[LoadedVersion]:
    """Every version with a running scheduler, by name then version, and every version
    the residency policy unloaded with its kept statistics (not ``resident``)."""
    for name in sorted(models):
        entry = models[name]
        for version in sorted(entry.versions):
            v = entry.versions[version]
            if v.config is None:
                continue
            tags = tuple(sorted(v.config.raw.metric_tags.items()))
            if v.scheduler is not None:
                s = v.scheduler
                yield LoadedVersion(
                    entry.shown,
                    version,
                    tags,
                    s.stats,
                    s.pending_count,
                    v.load_seconds,
                    v.cached,
                    s.restarts(),
                    namespace=entry.namespace,
                )
            elif v.kept_stats is not None:
                yield LoadedVersion(
                    entry.shown,
                    version,
                    tags,
                    v.kept_stats,
                    0,
                    v.load_seconds,
                    v.cached,
                    resident=False,
                    namespace=entry.namespace,
                )


def instances_down(versions: Iterable[VersionEntry]) -> TritonXError | None:
    """A request's error when the version it would go to is READY but its instances cannot
    serve (e.g. a python model whose stub died): Triton routes the request to the backend,
    which fails it with the instance's error (INTERNAL, ``Stub process '<instance>' is not
    healthy.``); None when no such version is among ``versions`` (then the request gets
    Triton's "Request for unknown model" error). An ensemble waiting for a composing model
    is not one of them: Triton has unloaded it."""
    for v in versions:
        if v.state is not ModelState.READY or v.scheduler is None or v.config is None:
            continue
        if is_ensemble(v.config.raw):
            continue
        reason = v.scheduler.not_ready_reason()
        if reason:
            return TritonXError(reason, Code.INTERNAL)
    return None
