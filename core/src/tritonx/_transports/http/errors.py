"""Error responses exactly as Triton's HTTP frontend sends them: ``{"error": "<message>"}``
with the status :data:`STATUS` gives the error's code.

Messages can echo client input (model and tensor names, header values), so every error body
is bounded: a message longer than :data:`MAX_ERROR_CHARS` is cut there and ends with
``...`` (:func:`bounded_message`).
"""

from __future__ import annotations

import orjson
from aiohttp import web

from tritonx.errors import Code, TritonXError

JSON_CONTENT_TYPE = "application/json"

#: The longest error message sent to a client, in characters (then ``...`` is appended).
MAX_ERROR_CHARS = 4096
ELLIPSIS = "..."

#: Triton's table (server ``src/http_server.cc`` ``HttpCodeFromError``): INVALID_ARG → 400,
#: NOT_FOUND → 404, INTERNAL → 500, UNAVAILABLE → 503, UNSUPPORTED → 501, others → 400.
STATUS: dict[Code, int] = {
    Code.UNKNOWN: 400,
    Code.INTERNAL: 500,
    Code.NOT_FOUND: 404,
    Code.INVALID_ARG: 400,
    Code.UNAVAILABLE: 503,
    Code.UNSUPPORTED: 501,
    Code.ALREADY_EXISTS: 400,
    Code.CANCELLED: 400,
}


def status_code(error: TritonXError) -> int:
    """The HTTP status Triton answers ``error`` with."""
    return STATUS[error.code]


def bounded_message(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``message``, or its first ``limit`` characters followed by ``...`` when longer."""
    if len(message) <= limit:
        return message
    return message[:limit] + ELLIPSIS


def error_body(message: str) -> bytes:
    """The ``{"error": message}`` JSON body (message bounded)."""
    return orjson.dumps({"error": bounded_message(message)})


def error_response(message: str, status: int) -> web.Response:
    """A ``{"error": message}`` JSON response with ``status`` (message bounded)."""
    return web.Response(body=error_body(message), status=status, content_type=JSON_CONTENT_TYPE)


def response_for(error: TritonXError) -> web.Response:
    """The response for a :class:`TritonXError`, status from its code."""
    return error_response(error.message, STATUS[error.code])


def not_found() -> web.Response:
    """404 ``{"error":"Not Found"}`` for a path no route matches."""
    return error_response("Not Found", 404)


def method_not_allowed() -> web.Response:
    """405 ``{"error":"Method Not Allowed"}`` for a known path and a wrong method."""
    return error_response("Method Not Allowed", 405)


class BodyError(TritonXError):
    """The request body could not be read: too large, malformed, cut short or stalled.

    Answered with ``status`` (400, or 408 for a stalled body) and the connection closed, so
    the rest of the body is never read (nor inflated).
    """

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message, Code.INVALID_ARG)
        self.status = status


def internal(message: str) -> TritonXError:
    """An INTERNAL (500) error, as Triton uses for JSON parse and type-access failures."""
    return TritonXError(message, Code.INTERNAL)
