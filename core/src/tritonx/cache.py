"""Response caches (``--cache-config=<name>,<key>=<value>``, ``response_cache { enable: true }``)."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import ClassVar

from tritonx.types import InferenceResponse


class ResponseCache(abc.ABC):
    """A cache of inference responses keyed by a hash of the model, version and inputs.

    :cvar name: the name used in ``--cache-config`` (Triton's built-in one is ``local``).
    Methods are async because they run on the event loop (a remote cache awaits the network).
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

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; called at shutdown."""
