"""Error responses exactly as Triton's HTTP frontend sends them: ``{"error": "<message>"}``
with the status from the error code (INVALID_ARG → 400, NOT_FOUND → 404, INTERNAL → 500,
UNAVAILABLE → 503, UNSUPPORTED → 501)."""

from __future__ import annotations

import orjson
from aiohttp import web

from tritonx.errors import Code, TritonXError

JSON_CONTENT_TYPE = "application/json"


def error_response(message: str, status: int) -> web.Response:
    """A ``{"error": message}`` JSON response with ``status``."""
    return web.Response(
        body=orjson.dumps({"error": message}),
        status=status,
        content_type=JSON_CONTENT_TYPE,
    )


def response_for(error: TritonXError) -> web.Response:
    """The response for a :class:`TritonXError`, status from its code."""
    return error_response(error.message, error.code.http_status)


def not_found() -> web.Response:
    """404 ``{"error":"Not Found"}`` for a path no route matches."""
    return error_response("Not Found", 404)


def method_not_allowed() -> web.Response:
    """405 ``{"error":"Method Not Allowed"}`` for a known path and a wrong method."""
    return error_response("Method Not Allowed", 405)


def internal(message: str) -> TritonXError:
    """An INTERNAL (500) error, as Triton uses for JSON parse and type-access failures."""
    return TritonXError(message, Code.INTERNAL)
