"""Forwarded HTTP header values keep their bytes as Triton's frontend forwards them: trailing
spaces and tabs included (aiohttp's parser strips them; the listener gives them back), over
raw sockets so that the bytes on the wire are exactly the test's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence

import numpy as np
import orjson
import pytest

import tritonx
from tritonx import InferenceRequest, InferenceResponse, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, loopback_settings


class ParamsBackend(tritonx.Backend):
    """``PARAMS``: the JSON of the request's parameters."""

    name = "params_echo"

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return ParamsInstance()


class ParamsInstance(tritonx.ModelInstance):
    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        return [
            InferenceResponse(
                outputs={"PARAMS": np.array([json.dumps(r.parameters).encode()], dtype=object)}
            )
            for r in requests
        ]


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(ParamsBackend)


@pytest.fixture
async def server(model_repository: ModelRepositoryBuilder) -> AsyncIterator[Server]:
    model_repository.add(
        "params",
        backend="params_echo",
        inputs=[("INPUT0", "FP32", [1])],
        outputs=[("PARAMS", "BYTES", [1])],
    )
    settings = loopback_settings(
        model_repository.root,
        http_header_forward_pattern="^x-",
        allow_grpc=False,
        allow_metrics=False,
    )
    pm = make_plugin_manager(autoload=False, extra=[Plugin()])
    async with Server(settings, plugin_manager=pm) as started:
        yield started


BODY = orjson.dumps(
    {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
)


def _request(*headers: bytes) -> bytes:
    return (
        b"POST /v2/models/params/infer HTTP/1.1\r\nHost: x\r\n"
        + b"".join(h + b"\r\n" for h in headers)
        + b"Content-Length: %d\r\n\r\n" % len(BODY)
        + BODY
    )


async def _answer(reader: asyncio.StreamReader) -> dict[str, str]:
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    out = orjson.loads(await reader.readexactly(length))
    params = json.loads(out["outputs"][0]["data"][0])
    return {k: v for k, v in params.items() if k.lower().startswith("x-")}


async def test_forwarded_header_values_keep_trailing_whitespace(server: Server) -> None:
    host, port = server.http_url.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        # one request, whole
        writer.write(_request(b"X-Trail: abc  ", b"X-Tab: v\t", b"X-Plain: p"))
        await writer.drain()
        assert await _answer(reader) == {"X-Trail": "abc  ", "X-Tab": "v\t", "X-Plain": "p"}
        # the head in two writes, the line with the space in the first
        wire = _request(b"X-Split: s ", b"X-Other: o")
        cut = wire.index(b"X-Other")
        writer.write(wire[:cut])
        await writer.drain()
        writer.write(wire[cut:])
        await writer.drain()
        assert await _answer(reader) == {"X-Split": "s ", "X-Other": "o"}
        # two pipelined requests: only the second's value has a trailing space; then the
        # same header without one on the next request is forwarded without one
        writer.write(_request(b"X-Same: v") + _request(b"X-Same: v "))
        await writer.drain()
        assert await _answer(reader) == {"X-Same": "v"}
        assert await _answer(reader) == {"X-Same": "v "}
        writer.write(_request(b"X-Same: v"))
        await writer.drain()
        assert await _answer(reader) == {"X-Same": "v"}
    finally:
        writer.close()
