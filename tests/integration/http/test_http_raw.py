"""Raw HTTP requests: Triton's exact paths, status codes and error bodies, and bad input.

After every bad request the shared server must still answer a good one (``check_serving``).
"""

from __future__ import annotations

import asyncio
import gzip
import struct
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import numpy as np
import orjson
import pytest

from tritonx._runtime.plugins import make_plugin_manager
from tritonx.server import Server
from tritonx.testing import identity, loopback_settings
from tritonx.testing.repository import ModelRepositoryBuilder

HCL = "Inference-Header-Content-Length"


@pytest.fixture
async def http(url: str) -> AsyncIterator[aiohttp.ClientSession]:
    """A raw aiohttp session on the shared server; checks it still serves afterwards."""
    async with aiohttp.ClientSession(
        f"http://{url}", auto_decompress=False, headers={"Accept-Encoding": "identity"}
    ) as session:
        yield session
        good = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [2], "data": [4, 5]}]}
        async with session.post("/v2/models/id_int32/infer", json=good) as resp:
            assert resp.status == 200
            assert (await resp.json())["outputs"][0]["data"] == [4, 5]


async def call(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None, **kw: Any
) -> tuple[int, Any, aiohttp.ClientResponse]:
    if body is not None and not isinstance(body, (bytes, bytearray)):
        body = orjson.dumps(body)
    async with http.request(method, path, data=body, **kw) as resp:
        raw = await resp.read()
        try:
            parsed = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            parsed = raw
        return resp.status, parsed, resp


async def infer(http: aiohttp.ClientSession, model: str, body: Any, **kw: Any) -> tuple[int, Any]:
    status, parsed, _ = await call(http, "POST", f"/v2/models/{model}/infer", body, **kw)
    return status, parsed


def tensor(
    name: str, datatype: str, shape: list[int], data: Any = None, **params: Any
) -> dict[str, Any]:
    t: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape}
    if data is not None:
        t["data"] = data
    if params:
        t["parameters"] = params
    return t


def binary_body(header: dict[str, Any], *blobs: bytes) -> tuple[bytes, dict[str, str]]:
    head = orjson.dumps(header)
    return head + b"".join(blobs), {HCL: str(len(head))}


# ---------------------------------------------------------------------------------- routing


async def test_paths_and_methods(http: aiohttp.ClientSession) -> None:
    # "/" is the status page (tests/integration/test_status_page.py: 404 when it is off)
    for path in ("/v2/", "/v2/nothing", "/v2/models/id_int32/versions/abc", "/v2/models"):
        status, body, resp = await call(http, "GET", path)
        assert (status, body) == (404, {"error": "Not Found"}), path
    for method, path in (
        ("POST", "/v2/health/ready"),
        ("POST", "/v2/health/live"),
        ("POST", "/v2"),
        ("GET", "/v2/models/id_int32/infer"),
        ("POST", "/v2/models/id_int32"),
        ("POST", "/v2/models/id_int32/config"),
        ("GET", "/v2/repository/index"),
        ("GET", "/v2/repository/models/id_int32/load"),
    ):
        status, body, _ = await call(http, method, path)
        assert (status, body) == (405, {"error": "Method Not Allowed"}), (method, path)
    status, body, resp = await call(http, "GET", "/v2/health/ready?x=1")
    assert status == 200 and body is None
    status, body, resp = await call(http, "GET", "/v2?test_1=1&test_2=2")
    assert status == 200 and body["name"] == "triton"
    assert resp.headers["Content-Type"].startswith("application/json")
    status, body, _ = await call(http, "GET", "/v2/models/nope/ready")
    assert (status, body) == (400, {"error": "Model version not ready"})
    status, body, _ = await call(http, "GET", "/v2/models/id_int32/versions/1/ready")
    assert status == 200
    status, body, _ = await call(http, "POST", "/v2/repository/other/index")
    assert (status, body) == (501, {"error": "'repository_name' specification is not supported"})
    status, body, _ = await call(http, "POST", "/v2/repository/index", {"ready": "yes"})
    assert (status, body) == (400, {"error": "Invalid value for 'ready': expected a boolean"})
    status, body, _ = await call(http, "POST", "/v2/repository/index", {"ready": True})
    assert status == 200 and all(r["state"] == "READY" for r in body)


