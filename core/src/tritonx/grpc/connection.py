"""One HTTP/2 connection of the event-loop gRPC engine: framing, flow control and streams.

The connection is an ``asyncio.Protocol`` on tritonx's event loop; it frames HTTP/2 itself,
the way the HTTP ``/infer`` fast path frames HTTP/1.1: frames are cut by their 9-byte
headers, request header blocks decoded by :class:`~tritonx.grpc.http2.HeaderDecoder` (a
repeated block of indexed fields decoded once), answers written as ready-made blocks, one
``write`` per unary call (its HEADERS, DATA and trailers together). What a call does is
:mod:`tritonx.grpc.calls`' part; this module hands it complete gRPC messages and writes the
ones it produces.

Flow control: the connection announces a 1 MiB stream window and raises its connection
window to 16 MiB; received data is credited back once half of a window is used (messages are
bounded by ``--grpc-max-message-size``, checked from their 5-byte prefix before their body is
buffered). Sending respects the client's windows and frame size: data that does not fit waits
on its stream until WINDOW_UPDATE frames come; a streaming call's writer waits for it
(:meth:`Stream.drained`) before producing more.

Protocol errors close the connection with GOAWAY and the RFC's code; a stream reset by the
client (RST_STREAM) cancels its call. Keepalive (``--grpc-keepalive-*``), ping strikes
(``--grpc-http2-*``) and the connection age (``--grpc-max-connection-age[-grace]``) follow
grpc core's rules as Triton configures them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from collections import deque
from typing import TYPE_CHECKING, Any, cast

from tritonx.grpc import http2 as h2
from tritonx.grpc.http2 import ConnectionError_, HeaderDecoder

if TYPE_CHECKING:
    from tritonx.grpc.calls import CallHeaders
    from tritonx.grpc.engine import Engine

log = logging.getLogger("tritonx.grpc")

_FRAME = struct.Struct(">HBBBL")  # length (high 16 bits, low 8 bits), type, flags, stream
#: the stream window this side announces (SETTINGS_INITIAL_WINDOW_SIZE)
STREAM_WINDOW = 1 << 20
#: the connection window this side keeps open
CONNECTION_WINDOW = 16 << 20
#: the metadata a call may carry (grpc core's default hard limit, announced as
#: SETTINGS_MAX_HEADER_LIST_SIZE)
MAX_METADATA_BYTES = 16 << 10
#: a header block (HEADERS + CONTINUATION) larger than this closes the connection
MAX_HEADER_BLOCK = 256 << 10
#: a streaming call's writer waits when more than this is waiting for the client's window
STREAM_SEND_BUFFER = 1 << 20


class Stream:
    """One HTTP/2 stream: a gRPC call in progress.

    ``queued`` holds the DATA payload that waits for the client's window (memoryviews),
    ``trailers`` the trailers block that follows it; ``call`` is the stream's
    :class:`tritonx.grpc.calls.Call` (set when the headers started one)."""

    __slots__ = (
        "call",
        "closed",
        "conn",
        "drain_waiter",
        "ended_remote",
        "headers_sent",
        "id",
        "message",
        "need",
        "prefix",
        "queued",
        "queued_bytes",
        "recv_used",
        "send_window",
        "trailers",
    )

    def __init__(self, conn: Connection, stream_id: int, send_window: int) -> None:
        self.conn = conn
        self.id = stream_id
        self.send_window = send_window
        self.recv_used = 0
        self.ended_remote = False
        self.headers_sent = False
        self.closed = False
        #: the message being received: its prefix bytes so far, then its body
        self.prefix = bytearray()
        self.message: bytearray | None = None
        self.need = 0
        self.queued: deque[memoryview] = deque()
        self.queued_bytes = 0
        self.trailers: bytes | None = None
        self.drain_waiter: asyncio.Future[None] | None = None
        self.call: Any = None

    async def drained(self) -> None:
        """Wait until the data queued for the client's window is below the stream's buffer
        (and the transport is writable)."""
        conn = self.conn
        while not self.closed and (self.queued_bytes > STREAM_SEND_BUFFER or conn.paused):
            waiter = conn.loop.create_future()
            self.drain_waiter = waiter
            if conn.paused:
                conn.drain_waiters.append(waiter)
            await waiter

    def wake(self) -> None:
        waiter = self.drain_waiter
        if waiter is not None:
            self.drain_waiter = None
            if not waiter.done():
                waiter.set_result(None)


class Connection(asyncio.Protocol):
    """An HTTP/2 server connection carrying gRPC calls for ``engine``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.loop = engine.loop
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, Stream] = {}
        self.last_stream = 0
        self.preface = True  # still waiting for the client's preface
        self.pending = b""
        self.decoder = HeaderDecoder()
        self.out: list[bytes] = []
        # the header block being received (HEADERS then CONTINUATION frames)
        self.block_stream = 0
        self.block_flags = 0
        self.block: bytearray | None = None
        # the client's settings
        self.peer_window = h2.DEFAULT_WINDOW
        self.peer_frame = h2.DEFAULT_FRAME_SIZE
        self.send_window = h2.DEFAULT_WINDOW
        self.recv_used = 0
        #: streams whose data waits for the connection window, in order
        self.blocked: dict[int, Stream] = {}
        self.paused = False
        self.drain_waiters: list[asyncio.Future[None]] = []
        self.going_away = False
        self.closed = False
        # keepalive and ping policing
        self.ping_strikes = 0
        self.last_ping_received = 0.0
        self.pings_without_data = 0
        self.ping_timeout: asyncio.TimerHandle | None = None
        self.keepalive_timer: asyncio.TimerHandle | None = None
        self.age_timer: asyncio.TimerHandle | None = None
        #: the header list decoded last and what it says about a call (a repeated block
        #: decodes to the same list: its calls share the parse)
        self.last_headers: list[tuple[bytes, bytes]] | None = None
        self.last_call_headers: CallHeaders | None = None

    # ------------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is no subclass)
        engine = self.engine
        settings = {
            h2.SETTINGS_INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            h2.SETTINGS_MAX_HEADER_LIST_SIZE: MAX_METADATA_BYTES,
        }
        self.transport.write(
            h2.settings_frame(settings) + h2.window_update(0, CONNECTION_WINDOW - h2.DEFAULT_WINDOW)
        )
        engine.opened(self)
        keepalive = engine.keepalive_time
        if keepalive > 0:
            self.keepalive_timer = self.loop.call_later(keepalive, self._send_keepalive)
        if engine.max_connection_age > 0:
            self.age_timer = self.loop.call_later(engine.max_connection_age, self._aged)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for timer in (self.keepalive_timer, self.age_timer, self.ping_timeout):
            if timer is not None:
                timer.cancel()
        streams = list(self.streams.values())
        self.streams.clear()
        self.blocked.clear()
        for stream in streams:
            stream.closed = True
            stream.wake()
            if stream.call is not None:
                stream.call.reset()
        for waiter in self.drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.drain_waiters.clear()
        self.engine.closed(self)

    def pause_writing(self) -> None:
        """The client does not read: stop reading from it too (what it sends would make
        more to write: answers, ACKs), as grpc core stops on pending induced frames."""
        self.paused = True
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()
        waiters, self.drain_waiters = self.drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self.pending:
            data = self.pending + data
            self.pending = b""
        try:
            if self.preface:
                if len(data) < 24:
                    if not h2.PREFACE.startswith(data):
                        self._abort()
                    else:
                        self.pending = data
                    return
                if not data.startswith(h2.PREFACE):
                    self._abort()
                    return
                self.preface = False
                data = data[24:]
            self._frames(data)
        except ConnectionError_ as exc:
            self._connection_error(exc.code, exc.reason)
            return
        self.flush()

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
        self.out.append(h2.goaway(self.last_stream, code, reason.encode("utf-8", "replace")[:256]))
        self.flush()
        self.going_away = True
        if self.transport is not None:
            self.transport.close()
        self.closed = True

    def go_away(self, code: int = h2.NO_ERROR, debug: bytes = b"") -> None:
        """Stop taking streams (GOAWAY with the last one taken); the connection closes once
        its calls are over."""
        if self.going_away or self.closed:
            return
        self.going_away = True
        self.write(h2.goaway(self.last_stream, code, debug))
        if not self.streams and self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        """Close at once (server stop): GOAWAY, calls reset."""
        if self.closed:
            return
        self.go_away()
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------------ frames in

    def _frames(self, data: bytes) -> None:
        view = memoryview(data)
        end = len(data)
        pos = 0
        unpack = _FRAME.unpack_from
        max_frame = h2.DEFAULT_FRAME_SIZE
        while pos + 9 <= end:
            high, low, kind, flags, sid = unpack(data, pos)
            length = high << 8 | low
            if length > max_frame:
                raise ConnectionError_(h2.FRAME_SIZE_ERROR, f"frame of {length} bytes")
            stop = pos + 9 + length
            if stop > end:
                break
            sid &= 0x7FFFFFFF
            payload = view[pos + 9 : stop]
            pos = stop
            if self.block is not None and kind != h2.CONTINUATION:
                raise ConnectionError_(h2.PROTOCOL_ERROR, "expected a CONTINUATION frame")
            if kind == h2.DATA:
                self._data(sid, flags, payload)
            elif kind == h2.HEADERS:
                self._headers(sid, flags, payload)
            elif kind == h2.CONTINUATION:
                self._continuation(sid, flags, payload)
            elif kind == h2.WINDOW_UPDATE:
                self._window_update(sid, payload)
            elif kind == h2.SETTINGS:
                self._settings(sid, flags, payload)
            elif kind == h2.PING:
                self._ping(sid, flags, payload)
            elif kind == h2.RST_STREAM:
                self._rst_stream(sid, payload)
            elif kind == h2.GOAWAY:
                if sid != 0:
                    raise ConnectionError_(h2.PROTOCOL_ERROR, "GOAWAY on a stream")
                if not self.streams:
                    self.going_away = True
            elif kind == h2.PRIORITY:
                if sid == 0:
                    raise ConnectionError_(h2.PROTOCOL_ERROR, "PRIORITY on stream 0")
                if length != 5:
                    stream = self.streams.get(sid)
                    if stream is not None:
                        self._reset(stream, h2.FRAME_SIZE_ERROR)
            elif kind == h2.PUSH_PROMISE:
                raise ConnectionError_(h2.PROTOCOL_ERROR, "PUSH_PROMISE from a client")
            # other frame types are ignored (RFC 9113 §4.1)
        if pos < end:
            self.pending = bytes(view[pos:])

    @staticmethod
    def _unpad(flags: int, payload: memoryview) -> memoryview:
        if flags & h2.PADDED:
            if not payload:
                raise ConnectionError_(h2.PROTOCOL_ERROR, "padded frame without a pad length")
            pad = payload[0]
            if pad >= len(payload):
                raise ConnectionError_(h2.PROTOCOL_ERROR, "padding longer than the frame")
            return payload[1 : len(payload) - pad]
        return payload

    def _headers(self, sid: int, flags: int, payload: memoryview) -> None:
        if sid == 0 or not sid & 1:
            raise ConnectionError_(h2.PROTOCOL_ERROR, f"HEADERS on stream {sid}")
        payload = self._unpad(flags, payload)
        if flags & h2.PRIORITY_FLAG:
            if len(payload) < 5:
                raise ConnectionError_(h2.PROTOCOL_ERROR, "HEADERS priority past the frame")
            payload = payload[5:]
        if flags & h2.END_HEADERS:
            self._header_block(sid, flags, bytes(payload))
        else:
            self.block_stream = sid
            self.block_flags = flags
            self.block = bytearray(payload)

    def _continuation(self, sid: int, flags: int, payload: memoryview) -> None:
        block = self.block
        if block is None or sid != self.block_stream:
            raise ConnectionError_(h2.PROTOCOL_ERROR, "CONTINUATION without HEADERS")
        block += payload
        if len(block) > MAX_HEADER_BLOCK:
            raise ConnectionError_(h2.ENHANCE_YOUR_CALM, "header block too large")
        if flags & h2.END_HEADERS:
            self.block = None
            self._header_block(sid, self.block_flags, bytes(block))

    def _header_block(self, sid: int, flags: int, block: bytes) -> None:
        headers = self.decoder.decode(block)  # always: the table must follow the client's
        end_stream = bool(flags & h2.END_STREAM)
        stream = self.streams.get(sid)
        if stream is not None:  # trailers from the client: they end its side
            if not end_stream:
                raise ConnectionError_(h2.PROTOCOL_ERROR, "trailers without END_STREAM")
            if stream.ended_remote:
                self._reset(stream, h2.STREAM_CLOSED)
            else:
                self._remote_end(stream)
            return
        if sid <= self.last_stream:
            # a stream this side ended (its answer or RST_STREAM may have crossed the
            # client's trailers): ignored, its block decoded above (RFC 9113 §5.1)
            return
        self.last_stream = sid
        if self.going_away:
            self.out.append(h2.rst_stream(sid, h2.REFUSED_STREAM))
            return
        stream = Stream(self, sid, self.peer_window)
        self.streams[sid] = stream
        self.engine.start_call(stream, headers)
        if end_stream and not stream.closed:
            self._remote_end(stream)

    def _data(self, sid: int, flags: int, payload: memoryview) -> None:
        length = len(payload)
        if sid == 0:
            raise ConnectionError_(h2.PROTOCOL_ERROR, "DATA on stream 0")
        self.recv_used += length
        if self.recv_used >= CONNECTION_WINDOW // 2:
            self.out.append(h2.window_update(0, self.recv_used))
            self.recv_used = 0
        stream = self.streams.get(sid)
        if stream is None:
            if sid > self.last_stream:
                raise ConnectionError_(h2.PROTOCOL_ERROR, f"DATA on idle stream {sid}")
            return  # a stream this side ended: its credit is counted above
        if length:
            self._data_flowed()
        if stream.ended_remote:
            self._reset(stream, h2.STREAM_CLOSED)
            return
        payload = self._unpad(flags, payload)
        if length:
            stream.recv_used += length
            if stream.recv_used >= STREAM_WINDOW // 2 and not flags & h2.END_STREAM:
                self.out.append(h2.window_update(sid, stream.recv_used))
                stream.recv_used = 0
        if payload and stream.call is not None:
            self._cut_messages(stream, payload)
        if flags & h2.END_STREAM and not stream.closed:
            self._remote_end(stream)

    def _cut_messages(self, stream: Stream, data: memoryview) -> None:
        """Cut gRPC messages (5-byte prefix: flag, length) out of ``data``."""
        pos = 0
        end = len(data)
        call = stream.call
        while pos < end and not stream.closed:
            message = stream.message
            if message is None:
                prefix = stream.prefix
                if not prefix and end - pos >= 5:
                    flag = data[pos]
                    size = int.from_bytes(data[pos + 1 : pos + 5], "big")
                    pos += 5
                else:
                    take = min(5 - len(prefix), end - pos)
                    prefix += data[pos : pos + take]
                    pos += take
                    if len(prefix) < 5:
                        return
                    flag = prefix[0]
                    size = int.from_bytes(prefix[1:5], "big")
                    prefix.clear()
                if not call.message_started(flag, size):
                    return
                if end - pos >= size:  # whole in this frame: one copy
                    call.message_received(bytes(data[pos : pos + size]))
                    pos += size
                    continue
                message = stream.message = bytearray()
                stream.need = size
            take = min(stream.need, end - pos)
            message += data[pos : pos + take]
            pos += take
            stream.need -= take
            if stream.need == 0:
                stream.message = None
                call.message_received(message)

    def _remote_end(self, stream: Stream) -> None:
        stream.ended_remote = True
        if stream.message is not None or stream.prefix:
            stream.call.incomplete()
            return
        if stream.call is not None:
            stream.call.remote_ended()

    def _window_update(self, sid: int, payload: memoryview) -> None:
        if len(payload) != 4:
            raise ConnectionError_(h2.FRAME_SIZE_ERROR, "WINDOW_UPDATE of a bad length")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if sid == 0:
            if increment == 0:
                raise ConnectionError_(h2.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self.send_window += increment
            if self.send_window > h2.MAX_WINDOW:
                raise ConnectionError_(h2.FLOW_CONTROL_ERROR, "connection window overflow")
            if self.blocked:
                for waiting in list(self.blocked.values()):
                    self._send_queued(waiting)
                    if self.send_window <= 0:
                        break
            return
        stream = self.streams.get(sid)
        if stream is None:
            if sid > self.last_stream:
                raise ConnectionError_(h2.PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {sid}")
            return
        if increment == 0:
            self._reset(stream, h2.PROTOCOL_ERROR)
            return
        stream.send_window += increment
        if stream.send_window > h2.MAX_WINDOW:
            self._reset(stream, h2.FLOW_CONTROL_ERROR)
            return
        if stream.queued or stream.trailers is not None:
            self._send_queued(stream)

    def _settings(self, sid: int, flags: int, payload: memoryview) -> None:
        if sid != 0:
            raise ConnectionError_(h2.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & h2.ACK:
            if payload:
                raise ConnectionError_(h2.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise ConnectionError_(h2.FRAME_SIZE_ERROR, "SETTINGS of a bad length")
        for at in range(0, len(payload), 6):
            key = int.from_bytes(payload[at : at + 2], "big")
            value = int.from_bytes(payload[at + 2 : at + 6], "big")
            if key == h2.SETTINGS_INITIAL_WINDOW_SIZE:
                if value > h2.MAX_WINDOW:
                    raise ConnectionError_(h2.FLOW_CONTROL_ERROR, "initial window too large")
                delta = value - self.peer_window
                self.peer_window = value
                for stream in self.streams.values():
                    stream.send_window += delta
                    if stream.send_window > h2.MAX_WINDOW:
                        raise ConnectionError_(h2.FLOW_CONTROL_ERROR, "stream window overflow")
            elif key == h2.SETTINGS_MAX_FRAME_SIZE:
                if not h2.DEFAULT_FRAME_SIZE <= value <= (1 << 24) - 1:
                    raise ConnectionError_(h2.PROTOCOL_ERROR, "invalid SETTINGS_MAX_FRAME_SIZE")
                self.peer_frame = value
            elif key == h2.SETTINGS_ENABLE_PUSH and value > 1:
                raise ConnectionError_(h2.PROTOCOL_ERROR, "invalid SETTINGS_ENABLE_PUSH")
        self.out.append(h2.frame(h2.SETTINGS, h2.ACK, 0))
        for stream in list(self.streams.values()):
            if stream.queued and stream.send_window > 0:
                self._send_queued(stream)

    def _data_flowed(self) -> None:
        """Headers or data went either way: the client's early pings are forgiven and the
        keepalive pings sent without data are counted afresh (grpc core's
        ``ResetPingClock``; a client's BDP pings ride with its transfers)."""
        self.ping_strikes = 0
        self.last_ping_received = 0.0
        self.pings_without_data = 0

    def _ping(self, sid: int, flags: int, payload: memoryview) -> None:
        if sid != 0:
            raise ConnectionError_(h2.PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise ConnectionError_(h2.FRAME_SIZE_ERROR, "PING of a bad length")
        if flags & h2.ACK:
            if self.ping_timeout is not None:
                self.ping_timeout.cancel()
                self.ping_timeout = None
            return
        engine = self.engine
        now = time.monotonic()
        if engine.max_ping_strikes > 0:
            # grpc core: a ping sooner than the interval after the last, with no data sent
            # since, is a strike (with no call and without permission: two hours)
            interval = engine.min_ping_interval
            if not self.streams and not engine.permit_without_calls:
                interval = max(interval, 7200.0)
            if self.last_ping_received and now - self.last_ping_received < interval:
                self.ping_strikes += 1
                if self.ping_strikes > engine.max_ping_strikes:
                    raise ConnectionError_(h2.ENHANCE_YOUR_CALM, "too_many_pings")
        self.last_ping_received = now
        self.out.append(h2.frame(h2.PING, h2.ACK, 0, bytes(payload)))

    def _rst_stream(self, sid: int, payload: memoryview) -> None:
        if len(payload) != 4:
            raise ConnectionError_(h2.FRAME_SIZE_ERROR, "RST_STREAM of a bad length")
        if sid == 0:
            raise ConnectionError_(h2.PROTOCOL_ERROR, "RST_STREAM on stream 0")
        stream = self.streams.get(sid)
        if stream is None:
            if sid > self.last_stream:
                raise ConnectionError_(h2.PROTOCOL_ERROR, f"RST_STREAM on idle stream {sid}")
            return
        self._forget(stream)
        if stream.call is not None:
            stream.call.reset()

    # ------------------------------------------------------------------ streams out

    def _forget(self, stream: Stream) -> None:
        stream.closed = True
        self.streams.pop(stream.id, None)
        self.blocked.pop(stream.id, None)
        stream.queued.clear()
        stream.queued_bytes = 0
        stream.trailers = None
        stream.wake()
        if self.going_away and not self.streams and self.transport is not None:
            self.flush()
            self.transport.close()

    def _reset(self, stream: Stream, code: int) -> None:
        """Reset ``stream`` (RST_STREAM ``code``): its call is cancelled."""
        self.out.append(h2.rst_stream(stream.id, code))
        self._forget(stream)
        if stream.call is not None:
            stream.call.reset()

    def reset(self, stream: Stream, code: int) -> None:
        """Reset ``stream`` from a call (written at once)."""
        if stream.closed:
            return
        self._reset(stream, code)
        self.flush()

    def send(
        self,
        stream: Stream,
        headers: bytes | None,
        message: bytes | None = None,
        trailers: bytes | None = None,
        flag: int = 0,
    ) -> None:
        """Send a header block (HEADERS), a gRPC message (DATA: ``message`` with its 5-byte
        prefix, compressed when ``flag`` is 1) and/or the trailers (HEADERS with END_STREAM:
        the stream is then over), in that order, in one write.

        What the windows do not allow waits on the stream; the trailers follow the last of
        it. A stream already reset sends nothing.
        """
        if stream.closed or self.closed:
            return
        out = self.out
        if headers is not None:
            self._header_frames(stream.id, headers, 0)
            stream.headers_sent = True
        if message is not None or headers is not None:
            self._data_flowed()
        if message is not None:
            size = len(message) + 5
            prefix = bytes((flag,)) + (size - 5).to_bytes(4, "big")
            if (
                not stream.queued
                and size <= self.peer_frame
                and size <= self.send_window
                and size <= stream.send_window
            ):
                self.send_window -= size
                stream.send_window -= size
                out.append(h2.frame_header(h2.DATA, 0, stream.id, size))
                out.append(prefix)
                out.append(message)
            else:
                stream.queued.append(memoryview(prefix))
                stream.queued.append(memoryview(message))
                stream.queued_bytes += size
                self._send_queued(stream)
        if trailers is not None:
            if stream.queued:
                stream.trailers = trailers
            else:
                self._trailers(stream, trailers)
        self.flush()

    def _header_frames(self, sid: int, block: bytes, flags: int) -> None:
        """A header block as HEADERS (``flags`` added), then CONTINUATION frames past the
        client's frame size."""
        out = self.out
        size = self.peer_frame
        if len(block) <= size:
            out.append(h2.frame_header(h2.HEADERS, flags | h2.END_HEADERS, sid, len(block)))
            out.append(block)
            return
        pieces = [block[at : at + size] for at in range(0, len(block), size)]
        for index, piece in enumerate(pieces):
            kind = h2.HEADERS if index == 0 else h2.CONTINUATION
            last = h2.END_HEADERS if index == len(pieces) - 1 else 0
            out.append(h2.frame_header(kind, (flags if index == 0 else 0) | last, sid, len(piece)))
            out.append(piece)

    def _trailers(self, stream: Stream, trailers: bytes) -> None:
        self._header_frames(stream.id, trailers, h2.END_STREAM)
        if not stream.ended_remote:
            # the client may still be sending: it need not (RFC 9113 §8.1)
            self.out.append(h2.rst_stream(stream.id, h2.NO_ERROR))
        self._forget(stream)

    def _send_queued(self, stream: Stream) -> None:
        """Send what the windows allow of ``stream``'s queued data (then its trailers)."""
        out = self.out
        queued = stream.queued
        while queued:
            allowed = min(self.send_window, stream.send_window, self.peer_frame)
            if allowed <= 0:
                if self.send_window <= 0:
                    self.blocked[stream.id] = stream
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
            stream.send_window -= size
            stream.queued_bytes -= size
            out.append(h2.frame_header(h2.DATA, 0, stream.id, size))
            out.extend(pieces)  # type: ignore[arg-type]
            self._data_flowed()
        if not queued:
            self.blocked.pop(stream.id, None)
            if stream.trailers is not None:
                trailers, stream.trailers = stream.trailers, None
                self._trailers(stream, trailers)
        if stream.queued_bytes <= STREAM_SEND_BUFFER:
            stream.wake()

    # ------------------------------------------------------------------ timers

    def _send_keepalive(self) -> None:
        """``--grpc-keepalive-time``: a PING (while calls are open, or always with
        ``--grpc-keepalive-permit-without-calls``; at most
        ``--grpc-http2-max-pings-without-data`` between data, 0: no limit) that must be
        answered within ``--grpc-keepalive-timeout``."""
        engine = self.engine
        self.keepalive_timer = None
        if self.closed:
            return
        if self.streams or engine.permit_without_calls:
            limit = engine.max_pings_without_data
            if limit <= 0 or self.pings_without_data < limit:
                self.pings_without_data += 1
                self.write(h2.frame(h2.PING, 0, 0, os.urandom(8)))
                if self.ping_timeout is None:
                    self.ping_timeout = self.loop.call_later(
                        engine.keepalive_timeout, self._ping_unanswered
                    )
        self.keepalive_timer = self.loop.call_later(engine.keepalive_time, self._send_keepalive)

    def _ping_unanswered(self) -> None:
        self.ping_timeout = None
        log.debug("keepalive ping not answered in time: closing the connection")
        self._abort()

    def _aged(self) -> None:
        """``--grpc-max-connection-age``: GOAWAY; the calls left have the grace period."""
        self.age_timer = None
        self.go_away(h2.NO_ERROR, b"max_age")
        grace = self.engine.max_connection_age_grace
        if not self.closed:
            self.age_timer = self.loop.call_later(grace, self.close_now)

    def close_now(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
