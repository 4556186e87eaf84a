"""The one module below aiohttp's public API: the HTTP listener's connection protocol.

Design amendment 11: where speed requires going below a library's public API, that code lives
in one module, the library's version range is pinned (``core/pyproject.toml``) and a test fails
loudly when a private name it relies on changes (``tests/unit/http/test_aiohttp_internals.py``,
which also fails when any other module of tritonx or its plugins uses a private aiohttp name).

:class:`Connection` is aiohttp's public ``web.RequestHandler`` (one per TCP connection)
subclassed: it adds the listener's header deadline and idleness tracking, and frames the byte
stream itself so that plain ``/infer`` requests are answered by the fast path
(:mod:`tritonx._transports.http.fast_infer`) without aiohttp's ``web`` layer while every other request
reaches aiohttp's parser whole and in order (see :mod:`tritonx._transports.http.listener`). Serving
requests beside aiohttp on the same connection needs aiohttp's per-connection state, read and
written through these private names of ``RequestHandler`` (:data:`PRIVATE_NAMES`, with the kind
each must have):

* ``_force_close``, ``_close`` (read): aiohttp closes, or will close after the answer under
  way; nothing more is framed or served (aiohttp's own ``data_received`` checks the same).
* ``_waiter`` (read): the future aiohttp's request loop (``start``) awaits for the next request;
  pending means aiohttp is idle, so a fast request may be answered now (answers leave in order).
* ``_messages`` (read, its entries replaced): the requests aiohttp parsed and has not
  handled; non-empty means a request's headers are complete (the header deadline ends) and
  aiohttp is busy. With ``raw_values`` (headers are forwarded), a request just parsed whose
  header values ended in spaces or tabs is replaced there by a copy (``_replace``, the
  message's named-tuple API) whose ``raw_headers`` keep them: aiohttp's parser strips them,
  Triton forwards the bytes as sent.
* ``_request_in_progress`` (written), ``_handler_waiter`` (read): aiohttp's graceful
  ``shutdown`` waits for a request in progress through that future; a fast request counts as
  one, and resolves the future when answered.
* ``_keepalive_timeout`` (read), ``_next_keepalive_close_time`` (read, written): a fast answer
  restarts the keep-alive period as aiohttp's own answers do; the eviction at the connection
  cap measures idleness from it.
* ``_keepalive_handle`` (written), ``_process_keepalive`` (overridden, called): aiohttp's
  keep-alive timer and its callback, put off while a fast request is under way. Since
  aiohttp 3.14.4 ``connection_made`` starts that timer, so it also closes an idle connection
  that only the fast path served (earlier releases start it after aiohttp's own answers).
* ``_paused`` (read; ``BaseProtocol``): the transport paused writing (the client does not
  read); routing resumes on ``resume_writing``.
* ``_lingering_time`` (written): :meth:`Connection.close_after_response` sets it to 0 so that
  aiohttp closes after the answer without reading (and inflating) the rest of a body.

The range ``core/pyproject.toml`` pins starts at 3.14.4, the first release that passes the
HTTP tests (3.14.0-3.14.3 start no keep-alive timer on a new connection, keep a header
value's trailing whitespace, and treat bytes after a declined ``Upgrade`` otherwise; 3.13 and
3.10 fail more); CI runs those tests on both ends of the range (``.ci/aiohttp-bounds`` runs
them on the lowest).

Everything else it uses is public: ``web.RequestHandler`` and its constructor keywords,
``transport``, ``force_close``, the asyncio protocol callbacks it extends
(:data:`OVERRIDES`). Its own attribute and method names must not shadow aiohttp's (the guard
test checks that too). Other modules use only :class:`Connection`'s public methods
(``on_lost``, ``close_after_response``, ``was_opened``, ``evictable_for``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from tritonx._transports.http.framing import MAX_HEAD, chunked_with_length, dechunk, parse_head

if TYPE_CHECKING:
    from tritonx._transports.http.fast_infer import FastCall, FastInfer
    from tritonx._transports.http.listener import LimitedSite

log = logging.getLogger("tritonx.http")

#: The private names of aiohttp's ``RequestHandler`` (inherited ones included) that
#: :class:`Connection` relies on, and the kind each must have on a new handler: ``bool``,
#: ``number`` (seconds, or a loop time), ``deque``, ``None`` (an optional future or timer,
#: None until used) or ``method``.
PRIVATE_NAMES: Final[dict[str, str]] = {
    "_force_close": "bool",
    "_close": "bool",
    "_waiter": "None",
    "_messages": "deque",
    "_request_in_progress": "bool",
    "_handler_waiter": "None",
    "_keepalive_timeout": "number",
    "_next_keepalive_close_time": "number",
    "_keepalive_handle": "None",
    "_process_keepalive": "method",
    "_paused": "bool",
    "_lingering_time": "number",
}
#: The names of ``RequestHandler`` that :class:`Connection` overrides (each calls aiohttp's).
OVERRIDES: Final = frozenset(
    {
        "__init__",
        "connection_made",
        "connection_lost",
        "data_received",
        "resume_writing",
        "_process_keepalive",
    }
)
#: While a fast-path request is answered, at most this much of the client's next requests
#: is held before reading pauses.
HOLD_LIMIT = 1 << 20


class Connection(web.RequestHandler):
    """aiohttp's per-connection protocol with a header deadline and idleness tracking.

    The header deadline runs from the opening of the connection, and from the first byte
    received while waiting for the next request; a complete request header ends it. One timer
    per connection serves every request: receiving a request only notes when its first byte
    came (``_header_since``); the timer, when it fires, closes the connection if headers are
    still awaited past the deadline, or sets itself again for the deadline of the request
    under way (creating and cancelling a timer for each request cost more than the rest of
    this bookkeeping).

    With ``fast`` (:class:`~tritonx._transports.http.fast_infer.FastInfer`) it also frames the stream
    (:meth:`data_received`): plain ``/infer`` requests are answered by the fast path, the
    rest is fed to aiohttp's parser, and answers leave in request order.
    """

    __slots__ = (
        "_body_left",
        "_body_timeout",
        "_call",
        "_draining",
        "_event_loop",
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
        "_raw_values",
        "_ws_tail",
    )

    def __init__(
        self,
        manager: web.Server,
        *,
        listener: LimitedSite,
        header_timeout: float,
        body_timeout: float = 0.0,
        fast: FastInfer | None = None,
        raw_values: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, **kwargs)
        #: keep the trailing whitespace of header values (they are forwarded)
        self._raw_values = raw_values
        #: received bytes with a header line ending in whitespace, whose request aiohttp has
        #: not parsed yet (its head continues in the next bytes)
        self._ws_tail = b""
        #: the connection's loop (the ``loop`` aiohttp was given), for its clock and timers
        self._event_loop: asyncio.AbstractEventLoop = kwargs["loop"]
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
        self._opened_at = self._event_loop.time()
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
            self._start_header_deadline(self._event_loop.time())  # the next request's first byte
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
                self._hold_reading()
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
        if self._raw_values and (self._ws_tail or b" \r\n" in data or b"\t\r\n" in data):
            parsed = len(self._messages)
            super().data_received(data)
            self._keep_trailing_whitespace(data, parsed)
        else:
            super().data_received(data)
        if self._header_since and self._messages:
            self._header_since = 0.0  # its headers are complete

    def _keep_trailing_whitespace(self, data: bytes, parsed: int) -> None:
        """Give the requests aiohttp parsed from ``data`` (those after the first ``parsed``
        of its queue) the header values as received, trailing spaces and tabs included."""
        messages = self._messages
        buf = self._ws_tail + data if self._ws_tail else data
        if len(messages) == parsed:  # the head goes on in the next bytes
            self._ws_tail = buf[-MAX_HEAD:]
            return
        self._ws_tail = b""
        pos = 0
        for index in range(parsed, len(messages)):
            message: Any = messages[index][0]  # (or the error of a request it refused)
            payload = messages[index][1]
            raw = getattr(message, "raw_headers", None)
            if not raw:
                continue
            target = f"{message.method} {message.path} ".encode("utf-8", "surrogateescape")
            start = buf.find(target, pos)
            end = buf.find(b"\r\n\r\n", start) if start >= 0 else -1
            if end < 0:
                continue
            pos = end
            kept: dict[tuple[bytes, bytes], list[bytes]] = {}
            for line in buf[start:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                value = value.lstrip(b" \t")
                stripped = value.rstrip(b" \t")
                if stripped != value:
                    kept.setdefault((name.lower(), stripped), []).append(value)
            if not kept:
                continue
            headers = []
            for name, value in raw:
                sent = kept.get((name.lower(), value))
                headers.append((name, sent.pop(0)) if sent else (name, value))
            messages[index] = (message._replace(raw_headers=tuple(headers)), payload)
        rest = buf[pos:]  # (a next request's head may have begun)
        if b" \r\n" in rest or b"\t\r\n" in rest:
            self._ws_tail = rest[-MAX_HEAD:]

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
                mixed = chunked_with_length(data[start:end])
                if mixed is None or mixed[1] > fast.limit:
                    break  # (over the input size: never buffered here; aiohttp answers it)
                stop = end + 4 + mixed[1]
                if stop > size:
                    if self._header_timeout <= 0:  # nothing would bound the wait
                        break
                    self._inbox += memoryview(data)[start:]
                    self._need = stop - start  # (the header deadline bounds the wait)
                    return
                body = dechunk(data[end + 4 : stop])
                if body is None:
                    break  # aiohttp answers it (400)
                # Triton de-chunks it: aiohttp gets the decoded body with its length
                self._feed(b"%s\r\ncontent-length: %d\r\n\r\n%s" % (mixed[0], len(body), body))
                start = stop
                continue
            body_start = end + 4
            stop = body_start + head.length
            route = fast.route(head) if self._waiting() and not self._no_fast else None
            if route is not None:
                if stop > size:
                    if self._header_timeout > 0:  # (without one, aiohttp reads it)
                        self._hold(data, start, stop)
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

    def _hold(self, data: bytes, start: int, stop: int) -> None:
        """Hold a fast request whose body is not all here (``data[start:]``, the request up
        to ``stop``) until it is: for at most the body timeout (then aiohttp reads it), or
        else the header deadline (:meth:`_route`)."""
        self._inbox += memoryview(data)[start:]
        self._need = stop - start
        if self._body_timeout > 0:  # then aiohttp reads it (and answers 408)
            self._header_since = 0.0  # (else the header deadline bounds it)
            if self._held_handle is None:
                self._held_handle = self._event_loop.call_later(
                    self._body_timeout, self._give_up_hold
                )

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
        self._next_keepalive_close_time = self._event_loop.time() + self._keepalive_timeout
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
            self._release_reading()
        if not self._inbox:
            return
        data = bytes(self._inbox)
        self._inbox.clear()
        self._need = 0
        self._end_hold()
        if not (self._force_close or self._close):
            if not self._header_since:
                self._start_header_deadline(self._event_loop.time())
            self._route(data)

    def _hold_reading(self) -> None:
        """Stop reading from the socket (the transport's own flow control; aiohttp's parser
        and its own pause state are left alone)."""
        transport = self.transport
        if transport is not None:
            try:
                transport.pause_reading()
            except (AttributeError, NotImplementedError, RuntimeError):
                pass  # a transport without flow control, or one closing

    def _release_reading(self) -> None:
        """Read from the socket again (undoes :meth:`_hold_reading`)."""
        transport = self.transport
        if transport is not None:
            try:
                transport.resume_reading()
            except (AttributeError, NotImplementedError, RuntimeError):
                pass

    def _process_keepalive(self) -> None:
        if self._call is not None or self._draining:  # a fast request is under way
            self._keepalive_handle = self._event_loop.call_at(
                self._event_loop.time() + self._keepalive_timeout, self._process_keepalive
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
                self._header_handle = self._event_loop.call_later(
                    self._header_timeout, self._header_deadline
                )

    def _header_deadline(self) -> None:
        self._header_handle = None
        since = self._header_since
        if not since or self.transport is None or self._force_close:
            return  # no header awaited now: the next request sets a timer again
        left = since + self._header_timeout - self._event_loop.time()
        if left > 0:  # a later request's header, still in time
            self._header_handle = self._event_loop.call_later(left, self._header_deadline)
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
