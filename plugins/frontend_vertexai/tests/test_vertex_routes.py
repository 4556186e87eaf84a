"""The Vertex AI frontend's routes on one server (Triton's qa/L0_vertex_ai, and more): the
health route, the predict route with JSON and binary bodies for the default model, the
redirect to each v2 endpoint Triton routes (answered as the HTTP port answers the same
request), the endpoints it refuses, hostile redirect values, and Triton's codes for bad
input, the server serving on after each."""

from __future__ import annotations

import gzip
import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from tritonx.testing import ModelRepositoryBuilder
from tritonx_frontend_vertexai.binary import BINARY_CONTENT_TYPE

REDIRECT = "X-Vertex-Ai-Triton-Redirect"
PREDICT = "/predict"
BINARY = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
MAX_INPUT = 4096
DATA = np.arange(16, dtype=np.int32).reshape(1, 16)


@pytest.fixture(scope="module")
def vertex(tmp_path_factory: pytest.TempPathFactory, serve_vertex: Any) -> Iterator[Any]:
    """``echo`` (INT32 [16], the default model) and ``other`` (FP32 [-1]), with the HTTP
    port open too (to compare answers) and a small ``--http-max-input-size``."""
    repo = ModelRepositoryBuilder(tmp_path_factory.mktemp("vertex") / "models")
    repo.add_identity("echo", "INT32", [16], max_batch_size=8)
    repo.add_identity("other", "FP32", [-1])
    with serve_vertex(
        repo.root, {"default_model": "echo"}, http_max_input_size=MAX_INPUT, allow_grpc=False
    ) as served:
        yield served


def echo_body(binary_input: bool = False, binary_output: bool = False) -> tuple[bytes, int]:
    """A request for ``echo`` (tritonclient's encoding) and its JSON header's size."""
    tensor = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    tensor.set_data_from_numpy(DATA, binary_data=binary_input)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_output)
    body, size = httpclient.InferenceServerClient.generate_request_body([tensor], [output])
    return body, len(body) if size is None else size


def assert_echoed(response: requests.Response) -> None:
    response.raise_for_status()
    header = response.headers.get("Inference-Header-Content-Length")
    result = httpclient.InferenceServerClient.parse_response_body(
        response.content, header_length=None if header is None else int(header)
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA)


def assert_serving(vertex: Any) -> None:
    """The server still answers: health ready, and an inference."""
    assert requests.get(vertex.health, timeout=30).status_code == 200
    assert_echoed(requests.post(vertex.predict, data=echo_body()[0], timeout=30))


# ----------------------------------------------------------------------------- health


def test_health_route_answers_readiness(vertex: Any) -> None:
    answer = requests.get(vertex.health, timeout=30)
    assert (answer.status_code, answer.content) == (200, b"")
    # Triton's health handler takes GET only
    answer = requests.post(vertex.health, timeout=30)
    assert (answer.status_code, answer.json()) == (405, {"error": "Method Not Allowed"})


# ----------------------------------------------------------------------------- predict


def test_predict_json_infers_the_default_model(vertex: Any) -> None:
    body, _ = echo_body()
    answer = requests.post(
        vertex.predict, data=body, headers={"Content-Type": "application/json"}, timeout=30
    )
    assert answer.headers["Content-Type"] == "application/json"
    assert_echoed(answer)
    assert answer.json()["model_name"] == "echo"


def test_predict_binary_request_reads_the_header_size_from_the_content_type(
    vertex: Any,
) -> None:
    body, size = echo_body(binary_input=True)
    assert size < len(body)
    answer = requests.post(
        vertex.predict, data=body, headers={"Content-Type": f"{BINARY}{size}"}, timeout=30
    )
    assert_echoed(answer)


def test_predict_binary_response(vertex: Any) -> None:
    body, _ = echo_body(binary_output=True)
    answer = requests.post(vertex.predict, data=body, timeout=30)
    assert answer.headers["Content-Type"] == "application/octet-stream"
    assert int(answer.headers["Inference-Header-Content-Length"]) < len(answer.content)
    assert_echoed(answer)


def test_inference_header_content_length_is_not_read(vertex: Any) -> None:
    """Triton's Vertex AI server takes the header size from the content type only."""
    body, _ = echo_body()
    answer = requests.post(
        vertex.predict,
        data=body,
        headers={"Inference-Header-Content-Length": "5"},
        timeout=30,
    )
    assert_echoed(answer)