async def test_config_json_numbers(http: aiohttp.ClientSession) -> None:
    status, body, _ = await call(http, "GET", "/v2/models/batched/versions/1/config")
    assert status == 200
    assert body["input"][0]["dims"] == [2, 3]
    assert body["max_batch_size"] == 8


# ---------------------------------------------------------------------------------- JSON data


async def test_nested_and_flat_data(http: aiohttp.ClientSession) -> None:
    for data in ([[[1, 2, 3], [4, 5, 6]]], [1, 2, 3, 4, 5, 6], [[1, 2, 3], [4, 5, 6]]):
        body = {"id": "n", "inputs": [tensor("INPUT0", "FP32", [1, 2, 3], data)]}
        status, out = await infer(http, "batched", body)
        assert status == 200, out
        assert out["id"] == "n"
        assert out["outputs"][0]["data"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        assert out["outputs"][0]["shape"] == [1, 2, 3]


async def test_json_datatypes_round_trip(http: aiohttp.ClientSession) -> None:
    cases = {
        "BOOL": [True, False],
        "UINT8": [0, 255],
        "UINT64": [0, 2**64 - 1],
        "INT8": [-128, 127],
        "INT64": [-(2**63), 2**63 - 1],
        "FP64": [0.5, -1e300],
        "FP32": [1, 2.5],
        "BYTES": ["hello", "\u00e9"],
    }
    for datatype, data in cases.items():
        body = {"inputs": [tensor("INPUT0", datatype, [2], data)]}
        status, out = await infer(http, f"id_{datatype.lower()}", body)
        assert status == 200, (datatype, out)
        assert out["outputs"][0]["data"] == data, datatype
        assert out["outputs"][0]["datatype"] == datatype


async def test_binary_both_directions(http: aiohttp.ClientSession) -> None:
    ints = np.array([1, -2, 3], dtype=np.int32)
    strs = [b"ab", b"\xff\x00"]
    raw_strs = b"".join(struct.pack("<I", len(s)) + s for s in strs)
    header = {
        "inputs": [
            tensor("INPUT0", "INT32", [3], binary_data_size=ints.nbytes),
            tensor("INPUT1", "BYTES", [2], binary_data_size=len(raw_strs)),
        ],
        "parameters": {"binary_data_output": True},
    }
    body, headers = binary_body(header, ints.tobytes(), raw_strs)
    async with http.post("/v2/models/multi/infer", data=body, headers=headers) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "application/octet-stream"
        payload = await resp.read()
        hl = int(resp.headers[HCL])
    head = orjson.loads(payload[:hl])
    sizes = [o["parameters"]["binary_data_size"] for o in head["outputs"]]
    assert sizes == [12, len(raw_strs)]
    assert payload[hl : hl + 12] == ints.tobytes()
    assert payload[hl + 12 :] == raw_strs


async def test_response_gzip_by_accept_encoding(http: aiohttp.ClientSession) -> None:
    body = {"inputs": [tensor("INPUT0", "INT32", [2], [1, 2])]}
    async with http.post(
        "/v2/models/id_int32/infer",
        data=gzip.compress(orjson.dumps(body)),
        headers={"Content-Encoding": "gzip", "Accept-Encoding": "deflate;q=0.5, gzip;q=0.9"},
    ) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Encoding"] == "gzip"
        out = orjson.loads(gzip.decompress(await resp.read()))
    assert out["outputs"][0]["data"] == [1, 2]
    status, out = await infer(http, "id_int32", b"xx", headers={"Content-Encoding": "br2"})
    assert (status, out) == (501, {"error": "Unsupported compression type"})


async def test_raw_binary_request(http: aiohttp.ClientSession) -> None:
    data = np.array([1.5, 2.5, 3.5], dtype=np.float32)
    async with http.post(
        "/v2/models/id_fp32/infer", data=data.tobytes(), headers={HCL: "0"}
    ) as resp:
        assert resp.status == 200
        payload = await resp.read()
        hl = int(resp.headers[HCL])
    assert orjson.loads(payload[:hl])["outputs"][0]["shape"] == [3]
    assert np.frombuffer(payload[hl:], np.float32).tolist() == data.tolist()


async def test_classification_raw(http: aiohttp.ClientSession) -> None:
    body = {
        "inputs": [tensor("INPUT0", "FP32", [4], [5, 1, 4, 5])],
        "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2}}],
    }
    status, out = await infer(http, "id_fp32", body)
    assert status == 200
    assert out["outputs"][0] == {
        "name": "OUTPUT0",
        "datatype": "BYTES",
        "shape": [2],
        "data": ["5.000000:0", "5.000000:3"],
    }


# ---------------------------------------------------------------------------------- bad input


BAD_JSON = [
    # (case, model, body, headers, status, message fragment)
    (
        "malformed json",
        "id_int32",
        b"notjson",
        {},
        500,
        "failed to parse the request JSON buffer: ",
    ),
    (
        "truncated json",
        "id_int32",
        b'{"inputs": [',
        {},
        500,
        "failed to parse the request JSON buffer: ",
    ),
    ("no inputs", "id_int32", {"id": "x"}, {}, 500, "Unable to parse 'inputs'"),
    ("id not a string", "id_int32", {"id": 3, "inputs": []}, {}, 500, "Unable to parse 'id'"),
    (
        "data count > shape",
        "id_int32",
        {"inputs": [tensor("INPUT0", "INT32", [2], [1, 2, 3])]},
        {},
        500,
        "Shape does not match true shape of 'data' field",
    ),
    (
        "data count < shape",
        "id_int32",
        {"inputs": [tensor("INPUT0", "INT32", [4], [1, 2, 3])]},
        {},
        500,
        "shape does not match true shape",
    ),
    (
        "ragged data",
        "id_int32",
        {"inputs": [tensor("INPUT0", "INT32", [4], [[1, 2], [3]])]},
        {},
        500,
        "shape does not match true shape",
    ),
    (
        "bytes count != shape",
        "id_bytes",
        {"inputs": [tensor("INPUT0", "BYTES", [3], ["a", "b"])]},
        {},
        400,
        "expected 3 string elements for inference input 'INPUT0' for model 'id_bytes', got 2",
    ),
    (
        "wrong JSON type",
        "id_int32",
        {"inputs": [tensor("INPUT0", "INT32", [2], [1, "2"])]},
        {},
        500,
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
    ),
    (
        "negative into unsigned",
        "id_uint8",
        {"inputs": [tensor("INPUT0", "UINT8", [2], [1, -2])]},
        {},
        500,
        "non-unsigned-integer",
    ),
    (
        "unknown datatype",
        "id_int32",
        {"inputs": [tensor("INPUT0", "INT33", [1], [1])]},
        {},
        400,
        "invalid datatype for input INPUT0",
    ),
    (
        "negative dim",
        "id_int32",
        {"inputs": [tensor("INPUT0", "INT32", [-1], [1])]},
        {},
        500,
        "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    (
        "overflowing dims",
        "id_int32",
        {"inputs": [tensor("INPUT0", "INT32", [2**62, 2**62], [1])]},
        {},
        400,
        "causes total element count to exceed maximum size of 9223372036854775807",
    ),
    (
        "dim above int64",
        "id_int32",
        {"inputs": [tensor("INPUT0", "INT32", [2**63], [1])]},
        {},
        400,
        "contains one or more invalid dimensions",
    ),
    (
        "duplicate input",
        "id_int32",
        {"inputs": [tensor("INPUT0", "INT32", [1], [1]), tensor("INPUT0", "INT32", [1], [2])]},
        {},
        400,
        "[request id: <id_unknown>] input 'INPUT0' already exists in request",
    ),
    (
        "no data field",
        "id_int32",
        {"inputs": [tensor("INPUT0", "INT32", [1])]},
        {},
        400,
        "Input must set only one of the following fields",
    ),
    (
        "data and binary",
        "id_int32",
        {"inputs": [tensor("INPUT0", "INT32", [1], [1], binary_data_size=4)]},
        {},
        400,
        "But set 'data' 'binary_data_size'",
    ),
    (
        "fp16 as json",
        "id_fp16",
        {"inputs": [tensor("INPUT0", "FP16", [1], [1.0])]},
        {},
        400,
        "receiving FP16 data via JSON is not supported",
    ),
    (
        "reserved parameter",
        "id_int32",
        {"parameters": {"triton_x": 1}, "inputs": [tensor("INPUT0", "INT32", [1], [1])]},
        {},
        400,
        "parameter keys starting with 'triton_' are reserved",
    ),
    (
        "parameter of bad type",
        "id_int32",
        {"parameters": {"p": [1]}, "inputs": [tensor("INPUT0", "INT32", [1], [1])]},
        {},
        400,
        "parameter 'p' has invalid type",
    ),
    (
        "unknown requested output",
        "id_int32",
        {"inputs": [tensor("INPUT0", "INT32", [1], [1])], "outputs": [{"name": "X"}]},
        {},
        400,
        "unexpected inference output 'X' for model 'id_int32'",
    ),
    (
        "duplicate requested output",
        "id_int32",
        {
            "inputs": [tensor("INPUT0", "INT32", [1], [1])],
            "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}],
        },
        {},
        400,
        "output 'OUTPUT0' already exists in request",
    ),
    (
        "unknown input",
        "id_int32",
        {"inputs": [tensor("INPUT9", "INT32", [1], [1])]},
        {},
        400,
        "unexpected inference input 'INPUT9' for model 'id_int32'",
    ),
]


@pytest.mark.parametrize(
    ("model", "body", "headers", "status", "fragment"),
    [case[1:] for case in BAD_JSON],
    ids=[case[0] for case in BAD_JSON],
)
async def test_bad_json_requests(
    http: aiohttp.ClientSession,
    model: str,
    body: Any,
    headers: dict[str, str],
    status: int,
    fragment: str,
) -> None:
    got_status, out = await infer(http, model, body, headers=headers)
    assert got_status == status, out
    if status != 200:
        assert set(out) == {"error"}
        assert fragment in out["error"]


async def test_json_depth_limit(http: aiohttp.ClientSession) -> None:
    deep: Any = [1]
    for _ in range(100):
        deep = [deep]
    status, out = await infer(http, "id_int32", {"inputs": [tensor("INPUT0", "INT32", [1], deep)]})
    assert status == 400
    assert "JSON nesting depth exceeds maximum allowed limit (100)" in out["error"]


async def test_unknown_model_and_version(http: aiohttp.ClientSession) -> None:
    body = {"inputs": [tensor("INPUT0", "INT32", [1], [1])]}
    status, out = await infer(http, "nope", body)
    assert (status, out) == (404, {"error": "Request for unknown model: 'nope' is not found"})
    status, out, _ = await call(http, "POST", "/v2/models/id_int32/versions/5/infer", body)
    assert status == 404 and "Request for unknown model" in out["error"]
    status, out = await infer(http, "decoupled", body)
    assert status == 501
    assert out["error"] == "HTTP end point doesn't support models with decoupled transaction policy"


async def test_bad_binary_requests(http: aiohttp.ClientSession) -> None:
    ints = np.arange(4, dtype=np.int32).tobytes()
    header = {"inputs": [tensor("INPUT0", "INT32", [4], binary_data_size=16)]}
    # header length larger than the body
    head = orjson.dumps(header)
    status, out = await infer(http, "id_int32", head + ints, headers={HCL: str(len(head) + 100)})
    assert status == 400 and "inference header size should be in range" in out["error"]
    status, out = await infer(http, "id_int32", head + ints, headers={HCL: "abc"})
    assert status == 400 and "Unable to parse Inference-Header-Content-Length" in out["error"]
    # binary data shorter than binary_data_size (truncated body)
    body, headers = binary_body(header, ints[:10])
    status, out = await infer(http, "id_int32", body, headers=headers)
    assert status == 400
    assert "unexpected size for input 'INPUT0', expecting 6 additional bytes" in out["error"]
    # more bytes than declared
    body, headers = binary_body(header, ints + b"xx")
    status, out = await infer(http, "id_int32", body, headers=headers)
    assert (status, out) == (
        400,
        {"error": "unexpected additional input data for model 'id_int32'"},
    )
    # binary size does not match the shape
    header = {"inputs": [tensor("INPUT0", "INT32", [3], binary_data_size=16)]}
    body, headers = binary_body(header, ints)
    status, out = await infer(http, "id_int32", body, headers=headers)
    assert status == 400
    assert (
        "input byte size mismatch for input 'INPUT0' for model 'id_int32'. Expected 12, got 16"
        in out["error"]
    )
    # binary input without the header length: the whole body is parsed as JSON
    status, out = await infer(http, "id_int32", head + ints)
    assert status == 500 and "failed to parse the request JSON buffer" in out["error"]
    # BYTES with a truncated element
    header = {"inputs": [tensor("INPUT0", "BYTES", [1], binary_data_size=6)]}
    body, headers = binary_body(header, struct.pack("<I", 5) + b"ab")
    status, out = await infer(http, "id_bytes", body, headers=headers)
    assert status == 400 and "string elements" in out["error"]


async def test_truncated_body_keeps_serving(url: str, http: aiohttp.ClientSession) -> None:
    host, port = url.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /v2/models/id_int32/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
        b'{"inputs": ['
    )
    await writer.drain()
    writer.write_eof()
    await asyncio.wait_for(reader.read(), 10)  # whatever comes back, then EOF
    writer.close()


