"""What a client may not do for free on an HTTP/2 connection (:class:`PolicedConnection`): the
reset budget (streams the client resets before their answer, or makes this side reset or refuse,
are drawn from a budget that refills at ``max_reset_rate`` per second, ten seconds' worth at
most; an empty budget ends the connection with ENHANCE_YOUR_CALM: rapid reset, CVE-2023-44487,
and MadeYouReset), grpc core's ping-strike policing, keepalive pings and the maximum connection
age."""

from __future__ import annotations

import logging
import os
import time

from tritonx._transports.http2 import frames as f
from tritonx._transports.http2.frames import ConnectionError_
from tritonx._transports.http2.streams import StreamConnection, StreamState

log = logging.getLogger("tritonx.http2")


class PolicedConnection(StreamConnection):
    """A :class:`~tritonx._transports.http2.streams.StreamConnection` with the reset budget,
    ping policing, keepalive and maximum age (the base of the frame handling)."""

    # ------------------------------------------------------------------ reset budget

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

    def _stream_error(self, sid: int, code: int) -> None:
        """A stream error the client caused on a stream that is not open (RST_STREAM
        ``code``): drawn from the reset budget."""
        self.out.append(f.rst_stream(sid, code))
        self._remember_reset(sid)
        self._spend_reset()

    def _client_reset(self, stream: StreamState, code: int) -> None:
        """Reset an open stream for a frame of the client's: drawn from the reset budget
        (a client cannot make the server reset streams for free: MadeYouReset)."""
        self._reset(stream, code)
        self._spend_reset()

    # ------------------------------------------------------------------ pings and timers

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
