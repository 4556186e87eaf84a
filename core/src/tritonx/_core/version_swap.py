"""A load's versions going live: each prepared version loaded (its step 5, through the load
pipeline), swapped in for the serving one and what it replaces unloaded (:class:`VersionSwap`),
then the folders the versions serve from kept (:func:`keep_files`; :func:`release_files` once the model is unloaded).

A version whose config changed only in its instance groups, with its files unchanged, is
updated in place (Triton's ``UpdateModelConfig``): it serves on. The others are loaded
beside the serving versions and swapped in when the whole load is ready; a load that fails
leaves the old versions serving (:func:`~tritonx._core.entries.merge_versions`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from tritonx._core.cache_scope import CacheScope
from tritonx._core.entries import ModelEntry, Prepared, VersionEntry, merge_versions
from tritonx._core.load_pipeline import LoadPipeline, only_instances_changed, version_files
from tritonx._core.load_request import remove_override_dir
from tritonx._core.response_cache import load_stamp
from tritonx._core.unloading import Emit, Unloads
from tritonx.config import ModelConfig
from tritonx.errors import TritonXError
from tritonx.repository import Repository
from tritonx.types import ModelState

log = logging.getLogger("tritonx.lifecycle")

#: a version's files as :func:`~tritonx._core.load_pipeline.version_files` lists them
Files = tuple[tuple[str, int, int], ...]


class VersionSwap:
    """Loads a prepared load's versions and swaps them in (the model manager's steps 5-6).

    :param pipeline: loads and updates the versions.
    :param unloads: unloads the versions a load replaces.
    :param emit: called with each state change.
    """

    def __init__(self, pipeline: LoadPipeline, unloads: Unloads, emit: Emit) -> None:
        self.pipeline = pipeline
        self.unloads = unloads
        self.emit = emit

    async def apply(self, entry: ModelEntry, prepared: Prepared) -> None:
        """Step 5-6: load the prepared versions, swap them in, unload what they replace."""
        config = ModelConfig(prepared.config)
        cached = bool(prepared.config.response_cache.enable) and self.pipeline.cache_enabled
        stamp = await asyncio.to_thread(load_stamp, prepared) if cached else b""
        files = await asyncio.to_thread(
            lambda: {v: version_files(prepared.model_dir, v) for v in prepared.selected}
        )
        # Triton's UpdateModelConfig: a serving version whose config changed only in its
        # instance groups, and whose files did not, keeps serving: its instances change by
        # the difference
        updates = {
            v: serving
            for v in prepared.selected
            if (serving := entry.versions.get(v)) is not None
            and updatable(serving, config, prepared, files[v])
        }
        new_versions = self._begin(
            entry, config, prepared, files, updates, stamp if cached else None
        )
        await asyncio.gather(
            *(
                self.pipeline.load_version(new_versions[v], config, prepared, prepared.versions[v])
                for v in prepared.selected
                if v not in updates
            ),
            *(self._update(u, config, prepared, new_versions) for u in updates.values()),
        )
        for v in prepared.missing:
            new_versions[v] = VersionEntry(
                v,
                ModelState.UNAVAILABLE,
                f"version {v} is specified for model '{entry.name}', but the version directory "
                "is not present",
                config=config,
            )
        await self._swap(entry, prepared, new_versions)

    def _begin(
        self,
        entry: ModelEntry,
        config: ModelConfig,
        prepared: Prepared,
        files: dict[int, Files],
        updates: dict[int, VersionEntry],
        stamp: bytes | None,
    ) -> dict[int, VersionEntry]:
        """The entries of the versions to load (those not updated in place), LOADING; a
        version the model did not have yet shows LOADING meanwhile. ``stamp``: the load's
        :func:`~tritonx._core.response_cache.load_stamp` when the response cache is in
        front of it, else None."""
        name = entry.name
        cached = stamp is not None
        new_versions: dict[int, VersionEntry] = {}
        for v in prepared.selected:
            if v in updates:
                continue
            new_versions[v] = VersionEntry(
                v, ModelState.LOADING, config=config, model_dir=prepared.model_dir, cached=cached
            )
            new_versions[v].files = files[v]
            new_versions[v].cache_scope = CacheScope(name, v, stamp) if stamp is not None else None
            if v not in entry.versions:
                # shown LOADING (index, readiness) while it loads; it serves only once the
                # whole load is swapped in, never before
                entry.versions[v] = VersionEntry(v, ModelState.LOADING, config=config)
            self.emit(name, v, ModelState.LOADING, "")
        return new_versions

    async def _swap(
        self, entry: ModelEntry, prepared: Prepared, new_versions: dict[int, VersionEntry]
    ) -> None:
        """Swap the loaded versions in for the old ones, run the agents' LOAD_COMPLETE or
        LOAD_FAIL, and unload what the swap replaced."""
        name = entry.name
        # swap: a load that fails leaves the old versions serving (see merge_versions);
        # requests arriving until now went to them, those in flight finish on them
        old = entry.versions
        failures = [v for v in new_versions.values() if not v.ready]
        merged, retired, succeeded = merge_versions(name, old, new_versions, prepared.selected)
        replaced_agents = entry.agents if succeeded else None
        if prepared.agents is not None:
            if succeeded:
                await prepared.agents.load_completed()
            else:
                await prepared.agents.load_failed()
        entry.versions = merged
        entry.last_failures = failures
        entry.error = ""
        if succeeded or entry.agents is None:
            entry.agents = prepared.agents
        for ventry in merged.values():
            self.emit(name, ventry.version, ventry.state, ventry.reason)
        await asyncio.gather(*(self.unloads.retire(name, prev) for prev in retired))
        if (
            replaced_agents is not None
            and replaced_agents is not entry.agents
            and not any(old.get(v) is ventry for v, ventry in merged.items())
        ):
            # a reload replaced the whole model: its old agents get UNLOAD / UNLOAD_COMPLETE
            await replaced_agents.unload()
            await replaced_agents.unload_completed()
        if succeeded:
            entry.last_used = entry.loaded_at = time.monotonic()
            entry.demand_failed = False
            log.info("successfully loaded '%s'", name)
        else:
            log.info("failed to load '%s'", name)

    async def _update(
        self,
        old: VersionEntry,
        config: ModelConfig,
        prepared: Prepared,
        new_versions: dict[int, VersionEntry],
    ) -> None:
        """Update ``old``'s instance groups in place; it stays the version's entry, or a
        failed entry aborts the load (``old`` serves on, unchanged)."""
        v = old.version
        try:
            await self.pipeline.update_version(old, config, prepared, prepared.versions[v])
        except Exception as exc:
            err = TritonXError.wrap(exc)
            log.error("failed to load '%s' version %d: %s", config.name, v, err.as_string())
            new_versions[v] = VersionEntry(
                v, ModelState.UNAVAILABLE, err.as_string(), config=config
            )
            return
        new_versions[v] = old


def updatable(old: VersionEntry, config: ModelConfig, prepared: Prepared, files: Files) -> bool:
    """Whether a reload of serving version ``old`` to ``config`` only changes its
    instance groups (Triton: not an ensemble, the version's files unmodified, the
    configs equal but for ``instance_group`` and ``version_policy``)."""
    return (
        old.ready
        and old.files == files
        and old.model_dir == prepared.model_dir
        and old.config is not None
        and bool(getattr(old.scheduler, "updates_instances", False))
        and only_instances_changed(old.config.raw, config.raw)
    )


async def keep_files(
    entry: ModelEntry,
    prepared: Prepared,
    override_dir: Path | None,
    localized: tuple[Repository, Path] | None,
) -> None:
    """After a load: keep the folders the versions serve from, release the others."""
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
        await asyncio.to_thread(old_repo.release, entry.name, old_path)
    entry.localized = localized


async def release_files(entry: ModelEntry) -> None:
    """After ``entry``'s unload: remove its load-API override folder, release the folder
    its repository localized."""
    remove_override_dir(entry.override_dir)
    entry.override_dir = None
    if entry.localized is not None:
        repo, path = entry.localized
        entry.localized = None
        await asyncio.to_thread(repo.release, entry.name, path)
