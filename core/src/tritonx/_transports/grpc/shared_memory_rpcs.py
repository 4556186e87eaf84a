"""The shared-memory RPCs of ``inference.GRPCInferenceService``: the status, registration and
unregistration of system and CUDA regions, each kind's three RPCs built from one pattern."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from tritonx._dataplane.shared_memory import (
    MemoryKind,
    RegionStatus,
    SharedMemoryManager,
    disabled_error,
)
from tritonx._transports.grpc.context import CallContext
from tritonx._transports.grpc.errors import fail
from tritonx.errors import TritonXError
from tritonx.proto import service_pb2

#: An RPC method of the servicer: ``(self, request, context)`` to the response.
RPC = Callable[[Any, Any, CallContext], Coroutine[Any, Any, Any]]


def _status_rpc(
    kind: MemoryKind,
    response: type[Any],
    fields: Callable[[RegionStatus], dict[str, Any]],
    doc: str,
) -> RPC:
    """The status RPC of ``kind``'s regions (all, or the one named): each region's name and
    size, and the kind's own ``fields``."""

    async def rpc(self: SharedMemoryRPCs, request: Any, context: CallContext) -> Any:
        try:
            rows = self.dataplane.shared_memory.status(kind, request.name)
        except TritonXError as exc:
            return fail(context, exc)
        answer = response()
        for row in rows:
            answer.regions[row.name].CopyFrom(
                answer.RegionStatus(name=row.name, byte_size=row.byte_size, **fields(row))
            )
        return answer

    rpc.__doc__ = doc
    return rpc


def _change_rpc(
    change: Callable[[SharedMemoryManager, Any], None], response: type[Any], doc: str
) -> RPC:
    """A register or unregister RPC (``change`` applies the request): refused unless
    ``--allow-client-shm``."""

    async def rpc(self: SharedMemoryRPCs, request: Any, context: CallContext) -> Any:
        shm = self.dataplane.shared_memory
        try:
            if not shm.allow_client_shm:
                raise disabled_error()
            change(shm, request)
        except TritonXError as exc:
            return fail(context, exc)
        return response()

    rpc.__doc__ = doc
    return rpc


class SharedMemoryRPCs:
    """The shared-memory RPCs, for the servicer to inherit (it sets ``dataplane``)."""

    #: the server's data plane (its ``shared_memory`` holds the regions)
    dataplane: Any

    SystemSharedMemoryStatus = _status_rpc(
        MemoryKind.SYSTEM,
        service_pb2.SystemSharedMemoryStatusResponse,
        lambda row: {"key": row.key, "offset": row.offset},
        "The registered system regions (all, or the one named): name, key, offset, size.",
    )
    SystemSharedMemoryRegister = _change_rpc(
        lambda shm, r: shm.register_system(r.name, r.key, r.offset, r.byte_size),
        service_pb2.SystemSharedMemoryRegisterResponse,
        "Register a POSIX shared-memory object (needs ``--allow-client-shm``).",
    )
    SystemSharedMemoryUnregister = _change_rpc(
        lambda shm, r: shm.unregister(MemoryKind.SYSTEM, r.name),
        service_pb2.SystemSharedMemoryUnregisterResponse,
        "Unregister one system region, or all of them with an empty name.",
    )
    CudaSharedMemoryStatus = _status_rpc(
        MemoryKind.CUDA,
        service_pb2.CudaSharedMemoryStatusResponse,
        lambda row: {"device_id": row.device_id},
        "The registered CUDA regions (all, or the one named): name, device, size.",
    )
    CudaSharedMemoryRegister = _change_rpc(
        lambda shm, r: shm.register_cuda(r.name, r.raw_handle, r.device_id, r.byte_size),
        service_pb2.CudaSharedMemoryRegisterResponse,
        "Open a CUDA IPC handle as a region (needs ``--allow-client-shm``, cuda-python and a "
        'GPU; else Triton\'s "GPUs not supported" error).',
    )
    CudaSharedMemoryUnregister = _change_rpc(
        lambda shm, r: shm.unregister(MemoryKind.CUDA, r.name),
        service_pb2.CudaSharedMemoryUnregisterResponse,
        "Unregister one CUDA region, or all of them with an empty name.",
    )


__all__ = ["SharedMemoryRPCs"]
