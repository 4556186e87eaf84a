"""Triton error codes → gRPC status codes (server ``src/grpc/grpc_utils.cc`` ``CodeToStatus``),
and how a failed RPC reports its error.

A status travels in the ``grpc-message`` trailer, percent-encoded; clients refuse trailers past
their metadata limit (grpc's default: 8 KiB soft, 16 KiB hard), and would then see a transport
error instead of the status. Messages can echo client input (model and tensor names), so every
message sent is bounded by :data:`MAX_ERROR_BYTES` of its encoded form
(:func:`bounded_message`).

Handlers report errors with :func:`fail` and return, never with ``context.abort()``: abort
raises an exception that grpc keeps on the call while its traceback holds the handler's frame,
a reference cycle that kept every rejected request message (hundreds of MB) alive until a
cyclic garbage collection.
"""

from __future__ import annotations

from typing import Any

import grpc

from tritonx.errors import Code, TritonXError

#: Triton's table (INVALID_ARG → INVALID_ARGUMENT, UNSUPPORTED → UNIMPLEMENTED, the others
#: to the status of the same name).
STATUS: dict[Code, grpc.StatusCode] = {
    Code.UNKNOWN: grpc.StatusCode.UNKNOWN,
    Code.INTERNAL: grpc.StatusCode.INTERNAL,
    Code.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Code.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    Code.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Code.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    Code.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Code.CANCELLED: grpc.StatusCode.CANCELLED,
}

#: The largest error message sent, in bytes of its ``grpc-message`` (percent-encoded) form.
MAX_ERROR_BYTES = 4096
ELLIPSIS = "..."
#: Bytes grpc sends as they are in ``grpc-message``; every other byte becomes ``%XX``.
_PLAIN = bytes(b for b in range(0x20, 0x7F) if b != 0x25)


def status_code(error: TritonXError) -> grpc.StatusCode:
    """The gRPC status code Triton answers ``error`` with."""
    return STATUS[error.code]


def _encoded_size(data: bytes) -> int:
    return len(data) + 2 * len(data.translate(None, _PLAIN))


def bounded_message(message: str, limit: int = MAX_ERROR_BYTES) -> str:
    """``message``, cut (at a character) so that its percent-encoded UTF-8 form, ``...``
    included, is at most ``limit`` bytes; unchanged when it already fits."""
    if len(message) * 12 <= limit:  # 4 UTF-8 bytes per character, 3 encoded bytes each
        return message
    if _encoded_size(message.encode("utf-8", "replace")) <= limit:
        return message
    budget = limit - len(ELLIPSIS)
    end = 0
    for ch in message:
        cost = _encoded_size(ch.encode("utf-8", "replace"))
        if cost > budget:
            break
        budget -= cost
        end += 1
    return message[:end] + ELLIPSIS


def detached(error: BaseException) -> TritonXError:
    """A fresh TritonXError with ``error``'s code and bounded message, holding no traceback
    or chained exception (so no frame, and no request message, stays reachable from it)."""
    err = TritonXError.wrap(error)
    return TritonXError(bounded_message(err.message), err.code)


def fail(context: Any, error: BaseException) -> Any:
    """Set ``error`` (a TritonXError; anything else is INTERNAL) as the final status of the
    RPC of ``context``; returns None, which the handler returns (``return fail(context,
    exc)``): grpc sends no message with a non-OK status."""
    err = TritonXError.wrap(error)
    context.set_code(STATUS[err.code])
    context.set_details(bounded_message(err.message))
    return None
