"""The protocol limit of a Python endpoint: bare aiohttp and grpc.aio handlers that answer
the v2 protocol with canned add_sub responses (no decoding, no model).

    python benchmarks/bare_server.py --http-port 28800 --grpc-port 28801

It answers what perf_analyzer asks before sending load (server/model metadata and the model
config) and ``infer`` for one model, ``add_sub`` (INT32 [16] in and out, max_batch_size 16).
It counts the ``infer`` calls it answers (HTTP and gRPC, unary and streaming) in a
Triton-shaped ``GET /v2/models/add_sub/stats`` (success count only), so that run.py can
divide the process's CPU time by the requests it served.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import grpc
import numpy as np
from aiohttp import web
from google.protobuf import json_format, text_format

from tritonx.proto import model_config_pb2, service_pb2, service_pb2_grpc

CONFIG_PBTXT = """
name: "add_sub" platform: "onnxruntime_onnx" max_batch_size: 16
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""
CONFIG = text_format.Parse(CONFIG_PBTXT, model_config_pb2.ModelConfig())
CONFIG_JSON = json_format.MessageToJson(CONFIG, preserving_proto_field_name=True).encode()
TENSORS = [(n, "INT32", [-1, 16]) for n in ("INPUT0", "INPUT1")]
OUTPUTS = [(n, "INT32", [-1, 16]) for n in ("OUTPUT0", "OUTPUT1")]
METADATA = json.dumps(
    {
        "name": "add_sub",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": n, "datatype": d, "shape": s} for n, d, s in TENSORS],
        "outputs": [{"name": n, "datatype": d, "shape": s} for n, d, s in OUTPUTS],
    }
).encode()
RAW = np.arange(16, dtype=np.int32).tobytes()
HEADER = json.dumps(
    {
        "model_name": "add_sub",
        "model_version": "1",
        "outputs": [
            {
                "name": n,
                "datatype": "INT32",
                "shape": [1, 16],
                "parameters": {"binary_data_size": 64},
            }
            for n in ("OUTPUT0", "OUTPUT1")
        ],
    }
).encode()
HTTP_BODY = HEADER + RAW + RAW
#: infer calls answered (HTTP and gRPC)
SERVED = [0]


async def infer(request: web.Request) -> web.Response:
    await request.read()
    SERVED[0] += 1
    return web.Response(
        body=HTTP_BODY,
        headers={
            "Inference-Header-Content-Length": str(len(HEADER)),
            "Content-Type": "application/octet-stream",
        },
    )


async def config(request: web.Request) -> web.Response:
    return web.Response(body=CONFIG_JSON, content_type="application/json")


async def metadata(request: web.Request) -> web.Response:
    return web.Response(body=METADATA, content_type="application/json")


async def stats(request: web.Request) -> web.Response:
    success = {"count": SERVED[0], "ns": 0}
    return web.json_response({"model_stats": [{"inference_stats": {"success": success}}]})


async def ok(request: web.Request) -> web.Response:
    return web.Response()


async def server_metadata(request: web.Request) -> web.Response:
    return web.json_response({"name": "triton", "version": "2.73.0", "extensions": []})


class Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        response = service_pb2.ModelInferResponse(model_name="add_sub", model_version="1")
        for name in ("OUTPUT0", "OUTPUT1"):
            out = response.outputs.add(name=name, datatype="INT32")
            out.shape.extend([1, 16])
            response.raw_output_contents.append(RAW)
        self.response = response
        meta = service_pb2.ModelMetadataResponse(
            name="add_sub", versions=["1"], platform="onnxruntime_onnx"
        )
        for field, tensors in ((meta.inputs, TENSORS), (meta.outputs, OUTPUTS)):
            for n, d, s in tensors:
                field.add(name=n, datatype=d, shape=s)
        self.meta = meta

    async def ServerLive(self, request, context):  # type: ignore[no-untyped-def]
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):  # type: ignore[no-untyped-def]
        return service_pb2.ServerReadyResponse(ready=True)

    async def ModelReady(self, request, context):  # type: ignore[no-untyped-def]
        return service_pb2.ModelReadyResponse(ready=True)

    async def ServerMetadata(self, request, context):  # type: ignore[no-untyped-def]
        return service_pb2.ServerMetadataResponse(name="triton", version="2.73.0")

    async def ModelMetadata(self, request, context):  # type: ignore[no-untyped-def]
        return self.meta

    async def ModelConfig(self, request, context):  # type: ignore[no-untyped-def]
        return service_pb2.ModelConfigResponse(config=CONFIG)

    async def ModelInfer(self, request, context):  # type: ignore[no-untyped-def]
        SERVED[0] += 1
        return self.response

    async def ModelStreamInfer(self, request_iterator, context):  # type: ignore[no-untyped-def]
        async for request in request_iterator:
            SERVED[0] += 1
            reply = service_pb2.ModelStreamInferResponse(infer_response=self.response)
            reply.infer_response.id = request.id
            yield reply


async def low_level(request: web.BaseRequest) -> web.StreamResponse:
    """The same endpoints behind aiohttp's low-level server (no Application, no router)."""
    path = request.path
    if path.endswith("/infer"):
        return await infer(request)  # type: ignore[arg-type]
    if path.endswith("/stats"):
        return await stats(request)  # type: ignore[arg-type]
    if path.endswith("/config"):
        return await config(request)  # type: ignore[arg-type]
    if path == "/v2":
        return await server_metadata(request)  # type: ignore[arg-type]
    if path.startswith("/v2/health") or path.endswith("/ready"):
        return await ok(request)  # type: ignore[arg-type]
    return await metadata(request)  # type: ignore[arg-type]


async def main(http_port: int, grpc_port: int, low: bool = False) -> None:
    if low:
        runner: web.BaseRunner = web.ServerRunner(web.Server(low_level), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", http_port).start()
        await _grpc(grpc_port)
        return
    app = web.Application()
    app.router.add_post("/v2/models/{model}/infer", infer)
    app.router.add_post("/v2/models/{model}/versions/{v}/infer", infer)
    app.router.add_get("/v2/models/{model}/config", config)
    app.router.add_get("/v2/models/{model}", metadata)
    app.router.add_get("/v2/health/{what}", ok)
    app.router.add_get("/v2/models/{model}/ready", ok)
    app.router.add_get("/v2/models/{model}/stats", stats)
    app.router.add_get("/v2", server_metadata)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", http_port).start()
    await _grpc(grpc_port)


async def _grpc(grpc_port: int) -> None:
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(), server)
    server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    await server.start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http-port", type=int, default=28800)
    parser.add_argument("--grpc-port", type=int, default=28801)
    parser.add_argument(
        "--low-level",
        action="store_true",
        help="serve HTTP with aiohttp's low-level web.Server (no Application or router)",
    )
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.run(main(args.http_port, args.grpc_port, args.low_level))
    except ImportError:
        asyncio.run(main(args.http_port, args.grpc_port, args.low_level))
