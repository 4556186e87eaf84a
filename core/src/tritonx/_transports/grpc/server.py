"""Starting the gRPC listener: ``grpc.aio`` server, Triton's channel options, health service."""

from __future__ import annotations

from typing import Any

import grpc

from tritonx._dataplane.dataplane import DataPlane
from tritonx._dataplane.header_forward import HeaderForward
from tritonx._runtime.security import listener_tls_files
from tritonx._transports.grpc.engine import Engine, build_methods
from tritonx._transports.grpc.health import SERVICE_NAME as HEALTH_SERVICE
from tritonx._transports.grpc.health import health_method_handlers
from tritonx._transports.grpc.memory import measuring
from tritonx._transports.grpc.receive import Limit, deserializer, receiving
from tritonx._transports.grpc.restricted import RestrictedProtocolInterceptor
from tritonx._transports.grpc.servicer import GRPCInferenceServicer
from tritonx.config import ServerSettings
from tritonx.proto import service_pb2_grpc

#: Triton's ``MAX_GRPC_MESSAGE_SIZE`` (INT32_MAX) for both directions.
MAX_GRPC_MESSAGE_SIZE = 2**31 - 1


def grpc_options(settings: ServerSettings) -> list[tuple[str, int]]:
    """The channel arguments Triton's gRPC server sets, from ``settings``.

    Message sizes are limited to ``grpc_max_message_size`` (default INT32_MAX, Triton's
    ``MAX_GRPC_MESSAGE_SIZE``); grpc's own decompression of request messages is off
    (``grpc.per_message_decompression`` 0): the deserializers inflate them, bounded
    (:mod:`tritonx._transports.grpc.receive`); ``SO_REUSEPORT`` follows ``--reuse-grpc-port``
    (off by default as in Triton; grpc's own default is on); the keepalive
    arguments follow the ``--grpc-keepalive-*`` / ``--grpc-http2-*`` flags (the keepalive
    timeout also as ``grpc.http2.ping_timeout_ms``, which is what bounds the wait for a ping's
    ACK in grpc core now), the connection age ``--grpc-max-connection-age[-grace]`` (ms)
    when set.
    ``grpc_infer_allocation_pool_size`` is accepted but has no effect: grpc.aio allocates
    one response message per call. The values are checked by
    :func:`tritonx._runtime.settings_check.validate_settings`.
    """
    max_size = min(int(settings.grpc_max_message_size), MAX_GRPC_MESSAGE_SIZE)
    return [
        ("grpc.max_send_message_length", max_size),
        ("grpc.max_receive_message_length", max_size),
        ("grpc.per_message_decompression", 0),
        ("grpc.so_reuseport", int(settings.reuse_grpc_port)),
        ("grpc.keepalive_time_ms", int(settings.grpc_keepalive_time)),
        ("grpc.keepalive_timeout_ms", int(settings.grpc_keepalive_timeout)),
        # grpc core waits for a ping's ACK ping_timeout_ms (60 s by default) whatever
        # keepalive_timeout_ms says (grpc/grpc#34647): an unanswered keepalive ping closed
        # the connection after a minute instead of --grpc-keepalive-timeout
        ("grpc.http2.ping_timeout_ms", int(settings.grpc_keepalive_timeout)),
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
        *(
            (name, int(value))
            for name, value in (
                ("grpc.max_connection_age_ms", settings.grpc_max_connection_age),
                ("grpc.max_connection_age_grace_ms", settings.grpc_max_connection_age_grace),
            )
            if value  # 0: not set (grpc's default, unlimited), as in Triton
        ),
    ]


#: ``--grpc-infer-response-compression-level`` → the algorithm grpc core's
#: ``grpc_compression_algorithm_for_level`` picks for a client that accepts gzip and deflate
#: (its ranking: gzip, deflate; low takes the first, medium the middle, high the last)
COMPRESSION_OF_LEVEL = {
    "none": None,
    "low": grpc.Compression.Gzip,
    "medium": grpc.Compression.Deflate,
    "high": grpc.Compression.Deflate,
}


def response_compression(level: str) -> grpc.Compression | None:
    """The algorithm of ``--grpc-infer-response-compression-level`` (None: not compressed;
    the level is one of :data:`COMPRESSION_OF_LEVEL`'s, checked by
    :func:`tritonx._runtime.settings_check.validate_settings`)."""
    return COMPRESSION_OF_LEVEL[level.lower()]


def listen_address(address: str, port: int) -> str:
    """``host:port`` for grpc, with brackets around IPv6 hosts."""
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return f"{address}:{port}"


def grpc_server_credentials(settings: ServerSettings) -> grpc.ServerCredentials | None:
    """``--grpc-use-ssl[-mutual]`` as tritonserver builds them (None: plain text).

    The server certificate and key, and the root certificate when given; mutual TLS
    requires a client certificate and verifies it against the root
    (``GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY``), otherwise none is
    requested.

    :raises TritonXError: INVALID_ARG when a file is missing or not valid PEM.
    """
    files = listener_tls_files(settings, "grpc")
    if files is None:
        return None
    return grpc.ssl_server_credentials(
        [(files.key, files.cert)],
        root_certificates=files.root or None,
        require_client_auth=files.mutual,
    )