@pytest.mark.parametrize(
    ("content_type", "message"),
    [
        (
            f"additional-string/{BINARY}{{size}}",
            f"expect MIME type for binary data starts with '{BINARY}', got: "
            f"additional-string/{BINARY}{{size}}",
        ),
        (
            f"{BINARY}additional-string{{size}}",
            "Unable to parse inference header size, got: additional-string{size}",
        ),
        (
            f"{BINARY}-123",
            "inference header size should be in range (0, {length}), got: -123",
        ),
        (
            f"{BINARY}12345",
            "inference header size should be in range (0, {length}), got: 12345",
        ),
        (
            f"{BINARY}99999999999",
            "Unable to parse inference header size, value is out of range, got: 99999999999",
        ),
        (
            f"{BINARY}{'9' * 4000}",
            f"Unable to parse inference header size, value is out of range, got: {'9' * 4000}",
        ),
    ],
    ids=["prefixed", "not_a_number", "negative", "larger_than_body", "out_of_range", "huge"],
)
def test_malformed_binary_content_type_is_400(vertex: Any, content_type: str, message: str) -> None:
    body, size = echo_body(binary_input=True)
    answer = requests.post(
        vertex.predict,
        data=body,
        headers={"Content-Type": content_type.format(size=size)},
        timeout=30,
    )
    assert answer.status_code == 400
    assert answer.json() == {"error": message.format(size=size, length=len(body))}
    assert_serving(vertex)


def test_predict_takes_post_only(vertex: Any) -> None:
    answer = requests.get(vertex.predict, timeout=30)
    assert (answer.status_code, answer.json()) == (405, {"error": "Method Not Allowed"})


def test_predict_body_is_bounded_by_http_max_input_size(vertex: Any) -> None:
    tensor = {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}
    body = json.dumps({"inputs": [tensor], "id": "x" * MAX_INPUT}).encode()
    answer = requests.post(vertex.predict, data=body, timeout=30)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith(f"request JSON size of {len(body)} bytes exceeds")
    # a chunked body (no Content-Length) is bounded too
    answer = requests.post(vertex.predict, data=iter([body[:100], body[100:]]), timeout=30)
    assert answer.status_code == 400
    assert_serving(vertex)


def test_bad_request_gets_the_servers_validation(vertex: Any) -> None:
    body: dict[str, Any] = {
        "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 3], "data": [1, 2, 3]}]
    }
    answer = requests.post(vertex.predict, json=body, timeout=30)
    assert answer.status_code == 400
    assert "unexpected shape for input 'INPUT0' for model 'echo'" in answer.json()["error"]
    # Triton's JSON parser fails INTERNAL (500), on its HTTP port as here
    answer = requests.post(vertex.predict, data=b"{not json", timeout=30)
    assert answer.status_code == 500
    assert answer.json()["error"].startswith("failed to parse the request JSON buffer: ")
    assert_serving(vertex)


def test_other_paths_are_400_with_no_body(vertex: Any) -> None:
    for method, path in [
        ("GET", "/"),
        ("POST", "/v2/models/echo/infer"),
        ("GET", "/v2/health/ready"),
        ("POST", "/predict/more"),
        ("GET", "/healthz"),
    ]:
        answer = requests.request(method, vertex.base + path, timeout=30)
        assert (answer.status_code, answer.content) == (400, b""), path


# ----------------------------------------------------------------------------- redirect


def redirect(vertex: Any, value: str, **kw: Any) -> requests.Response:
    headers = {REDIRECT: value, **kw.pop("headers", {})}
    return requests.post(vertex.predict, headers=headers, timeout=30, **kw)


def test_redirect_to_another_models_infer(vertex: Any) -> None:
    """Triton's qa ``test_predict_specified_model``, in the binary form."""
    values = np.array([1.5, 2.5, 3.5], dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [3], "FP32")
    tensor.set_data_from_numpy(values, binary_data=True)
    body, size = httpclient.InferenceServerClient.generate_request_body([tensor])
    headers = {"Content-Type": f"{BINARY}{size}"}
    for value in ("v2/models/other/infer", "v2/models/other/versions/1/infer"):
        answer = redirect(vertex, value, data=body, headers=headers)
        answer.raise_for_status()
        result = httpclient.InferenceServerClient.parse_response_body(
            answer.content, header_length=int(answer.headers["Inference-Header-Content-Length"])
        )
        assert result.get_response()["model_name"] == "other"
        assert result.get_response()["model_version"] == "1"
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)


