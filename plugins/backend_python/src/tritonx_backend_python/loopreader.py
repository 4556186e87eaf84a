"""The server's event loop watching one worker's data socket for the answer to the batch it
sent (:class:`LoopReader`), so that a batch sent from the loop (``execute_async``) is
answered without a thread waiting on the socket.

Used by :class:`~tritonx_backend_python.worker.WorkerInstance`, which keeps one reader per
worker link.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from tritonx_backend_python._channel import Channel
from tritonx_backend_python.link import WorkerLink


class LoopReader:
    """The event loop's watch on one worker's data socket: a duplicate of its descriptor
    (the link's threads close the original when the worker dies), non-blocking, registered
    with the loop once and read for the batch in flight.

    When the socket becomes readable with no batch of the loop in flight (the answer to a
    batch the instance thread sent, which that thread reads, or the worker's end), the loop
    stops watching until its next batch.
    """

    def __init__(self, link: WorkerLink, loop: asyncio.AbstractEventLoop) -> None:
        self.link = link
        self.loop = loop
        fd = os.dup(link.proc.data.fileno())
        os.set_blocking(fd, False)  # (the link's descriptor too: its Channel copes with that)
        self.channel = Channel(fd)
        #: called when the socket is readable while the loop's batch is in flight
        self.answer: Callable[[], None] | None = None
        self._watching = False

    def expect(self, answer: Callable[[], None]) -> None:
        """Call ``answer`` on the loop whenever the socket is readable, until it clears
        :attr:`answer`."""
        self.answer = answer
        if not self._watching:
            self.loop.add_reader(self.channel.fileno(), self._readable)
            self._watching = True

    def _readable(self) -> None:
        answer = self.answer
        if answer is None:
            self._unwatch()
            return
        answer()

    def _unwatch(self) -> None:
        if self._watching:
            self._watching = False
            self.loop.remove_reader(self.channel.fileno())

    def close(self) -> None:
        """Stop watching and close the duplicate (on the loop)."""
        self._unwatch()
        self.channel.close()

    def close_threadsafe(self) -> None:
        """:meth:`close` from another thread."""
        try:
            self.loop.call_soon_threadsafe(self.close)
        except RuntimeError:  # the loop is closed: nothing watches the descriptor any more
            self.channel.close()
