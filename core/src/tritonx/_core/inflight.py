"""Requests in flight: what a scheduler's ``drain`` waits for (the instance, sequence and
ensemble schedulers count theirs with one :class:`InFlight`)."""

from __future__ import annotations

import asyncio


class InFlight:
    """A count of requests accepted and not answered yet, on the event loop.

    :meth:`track` when a request is accepted, :meth:`untrack` when it is answered (it takes
    and ignores one argument, so it can be a future's done callback).
    """

    __slots__ = ("_idle", "count")

    def __init__(self) -> None:
        self.count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def track(self) -> None:
        self.count += 1
        self._idle.clear()

    def untrack(self, _: object = None) -> None:
        self.count -= 1
        if self.count == 0:
            self._idle.set()

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until no request is in flight; False if ``timeout`` passed first."""
        if self.count == 0:
            return True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True
