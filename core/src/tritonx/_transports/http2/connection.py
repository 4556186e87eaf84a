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

:class:`Connection` is built in layers, one concern a module: its fields, writing and the
sending under the client's windows (:mod:`~tritonx._transports.http2.streams`), the reset budget
and pings (:mod:`~tritonx._transports.http2.policing`), the client's frames but header blocks
(:mod:`~tritonx._transports.http2.inbound`); this module adds the asyncio callbacks, the frame
dispatcher and the header blocks, and exports what an application uses.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Protocol, cast

from tritonx._transports.http2 import frames as f
from tritonx._transports.http2.fields import check_request
from tritonx._transports.http2.frames import ConnectionError_
from tritonx._transports.http2.hpack import HeaderDecoder, Headers
from tritonx._transports.http2.inbound import InboundFrames
from tritonx._transports.http2.options import Options, SendBudget
from tritonx._transports.http2.streams import StreamHandler, StreamState

__all__ = ["Application", "Connection", "Options", "SendBudget", "Stream", "StreamHandler"]

_FRAME = struct.Struct(">HBBBL")  # length (high 16 bits, low 8 bits), type, flags, stream
#: seconds of frame handling per read; what is left waits for the loop's next turn (reading
#: paused), so one connection cannot hold the loop however much it sends at once
READ_BUDGET = 0.005


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


class Stream(StreamState):
    """One HTTP/2 stream (:class:`~tritonx._transports.http2.streams.StreamState`) of a
    :class:`Connection`."""

    __slots__ = ()

    conn: Connection


class Connection(InboundFrames):
    """An HTTP/2 server connection carrying ``app``'s streams under ``options``' bounds."""

    def __init__(
        self,
        app: Application,
        options: Options,
        loop: asyncio.AbstractEventLoop,
        budget: SendBudget | None = None,
    ) -> None:
        self.app = app
        super().__init__(options, loop, budget)
        self.decoder = HeaderDecoder(max_list_size=options.max_header_list_size)
        # the header block being received (HEADERS then CONTINUATION frames)
        self.block_stream = 0
        self.block_flags = 0
        self.block: bytearray | None = None
        self.block_timer: asyncio.TimerHandle | None = None
        #: the header list checked last (a repeated block decodes to the same list)
        self.checked: Headers | None = None
        #: what the application derived from a header list, cached by its identity
        self.memo: tuple[Headers, object] | None = None

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
            length = check_request(headers)
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
