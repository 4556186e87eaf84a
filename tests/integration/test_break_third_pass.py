"""Bodies a hostile client sends to ``/infer`` and ``/generate`` stay within
``--http-max-input-size`` and are answered with Triton's 400s, never a 500 (raw sockets,
with and without the ``/infer`` fast path)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tritonx._runtime.plugins import make_plugin_manager
from tritonx.server import Server
from tritonx.testing import ServerThread, identity, loopback_settings
from tritonx.testing.repository import ModelRepositoryBuilder

LIMIT = 1 << 16


@pytest.fixture(scope="module", params=[True, False], ids=["fast", "web"])
def address(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[tuple[str, int]]:  # type: ignore[no-untyped-def]
    repo = ModelRepositoryBuilder(tmp_path_factory.mktemp("bodies") / "models")
    repo.add_identity("id", "INT32", dims=[-1])
    settings = loopback_settings(
        repo.root,
        http_max_input_size=LIMIT,
        http_fast_infer=request.param,
        allow_grpc=False,
        allow_metrics=False,
    )
    thread = ServerThread(
        Server(settings, plugin_manager=make_plugin_manager(autoload=False, extra=[identity]))
    )
    thread.start()
    try:
        host, port = thread.server.http_url.rsplit(":", 1)
        yield host, int(port)
    finally:
        thread.stop()


def exchange(address: tuple[str, int], head: bytes, body: bytes) -> tuple[int, dict[str, str]]:
    """Send one request (``Connection: close``) and read its whole answer: status, JSON."""
    with socket.create_connection(address, timeout=30) as sock:
        try:
            sock.sendall(head + b"Connection: close\r\n\r\n" + body)
        except OSError:
            pass  # refused before all of it was read: the answer is there
        answer = b""
        while chunk := sock.recv(1 << 16):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2] or b"{}")


@pytest.mark.parametrize("route", ["infer", "generate"])
@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_a_huge_inference_header_length_is_a_400(
    address: tuple[str, int], route: str, framing: str
) -> None:
    """An ``Inference-Header-Content-Length`` of thousands of digits on a body over the
    limit (Python's int() refuses past 4300 digits) was a 500 and a logged traceback."""
    body = b"{" + b" " * (2 * LIMIT) + b"}"
    if framing == "length":
        framed = f"Content-Length: {len(body)}\r\n".encode()
    else:
        framed = b"Transfer-Encoding: chunked\r\n"
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    head = (
        f"POST /v2/models/id/{route} HTTP/1.1\r\nHost: x\r\n".encode()
        + b"Inference-Header-Content-Length: "
        + b"9" * 5000
        + b"\r\n"
        + framed
    )
    status, answer = exchange(address, head, body)
    assert status == 400, answer
    assert "exceeds the maximum allowed" in answer["error"], answer
    assert "Use --http-max-input-size to increase the limit." in answer["error"]


@pytest.mark.parametrize("route", ["/infer", "", "/ready", "/config", "/stats", "/generate"])
def test_a_version_of_thousands_of_digits_is_a_400(address: tuple[str, int], route: str) -> None:
    """A version in the URL past Python's 4300-digit int() limit was a 500 and a logged
    traceback on every model route; it is a version that cannot be parsed, as ``1_0``."""
    version = "9" * 5000
    method = "POST" if route in ("/infer", "/generate") else "GET"
    body = b'{"inputs":[]}' if method == "POST" else b""
    head = (
        f"{method} /v2/models/id/versions/{version}{route} HTTP/1.1\r\nHost: x\r\n"
        f"Content-Length: {len(body)}\r\n"
    ).encode()
    status, answer = exchange(address, head, body)
    assert status == 400, answer
    # (the text as any, cut at 4096 characters)
    assert answer["error"].startswith(f"failed to parse model version '{version[:4000]}")


def test_a_version_of_thousands_of_digits_over_grpc(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    repo.add_identity("id", "INT32", dims=[-1])
    settings = loopback_settings(repo.root, allow_http=False, allow_metrics=False)
    server = Server(settings, plugin_manager=make_plugin_manager(autoload=False, extra=[identity]))
    version = "9" * 5000
    with ServerThread(server) as thread:
        client = grpcclient.InferenceServerClient(thread.grpc_url)
        try:
            with pytest.raises(InferenceServerException) as failed:
                client.get_model_metadata("id", version)
        finally:
            client.close()
    assert failed.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert failed.value.message().startswith(f"failed to parse model version '{version[:4000]}")
