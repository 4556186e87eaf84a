"""The ``/infer`` fast path: plain inference requests answered below aiohttp's ``web`` layer.

aiohttp builds, for every request, a parsed URL, a header multidict, a payload stream, a
``web.Request``, a task, a router match and a ``web.Response`` whose headers it serializes;
for a tiny model that is as much CPU as all of tritonx's own work. Here the listener's
:class:`~tritonx._transports.http.aiohttp_internals.Connection` frames the byte stream itself
(:func:`tritonx._transports.http.framing.parse_head`) and hands a plain ``POST .../infer``, once it is
here whole, to :class:`FastInfer`, which decodes it, queues it on the model's scheduler and
writes the answer from the scheduler's callback: no task, no coroutine, no aiohttp object per
request (a model behind the response cache takes one task, for the cache's coroutines).

Anything else goes to aiohttp unchanged, in order: every other endpoint, and an ``/infer``
request that is traced, compressed, chunked, larger than :data:`MAX_FAST_BODY`, HTTP/1.0,
sent with ``Expect`` or ``Connection: close``, refused by ``--http-restricted-api``, arriving
while aiohttp still serves an earlier request of the connection, or in parts while the
header timeout is off. The answers carry the same status, body and Triton headers either
way, and a ``Date``; aiohttp's also name it in ``Server``
(``tests/integration/http/test_http_fast_infer.py``). With ``--http-header-forward-pattern``
the server starts no fast path (forwarded headers keep the names aiohttp read).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from http import HTTPStatus
from typing import Protocol
from urllib.parse import unquote

from tritonx._dataplane.dataplane import DataPlane
from tritonx._transports.http.decode import OFFLOAD_JSON_BYTES, decode_body
from tritonx._transports.http.encode import answer_encoder, heavy_response, response_encoding
from tritonx._transports.http.errors import JSON_CONTENT_TYPE, STATUS, error_body
from tritonx._transports.http.exchange import FieldHeaders
from tritonx._transports.http.framing import Head
from tritonx.config import ServerSettings
from tritonx.errors import Code, TritonXError
from tritonx.pipeline import Pipeline

log = logging.getLogger("tritonx.http")

#: Bodies up to this size may take the fast path: never decoded off the loop
#: (:func:`tritonx._transports.http.decode.heavy_body` is false up to it).
MAX_FAST_BODY = OFFLOAD_JSON_BYTES
#: RFC 3986 path characters; a target with others is aiohttp's to refuse or route
_PCHAR = rb"[A-Za-z0-9\-._~%!$&'()*+,;=:@]"
_INFER_PATH = re.compile(
    rb"/v2/models/("
    + _PCHAR
    + rb"+)(?:/versions/([0-9]+))?/infer(?:\?["
    + _PCHAR[1:-1]
    + rb"/?]*)?"
)
_REASONS = {status.value: status.phrase for status in HTTPStatus}

#: Headers whose presence sends an ``/infer`` request to aiohttp (``Connection`` unless it
#: is ``keep-alive``).
_SLOW_HEADERS = (b"content-encoding", b"expect", b"connection")


_date_second = 0
_date_line = ""


def _date() -> str:
    """The ``Date`` header line (RFC 9110 asks an origin server with a clock for one),
    formatted once a second as aiohttp does."""
    global _date_second, _date_line
    now = int(time.time())
    if now != _date_second:
        _date_second, _date_line = now, f"Date: {formatdate(now, usegmt=True)}\r\n"
    return _date_line


def render(
    status: int, content_type: str, body: bytes | bytearray, extra: str = ""
) -> list[bytes | bytearray]:
    """The bytes of an HTTP/1.1 answer (``extra``: more header lines, each ending CRLF)."""
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
        f"{extra}{_date()}Content-Length: {len(body)}\r\n\r\n"
    ).encode("latin-1")
    if len(body) < 16384:
        return [head + body]
    return [head, body]


def render_error(message: str, status: int) -> list[bytes | bytearray]:
    """Triton's ``{"error": message}`` answer (the message bounded as on the aiohttp path)."""
    return render(status, JSON_CONTENT_TYPE, error_body(message))


#: Sends an answer's bytes and ends the request on the connection.
Send = Callable[[list[bytes | bytearray]], None]


class FastCall(Protocol):
    """One request in flight on the fast path."""

    def cancel(self) -> None:
        """The client went away: drop the request; its answer is not sent."""


def _render_answer(
    answer: tuple[bytes | bytearray, dict[str, str]], more: tuple[tuple[str, str], ...]
) -> list[bytes | bytearray]:
    payload, headers = answer
    headers.update(more)
    content_type = headers.pop("Content-Type")
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return render(200, content_type, payload, extra)


