"""What the repository index and the start-up table say about each model version."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tritonx.types import ModelState, RepositoryEntry

if TYPE_CHECKING:
    from tritonx._core.lifecycle import ModelEntry, VersionEntry

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
) -> list[RepositoryEntry]:
    """The repository index: every model on disk or known, with version states (and the
    measured ``footprints`` of loaded models, by name, on their loaded versions)."""
    rows: list[RepositoryEntry] = []
    for name in sorted(on_disk | duplicates | set(models)):
        entry = models.get(name)
        if name in duplicates and (entry is None or not entry.versions):
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
                    memory = footprints.get(name)
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