#: The RPCs whose request messages are measured (:func:`tritonx._transports.grpc.memory.measuring`);
#: their handlers take :class:`~tritonx._transports.grpc.receive.Received` messages themselves.
MEASURED_RPCS = ("ModelInfer", "ModelStreamInfer")


def decompression_limit(settings: ServerSettings) -> Limit:
    """The size compressed request messages may inflate to: ``--grpc-max-decompressed-
    message-size``, or ``--grpc-max-message-size`` when that is smaller (both at least 1:
    :func:`tritonx._runtime.settings_check.validate_settings`).
    """
    size = int(settings.grpc_max_decompressed_message_size)
    max_size = min(int(settings.grpc_max_message_size), MAX_GRPC_MESSAGE_SIZE)
    if max_size < size:
        return Limit(max_size, "--grpc-max-message-size")
    return Limit(size)


class _Collector:
    """Stands for the server in the generated ``add_GRPCInferenceServiceServicer_to_server``
    and keeps its handlers with :mod:`tritonx._transports.grpc.receive`'s deserializers (the inference
    RPCs' measuring their messages)."""

    def __init__(self, limit: Limit) -> None:
        self.limit = limit
        self.services: dict[str, dict[str, grpc.RpcMethodHandler]] = {}

    def add_generic_rpc_handlers(self, handlers: tuple[Any, ...]) -> None:
        pass  # replaced by one built from the registered handlers

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        handlers = dict(handlers)
        for name, handler in handlers.items():
            if name in MEASURED_RPCS:
                parse = deserializer(handler.request_deserializer, self.limit)
                handlers[name] = handler._replace(request_deserializer=measuring(parse))
            else:
                handlers[name] = receiving(handler, self.limit)
        self.services[service] = handlers


def service_handlers(
    dataplane: DataPlane, settings: ServerSettings
) -> dict[str, dict[str, grpc.RpcMethodHandler]]:
    """Every RPC the gRPC listener serves, service → method → handler: the
    :class:`GRPCInferenceServicer` (header forwarding and response compression from
    ``settings``) and the health check, all receiving their messages through
    :mod:`tritonx._transports.grpc.receive` (compressed ones inflated up to :func:`decompression_limit`).
    Both engines serve these handlers."""
    forward = HeaderForward.of(
        settings.grpc_header_forward_pattern, "--grpc-header-forward-pattern"
    )
    compression = response_compression(settings.grpc_infer_response_compression_level)
    limit = decompression_limit(settings)
    collector = _Collector(limit)
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
        GRPCInferenceServicer(
            dataplane, forward, compression, int(settings.grpc_max_stream_in_flight)
        ),
        collector,
    )
    if not collector.services:  # pragma: no cover - tritonclient is pinned
        raise RuntimeError(
            "tritonclient's generated service code no longer registers its method "
            "handlers (add_registered_method_handlers): tritonx cannot install its "
            "request deserializers"
        )
    collector.services[HEALTH_SERVICE] = health_method_handlers(dataplane, limit)
    return collector.services


#: ``--grpc-engine`` values
GRPC_ENGINES = ("loop", "aio")


async def start_grpc_server(
    dataplane: DataPlane, settings: ServerSettings
) -> tuple[grpc.aio.Server | Engine, int]:
    """Build, bind and start the gRPC server; returns it and the bound port.

    ``--grpc-engine``: ``loop`` (the default) serves the handlers with tritonx's own HTTP/2
    framing on the event loop (:mod:`tritonx._transports.grpc.engine`), ``aio`` with grpcio's grpc.aio
    server (the paragraph below is about that one; the loop engine applies the same settings
    itself). ``settings.grpc_port`` 0 picks a free port. Requests sent compressed (gzip, deflate)
    are inflated by the deserializers, up to ``--grpc-max-decompressed-message-size``
    (:mod:`tritonx._transports.grpc.receive`); inference responses are compressed as
    ``--grpc-infer-response-compression-level`` says (default "none", as Triton), others not.
    TLS follows ``--grpc-use-ssl*``; ``--grpc-restricted-protocol`` adds an interceptor (none
    when nothing is restricted). The settings are checked by
    :func:`tritonx._runtime.settings_check.validate_settings` (``Server.start``).
    """
    services = service_handlers(dataplane, settings)
    max_size = min(int(settings.grpc_max_message_size), MAX_GRPC_MESSAGE_SIZE)
    if settings.grpc_engine == "loop":
        handlers = {
            f"/{service}/{name}": handler
            for service, methods in services.items()
            for name, handler in methods.items()
        }
        engine = Engine(build_methods(handlers, settings), settings, max_size)
        port = await engine.start(settings.grpc_address, settings.grpc_port, settings)
        return engine, port
    credentials = grpc_server_credentials(settings)
    interceptors = []
    if settings.grpc_restricted_protocol:
        interceptors.append(RestrictedProtocolInterceptor(settings.grpc_restricted_protocol))
    server = grpc.aio.server(options=grpc_options(settings), interceptors=interceptors)
    for service, methods in services.items():
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, methods),))
        server.add_registered_method_handlers(service, methods)
    address = listen_address(settings.grpc_address, settings.grpc_port)
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise OSError(f"failed to listen on gRPC address {address}: {exc}") from exc
    await server.start()
    return server, port
