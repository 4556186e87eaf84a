"""Restricted APIs (``--http-restricted-api`` / ``--grpc-restricted-protocol``) and TLS
(``--grpc-use-ssl*`` as tritonserver, HTTPS ``--http-use-ssl*`` beyond it), through the real
tritonclient HTTP/gRPC clients and certificates generated here with ``cryptography``."""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import os
import queue
import signal
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from tritonclient.utils import InferenceServerException

from tritonx import Server, TritonXError
from tritonx._dataplane.dataplane import DataPlane
from tritonx._runtime.plugins import make_plugin_manager
from tritonx._runtime.security import RESTRICTED_CATEGORIES, load_tls_files, parse_restricted_option
from tritonx._transports.http import routes
from tritonx._transports.http.app import make_app
from tritonx.config import ServerSettings
from tritonx.testing import (
    ModelRepositoryBuilder,
    ServerThread,
    identity,
    listening,
    loopback_settings,
)

ADMIN = {"admin-key": "admin-value"}
INFER = {"infer-key": "infer-value"}
GRPC_ADMIN = {"triton-grpc-protocol-admin-key": "admin-value"}
GRPC_INFER = {"triton-grpc-protocol-infer-key": "infer-value"}
#: admin: everything that changes or reveals the server's set-up; infer: serving traffic;
#: metadata and statistics stay open.
ADMIN_CATEGORIES = ("model-repository", "model-config", "shared-memory", "trace", "logging")
INFER_CATEGORIES = ("inference", "health")
RESTRICTIONS = {
    **{c: ("admin-key", "admin-value") for c in ADMIN_CATEGORIES},
    **{c: ("infer-key", "infer-value") for c in INFER_CATEGORIES},
}


# ---------------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> ModelRepositoryBuilder:
    repo = ModelRepositoryBuilder(tmp_path_factory.mktemp("security") / "models")
    repo.add_identity("simple", "INT32")
    repo.add_identity("other", "INT32")
    return repo


def serve(settings: ServerSettings) -> ServerThread:
    thread = ServerThread(
        Server(settings, plugin_manager=make_plugin_manager(autoload=False, extra=[identity]))
    )
    thread.start()
    return thread


