"""Triton error codes → gRPC status codes (server ``src/grpc/grpc_utils.cc`` ``CodeToStatus``)."""

from __future__ import annotations

from typing import Any, NoReturn

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


def status_code(error: TritonXError) -> grpc.StatusCode:
    """The gRPC status code Triton answers ``error`` with."""
    return STATUS[error.code]


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: BaseException) -> NoReturn:
    """End the RPC with ``error``'s status and message (non-TritonXErrors become INTERNAL)."""
    err = TritonXError.wrap(error)
    await context.abort(STATUS[err.code], err.message)
    raise AssertionError("unreachable: context.abort() returned")  # pragma: no cover
