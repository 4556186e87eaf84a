"""The response cache in front of the schedulers (``response_cache { enable: true }``).

The cache itself is a plugin (:class:`tritonx.ResponseCache`, chosen with
``--cache-config <name>,<key>=<value>``); this module computes Triton's key (model name,
version and every input's name, datatype, shape and bytes; here also the requested outputs, so
a response filtered to some outputs never answers a request for others), records the hit and
miss statistics, and hands back a copy that carries the new request's id.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import TYPE_CHECKING

import numpy as np

from tritonx.cache import ResponseCache
from tritonx.datatypes import serialize_bytes_tensor
from tritonx.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from tritonx._core.lifecycle import VersionEntry

log = logging.getLogger("tritonx")

#: seconds between two warnings about a failing cache plugin
WARN_INTERVAL_S = 10.0


def cache_key(request: InferenceRequest, model: str, version: int) -> bytes:
    """A digest of what makes two requests to one model version interchangeable."""
    # SHA-256: twice blake2b's speed on large tensors where the CPU has SHA instructions
    h = hashlib.sha256()
    h.update(f"{model}\0{version}\0".encode())
    for name in sorted(request.inputs):
        array = request.inputs[name]
        h.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        if array.dtype == np.object_:
            h.update(serialize_bytes_tensor(array))
        else:
            h.update(np.ascontiguousarray(array).data)
    outputs = request.requested_outputs
    h.update(b"*" if outputs is None else "\0".join(sorted(outputs)).encode())
    return h.digest()


class _Key(bytes):
    """A cache key that remembers how long its (missed) lookup took, so the insert can
    record the whole miss (lookup + insert) in the miss summary, as Triton does."""

    lookup_ns: int = 0


class CacheFront:
    """Looks requests up in the configured cache and stores successful responses.

    A cache plugin that raises is never allowed to fail a request: its lookup counts as a
    miss and its insert is dropped, with a warning (at most one every
    :data:`WARN_INTERVAL_S` seconds).
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
        start = time.perf_counter_ns()
        key = _Key(cache_key(request, entry.config.name, entry.version))
        try:
            cached = await self.cache.get(key)
        except Exception as exc:
            self._warn("lookup", exc)
            cached = None
        stats = entry.scheduler.stats
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
        start = time.perf_counter_ns()
        try:
            await self.cache.put(key, response)
        except Exception as exc:
            self._warn("insert", exc)
        assert entry.scheduler is not None
        elapsed = time.perf_counter_ns() - start
        lookup_ns = key.lookup_ns if isinstance(key, _Key) else 0
        stats = entry.scheduler.stats
        stats.cache_miss.add(elapsed, count=0)
        # as Triton: the request duration of a miss includes its lookup and insert
        stats.success.add(lookup_ns + elapsed, count=0)
        if stats.latency is not None and stats.latency.cache_miss is not None:
            stats.latency.cache_miss.observe((lookup_ns + elapsed) / 1000, time.monotonic_ns())

    async def close(self) -> None:
        await self.cache.close()