def http_call(
    url: str,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(url, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def http_inputs() -> list[httpclient.InferInput]:
    data = httpclient.InferInput("INPUT0", [3], "INT32")
    data.set_data_from_numpy(np.array([1, 2, 3], np.int32))
    return [data]


def grpc_inputs() -> list[grpcclient.InferInput]:
    data = grpcclient.InferInput("INPUT0", [3], "INT32")
    data.set_data_from_numpy(np.array([1, 2, 3], np.int32))
    return [data]


def grpc_raw(url: str, method: str, metadata: dict[str, str] | None = None) -> bytes:
    """Call a unary RPC with an empty request message (raw bytes both ways)."""
    with grpc.insecure_channel(url) as channel:
        call = channel.unary_unary(
            method, request_serializer=lambda m: m, response_deserializer=lambda b: b
        )
        return call(b"", metadata=list((metadata or {}).items()), timeout=30)


# ---------------------------------------------------------------------------------- parsing


def test_parse_restricted_option_follows_tritonserver() -> None:
    parsed = parse_restricted_option(
        ["model-repository,health:admin-key=a=b:c", "inference:k:x=v"],
        "http-restricted-api",
        "api",
    )
    # the first ':' ends the list, the first '=' after it ends the key
    assert parsed == {
        "model-repository": ("admin-key", "a=b:c"),
        "health": ("admin-key", "a=b:c"),
        "inference": ("k:x", "v"),
    }
    assert parse_restricted_option([], "http-restricted-api", "api") == {}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            ["model-repository,health:k1=v1", "metadata,health:k2=v2"],
            "restricted protocol 'health' can not be specified in multiple config groups",
        ),
        (["health,health:k=v"], "restricted protocol 'health' can not be specified"),
        (["model-reposit,health:k1=v1"], "unknown restricted protocol 'model-reposit' "),
        (["health,,metadata:k=v"], "unknown restricted protocol '' "),
        (
            ["health:key"],
            "--grpc-restricted-protocol option format is '<config name>:<setting>=<value>'. "
            "Got health:key",
        ),
        (["health"], "--grpc-restricted-protocol option format is"),
        ([":k=v"], "--grpc-restricted-protocol option format is"),
        (["health:=v"], "--grpc-restricted-protocol option format is"),
        (["health:k="], "--grpc-restricted-protocol option format is"),
    ],
)
def test_parse_restricted_option_errors(values: list[str], message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_restricted_option(values, "grpc-restricted-protocol", "protocol")
    assert str(info.value).startswith(message)


def test_http_category_of_every_triton_route() -> None:
    """``HTTPAPIServer::Handle``'s routing: which RESTRICTED_CATEGORY each handler checks."""
    expected = {
        "/v2/health/live": "health",
        "/v2/health/ready": "health",
        "/v2/models/m/ready": "health",
        "/v2/models/m/versions/2/ready": "health",
        "/v2": "metadata",
        "/v2/models/m": "metadata",
        "/v2/models/m/versions/1": "metadata",
        "/v2/models/m/infer": "inference",
        "/v2/models/m/versions/1/infer": "inference",
        "/v2/models/m/generate": "inference",
        "/v2/models/m/generate_stream": "inference",
        "/v2/systemsharedmemory/status": "shared-memory",
        "/v2/systemsharedmemory/region/r/register": "shared-memory",
        "/v2/cudasharedmemory/region/r/unregister": "shared-memory",
        "/v2/models/m/config": "model-config",
        "/v2/models/m/versions/1/config": "model-config",
        "/v2/repository/index": "model-repository",
        "/v2/repository/models/m/load": "model-repository",
        "/v2/repository/models/m/unload": "model-repository",
        "/v2/repository/r/index": "model-repository",
        "/v2/models/stats": "statistics",
        "/v2/models/m/stats": "statistics",
        "/v2/models/m/versions/1/stats": "statistics",
        "/v2/trace/setting": "trace",
        "/v2/models/m/trace/setting": "trace",
        "/v2/logging": "logging",
        # no handler in tritonserver: 404, never restricted
        "/v2/models/m/versions/1/trace/setting": None,
        "/v2/": None,
        "/v2/health": None,
        "/v2/models/m/versions/x/infer": None,
        "/metrics": None,
    }
    assert {path: routes.restricted_category(path) for path in expected} == expected
    assert set(filter(None, expected.values())) == set(RESTRICTED_CATEGORIES)


def test_no_restriction_costs_nothing(repository: ModelRepositoryBuilder) -> None:
    """Without restrictions the route is the plain dispatcher (no per-request check)."""
    plain = loopback_settings(repository.root)
    app = make_app(cast(DataPlane, None), plain)
    assert _catch_all(app) == {routes.dispatch}  # (the status page has routes of its own)
    restricted = replace(plain, http_restricted_api={"health": ("k", "v")})
    app = make_app(cast(DataPlane, None), restricted)
    assert routes.dispatch not in _catch_all(app)


def _catch_all(app: Any) -> set[Any]:
    return {r.handler for r in app.router.routes() if r.resource.canonical == "/{tail}"}


async def test_bad_in_process_restriction_fails_start_up(tmp_path: Path) -> None:
    for field in ("http_restricted_api", "grpc_restricted_protocol"):
        settings = loopback_settings(
            tmp_path, allow_metrics=False, **{field: {"model-repo": ("k", "v")}}
        )
        server = Server(settings, plugin_manager=make_plugin_manager(autoload=False))
        with pytest.raises(TritonXError, match=f"{field}: unknown restricted category"):
            await server.start()


# ---------------------------------------------------------------------------------- HTTP


@pytest.fixture(scope="module")
def restricted(repository: ModelRepositoryBuilder) -> Iterator[Server]:
    """HTTP and gRPC, explicit mode, every category but metadata/statistics restricted."""
    thread = serve(
        loopback_settings(
            repository.root,
            model_control_mode="explicit",
            load_model=("*",),
            allow_metrics=False,
            http_restricted_api=RESTRICTIONS,
            grpc_restricted_protocol=RESTRICTIONS,
        )
    )
    try:
        yield thread.server
    finally:
        thread.stop()


HTTP_RESTRICTED = [
    ("GET", "/v2/health/live", "infer-key"),
    ("GET", "/v2/health/ready", "infer-key"),
    ("GET", "/v2/models/simple/ready", "infer-key"),
    ("POST", "/v2/models/simple/infer", "infer-key"),
    ("POST", "/v2/models/simple/versions/1/infer", "infer-key"),
    ("POST", "/v2/models/simple/generate", "infer-key"),
    ("GET", "/v2/models/simple/config", "admin-key"),
    ("POST", "/v2/repository/index", "admin-key"),
    ("POST", "/v2/repository/models/simple/load", "admin-key"),
    ("POST", "/v2/repository/models/simple/unload", "admin-key"),
    ("GET", "/v2/systemsharedmemory/status", "admin-key"),
    ("POST", "/v2/cudasharedmemory/region/r/unregister", "admin-key"),
    ("GET", "/v2/trace/setting", "admin-key"),
    ("POST", "/v2/models/simple/trace/setting", "admin-key"),
    ("GET", "/v2/logging", "admin-key"),
]


@pytest.mark.parametrize(("method", "path", "key"), HTTP_RESTRICTED)
def test_http_restricted_endpoint_refused(
    restricted: Server, method: str, path: str, key: str
) -> None:
    body = {"error": f"This API is restricted, expecting header '{key}'"}
    other = ADMIN if key == "infer-key" else INFER
    payload = b"{}" if method == "POST" else None
    for headers in ({}, {key: "wrong"}, {key: "admin-value infer-value"}, other):
        status, raw = http_call(restricted.http_url, method, path, headers, payload)
        assert (status, json.loads(raw)) == (403, body), headers
    # with the header, the request reaches its handler (whatever that answers)
    value = ADMIN.get(key) or INFER[key]
    status, _ = http_call(restricted.http_url, "PUT", path, {key: value})
    assert status in (404, 405)


def test_http_restriction_is_checked_before_the_method(restricted: Server) -> None:
    status, raw = http_call(restricted.http_url, "GET", "/v2/repository/index")
    assert status == 403
    status, raw = http_call(restricted.http_url, "GET", "/v2/repository/index", ADMIN)
    assert (status, json.loads(raw)) == (405, {"error": "Method Not Allowed"})


def test_http_restricted_apis_work_with_the_header(restricted: Server) -> None:
    client = httpclient.InferenceServerClient(restricted.http_url)
    try:
        assert not client.is_server_live()  # (tritonclient: False for any non-200)
        with pytest.raises(InferenceServerException) as info:
            client.infer("simple", http_inputs())
        assert str(info.value.status()) == "403"
        assert info.value.message() == "This API is restricted, expecting header 'infer-key'"
        with pytest.raises(InferenceServerException, match="expecting header 'infer-key'"):
            client.infer("simple", http_inputs(), headers={"infer-key": "Infer-Value"})
        with pytest.raises(InferenceServerException, match="expecting header 'admin-key'"):
            client.unload_model("other", headers=INFER)

        assert client.is_server_live(headers=INFER)
        assert client.is_server_ready(headers=INFER)
        assert client.is_model_ready("simple", headers=INFER)
        result = client.infer("simple", http_inputs(), headers=INFER)
        assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3]
        # header names are case-insensitive, values are compared exactly
        assert client.get_model_config("simple", headers={"Admin-Key": "admin-value"})
        client.unload_model("other", headers=ADMIN)
        index = client.get_model_repository_index(headers=ADMIN)
        assert [m["state"] for m in index if m["name"] == "other"] == ["UNAVAILABLE"]
        client.load_model("other", headers=ADMIN)
        assert client.is_model_ready("other", headers=INFER)
    finally:
        client.close()


