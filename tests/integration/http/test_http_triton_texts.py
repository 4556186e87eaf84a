"""HTTP texts and behaviours clients match, as Triton's HTTP server (``src/http_server.cc``)
has them: ``--http-max-input-size`` per kind of body, a body sent with both
``Content-Length`` and ``Transfer-Encoding: chunked`` (de-chunked), ``generate`` with
repeated input keys and zero-element outputs, and the load error of a backend that is not
installed. Raw sockets where the wire matters, tritonclient elsewhere."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import numpy as np
import orjson
import pytest
import tritonclient.http.aio as httpclient

from tritonx import Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, identity, loopback_settings

HINT = "Use --http-max-input-size to increase the limit."


@pytest.fixture
async def server(model_repository: ModelRepositoryBuilder) -> AsyncIterator[Server]:
    """A 1 KiB ``--http-max-input-size``; an INT32 identity ``m``, a BYTES one ``s``, and
    ``nobackend`` whose backend is not installed."""
    model_repository.add_identity("m", "INT32", dims=[-1])
    model_repository.add_identity("s", "BYTES", dims=[-1])
    model_repository.add(
        "nobackend",
        backend="zzz",
        inputs=[("INPUT0", "INT32", [1])],
        outputs=[("OUTPUT0", "INT32", [1])],
    )
    settings = loopback_settings(
        model_repository.root, http_max_input_size=1024, allow_grpc=False, allow_metrics=False
    )
    pm = make_plugin_manager(autoload=False, extra=[identity])
    async with Server(settings, plugin_manager=pm) as started:
        yield started


async def _post(
    server: Server, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    async with aiohttp.ClientSession(f"http://{server.http_url}") as http:
        async with http.post(path, data=body, headers=headers or {}) as resp:
            raw = await resp.read()
            try:
                return resp.status, orjson.loads(raw)
            except orjson.JSONDecodeError:  # a generate_stream answer: events
                return resp.status, raw


def _json_body(count: int) -> bytes:
    inputs = [{"name": "INPUT0", "datatype": "INT32", "shape": [count], "data": [0] * count}]
    return orjson.dumps({"inputs": inputs})


async def test_over_the_input_size_each_kind_of_body_has_tritons_text(server: Server) -> None:
    # a JSON body: Triton's EVBufferToJson text
    body = _json_body(600)
    status, out = await _post(server, "/v2/models/m/infer", body)
    assert status == 400
    assert out["error"] == (
        f"request JSON size of {len(body)} bytes exceeds the maximum allowed input size of "
        f"1024 bytes. {HINT}"
    )
    # a raw binary body (Inference-Header-Content-Length: 0): Triton's EVBufferToRawInput text
    raw = np.zeros(300, np.int32).tobytes()
    status, out = await _post(
        server, "/v2/models/m/infer", raw, {"Inference-Header-Content-Length": "0"}
    )
    assert status == 400
    assert out["error"] == (
        f"Raw input has a byte_size ({len(raw)} bytes) that exceeds the maximum allowed value "
        f"of 1024 bytes. {HINT}"
    )
    # a JSON header with binary data: "... exceeds the maximum allowed value ..."
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "INT32",
                    "shape": [300],
                    "parameters": {"binary_data_size": 1200},
                }
            ]
        }
    )
    status, out = await _post(
        server,
        "/v2/models/m/infer",
        header + raw,
        {"Inference-Header-Content-Length": str(len(header))},
    )
    assert status == 400
    assert "exceeds the maximum allowed value of 1024 bytes. " + HINT in out["error"]
    # generate: a JSON body
    body = orjson.dumps({"INPUT0": [0] * 600})
    status, out = await _post(server, "/v2/models/m/generate", body)
    assert status == 400
    assert out["error"].startswith(f"request JSON size of {len(body)} bytes exceeds the maximum")


def _chunked(body: bytes, pieces: int) -> bytes:
    size = -(-len(body) // pieces)
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def _read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


async def test_content_length_with_chunked_transfer_encoding_is_dechunked(
    server: Server,
) -> None:
    """Some clients send a manually chunked (gzip) body with a Content-Length: Triton's
    server de-chunks it (llhttp would refuse it); the connection serves on."""
    host, port = server.http_url.rsplit(":", 1)
    payload = orjson.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [3], "data": [4, 5, 6]}]}
    )
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        for compressed, pieces in ((True, 3), (False, 1), (False, 2)):
            wire = _chunked(gzip.compress(payload) if compressed else payload, pieces)
            head = (
                b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\n"
                + (b"Content-Encoding: gzip\r\n" if compressed else b"")
                + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(wire)
            )
            if pieces == 2:  # the body arrives after the head
                writer.write(head)
                await writer.drain()
                writer.write(wire)
            else:
                writer.write(head + wire)
            await writer.drain()
            status, body = await _read_response(reader)
            assert status.startswith(b"HTTP/1.1 200"), (status, body)
            assert orjson.loads(body)["outputs"][0]["data"] == [4, 5, 6]
    finally:
        writer.close()


async def test_content_length_with_chunked_over_the_input_size_is_not_held(
    server: Server,
) -> None:
    """A Content-Length + chunked head declaring more than --http-max-input-size is answered
    400 at once: its body is never buffered waiting to be de-chunked."""
    host, port = server.http_url.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: 999999999999\r\nTransfer-Encoding: chunked\r\n\r\n"
            + _chunked(b"x" * 64, 1)
        )
        await writer.drain()
        # (held instead, it would wait for the 60 s header deadline and then be dropped)
        status = await reader.readuntil(b"\r\n")
        assert b" 400 " in status, status
    finally:
        writer.close()


@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
async def test_generate_refuses_a_repeated_input_as_triton(server: Server, endpoint: str) -> None:
    # Triton's QA cases (L0_http generate_endpoint_test.py), with INPUT0/INPUT1 of "multi"
    for body, name in (
        (b'{"INPUT0": [1], "INPUT0": [2]}', "INPUT0"),
        (b'{"INPUT0": [1], "x": 1, "INPUT0": [2], "INPUT0": [3]}', "INPUT0"),
    ):
        status, out = await _post(server, f"/v2/models/m/{endpoint}", body)
        assert status == 400, body
        assert out == {
            "error": f"[request id: <id_unknown>] input '{name}' already exists in request"
        }
    # a value equal to an input's name is no repetition
    status, out = await _post(server, f"/v2/models/s/{endpoint}", b'{"INPUT0": "INPUT0"}')
    assert status == 200, out


async def test_generate_answers_zero_element_outputs(server: Server) -> None:
    for model in ("m", "s"):
        status, out = await _post(server, f"/v2/models/{model}/generate", b'{"INPUT0": []}')
        assert status == 200
        assert out["OUTPUT0"] == []  # Triton: an empty array (element count 0)


async def test_a_backend_not_installed_has_tritons_reason(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        index = await client.get_model_repository_index()
    finally:
        await client.close()
    (row,) = [r for r in index if r["name"] == "nobackend"]
    assert row["state"] == "UNAVAILABLE"
    assert row["reason"] == (  # the version's, as Triton's TritonModel::Create fails it
        "Invalid argument: unable to find backend library for backend 'zzz', try specifying "
        "runtime on the model configuration."
    )
