"""The HTTP listener: aiohttp's request handling behind tritonx's connection limits.

tritonserver (libevhtp) never times a connection out and accepts as many as it can; a client
that opens connections and sends nothing, or sends its headers a byte at a time, holds a file
descriptor forever, and at the open-file limit new clients are reset. Here (tritonx only,
``ServerSettings.http_*``):

* **Connection cap** (``http_max_connections``; 0: derived from the open-file limit, see
  :func:`default_max_connections`, and shared equally by the server's HTTP listeners: its
  HTTP and metrics ports and each frontend plugin's). Connections are accepted by :class:`LimitedSite`'s own
  loop: at the cap it stops accepting, so new clients wait in the listen backlog (not reset)
  until a connection closes. To make room it closes, oldest first, a connection that has
  been idle (opened or kept alive with no byte of a request) or still sending a request's
  headers (slowloris), or a TLS handshake under way, for at least :data:`EVICT_IDLE_AFTER`
  seconds; a connection with a request in progress (its headers complete: its body is read,
  it is handled, its answer is sent) is never closed to make room. Clients that hold
  connections without completing requests thus cannot lock others out until the header
  timeout.
* **Header timeout** (``http_header_timeout_secs``): from the opening of a connection, or from
  the first byte of a later request, until that request's headers are complete; then the
  connection is closed. It also bounds a TLS handshake.
* **Keep-alive timeout** (``http_keepalive_timeout_secs``): an idle connection between
  requests is closed after it (aiohttp's ``keepalive_timeout``).
* **Body timeout** (``http_body_timeout_secs``): enforced where bodies are read
  (:func:`tritonx._transports.http.routes.read_body`): 408 and the connection closed when no byte of the
  body arrives for that long.

With a :class:`~tritonx._transports.http.fast_infer.FastInfer` (the default, ``--http-fast-infer``) the
connection frames requests itself and serves plain ``/infer`` requests without aiohttp's
``web`` layer; everything else reaches aiohttp's parser as before, in order
(:meth:`Connection.data_received`: the connection protocol is
:class:`tritonx._transports.http.aiohttp_internals.Connection`, the one module that uses aiohttp's
private names; this one uses its public API only). Such a request (at most 256 KiB) whose body comes in
parts is held until it is whole, for at most the body timeout (without one, within the
header timeout; without a header timeout it is not held); then aiohttp reads it (and its
body timeout applies from there: a stalled body gets aiohttp's 408 either way).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tritonx._transports.http.aiohttp_internals import Connection
from tritonx.config import ServerSettings

if TYPE_CHECKING:
    from tritonx._transports.http.fast_infer import FastInfer

log = logging.getLogger("tritonx.http")

#: Listen backlog of the HTTP socket (tritonserver binds with 1024).
BACKLOG = 1024
#: At the connection cap, a connection idle, or sending incomplete request headers, for at
#: least this many seconds may be closed to make room for a new one (younger ones may be
#: about to send, or finish, their request).
EVICT_IDLE_AFTER = 1.0
#: accept() errors that mean "out of descriptors or memory": wait, the clients stay queued.
_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def default_max_connections() -> int:
    """The connection cap when ``http_max_connections`` is 0: the open-file soft limit less
    a quarter of it (at least 64 descriptors) for models, files and other listeners; at
    least 16."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 1 << 20
    return max(16, soft - max(64, soft // 4))


@dataclass(frozen=True, slots=True)
class HTTPLimits:
    """The connection limits of one HTTP listener (seconds; 0 disables a timeout)."""

    header_timeout: float = 60.0
    body_timeout: float = 60.0
    keepalive_timeout: float = 620.0
    max_connections: int = 0
    #: header values keep their trailing whitespace (``--http-header-forward-pattern``)
    raw_header_values: bool = False

    @property
    def handler_keepalive(self) -> float:
        """aiohttp's ``keepalive_timeout`` (for aiohttp 0 closes a connection after every
        response; here 0 means no limit)."""
        return self.keepalive_timeout if self.keepalive_timeout > 0 else 1e9

    @classmethod
    def from_settings(cls, settings: ServerSettings, listeners: int = 1) -> HTTPLimits:
        """The limits of one of ``listeners`` HTTP listeners of a server: without
        ``http_max_connections`` they share the descriptors :func:`default_max_connections`
        leaves equally, so that clients holding connections on some listeners cannot take
        the descriptors the others need."""
        return cls(
            header_timeout=settings.http_header_timeout_secs,
            body_timeout=settings.http_body_timeout_secs,
            keepalive_timeout=settings.http_keepalive_timeout_secs,
            max_connections=settings.http_max_connections
            if settings.http_max_connections > 0
            else max(16, default_max_connections() // max(1, listeners)),
            raw_header_values=bool(settings.http_header_forward_pattern),
        )


async def serve_limited(
    app: web.Application,
    sock: socket.socket,
    limits: HTTPLimits,
    *,
    ssl_context: ssl.SSLContext | None = None,
    fast: FastInfer | None = None,
    shutdown_timeout: float = 0.0,
) -> web.AppRunner:
    """Serve ``app`` on the bound socket ``sock`` behind ``limits`` (a :class:`LimitedSite`);
    returns its runner (``shutdown()`` and ``cleanup()`` it at stop). The HTTP and metrics
    ports and every frontend plugin's listener are made here."""
    handler_kwargs: dict[str, Any] = {
        "access_log": None,
        "keepalive_timeout": limits.handler_keepalive,
    }
    runner = web.AppRunner(
        app, handle_signals=False, shutdown_timeout=shutdown_timeout, **handler_kwargs
    )
    await runner.setup()
    try:
        site = LimitedSite(
            runner,
            sock,
            limits=limits,
            handler_kwargs=handler_kwargs,
            ssl_context=ssl_context,
            fast=fast,
        )
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


class LimitedSite(web.BaseSite):
    """An aiohttp site on a bound socket whose accept loop enforces :class:`HTTPLimits`.

    :param handler_kwargs: the keyword arguments of aiohttp's ``RequestHandler`` (the ones
        the runner was given), used for every connection.
    :param fast: the ``/infer`` fast path its connections take (``--http-fast-infer``).
    """

    __slots__ = (
        "_accepting",
        "_app_runner",
        "_connections",
        "_count",
        "_fast",
        "_handler_kwargs",
        "_handshakes",
        "_limits",
        "_name",
        "_room",
        "_sock",
        "_tls",
    )

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        *,
        limits: HTTPLimits,
        handler_kwargs: dict[str, Any],
        ssl_context: ssl.SSLContext | None = None,
        fast: FastInfer | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=BACKLOG)
        # kept here too: aiohttp's own copies are private (tritonx._transports.http.aiohttp_internals)
        self._app_runner = runner
        self._tls = ssl_context
        self._sock = sock
        self._fast = fast
        self._limits = limits
        self._handler_kwargs = handler_kwargs
        host, port = sock.getsockname()[:2]
        self._name = f"{'https' if ssl_context else 'http'}://{host}:{port}"
        #: open connections in opening order (the oldest idle one is evicted first)
        self._connections: dict[Connection, None] = {}
        #: accepted sockets not closed yet (connections plus TLS handshakes under way)
        self._count = 0
        self._room = asyncio.Event()
        self._accepting: asyncio.Task[None] | None = None
        #: TLS handshakes under way: when each began, and its connection once made
        self._handshakes: dict[asyncio.Task[None], _Handshake] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def connection_count(self) -> int:
        """Accepted connections not closed yet."""
        return self._count

    async def start(self) -> None:
        await super().start()
        self._sock.setblocking(False)
        self._sock.listen(BACKLOG)
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop())

    async def stop(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            try:
                await self._accepting
            except asyncio.CancelledError:
                pass
            self._accepting = None
        for task in list(self._handshakes):
            task.cancel()
        self._sock.close()
        await super().stop()

    # ------------------------------------------------------------------ accounting

    def opened(self, connection: Connection) -> None:
        self._connections[connection] = None

    def closed(self, connection: Connection) -> None:
        if connection in self._connections:  # not evicted (already released) before
            del self._connections[connection]
            self._release()

    def _release(self) -> None:
        self._count -= 1
        self._room.set()

    def _evict(self) -> bool | None:
        """Make room at the cap: close the connection that has been idle or sending
        incomplete headers the longest (at least EVICT_IDLE_AFTER seconds), or cancel the
        oldest TLS handshake of that age, whichever began first. True: room was made; None:
        a handshake was cancelled (room comes when its task ends); False: nothing to close."""
        now = asyncio.get_running_loop().time()
        victim, longest = None, EVICT_IDLE_AFTER
        for connection in self._connections:
            waited = connection.evictable_for(now)
            if waited is not None and waited >= longest:
                victim, longest = connection, waited
        handshake = None
        for task, state in self._handshakes.items():
            waited = now - state.started
            if not state.cancelled and state.open_connection() is None and waited >= longest:
                handshake, longest = task, waited
        if handshake is not None:
            log.debug("cancelling a TLS handshake of %.1f s: at the connection cap", longest)
            self._handshakes[handshake].cancelled = True
            handshake.cancel()
            return None
        if victim is None:
            return False
        log.debug("closing an HTTP connection waiting %.1f s: at the connection cap", longest)
        del self._connections[victim]
        self._release()  # now: its connection_lost comes later
        victim.force_close()
        return True

    # ------------------------------------------------------------------ accepting

    def _connection(self) -> Connection:
        server = self._app_runner.server
        assert server is not None
        return Connection(
            server,
            listener=self,
            header_timeout=self._limits.header_timeout,
            body_timeout=self._limits.body_timeout,
            fast=self._fast,
            raw_values=self._limits.raw_header_values,
            loop=asyncio.get_running_loop(),
            **self._handler_kwargs,
        )

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        sock, cap = self._sock, self._limits.max_connections
        short_of_descriptors = False
        while True:
            if self._count >= cap:
                self._room.clear()
                if not self._evict():  # (None: a cancelled handshake releases its room)
                    try:  # a connection closes, or a waiting one becomes old enough
                        await asyncio.wait_for(self._room.wait(), EVICT_IDLE_AFTER / 2)
                    except TimeoutError:
                        pass
                    continue
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno in _RESOURCE_ERRORS:
                    if not short_of_descriptors:
                        log.warning("HTTP accept failed (%s): clients wait in the backlog", exc)
                        short_of_descriptors = True
                    await asyncio.sleep(0.1)
                continue
            short_of_descriptors = False
            self._count += 1
            try:
                conn.setblocking(False)
                if conn.family in (socket.AF_INET, socket.AF_INET6):
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # the client is already gone
                conn.close()
                self._release()
                continue
            if self._tls is None:
                await self._connect(conn, _Handshake(loop.time()))
            else:  # handshakes run concurrently: a slow one must not stop accepting
                state = _Handshake(loop.time())
                task = loop.create_task(self._connect(conn, state))
                self._handshakes[task] = state
                task.add_done_callback(self._handshake_done)

    def _handshake_done(self, task: asyncio.Task[None]) -> None:
        self._handshakes.pop(task, None)

    async def _connect(self, conn: socket.socket, state: _Handshake) -> None:
        made = state.made

        def factory() -> Connection:
            made.append(self._connection())
            return made[0]

        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                factory,
                conn,
                ssl=self._tls,
                ssl_handshake_timeout=(self._limits.header_timeout or None) if self._tls else None,
            )
        except Exception as exc:  # handshake failure or timeout, client gone, ...
            log.debug("HTTP connection failed before its first request: %s", exc)
            conn.close()
            if not (made and made[0].was_opened):
                self._release()  # connection_made never ran: nothing else will release it
        except asyncio.CancelledError:
            conn.close()
            if not (made and made[0].was_opened):
                self._release()
            raise


@dataclass(slots=True)
class _Handshake:
    """One accepted socket until its connection is made (for TLS, its handshake)."""

    started: float
    made: list[Connection] = field(default_factory=list)
    cancelled: bool = False

    def open_connection(self) -> Connection | None:
        """The connection, once ``connection_made`` ran (the handshake is over)."""
        return self.made[0] if self.made and self.made[0].was_opened else None