def test_http_unrestricted_apis_keep_working(restricted: Server) -> None:
    client = httpclient.InferenceServerClient(restricted.http_url)
    try:
        assert client.get_server_metadata()["name"] == "triton"
        assert client.get_model_metadata("simple")["name"] == "simple"
        assert client.get_inference_statistics("simple")["model_stats"]
        assert client.get_inference_statistics(headers=ADMIN)["model_stats"]
    finally:
        client.close()
    assert http_call(restricted.http_url, "GET", "/v2/nothing")[0] == 404
    status, raw = http_call(
        restricted.http_url, "GET", "/v2/models/simple/versions/1/trace/setting"
    )
    assert (status, json.loads(raw)) == (404, {"error": "Not Found"})


# ---------------------------------------------------------------------------------- gRPC

_SERVICE = "/inference.GRPCInferenceService/"
#: tritonserver ``src/grpc/grpc_server.cc``: the RestrictedCategory each Register* checks.
GRPC_CATEGORY = {
    _SERVICE + "ServerLive": "health",
    _SERVICE + "ServerReady": "health",
    _SERVICE + "ModelReady": "health",
    "/grpc.health.v1.Health/Check": "health",
    _SERVICE + "ServerMetadata": "metadata",
    _SERVICE + "ModelMetadata": "metadata",
    _SERVICE + "ModelInfer": "inference",
    _SERVICE + "ModelConfig": "model-config",
    _SERVICE + "ModelStatistics": "statistics",
    _SERVICE + "TraceSetting": "trace",
    _SERVICE + "LogSettings": "logging",
    _SERVICE + "SystemSharedMemoryStatus": "shared-memory",
    _SERVICE + "SystemSharedMemoryRegister": "shared-memory",
    _SERVICE + "SystemSharedMemoryUnregister": "shared-memory",
    _SERVICE + "CudaSharedMemoryStatus": "shared-memory",
    _SERVICE + "CudaSharedMemoryRegister": "shared-memory",
    _SERVICE + "CudaSharedMemoryUnregister": "shared-memory",
    _SERVICE + "RepositoryIndex": "model-repository",
    _SERVICE + "RepositoryModelLoad": "model-repository",
    _SERVICE + "RepositoryModelUnload": "model-repository",
}


