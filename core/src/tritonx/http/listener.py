"""The HTTP listener: aiohttp's request handling behind tritonx's connection limits.

tritonserver (libevhtp) never times a connection out and accepts as many as it can; a client
that opens connections and sends nothing, or sends its headers a byte at a time, holds a file
descriptor forever, and at the open-file limit new clients are reset. Here (tritonx only,
``ServerSettings.http_*``):

* **Connection cap** (``http_max_connections``; 0: derived from the open-file limit, see
  :func:`default_max_connections`). Connections are accepted by :class:`LimitedSite`'s own
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
  (:func:`tritonx.http.routes.read_body`): 408 and the connection closed when no byte of the
  body arrives for that long.

With a :class:`~tritonx.http.fast_infer.FastInfer` (the default, ``--http-fast-infer``) the
connection frames requests itself and serves plain ``/infer`` requests without aiohttp's
``web`` layer; everything else reaches aiohttp's parser as before, in order
(:meth:`Connection.data_received`). Such a request (at most 256 KiB) whose body comes in
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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from tritonx.config import ServerSettings
from tritonx.http.framing import MAX_HEAD, parse_head

if TYPE_CHECKING:
    from tritonx.http.fast_infer import FastCall, FastInfer

log = logging.getLogger("tritonx.http")

#: Listen backlog of the HTTP socket (tritonserver binds with 1024).
BACKLOG = 1024
#: At the connection cap, a connection idle, or sending incomplete request headers, for at
#: least this many seconds may be closed to make room for a new one (younger ones may be
#: about to send, or finish, their request).
EVICT_IDLE_AFTER = 1.0
#: While a fast-path request is answered, at most this much of the client's next requests
#: is held before reading pauses.
HOLD_LIMIT = 1 << 20
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

    @property
    def handler_keepalive(self) -> float:
        """aiohttp's ``keepalive_timeout`` (for aiohttp 0 closes a connection after every
        response; here 0 means no limit)."""
        return self.keepalive_timeout if self.keepalive_timeout > 0 else 1e9

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> HTTPLimits:
        return cls(
            header_timeout=settings.http_header_timeout_secs,
            body_timeout=settings.http_body_timeout_secs,
            keepalive_timeout=settings.http_keepalive_timeout_secs,
            max_connections=settings.http_max_connections
            if settings.http_max_connections > 0
            else default_max_connections(),
        )


class Connection(RequestHandler):
    """aiohttp's per-connection protocol with a header deadline and idleness tracking.

    The header deadline runs from the opening of the connection, and from the first byte
    received while waiting for the next request; a complete request header ends it. One timer
    per connection serves every request: receiving a request only notes when its first byte
    came (``_header_since``); the timer, when it fires, closes the connection if headers are
    still awaited past the deadline, or sets itself again for the deadline of the request
    under way (creating and cancelling a timer for each request cost more than the rest of
    this bookkeeping).

    With ``fast`` (:class:`~tritonx.http.fast_infer.FastInfer`) it also frames the stream
    (:meth:`data_received`): plain ``/infer`` requests are answered by the fast path, the
    rest is fed to aiohttp's parser, and answers leave in request order.
    """

    __slots__ = (
        "_body_left",
        "_body_timeout",
        "_call",
        "_draining",
        "_fast",
        "_fresh",
        "_header_handle",
        "_header_since",
        "_header_timeout",
        "_held_handle",
        "_holding",
        "_inbox",
        "_listener",
        "_need",
        "_no_fast",
        "_on_lost",
        "_opened_at",
    )

    def __init__(
        self,
        manager: web.Server,
        *,
        listener: LimitedSite,
        header_timeout: float,
        body_timeout: float = 0.0,
        fast: FastInfer | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, **kwargs)
        self._listener = listener
        self._header_timeout = header_timeout
        self._body_timeout = body_timeout
        #: ends the hold of a fast request's partial body after the body timeout
        self._held_handle: asyncio.TimerHandle | None = None
        #: route the next head to aiohttp (a held request given up on)
        self._no_fast = False
        self._header_handle: asyncio.TimerHandle | None = None
        #: loop time the awaited request header started (0: none awaited)
        self._header_since = 0.0
        self._opened_at = 0.0
        self._fresh = True  # no byte received yet
        self._on_lost: Callable[[], object] | None = None
        #: the fast path; None once the stream cannot be framed here (all goes to aiohttp)
        self._fast = fast
        #: received bytes not routed yet (a partial head, a fast request's partial body, or
        #: requests held behind a fast one); appended to, so a trickle costs linear time
        self._inbox = bytearray()
        #: how many bytes the inbox must hold before routing again (a held request's head
        #: and body); 0 while a head is incomplete
        self._need = 0
        #: bytes of the body of the request aiohttp is reading that are still to come
        self._body_left = 0
        #: the fast-path request in flight
        self._call: FastCall | None = None
        #: a fast answer waits for the client to read (the transport paused writing)
        self._draining = False
        #: reading paused: HOLD_LIMIT bytes are held behind a fast request
        self._holding = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._opened_at = self._loop.time()
        self._listener.opened(self)
        self._start_header_deadline(self._opened_at)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._header_handle is not None:
            self._header_handle.cancel()
            self._header_handle = None
        self._end_hold()
        self._listener.closed(self)
        call, self._call = self._call, None
        if call is not None:
            call.cancel()
            self._end_fast_request()
        self._inbox.clear()
        super().connection_lost(exc)
        on_lost, self._on_lost = self._on_lost, None
        if on_lost is not None:
            on_lost()

    def on_lost(self, callback: Callable[[], object] | None) -> bool:
        """Call ``callback`` if the connection is lost (the client went away) before
        ``on_lost(None)`` clears it. Returns False, and keeps nothing, when the connection
        is lost already."""
        if callback is not None and self.transport is None:
            return False
        self._on_lost = callback
        return True

    def data_received(self, data: bytes) -> None:
        if self._force_close or self._close:
            return
        self._fresh = False
        if not self._header_since and not self._need and self._waiting():
            self._start_header_deadline(self._loop.time())  # the next request's first byte
        if self._fast is None or not data:  # (b"": aiohttp resumes its paused parser)
            self._feed(data)
            return
        inbox = self._inbox
        if inbox or self._call is not None or self._draining:
            seen = len(inbox)
            inbox += data
            if not self._routable(seen):
                return
            data = bytes(inbox)
            inbox.clear()
            if self._need:
                self._need = 0
                self._end_hold()
        self._route(data)

    def _routable(self, seen: int) -> bool:
        """Whether the inbox (``seen`` bytes before the latest) can be routed now: not
        while a fast request is answered (past HOLD_LIMIT, reading pauses), not before a
        held request's body is whole, not before an incomplete head ends (only the new
        bytes are searched)."""
        inbox = self._inbox
        if self._call is not None or self._draining:
            if len(inbox) > HOLD_LIMIT and not self._holding:
                self._holding = True
                self._pause_transport_reading()
            return False
        if self._need:
            return len(inbox) >= self._need
        return (
            inbox.find(b"\r\n\r\n", max(0, seen - 3)) >= 0
            or inbox.find(b"\n\n", max(0, seen - 1)) >= 0
            or len(inbox) > MAX_HEAD
        )

    def _feed(self, data: bytes) -> None:
        """Hand ``data`` to aiohttp's parser."""
        super().data_received(data)
        if self._header_since and self._messages:
            self._header_since = 0.0  # its headers are complete

    def _route(self, data: bytes) -> None:
        """Frame ``data`` into requests: a plain ``/infer`` arriving while aiohttp is idle
        goes to the fast path once its body is here (held until then, for at most the body
        timeout, or the header timeout without one; without a header timeout, it goes to
        aiohttp); any other request, and the rest of the stream while aiohttp works, goes to
        aiohttp's parser; bytes arriving while a fast request is answered wait for its answer
        (answers leave in request order)."""
        fast = self._fast
        size = len(data)
        start = 0
        while start < size:
            if self._body_left:
                stop = min(size, start + self._body_left)
                self._body_left -= stop - start
                self._feed(data if start == 0 and stop == size else data[start:stop])
                start = stop
                continue
            if fast is None or self._call is not None or self._draining:
                break
            end = data.find(b"\r\n\r\n", start)
            if end < 0:
                if size - start > MAX_HEAD or data.find(b"\n\n", start) >= 0:
                    break  # not a head this layer frames: aiohttp answers it
                self._inbox += memoryview(data)[start:]
                return
            head = parse_head(data[start:end])
            if head is None:
                break
            body_start = end + 4
            stop = body_start + head.length
            route = fast.route(head) if self._waiting() and not self._no_fast else None
            if route is not None:
                if stop > size:
                    if self._header_timeout > 0:  # (without one, aiohttp reads it)
                        self._inbox += memoryview(data)[start:]
                        self._need = stop - start
                        if self._body_timeout > 0:  # then aiohttp reads it (and answers 408)
                            self._header_since = 0.0  # (else the header deadline bounds it)
                            if self._held_handle is None:
                                self._held_handle = self._loop.call_later(
                                    self._body_timeout, self._give_up_hold
                                )
                        return
                else:
                    self._header_since = 0.0  # the request is here
                    self._start_fast_request()
                    self._call = fast.call(
                        route[0],
                        route[1],
                        head,
                        bytearray(memoryview(data)[body_start:stop]),
                        self._answer,
                    )
                    start = stop
                    continue
            stop = min(stop, size)  # aiohttp reads this request and whatever of its body came
            self._body_left = body_start + head.length - stop
            self._feed(data if start == 0 and stop == size else data[start:stop])
            start = stop
        if start >= size:
            return
        if fast is not None and (self._call is not None or self._draining):
            self._inbox += memoryview(data)[start:]  # routed after the fast answer
            self._routable(0)  # (pauses reading past HOLD_LIMIT)
            return
        self._fast = None  # from here on aiohttp parses the stream itself
        self._feed(data[start:] if start else data)

    def _end_hold(self) -> None:
        if self._held_handle is not None:
            self._held_handle.cancel()
            self._held_handle = None

    def _give_up_hold(self) -> None:
        """A fast request's body did not come whole within the body timeout: aiohttp reads
        the request from here (its own body timeout then answers a stalled body with 408)."""
        self._held_handle = None
        if not self._need or self.transport is None or self._force_close:
            return
        data = bytes(self._inbox)
        self._inbox.clear()
        self._need = 0
        self._no_fast = True
        try:
            self._route(data)
        finally:
            self._no_fast = False

    def _start_fast_request(self) -> None:
        self._request_in_progress = True  # shutdown() waits for it

    def _end_fast_request(self) -> None:
        self._request_in_progress = False
        waiter = self._handler_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _answer(self, parts: list[bytes | bytearray]) -> None:
        """Send a fast request's answer; then route what arrived meanwhile."""
        self._call = None
        self._end_fast_request()
        transport = self.transport
        if transport is None or transport.is_closing():
            return  # (a shutdown sets _force_close first: the answer still goes out)
        transport.writelines(parts)
        self._next_keepalive_close_time = self._loop.time() + self._keepalive_timeout
        if self._paused:  # the client does not read: wait for resume_writing
            self._draining = True
        elif self._inbox:  # (empty when answered within _route: nothing is held yet)
            self._resume_routing()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._draining:
            self._draining = False
            self._resume_routing()

    def _resume_routing(self) -> None:
        if self._holding:
            self._holding = False
            self._resume_transport_reading()
        if not self._inbox:
            return
        data = bytes(self._inbox)
        self._inbox.clear()
        self._need = 0
        self._end_hold()
        if not (self._force_close or self._close):
            if not self._header_since:
                self._start_header_deadline(self._loop.time())
            self._route(data)

    def _process_keepalive(self) -> None:
        if self._call is not None or self._draining:  # a fast request is under way
            self._keepalive_handle = self._loop.call_at(
                self._loop.time() + self._keepalive_timeout, self._process_keepalive
            )
            return
        super()._process_keepalive()

    def _waiting(self) -> bool:
        """Whether the connection waits for the next request (aiohttp idle, no fast
        request in flight)."""
        waiter = self._waiter
        return (
            waiter is not None
            and not waiter.done()
            and not self._messages
            and self._call is None
            and not self._draining
        )

    def _start_header_deadline(self, since: float) -> None:
        if self._header_timeout > 0:
            self._header_since = since
            if self._header_handle is None:
                self._header_handle = self._loop.call_later(
                    self._header_timeout, self._header_deadline
                )

    def _header_deadline(self) -> None:
        self._header_handle = None
        since = self._header_since
        if not since or self.transport is None or self._force_close:
            return  # no header awaited now: the next request sets a timer again
        left = since + self._header_timeout - self._loop.time()
        if left > 0:  # a later request's header, still in time
            self._header_handle = self._loop.call_later(left, self._header_deadline)
        elif self._waiting():
            log.debug("closing an HTTP connection: no request headers in time")
            self.force_close()
        else:
            self._header_since = 0.0

    def close_after_response(self) -> None:
        """Close the connection once the current response is sent, without reading (and
        inflating) what is left of the request body: aiohttp would otherwise read on for
        its lingering time."""
        self._lingering_time = 0.0

    @property
    def was_opened(self) -> bool:
        """Whether ``connection_made`` ran (the listener then counts it until it closes)."""
        return self._opened_at > 0

    def evictable_for(self, now: float) -> float | None:
        """Seconds this connection has waited for a request, idle or with the request's
        headers incomplete (its first byte counts as the start); None while a request is in
        progress (headers complete: its body is read, it is handled or answered), when the
        connection may not be closed to make room."""
        if not self._waiting() or self._need:  # (_need: a fast request's body is awaited)
            return None
        if self._fresh:
            since = self._opened_at
        elif self._header_since:  # the next request's headers are under way
            since = self._header_since
        else:  # kept alive since the last answer (or, without a header timeout, receiving)
            since = max(self._opened_at, self._next_keepalive_close_time - self._keepalive_timeout)
        return now - since


class LimitedSite(web.BaseSite):
    """An aiohttp site on a bound socket whose accept loop enforces :class:`HTTPLimits`.

    :param handler_kwargs: the keyword arguments of aiohttp's ``RequestHandler`` (the ones
        the runner was given), used for every connection.
    :param fast: the ``/infer`` fast path its connections take (``--http-fast-infer``).
    """

    __slots__ = (
        "_accepting",
        "_connections",
        "_count",
        "_fast",
        "_handler_kwargs",
        "_handshakes",
        "_limits",
        "_name",
        "_room",
        "_sock",
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
        server = self._runner.server
        assert server is not None
        return Connection(
            server,
            listener=self,
            header_timeout=self._limits.header_timeout,
            body_timeout=self._limits.body_timeout,
            fast=self._fast,
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
            if self._ssl_context is None:
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
                ssl=self._ssl_context,
                ssl_handshake_timeout=(self._limits.header_timeout or None)
                if self._ssl_context
                else None,
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
