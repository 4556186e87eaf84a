"""Triton error codes → gRPC status codes (server ``src/grpc/grpc_utils.cc`` ``CodeToStatus``)."""

from __future__ import annotations

from typing import Any, NoReturn

import grpc

from tritonx.errors import Code, TritonXError

#: Triton's table: UNKNOWN→UNKNOWN, INTERNAL→INTERNAL, NOT_FOUND→NOT_FOUND,
#: INVALID_ARG→INVALID_ARGUMENT, UNAVAILABLE→UNAVAILABLE, UNSUPPORTED→UNIMPLEMENTED,
#: ALREADY_EXISTS→ALREADY_EXISTS, CANCELLED→CANCELLED.
STATUS: dict[Code, grpc.StatusCode] = {
    code: grpc.StatusCode[code.grpc_status_name] for code in Code
}


def status_code(error: TritonXError) -> grpc.StatusCode:
    """The gRPC status code Triton answers ``error`` with."""
    return STATUS[error.code]


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: BaseException) -> NoReturn:
    """End the RPC with ``error``'s status and message (non-TritonXErrors become INTERNAL)."""
    err = TritonXError.wrap(error)
    await context.abort(STATUS[err.code], err.message)
    raise AssertionError("unreachable: context.abort() returned")  # pragma: no cover
