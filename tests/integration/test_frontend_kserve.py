"""``ServerHandle.kserve_http()`` (:class:`tritonx.KServeHTTP`): a frontend serves Triton's
KServe v2 HTTP endpoints under paths of its own, as Triton's SageMaker and Vertex AI servers
do, and its listener has the HTTP port's connection limits.

A frontend defined here answers ``/proxy/<path>`` with the v2 endpoint ``/<path>``; the real
``tritonclient`` talks to it through its base-path form (``host:port/proxy``) with the HTTP
port closed.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from aiohttp import web
from tritonclient.utils import InferenceServerException

import tritonx
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, ServerThread, identity, loopback_settings

#: the listener's header deadline in this module's server (seconds)
HEADER_TIMEOUT = 0.5
#: how long a test waits for something the server does at once (a generous upper bound)
DEADLINE = 30.0


class Proxy(tritonx.AiohttpFrontend):
    """``/proxy/<path>``: the KServe v2 endpoint ``/<path>``; ``/proxy-json/<model>``: that
    model's ``infer`` with the answer's content type replaced (the answer is not yet sent)."""

    name = "proxy"
    title = "Proxy frontend"
    default_port = 0
    config_keys: Mapping[str, str] = {}

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/proxy/{tail:.*}", self.proxy)
        app.router.add_post("/proxy-json/{model}", self.relabelled)
        return app

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        return await self.server.kserve_http().handle(request, "/" + request.match_info["tail"])

    async def relabelled(self, request: web.Request) -> web.StreamResponse:
        response = await self.server.kserve_http().handle(
            request,
            f"/v2/models/{request.match_info['model']}/infer",
            headers={"Content-Type": "application/json"},
        )
        response.headers["Content-Type"] = "application/x-relabelled"
        return response


class ProxyPlugin:
    @tritonx.hookimpl
    def tritonx_register_frontends(self, registry: tritonx.FrontendRegistry) -> None:
        registry.add(Proxy)


@pytest.fixture(scope="module")
def proxy_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of the proxy frontend of a server whose HTTP port is closed."""
    repo = ModelRepositoryBuilder(Path(tmp_path_factory.mktemp("kserve")) / "models")
    repo.add_identity("id", datatype="INT32")
    settings = loopback_settings(
        repo.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        http_header_timeout_secs=HEADER_TIMEOUT,
        # not applied to a frontend's hand-over: the frontend decides what it exposes
        http_restricted_api={"model-repository": ("admin-key", "secret")},
        frontend_config={"proxy": {"address": "127.0.0.1", "port": "0"}},
    )
    pm = make_plugin_manager(autoload=False, extra=[identity, ProxyPlugin()])
    thread = ServerThread(tritonx.Server(settings, plugin_manager=pm))
    thread.start()
    try:
        url = thread.server.frontend_urls["proxy"]
        yield url.removeprefix("http://")
    finally:
        thread.stop()


@pytest.fixture
def client(proxy_url: str) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(proxy_url + "/proxy") as client:
        yield client


def _infer(client: httpclient.InferenceServerClient, binary: bool) -> httpclient.InferResult:
    data = np.arange(4, dtype=np.int32)
    tensor = httpclient.InferInput("INPUT0", [4], "INT32")
    tensor.set_data_from_numpy(data, binary_data=binary)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
    return client.infer("id", [tensor], outputs=[output], request_id="r1")


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_tritonclient_infers_through_the_frontend(
    client: httpclient.InferenceServerClient, binary: bool
) -> None:
    result = _infer(client, binary)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(4, dtype=np.int32))
    assert result.get_response()["id"] == "r1"


def test_the_other_endpoints_answer_through_the_frontend(
    client: httpclient.InferenceServerClient,
) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("id")
    assert client.get_model_metadata("id")["name"] == "id"
    assert client.get_model_config("id")["name"] == "id"
    # the restricted category of the HTTP port is not applied to a hand-over
    index = client.get_model_repository_index()
    assert [entry["name"] for entry in index] == ["id"]
    stats = client.get_inference_statistics("id")["model_stats"]
    assert stats[0]["name"] == "id"


def test_errors_are_triton_s(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as raised:
        client.get_model_metadata("nope")
    assert raised.value.status() == "404"
    assert "Request for unknown model: 'nope' is not found" in raised.value.message()
    tensor = httpclient.InferInput("INPUT0", [5, 5], "INT32")
    tensor.set_data_from_numpy(np.zeros((5, 5), dtype=np.int32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("id", [tensor])
    assert "unexpected shape for input 'INPUT0' for model 'id'" in raised.value.message()


def test_a_path_no_endpoint_serves_is_404(proxy_url: str) -> None:
    status, _, body = _request(proxy_url, b"GET /proxy/v3/nothing HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 404
    assert body == b'{"error":"Not Found"}'


def test_the_frontend_may_change_the_answer_s_headers(proxy_url: str) -> None:
    body = b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT32","data":[7]}]}'
    request = (
        b"POST /proxy-json/id HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    status, headers, answer = _request(proxy_url, request)
    assert status == 200
    assert headers["content-type"] == "application/x-relabelled"
    assert b'"data":[7]' in answer


def test_the_frontend_listener_has_the_header_deadline(proxy_url: str) -> None:
    """A client that never finishes its headers is closed after --http-header-timeout-secs,
    as on the HTTP port (the frontend's listener has the same limits)."""
    with _connect(proxy_url) as sock:
        sock.sendall(b"GET /proxy/v2/health/live HTTP/1.1\r\nHost: x\r\n")  # no blank line
        assert _closed_by_server(sock)


def test_an_oversized_body_is_refused_with_triton_s_message(tmp_path: Path, proxy_url: str) -> None:
    """The hand-over reads bodies under --http-max-input-size as the HTTP port does."""
    limit = tritonx.ServerSettings().http_max_input_size
    request = (
        b"POST /proxy/v2/models/id/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
        b"\r\nContent-Length: " + str(limit + 1).encode() + b"\r\n\r\n"
    )
    status, _, body = _request(proxy_url, request)
    assert status == 400
    assert b"exceeds the maximum allowed input size" in body


# ---------------------------------------------------------------------------------- helpers


def _connect(url: str) -> socket.socket:
    host, port = url.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=DEADLINE)


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def _request(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send one raw request; (status, lower-cased headers, body) of its answer."""
    with _connect(url) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"closed before the answer: {data!r}"
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = sock.recv(65536)
            assert chunk, "closed before the whole answer"
            body += chunk
        return int(lines[0].split()[1]), headers, body