# ---------------------------------------------------------------------------------- limits


@pytest.fixture
async def small_server(model_repository: ModelRepositoryBuilder) -> AsyncIterator[Server]:
    """A server with a 1 KiB ``--http-max-input-size``."""
    model_repository.add_identity("m", "INT32", dims=[-1])
    settings = loopback_settings(
        model_repository.root, http_max_input_size=1024, allow_grpc=False, allow_metrics=False
    )
    pm = make_plugin_manager(autoload=False, extra=[identity])
    async with Server(settings, plugin_manager=pm) as server:
        yield server


async def test_oversized_bodies(small_server: Server) -> None:
    async with aiohttp.ClientSession(f"http://{small_server.http_url}") as http:
        big = np.zeros(1000, dtype=np.int32)
        header = {"inputs": [tensor("INPUT0", "INT32", [1000], binary_data_size=big.nbytes)]}
        body, headers = binary_body(header, big.tobytes())
        status, out, _ = await call(http, "POST", "/v2/models/m/infer", body, headers=headers)
        assert status == 400  # binary data: Triton's "... exceeds the maximum allowed value ..."
        assert "exceeds the maximum allowed value of 1024 bytes" in out["error"]
        # compressed small, decompressed too large
        body = gzip.compress(
            orjson.dumps({"inputs": [tensor("INPUT0", "INT32", [900], [0] * 900)]})
        )
        assert len(body) < 1024
        status, out, _ = await call(
            http, "POST", "/v2/models/m/infer", body, headers={"Content-Encoding": "gzip"}
        )
        assert status == 400 and "Decompressed data size exceeds" in out["error"]
        # the server keeps serving
        status, out, _ = await call(
            http, "POST", "/v2/models/m/infer", {"inputs": [tensor("INPUT0", "INT32", [1], [7])]}
        )
        assert status == 200 and out["outputs"][0]["data"] == [7]