def test_redirect_to_an_unknown_model(vertex: Any) -> None:
    answer = redirect(vertex, "v2/models/nope/infer", data=echo_body()[0])
    assert answer.status_code == 404
    assert answer.json() == {"error": "Request for unknown model: 'nope' is not found"}


@pytest.mark.parametrize(
    ("value", "method", "path", "expected"),
    [
        ("v2", "GET", "/v2", "extensions"),
        ("v2/health/live", "GET", "/v2/health/live", ""),
        ("v2/health/ready", "GET", "/v2/health/ready", ""),
        ("v2/models/echo", "GET", "/v2/models/echo", "platform"),
        ("v2/models/echo/versions/1", "GET", "/v2/models/echo/versions/1", "platform"),
        ("v2/models/echo/config", "GET", "/v2/models/echo/config", "version_policy"),
        ("v2/models/echo/ready", "GET", "/v2/models/echo/ready", ""),
        ("v2/models/nope/ready", "GET", "/v2/models/nope/ready", "not ready"),
        ("v2/models/other/stats", "GET", "/v2/models/other/stats", "model_stats"),
        ("v2/models/stats", "GET", "/v2/models/stats", "model_stats"),
        ("v2/repository/index", "POST", "/v2/repository/index", "state"),
        ("v2/systemsharedmemory/status", "GET", "/v2/systemsharedmemory/status", "["),
        ("v2/cudasharedmemory/status", "GET", "/v2/cudasharedmemory/status", "["),
        (
            "v2/systemsharedmemory/region/r1/status",
            "GET",
            "/v2/systemsharedmemory/region/r1/status",
            "",
        ),
    ],
)
def test_redirect_answers_as_the_http_port(
    vertex: Any, value: str, method: str, path: str, expected: str
) -> None:
    answer = redirect(vertex, value)
    http = requests.request(method, f"http://{vertex.server.http_url}{path}", timeout=30)
    assert (answer.status_code, answer.content) == (http.status_code, http.content)
    assert expected in answer.text


def test_redirect_repository_index_reads_its_body(vertex: Any) -> None:
    answer = redirect(vertex, "v2/repository/index", json={"ready": True})
    assert sorted(row["name"] for row in answer.json()) == ["echo", "other"]
    answer = redirect(vertex, "v2/repository/index", json={"ready": "yes"})
    assert answer.status_code == 400


def test_redirect_metrics(vertex: Any) -> None:
    answer = redirect(vertex, "metrics")
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("text/plain")
    assert "# TYPE " in answer.text


def test_redirect_metrics_has_tritons_families(vertex: Any) -> None:
    assert "nv_inference_request_success" in redirect(vertex, "metrics").text


@pytest.mark.parametrize(
    "value",
    [
        "v2/repository/models/echo/load",
        "v2/repository/models/echo/unload",
        "v2/repository/r/models/echo/load",
        "v2/systemsharedmemory/region/test/register",
        "v2/systemsharedmemory/unregister",
        "v2/cudasharedmemory/region/test/register",
        "v2/cudasharedmemory/unregister",
    ],
)
def test_redirect_refuses_what_changes_the_server_with_403(vertex: Any, value: str) -> None:
    answer = redirect(vertex, value, json={"key": "test_shm", "byte_size": 1024})
    assert (answer.status_code, answer.content) == (403, b"")
    assert vertex.server.model_ready("echo")


@pytest.mark.parametrize(
    "value",
    [
        "v2/models/echo/generate",
        "v2/models/echo/generate_stream",
        "v2/models/echo/trace/setting",
        "v2/trace/setting",
        "v2/logging",
        "v2/models",
        "v2/health",
        "v2/health/started",
        "v3",
        "v2/repository",
        "metrics/extra",
        "v2/models/echo/versions/one",
    ],
)
def test_redirect_to_what_triton_does_not_route_is_400(vertex: Any, value: str) -> None:
    answer = redirect(vertex, value)
    assert (answer.status_code, answer.content) == (400, b"")


def test_redirect_takes_post_only(vertex: Any) -> None:
    for method in ("GET", "PUT", "DELETE"):
        answer = requests.request(method, vertex.predict, headers={REDIRECT: "v2"}, timeout=30)
        assert (answer.status_code, answer.content) == (405, b"")