@pytest.mark.parametrize("method", sorted(GRPC_CATEGORY))
def test_grpc_restricted_protocol_refused(restricted: Server, method: str) -> None:
    category = GRPC_CATEGORY[method]
    if category not in RESTRICTIONS:  # open: whatever it answers, not a restriction
        try:
            grpc_raw(restricted.grpc_url, method)
        except grpc.RpcError as exc:
            assert exc.code() != grpc.StatusCode.UNAVAILABLE, exc.details()
        return
    key = "admin-key" if category in ADMIN_CATEGORIES else "infer-key"
    header = f"triton-grpc-protocol-{key}"
    other = GRPC_ADMIN if key == "infer-key" else GRPC_INFER
    for metadata in ({}, {header: "wrong"}, {key: RESTRICTIONS[category][1]}, other):
        with pytest.raises(grpc.RpcError) as info:
            grpc_raw(restricted.grpc_url, method, metadata)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE, metadata
        assert info.value.details() == f"This protocol is restricted, expecting header '{header}'"


def test_grpc_restricted_protocols_work_with_the_metadata(restricted: Server) -> None:
    client = grpcclient.InferenceServerClient(restricted.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as info:
            client.is_server_live()
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        assert info.value.message() == (
            "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'"
        )
        with pytest.raises(InferenceServerException, match="expecting header"):
            client.infer("simple", grpc_inputs(), headers={"infer-key": "infer-value"})
        with pytest.raises(InferenceServerException, match="protocol-admin-key'"):
            client.unload_model("other", headers=GRPC_INFER)

        assert client.is_server_live(headers=GRPC_INFER)
        assert client.is_server_ready(headers=GRPC_INFER)
        assert client.is_model_ready("simple", headers=GRPC_INFER)
        result = client.infer("simple", grpc_inputs(), headers=GRPC_INFER)
        assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3]
        assert client.get_model_config("simple", headers=GRPC_ADMIN).config.name == "simple"
        client.unload_model("other", headers=GRPC_ADMIN)
        assert not client.is_model_ready("other", headers=GRPC_INFER)
        client.load_model("other", headers=GRPC_ADMIN)
        assert client.is_model_ready("other", headers=GRPC_INFER)
        index = client.get_model_repository_index(headers=GRPC_ADMIN)
        assert {m.name for m in index.models} == {"simple", "other"}
        health = grpc_raw(restricted.grpc_url, "/grpc.health.v1.Health/Check", GRPC_INFER)
        assert health == b"\x08\x01"  # SERVING
        # unrestricted protocols need no metadata
        assert client.get_server_metadata().name == "triton"
        assert client.get_model_metadata("simple").name == "simple"
        assert client.get_inference_statistics("simple").model_stats
    finally:
        client.close()


def test_grpc_restricted_stream_is_refused_before_reading(restricted: Server) -> None:
    client = grpcclient.InferenceServerClient(restricted.grpc_url)
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def callback(result: Any, error: Any) -> None:
        results.put((result, error))

    try:
        client.start_stream(callback)
        _, error = results.get(timeout=30)  # refused as the stream opens, nothing sent
        assert error.status() == "StatusCode.UNAVAILABLE"
        assert error.message() == (
            "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'"
        )
        client.stop_stream()
        client.start_stream(callback, headers=GRPC_INFER)
        client.async_stream_infer("simple", grpc_inputs())
        result, error = results.get(timeout=30)
        assert error is None and result.as_numpy("OUTPUT0").tolist() == [1, 2, 3]
        client.stop_stream()
    finally:
        client.close()


