"""``/v2/systemsharedmemory/...`` and ``/v2/cudasharedmemory/...``: register, unregister and
status of client shared-memory regions, as tritonserver's ``HandleSystemSharedMemory`` and
``HandleCudaSharedMemory`` answer them (``tritonx._dataplane.shared_memory`` does the work).

``status`` is GET, ``register`` and ``unregister`` are POST (else 405). Register and
unregister answer 501 "Client shared memory is disabled..." unless the server runs with
``--allow-client-shm=true``; status is always allowed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from tritonx._dataplane.shared_memory import (
    MemoryKind,
    RegionStatus,
    SharedMemoryManager,
    decode_raw_handle,
    disabled_error,
)
from tritonx._transports.http.errors import JSON_CONTENT_TYPE, internal, method_not_allowed
from tritonx._transports.http.json_tensor import NOT_OBJECT, NOT_STRING, NOT_UINT, is_uint, missing
from tritonx.errors import invalid_arg

#: Reads the request's JSON body (the routes' reader: size limit, timeouts, offloading).
ReadJson = Callable[[web.Request], Awaitable[Any]]


async def shared_memory_route(
    request: web.Request,
    manager: SharedMemoryManager,
    kind: str,
    region: str,
    action: str,
    read_json: ReadJson,
) -> web.StreamResponse:
    """Serve one shared-memory request: ``kind`` is ``system`` or ``cuda``, ``region`` the
    (decoded) region name or empty, ``action`` status / register / unregister."""
    if (request.method != "GET") if action == "status" else (request.method != "POST"):
        return method_not_allowed()
    memory = MemoryKind.SYSTEM if kind == "system" else MemoryKind.CUDA
    if action == "status":
        rows = [_status_json(row) for row in manager.status(memory, region)]
        return web.Response(body=orjson.dumps(rows), content_type=JSON_CONTENT_TYPE)
    if not manager.allow_client_shm:
        raise disabled_error()
    if action == "unregister":
        manager.unregister(memory, region)
    else:
        if not region:
            raise invalid_arg(f"'region name' is necessary to register {kind} shared memory region")
        doc = await read_json(request)
        if memory is MemoryKind.SYSTEM:
            _register_system(manager, region, doc)
        else:
            _register_cuda(manager, region, doc)
    return web.Response(status=200, content_type=JSON_CONTENT_TYPE)


def _status_json(row: RegionStatus) -> dict[str, Any]:
    if row.kind is MemoryKind.SYSTEM:
        return {"name": row.name, "key": row.key, "offset": row.offset, "byte_size": row.byte_size}
    return {"name": row.name, "device_id": row.device_id, "byte_size": row.byte_size}


def _register_system(manager: SharedMemoryManager, region: str, doc: Any) -> None:
    """``{"key": str, "offset": uint (optional), "byte_size": uint}``."""
    if not isinstance(doc, dict) or "key" not in doc:
        raise invalid_arg("Shared memory register request has no 'key' field")
    key = doc["key"]
    if not isinstance(key, str):
        raise internal(NOT_STRING)
    offset = doc.get("offset", 0)
    if not is_uint(offset):
        raise internal(NOT_UINT)
    if "byte_size" not in doc:
        raise invalid_arg("Shared memory register request has no 'byte_size' field")
    byte_size = doc["byte_size"]
    if not is_uint(byte_size):
        raise internal(NOT_UINT)
    manager.register_system(region, key, offset, byte_size)


def _register_cuda(manager: SharedMemoryManager, region: str, doc: Any) -> None:
    """``{"raw_handle": {"b64": str}, "device_id": uint, "byte_size": uint}``."""
    if not isinstance(doc, dict) or "raw_handle" not in doc:
        raise invalid_arg("Shared memory register request has no 'raw_handle' field")
    raw_handle = doc["raw_handle"]
    if not isinstance(raw_handle, dict):
        raise internal(NOT_OBJECT)
    if "b64" not in raw_handle:
        raise internal(missing("b64"))
    b64 = raw_handle["b64"]
    if not isinstance(b64, str):
        raise internal(NOT_STRING)
    values: dict[str, int] = {}
    for field in ("byte_size", "device_id"):
        if field not in doc:
            raise internal(missing(field))
        if not is_uint(doc[field]):
            raise internal(NOT_UINT)
        values[field] = doc[field]
    manager.register_cuda(region, decode_raw_handle(b64), values["device_id"], values["byte_size"])
