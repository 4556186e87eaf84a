"""Unloading a model's versions: drain each one's requests in flight, then stop its
scheduler.

An unload waits for the requests already accepted up to ``--model-unload-timeout-secs`` (or
the server's ``--exit-timeout-secs`` once it exits, whichever ends first): then the requests
still queued fail, and instances still executing are aborted (a python model's worker
process is killed) or their threads abandoned (:meth:`Scheduler.stop`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Any

from tritonx._core.entries import ModelEntry, VersionEntry
from tritonx._core.scheduler import Scheduler
from tritonx._core.status import UNLOADED_REASON
from tritonx.errors import Code, TritonXError, unavailable
from tritonx.types import ModelState

log = logging.getLogger("tritonx.lifecycle")

#: ``(model, version, state, reason)``: the model manager's event emitter
Emit = Callable[[str, int, ModelState, str], None]


class Unloads:
    """The unloads of a model manager's versions, and the server's exit they hurry to.

    :param unload_timeout: ``--model-unload-timeout-secs``.
    :param emit: called with each state change.
    """

    def __init__(self, unload_timeout: float, emit: Emit) -> None:
        self.unload_timeout = unload_timeout
        self._emit = emit
        #: set when the server begins to exit (:meth:`begin_exit`), with its deadline (loop
        #: time; None: no limit): unloads under way hurry to it
        self.exiting = asyncio.Event()
        self.exit_deadline: float | None = None

    def begin_exit(self, deadline: float | None) -> None:
        """The server exits: unloads under way (explicit, reloads) end by ``deadline``."""
        self.exit_deadline = deadline
        self.exiting.set()

    async def unload_model(self, entry: ModelEntry, deadline: float | None = None) -> None:
        """Unload every loaded version of ``entry`` (:meth:`retire`; the repository agents'
        UNLOAD before, UNLOAD_COMPLETE after) and forget how it was loaded. Its folders are
        the caller's to release."""
        name = entry.name
        loaded = [v for v in entry.versions.values() if v.scheduler is not None]
        agents = entry.agents
        if agents is not None:
            await agents.unload()
        for v in entry.versions.values():
            if v.scheduler is None and v.reason != UNLOADED_REASON:
                v.state, v.reason = ModelState.UNAVAILABLE, UNLOADED_REASON
        await asyncio.gather(*(self.retire(name, v, deadline) for v in loaded))
        if agents is not None:
            await agents.unload_completed()
        entry.agents = None
        entry.stamp = None
        entry.error = ""
        entry.invalid = False
        entry.explicit = False
        entry.demand_failed = False
        entry.override = False

    async def retire(self, name: str, ventry: VersionEntry, deadline: float | None = None) -> None:
        """Unload one version: wait for its requests in flight until ``deadline`` (loop time;
        default: ``--model-unload-timeout-secs`` from now; never past the server's exit
        deadline), then stop its scheduler with what is left of it: requests still queued
        fail, and executions still running are aborted or abandoned (:meth:`Scheduler.stop`)."""
        scheduler = ventry.scheduler
        if scheduler is None:
            return
        ventry.state = ModelState.UNLOADING
        self._emit(name, ventry.version, ModelState.UNLOADING, "")
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.unload_timeout
        if not await self._drained(scheduler, deadline):
            log.warning(
                "'%s' version %d: %d requests still in flight at the end of the %s",
                name,
                ventry.version,
                scheduler.inflight,
                "exit timeout" if self.exiting.is_set() else "unload timeout",
            )
        remaining = _seconds_left(self._limit(deadline), loop.time())
        if self.exiting.is_set():
            error = TritonXError("Server exiting", Code.UNAVAILABLE)
        else:  # Triton's answer to requests for a version that is not READY
            error = unavailable(
                f"Request for unknown model: '{name}' version {ventry.version} is not at "
                "ready state"
            )
        if not await scheduler.stop(remaining, error):
            log.warning(
                "'%s' version %d: %s reached with executions still running; they were "
                "aborted or abandoned",
                name,
                ventry.version,
                "exit timeout" if self.exiting.is_set() else "unload timeout",
            )
        ventry.scheduler = None
        if ventry.cache_scope is not None:  # its cached responses go with it
            await ventry.cache_scope.retire()
        ventry.state, ventry.reason = ModelState.UNAVAILABLE, UNLOADED_REASON
        self._emit(name, ventry.version, ModelState.UNAVAILABLE, UNLOADED_REASON)
        log.info("successfully unloaded '%s' version %d", name, ventry.version)

    def _limit(self, deadline: float) -> float:
        """``deadline``, or the server's exit deadline when that comes first."""
        if self.exit_deadline is not None:
            return min(deadline, self.exit_deadline)
        return deadline

    async def _drained(self, scheduler: Scheduler, deadline: float) -> bool:
        """Wait until ``scheduler`` has no request in flight; False when :meth:`_limit`
        passed first (the server may begin to exit meanwhile, which brings it closer)."""
        if scheduler.inflight == 0:
            return True
        loop = asyncio.get_running_loop()
        drain = asyncio.ensure_future(scheduler.drain(None))
        try:
            while True:
                waiting: set[asyncio.Future[Any]] = {drain}
                exiting: asyncio.Future[Any] | None = None
                if not self.exiting.is_set():
                    exiting = asyncio.ensure_future(self.exiting.wait())
                    waiting.add(exiting)
                timeout = _seconds_left(self._limit(deadline), loop.time())
                try:
                    done, _ = await asyncio.wait(
                        waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    if exiting is not None:
                        exiting.cancel()
                if drain in done:
                    return bool(drain.result())
                if exiting is None or exiting not in done:
                    return False  # the time is up
        finally:
            drain.cancel()


def _seconds_left(deadline: float, now: float) -> float | None:
    """Seconds from ``now`` to ``deadline`` (0 once past; None for an infinite one)."""
    if math.isinf(deadline):
        return None
    return max(0.0, deadline - now)
