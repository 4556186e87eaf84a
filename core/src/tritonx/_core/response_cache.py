"""The response cache in front of the schedulers (``response_cache { enable: true }``).

The cache itself is a plugin (:class:`tritonx.ResponseCache`, chosen with
``--cache-config <name>,<key>=<value>``); this module computes Triton's key (model name,
version and every input's name, datatype, shape and bytes; here also the requested outputs, so
a response filtered to some outputs never answers a request for others), records the hit and
miss statistics, and hands back a copy that carries the new request's id.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING

import numpy as np

from tritonx.cache import ResponseCache
from tritonx.datatypes import serialize_bytes_tensor
from tritonx.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from tritonx._core.lifecycle import VersionEntry


def cache_key(request: InferenceRequest, model: str, version: int) -> bytes:
    """A digest of what makes two requests to one model version interchangeable."""
    h = hashlib.blake2b(digest_size=32)
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


class CacheFront:
    """Looks requests up in the configured cache and stores successful responses."""

    def __init__(self, cache: ResponseCache) -> None:
        self.cache = cache

    async def lookup(
        self, request: InferenceRequest, entry: VersionEntry
    ) -> tuple[InferenceResponse | None, bytes]:
        """The cached response for ``request`` (a copy with its id) or None, and its key;
        records the hit or miss."""
        assert entry.config is not None and entry.scheduler is not None
        start = time.perf_counter_ns()
        key = cache_key(request, entry.config.name, entry.version)
        cached = await self.cache.get(key)
        stats = entry.scheduler.stats
        elapsed = time.perf_counter_ns() - start
        if cached is None:
            stats.cache_miss.add(elapsed)
            return None, key
        stats.cache_hit.add(elapsed)
        stats.record_success(elapsed)
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
        time counts toward the miss duration, as in Triton)."""
        if response.error is not None:
            return
        start = time.perf_counter_ns()
        await self.cache.put(key, response)
        assert entry.scheduler is not None
        entry.scheduler.stats.cache_miss.add(time.perf_counter_ns() - start, count=0)

    async def close(self) -> None:
        await self.cache.close()
