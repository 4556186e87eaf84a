"""``tritonx._transports.grpc.server``: listener options and addresses."""

from __future__ import annotations

from tritonx._transports.grpc.server import grpc_options, listen_address
from tritonx.config import ServerSettings


def test_listener_options() -> None:
    options = dict(grpc_options(ServerSettings()))
    assert options["grpc.max_send_message_length"] == 2**31 - 1
    assert options["grpc.so_reuseport"] == 0
    assert options["grpc.keepalive_time_ms"] == 7_200_000
    assert options["grpc.http2.max_ping_strikes"] == 2
    assert listen_address("0.0.0.0", 8001) == "0.0.0.0:8001"
    assert listen_address("::1", 0) == "[::1]:0"
