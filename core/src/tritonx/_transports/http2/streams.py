"""An HTTP/2 connection's streams and its sending side: :class:`StreamState` (a stream's state,
its receive-window credit and its writer's wait) and :class:`StreamConnection`, the state of a
connection and what writes to it.

:class:`StreamConnection` is the base of :class:`~tritonx._transports.http2.connection.Connection`
(the frame handling is added above it: :mod:`~tritonx._transports.http2.policing`,
:mod:`~tritonx._transports.http2.inbound`, :mod:`~tritonx._transports.http2.connection`): it
holds the connection's fields, writes frames (all a read produces in one write), ends and resets
streams (remembering the ids this side reset), and sends answers under flow control: what the
client's windows do not allow waits on its stream, bounded by ``max_send_buffer`` per connection
and the :class:`~tritonx._transports.http2.options.SendBudget` shared across connections, and
data that makes no progress for ``send_timeout`` seconds has its streams reset (CANCEL).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Protocol

from tritonx._transports.http2 import frames as f
from tritonx._transports.http2.options import Options, SendBudget

log = logging.getLogger("tritonx.http2")

#: a stream's data waiting beyond this makes its writer wait (:meth:`StreamState.drained`)
STREAM_SEND_BUFFER = 1 << 20
#: stream ids this side reset, remembered so that frames the client sent before it saw the
#: reset are ignored (older ones are answered STREAM_CLOSED)
_REMEMBERED_RESETS = 1024
#: ranges of stream ids the client skipped, remembered (a HEADERS frame on one of them is a
#: connection error: RFC 9113 §5.1.1)
_REMEMBERED_GAPS = 16


class StreamHandler(Protocol):
    """What an application does with one stream's request (set as :attr:`StreamState.handler`)."""

    def data_received(self, data: memoryview) -> None:
        """Body bytes of the request (padding removed); ``data`` is valid during the call
        only."""

    def end_received(self) -> None:
        """The client ended its side (END_STREAM)."""

    def reset(self) -> None:
        """The stream is gone before its answer ended (reset by the client or by a bound,
        or the connection closed): nothing more can be sent."""


class StreamState:
    """One HTTP/2 stream. ``handler`` is the application's; ``queued`` holds the DATA payload
    waiting for the client's windows, ``trailers`` the block that follows it."""

    __slots__ = (
        "closed",
        "conn",
        "content_length",
        "credit",
        "credit_held",
        "drain_waiter",
        "ended_remote",
        "handler",
        "headers_sent",
        "id",
        "queued",
        "queued_bytes",
        "received",
        "recv_used",
        "trailers",
    )

    def __init__(self, conn: StreamConnection, stream_id: int) -> None:
        self.conn = conn
        self.id = stream_id
        #: the send window beyond the client's initial window (may be negative)
        self.credit = 0
        self.recv_used = 0
        self.credit_held = False
        self.ended_remote = False
        self.headers_sent = False
        self.closed = False
        self.content_length = -1
        self.received = 0
        self.queued: deque[memoryview] = deque()
        self.queued_bytes = 0
        self.trailers: bytes | None = None
        self.drain_waiter: asyncio.Future[None] | None = None
        self.handler: StreamHandler | None = None

    @property
    def send_window(self) -> int:
        """What the client's window for this stream allows now."""
        return self.conn.peer_window + self.credit

    def hold_credit(self, held: bool) -> None:
        """Hold back (True) or give (False) the receive-window credit of what arrived: a
        handler holds it while it has received more than it consumed, so its client waits."""
        self.credit_held = held
        if held or self.closed or self.ended_remote:
            return
        conn = self.conn
        if self.recv_used >= conn.options.stream_window // 2:  # (as data_received credits)
            conn.write(f.window_update(self.id, self.recv_used))
            self.recv_used = 0

    async def drained(self) -> None:
        """Wait until the data waiting for the client's windows is below the stream's buffer
        and the connection's (and the transport is writable)."""
        conn = self.conn
        while not self.closed and (
            self.queued_bytes > STREAM_SEND_BUFFER
            or conn.queued_bytes > conn.options.max_send_buffer
            or conn.paused
        ):
            waiter = conn.loop.create_future()
            self.drain_waiter = waiter
            if conn.paused or self.queued_bytes <= STREAM_SEND_BUFFER:
                conn.drain_waiters.append(waiter)
            await waiter

    def wake(self) -> None:
        waiter = self.drain_waiter
        if waiter is not None:
            self.drain_waiter = None
            if not waiter.done():
                waiter.set_result(None)


