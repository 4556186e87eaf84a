"""Starting the gRPC listener: ``grpc.aio`` server, Triton's channel options, health service."""

from __future__ import annotations

import grpc

from tritonx.config import ServerSettings
from tritonx.dataplane import DataPlane
from tritonx.grpc.health import health_handler
from tritonx.grpc.servicer import GRPCInferenceServicer
from tritonx.proto import service_pb2_grpc

#: Triton's ``MAX_GRPC_MESSAGE_SIZE`` (INT32_MAX) for both directions.
MAX_GRPC_MESSAGE_SIZE = 2**31 - 1


def grpc_options(settings: ServerSettings) -> list[tuple[str, int]]:
    """The channel arguments Triton's gRPC server sets, from ``settings``.

    Message sizes are unlimited (INT32_MAX); ``SO_REUSEPORT`` is off (Triton's
    ``--grpc-port-reuse`` defaults to false, grpc's own default is on); the keepalive
    arguments follow the ``--grpc-keepalive-*`` / ``--grpc-http2-*`` flags.
    ``grpc_infer_allocation_pool_size`` is accepted but has no effect: grpc.aio allocates
    one response message per call.
    """
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.so_reuseport", 0),
        ("grpc.keepalive_time_ms", int(settings.grpc_keepalive_time)),
        ("grpc.keepalive_timeout_ms", int(settings.grpc_keepalive_timeout)),
        (
            "grpc.keepalive_permit_without_calls",
            int(bool(settings.grpc_keepalive_permit_without_calls)),
        ),
        ("grpc.http2.max_pings_without_data", int(settings.grpc_http2_max_pings_without_data)),
        (
            "grpc.http2.min_ping_interval_without_data_ms",
            int(settings.grpc_http2_min_recv_ping_interval_without_data),
        ),
        ("grpc.http2.max_ping_strikes", int(settings.grpc_http2_max_ping_strikes)),
    ]


def listen_address(address: str, port: int) -> str:
    """``host:port`` for grpc, with brackets around IPv6 hosts."""
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return f"{address}:{port}"


async def start_grpc_server(
    dataplane: DataPlane, settings: ServerSettings
) -> tuple[grpc.aio.Server, int]:
    """Build, bind and start the gRPC server; returns it and the bound port.

    ``settings.grpc_port`` 0 picks a free port. Requests sent compressed (gzip, deflate)
    are decompressed by grpc; responses are not compressed (Triton's default level "none").
    """
    server = grpc.aio.server(options=grpc_options(settings))
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
        GRPCInferenceServicer(dataplane), server
    )
    server.add_generic_rpc_handlers((health_handler(dataplane),))
    address = listen_address(settings.grpc_address, settings.grpc_port)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise OSError(f"failed to listen on gRPC address {address}: {exc}") from exc
    await server.start()
    return server, port
