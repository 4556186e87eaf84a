"""Asking model instances whether they can serve (``ModelInstance.probe_ready``) for the
readiness endpoints, within bounds a client cannot move.

``probe_ready`` blocks (a python model's ``is_ready()`` may take up to its 5 s timeout), and
every health check asks every probing instance. Clients decide how many checks come at once,
so an instance is asked once at a time: a check that comes while it is being asked waits for
that answer (as Triton's python backend joins the ``is_ready()`` call in flight); and the
asking runs on threads of its own, so that checks never hold the default executor's threads,
which the rest of the server needs (loads, large request bodies, answers)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable

from tritonx.backend import ModelInstance

log = logging.getLogger("tritonx.scheduler")

#: threads asking instances (each asked by one at a time: at most one per probing instance)
PROBE_THREADS = 16

_executor = concurrent.futures.ThreadPoolExecutor(PROBE_THREADS, thread_name_prefix="tritonx-probe")


class Probes:
    """The probes in flight of one version's instances, one per instance at most."""

    def __init__(self) -> None:
        self._asking: dict[int, tuple[ModelInstance, asyncio.Future[str | None]]] = {}

    def ask(self, instance: ModelInstance, name: str) -> Awaitable[str | None]:
        """``instance.probe_ready()``'s answer: of the call in flight if there is one, else of
        a new call. Cancelling the awaiting task leaves the call to the others waiting."""
        key = id(instance)
        asking = self._asking.get(key)
        if asking is not None and asking[0] is instance:
            log.debug("model instance '%s': a readiness check joins the probe in flight", name)
            return asyncio.shield(asking[1])
        loop = asyncio.get_running_loop()
        call = asyncio.ensure_future(loop.run_in_executor(_executor, instance.probe_ready))
        self._asking[key] = (instance, call)

        def settled(done: asyncio.Future[str | None]) -> None:
            if self._asking.get(key, (None, None))[1] is done:
                del self._asking[key]
            if not done.cancelled():
                done.exception()  # (retrieved: every waiter may have gone)

        call.add_done_callback(settled)
        return asyncio.shield(call)