def answer_for(error: BaseException) -> list[bytes | bytearray]:
    """The answer to a failed request: Triton's status and message for a TritonXError, 500
    with the message for anything else (a bug: logged, and the server keeps serving)."""
    if isinstance(error, TritonXError):
        return render_error(error.message, STATUS[error.code])
    log.error("unexpected error answering an inference request", exc_info=error)
    return render_error(str(error) or type(error).__name__, 500)


class FastInfer:
    """The fast path of one HTTP listener: which requests it takes (:meth:`route`) and how
    it serves them (:meth:`call`).

    :param dataplane: the server's data plane.
    :param settings: the listener's settings (``http_max_input_size``, the ``inference``
        rule of ``http_restricted_api``).
    """

    __slots__ = ("_dataplane", "_pipeline", "_rule", "limit")

    def __init__(self, dataplane: DataPlane, settings: ServerSettings) -> None:
        self._dataplane = dataplane
        self._pipeline = Pipeline(dataplane, "http")
        #: the largest body this listener accepts (``--http-max-input-size``)
        self.limit = settings.http_max_input_size
        rule = settings.http_restricted_api.get("inference")
        self._rule = None if rule is None else (rule[0].lower().encode(), rule[1].encode())

    def route(self, head: Head) -> tuple[str, str] | None:
        """``(model, version)`` when the fast path serves ``head``'s request (its body has
        arrived whole); None to leave it to aiohttp."""
        if head.method != b"POST" or head.version != b"HTTP/1.1" or not head.plain:
            return None
        if head.length > MAX_FAST_BODY or head.length > self.limit:
            return None
        fields = head.fields
        for name in _SLOW_HEADERS:
            if name in fields and (name != b"connection" or fields[name].lower() != b"keep-alive"):
                return None
        if self._rule is not None and fields.get(self._rule[0]) != self._rule[1]:
            return None  # aiohttp answers the 403
        if b"content-length" not in fields:
            return None
        match = _INFER_PATH.fullmatch(head.target)
        if match is None or self._dataplane.tracer.active:
            return None
        version = match.group(2)
        return (
            unquote(match.group(1).decode("utf-8", "surrogateescape")),
            version.decode() if version is not None else "",
        )

    def call(
        self, model: str, version_str: str, head: Head, body: bytearray, send: Send
    ) -> FastCall | None:
        """Serve one request: decode and queue it, and answer through ``send`` when its
        response comes. Returns the call while it is in flight (to cancel it when the
        client goes away), or None when it was answered already (a refused request)."""
        if log.isEnabledFor(logging.DEBUG):  # --log-verbose 1, as on aiohttp's path
            log.debug("HTTP request: POST %s", head.target.split(b"?", 1)[0].decode("latin-1"))
        pipeline = self._pipeline
        fields = head.fields
        try:
            resolved = pipeline.resolve_now(model, version_str)
            if resolved is None:  # --model-load-on-demand: served once its model is loaded
                return _Loading(
                    functools.partial(pipeline.resolve_loaded, model, version_str),
                    functools.partial(self.call, model, version_str, head, body, send),
                    send,
                )
            served, version = resolved
            value = fields.get(b"inference-header-content-length")
            # a body of at most MAX_FAST_BODY bytes is never heavy: decoded here, on the loop
            decoded = decode_body(
                body,
                None if value is None else value.decode("latin-1"),
                served.config,
                model,
                version,
                self.limit,
                pipeline.dataplane.shared_memory,
            )
            del body
            call = pipeline.admit(served, decoded, FieldHeaders(fields))
            accept = fields.get(b"accept-encoding")
            encode = answer_encoder(
                decoded,
                served.config,
                served.labels,
                response_encoding(None if accept is None else accept.decode("latin-1")),
            )
            call.start(
                encode,
                heavy_response,
                lambda answer: send(_render_answer(answer, call.reply_headers)),
                lambda error: send(answer_for(error)),
            )
        except Exception as exc:
            if not isinstance(exc, TritonXError) or exc.code is Code.INTERNAL:
                log.debug("fast /infer path refused a request", exc_info=exc)
            send(answer_for(exc))
            return None
        return call


class _Loading:
    """A fast request whose model is not loaded (``--model-load-on-demand``): a task awaits
    ``load()`` (the model's load), then ``serve()`` serves the request (or ``send`` answers
    the load's failure)."""

    __slots__ = ("_call", "_task")

    def __init__(
        self,
        load: Callable[[], Awaitable[object]],
        serve: Callable[[], FastCall | None],
        send: Send,
    ) -> None:
        self._call: FastCall | None = None
        self._task = asyncio.get_running_loop().create_task(self._serve(load, serve, send))

    async def _serve(
        self,
        load: Callable[[], Awaitable[object]],
        serve: Callable[[], FastCall | None],
        send: Send,
    ) -> None:
        try:
            await load()
        except Exception as exc:
            send(answer_for(exc))
            return
        self._call = serve()

    def cancel(self) -> None:
        self._task.cancel()
        if self._call is not None:
            self._call.cancel()
