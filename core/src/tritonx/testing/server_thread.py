"""``ServerThread``: a :class:`tritonx.Server` on its own event loop in a background thread,
so synchronous clients (tritonclient.http / .grpc, perf_analyzer) can call it from a test."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tritonx.server import Server


class ServerThread:
    """Start with :meth:`start` (returns once models are loaded), stop with :meth:`stop`."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="tritonx-server", daemon=True
        )
        self._started = False

    def start(self, timeout: float = 120) -> Server:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(timeout)
        self._started = True
        return self.server

    def call(self, coro: Any, timeout: float = 120) -> Any:
        """Run a coroutine on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, timeout: float = 120) -> None:
        if self._started:
            self.call(self.server.stop(), timeout)
            self._started = False
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        self.loop.close()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
