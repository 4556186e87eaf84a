"""A client's ``X-Request-ID`` is echoed on the answer of a successful inference: an HTTP
header (``/infer`` on the fast path and on aiohttp's, ``/generate``) and gRPC ModelInfer
trailing metadata; an answer to a request without one carries none. The step lives once in
:mod:`tritonx.pipeline`; each transport only writes ``Call.reply_headers``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import orjson
import pluggy
import pytest
from aiohttp import ClientSession

from tritonx import Server
from tritonx.proto import service_pb2, service_pb2_grpc
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

BODY = orjson.dumps(
    {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}]}
)


@pytest.fixture(params=[True, False], ids=["fast-path", "aiohttp"])
async def server(
    request: Any, model_repository: ModelRepositoryBuilder, plugin_manager: pluggy.PluginManager
) -> AsyncIterator[Server]:
    model_repository.add_identity("id", dims=[4])
    settings = loopback_settings(model_repository.root, http_fast_infer=request.param)
    async with Server(settings, plugin_manager=plugin_manager) as srv:
        yield srv


async def test_http_infer_echoes_the_request_id(server: Server) -> None:
    async with ClientSession() as session:
        url = f"http://{server.http_url}/v2/models/id/infer"
        async with session.post(url, data=BODY, headers={"X-Request-ID": "abc-1"}) as answer:
            assert answer.status == 200
            assert answer.headers["X-Request-ID"] == "abc-1"
            assert orjson.loads(await answer.read())["outputs"][0]["data"] == [1, 2, 3, 4]
        async with session.post(url, data=BODY) as answer:
            assert answer.status == 200
            assert "X-Request-ID" not in answer.headers
        url = f"http://{server.http_url}/v2/models/id/generate"
        body = orjson.dumps({"INPUT0": [1, 2, 3, 4]})
        async with session.post(url, data=body, headers={"X-Request-ID": "gen-2"}) as answer:
            assert answer.status == 200
            assert answer.headers["X-Request-ID"] == "gen-2"
        url = f"http://{server.http_url}/v2/models/id/generate_stream"
        async with session.post(url, data=body, headers={"X-Request-ID": "sse-3"}) as answer:
            assert answer.status == 200
            assert answer.headers["X-Request-ID"] == "sse-3"
            assert answer.headers["Content-Type"] == "text/event-stream; charset=utf-8"
            assert (await answer.read()).startswith(b"data: ")


async def test_a_failed_request_echoes_nothing(server: Server) -> None:
    async with ClientSession() as session:
        url = f"http://{server.http_url}/v2/models/id/infer"
        bad = orjson.dumps({"inputs": [{"name": "NOPE", "datatype": "FP32", "shape": [4]}]})
        async with session.post(url, data=bad, headers={"X-Request-ID": "abc-2"}) as answer:
            assert answer.status == 400
            assert "X-Request-ID" not in answer.headers


async def test_grpc_model_infer_echoes_the_request_id(server: Server) -> None:
    request = service_pb2.ModelInferRequest(model_name="id")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[4])
    request.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    async with grpc.aio.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelInfer(request, metadata=(("x-request-id", "rpc-3"),))
        response = await call
        assert response.model_name == "id"
        assert ("x-request-id", "rpc-3") in tuple(await call.trailing_metadata())
        call = stub.ModelInfer(request)
        await call
        assert all(key != "x-request-id" for key, _ in await call.trailing_metadata())


async def test_a_request_id_that_is_not_printable_ascii_is_not_echoed(server: Server) -> None:
    """Bytes outside printable ASCII would come back decoded differently by the fast path
    and by aiohttp's: neither echoes them."""
    host, port = server.http_url.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /v2/models/id/infer HTTP/1.1\r\nHost: x\r\nX-Request-ID: a\xff\xfeb\r\n"
        b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
    )
    head = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"x-request-id" not in head.lower()
