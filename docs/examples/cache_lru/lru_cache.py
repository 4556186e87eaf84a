"""``memory_lru``: a response cache that keeps the ``entries`` most recently used responses.

A complete :class:`tritonx.ResponseCache` plugin (the built-in ``local`` cache bounds its size
in bytes instead). Serve with ``--cache-config memory_lru,entries=1000`` and
``response_cache { enable: true }`` in the config.pbtxt of the models to cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

import tritonx
from tritonx.cache import SCOPE_BYTES, copy_tensor
from tritonx.errors import invalid_arg
from tritonx.parameters import parse_int


@tritonx.hookimpl
def tritonx_register_caches(registry: tritonx.CacheRegistry) -> None:
    """Register the ``memory_lru`` cache."""
    registry.add(LRUCache)


class LRUCache(tritonx.ResponseCache):
    """Responses by key, least recently used first; the server calls it on its event loop."""

    name = "memory_lru"

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.entries = parse_int("entries", self.config.get("entries", "1024"))
        if self.entries < 1:
            raise invalid_arg(f"--cache-config memory_lru,entries={self.entries}: must be >= 1")
        self._store: OrderedDict[bytes, tritonx.InferenceResponse] = OrderedDict()

    async def get(self, key: bytes) -> tritonx.InferenceResponse | None:
        response = self._store.get(key)
        if response is None:
            return None
        self._store.move_to_end(key)
        return _copy(response)

    async def put(self, key: bytes, response: tritonx.InferenceResponse) -> None:
        self._store[key] = _copy(response)
        self._store.move_to_end(key)
        while len(self._store) > self.entries:
            self._store.popitem(last=False)

    async def evict_model(self, model: str, version: int, scope: bytes) -> None:
        """That load of the model is gone: drop its entries (their keys start with ``scope``)."""
        for key in [k for k in self._store if k[:SCOPE_BYTES] == scope]:
            del self._store[key]


def _copy(response: tritonx.InferenceResponse) -> tritonx.InferenceResponse:
    """A private copy: whoever holds a response may change its arrays."""
    return tritonx.InferenceResponse(
        outputs={name: copy_tensor(array) for name, array in response.outputs.items()},
        parameters=dict(response.parameters),
    )