# ---------------------------------------------------------------------------------- TLS


@dataclass(frozen=True)
class Pki:
    """PEM files: a CA, a server certificate for localhost/127.0.0.1, a client certificate
    from the same CA and a "rogue" client certificate from another CA."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    rogue_cert: str
    rogue_key: str
    rogue_ca: str


def _issue(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None,
    *,
    usage: str = "ca",
) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, signing_key = (issuer[0].subject, issuer[1]) if issuer else (subject, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=usage == "ca", path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signing_key.public_key()),
            critical=False,
        )
    )
    if usage == "ca":
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    elif usage == "server":
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return builder.sign(signing_key, hashes.SHA256())


def _write(folder: Path, name: str, cert: x509.Certificate, key: Any = None) -> tuple[str, str]:
    cert_path = folder / f"{name}.crt"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is None:
        return str(cert_path), ""
    key_path = folder / f"{name}.key"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca_key, rogue_ca_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = _issue("tritonx test CA", ca_key)
    rogue_ca = _issue("rogue CA", rogue_ca_key)
    keys = {name: ec.generate_private_key(ec.SECP256R1()) for name in ("server", "client", "rogue")}
    server = _issue("localhost", keys["server"], (ca, ca_key), usage="server")
    client = _issue("client", keys["client"], (ca, ca_key), usage="client")
    rogue = _issue("client", keys["rogue"], (rogue_ca, rogue_ca_key), usage="client")
    ca_path, _ = _write(folder, "ca", ca)
    rogue_ca_path, _ = _write(folder, "rogue-ca", rogue_ca)
    server_cert, server_key = _write(folder, "server", server, keys["server"])
    client_cert, client_key = _write(folder, "client", client, keys["client"])
    rogue_cert, rogue_key = _write(folder, "rogue", rogue, keys["rogue"])
    return Pki(
        ca_path,
        server_cert,
        server_key,
        client_cert,
        client_key,
        rogue_cert,
        rogue_key,
        rogue_ca_path,
    )


def tls_settings(repository: ModelRepositoryBuilder, pki: Pki, mutual: bool) -> ServerSettings:
    tls: dict[str, Any] = {}
    for prefix in ("http", "grpc"):
        tls[f"{prefix}_use_ssl_mutual" if mutual else f"{prefix}_use_ssl"] = True
        tls[f"{prefix}_server_cert"] = pki.server_cert
        tls[f"{prefix}_server_key"] = pki.server_key
        if mutual:
            tls[f"{prefix}_root_cert"] = pki.ca
    return loopback_settings(repository.root, allow_metrics=False, **tls)


@pytest.fixture(scope="module")
def tls_server(repository: ModelRepositoryBuilder, pki: Pki) -> Iterator[Server]:
    thread = serve(tls_settings(repository, pki, mutual=False))
    try:
        yield thread.server
    finally:
        thread.stop()


@pytest.fixture(scope="module")
def mtls_server(repository: ModelRepositoryBuilder, pki: Pki) -> Iterator[Server]:
    thread = serve(tls_settings(repository, pki, mutual=True))
    try:
        yield thread.server
    finally:
        thread.stop()


def grpc_works(url: str, **ssl_args: Any) -> None:
    client = grpcclient.InferenceServerClient(url, **ssl_args)
    try:
        assert client.is_server_live(client_timeout=20)
        result = client.infer("simple", grpc_inputs(), client_timeout=20)
        assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3]
    finally:
        client.close()


def grpc_refused(url: str, **ssl_args: Any) -> None:
    client = grpcclient.InferenceServerClient(url, **ssl_args)
    try:
        with pytest.raises(InferenceServerException) as info:
            client.is_server_live(client_timeout=20)
        assert info.value.status() == "StatusCode.UNAVAILABLE"
    finally:
        client.close()


def https_works(url: str, **ssl_options: str) -> None:
    client = httpclient.InferenceServerClient(url, ssl=True, ssl_options=ssl_options)
    try:
        assert client.is_server_live()
        result = client.infer("simple", http_inputs())
        assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3]
    finally:
        client.close()


def http_refused(url: str, **client_args: Any) -> None:
    """The request fails below HTTP: no response at all."""
    client = httpclient.InferenceServerClient(url, connection_timeout=20, **client_args)
    try:
        # the TLS handshake fails (ssl.SSLError) or the server drops the connection
        with pytest.raises((OSError, http.client.HTTPException)):
            client.is_server_live()
    finally:
        client.close()


def test_grpc_tls(tls_server: Server, pki: Pki) -> None:
    url = tls_server.grpc_url
    grpc_works(url, ssl=True, root_certificates=pki.ca)
    grpc_works(  # a client certificate is not asked for, and not in the way
        url,
        ssl=True,
        root_certificates=pki.ca,
        private_key=pki.client_key,
        certificate_chain=pki.client_cert,
    )
    grpc_refused(url)  # plain text
    grpc_refused(url, ssl=True, root_certificates=pki.rogue_ca)  # server not trusted


def test_grpc_mutual_tls(mtls_server: Server, pki: Pki) -> None:
    url = mtls_server.grpc_url
    grpc_works(
        url,
        ssl=True,
        root_certificates=pki.ca,
        private_key=pki.client_key,
        certificate_chain=pki.client_cert,
    )
    grpc_refused(url, ssl=True, root_certificates=pki.ca)  # no client certificate
    grpc_refused(  # a client certificate the server's root did not sign
        url,
        ssl=True,
        root_certificates=pki.ca,
        private_key=pki.rogue_key,
        certificate_chain=pki.rogue_cert,
    )
    grpc_refused(url)


PERF_ANALYZER = Path(__file__).resolve().parents[2] / "tools" / "perf_analyzer"


@pytest.mark.skipif(
    not (PERF_ANALYZER / "bin" / "perf_analyzer").exists(),
    reason=f"perf_analyzer is not set up: run `bash {PERF_ANALYZER / 'setup.sh'}`",
)
@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mutual-tls"])
def test_perf_analyzer_over_grpc_tls(
    request: pytest.FixtureRequest, pki: Pki, mutual: bool
) -> None:
    """NVIDIA's C++ perf_analyzer (grpc++, not Python's stack) over TLS and mutual TLS."""
    server: Server = request.getfixturevalue("mtls_server" if mutual else "tls_server")
    command = [
        str(PERF_ANALYZER / "run.sh"),
        "-m",
        "simple",
        "-i",
        "grpc",
        "-u",
        server.grpc_url,
        "--shape",
        "INPUT0:4",
        "--measurement-interval",
        "500",
        "--stability-percentage",
        "999",
        "--max-trials",
        "4",
        "--ssl-grpc-use-ssl",
        "true",
        "--ssl-grpc-root-certifications-file",
        pki.ca,
    ]
    if mutual:
        command += [
            "--ssl-grpc-private-key-file",
            pki.client_key,
            "--ssl-grpc-certificate-chain-file",
            pki.client_cert,
        ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Throughput:" in output, output


def test_https(tls_server: Server, pki: Pki) -> None:
    url = tls_server.http_url
    https_works(url, ca_certs=pki.ca)
    http_refused(url)  # plain HTTP to the TLS port
    http_refused(url, ssl=True, ssl_options={"ca_certs": pki.rogue_ca})


async def test_https_aio_client(tls_server: Server, pki: Pki) -> None:
    context = ssl.create_default_context(cafile=pki.ca)
    client = aiohttpclient.InferenceServerClient(tls_server.http_url, ssl=True, ssl_context=context)
    try:
        assert await client.is_server_live()
        inputs = [aiohttpclient.InferInput("INPUT0", [3], "INT32")]
        inputs[0].set_data_from_numpy(np.array([1, 2, 3], np.int32))
        result = await client.infer("simple", inputs)
        assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3]
    finally:
        await client.close()


def test_https_mutual(mtls_server: Server, pki: Pki) -> None:
    url = mtls_server.http_url
    https_works(url, ca_certs=pki.ca, certfile=pki.client_cert, keyfile=pki.client_key)
    http_refused(url, ssl=True, ssl_options={"ca_certs": pki.ca})  # no client certificate
    http_refused(
        url,
        ssl=True,
        ssl_options={"ca_certs": pki.ca, "certfile": pki.rogue_cert, "keyfile": pki.rogue_key},
    )
    http_refused(url)


def test_metrics_listener_stays_plain(repository: ModelRepositoryBuilder, pki: Pki) -> None:
    settings = tls_settings(repository, pki, mutual=False)
    thread = serve(replace(settings, allow_metrics=True))
    try:
        status, body = http_call(thread.server.metrics_url, "GET", "/metrics")
        assert status == 200 and b"nv_inference_request_success" in body
    finally:
        thread.stop()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"grpc_use_ssl": True},
            "--grpc-use-ssl requires --grpc-server-cert and --grpc-server-key",
        ),
        (
            {"http_use_ssl_mutual": True, "http_server_cert": "S", "http_server_key": "K"},
            "--http-use-ssl-mutual requires --http-root-cert",
        ),
        (
            {"grpc_use_ssl": True, "grpc_server_cert": "nope.crt", "grpc_server_key": "K"},
            "--grpc-server-cert: cannot read 'nope.crt': No such file or directory",
        ),
        (
            {"http_use_ssl": True, "http_server_cert": "CA", "http_server_key": "K"},
            "--http-server-cert / --http-server-key: ",
        ),
        (
            {"http_use_ssl": True, "http_server_cert": "S", "http_server_key": "CK"},
            "--http-server-cert / --http-server-key: ",
        ),
        (
            {
                "grpc_use_ssl_mutual": True,
                "grpc_server_cert": "S",
                "grpc_server_key": "K",
                "grpc_root_cert": "K",
            },
            "--grpc-root-cert: ",
        ),
    ],
)
async def test_tls_file_errors_fail_start_up(
    tmp_path: Path, pki: Pki, overrides: dict[str, Any], message: str
) -> None:
    files = {"S": pki.server_cert, "K": pki.server_key, "CA": pki.ca, "CK": pki.client_key}
    overrides = {k: files.get(v, v) if isinstance(v, str) else v for k, v in overrides.items()}
    settings = loopback_settings(tmp_path, allow_metrics=False, **overrides)
    server = Server(settings, plugin_manager=make_plugin_manager(autoload=False, extra=[identity]))
    with pytest.raises(TritonXError) as info:
        await server.start()
    assert info.value.message.startswith(message)
    assert not server.server_live()


def test_tls_off_reads_nothing() -> None:
    assert (
        load_tls_files(
            "grpc", use_ssl=False, mutual=False, server_cert="x", server_key="y", root_cert="z"
        )
        is None
    )


# ---------------------------------------------------------------------------------- CLI


def tritonx(*args: str) -> list[str]:
    return [sys.executable, "-m", "tritonx", "serve", *args]


@pytest.fixture
def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
    env["TRITONX_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [
                "--http-restricted-api=model-repository,health:k1=v1",
                "--http-restricted-api=metadata,health:k2=v2",
            ],
            'Bad option: "--http-restricted-api".\n'
            "restricted api 'health' can not be specified in multiple config groups",
        ),
        (
            ["--grpc-restricted-protocol=model-reposit,health:k1=v1"],
            'Bad option: "--grpc-restricted-protocol".\n'
            "unknown restricted protocol 'model-reposit'",
        ),
        (
            ["--http-restricted-api", "health"],
            "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health",
        ),
        (
            ["--grpc-use-ssl", "--grpc-server-cert", "/nonexistent.crt", "--grpc-server-key", "k"],
            "--grpc-server-cert: cannot read '/nonexistent.crt': No such file or directory",
        ),
        (["--http-use-ssl-mutual=true"], "--http-use-ssl-mutual requires --http-server-cert"),
    ],
)
def test_cli_refuses_bad_values(
    tmp_path: Path, cli_env: dict[str, str], args: list[str], message: str
) -> None:
    result = subprocess.run(
        tritonx("--model-repository", str(tmp_path), *args),
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "| Model" not in result.stderr  # refused before any model loads


def test_cli_serves_restricted_apis_over_tls(
    tmp_path: Path, cli_env: dict[str, str], pki: Pki
) -> None:
    args = tritonx(
        "--model-repository",
        str(tmp_path),
        "--model-control-mode=explicit",
        "--allow-metrics=false",
        "--http-address=127.0.0.1",
        "--http-port=0",
        "--grpc-address=127.0.0.1",
        "--grpc-port=0",
        "--http-restricted-api=model-repository,model-config:admin-key=admin-value",
        "--grpc-restricted-protocol",
        "model-repository:admin-key=admin-value",
        "--grpc-restricted-protocol=health:infer-key=infer-value",
        "--grpc-use-ssl=true",
        f"--grpc-server-cert={pki.server_cert}",
        f"--grpc-server-key={pki.server_key}",
        "--http-use-ssl-mutual",
        f"--http-server-cert={pki.server_cert}",
        f"--http-server-key={pki.server_key}",
        f"--http-root-cert={pki.ca}",
    )
    proc = subprocess.Popen(args, env=cli_env, stderr=subprocess.PIPE, text=True)
    urls, lines = listening(proc)
    try:
        ssl_options = {"ca_certs": pki.ca, "certfile": pki.client_cert, "keyfile": pki.client_key}
        client = httpclient.InferenceServerClient(
            urls["HTTPService"], ssl=True, ssl_options=ssl_options
        )
        try:
            assert client.is_server_live()
            with pytest.raises(InferenceServerException, match="expecting header 'admin-key'"):
                client.get_model_repository_index()
            assert client.get_model_repository_index(headers=ADMIN) == []
        finally:
            client.close()
        http_refused(urls["HTTPService"], ssl=True, ssl_options={"ca_certs": pki.ca})

        client = grpcclient.InferenceServerClient(
            urls["GRPCInferenceService"], ssl=True, root_certificates=pki.ca
        )
        try:
            with pytest.raises(InferenceServerException, match="triton-grpc-protocol-infer-key"):
                client.is_server_live()
            assert client.is_server_live(headers=GRPC_INFER)
            assert not client.get_model_repository_index(headers=GRPC_ADMIN).models
            with pytest.raises(InferenceServerException, match="protocol-admin-key"):
                client.get_model_repository_index()
            assert client.get_server_metadata().name == "triton"
        finally:
            client.close()
        grpc_refused(urls["GRPCInferenceService"])
    finally:
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        assert proc.wait(30) == 0, "".join(lines) + rest


# ------------------------------------------------------- open repository API on the network


async def test_an_open_repository_api_off_loopback_is_logged_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Explicit mode with the model-repository API unrestricted on a non-loopback address:
    allowed (Triton's default), with one warning per listener serving it so."""

    async def warnings_of(**overrides: Any) -> list[str]:
        caplog.clear()
        settings = loopback_settings(
            tmp_path, allow_metrics=False, **{"model_control_mode": "explicit", **overrides}
        )
        server = Server(settings, plugin_manager=make_plugin_manager(autoload=False))
        with caplog.at_level("WARNING", logger="tritonx"):
            await server.start()
            await server.stop()
        return [r.getMessage() for r in caplog.records if "repository API" in r.getMessage()]

    everywhere = {"http_address": "0.0.0.0", "grpc_address": "0.0.0.0"}
    both = await warnings_of(**everywhere)
    assert len(both) == 2
    assert both[0].startswith("the model repository API is unrestricted on HTTP 0.0.0.0")
    assert "--http-restricted-api=model-repository:<key>=<value>" in both[0]
    assert both[1].startswith("the model repository API is unrestricted on gRPC 0.0.0.0")
    restricted_http = await warnings_of(
        **everywhere, http_restricted_api={"model-repository": ("k", "v")}
    )
    assert [w.split(":")[0] for w in restricted_http] == [
        "the model repository API is unrestricted on gRPC 0.0.0.0"
    ]
    assert await warnings_of() == []  # loopback only
    assert await warnings_of(**everywhere, model_control_mode="none") == []