class StreamConnection(asyncio.Protocol):
    """The state of an HTTP/2 server connection, its writing, its streams' ends and resets and
    the sending of answers under the client's windows (the base of
    :class:`~tritonx._transports.http2.connection.Connection`)."""

    def __init__(
        self,
        options: Options,
        loop: asyncio.AbstractEventLoop,
        budget: SendBudget | None = None,
    ) -> None:
        #: the server-wide count of answer bytes waiting (None: this connection's bound only)
        self.budget = budget
        self.options = options
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, StreamState] = {}
        self.last_stream = 0
        self.preface = True  # still waiting for the client's preface
        self.pending = b""
        self.out: list[bytes] = []
        # the client's settings
        self.peer_window = f.DEFAULT_WINDOW
        self.peer_frame = f.DEFAULT_FRAME_SIZE
        self.send_window = f.DEFAULT_WINDOW
        self.recv_used = 0
        #: request bytes the application is working on (:meth:`hold_requests`)
        self.held = 0
        #: streams with data waiting for window, in order
        self.waiting: dict[int, StreamState] = {}
        #: the windows grew in this read: the waiting streams are tried once at its end
        self.window_grew = False
        self.queued_bytes = 0
        self.send_progress = 0.0
        self.send_timer: asyncio.TimerHandle | None = None
        self.paused = False
        #: frames of a read wait for the next turn of the loop (reading paused meanwhile)
        self.deferred = False
        self.drain_waiters: list[asyncio.Future[None]] = []
        self.going_away = False
        self.closed = False
        #: stream ids this side reset (frames that crossed the reset are ignored)
        self.reset_ids: dict[int, None] = {}
        self.gaps: deque[tuple[int, int]] = deque(maxlen=_REMEMBERED_GAPS)
        # reset-rate budget
        self.reset_budget = options.max_reset_rate * 10
        self.reset_clock = 0.0
        # keepalive and ping policing
        self.ping_strikes = 0
        self.last_ping_received = 0.0
        self.pings_without_data = 0
        self.ping_timeout: asyncio.TimerHandle | None = None
        self.keepalive_timer: asyncio.TimerHandle | None = None
        self.age_timer: asyncio.TimerHandle | None = None

    def _wake_drainers(self) -> None:
        waiters, self.drain_waiters = self.drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # ------------------------------------------------------------------ writing

    def flush(self) -> None:
        """Write what the frames handled so far produced, in one write."""
        out = self.out
        if out and self.transport is not None and not self.closed:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    def write(self, data: bytes) -> None:
        """Write ``data`` now (after anything produced so far)."""
        if self.closed or self.transport is None:
            return
        if self.out:
            self.out.append(data)
            self.flush()
        else:
            self.transport.write(data)

    def _abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _connection_error(self, code: int, reason: str) -> None:
        log.debug("HTTP/2 connection error %d: %s", code, reason)
        self.out.append(f.goaway(self.last_stream, code, reason.encode("utf-8", "replace")[:256]))
        self.flush()
        self.going_away = True
        if self.transport is not None:
            self.transport.close()
        self.closed = True

    def go_away(self, code: int = f.NO_ERROR, debug: bytes = b"") -> None:
        """Stop taking streams (GOAWAY with the last one taken); the connection closes once
        its streams are over."""
        if self.going_away or self.closed:
            return
        self.going_away = True
        self.write(f.goaway(self.last_stream, code, debug))
        if not self.streams and self.transport is not None:
            self.transport.close()

    def close(self, code: int = f.NO_ERROR, debug: bytes = b"") -> None:
        """Close at once: GOAWAY (``code``, ``debug``: why, for the client's error), then the
        transport (its streams are reset)."""
        if self.closed:
            return
        self.go_away(code, debug)
        if self.transport is not None:
            self.transport.close()

    def hold_requests(self, size: int) -> None:
        """The application works on ``size`` more request bytes (negative: it is done with
        them). While they reach the connection's window, its credit is held back."""
        self.held += size
        if (
            size < 0
            and self.recv_used >= self.options.connection_window // 2
            and self.held < self.options.connection_window
            and not self.closed
        ):
            used, self.recv_used = self.recv_used, 0
            self.write(f.window_update(0, used))

    def _data_flowed(self) -> None:
        """Headers or data went either way: the client's early pings are forgiven and the
        keepalive pings sent without data are counted afresh (grpc core's
        ``ResetPingClock``; a client's BDP pings ride with its transfers)."""
        self.ping_strikes = 0
        self.last_ping_received = 0.0
        self.pings_without_data = 0

    # ------------------------------------------------------------------ streams out

    def _remember_reset(self, sid: int) -> None:
        ids = self.reset_ids
        ids[sid] = None
        if len(ids) > _REMEMBERED_RESETS:
            del ids[next(iter(ids))]

    def _forget(self, stream: StreamState) -> None:
        stream.closed = True
        self.streams.pop(stream.id, None)
        if stream.queued_bytes:
            self.queued_bytes -= stream.queued_bytes
            if self.budget is not None:
                self.budget.queued -= stream.queued_bytes
            self._wake_drainers()
        self.waiting.pop(stream.id, None)
        stream.queued.clear()
        stream.queued_bytes = 0
        stream.trailers = None
        stream.wake()
        if self.going_away and not self.streams and self.transport is not None:
            self.flush()
            self.transport.close()

    def _reset(self, stream: StreamState, code: int) -> None:
        """Reset ``stream`` (RST_STREAM ``code``): its handler is told."""
        self.out.append(f.rst_stream(stream.id, code))
        self._remember_reset(stream.id)
        self._forget(stream)
        if stream.handler is not None:
            stream.handler.reset()

    def reset(self, stream: StreamState, code: int) -> None:
        """Reset ``stream`` from the application (written at once)."""
        if stream.closed:
            return
        self._reset(stream, code)
        self.flush()

    def send(
        self,
        stream: StreamState,
        headers: bytes | None,
        data: tuple[bytes, ...] | None = None,
        trailers: bytes | None = None,
        bounded: bool = True,
    ) -> bool:
        """Send a header block (HEADERS), body bytes (DATA: the pieces of ``data``) and/or
        the trailers (HEADERS with END_STREAM: the stream is then over), in that order, in
        one write.

        What the windows do not allow waits on the stream; the trailers follow the last of
        it. Returns False, sending nothing, when the data would have to wait while more than
        ``max_send_buffer`` bytes already wait on this connection (the application answers
        otherwise; not when ``bounded`` is false: a writer that waits for
        :meth:`StreamState.drained` before each piece); a stream already reset sends nothing
        (True).
        """
        if stream.closed or self.closed:
            return True
        out = self.out
        size = 0
        fits = False
        if data is not None:
            size = sum(map(len, data))
            window = self.peer_window + stream.credit  # (StreamState.send_window)
            if window > f.MAX_WINDOW:
                # found lazily: a change of the client's initial window overflowed it
                self._connection_error(f.FLOW_CONTROL_ERROR, "stream window overflow")
                return True
            fits = (
                not stream.queued
                and size <= self.peer_frame
                and size <= self.send_window
                and size <= window
            )
            if bounded and not fits and self.queued_bytes:
                if self.queued_bytes + size > self.options.max_send_buffer:
                    return False
                budget = self.budget
                if budget is not None and budget.queued + size > budget.limit:
                    return False
        if headers is not None:
            self._header_frames(stream.id, headers, 0)
            stream.headers_sent = True
        if data is not None or headers is not None:
            self._data_flowed()
        if data is not None:
            if fits:
                self.send_window -= size
                stream.credit -= size
                out.append(f.frame_header(f.DATA, 0, stream.id, size))
                out.extend(data)
            else:
                for piece in data:
                    stream.queued.append(memoryview(piece))
                stream.queued_bytes += size
                self.queued_bytes += size
                if self.budget is not None:
                    self.budget.queued += size
                if self.send_timer is None:
                    self.send_progress = self.loop.time()
                    self.send_timer = self.loop.call_later(
                        self.options.send_timeout, self._send_stalled
                    )
                self._send_queued(stream)
        if trailers is not None:
            if stream.queued:
                stream.trailers = trailers
            else:
                self._trailers(stream, trailers)
        self.flush()
        return True

    def _header_frames(self, sid: int, block: bytes, flags: int) -> None:
        """A header block as HEADERS (``flags`` added), then CONTINUATION frames past the
        client's frame size."""
        out = self.out
        size = self.peer_frame
        if len(block) <= size:
            out.append(f.frame_header(f.HEADERS, flags | f.END_HEADERS, sid, len(block)))
            out.append(block)
            return
        pieces = [block[at : at + size] for at in range(0, len(block), size)]
        for index, piece in enumerate(pieces):
            kind = f.HEADERS if index == 0 else f.CONTINUATION
            last = f.END_HEADERS if index == len(pieces) - 1 else 0
            out.append(f.frame_header(kind, (flags if index == 0 else 0) | last, sid, len(piece)))
            out.append(piece)

    def _trailers(self, stream: StreamState, trailers: bytes) -> None:
        self._header_frames(stream.id, trailers, f.END_STREAM)
        if not stream.ended_remote:
            # the client may still be sending: it need not (RFC 9113 §8.1)
            self.out.append(f.rst_stream(stream.id, f.NO_ERROR))
            self._remember_reset(stream.id)
        self._forget(stream)

    def _send_waiting(self) -> None:
        """The windows grew: send what they allow of the waiting streams' data, in order."""
        for stream in list(self.waiting.values()):
            if self.send_window <= 0:
                break
            if stream.send_window > 0:
                self._send_queued(stream)

    def _send_queued(self, stream: StreamState) -> None:
        """Send what the windows allow of ``stream``'s queued data (then its trailers)."""
        out = self.out
        queued = stream.queued
        sent = 0
        while queued:
            allowed = min(self.send_window, stream.send_window, self.peer_frame)
            if allowed <= 0:
                self.waiting[stream.id] = stream
                break
            pieces: list[memoryview] = []
            size = 0
            while queued and size < allowed:
                head = queued[0]
                take = allowed - size
                if len(head) <= take:
                    queued.popleft()
                    pieces.append(head)
                    size += len(head)
                else:
                    pieces.append(head[:take])
                    queued[0] = head[take:]
                    size += take
            self.send_window -= size
            stream.credit -= size
            sent += size
            out.append(f.frame_header(f.DATA, 0, stream.id, size))
            out.extend(pieces)  # type: ignore[arg-type]
        if sent:
            stream.queued_bytes -= sent
            self.queued_bytes -= sent
            if self.budget is not None:
                self.budget.queued -= sent
            self.send_progress = self.loop.time()
            self._data_flowed()
            self._wake_drainers()
        if not queued:
            self.waiting.pop(stream.id, None)
            if stream.trailers is not None:
                trailers, stream.trailers = stream.trailers, None
                self._trailers(stream, trailers)
        if stream.queued_bytes <= STREAM_SEND_BUFFER:
            stream.wake()

    def _send_stalled(self) -> None:
        """``send_timeout``: data waiting for window that made no progress that long has its
        streams reset (CANCEL)."""
        self.send_timer = None
        if self.closed or not self.queued_bytes:
            return
        now = self.loop.time()
        timeout = self.options.send_timeout
        if now - self.send_progress < timeout:
            self.send_timer = self.loop.call_at(self.send_progress + timeout, self._send_stalled)
            return
        log.debug("answers waited %.0f s for the client's window: streams reset", timeout)
        for stream in [s for s in self.streams.values() if s.queued_bytes]:
            self._reset(stream, f.CANCEL)
        self.flush()

    def peer(self) -> str:
        """The client's address as grpc writes it (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``,
        ``unix:...``); unique per connection while it is open."""
        name = self.transport.get_extra_info("peername") if self.transport is not None else None
        if isinstance(name, tuple) and len(name) >= 2:
            host, port = name[0], name[1]
            return f"ipv6:[{host}]:{port}" if ":" in str(host) else f"ipv4:{host}:{port}"
        return f"unix:{name}" if name else f"connection:{id(self)}"

    def close_now(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
