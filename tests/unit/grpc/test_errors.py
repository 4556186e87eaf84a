"""``tritonx._transports.grpc.errors``: Triton's error code → gRPC status table."""

from __future__ import annotations

from tritonx._transports.grpc.errors import STATUS, status_code
from tritonx.errors import Code, TritonXError


def test_status_table_matches_triton() -> None:
    import grpc

    assert STATUS == {
        Code.UNKNOWN: grpc.StatusCode.UNKNOWN,
        Code.INTERNAL: grpc.StatusCode.INTERNAL,
        Code.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
        Code.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
        Code.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
        Code.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
        Code.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
        Code.CANCELLED: grpc.StatusCode.CANCELLED,
    }
    assert status_code(TritonXError("x", Code.UNSUPPORTED)) is grpc.StatusCode.UNIMPLEMENTED
