"""The response cache in front of the schedulers (``response_cache { enable: true }``).

The cache itself is a plugin (:class:`tritonx.ResponseCache`, chosen with
``--cache-config <name>,<key>=<value>``); this module computes the key, records the hit and
miss statistics, and hands back a copy that carries the new request's id.

A key is the version's :class:`CacheScope` (16 bytes) followed by a digest of the request:
every input's name, datatype, shape and bytes, as Triton's, and here also the requested
outputs, so a response filtered to some outputs never answers a request for others. Triton
keys by model name and version only, so a model replaced in place and loaded again (same
name and version, new files) answered with the old model's responses. The scope is a digest
of the model's name, version, completed configuration, backend and backend settings and of
the files it was loaded from (each file's path and size, and its contents when it is small or
its modification time otherwise, as the local repository's poll stamps them; taken once
the configuration is read, before the backend loads the versions), so:

* a load of other files or another configuration never sees the entries of an earlier one;
* servers loading the same files (a Redis cache shared by servers on one model store, a
  server restarted) share their entries;
* when a load is unloaded or replaced, :meth:`CacheScope.retire` asks the cache to drop its
  entries (:meth:`tritonx.ResponseCache.evict_model`), and responses of its last requests
  are not stored any more.

Ensembles get a scope of their own for each load (their answers depend on the composing
models, which are not in their folder; an ensemble is reloaded whenever one of them is).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tritonx._core.cache_scope import CacheScope
from tritonx.cache import ResponseCache
from tritonx.datatypes import serialize_bytes_tensor
from tritonx.errors import TritonXError
from tritonx.repository import walk_files
from tritonx.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from tritonx._core.entries import Prepared, VersionEntry

__all__ = ["CacheFront", "CacheScope", "cache_key", "load_stamp"]

log = logging.getLogger("tritonx")

#: seconds between two warnings about a failing cache plugin
WARN_INTERVAL_S = 10.0
#: seconds a cache plugin's ``evict_model`` may take before the unload goes on without it
EVICT_TIMEOUT_S = 10.0
#: files up to this size count in a load's stamp by their contents (configuration, a python
#: model's code, small models); larger ones by their size and modification time
HASHED_FILE_BYTES = 1024 * 1024


def load_stamp(prepared: Prepared) -> bytes:
    """What identifies one load of a model for the cache (see the module docstring): a
    digest of its configuration, backend and backend settings, and of every regular file under
    its folder (path and size, then its contents up to :data:`HASHED_FILE_BYTES`, its
    modification time above); random for an ensemble. Reads the file system: call it in a
    worker thread, before the versions are loaded."""
    h = hashlib.sha256(b"tritonx-cache-load\0")
    h.update(prepared.config.SerializeToString(deterministic=True))
    backend = prepared.backend
    if backend is None:  # an ensemble: its answers depend on its composing models' loads
        h.update(os.urandom(16))
        return h.digest()
    h.update(f"\0{backend.name}\0{sorted(backend.config.items())!r}\0".encode())
    root = Path(prepared.model_dir)
    files = [
        (relpath, path, st.st_size, st.st_mtime_ns)
        for relpath, path, st in walk_files(root)
        # a FIFO or device is never opened (it could block)
        if stat.S_ISREG(st.st_mode)
    ]
    for relpath, path, size, mtime_ns in sorted(files):
        h.update(f"{relpath}\0{size}\0".encode())
        content = _small_file_digest(path, size)
        h.update(content if content is not None else f"{mtime_ns}\0".encode())
    return h.digest()


def _small_file_digest(path: str, size: int) -> bytes | None:
    """The SHA-256 of a file of at most :data:`HASHED_FILE_BYTES` (None for a larger one,
    or one that cannot be read)."""
    if size > HASHED_FILE_BYTES:
        return None
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read(HASHED_FILE_BYTES + 1)).digest()
    except OSError:
        return None


def cache_key(request: InferenceRequest, scope: bytes) -> bytes:
    """``scope`` followed by a digest of what makes two requests to one loaded version
    interchangeable."""
    # SHA-256: twice blake2b's speed on large tensors where the CPU has SHA instructions
    h = hashlib.sha256()
    for name in sorted(request.inputs):
        array = request.inputs[name]
        h.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        if array.dtype == np.object_:
            h.update(serialize_bytes_tensor(array))
        else:
            h.update(np.ascontiguousarray(array).data)
    outputs = request.requested_outputs
    h.update(b"*" if outputs is None else "\0".join(sorted(outputs)).encode())
    return scope + h.digest()


class _Key(bytes):
    """A cache key that remembers how long its (missed) lookup took, so the insert can
    record the whole miss (lookup + insert) in the miss summary, as Triton does, and the
    scope it belongs to."""

    lookup_ns: int = 0
    scope: CacheScope | None = None


class CacheFront:
    """Looks requests up in the configured cache and stores successful responses.

    A cache plugin that raises is never allowed to fail a request: its lookup counts as a
    miss, with a warning (at most one every :data:`WARN_INTERVAL_S` seconds), and its insert
    is dropped with Triton's error line ``Failed to insert key [<key>] into response cache:
    <reason>`` (a response larger than the whole cache, a store that is gone).
    """

    def __init__(self, cache: ResponseCache) -> None:
        self.cache = cache
        self._warned_at = -WARN_INTERVAL_S

    def _warn(self, what: str, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_INTERVAL_S:
            self._warned_at = now
            log.warning(
                "response cache '%s': %s failed (%s: %s); serving without the cache",
                self.cache.name,
                what,
                type(exc).__name__,
                exc,
            )

    async def lookup(
        self, request: InferenceRequest, entry: VersionEntry
    ) -> tuple[InferenceResponse | None, bytes]:
        """The cached response for ``request`` (a copy with its id) or None, and its key;
        records the hit or miss."""
        assert entry.config is not None and entry.scheduler is not None
        # (the version may be retired while a cache plugin awaits: its statistics stay)
        stats = entry.scheduler.stats
        start = time.perf_counter_ns()
        scope = entry.cache_scope
        key = _Key(cache_key(request, scope.prefix if scope is not None else b""))
        key.scope = scope
        cached = None
        if scope is not None and not scope.retired:
            try:
                cached = await self.cache.get(key)
            except Exception as exc:
                self._warn("lookup", exc)
        elapsed = time.perf_counter_ns() - start
        if cached is None:
            stats.cache_miss.add(elapsed)
            key.lookup_ns = elapsed
            return None, key
        stats.cache_hit.add(elapsed)
        stats.record_success(elapsed)
        # As Triton: a hit counts in "queue" (time before the lookup: none here), so queue
        # count = success count (perf_analyzer finds the model's version by it).
        stats.queue.add(0)
        lat = stats.latency
        if lat is not None:
            now = time.monotonic_ns()
            if lat.queue is not None:
                lat.queue.observe(0.0, now)
            if lat.cache_hit is not None:
                lat.cache_hit.observe(elapsed / 1000, now)
        response = InferenceResponse(
            outputs=dict(cached.outputs),
            parameters=dict(cached.parameters),
            model_name=entry.config.name,
            model_version=entry.version,
            id=request.id,
        )
        return response, key

    async def insert(self, key: bytes, entry: VersionEntry, response: InferenceResponse) -> None:
        """Store a successful response under the key :meth:`lookup` returned (the insert
        time counts toward the miss duration, as in Triton). Failed responses, and the
        responses of decoupled models, are never stored."""
        if response.error is not None or response.empty or not response.final:
            return
        scope = key.scope if isinstance(key, _Key) else entry.cache_scope
        scheduler = entry.scheduler
        if scope is None or scope.retired or scheduler is None:
            return  # answered by a version since unloaded or replaced: its entries are gone
        start = time.perf_counter_ns()
        scope.stored_by(self)
        try:
            await self.cache.put(key, response)
        except Exception as exc:  # Triton's line: a response that does not fit, a store gone
            message = exc.message if isinstance(exc, TritonXError) else str(exc)
            log.error(
                "Failed to insert key [%s] into response cache: %s",
                bytes(key).hex(),
                message or type(exc).__name__,
            )
        elapsed = time.perf_counter_ns() - start
        lookup_ns = key.lookup_ns if isinstance(key, _Key) else 0
        stats = scheduler.stats
        stats.cache_miss.add(elapsed, count=0)
        # as Triton: the request duration of a miss includes its lookup and insert
        stats.success.add(lookup_ns + elapsed, count=0)
        if stats.latency is not None and stats.latency.cache_miss is not None:
            stats.latency.cache_miss.observe((lookup_ns + elapsed) / 1000, time.monotonic_ns())

    async def evict(self, scope: CacheScope) -> None:
        """Ask the cache to drop the entries of ``scope`` (see :meth:`CacheScope.retire`)."""
        try:
            await asyncio.wait_for(
                self.cache.evict_model(scope.model, scope.version, scope.prefix),
                EVICT_TIMEOUT_S,
            )
        except Exception as exc:
            log.warning(
                "response cache '%s': dropping the entries of '%s' version %d failed "
                "(%s: %s); they stay until the cache evicts them",
                self.cache.name,
                scope.model,
                scope.version,
                type(exc).__name__,
                exc,
            )

    async def close(self) -> None:
        await self.cache.close()
