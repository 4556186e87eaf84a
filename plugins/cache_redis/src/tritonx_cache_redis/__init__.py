"""tritonx plugin: Triton's ``redis`` response cache (``--cache-config redis,host=...,port=...``).

Registered through the ``tritonx`` entry point ``cache_redis``. Importing this module imports
the ``redis`` client but connects to nothing: the cache connects when the server builds it.
"""

from __future__ import annotations

import tritonx
from tritonx_cache_redis.cache import SETTINGS, RedisCache, RedisSettings

__all__ = ["SETTINGS", "RedisCache", "RedisSettings", "tritonx_register_caches"]
__version__ = "0.1.0"


@tritonx.hookimpl
def tritonx_register_caches(registry: tritonx.CacheRegistry) -> None:
    """Register :class:`RedisCache` (cache ``redis``)."""
    registry.add(RedisCache)