def test_the_https_flags_apply_to_the_cloud_frontends(
    repository: ModelRepositoryBuilder, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SageMaker and Vertex AI listeners take the HTTP port's TLS settings (tritonx's
    frontends all do): /invocations over HTTPS with the CA, plain HTTP refused."""
    sagemaker = pytest.importorskip("tritonx_frontend_sagemaker")
    settings = replace(
        tls_settings(repository, pki, mutual=False),
        frontend_config={"sagemaker": {"port": "0", "address": "127.0.0.1"}},
    )
    monkeypatch.setenv("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", "simple")
    pm = make_plugin_manager(autoload=False, extra=[identity, sagemaker])
    thread = ServerThread(Server(settings, plugin_manager=pm))
    thread.start()
    try:
        url = thread.server.frontend_urls["sagemaker"]
        assert url.startswith("https://")
        context = ssl.create_default_context(cafile=pki.ca)
        body = json.dumps(
            {"inputs": [{"name": "INPUT0", "shape": [3], "datatype": "INT32", "data": [1, 2, 3]}]}
        ).encode()
        request = urllib.request.Request(
            url + "/invocations", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            assert json.loads(answer.read())["outputs"][0]["data"] == [1, 2, 3]
        with pytest.raises(OSError):  # plain HTTP to the TLS listener: no answer
            urllib.request.urlopen(url.replace("https://", "http://") + "/ping", timeout=30)
    finally:
        thread.stop()
