"""``local``: the in-process response cache (``--cache-config local,size=<bytes>``).

Triton's default cache, rewritten: entries live in this process, the least recently used ones
are evicted once their total size would pass ``size`` bytes, and an entry larger than the
whole cache is not stored (the insert fails with Triton's "Cache entry is larger than total
cache size"). An entry's size is what its outputs occupy (numeric tensors: their
bytes; BYTES tensors: their serialized size, 4 bytes of length per element plus the contents)
plus its key and output names, so a cache of ``size`` bytes never holds more tensor data than
that.

Entries are private copies: mutating a response after it was stored, or a response a hit
returned, never changes what the cache holds. Calls may come from any thread or event loop.

When a model version is unloaded or replaced, its entries are dropped at once
(:meth:`LocalCache.evict_model`: the keys of each scope are indexed).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tritonx.cache import SCOPE_BYTES, ResponseCache, copy_tensor
from tritonx.datatypes import bytes_tensor_byte_size
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.hookspecs import hookimpl
from tritonx.registry import CacheRegistry
from tritonx.types import InferenceResponse

log = logging.getLogger("tritonx")


@hookimpl
def tritonx_register_caches(registry: CacheRegistry) -> None:
    """Triton's ``local`` cache."""
    registry.add(LocalCache)


def tensor_size(array: np.ndarray) -> int:
    """Bytes a tensor takes in the cache (BYTES tensors: their serialized size)."""
    if array.dtype.kind in "OSU":
        return bytes_tensor_byte_size(array)
    return int(array.nbytes)


def entry_size(key: bytes, response: InferenceResponse) -> int:
    """The size :class:`LocalCache` counts for ``response`` stored under ``key``."""
    return len(key) + sum(
        len(name.encode()) + tensor_size(array) for name, array in response.outputs.items()
    )


@dataclass(frozen=True, slots=True)
class _Entry:
    outputs: tuple[tuple[str, np.ndarray], ...]
    parameters: tuple[tuple[str, object], ...]
    size: int


class LocalCache(ResponseCache):
    """An LRU cache of responses bounded by byte size.

    Settings (``--cache-config local,<key>=<value>``):

    * ``size``: the capacity in bytes (required, a positive integer; Triton's setting).
    """

    name = "local"
    SETTINGS = ("size",)

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        unknown = sorted(set(self.config) - set(self.SETTINGS))
        if unknown:
            raise invalid_arg(
                f"Failed to initialize LocalCache: unknown setting(s) {', '.join(unknown)} "
                f"(--cache-config local accepts: {', '.join(self.SETTINGS)})"
            )
        if "size" not in self.config:
            raise invalid_arg(
                "Failed to initialize LocalCache: config didn't contain a valid 'size' field "
                "(--cache-config local,size=<bytes>)"
            )
        text = self.config["size"].strip()
        if not (text.isascii() and text.isdigit()) or int(text) <= 0:
            raise invalid_arg(
                f"Failed to initialize LocalCache: 'size' must be a positive number of bytes, "
                f"got '{self.config['size']}'"
            )
        #: capacity in bytes
        self.capacity = int(text)
        #: bytes held now
        self.used = 0
        #: entries evicted to make room, since start
        self.evictions = 0
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        #: the keys held for each scope (their first SCOPE_BYTES bytes)
        self._scopes: dict[bytes, set[bytes]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: bytes) -> InferenceResponse | None:
        with self._lock:
            entry = self._entries.get(bytes(key))
            if entry is None:
                return None
            self._entries.move_to_end(bytes(key))
        return InferenceResponse(
            outputs={name: copy_tensor(array) for name, array in entry.outputs},
            parameters=dict(entry.parameters),
        )

    async def put(self, key: bytes, response: InferenceResponse) -> None:
        key = bytes(key)
        size = entry_size(key, response)
        if size > self.capacity:  # Triton's local cache refuses it with this text
            raise TritonXError("Cache entry is larger than total cache size", Code.INTERNAL)
        entry = _Entry(
            tuple((name, copy_tensor(array)) for name, array in response.outputs.items()),
            tuple(response.parameters.items()),
            size,
        )
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.used -= old.size
            while self._entries and self.used + size > self.capacity:
                evicted_key, evicted = self._entries.popitem(last=False)
                self._unindex(evicted_key)
                self.used -= evicted.size
                self.evictions += 1
            self._entries[key] = entry
            self._scopes.setdefault(key[:SCOPE_BYTES], set()).add(key)
            self.used += size

    def _unindex(self, key: bytes) -> None:
        scope = key[:SCOPE_BYTES]
        keys = self._scopes.get(scope)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._scopes[scope]

    async def evict_model(self, model: str, version: int, scope: bytes) -> None:
        """Drop every entry of ``scope`` (that load of ``model`` version ``version`` is
        gone); they do not count as LRU :attr:`evictions`."""
        with self._lock:
            keys = self._scopes.pop(bytes(scope), set())
            for key in keys:
                entry = self._entries.pop(key, None)
                if entry is not None:
                    self.used -= entry.size
        if keys:
            log.debug(
                "local cache: dropped %d entries of '%s' version %d", len(keys), model, version
            )

    async def close(self) -> None:
        with self._lock:
            self._entries.clear()
            self._scopes.clear()
            self.used = 0
