"""The client's frames on an HTTP/2 server connection other than header blocks
(:class:`InboundFrames`): DATA (checked against the receive windows and credited back as it is
consumed; content-length kept), WINDOW_UPDATE (the send windows; streams waiting for window are
tried once per read), SETTINGS, RST_STREAM and PRIORITY, and frames on streams that are closed.
Protocol errors raise :class:`~tritonx._transports.http2.frames.ConnectionError_`; stream errors
reset the stream (drawn from the reset budget, :mod:`~tritonx._transports.http2.policing`)."""

from __future__ import annotations

from tritonx._transports.http2 import frames as f
from tritonx._transports.http2.frames import ConnectionError_
from tritonx._transports.http2.policing import PolicedConnection
from tritonx._transports.http2.streams import StreamState


class InboundFrames(PolicedConnection):
    """The handling of the client's frames but HEADERS and CONTINUATION (the base of
    :class:`~tritonx._transports.http2.connection.Connection`, which dispatches them)."""

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

    def _remote_end(self, stream: StreamState) -> None:
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
