"""``--grpc-restricted-protocol``: refuse RPCs of a restricted category without their metadata.

Installed as a server interceptor only when a restriction is configured, so an unrestricted
server pays nothing. As in tritonserver (``CommonCallData::ExecutePrecondition``,
``InferHandler``/``ModelStreamInferHandler``), the refusal is UNAVAILABLE
``This protocol is restricted, expecting header 'triton-grpc-protocol-<key>'``, decided from
the call's metadata before any request message is read (a refused stream reads nothing).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from tritonx._runtime.security import GRPC_RESTRICTED_HEADER_PREFIX, Restrictions

_SERVICE = "/inference.GRPCInferenceService/"

#: RPC method path → category (tritonserver ``src/grpc/grpc_server.cc`` ``Register*`` and
#: the infer handlers).
METHOD_CATEGORY: dict[str, str] = {
    _SERVICE + "ServerLive": "health",
    _SERVICE + "ServerReady": "health",
    _SERVICE + "ModelReady": "health",
    "/grpc.health.v1.Health/Check": "health",
    _SERVICE + "ServerMetadata": "metadata",
    _SERVICE + "ModelMetadata": "metadata",
    _SERVICE + "ModelInfer": "inference",
    _SERVICE + "ModelStreamInfer": "inference",
    _SERVICE + "ModelConfig": "model-config",
    _SERVICE + "ModelStatistics": "statistics",
    _SERVICE + "TraceSetting": "trace",
    _SERVICE + "LogSettings": "logging",
    _SERVICE + "SystemSharedMemoryStatus": "shared-memory",
    _SERVICE + "SystemSharedMemoryRegister": "shared-memory",
    _SERVICE + "SystemSharedMemoryUnregister": "shared-memory",
    _SERVICE + "CudaSharedMemoryStatus": "shared-memory",
    _SERVICE + "CudaSharedMemoryRegister": "shared-memory",
    _SERVICE + "CudaSharedMemoryUnregister": "shared-memory",
    _SERVICE + "RepositoryIndex": "model-repository",
    _SERVICE + "RepositoryModelLoad": "model-repository",
    _SERVICE + "RepositoryModelUnload": "model-repository",
}


def metadata_key(key: str) -> str:
    """The metadata key a client sends for a restriction configured with ``key``.

    gRPC metadata keys are lower case on the wire (HTTP/2), so the configured key is
    lower-cased: tritonserver compares it as given, which makes a key with capitals
    impossible to satisfy.
    """
    return GRPC_RESTRICTED_HEADER_PREFIX + key.lower()


def restriction_rules(restrictions: Restrictions) -> dict[str, tuple[str, str]]:
    """Method path → (metadata key, value) for the RPCs ``restrictions`` restrict."""
    rules: dict[str, tuple[str, str]] = {}
    for method, category in METHOD_CATEGORY.items():
        rule = restrictions.get(category)
        if rule is not None:
            rules[method] = (metadata_key(rule[0]), rule[1])
    return rules


def _ignore(data: bytes) -> None:
    return None


class RestrictedProtocolInterceptor(grpc.aio.ServerInterceptor):
    """Answers UNAVAILABLE to RPCs of a restricted category whose metadata is missing or
    differs (the first value of the key is compared exactly)."""

    def __init__(self, restrictions: Restrictions) -> None:
        self._rules = restriction_rules(restrictions)

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        rule = self._rules.get(handler_call_details.method)
        if rule is None:
            return await continuation(handler_call_details)
        key, expected = rule
        for name, value in handler_call_details.invocation_metadata or ():
            if name == key:
                if value == expected:
                    return await continuation(handler_call_details)
                break
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return _refusal(handler, f"This protocol is restricted, expecting header '{key}'")


def _refusal(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s kind that ends the call UNAVAILABLE with ``message`` and
    never decodes a request."""

    async def refuse(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)

    serializer = handler.response_serializer
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(
            refuse, request_deserializer=_ignore, response_serializer=serializer
        )
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(
            refuse, request_deserializer=_ignore, response_serializer=serializer
        )
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(
            refuse, request_deserializer=_ignore, response_serializer=serializer
        )
    return grpc.unary_unary_rpc_method_handler(
        refuse, request_deserializer=_ignore, response_serializer=serializer
    )
