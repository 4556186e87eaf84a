"""The event-loop gRPC engine (``--grpc-engine loop``): ``inference.GRPCInferenceService`` and
the health check served by HTTP/2 framing of tritonx's own on its event loop.

grpc.aio costs ~5x the HTTP fast path's CPU per call in its own machinery (a poller thread
taking the GIL, per-call tasks and waits); this engine frames HTTP/2 the way the fast path
frames HTTP/1.1 (:mod:`tritonx._transports.http2`, its :mod:`~tritonx._transports.http2.connection`) and runs the same
method handlers as the grpc.aio server (:func:`tritonx._transports.grpc.server.service_handlers`: the
servicer over the one request pipeline, :mod:`tritonx._transports.grpc.receive`'s deserializers), so both
engines answer alike. Listener settings are the grpc.aio server's: message size limits, TLS
and mutual TLS (ALPN ``h2``), ``--reuse-grpc-port``, keepalive and ping policing,
``--grpc-max-connection-age[-grace]``, ``--grpc-restricted-protocol`` (checked from the
call's headers before any message is read) and response compression.

The engine is the :class:`~tritonx._transports.http2.connection.Application` of its HTTP/2 connections
(:mod:`tritonx._transports.http2`, which knows nothing of gRPC): each stream opened becomes a
:class:`~tritonx._transports.grpc.calls.Call`. Its bounds, tritonx's own flags (Triton has none of them;
grpc core has most as channel arguments), are :func:`connection_options`. A stop is graceful:
GOAWAY with the last stream taken, the calls in progress get the grace period, then the rest
are reset.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import time
from typing import Any

from tritonx._runtime.security import listener_tls_files
from tritonx._transports.grpc.calls import (
    INTERNAL,
    RESOURCE_EXHAUSTED,
    UNAVAILABLE,
    UNIMPLEMENTED,
    Call,
    CallHeaders,
    Method,
)
from tritonx._transports.grpc.metadata import RESPONSE_HEADERS, STATUS_415, status_block
from tritonx._transports.grpc.restricted import restriction_rules
from tritonx._transports.http2 import frames as h2
from tritonx._transports.http2.connection import Connection, Options, SendBudget, Stream
from tritonx._transports.http2.hpack import Headers
from tritonx.config import ServerSettings

log = logging.getLogger("tritonx.grpc")

#: at most one log line per this many seconds about connections refused at the cap
REFUSAL_LOG_SECS = 10.0

#: Listen backlog (as the HTTP listener and tritonserver)
BACKLOG = 1024
#: seconds a TLS handshake may take (grpc core's default connection deadline)
TLS_HANDSHAKE_TIMEOUT = 120.0
#: grpc-timeout units → seconds
_TIMEOUT_UNITS = {
    ord("H"): 3600.0,
    ord("M"): 60.0,
    ord("S"): 1.0,
    ord("m"): 1e-3,
    ord("u"): 1e-6,
    ord("n"): 1e-9,
}
#: headers gRPC itself uses: not part of a call's metadata
_RESERVED = frozenset(
    (b"content-type", b"te", b"grpc-timeout", b"grpc-encoding", b"grpc-accept-encoding")
)
_ENCODINGS = frozenset((b"", b"identity", b"gzip", b"deflate"))


def parse_timeout(value: bytes) -> float | None:
    """Seconds of a ``grpc-timeout`` value (at most 8 digits and a unit); None if invalid."""
    if not 2 <= len(value) <= 9 or not value[:-1].isdigit():
        return None
    unit = _TIMEOUT_UNITS.get(value[-1])
    return None if unit is None else int(value[:-1]) * unit


def default_max_connections() -> int:
    """``--grpc-max-connections`` 0: half of the open-file soft limit (at least 16)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 1 << 20
    return max(16, soft // 2)


def connection_options(settings: ServerSettings) -> Options:
    """The HTTP/2 bounds and timers of the engine's connections, from the server's flags."""
    grace = settings.grpc_max_connection_age_grace
    return Options(
        max_concurrent_streams=int(settings.grpc_max_concurrent_streams),
        announced_header_list_size=int(settings.grpc_max_header_list_size),
        max_header_list_size=4 * int(settings.grpc_max_header_list_size),
        max_header_block=4 * int(settings.grpc_max_header_list_size),
        header_timeout=float(settings.grpc_header_timeout_secs),
        max_send_buffer=int(settings.grpc_max_send_buffer),
        send_timeout=float(settings.grpc_send_timeout_secs),
        max_reset_rate=float(settings.grpc_max_reset_rate),
        keepalive_time=settings.grpc_keepalive_time / 1000.0,
        keepalive_timeout=settings.grpc_keepalive_timeout / 1000.0,
        permit_without_calls=bool(settings.grpc_keepalive_permit_without_calls),
        max_pings_without_data=int(settings.grpc_http2_max_pings_without_data),
        min_ping_interval=settings.grpc_http2_min_recv_ping_interval_without_data / 1000.0,
        max_ping_strikes=int(settings.grpc_http2_max_ping_strikes),
        max_connection_age=settings.grpc_max_connection_age / 1000.0,
        max_connection_age_grace=grace / 1000.0 if grace else 1e9,  # grpc: no limit
    )


class Engine:
    """The listener's shared state: its methods, limits and timers, and its connections.

    :param methods: method path (``/package.Service/Method``) → :class:`Method`.
    :param max_message: ``--grpc-max-message-size`` (both directions, as Triton's).

    ``buffered`` counts the request message bytes held server-wide (received, not parsed),
    bounded by ``--grpc-max-buffered-request-bytes``.
    """

    def __init__(
        self, methods: dict[bytes, Method], settings: ServerSettings, max_message: int
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.methods = methods
        self.max_message = max_message
        self.max_metadata = int(settings.grpc_max_header_list_size)
        self.max_buffered = int(settings.grpc_max_buffered_request_bytes)
        self.buffered = 0
        #: announced sizes of the messages in progress, per connection
        self.reserved: dict[Connection, int] = {}
        #: set while a stop waits for the calls in progress (a call that ends completes it)
        self.call_ended: asyncio.Future[None] | None = None
        self.options = connection_options(settings)
        #: answer bytes waiting for clients' windows, all connections together
        self.send_budget = SendBudget(int(settings.grpc_max_send_buffer_total))
        #: open connections, oldest first
        self.connections: dict[Connection, None] = {}
        self.max_connections = int(settings.grpc_max_connections) or default_max_connections()
        #: connections refused at the cap since the last log line about them
        self.refusals = 0
        self._refusal_logged = -REFUSAL_LOG_SECS
        self._refusal = (
            f"too many connections: --grpc-max-connections {self.max_connections} reached, "
            "each with a call open"
        ).encode()
        self.server: asyncio.Server | None = None

    # ------------------------------------------------------------------ connections

    def connection_made(self, conn: Connection) -> None:
        """``--grpc-max-connections``: at the cap, the oldest connection with no call open
        is sent away to make room; with none, the new one is."""
        connections = self.connections
        if len(connections) >= self.max_connections:
            idle = next((old for old in connections if not old.streams), None)
            if idle is None:
                self._refused(conn)
                return
            idle.go_away(debug=b"idle connection sent away: --grpc-max-connections reached")
            connections.pop(idle, None)
        connections[conn] = None

    def _refused(self, conn: Connection) -> None:
        """Refuse ``conn`` (every open connection has a call): GOAWAY ENHANCE_YOUR_CALM saying
        why, then closed. Logged once per :data:`REFUSAL_LOG_SECS` with the count since, so a
        flood of connections does not flood the log."""
        conn.close(h2.ENHANCE_YOUR_CALM, self._refusal)
        self.refusals += 1
        now = time.monotonic()
        if now >= self._refusal_logged + REFUSAL_LOG_SECS:
            self._refusal_logged = now
            log.warning(
                "gRPC connections refused: %d (since the last such line), %d open, all with "
                "calls (--grpc-max-connections)",
                self.refusals,
                len(self.connections),
            )
            self.refusals = 0

    def connection_lost(self, conn: Connection) -> None:
        self.connections.pop(conn, None)
        self.reserved.pop(conn, None)  # (its calls were reset: their share is released)

    def _parse(self, headers: Headers) -> CallHeaders:
        parsed = CallHeaders()
        path = method = content_type = b""
        metadata: list[tuple[bytes, bytes]] = []
        size = 0
        for name, value in headers:
            size += len(name) + len(value) + 32
            if name[:1] == b":":
                if name == b":path":
                    path = value
                elif name == b":method":
                    method = value
                continue
            if name in _RESERVED:
                if name == b"content-type":
                    content_type = value
                elif name == b"grpc-timeout":
                    parsed.timeout = parse_timeout(value)
                    if parsed.timeout is None:
                        parsed.error = (INTERNAL, f"Invalid grpc-timeout: {value!r}")
                elif name == b"grpc-encoding":
                    parsed.encoding = b"" if value == b"identity" else value
                elif name == b"grpc-accept-encoding":
                    parsed.accept = value
                continue
            metadata.append((name, value))
        parsed.metadata = tuple(metadata)
        if parsed.error is not None:
            return parsed
        if size > self.max_metadata:
            parsed.error = (
                RESOURCE_EXHAUSTED,
                f"received initial metadata size exceeds limit ({size} vs. {self.max_metadata})",
            )
        elif method != b"POST" or not content_type.startswith(b"application/grpc"):
            parsed.error = STATUS_415
        elif parsed.encoding not in _ENCODINGS:
            parsed.error = (
                UNIMPLEMENTED,
                f"Compression algorithm '{parsed.encoding.decode('latin-1')}' is not supported",
            )
        else:
            parsed.method = self.methods.get(path)
            if parsed.method is None:
                parsed.error = (UNIMPLEMENTED, "Method not found!")
        return parsed

    def stream_opened(self, stream: Stream, headers: Headers) -> None:
        """A stream opened with ``headers``: start its call, or answer it at once."""
        conn = stream.conn
        memo = conn.memo
        if memo is not None and memo[0] is headers:
            parsed = memo[1]
            assert isinstance(parsed, CallHeaders)
        else:
            parsed = self._parse(headers)
            conn.memo = (headers, parsed)
        method = parsed.method
        if method is None:
            error = parsed.error
            if isinstance(error, bytes):
                conn.send(stream, None, None, error)
            else:
                assert error is not None
                conn.send(stream, None, None, RESPONSE_HEADERS + status_block(*error))
            return
        rule = method.rule
        if rule is not None:
            key, expected = rule
            for name, value in parsed.metadata:
                if name == key:
                    if value == expected:
                        rule = None
                    break
            if rule is not None:
                message = f"This protocol is restricted, expecting header '{key.decode()}'"
                conn.send(stream, None, None, RESPONSE_HEADERS + status_block(UNAVAILABLE, message))
                return
        stream.handler = Call(self, stream, method, parsed)

    # ------------------------------------------------------------------ the listener

    async def start(self, address: str, port: int, settings: ServerSettings) -> int:
        """Bind and listen; returns the bound port."""
        files = listener_tls_files(settings, "grpc")
        tls = None
        if files is not None:
            tls = files.context
            tls.set_alpn_protocols(["h2"])
        host = address[1:-1] if address.startswith("[") and address.endswith("]") else address
        try:
            self.server = await self.loop.create_server(
                lambda: Connection(self, self.options, self.loop, self.send_budget),
                host=host or None,
                port=port,
                family=socket.AF_UNSPEC,
                backlog=BACKLOG,
                reuse_port=bool(settings.reuse_grpc_port) or None,
                ssl=tls,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT if tls is not None else None,
            )
        except OSError as exc:
            raise OSError(f"failed to listen on gRPC address {host}:{port}: {exc}") from exc
        sockets = self.server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    def go_away(self) -> None:
        """Stop taking calls: every connection gets GOAWAY with its last stream (calls in
        progress go on; new streams are refused with REFUSED_STREAM, which clients retry
        elsewhere), and the listener stops accepting."""
        if self.server is not None:
            self.server.close()
        for conn in list(self.connections):
            conn.go_away()

    def _calls(self) -> list[Call]:
        return [
            stream.handler
            for conn in self.connections
            for stream in conn.streams.values()
            if isinstance(stream.handler, Call) and not stream.handler.done
        ]

    async def stop(self, grace: float | None = None) -> None:
        """Stop gracefully: GOAWAY (:meth:`go_away`), streaming calls see the end of their
        requests (their handlers finish what is in flight), the calls in progress get ``grace``
        seconds to end (grpc.aio's ``stop`` argument; ``Server`` passes what is left of
        ``--exit-timeout-secs``), then the rest are cancelled and waited for (a few seconds
        at most) and every connection is closed."""
        self.go_away()
        for call in self._calls():
            if call.requests is not None:
                call.requests.end()  # as if the client had sent all: the handler finishes
        if grace:
            deadline = self.loop.time() + grace
            while self._calls() and self.loop.time() < deadline:
                self.call_ended = self.loop.create_future()
                try:
                    await asyncio.wait_for(self.call_ended, deadline - self.loop.time())
                except TimeoutError:
                    break
                finally:
                    self.call_ended = None
        tasks = []
        for conn in list(self.connections):
            calls = [s.handler for s in conn.streams.values() if isinstance(s.handler, Call)]
            conn.close()
            for call in calls:
                if call.task is not None:
                    tasks.append(call.task)
                call.reset()  # cancelled now, whether or not the client reads what is left
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()  # a client that never read its buffered answers
        if self.server is not None:
            try:
                await asyncio.wait_for(self.server.wait_closed(), 5.0)
            except Exception:  # pragma: no cover - best effort
                pass
            self.server = None


def build_methods(handlers: dict[str, Any], settings: ServerSettings) -> dict[bytes, Method]:
    """The engine's methods from grpc method handlers (path → ``RpcMethodHandler``), with the
    ``--grpc-restricted-protocol`` rule of each."""
    rules = restriction_rules(settings.grpc_restricted_protocol)
    methods: dict[bytes, Method] = {}
    for path, handler in handlers.items():
        streaming = bool(handler.request_streaming)
        behaviour = handler.stream_stream if streaming else handler.unary_unary
        if behaviour is None or handler.response_streaming != streaming:
            raise RuntimeError(f"the gRPC engine serves unary and bidirectional RPCs, not {path}")
        rule = rules.get(path)
        methods[path.encode("ascii")] = Method(
            streaming=streaming,
            behaviour=behaviour,
            deserialize=handler.request_deserializer,
            serialize=handler.response_serializer,
            rule=None if rule is None else (rule[0].encode("latin-1"), rule[1].encode("utf-8")),
        )
    return methods
