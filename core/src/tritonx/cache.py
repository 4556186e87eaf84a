"""Response caches (``--cache-config=<name>,<key>=<value>``, ``response_cache { enable: true }``)."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from tritonx.types import InferenceResponse

#: Every key a cache is given starts with this many bytes: the *scope* of the model load the
#: response belongs to (a digest of the model's name, version, configuration and the files it
#: was loaded from; the rest of the key is a digest of the request). A model replaced in
#: place and loaded again gets another scope, so its old responses are never served for it;
#: :meth:`ResponseCache.evict_model` names the scope of a load that is gone.
SCOPE_BYTES = 16


class ResponseCache(abc.ABC):
    """A cache of inference responses keyed by a hash of the model load and the inputs.

    :cvar name: the name used in ``--cache-config`` (Triton's built-in one is ``local``).
    Methods are async because they run on the event loop (a remote cache awaits the network).
    A complete example: ``docs/examples/cache_lru`` (an LRU cache bounded by entry count).
    """

    name: ClassVar[str]

    def __init__(self, config: Mapping[str, str]) -> None:
        """``config`` holds this cache's ``--cache-config`` settings."""
        self.config = dict(config)

    @abc.abstractmethod
    async def get(self, key: bytes) -> InferenceResponse | None:
        """The cached response for ``key``, or None."""

    @abc.abstractmethod
    async def put(self, key: bytes, response: InferenceResponse) -> None:
        """Store ``response`` under ``key``."""

    async def evict_model(self, model: str, version: int, scope: bytes) -> None:  # noqa: B027
        """Drop the entries of one load of ``model`` version ``version``: every key that
        starts with ``scope`` (:data:`SCOPE_BYTES` bytes).

        Called once that load was unloaded or replaced (and its last request answered): no
        key of that scope is looked up or stored again by this server. Correctness does not
        depend on it (another load has another scope); it gives the memory back. The default
        drops nothing: entries stay until the cache evicts them by its own policy, which
        suits a cache shared by several servers, where another server may still serve the
        same model files under the same scope.
        """

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; called at shutdown."""


def copy_tensor(array: np.ndarray) -> np.ndarray:
    """A private, writable copy of a tensor for a cache to keep or hand out (whoever holds a
    response may change its arrays); BYTES elements become immutable ``bytes``."""
    if array.dtype != np.object_:
        return np.array(array, copy=True, order="C")
    out = np.empty(array.shape, dtype=object)
    flat = out.reshape(-1)
    for i, item in enumerate(array.reshape(-1)):
        flat[i] = bytes(item) if isinstance(item, (bytearray, memoryview)) else item
    return out


__all__ = [
    "SCOPE_BYTES",
    "ResponseCache",
    "copy_tensor",
]
