"""Watching the server from outside its event loop: a blocked loop, and a stop that does not end.

* :class:`LoopWatchdog` (``--event-loop-watchdog-secs``): a daemon thread posts a no-op to the
  loop every :meth:`~LoopWatchdog.interval` seconds; when one waits longer than the threshold,
  the loop is blocked (a callback that does not return: a blocking call in a coroutine, a
  backend that blocks in ``execute_async``...). The incident is logged once, with the loop
  thread's stack taken from :func:`sys._current_frames` (naming the blocking function), and
  counted in ``tritonx_event_loop_blocked_total``; its length goes to
  ``tritonx_event_loop_blocked_seconds_total`` when the loop runs again.
* :class:`ExitGuard` (``tritonx serve``): SIGINT / SIGTERM are handled by a
  :func:`signal.signal` handler, which runs between two bytecodes of the main thread even
  while the loop is blocked, and wakes a daemon thread: that thread asks the loop to stop
  gracefully, and if the process is still alive :data:`HARD_EXIT_GRACE_S` seconds after
  ``--exit-timeout-secs``, it logs Triton's "Exit timeout expired. Exiting immediately." and
  ends the process with ``os._exit(1)`` (tritonserver exits with 1 when its exit timeout
  expires). An orchestrator can always stop the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger("tritonx.watchdog")

#: Seconds the process may live on after ``--exit-timeout-secs`` (the graceful stop aborts
#: what is still running at the exit timeout, then closes the listeners) before it is ended.
HARD_EXIT_GRACE_S = 5.0

#: The longest interval between two pings of the loop.
MAX_INTERVAL_S = 1.0


class LoopWatchdog:
    """Detects a blocked event loop from a daemon thread (see the module docstring).

    :param loop: the loop to watch; :meth:`start` must be called on its thread.
    :param threshold: seconds the loop may not run before it counts as blocked (> 0).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold: float) -> None:
        if not threshold > 0:
            raise ValueError(f"the watchdog threshold must be > 0 seconds, got {threshold}")
        self.loop = loop
        self.threshold = threshold
        #: incidents so far (``tritonx_event_loop_blocked_total``)
        self.blocked_count = 0
        #: seconds the loop spent blocked in ended incidents
        #: (``tritonx_event_loop_blocked_seconds_total``)
        self.blocked_seconds = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop_thread = 0

    @property
    def interval(self) -> float:
        """Seconds between two pings (a quarter of the threshold, at most one second)."""
        return min(MAX_INTERVAL_S, self.threshold / 4)

    def start(self) -> None:
        """Start watching (on the loop's thread: its stack is the one logged)."""
        self._loop_thread = threading.get_ident()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="tritonx-loop-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching; the thread ends within :meth:`interval` seconds (it is not waited
        for: on the loop, that could wait for the ping the loop is not answering)."""
        self._stop.set()
        self._thread = None

    def _run(self) -> None:
        interval = self.interval
        while not self._stop.is_set():
            answered = threading.Event()
            posted = time.monotonic()
            try:
                self.loop.call_soon_threadsafe(answered.set)
            except RuntimeError:  # the loop is closed
                return
            while not answered.wait(interval):
                if self._stop.is_set():
                    return
                if time.monotonic() - posted >= self.threshold:
                    self._incident(answered, posted)
                    break
            if self._stop.wait(interval):
                return

    def _incident(self, answered: threading.Event, posted: float) -> None:
        """The loop has not run for ``threshold`` seconds: log where it is, count it, and
        wait for it to run again (or for :meth:`stop`)."""
        self.blocked_count += 1
        frame = sys._current_frames().get(self._loop_thread)
        stack = format_stack(frame)
        log.error(
            "the event loop has been blocked for more than %g s (--event-loop-watchdog-secs): "
            "requests, health checks and metrics wait meanwhile. The loop thread is at:\n%s",
            self.threshold,
            stack,
        )
        while not answered.wait(MAX_INTERVAL_S):
            if self._stop.is_set():
                return
        took = time.monotonic() - posted
        self.blocked_seconds += took
        log.warning("the event loop ran again after being blocked for %.3f s", took)


#: The innermost frames of the loop thread's stack a report shows.
STACK_FRAMES = 30


def format_stack(frame: FrameType | None) -> str:
    """``frame``'s :data:`STACK_FRAMES` innermost calls, innermost last (as tracebacks
    print them)."""
    if frame is None:
        return "  (the loop thread is gone)"
    return "".join(traceback.format_stack(frame, limit=-STACK_FRAMES)).rstrip()


class ExitGuard:
    """SIGINT / SIGTERM for ``tritonx serve``: a graceful stop first, the process ended
    (``os._exit(1)``) if it is still alive ``exit_timeout`` + :data:`HARD_EXIT_GRACE_S`
    seconds after the first signal.

    :param exit_timeout: ``--exit-timeout-secs``.
    :param exit: what ends the process (``os._exit``).
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, exit_timeout: float, exit: Callable[[int], object] = os._exit) -> None:
        self.exit_timeout = exit_timeout
        self._exit = exit
        self._signalled = threading.Event()
        self._signum = 0
        self._lock = threading.Lock()
        self._on_signal: Callable[[], object] | None = None
        #: the graceful stop has finished (the hard exit then keeps its status 0)
        self.stopped = False
        self._previous: dict[int, Any] = {}

    @property
    def hard_exit_after(self) -> float:
        """Seconds from the first signal to the hard exit."""
        return max(0.0, self.exit_timeout) + HARD_EXIT_GRACE_S

    def install(self) -> None:
        """Handle SIGINT and SIGTERM (from the main thread) and start the guard thread."""
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handler)
        threading.Thread(target=self._run, name="tritonx-exit-guard", daemon=True).start()

    def uninstall(self) -> None:
        """Give the signals back their previous handlers."""
        for sig, previous in self._previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, previous)
        self._previous.clear()

    def on_signal(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` (from the guard thread) on the first signal, or at once if it
        came already; it must be thread-safe (``loop.call_soon_threadsafe(...)``)."""
        with self._lock:
            self._on_signal = callback
            fire = self._signalled.is_set()
        if fire:
            _call(callback)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        # the main thread, between two bytecodes (maybe inside the loop's machinery): only
        # wake the guard thread, which does the rest; later signals change nothing (Triton's)
        if not self._signalled.is_set():
            self._signum = signum
            self._signalled.set()

    def _run(self) -> None:
        self._signalled.wait()
        started = time.monotonic()
        log.info("Signal (%d) received.", self._signum)
        with self._lock:
            callback = self._on_signal
        if callback is not None:
            _call(callback)
        if not math.isfinite(self.hard_exit_after):
            return  # no exit timeout: no hard exit
        left = self.hard_exit_after - (time.monotonic() - started)
        time.sleep(max(0.0, left))  # a daemon: a process that exits first ends it
        code = 0 if self.stopped else 1
        if code:
            log.error("failed to stop server: Exit timeout expired. Exiting immediately.")
        else:
            log.warning("the server stopped but the process did not exit: exiting now")
        _flush_logs()
        self._exit(code)


def _call(callback: Callable[[], object]) -> None:
    try:
        callback()
    except RuntimeError:  # the loop is closed: the process is exiting anyway
        pass
    except Exception:
        log.exception("stopping the server failed")


def _flush_logs() -> None:
    """Flush every log handler and the standard streams (``os._exit`` skips that)."""
    for logger in [logging.getLogger(), *logging.getLogger().manager.loggerDict.values()]:
        for handler in getattr(logger, "handlers", ()):
            with contextlib.suppress(Exception):
                handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
