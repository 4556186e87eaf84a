"""``--http-max-connections``: clients that hold connections cannot lock others out.

At the cap the listener stops accepting (new clients wait in the listen backlog) and closes,
oldest first, a connection that has been idle or sending incomplete request headers for a
second; a connection whose request is in progress is never closed. The header timeout is set
far above each test's deadlines, so a client served here was served because a connection was
closed for it. Before: only connections with no byte of a request were closed, so connections
sending their headers slowly held the cap until the header timeout (58 s in the report).
Every case runs with the ``/infer`` fast path (the default) and without.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import aiohttp
import numpy as np
import pytest
import tritonclient.http as httpclient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import tritonx
from tritonx import InferenceRequest, InferenceResponse
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ServerThread, identity, loopback_settings
from tritonx.testing.repository import ModelRepositoryBuilder

CAP = 12
#: seconds a client waits for an answer: far below the header timeout, far above the
#: second or two a room takes to make
DEADLINE = 30.0
HEADER_TIMEOUT = 600.0
HEALTH = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
PARTIAL = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-"


class Gate(tritonx.Backend):
    """Echoes INPUT0 as OUTPUT0 once the test opens :attr:`release`; :attr:`entered` is set
    when an execution starts."""

    name = "gate"
    entered: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return GateInstance()


class GateInstance(tritonx.ModelInstance):
    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        Gate.entered.set()
        Gate.release.wait(2 * DEADLINE)
        return [InferenceResponse(outputs={"OUTPUT0": r.inputs["INPUT0"]}) for r in requests]


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(Gate)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = ModelRepositoryBuilder(tmp_path_factory.mktemp("cap") / "models")
    repo.add_identity("m", "INT32", dims=[-1])
    repo.add(
        "gate",
        backend="gate",
        inputs=[("INPUT0", "INT32", [-1])],
        outputs=[("OUTPUT0", "INT32", [-1])],
    )
    return repo.root


@pytest.fixture(params=[True, False], ids=["fast path", "aiohttp path"])
def url(request: pytest.FixtureRequest, repository: Path) -> Iterator[str]:
    """``host:port`` of a server with a cap of :data:`CAP` connections."""
    settings = loopback_settings(
        repository,
        allow_grpc=False,
        allow_metrics=False,
        http_max_connections=CAP,
        http_header_timeout_secs=HEADER_TIMEOUT,
        http_fast_infer=request.param,
    )
    pm = make_plugin_manager(autoload=False, extra=[identity, Plugin()])
    thread = ServerThread(tritonx.Server(settings, plugin_manager=pm))
    thread.start()
    Gate.entered.clear()
    Gate.release.clear()
    try:
        yield thread.server.http_url
    finally:
        Gate.release.set()
        thread.stop()


def connect(url: str) -> socket.socket:
    host, port = url.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=DEADLINE)


def answered(sock: socket.socket, request: bytes = HEALTH) -> socket.socket:
    """Send ``request`` and read its (small) answer: the server has accepted ``sock``."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "closed before the answer"
        data += chunk
    assert data.startswith(b"HTTP/1.1 200 "), data
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes ``sock`` (EOF or reset) within the deadline."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def infer(client: httpclient.InferenceServerClient, value: int) -> None:
    data = np.array([value], dtype=np.int32)
    tensor = httpclient.InferInput("INPUT0", [1], "INT32")
    tensor.set_data_from_numpy(data)
    result = client.infer("m", [tensor])
    assert result.as_numpy("OUTPUT0").tolist() == [value]


def new_client(url: str) -> httpclient.InferenceServerClient:
    """A ``tritonclient`` client: its first request opens a connection, kept open."""
    return httpclient.InferenceServerClient(url, network_timeout=DEADLINE)


def test_connections_stuck_in_their_headers_make_room(url: str) -> None:
    """The cap full of connections sending a request's headers slowly: a new client is
    served, and the connection that has been sending the longest sees EOF."""
    stuck = []
    for _ in range(CAP):
        sock = answered(connect(url))  # accepted and served once: it counts
        sock.sendall(PARTIAL)  # the next request's headers never end
        stuck.append(sock)
    client = new_client(url)
    try:
        infer(client, 7)
        assert closed_by_server(stuck[0])
    finally:
        client.close()
        for sock in stuck:
            sock.close()


async def test_idle_and_incomplete_connections_make_room_but_busy_ones_stay(url: str) -> None:
    """The cap full: the oldest connection has a request in progress (a model blocked on an
    event), the others are idle keep-alive connections and connections stuck in their
    headers. New clients, more than the cap, are each served; every idle or stuck connection
    sees EOF; the busy one stays open and gets its answer once the model goes on."""
    busy = connect(url)
    body = b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1],"data":[5]}]}'
    busy.sendall(
        b"POST /v2/models/gate/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body)
    )
    assert Gate.entered.wait(DEADLINE)
    idle = [answered(connect(url)) for _ in range(3)]
    stuck = []
    for _ in range(CAP - 1 - len(idle)):
        sock = answered(connect(url))
        sock.sendall(PARTIAL)
        stuck.append(sock)
    clients: list[httpclient.InferenceServerClient] = []
    sessions: list[aiohttp.ClientSession] = []
    try:
        for value in range(CAP + 2):  # each keeps its connection open (idle) afterwards
            if value % 2:
                clients.append(new_client(url))
                infer(clients[-1], value)
            else:
                session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DEADLINE))
                sessions.append(session)
                async with session.get(f"http://{url}/v2/health/ready") as reply:
                    assert reply.status == 200
        for sock in idle + stuck:
            assert closed_by_server(sock)
        Gate.release.set()
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = busy.recv(65536)
            assert chunk, "the connection with a request in progress was closed"
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 ")
    finally:
        Gate.release.set()
        for client in clients:
            client.close()
        for session in sessions:
            await session.close()
        for sock in [busy, *idle, *stuck]:
            sock.close()


@pytest.fixture
def tls(tmp_path: Path, repository: Path) -> Iterator[tuple[str, ssl.SSLContext]]:
    """``host:port`` of an HTTPS server with a cap of :data:`CAP` connections, and a client
    context that trusts its (self-signed) certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "server.crt", tmp_path / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    settings = loopback_settings(
        repository,
        allow_grpc=False,
        allow_metrics=False,
        http_max_connections=CAP,
        http_header_timeout_secs=HEADER_TIMEOUT,  # also the TLS handshake timeout
        http_use_ssl=True,
        http_server_cert=str(cert_path),
        http_server_key=str(key_path),
    )
    pm = make_plugin_manager(autoload=False, extra=[identity])
    thread = ServerThread(tritonx.Server(settings, plugin_manager=pm))
    thread.start()
    try:
        yield thread.server.http_url, ssl.create_default_context(cafile=str(cert_path))
    finally:
        thread.stop()


def test_tls_handshakes_that_never_end_make_room(tls: tuple[str, ssl.SSLContext]) -> None:
    """The cap full of connections that never finish (or start) their TLS handshake: a new
    HTTPS client is served, and the oldest of them sees EOF. Before: a handshake held its
    place until the handshake timeout (the header timeout)."""
    url, context = tls
    stuck = [connect(url) for _ in range(CAP)]
    stuck[-1].sendall(b"\x16\x03\x01\x00\xa5")  # the start of a ClientHello
    try:
        with context.wrap_socket(connect(url), server_hostname="127.0.0.1") as client:
            answered(client)
        assert closed_by_server(stuck[0])
    finally:
        for sock in stuck:
            sock.close()
