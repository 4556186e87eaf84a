"""One HTTP/2 server connection framed by hand: frames, flow control, settings, streams and
the bounds a client cannot grow past.

The connection is an ``asyncio.Protocol``: frames are cut by their 9-byte headers, request
header blocks decoded by :class:`~tritonx._transports.http2.hpack.HeaderDecoder`, checked (RFC 9113
§8.2-8.3: a malformed request is reset with PROTOCOL_ERROR) and handed to the
:class:`Application`, which gives the stream a :class:`StreamHandler` for its body bytes, its
end and its reset, and answers through :meth:`Connection.send`. What the frames handled in one
``data_received`` produce is written at once, in one write.

Bounds (:class:`Options`; each one a flag of the server's, see :mod:`tritonx._transports.grpc.engine`):

- **streams**: at most ``max_concurrent_streams`` open (announced as
  SETTINGS_MAX_CONCURRENT_STREAMS); a stream past it is refused with REFUSED_STREAM;
- **resets**: streams the client resets before their answer, and streams refused, are drawn
  from a budget that refills at ``max_reset_rate`` per second (ten seconds' worth at most);
  an empty budget ends the connection with GOAWAY ENHANCE_YOUR_CALM (CVE-2023-44487);
- **header blocks**: a block larger than ``max_header_block`` or decoding to more than
  ``max_header_list_size`` ends the connection (ENHANCE_YOUR_CALM); a block left unfinished
  for ``header_timeout`` seconds too;
- **receive windows**: a stream's window is credited as its handler consumes what it received
  (:meth:`Stream.hold_credit`): a handler that does not keep up stops its client; the
  connection's window is credited only while the whole requests its streams are working on
  hold less than a window's worth (:meth:`Connection.hold_requests`), so a client that sends
  faster than its calls end waits;
- **send buffer**: answer bytes waiting for the client's windows are at most
  ``max_send_buffer`` per connection and :class:`SendBudget`'s limit across connections (an
  answer past either is refused: :meth:`Connection.send` returns False; a connection's first
  waiting answer always waits), and data that makes no progress for ``send_timeout`` seconds has its
  streams reset (CANCEL);
- **time per read**: frames are handled for :data:`READ_BUDGET` seconds at most per read; the
  rest waits, reading paused, until the loop has run everything else once;
- **no work per frame proportional to client state**: a change of the client's initial
  window is applied lazily (a stream's window is the client's initial window plus the
  stream's own credit), and streams waiting for window are tried once per read, not per frame.

Protocol errors end the connection with GOAWAY and the RFC's code; stream errors reset the
stream. Keepalive pings, ping-strike policing and a maximum connection age follow grpc core's
rules (:class:`Options`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol, cast

from tritonx._transports.http2 import frames as f
from tritonx._transports.http2.frames import ConnectionError_
from tritonx._transports.http2.hpack import HeaderDecoder, Headers

log = logging.getLogger("tritonx.http2")

_FRAME = struct.Struct(">HBBBL")  # length (high 16 bits, low 8 bits), type, flags, stream
#: seconds of frame handling per read; what is left waits for the loop's next turn (reading
#: paused), so one connection cannot hold the loop however much it sends at once
READ_BUDGET = 0.005
#: a stream's data waiting beyond this makes its writer wait (:meth:`Stream.drained`)
STREAM_SEND_BUFFER = 1 << 20
#: stream ids this side reset, remembered so that frames the client sent before it saw the
#: reset are ignored (older ones are answered STREAM_CLOSED)
_REMEMBERED_RESETS = 1024
#: ranges of stream ids the client skipped, remembered (a HEADERS frame on one of them is a
#: connection error: RFC 9113 §5.1.1)
_REMEMBERED_GAPS = 16
#: request pseudo-headers (RFC 9113 §8.3.1)
_REQUEST_PSEUDO = frozenset((b":method", b":scheme", b":authority", b":path"))
_REQUIRED_PSEUDO = frozenset((b":method", b":scheme", b":path"))
#: connection-specific fields (RFC 9113 §8.2.2)
_CONNECTION_FIELDS = frozenset(
    (b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade")
)
#: a field name holds lower-case token characters only; a value no NUL, CR or LF and no
#: leading or trailing space or tab (RFC 9113 §8.2.1)
_BAD_NAME = re.compile(rb"[^a-z0-9!#$%&'*+\-.^_`|~]")
_BAD_VALUE = re.compile(rb"[\x00\r\n]|^[ \t]|[ \t]$")


@dataclass(frozen=True, slots=True)
class Options:
    """Limits and timers of a connection (seconds, bytes, counts)."""

    #: open streams at most (SETTINGS_MAX_CONCURRENT_STREAMS)
    max_concurrent_streams: int = 100
    #: SETTINGS_MAX_HEADER_LIST_SIZE announced (an application may refuse a call past it)
    announced_header_list_size: int = 16 << 10
    #: a header block decoding to more ends the connection (a compression bomb)
    max_header_list_size: int = 64 << 10
    #: a header block (HEADERS + CONTINUATION) larger than this ends the connection
    max_header_block: int = 256 << 10
    #: a header block unfinished this long ends the connection
    header_timeout: float = 10.0
    #: SETTINGS_INITIAL_WINDOW_SIZE announced (each stream's receive window)
    stream_window: int = 1 << 20
    #: the connection's receive window
    connection_window: int = 16 << 20
    #: answer bytes that may wait for the client's windows on one connection
    max_send_buffer: int = 32 << 20
    #: data waiting for window with no progress this long: its streams are reset
    send_timeout: float = 60.0
    #: client resets and refused streams per second, on average (0: no limit)
    max_reset_rate: float = 100.0
    #: keepalive ping interval (0: none) and how long its answer may take
    keepalive_time: float = 0.0
    keepalive_timeout: float = 20.0
    #: keepalive pings (and the client's) allowed with no call open
    permit_without_calls: bool = False
    #: keepalive pings sent at most between data (0: no limit)
    max_pings_without_data: int = 2
    #: the client's pings closer than this with no data between are strikes
    min_ping_interval: float = 300.0
    #: strikes allowed (0: no policing)
    max_ping_strikes: int = 2
    #: GOAWAY after this long (0: never), then this grace for the calls left
    max_connection_age: float = 0.0
    max_connection_age_grace: float = 1e9


class SendBudget:
    """Answer bytes waiting for clients' windows, counted across the connections that share
    it; past ``limit`` an answer that would wait is refused (as past a connection's own
    ``max_send_buffer``)."""

    __slots__ = ("limit", "queued")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.queued = 0


class StreamHandler(Protocol):
    """What an application does with one stream's request (set as :attr:`Stream.handler`)."""

    def data_received(self, data: memoryview) -> None:
        """Body bytes of the request (padding removed); ``data`` is valid during the call
        only."""

    def end_received(self) -> None:
        """The client ended its side (END_STREAM)."""

    def reset(self) -> None:
        """The stream is gone before its answer ended (reset by the client or by a bound,
        or the connection closed): nothing more can be sent."""


