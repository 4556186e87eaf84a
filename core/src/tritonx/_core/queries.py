"""What the model manager answers without loading or unloading: its repositories (what
they list, registrations) and its models (the version a request goes to, readiness, the
repository index, the start-up table, the loaded versions' statistics).

:class:`ModelQueries` is the base of :class:`~tritonx._core.lifecycle.ModelManager`, which
owns the state it reads. With ``--model-namespacing`` a request's model name is resolved to
the one model known under it first (``_core.namespaces``: Triton's "ambiguity" error when
several namespaces have it).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Mapping

from tritonx._core.dependencies import DependencyGraph
from tritonx._core.entries import ModelEntry, VersionEntry
from tritonx._core.load_pipeline import open_repository
from tritonx._core.namespaces import Namespaces
from tritonx._core.repository_listing import RepositoryListing
from tritonx._core.residency import Residency
from tritonx._core.status import (
    index_rows,
    instances_down,
    loaded_versions,
    status_rows,
    strictly_ready,
)
from tritonx._dataplane.stats import LoadedVersion
from tritonx._runtime.plugins import Registries
from tritonx.errors import NotLoaded, not_found, unavailable
from tritonx.repository import Repository
from tritonx.types import RepositoryEntry


class ModelQueries:
    """The model manager's repositories and lookups (state set by the manager)."""

    models: dict[str, ModelEntry]
    registries: Registries
    listing: RepositoryListing
    namespaces: Namespaces | None
    residency: Residency | None
    _deps: DependencyGraph
    _explicit: bool

    # ------------------------------------------------------------------ repositories

    def scan(self, strict: bool = False) -> tuple[dict[str, Repository], dict[str, list[str]]]:
        """The models of every repository found once, and the names found in two or more
        (:meth:`RepositoryListing.scan`)."""
        return self.listing.scan(strict)

    def relist(self) -> None:
        """The next :meth:`listed` reads the repositories again (an unload API call)."""
        self.listing.relist()

    async def register_repository(self, path: str, mapping: Mapping[str, str] | None) -> None:
        """Add a model repository (:meth:`RepositoryListing.register`)."""
        opener = functools.partial(open_repository, registries=self.registries)
        await self.listing.register(path, mapping, explicit=self._explicit, opener=opener)

    def unregister_repository(self, path: str) -> None:
        """Remove a model repository (:meth:`RepositoryListing.unregister`)."""
        self.listing.unregister(path, explicit=self._explicit)

    async def listed(self, name: str) -> bool:
        """Whether a repository lists ``name``, as their last read found it (read again
        once ``--unknown-model-rescan-secs`` old: :meth:`RepositoryListing.listed`)."""
        return await self.listing.listed(name)

    @property
    def scans(self) -> int:
        """Reads of every repository (``tritonx_model_repository_scans_total``)."""
        return self.listing.scans

    # ------------------------------------------------------------------ queries

    def get(self, name: str, version: int | None) -> VersionEntry:
        """The READY version to serve (the highest ready one when ``version`` is None).

        Raises Triton's "Request for unknown model" errors.
        """
        key = name if self.namespaces is None else self.namespaces.request_key(name, self.models)
        entry = self.models.get(key)
        if self.residency is not None:
            if entry is None or not entry.resident:
                raise NotLoaded(name)
            entry.last_used = time.monotonic()
        if entry is None or not entry.known:
            raise not_found(f"Request for unknown model: '{name}' is not found")
        if version is None:
            best: VersionEntry | None = None
            for candidate in entry.versions.values():
                if (best is None or candidate.version > best.version) and candidate.ready:
                    best = candidate
            if best is None:
                down = instances_down(sorted(entry.versions.values(), key=lambda v: -v.version))
                raise down or not_found(
                    f"Request for unknown model: '{name}' has no available versions"
                )
            return best
        ventry = entry.versions.get(version)
        if ventry is None:
            raise not_found(f"Request for unknown model: '{name}' version {version} is not found")
        if not ventry.ready:
            raise instances_down((ventry,)) or unavailable(
                f"Request for unknown model: '{name}' version {version} is not at ready state"
            )
        return ventry

    def find(self, name: str) -> ModelEntry:
        """The entry for ``name`` whatever its state (NOT_FOUND if never seen)."""
        key = name if self.namespaces is None else self.namespaces.request_key(name, self.models)
        entry = self.models.get(key)
        if entry is None:
            raise not_found(f"Request for unknown model: '{name}' is not found")
        return entry

    def all_ready(self) -> bool:
        """Triton's strict readiness: every model has versions, each READY or unloaded
        (:func:`~tritonx._core.status.strictly_ready`)."""
        return strictly_ready(self.models, self._deps)

    def index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        """The repository index: every model on disk or known, with version states."""
        sources, duplicates = self.scan()
        footprints = self.residency.footprints if self.residency is not None else None
        shown = self.namespaces.shown if self.namespaces is not None else str
        return index_rows(set(sources), set(duplicates), self.models, ready_only, footprints, shown)

    def status_rows(self) -> list[tuple[str, str, str]]:
        """(model, version, status) rows of the start-up table."""
        return status_rows(self.models)

    def loaded_versions(self) -> Iterator[LoadedVersion]:
        """Every version with a running scheduler, by name then version."""
        return loaded_versions(self.models)
