"""gRPC calls of the event-loop engine: from a stream's headers and messages to the servicer's
method and back.

A call is the :class:`~tritonx._transports.http2.connection.StreamHandler` of its HTTP/2 stream: it cuts
the stream's body into gRPC messages (a 5-byte prefix: flag, length; the length is checked
before the body is buffered) and answers through the connection. The engine serves the same method handlers as the grpc.aio server (the
:class:`~tritonx._transports.grpc.servicer.GRPCInferenceServicer` coroutines with
:mod:`tritonx._transports.grpc.receive`'s deserializers, and the health check), so both engines run one
request pipeline; a call hands its handler a :class:`Context` with the part of
``grpc.aio.ServicerContext`` tritonx's handlers use. A unary call's message is deserialized in
the call's task (so per-call context variables stay in the call), a streaming call's as its
handler reads it.

Statuses are grpc core's where a client can see them: an unknown method is UNIMPLEMENTED
``Method not found!``; a message over ``--grpc-max-message-size`` is RESOURCE_EXHAUSTED
``SERVER: Received message larger than max (N vs. M)`` (``SERVER: Sent ...`` for an answer, as
grpcio's own server words them); a unary call's request messages past its first are dropped,
its first answered (as grpc core does); a deadline
(``grpc-timeout``) that passes cancels the handler (the data plane cancels the request) and
ends the call DEADLINE_EXCEEDED ``Deadline Exceeded``; a client's RST_STREAM or a lost
connection cancels it without an answer.

Bounds: a message's bytes count against the server-wide ``--grpc-max-buffered-request-bytes``
as they arrive, until its handler parses it (RESOURCE_EXHAUSTED past it, unless it is the
only one), and its announced size against its connection's share of that (a quarter, unless
it is the connection's only one), so one connection cannot take it all by announcing; a streaming call holds back its stream's window credit while it has messages its
handler has not read (the client waits); an answer that would wait past
``--grpc-max-send-buffer`` gets RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from tritonx._transports.grpc.errors import bounded_message
from tritonx._transports.grpc.metadata import (
    OK_TRAILERS,
    RESPONSE_HEADERS,
    Metadata,
    decode_metadata,
    metadata_block,
    status_block,
)
from tritonx._transports.http2 import frames as h2
from tritonx._transports.http2.hpack import literal

if TYPE_CHECKING:
    from tritonx._transports.grpc.context import CallContext
    from tritonx._transports.grpc.engine import Engine
    from tritonx._transports.http2.connection import Stream

log = logging.getLogger("tritonx.grpc")

#: gRPC status codes (their numbers on the wire)
OK = grpc.StatusCode.OK.value[0]
UNKNOWN = grpc.StatusCode.UNKNOWN.value[0]
DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.value[0]
INTERNAL = grpc.StatusCode.INTERNAL.value[0]
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]

#: ``grpc.Compression`` → the ``grpc-encoding`` name
ENCODING_NAME = {grpc.Compression.Gzip: b"gzip", grpc.Compression.Deflate: b"deflate"}


@dataclass(frozen=True, slots=True)
class Method:
    """One RPC as the engine serves it: its handler (grpc's ``RpcMethodHandler`` fields) and
    the restricted-protocol rule of its category (metadata key and value; None: open)."""

    streaming: bool
    behaviour: Callable[..., Any]
    deserialize: Callable[[Any], Any]
    serialize: Callable[[Any], bytes]
    rule: tuple[bytes, bytes] | None = None


class CallHeaders:
    """What a request's header block says about its call; a connection keeps the last one
    with its block (a repeated block decodes to the same header list), so a client's repeated
    calls share it, its metadata decoded once."""

    __slots__ = ("_decoded", "accept", "encoding", "error", "metadata", "method", "timeout")

    def __init__(self) -> None:
        self.method: Method | None = None
        #: the metadata as received (names and raw values)
        self.metadata: tuple[tuple[bytes, bytes], ...] = ()
        #: ``grpc-encoding`` of the messages (b"" for identity)
        self.encoding = b""
        #: the client's ``grpc-accept-encoding``
        self.accept = b""
        #: ``grpc-timeout`` in seconds
        self.timeout: float | None = None
        #: the answer instead of a call: an HTTP header block, or (gRPC code, message)
        self.error: tuple[int, str] | bytes | None = None
        self._decoded: Metadata | None = None

    def decoded_metadata(self) -> Metadata:
        """:attr:`metadata` as handlers get it (:func:`decode_metadata`), decoded once."""
        if self._decoded is None:
            self._decoded = decode_metadata(self.metadata)
        return self._decoded


class Context:
    """The ``grpc.aio.ServicerContext`` of a call: the methods tritonx's handlers use (the
    servicer, :mod:`tritonx._transports.grpc.receive`, the health check), no others.

    :param metadata: returns the call's metadata (:func:`decode_metadata`, without the
        headers gRPC itself uses: pseudo-headers, content-type, te, grpc-timeout,
        grpc-encoding, grpc-accept-encoding).
    :param peer: returns the client's address (:meth:`peer`).

    What the handler set is read by its :class:`Call` through plain attributes (not part
    of grpc's API, whose names they avoid): :attr:`status_code` (a gRPC code number),
    :attr:`status_details`, :attr:`trailing_pairs`, :attr:`answer_compression` and
    :attr:`done_callbacks`.
    """

    __slots__ = (
        "_metadata",
        "_peer",
        "answer_compression",
        "done_callbacks",
        "status_code",
        "status_details",
        "trailing_pairs",
    )

    def __init__(
        self,
        metadata: Callable[[], tuple[tuple[str, str | bytes], ...]],
        peer: Callable[[], str] | None = None,
    ) -> None:
        self._metadata = metadata
        self._peer = peer
        self.status_code = OK
        self.status_details = ""
        self.answer_compression: grpc.Compression | None = None
        self.trailing_pairs: tuple[tuple[str, str | bytes], ...] = ()
        self.done_callbacks: list[Callable[[Context], None]] | None = None

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._metadata()

    def peer(self) -> str:
        return self._peer() if self._peer is not None else "unknown"

    def set_code(self, code: grpc.StatusCode) -> None:
        self.status_code = code.value[0]

    def set_details(self, details: str) -> None:
        self.status_details = details

    def set_compression(self, compression: grpc.Compression) -> None:
        self.answer_compression = compression

    async def send_initial_metadata(self, metadata: Any) -> None:
        """The initial metadata go with the first message (tritonx's handlers send none)."""
        if metadata:
            raise NotImplementedError("initial metadata are not sent by this engine")

    def set_trailing_metadata(self, metadata: Any) -> None:
        self.trailing_pairs = tuple(metadata)

    def add_done_callback(self, callback: Callable[[Context], None]) -> None:
        if self.done_callbacks is None:
            self.done_callbacks = []
        self.done_callbacks.append(callback)


class RequestStream:
    """The request messages of a streaming call, as an async iterator of parsed messages
    (the handler's deserializer runs as the handler reads). While messages wait here the
    call's stream holds back its window credit, so a handler that does not read stops its
    client."""

    __slots__ = ("_call", "_deserialize", "_ended", "_items", "_waiter")

    def __init__(self, call: Call, deserialize: Callable[[Any], Any]) -> None:
        self._call = call
        self._deserialize = deserialize
        self._items: deque[Any] = deque()
        self._ended = False
        self._waiter: asyncio.Future[None] | None = None

    def put(self, data: Any) -> None:
        if not self._items:
            self._call.stream.hold_credit(True)
        self._items.append(data)
        self._wake()

    def end(self) -> None:
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> Any:
        items = self._items
        while not items:
            if self._ended:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        data = items.popleft()
        call = self._call
        if not items:
            call.stream.hold_credit(False)
        try:
            return self._deserialize(data)
        finally:
            call.release(len(data))


class Call:
    """One gRPC call on ``stream`` (its ``method`` and ``headers``): receives its messages,
    runs its handler in a task, sends the answer and the status."""

    __slots__ = (
        "buffered",
        "cancelled",
        "conn",
        "context",
        "done",
        "engine",
        "expired",
        "headers",
        "held",
        "message",
        "method",
        "need",
        "partial",
        "prefix",
        "requests",
        "reserved",
        "skip",
        "stream",
        "task",
        "timer",
    )

    def __init__(
        self, engine: Engine, stream: Stream, method: Method, headers: CallHeaders
    ) -> None:
        conn = stream.conn
        self.engine = engine
        self.conn = conn
        self.stream = stream
        self.method = method
        self.headers = headers
        self.context = Context(headers.decoded_metadata, conn.peer)
        self.cancelled = False
        self.done = False
        self.expired = False
        self.message: Any = None
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.requests: RequestStream | None = None
        #: the message being received: its prefix bytes so far, then its body
        self.prefix = bytearray()
        self.partial: bytearray | None = None
        self.need = 0
        #: bytes of a dropped message still to come
        self.skip = 0
        #: bytes of this call's messages counted in the engine's buffered bytes
        self.buffered = 0
        #: bytes of a unary call's request counted in its connection's (until it ends)
        self.held = 0
        #: announced sizes of this call's messages not yet parsed (the connection's share)
        self.reserved = 0
        if headers.timeout is not None:
            self.timer = conn.loop.call_later(headers.timeout, self._expire)
        if method.streaming:
            self.requests = RequestStream(self, method.deserialize)
            self.task = conn.loop.create_task(self._run_stream())
            self.task.add_done_callback(self._task_done)

    # ------------------------------------------------------------------ from the connection

    def data_received(self, data: memoryview) -> None:
        """Body bytes: cut gRPC messages (5-byte prefix: flag, length) out of them."""
        pos = 0
        end = len(data)
        while pos < end and not self.done:
            if self.skip:
                take = min(self.skip, end - pos)
                self.skip -= take
                pos += take
                continue
            message = self.partial
            if message is None:
                prefix = self.prefix
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
                if not self.message_started(flag, size):
                    if self.skip:
                        continue
                    return
                if end - pos >= size:  # whole in this frame: one copy
                    if not self._charge(size):
                        return
                    self.message_received(bytes(data[pos : pos + size]))
                    pos += size
                    continue
                message = self.partial = bytearray()
                self.need = size
            take = min(self.need, end - pos)
            if not self._charge(take):
                return
            message += data[pos : pos + take]
            pos += take
            self.need -= take
            if self.need == 0:
                self.partial = None
                self.message_received(message)

    def end_received(self) -> None:
        """The client ended its side."""
        if self.partial is not None or self.prefix or self.skip:
            self.incomplete()
        else:
            self.remote_ended()

    def _charge(self, size: int) -> bool:
        """``size`` bytes of a message arrived: counted server-wide until parsed. False (the
        call ended RESOURCE_EXHAUSTED) when they pass the server-wide limit while other calls
        hold bytes too (messages announced at once are admitted together: the limit is
        enforced as their bytes arrive)."""
        engine = self.engine
        engine.buffered += size
        self.buffered += size
        if engine.buffered > engine.max_buffered and engine.buffered != self.buffered:
            self.fail(
                RESOURCE_EXHAUSTED,
                f"Request messages of {engine.buffered - self.buffered} bytes are already held "
                f"by the server; this one would pass the limit of {engine.max_buffered} "
                "(--grpc-max-buffered-request-bytes)",
            )
            return False
        return True

    def release(self, size: int) -> None:
        """``size`` bytes of this call's messages are parsed: no longer buffered, nor
        reserved on the connection."""
        engine = self.engine
        held = min(size, self.buffered)
        self.buffered -= held
        engine.buffered -= held
        reserved = min(size, self.reserved)
        if reserved:
            self.reserved -= reserved
            reserved_now = engine.reserved
            conn = self.conn
            if conn in reserved_now:  # (gone once the connection is)
                reserved_now[conn] -= reserved

    def message_started(self, flag: int, size: int) -> bool:
        """A message of ``size`` bytes begins: False (and the call ended) when it is refused."""
        engine = self.engine
        limit = engine.max_message
        if size > limit:
            self.fail(
                RESOURCE_EXHAUSTED, f"SERVER: Received message larger than max ({size} vs. {limit})"
            )
            return False
        if flag > 1:
            self.fail(INTERNAL, f"Invalid gRPC message flag {flag}")
            return False
        if flag and not self.headers.encoding:
            self.fail(INTERNAL, "A compressed message came on a call without grpc-encoding")
            return False
        if not self.method.streaming and self.message is not None:
            self.skip = size  # a unary call's second message: dropped, the first answered
            return False
        buffered = engine.buffered
        if buffered and buffered + size > engine.max_buffered:
            self.fail(
                RESOURCE_EXHAUSTED,
                f"Request messages of {buffered} bytes are already held by the server; this "
                f"one ({size} bytes) would pass the limit of {engine.max_buffered} "
                "(--grpc-max-buffered-request-bytes)",
            )
            return False
        conn = self.conn
        reserved = engine.reserved.get(conn, 0)
        share = engine.max_buffered // 4
        if size and reserved and reserved + size > share:
            self.fail(
                RESOURCE_EXHAUSTED,
                f"Request messages of {reserved} bytes are already in progress on this "
                f"connection; this one ({size} bytes) would pass its share of {share} "
                "(a quarter of --grpc-max-buffered-request-bytes)",
            )
            return False
        engine.reserved[conn] = reserved + size
        self.reserved += size
        return True  # (the server-wide count takes its bytes as they arrive: _charge)

    def message_received(self, data: bytes | bytearray) -> None:
        """A whole message (compressed or not: the deserializer tells them apart, as it
        does for grpc.aio)."""
        if self.requests is not None:
            self.requests.put(data)
        else:
            self.message = data
            self.held = len(data)
            self.conn.hold_requests(self.held)  # until the call ends

    def remote_ended(self) -> None:
        """The client sent all of its messages."""
        if self.requests is not None:
            self.requests.end()
            return
        if self.message is None:
            self.fail(INTERNAL, "No request message on a unary call")
            return
        if self.task is None and not self.done:
            self.task = self.conn.loop.create_task(self._run_unary())
            self.task.add_done_callback(self._task_done)

    def incomplete(self) -> None:
        """The client ended its side in the middle of a message."""
        self.fail(INTERNAL, "The request stream ended in the middle of a message")

    def reset(self) -> None:
        """The client reset the stream, or the connection is gone: the handler is cancelled,
        nothing more is sent."""
        if self.done:
            return
        self.cancelled = True
        self._cancel_timer()
        if self.requests is not None:
            self.requests.end()
        if self.task is not None:
            self.task.cancel()
        else:
            self._end()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """The handler's task ended. A call it did not end ends here: cancelled (the client
        reset it, the connection went, its deadline passed — even before the task's first
        step), or failed with an error that escaped the handler (grpc's UNKNOWN
        ``Unexpected <class>: message``)."""
        self.task = None  # (an exception's frames refer to this call: no cycle through it)
        if self.done:
            return
        if task.cancelled():
            if self.expired and not self.cancelled:
                self.fail(DEADLINE_EXCEEDED, "Deadline Exceeded")
            else:
                self._end()
            return
        exc = task.exception()
        if exc is not None:
            log.error("unexpected error in gRPC method handler", exc_info=exc)
            self.fail(UNKNOWN, bounded_message(f"Unexpected {type(exc)}: {exc}"))
        else:  # pragma: no cover - the runners always end the call
            self._end()

    def _expire(self) -> None:
        self.timer = None
        if self.done:
            stream = self.stream
            if not stream.closed:  # the answer still waits for the client's window
                self.conn.reset(stream, h2.CANCEL)
            return
        self.expired = True
        if self.task is not None:
            self.task.cancel()
        else:
            self.fail(DEADLINE_EXCEEDED, "Deadline Exceeded")

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    # ------------------------------------------------------------------ running the handler

    async def _run_unary(self) -> None:
        """Deserialize the message (in the call's task: its context variables stay in the
        call), run the handler, answer. Cancellation and errors: :meth:`_task_done`."""
        message, self.message = self.message, None
        try:
            request = self.method.deserialize(message)
        finally:
            del message
            self.release(self.buffered)
        response = await self.method.behaviour(request, self.context)
        del request  # (freed before the answer is encoded and written)
        self._answer(response)

    async def _run_stream(self) -> None:
        """Run the handler over the request stream, sending its messages as they come (and
        waiting while the client's window or the transport holds them), then the status."""
        conn = self.conn
        stream = self.stream
        responses = self.method.behaviour(self.requests, self.context)
        try:
            async for response in responses:
                if stream.closed or not self._send_message(response, None, bounded=False):
                    break
                if stream.queued_bytes or conn.paused:
                    await stream.drained()
        finally:
            await responses.aclose()
        self._status()

    def _compression(self) -> bytes | None:
        algorithm = self.context.answer_compression
        if algorithm is None or algorithm == grpc.Compression.NoCompression:
            return None
        name = ENCODING_NAME.get(algorithm)
        if name is None or name not in self.headers.accept:
            return None
        return name

    def _send_message(self, response: Any, trailers: bytes | None, bounded: bool = True) -> bool:
        """Serialize and send ``response`` (with ``trailers`` when given); False when it
        could not be sent (the call has ended with a status). ``bounded``: refused when it
        would wait past the connection's send buffer (a streaming call's writer waits for
        room instead)."""
        data = self.method.serialize(response)
        limit = self.engine.max_message
        if len(data) > limit:
            self.fail(
                RESOURCE_EXHAUSTED,
                f"SERVER: Sent message larger than max ({len(data)} vs. {limit})",
            )
            return False
        stream = self.stream
        headers: bytes | None = None
        name = self._compression()
        if not stream.headers_sent:
            headers = RESPONSE_HEADERS
            if name is not None:
                headers += literal(b"grpc-encoding", name)
        flag = 0
        if name is not None:
            data = zlib.compress(data, wbits=31 if name == b"gzip" else 15)
            flag = 1
        conn = self.conn
        prefix = bytes((flag,)) + len(data).to_bytes(4, "big")
        if not conn.send(stream, headers, (prefix, data), trailers, bounded):
            self.fail(
                RESOURCE_EXHAUSTED,
                f"The answer ({len(data)} bytes) cannot wait: {conn.queued_bytes} bytes of "
                "answers already wait for this connection's flow-control window "
                f"(--grpc-max-send-buffer {conn.options.max_send_buffer}), or answers of all "
                "connections fill --grpc-max-send-buffer-total",
            )
            return False
        return True

    def _trailers(self) -> bytes:
        context = self.context
        block = (
            OK_TRAILERS
            if context.status_code == OK and not context.status_details
            else status_block(context.status_code, context.status_details)
        )
        if context.trailing_pairs:
            block += metadata_block(context.trailing_pairs)
        return block

    def _answer(self, response: Any) -> None:
        """End a unary call: its answer and trailers in one write, or a status."""
        if self.done:
            return
        context = self.context
        if context.status_code == OK:
            if response is None:
                context.status_code = INTERNAL
                context.status_details = "The method handler returned no response"
            else:
                if self._send_message(response, self._trailers()):
                    self._end()
                return
        self._status()

    def _status(self) -> None:
        """Send the call's status (trailers, or a trailers-only answer)."""
        if self.done:
            return
        stream = self.stream
        trailers = self._trailers()
        if not stream.headers_sent:
            trailers = RESPONSE_HEADERS + trailers
        self.conn.send(stream, None, None, trailers)
        self._end()

    def fail(self, code: int, details: str) -> None:
        """End the call with a status now (the handler, if running, is cancelled)."""
        if self.done:
            return
        context = self.context
        context.status_code = code
        context.status_details = details
        self._status()
        task = self.task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        if self.requests is not None:
            self.requests.end()

    def _end(self) -> None:
        if self.done:
            return
        self.done = True
        if self.buffered or self.reserved:
            self.release(max(self.buffered, self.reserved))
        if self.held:
            self.conn.hold_requests(-self.held)
            self.held = 0
        self.partial = None
        ended = self.engine.call_ended
        if ended is not None and not ended.done():
            ended.set_result(None)
        stream = self.stream
        if stream.closed or stream.trailers is None:
            self._cancel_timer()  # (else the deadline still bounds the queued answer)
        if not stream.closed and stream.trailers is None:  # ended without a status
            self.conn.reset(stream, h2.CANCEL)
        callbacks = self.context.done_callbacks
        if callbacks:
            for callback in callbacks:
                try:
                    callback(self.context)
                except Exception:
                    log.exception("gRPC call done callback failed")


if TYPE_CHECKING:

    def _implements(context: Context) -> CallContext:
        """mypy checks here that :class:`Context` is the handlers' :class:`CallContext`."""
        return context