class Application(Protocol):
    """The application of a server's connections (e.g. the gRPC call layer)."""

    def connection_made(self, conn: Connection) -> None:
        """A connection opened."""

    def connection_lost(self, conn: Connection) -> None:
        """A connection closed (its streams were reset)."""

    def stream_opened(self, stream: Stream, headers: Headers) -> None:
        """A request's headers arrived (checked well-formed): set ``stream.handler``, or
        answer at once (:meth:`Connection.send` with trailers). A repeated header block
        decodes to the same ``headers`` object: derived facts may be cached by identity."""


class Stream:
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

    def __init__(self, conn: Connection, stream_id: int) -> None:
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


class Connection(asyncio.Protocol):
    """An HTTP/2 server connection carrying ``app``'s streams under ``options``' bounds."""

    def __init__(
        self,
        app: Application,
        options: Options,
        loop: asyncio.AbstractEventLoop,
        budget: SendBudget | None = None,
    ) -> None:
        self.app = app
        #: the server-wide count of answer bytes waiting (None: this connection's bound only)
        self.budget = budget
        self.options = options
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, Stream] = {}
        self.last_stream = 0
        self.preface = True  # still waiting for the client's preface
        self.pending = b""
        self.decoder = HeaderDecoder(max_list_size=options.max_header_list_size)
        self.out: list[bytes] = []
        # the header block being received (HEADERS then CONTINUATION frames)
        self.block_stream = 0
        self.block_flags = 0
        self.block: bytearray | None = None
        self.block_timer: asyncio.TimerHandle | None = None
        #: the header list checked last (a repeated block decodes to the same list)
        self.checked: Headers | None = None
        #: what the application derived from a header list, cached by its identity
        self.memo: tuple[Headers, object] | None = None
        # the client's settings
        self.peer_window = f.DEFAULT_WINDOW
        self.peer_frame = f.DEFAULT_FRAME_SIZE
        self.send_window = f.DEFAULT_WINDOW
        self.recv_used = 0
        #: request bytes the application is working on (:meth:`hold_requests`)
        self.held = 0
        #: streams with data waiting for window, in order
        self.waiting: dict[int, Stream] = {}
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

    # ------------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is no subclass)
        options = self.options
        settings = {
            f.SETTINGS_MAX_CONCURRENT_STREAMS: options.max_concurrent_streams,
            f.SETTINGS_INITIAL_WINDOW_SIZE: options.stream_window,
            f.SETTINGS_MAX_HEADER_LIST_SIZE: options.announced_header_list_size,
        }
        self.transport.write(
            f.settings_frame(settings)
            + f.window_update(0, options.connection_window - f.DEFAULT_WINDOW)
        )
        self.reset_clock = self.loop.time()
        self.app.connection_made(self)
        if options.keepalive_time > 0:
            self.keepalive_timer = self.loop.call_later(
                options.keepalive_time, self._send_keepalive
            )
        if options.max_connection_age > 0:
            self.age_timer = self.loop.call_later(options.max_connection_age, self._aged)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for timer in (
            self.keepalive_timer,
            self.age_timer,
            self.ping_timeout,
            self.block_timer,
            self.send_timer,
        ):
            if timer is not None:
                timer.cancel()
        streams = list(self.streams.values())
        self.streams.clear()
        self.waiting.clear()
        if self.budget is not None:
            self.budget.queued -= self.queued_bytes
        self.queued_bytes = 0
        for stream in streams:
            stream.closed = True
            stream.queued.clear()
            stream.wake()
            if stream.handler is not None:
                stream.handler.reset()
        for waiter in self.drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.drain_waiters.clear()
        self.app.connection_lost(self)

    def pause_writing(self) -> None:
        """The client does not read: stop reading from it too (what it sends would make
        more to write: answers, ACKs), as grpc core stops on pending induced frames."""
        self.paused = True
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None and not self.closed and not self.deferred:
            self.transport.resume_reading()
        self._wake_drainers()

    def _wake_drainers(self) -> None:
        waiters, self.drain_waiters = self.drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self.deferred:  # (a read that was under way when reading paused)
            self.pending += data
            return
        if self.pending:
            data = self.pending + data
            self.pending = b""
        if self.preface:
            if len(data) < 24:
                if not f.PREFACE.startswith(data):
                    self._abort()
                else:
                    self.pending = data
                return
            if not data.startswith(f.PREFACE):
                self._abort()
                return
            self.preface = False
            data = data[24:]
        self._process(data)

    def _process(self, data: bytes) -> None:
        """Handle the frames of ``data`` for at most :data:`READ_BUDGET` seconds; the rest
        waits (reading paused) until the loop has run everything else once."""
        try:
            deferred = self._frames(data)
            if self.window_grew:
                self.window_grew = False
                self._send_waiting()
        except ConnectionError_ as exc:
            self._connection_error(exc.code, exc.reason)
            return
        self.flush()
        if deferred and not self.closed and self.transport is not None:
            if not self.deferred:
                self.deferred = True
                self.transport.pause_reading()
            self.loop.call_soon(self._continue)

    def _continue(self) -> None:
        """Go on with the frames a read left for later (:meth:`_process`)."""
        if self.closed:
            return
        data, self.pending = self.pending, b""
        self.deferred = False
        self._process(data)
        if not self.deferred and not self.paused and not self.closed and self.transport:
            self.transport.resume_reading()

    def eof_received(self) -> bool | None:
        return None  # close the transport

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

    def close(self) -> None:
        """Close at once: GOAWAY, then the transport (its streams are reset)."""
        if self.closed:
            return
        self.go_away()
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------------ frames in

    def _frames(self, data: bytes) -> bool:
        """Handle the whole frames of ``data`` (the rest is kept for the next read); True
        when the read's time budget ran out first (the frames left are kept too)."""
        view = memoryview(data)
        end = len(data)
        pos = 0
        unpack = _FRAME.unpack_from
        max_frame = f.DEFAULT_FRAME_SIZE
        clock = time.perf_counter
        deadline = clock() + READ_BUDGET
        count = 0
        while pos + 9 <= end:
            high, low, kind, flags, sid = unpack(data, pos)
            length = high << 8 | low
            if length > max_frame:
                raise ConnectionError_(f.FRAME_SIZE_ERROR, f"frame of {length} bytes")
            stop = pos + 9 + length
            if stop > end:
                break
            sid &= 0x7FFFFFFF
            payload = view[pos + 9 : stop]
            pos = stop
            if self.block is not None and kind != f.CONTINUATION:
                raise ConnectionError_(f.PROTOCOL_ERROR, "expected a CONTINUATION frame")
            if kind == f.DATA:
                self._data(sid, flags, payload)
            elif kind == f.HEADERS:
                self._headers(sid, flags, payload)
            elif kind == f.CONTINUATION:
                self._continuation(sid, flags, payload)
            elif kind == f.WINDOW_UPDATE:
                self._window_update(sid, payload)
            elif kind == f.SETTINGS:
                self._settings(sid, flags, payload)
            elif kind == f.PING:
                self._ping(sid, flags, payload)
            elif kind == f.RST_STREAM:
                self._rst_stream(sid, payload)
            elif kind == f.GOAWAY:
                if sid != 0:
                    raise ConnectionError_(f.PROTOCOL_ERROR, "GOAWAY on a stream")
                if len(payload) < 8:
                    raise ConnectionError_(f.FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes")
                if not self.streams:
                    self.going_away = True
            elif kind == f.PRIORITY:
                self._priority(sid, payload)
            elif kind == f.PUSH_PROMISE:
                raise ConnectionError_(f.PROTOCOL_ERROR, "PUSH_PROMISE from a client")
            # other frame types are ignored (RFC 9113 §4.1)
            if self.closed:
                return False
            count += 1
            if (kind == f.HEADERS or kind == f.CONTINUATION or not count & 63) and (
                pos < end and clock() > deadline
            ):
                self.pending = bytes(view[pos:])
                return True
        if pos < end:
            self.pending = bytes(view[pos:])
        return False

    @staticmethod
    def _unpad(flags: int, payload: memoryview) -> memoryview:
        if flags & f.PADDED:
            if not payload:
                raise ConnectionError_(f.PROTOCOL_ERROR, "padded frame without a pad length")
            pad = payload[0]
            if pad >= len(payload):
                raise ConnectionError_(f.PROTOCOL_ERROR, "padding longer than the frame")
            return payload[1 : len(payload) - pad]
        return payload

    def _priority(self, sid: int, payload: memoryview) -> None:
        if sid == 0:
            raise ConnectionError_(f.PROTOCOL_ERROR, "PRIORITY on stream 0")
        code = f.NO_ERROR
        if len(payload) != 5:
            code = f.FRAME_SIZE_ERROR
        elif int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == sid:
            code = f.PROTOCOL_ERROR  # depends on itself (RFC 7540 §5.3.1)
        if code:
            stream = self.streams.get(sid)
            if stream is not None:
                self._client_reset(stream, code)
            else:
                self._stream_error(sid, code)

    def _headers(self, sid: int, flags: int, payload: memoryview) -> None:
        if sid == 0 or not sid & 1:
            raise ConnectionError_(f.PROTOCOL_ERROR, f"HEADERS on stream {sid}")
        payload = self._unpad(flags, payload)
        if flags & f.PRIORITY_FLAG:
            if len(payload) < 5:
                raise ConnectionError_(f.PROTOCOL_ERROR, "HEADERS priority past the frame")
            if int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == sid:
                flags |= 0x100  # a self-dependency: the stream is reset once decoded
            payload = payload[5:]
        if flags & f.END_HEADERS:
            self._header_block(sid, flags, bytes(payload))
        else:
            if len(payload) > self.options.max_header_block:
                raise ConnectionError_(f.ENHANCE_YOUR_CALM, "header block too large")
            self.block_stream = sid
            self.block_flags = flags
            self.block = bytearray(payload)
            self.block_timer = self.loop.call_later(
                self.options.header_timeout, self._header_timeout
            )

    def _header_timeout(self) -> None:
        self.block_timer = None
        if self.block is not None and not self.closed:
            self._connection_error(f.ENHANCE_YOUR_CALM, "header block not finished in time")

    def _continuation(self, sid: int, flags: int, payload: memoryview) -> None:
        block = self.block
        if block is None or sid != self.block_stream:
            raise ConnectionError_(f.PROTOCOL_ERROR, "CONTINUATION without HEADERS")
        block += payload
        if len(block) > self.options.max_header_block:
            raise ConnectionError_(f.ENHANCE_YOUR_CALM, "header block too large")
        if flags & f.END_HEADERS:
            self.block = None
            if self.block_timer is not None:
                self.block_timer.cancel()
                self.block_timer = None
            self._header_block(sid, self.block_flags, bytes(block))

    def _header_block(self, sid: int, flags: int, block: bytes) -> None:
        headers = self.decoder.decode(block)  # always: the table must follow the client's
        end_stream = bool(flags & f.END_STREAM)
        stream = self.streams.get(sid)
        if stream is not None:  # trailers from the client: they end its side
            if stream.ended_remote:
                self._client_reset(stream, f.STREAM_CLOSED)
            elif not end_stream or any(name[:1] == b":" for name, _ in headers):
                self._client_reset(stream, f.PROTOCOL_ERROR)  # malformed trailers (§8.1)
            else:
                self._remote_end(stream)
            return
        if sid <= self.last_stream:
            self._closed_stream_frame(sid, f.HEADERS)
            return
        if sid > self.last_stream + 2:
            self.gaps.append((self.last_stream + 2, sid - 2))
        self.last_stream = sid
        if self.going_away:
            self.out.append(f.rst_stream(sid, f.REFUSED_STREAM))
            return
        if flags & 0x100:
            self._stream_error(sid, f.PROTOCOL_ERROR)
            return
        if len(self.streams) >= self.options.max_concurrent_streams:
            self._stream_error(sid, f.REFUSED_STREAM)
            return
        length = -1
        if headers is not self.checked:
            length = _check_request(headers)
            if length == -2:
                self._stream_error(sid, f.PROTOCOL_ERROR)
                return
            if length == -1:
                self.checked = headers  # (a list with content-length is checked each time)
        stream = Stream(self, sid)
        stream.content_length = length
        self.streams[sid] = stream
        self.app.stream_opened(stream, headers)
        if end_stream and not stream.closed:
            self._remote_end(stream)

    def _closed_stream_frame(self, sid: int, kind: int) -> None:
        """A HEADERS or DATA frame on a stream id at or below the last one opened and not
        open: ignored if this side reset the stream (the frame crossed the reset); HEADERS on
        an id the client skipped is a connection error PROTOCOL_ERROR (RFC 9113 §5.1.1), on a
        stream closed otherwise STREAM_CLOSED (§5.1); DATA gets RST_STREAM STREAM_CLOSED."""
        if sid in self.reset_ids:
            return
        if kind == f.HEADERS:
            for low, high in self.gaps:
                if low <= sid <= high:
                    raise ConnectionError_(f.PROTOCOL_ERROR, f"HEADERS on closed stream {sid}")
            raise ConnectionError_(f.STREAM_CLOSED, f"HEADERS on closed stream {sid}")
        self._stream_error(sid, f.STREAM_CLOSED)

    def _data(self, sid: int, flags: int, payload: memoryview) -> None:
        length = len(payload)
        if not sid & 1:  # stream 0, or one only this side could open: idle (§5.1)
            raise ConnectionError_(f.PROTOCOL_ERROR, f"DATA on stream {sid}")
        self.recv_used += length  # received and not credited back: past the window, an error
        if self.recv_used > self.options.connection_window:
            raise ConnectionError_(f.FLOW_CONTROL_ERROR, "DATA past the connection's window")
        if (
            self.recv_used >= self.options.connection_window // 2
            and self.held < self.options.connection_window
        ):
            self.out.append(f.window_update(0, self.recv_used))
            self.recv_used = 0
        stream = self.streams.get(sid)
        if stream is None:
            if sid > self.last_stream:
                raise ConnectionError_(f.PROTOCOL_ERROR, f"DATA on idle stream {sid}")
            self._closed_stream_frame(sid, f.DATA)
            return
        if length:
            self._data_flowed()
        if stream.ended_remote:
            self._client_reset(stream, f.STREAM_CLOSED)
            return
        body = self._unpad(flags, payload)
        end_stream = bool(flags & f.END_STREAM)
        if stream.content_length >= 0:
            stream.received += len(body)
            if stream.received > stream.content_length or (
                end_stream and stream.received != stream.content_length
            ):
                self._client_reset(stream, f.PROTOCOL_ERROR)  # content-length mismatch (§8.1.1)
                return
        if length:
            stream.recv_used += length  # (padding credited with the rest)
            if stream.recv_used > self.options.stream_window:
                self._client_reset(stream, f.FLOW_CONTROL_ERROR)  # past its window (§6.9.1)
                return
            handler = stream.handler
            if body and handler is not None:
                handler.data_received(body)
                if stream.closed:
                    return
            if (
                not stream.credit_held
                and stream.recv_used >= self.options.stream_window // 2
                and not end_stream
            ):
                self.out.append(f.window_update(sid, stream.recv_used))
                stream.recv_used = 0
        if end_stream:
            self._remote_end(stream)

    def _remote_end(self, stream: Stream) -> None:
        stream.ended_remote = True
        if stream.content_length > 0 and stream.received != stream.content_length:
            self._client_reset(stream, f.PROTOCOL_ERROR)
            return
        if stream.handler is not None:
            stream.handler.end_received()

    def _window_update(self, sid: int, payload: memoryview) -> None:
        if len(payload) != 4:
            raise ConnectionError_(f.FRAME_SIZE_ERROR, "WINDOW_UPDATE of a bad length")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if sid == 0:
            if increment == 0:
                raise ConnectionError_(f.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self.send_window += increment
            if self.send_window > f.MAX_WINDOW:
                raise ConnectionError_(f.FLOW_CONTROL_ERROR, "connection window overflow")
            if self.waiting:
                self.window_grew = True
            return
        stream = self.streams.get(sid)
        if stream is None:
            if sid > self.last_stream or not sid & 1:
                raise ConnectionError_(f.PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {sid}")
            return
        if increment == 0:
            self._client_reset(stream, f.PROTOCOL_ERROR)
            return
        stream.credit += increment
        if stream.send_window > f.MAX_WINDOW:
            self._client_reset(stream, f.FLOW_CONTROL_ERROR)
            return
        if stream.queued or stream.trailers is not None:
            self._send_queued(stream)

    def _settings(self, sid: int, flags: int, payload: memoryview) -> None:
        if sid != 0:
            raise ConnectionError_(f.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & f.ACK:
            if payload:
                raise ConnectionError_(f.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise ConnectionError_(f.FRAME_SIZE_ERROR, "SETTINGS of a bad length")
        for at in range(0, len(payload), 6):
            key = int.from_bytes(payload[at : at + 2], "big")
            value = int.from_bytes(payload[at + 2 : at + 6], "big")
            if key == f.SETTINGS_INITIAL_WINDOW_SIZE:
                if value > f.MAX_WINDOW:
                    raise ConnectionError_(f.FLOW_CONTROL_ERROR, "initial window too large")
                # every stream's window moves with it (Stream.send_window): O(1) here; a
                # window it pushes past the maximum is found when that stream is next used
                if value > self.peer_window and self.waiting:
                    self.window_grew = True
                self.peer_window = value
            elif key == f.SETTINGS_MAX_FRAME_SIZE:
                if not f.DEFAULT_FRAME_SIZE <= value <= f.MAX_FRAME_SIZE:
                    raise ConnectionError_(f.PROTOCOL_ERROR, "invalid SETTINGS_MAX_FRAME_SIZE")
                self.peer_frame = value
            elif key == f.SETTINGS_ENABLE_PUSH and value > 1:
                raise ConnectionError_(f.PROTOCOL_ERROR, "invalid SETTINGS_ENABLE_PUSH")
        self.out.append(f.frame(f.SETTINGS, f.ACK, 0))

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

    def _ping(self, sid: int, flags: int, payload: memoryview) -> None:
        if sid != 0:
            raise ConnectionError_(f.PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise ConnectionError_(f.FRAME_SIZE_ERROR, "PING of a bad length")
        if flags & f.ACK:
            if self.ping_timeout is not None:
                self.ping_timeout.cancel()
                self.ping_timeout = None
            return
        options = self.options
        now = time.monotonic()
        if options.max_ping_strikes > 0:
            # grpc core: a ping sooner than the interval after the last, with no data sent
            # since, is a strike (with no call and without permission: two hours)
            interval = options.min_ping_interval
            if not self.streams and not options.permit_without_calls:
                interval = max(interval, 7200.0)
            if self.last_ping_received and now - self.last_ping_received < interval:
                self.ping_strikes += 1
                if self.ping_strikes > options.max_ping_strikes:
                    raise ConnectionError_(f.ENHANCE_YOUR_CALM, "too_many_pings")
        self.last_ping_received = now
        self.out.append(f.frame(f.PING, f.ACK, 0, bytes(payload)))

    def _rst_stream(self, sid: int, payload: memoryview) -> None:
        if len(payload) != 4:
            raise ConnectionError_(f.FRAME_SIZE_ERROR, "RST_STREAM of a bad length")
        if sid == 0:
            raise ConnectionError_(f.PROTOCOL_ERROR, "RST_STREAM on stream 0")
        stream = self.streams.get(sid)
        if stream is None:
            if sid > self.last_stream or not sid & 1:
                raise ConnectionError_(f.PROTOCOL_ERROR, f"RST_STREAM on idle stream {sid}")
            return
        self._forget(stream)
        if stream.handler is not None:
            stream.handler.reset()
        self._spend_reset()

    def _spend_reset(self) -> None:
        """A stream ended by the client before its answer (reset or refused): drawn from the
        reset budget; an empty budget ends the connection (rapid reset, CVE-2023-44487)."""
        rate = self.options.max_reset_rate
        if rate <= 0:
            return
        now = self.loop.time()
        budget = min(rate * 10, self.reset_budget + (now - self.reset_clock) * rate) - 1
        self.reset_clock = now
        self.reset_budget = budget
        if budget < 0:
            raise ConnectionError_(f.ENHANCE_YOUR_CALM, "too many streams reset or refused")

    # ------------------------------------------------------------------ streams out

    def _remember_reset(self, sid: int) -> None:
        ids = self.reset_ids
        ids[sid] = None
        if len(ids) > _REMEMBERED_RESETS:
            del ids[next(iter(ids))]

    def _forget(self, stream: Stream) -> None:
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

    def _stream_error(self, sid: int, code: int) -> None:
        """A stream error the client caused on a stream that is not open (RST_STREAM
        ``code``): drawn from the reset budget."""
        self.out.append(f.rst_stream(sid, code))
        self._remember_reset(sid)
        self._spend_reset()

    def _client_reset(self, stream: Stream, code: int) -> None:
        """Reset an open stream for a frame of the client's: drawn from the reset budget
        (a client cannot make the server reset streams for free: MadeYouReset)."""
        self._reset(stream, code)
        self._spend_reset()

    def _reset(self, stream: Stream, code: int) -> None:
        """Reset ``stream`` (RST_STREAM ``code``): its handler is told."""
        self.out.append(f.rst_stream(stream.id, code))
        self._remember_reset(stream.id)
        self._forget(stream)
        if stream.handler is not None:
            stream.handler.reset()

    def reset(self, stream: Stream, code: int) -> None:
        """Reset ``stream`` from the application (written at once)."""
        if stream.closed:
            return
        self._reset(stream, code)
        self.flush()

    def send(
        self,
        stream: Stream,
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
        :meth:`Stream.drained` before each piece); a stream already reset sends nothing
        (True).
        """
        if stream.closed or self.closed:
            return True
        out = self.out
        size = 0
        fits = False
        if data is not None:
            size = sum(map(len, data))
            window = self.peer_window + stream.credit  # (Stream.send_window)
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

    def _trailers(self, stream: Stream, trailers: bytes) -> None:
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

    def _send_queued(self, stream: Stream) -> None:
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

    # ------------------------------------------------------------------ timers

    def _send_keepalive(self) -> None:
        """Keepalive: a PING (while streams are open, or always with
        ``permit_without_calls``; at most ``max_pings_without_data`` between data, 0: no
        limit) that must be answered within ``keepalive_timeout``."""
        options = self.options
        self.keepalive_timer = None
        if self.closed:
            return
        if self.streams or options.permit_without_calls:
            limit = options.max_pings_without_data
            if limit <= 0 or self.pings_without_data < limit:
                self.pings_without_data += 1
                self.write(f.frame(f.PING, 0, 0, os.urandom(8)))
                if self.ping_timeout is None:
                    self.ping_timeout = self.loop.call_later(
                        options.keepalive_timeout, self._ping_unanswered
                    )
        self.keepalive_timer = self.loop.call_later(options.keepalive_time, self._send_keepalive)

    def _ping_unanswered(self) -> None:
        self.ping_timeout = None
        log.debug("keepalive ping not answered in time: closing the connection")
        self._abort()

    def _aged(self) -> None:
        """``max_connection_age``: GOAWAY; the streams left have the grace period."""
        self.age_timer = None
        self.go_away(f.NO_ERROR, b"max_age")
        if not self.closed:
            self.age_timer = self.loop.call_later(
                self.options.max_connection_age_grace, self.close_now
            )

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


def _check_request(headers: Headers) -> int:
    """Check a request's header list (RFC 9113 §8.2-8.3): -2 when malformed, else its
    ``content-length`` (-1: none)."""
    seen: set[bytes] = set()
    regular = False
    length = -1
    for name, value in headers:
        if name[:1] == b":":
            if regular or name not in _REQUEST_PSEUDO or name in seen:
                return -2
            seen.add(name)
            if name == b":path" and not value:
                return -2
            continue
        regular = True
        if _BAD_NAME.search(name) is not None or not name:
            return -2
        if name in _CONNECTION_FIELDS or (name == b"te" and value != b"trailers"):
            return -2
        if _BAD_VALUE.search(value) is not None:
            return -2
        if name == b"content-length":
            if not value.isdigit() or (length >= 0 and int(value) != length):
                return -2
            length = int(value)
    if not _REQUIRED_PSEUDO <= seen:  # (no CONNECT here)
        return -2
    return length
