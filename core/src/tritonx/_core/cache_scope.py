"""The response cache's key scope of one loaded version (:class:`CacheScope`).

Every key the response cache (:mod:`tritonx._core.response_cache`) stores for a version
starts with its scope's prefix, a digest of the load (:func:`~tritonx._core.response_cache.load_stamp`),
the model's name and the version. The scope remembers which caches stored a response of it,
so that when the version is unloaded or replaced they are asked to drop its entries.

It lives apart from the cache front so that the model manager's entries
(:mod:`tritonx._core.entries`) can hold one without importing the cache front, which reads
those entries.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from tritonx.cache import SCOPE_BYTES


class ScopeStore(Protocol):
    """What a scope needs of a cache that stored its responses
    (:class:`~tritonx._core.response_cache.CacheFront`)."""

    async def evict(self, scope: CacheScope) -> None:
        """Drop the entries of ``scope`` (logging, never raising, a failure)."""


class CacheScope:
    """The key scope of one loaded version (``VersionEntry.cache_scope``): the first
    :data:`~tritonx.cache.SCOPE_BYTES` bytes of every key of its responses.

    :param model: the model's name.
    :param version: the version.
    :param stamp: :func:`~tritonx._core.response_cache.load_stamp` of the load.
    """

    __slots__ = ("_fronts", "model", "prefix", "retired", "version")

    def __init__(self, model: str, version: int, stamp: bytes) -> None:
        self.model = model
        self.version = version
        digest = hashlib.sha256(b"tritonx-cache-scope\0" + stamp + f"{model}\0{version}".encode())
        #: the bytes every key of this scope starts with
        self.prefix = digest.digest()[:SCOPE_BYTES]
        #: the version was unloaded or replaced: nothing is looked up or stored any more
        self.retired = False
        self._fronts: list[ScopeStore] = []

    def stored_by(self, front: ScopeStore) -> None:
        """``front`` stored a response of this scope: :meth:`retire` asks it to drop them."""
        if front not in self._fronts:
            self._fronts.append(front)

    async def retire(self) -> None:
        """The version was unloaded or replaced and its requests are done: ask every cache
        that stored a response of it to drop its entries (a cache that fails or takes more
        than :data:`~tritonx._core.response_cache.EVICT_TIMEOUT_S` seconds is logged and
        left alone)."""
        self.retired = True
        fronts, self._fronts = self._fronts, []
        for front in fronts:
            await front.evict(self)
