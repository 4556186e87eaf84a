"""The bounds and timers of an HTTP/2 server connection (:class:`Options`, each one a flag of the
server's, see :mod:`tritonx._transports.grpc.engine`) and the send buffer its connections share
(:class:`SendBudget`)."""

from __future__ import annotations

from dataclasses import dataclass


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