#: Values a hostile client might send, each refused with 400 before anything is routed.
HOSTILE = [
    "",
    "/v2",
    "//v2",
    "//evil.example/v2",
    "http://evil.example/v2",
    "v2//models/echo",
    "v2/models/echo/",
    "..",
    "v2/..",
    "v2/models/../../../etc/passwd",
    "v2/models/./echo",
    "v2/models/%2e%2e/infer",
    "v2/models/echo%2Finfer",
    "v2%2fmodels%2fecho",
    "v2/models/echo/infer?x=1",
    "v2/models/echo#infer",
    "v2\\models\\echo",
    "v2/models/ echo",
    "v2/models/\u00e9/infer",
    "v2/" + "a" * 1022,
    "v2/models/" + "m" * 8000 + "/infer",
]


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_redirect_values_are_refused(vertex: Any, value: str) -> None:
    answer = redirect(vertex, value, data=echo_body()[0])
    assert answer.status_code == 400
    assert answer.json()["error"].startswith(REDIRECT)
    assert vertex.server.model_ready("echo")


def test_hostile_redirects_leave_the_server_serving(vertex: Any) -> None:
    for value in HOSTILE:
        redirect(vertex, value)
    # a header past aiohttp's own bound is refused before the frontend sees it
    answer = redirect(vertex, "v2/" + "a" * 20000)
    assert answer.status_code in (400, 431)
    assert_serving(vertex)


# ----------------------------------------------------------------------------- compression


def test_a_compressed_prediction_is_inflated_and_the_answer_is_not_compressed(
    vertex: Any,
) -> None:
    """As the HTTP port (Triton's Vertex AI port reads bodies as sent: a difference);
    answers are never compressed, as Triton's."""
    body = gzip.compress(echo_body()[0])
    answer = requests.post(
        vertex.predict,
        data=body,
        headers={"Content-Encoding": "gzip", "Accept-Encoding": "gzip"},
        timeout=30,
    )
    assert "Content-Encoding" not in answer.headers
    assert_echoed(answer)


def test_a_compressed_binary_prediction_is_checked_against_the_inflated_body(
    vertex: Any,
) -> None:
    """The header size in the content type counts inflated bytes: a binary request that
    compresses below its JSON header's size is served, not refused."""
    body, size = echo_body(binary_input=True)
    # the JSON header padded with white space (still JSON): it compresses well below its size
    padded = body[:size] + b" " * 1024 + body[size:]
    size += 1024
    compressed = gzip.compress(padded)
    assert len(compressed) < size  # what the content type declares exceeds the sent bytes
    answer = requests.post(
        vertex.predict,
        data=compressed,
        headers={
            "Content-Encoding": "gzip",
            "Content-Type": f"{BINARY_CONTENT_TYPE}{size}",
        },
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert_echoed(answer)


def test_a_refused_compressed_body_is_not_read(vertex: Any) -> None:
    """A compressed body the frontend refuses (here a bad redirect) is neither read nor
    inflated: the connection closes after the answer."""
    with socket.create_connection(urlsplit(vertex.base).netloc.split(":"), timeout=30) as sock:
        head = (
            f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\n{REDIRECT}: v2/..\r\n"
            "Content-Encoding: gzip\r\nContent-Length: 1000000\r\n\r\n"
        )
        sock.sendall(head.encode() + b"\x1f\x8b" + b"\0" * 1000)
        answer = b""
        while chunk := sock.recv(65536):  # the server closes: recv returns b""
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"Connection: close" in answer
    assert_serving(vertex)


# ----------------------------------------------------------------------------- undecodable bytes


def test_undecodable_header_bytes_are_400(vertex: Any) -> None:
    """A binary content type whose size is not UTF-8 (``\\xff``): Triton's 400, the byte
    shown escaped in the message (never a 500)."""
    body = echo_body()[0]
    with socket.create_connection(urlsplit(vertex.base).netloc.split(":"), timeout=30) as sock:
        head = (
            f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\nContent-Type: "
        ).encode()
        sock.sendall(head + BINARY.encode() + b"\xff\r\n\r\n" + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert json.loads(payload) == {"error": "Unable to parse inference header size, got: \udcff"}
    assert_serving(vertex)
