"""The standard ``grpc.health.v1.Health/Check`` RPC, as Triton serves it.

The two messages of ``grpc/health/v1/health.proto`` are built here from a descriptor in a
private descriptor pool, so tritonx needs no extra dependency (``grpcio-health-checking``)
and cannot clash with that package's registration if it is installed too. As in Triton, the
requested service name is ignored: SERVING when the server is ready, else NOT_SERVING;
``Watch`` is not implemented.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tritonx._dataplane.dataplane import DataPlane
from tritonx._transports.grpc.context import CallContext
from tritonx._transports.grpc.receive import Limit, receiving

SERVICE_NAME = "grpc.health.v1.Health"

UNKNOWN = 0
SERVING = 1
NOT_SERVING = 2
SERVICE_UNKNOWN = 3


def _build() -> tuple[type[Any], type[Any]]:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="tritonx/_transports/grpc/health/v1/health.proto",
        package="grpc.health.v1",
        syntax="proto3",
    )
    F = descriptor_pb2.FieldDescriptorProto
    req = fdp.message_type.add(name="HealthCheckRequest")
    req.field.add(name="service", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    resp = fdp.message_type.add(name="HealthCheckResponse")
    enum = resp.enum_type.add(name="ServingStatus")
    for label, number in (
        ("UNKNOWN", UNKNOWN),
        ("SERVING", SERVING),
        ("NOT_SERVING", NOT_SERVING),
        ("SERVICE_UNKNOWN", SERVICE_UNKNOWN),
    ):
        enum.value.add(name=label, number=number)
    resp.field.add(
        name="status",
        number=1,
        type=F.TYPE_ENUM,
        label=F.LABEL_OPTIONAL,
        type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    request_cls = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")
    )
    response_cls = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")
    )
    return request_cls, response_cls


#: ``grpc.health.v1.HealthCheckRequest`` / ``HealthCheckResponse`` message classes.
HealthCheckRequest, HealthCheckResponse = _build()


def health_method_handlers(
    dataplane: DataPlane, limit: Limit | None = None
) -> dict[str, grpc.RpcMethodHandler]:
    """The ``grpc.health.v1.Health`` method handlers (``Check``) serving from ``dataplane``;
    requests are received as the inference service's (:func:`tritonx._transports.grpc.receive.receiving`,
    compressed ones inflated up to ``limit``)."""

    async def check(request: Any, context: CallContext) -> Any:
        status = SERVING if await dataplane.server_ready_probed() else NOT_SERVING
        return HealthCheckResponse(status=status)

    return {
        "Check": receiving(
            grpc.unary_unary_rpc_method_handler(
                check,
                request_deserializer=HealthCheckRequest.FromString,
                response_serializer=HealthCheckResponse.SerializeToString,
            ),
            limit or Limit(),
        )
    }


def health_handler(dataplane: DataPlane, limit: Limit | None = None) -> grpc.GenericRpcHandler:
    """:func:`health_method_handlers` as a grpc generic handler."""
    return grpc.method_handlers_generic_handler(
        SERVICE_NAME, health_method_handlers(dataplane, limit)
    )
