"""The ``redis`` cache against a real Redis: Debian's ``redis-server``, started by the
``redis_server`` fixture on a free loopback port (no persistence) and killed at teardown.
Requests go through the real tritonclient HTTP/gRPC clients, the in-process server and the
``tritonx`` command. Skipped, with the reason, where ``redis-server`` is not installed."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pluggy
import pytest
import redis
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from prometheus_client.parser import text_string_to_metric_families

from tritonx import InferenceRequest, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.cache import SCOPE_BYTES
from tritonx.config import ServerSettings
from tritonx.errors import TritonXError
from tritonx.testing import ModelRepositoryBuilder, loopback_settings
from tritonx.testing.cache_contract import ResponseCacheContract
from tritonx_cache_redis import RedisCache
from tritonx_cache_redis.codec import MAGIC

REDIS_SERVER = shutil.which("redis-server") or next(
    (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if os.access(p, os.X_OK)),
    None,
)
needs_redis = pytest.mark.skipif(
    REDIS_SERVER is None,
    reason="redis-server not found (Debian/Ubuntu: apt-get install redis-server)",
)
CACHED = "response_cache { enable: true }"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisProcess:
    """A ``redis-server`` on 127.0.0.1:``port`` that tests can kill and start again."""

    def __init__(self, folder: Path, *extra: str, tls: bool = False) -> None:
        assert REDIS_SERVER is not None
        self.folder = folder
        self.port = free_port()
        self.extra = extra
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        port = str(self.port)
        port_args = ("--port", "0", "--tls-port", port) if self.tls else ("--port", port)
        self.proc = subprocess.Popen(
            [
                str(REDIS_SERVER),
                *port_args,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"redis-server exited with {self.proc.returncode}"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not listen on port {self.port}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    @property
    def config(self) -> dict[str, str]:
        return {"host": "127.0.0.1", "port": str(self.port)}


@pytest.fixture
def start_redis(tmp_path: Path) -> Iterator[Callable[..., RedisProcess]]:
    """Start a redis-server (extra arguments as given); every one is killed at teardown."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server not found (Debian/Ubuntu: apt-get install redis-server)")
    started: list[RedisProcess] = []

    def start(*extra: str, tls: bool = False) -> RedisProcess:
        folder = tmp_path / f"redis{len(started)}"
        folder.mkdir()
        process = RedisProcess(folder, *extra, tls=tls)
        started.append(process)
        process.start()
        return process

    yield start
    for process in started:
        process.kill()


@pytest.fixture
def redis_server(start_redis: Callable[..., RedisProcess]) -> RedisProcess:
    return start_redis()


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    """The installed plugin under test, loaded through its real entry point."""
    return ("cache_redis",)


@pytest.fixture
def server_settings(
    model_repository: ModelRepositoryBuilder, redis_server: RedisProcess
) -> ServerSettings:
    add_pair_model(model_repository, "cached")
    add_pair_model(model_repository, "plain", extra="")
    return loopback_settings(model_repository.root, cache_config={"redis": redis_server.config})


def add_pair_model(repo: ModelRepositoryBuilder, name: str, extra: str = CACHED) -> None:
    """identity: INPUT0 INT32 [16] -> OUTPUT0, INPUT1 BYTES [2] -> OUTPUT1."""
    repo.add(
        name,
        backend="identity",
        inputs=[("INPUT0", "INT32", [16]), ("INPUT1", "BYTES", [2])],
        outputs=[("OUTPUT0", "INT32", [16]), ("OUTPUT1", "BYTES", [2])],
        extra=extra,
    )


def pair_inputs(module: Any, first: int = 0) -> list[Any]:
    inputs = [module.InferInput("INPUT0", [16], "INT32"), module.InferInput("INPUT1", [2], "BYTES")]
    inputs[0].set_data_from_numpy(np.arange(first, first + 16, dtype=np.int32))
    inputs[1].set_data_from_numpy(np.array([b"caf\xc3\xa9", b"\x00bin\xff"], dtype=np.object_))
    return inputs


def pair_request(first: int = 0) -> InferenceRequest:
    return InferenceRequest(
        "cached",
        {
            "INPUT0": np.arange(first, first + 16, dtype=np.int32),
            "INPUT1": np.array([b"caf\xc3\xa9", b"\x00bin\xff"], dtype=np.object_),
        },
    )


def counts(server: Server, model: str = "cached") -> tuple[int, int]:
    ((_, _, stats),) = server.model_statistics(model)
    return stats.cache_hit.count, stats.cache_miss.count


async def scrape(server: Server) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{server.metrics_url}/metrics") as resp:
            text = await resp.text()
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(families: dict[str, Any], name: str, model: str) -> float | None:
    family = families.get(name)
    for s in family.samples if family else ():
        if s.name in (name, name + "_total") and s.labels == {"model": model, "version": "1"}:
            return float(s.value)
    return None


# ---------------------------------------------------------------- serving


@needs_redis
async def test_hits_and_misses_over_http_and_grpc(
    server: Server, http_client: Any, grpc_client: Any, redis_server: RedisProcess
) -> None:
    first = await http_client.infer("cached", pair_inputs(httpclient))  # miss, stored
    ((_, _, stats),) = server.model_statistics("cached")
    executions = stats.execution_count
    hits = [
        await http_client.infer("cached", pair_inputs(httpclient)),
        await grpc_client.infer("cached", pair_inputs(grpcclient)),
    ]
    assert stats.execution_count == executions  # answered from Redis
    for hit in hits:
        for name in ("OUTPUT0", "OUTPUT1"):
            got, expected = hit.as_numpy(name), first.as_numpy(name)
            assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
            assert got.tolist() == expected.tolist()
        assert hit.as_numpy("OUTPUT0").tobytes() == np.arange(16, dtype=np.int32).tobytes()
        assert hit.as_numpy("OUTPUT1").tolist() == [b"caf\xc3\xa9", b"\x00bin\xff"]
    await grpc_client.infer("cached", pair_inputs(grpcclient, first=50))  # miss
    await http_client.infer("plain", pair_inputs(httpclient))

    inference = (await http_client.get_inference_statistics("cached"))["model_stats"][0][
        "inference_stats"
    ]
    assert (inference["cache_hit"]["count"], inference["cache_miss"]["count"]) == (2, 2)
    assert inference["success"]["count"] == 4
    families = await scrape(server)
    assert sample(families, "nv_cache_num_hits_per_model", "cached") == 2
    assert sample(families, "nv_cache_num_misses_per_model", "cached") == 2
    assert sample(families, "nv_cache_hit_duration_per_model", "cached") == (
        inference["cache_hit"]["ns"] // 1000
    )
    assert sample(families, "nv_cache_miss_duration_per_model", "cached") == (
        inference["cache_miss"]["ns"] // 1000
    )
    assert sample(families, "nv_cache_num_hits_per_model", "plain") is None

    # what Redis holds: one string per distinct request, in the plugin's explicit format
    client = redis_server.client()
    keys = sorted(client.keys("*"))
    # hex of the load's scope then the request's 32-byte digest
    assert len(keys) == 2 and all(len(k) == 2 * (SCOPE_BYTES + 32) for k in keys)
    assert all(client.get(k).startswith(MAGIC) for k in keys)  # type: ignore[union-attr]


@needs_redis
async def test_redis_killed_mid_test_degrades_to_misses_then_recovers(
    server: Server,
    http_client: Any,
    grpc_client: Any,
    redis_server: RedisProcess,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(RedisCache, "retry_interval", 0.2)
    caplog.set_level(logging.INFO, logger="tritonx")
    await http_client.infer("cached", pair_inputs(httpclient))
    await http_client.infer("cached", pair_inputs(httpclient))
    assert counts(server) == (1, 1)

    redis_server.kill()
    for _ in range(3):  # every request still succeeds, each a miss
        result = await http_client.infer("cached", pair_inputs(httpclient))
        assert result.as_numpy("OUTPUT0").tolist() == list(range(16))
        result = await grpc_client.infer("cached", pair_inputs(grpcclient))
        assert result.as_numpy("OUTPUT1").tolist() == [b"caf\xc3\xa9", b"\x00bin\xff"]
    assert counts(server) == (1, 7)
    ((_, _, stats),) = server.model_statistics("cached")
    assert stats.fail.count == 0 and stats.success.count == 8
    down = [r for r in caplog.records if "is unreachable" in r.getMessage()]
    assert len(down) == 1 and down[0].levelno == logging.WARNING  # one warning, not one a request
    assert f"127.0.0.1:{redis_server.port}" in down[0].getMessage()

    redis_server.start()  # back, empty (no persistence): a miss stores the entry again
    deadline = time.monotonic() + 20
    while counts(server)[0] < 2:
        assert time.monotonic() < deadline, "the cache did not recover"
        await http_client.infer("cached", pair_inputs(httpclient))
        await asyncio.sleep(0.05)
    assert any("answers again" in r.getMessage() for r in caplog.records)
    assert len(redis_server.client().keys("*")) == 1


@needs_redis
async def test_foreign_or_corrupt_values_are_misses(
    server: Server, redis_server: RedisProcess
) -> None:
    await server.infer(pair_request())
    client = redis_server.client()
    (key,) = client.keys("*")
    for planted in (pickle.dumps({"evil": True}), b"TXC1garbage", b""):
        client.set(key, planted)
        response = await server.infer(pair_request())  # a miss, answered by the model ...
        assert response.outputs["OUTPUT0"].tolist() == list(range(16))
        assert client.get(key).startswith(MAGIC)  # type: ignore[union-attr]  # ... re-stored
    client.delete(key)
    client.hset(key, "field", "value")  # a hash (how Triton's redis cache stores): WRONGTYPE
    response = await server.infer(pair_request())
    assert response.outputs["OUTPUT0"].tolist() == list(range(16))
    assert counts(server) == (0, 5)


# ---------------------------------------------------------------- settings


@needs_redis
@pytest.mark.parametrize("how", ["config", "environment"])
async def test_password(
    start_redis: Callable[..., RedisProcess],
    model_repository: ModelRepositoryBuilder,
    plugin_manager: pluggy.PluginManager,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    secured = start_redis("--requirepass", "s3cret", "--databases", "4")
    add_pair_model(model_repository, "cached")
    config = {**secured.config, "db": "3"}
    if how == "config":
        config["password"] = "s3cret"
    else:
        monkeypatch.setenv("TRITONCACHE_REDIS_PASSWORD", "s3cret")
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        cache_config={"redis": config},
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        await server.infer(pair_request())
        await server.infer(pair_request())
        assert counts(server) == (1, 1)
    assert len(secured.client(password="s3cret", db=3).keys("*")) == 1
    monkeypatch.delenv("TRITONCACHE_REDIS_PASSWORD", raising=False)
    bad = {**config, "password": "wrong"}
    with pytest.raises(TritonXError, match="Failed to initialize RedisCache: cannot reach Redis"):
        async with Server(
            loopback_settings(model_repository.root, cache_config={"redis": bad}),
            plugin_manager=plugin_manager,
        ):
            pass


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"host": "127.0.0.1"}, "didn't specify address. Must at a minimum specify 'host' and"),
        ({"port": "6379"}, "didn't specify address"),
        ({"host": "h", "port": "70000"}, "'port' must be an integer from 1 to 65535"),
        ({"host": "h", "port": "1", "db": "-1"}, "'db' must be an integer"),
        ({"host": "h", "port": "1", "pool_size": "0"}, "'pool_size' must be an integer from 1"),
        ({"host": "h", "port": "1", "socket_timeout": "1.5"}, "'socket_timeout' must be"),
        ({"host": "h", "port": "1", "hostname": "x"}, "unknown setting(s) hostname"),
        ({"host": "h", "port": "1", "tls_enabled": "yes"}, "'tls_enabled' must be true or false"),
        ({"host": "h", "port": "1", "cacert": "/ca.pem"}, "cacert need tls_enabled=true"),
        (
            {"host": "h", "port": "1", "tls_enabled": "true", "cacert": "/nonexistent.pem"},
            "cacert file '/nonexistent.pem' does not exist",
        ),
    ],
)
async def test_bad_settings_fail_start_up(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: pluggy.PluginManager,
    config: dict[str, str],
    message: str,
) -> None:
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        cache_config={"redis": config},
    )
    with pytest.raises(TritonXError, match="Failed to initialize RedisCache: ") as info:
        async with Server(settings, plugin_manager=plugin_manager):
            pass
    assert message in str(info.value)


async def test_unreachable_redis_fails_start_up(
    model_repository: ModelRepositoryBuilder, plugin_manager: pluggy.PluginManager
) -> None:
    port = free_port()  # nothing listens there
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        cache_config={"redis": {"host": "127.0.0.1", "port": str(port)}},
    )
    with pytest.raises(TritonXError) as info:
        async with Server(settings, plugin_manager=plugin_manager):
            pass
    assert str(info.value) == (
        f"Failed to initialize RedisCache: failed to connect to Redis (127.0.0.1:{port}): "
        "Connection refused"
    )


@pytest.mark.parametrize(
    ("config", "messages"),
    [
        # Triton's redis cache reads the port with atoi ("nonexistent" is 0), then connects
        (
            {"host": "localhost", "port": "nonexistent"},
            ["failed to connect to Redis (localhost:0): Connection refused"],
        ),
        # the host is resolved before the port is used: its error wins
        (
            {"host": "nonexistent.invalid", "port": "nonexistent"},
            [
                "failed to connect to Redis (nonexistent.invalid:0): Name or service not known",
                "failed to connect to Redis (nonexistent.invalid:0): Temporary failure in name "
                "resolution",
            ],
        ),
    ],
)
async def test_connection_failures_have_tritons_texts(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: pluggy.PluginManager,
    config: dict[str, str],
    messages: list[str],
) -> None:
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        cache_config={"redis": config},
    )
    with pytest.raises(TritonXError) as info:
        async with Server(settings, plugin_manager=plugin_manager):
            pass
    assert str(info.value) in [f"Failed to initialize RedisCache: {m}" for m in messages]


# ---------------------------------------------------------------- TLS


def _pki(folder: Path) -> dict[str, str]:
    """A CA, a server certificate for the name ``redis.test`` only, and a client one."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def issue(name: str, key: Any, issuer: Any = None, san: str | None = None) -> Any:
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer[0].subject if issuer else subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), True)
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(san)]), False)
        return builder.sign(issuer[1] if issuer else key, hashes.SHA256())

    files: dict[str, str] = {}

    def write(name: str, cert: Any, key: Any) -> None:
        (folder / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (folder / f"{name}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        files[f"{name}_cert"], files[f"{name}_key"] = (
            str(folder / f"{name}.crt"),
            str(folder / f"{name}.key"),
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = issue("tritonx test CA", ca_key)
    write("ca", ca, ca_key)
    for name, san in (("server", "redis.test"), ("client", None)):
        key = ec.generate_private_key(ec.SECP256R1())
        write(name, issue(name, key, (ca, ca_key), san), key)
    return files


@needs_redis
async def test_tls_with_client_certificate_and_sni(
    start_redis: Callable[..., RedisProcess],
    model_repository: ModelRepositoryBuilder,
    plugin_manager: pluggy.PluginManager,
    tmp_path: Path,
) -> None:
    pytest.importorskip("cryptography")
    pki = _pki(tmp_path)
    secure = start_redis(
        "--tls-cert-file",
        pki["server_cert"],
        "--tls-key-file",
        pki["server_key"],
        "--tls-ca-cert-file",
        pki["ca_cert"],
        tls=True,
    )
    port = secure.port
    add_pair_model(model_repository, "cached")
    tls = {
        "host": "127.0.0.1",
        "port": str(port),
        "tls_enabled": "true",
        "cert": pki["client_cert"],
        "key": pki["client_key"],
        "cacert": pki["ca_cert"],
    }

    def settings(config: dict[str, str]) -> ServerSettings:
        return loopback_settings(
            model_repository.root,
            allow_http=False,
            allow_grpc=False,
            allow_metrics=False,
            cache_config={"redis": config},
        )

    async with Server(settings({**tls, "sni": "redis.test"}), plugin_manager=plugin_manager) as s:
        await s.infer(pair_request())
        await s.infer(pair_request())
        assert counts(s) == (1, 1)
    # the certificate names redis.test, not 127.0.0.1: without sni the server is not trusted
    with pytest.raises(TritonXError, match=r"cannot reach Redis at 127\.0\.0\.1"):
        async with Server(settings(tls), plugin_manager=plugin_manager):
            pass
    # plain text to a TLS port, and TLS without a client certificate, are refused too
    plain = {"host": "127.0.0.1", "port": str(port), "connect_timeout": "500"}
    without_cert = {k: v for k, v in tls.items() if k not in ("cert", "key")}
    for config in (plain, {**without_cert, "sni": "redis.test"}):
        with pytest.raises(TritonXError, match="cannot reach Redis"):
            async with Server(
                settings({**config, "socket_timeout": "500"}), plugin_manager=plugin_manager
            ):
                pass


# ---------------------------------------------------------------- the command line

ECHO = "from tritonx.testing.identity import tritonx_register_backends  # noqa: F401\n"


@needs_redis
def test_cli_cache_config_redis(
    model_repository: ModelRepositoryBuilder, redis_server: RedisProcess, tmp_path: Path
) -> None:
    """``tritonx serve --cache-config redis,host=... --cache-config redis,port=...`` as
    Triton's redis cache README writes it."""
    import tritonclient.http as synchttp

    site = tmp_path / "site"
    site.mkdir()
    (site / "backend_echo.py").write_text(ECHO)
    info = site / "tritonx_backend_echo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: tritonx-backend-echo\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text("[tritonx]\nbackend_echo = backend_echo\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
    env["PYTHONPATH"] = str(site)
    env["TRITONX_PLUGINS"] = "backend_echo,cache_redis"
    add_pair_model(model_repository, "cached")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonx",
            "serve",
            "--model-repository",
            str(model_repository.root),
            "--cache-config",
            "redis,host=127.0.0.1",
            "--cache-config",
            f"redis,port={redis_server.port}",
            "--http-address=127.0.0.1",
            f"--http-port={port}",
            "--allow-grpc=false",
            "--allow-metrics=false",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client = synchttp.InferenceServerClient(f"127.0.0.1:{port}")
        deadline = time.monotonic() + 60
        while True:
            try:
                if client.is_model_ready("cached"):
                    break
            except Exception:
                pass
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        for _ in range(3):
            result = client.infer("cached", pair_inputs(synchttp))
            assert result.as_numpy("OUTPUT0").tolist() == list(range(16))
        stats = client.get_inference_statistics("cached")["model_stats"][0]["inference_stats"]
        assert (stats["cache_hit"]["count"], stats["cache_miss"]["count"]) == (2, 1)
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert len(redis_server.client().keys("*")) == 1


# ---------------------------------------------------------------- models replaced in place


class TestRedisCacheContract(ResponseCacheContract):
    """The cache plugin contract; entries of an evicted scope are kept (shared cache)."""

    drops_on_evict = False

    @pytest.fixture
    async def cache(self, redis_server: RedisProcess) -> AsyncIterator[RedisCache]:
        cache = RedisCache(redis_server.config)
        yield cache
        await cache.close()


def calc_model(op: str) -> bytes:
    """ONNX: INPUT0, INPUT1 (FP32 [4]) → OUTPUT0 = INPUT0 <op> INPUT1."""
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from tritonx_backend_onnx.models import make_model

    io = [("INPUT0", TensorProto.FLOAT, [4]), ("INPUT1", TensorProto.FLOAT, [4])]
    return make_model(
        [helper.make_node(op, ["INPUT0", "INPUT1"], ["OUTPUT0"])],
        io,
        [("OUTPUT0", TensorProto.FLOAT, [4])],
    ).SerializeToString()


def add_calc(repo: ModelRepositoryBuilder, op: str) -> None:
    repo.add(
        "calc",
        backend="onnxruntime",
        inputs=[("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4])],
        versions={1: {"model.onnx": calc_model(op)}},
        extra=CACHED,
    )


CALC_A = np.array([1, 2, 3, 4], np.float32)
CALC_B = np.array([10, 20, 30, 40], np.float32)


def calc_server(repo: ModelRepositoryBuilder, redis_server: RedisProcess) -> Server:
    pm = make_plugin_manager(autoload=True, only=("cache_redis", "backend_onnx"))
    settings = loopback_settings(
        repo.root,
        model_control_mode="explicit",
        load_model=("calc",),
        cache_config={"redis": redis_server.config},
        allow_grpc=False,
        allow_metrics=False,
    )
    return Server(settings, plugin_manager=pm)


async def ask_calc(client: Any) -> list[float]:
    inputs = [
        httpclient.InferInput("INPUT0", [4], "FP32"),
        httpclient.InferInput("INPUT1", [4], "FP32"),
    ]
    inputs[0].set_data_from_numpy(CALC_A)
    inputs[1].set_data_from_numpy(CALC_B)
    return list((await client.infer("calc", inputs)).as_numpy("OUTPUT0").tolist())


def calc_hits(server: Server) -> tuple[int, int]:
    ((_, _, stats),) = server.model_statistics("calc")
    return stats.cache_hit.count, stats.cache_miss.count


@needs_redis
async def test_a_model_replaced_in_place_answers_with_its_new_files(
    model_repository: ModelRepositoryBuilder, redis_server: RedisProcess
) -> None:
    add_calc(model_repository, "Add")
    async with calc_server(model_repository, redis_server) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            assert await ask_calc(client) == (CALC_A + CALC_B).tolist()
            assert await ask_calc(client) == (CALC_A + CALC_B).tolist()
            assert calc_hits(server) == (1, 1)
            (model_repository.root / "calc" / "1" / "model.onnx").write_bytes(calc_model("Sub"))
            await client.load_model("calc")
            assert await ask_calc(client) == (CALC_A - CALC_B).tolist()
            (model_repository.root / "calc" / "1" / "model.onnx").write_bytes(calc_model("Mul"))
            await client.unload_model("calc")
            await client.load_model("calc")
            assert await ask_calc(client) == (CALC_A * CALC_B).tolist()
            assert await ask_calc(client) == (CALC_A * CALC_B).tolist()
            assert calc_hits(server) == (1, 1)
        finally:
            await client.close()
    # the old loads' entries stay for servers that may still serve those files
    assert len(redis_server.client().keys("*")) == 3


@needs_redis
async def test_entries_outlive_a_restart_on_the_same_files_only(
    model_repository: ModelRepositoryBuilder, redis_server: RedisProcess
) -> None:
    add_calc(model_repository, "Add")
    for expected_hits, answer in ((0, CALC_A + CALC_B), (1, CALC_A + CALC_B)):
        async with calc_server(model_repository, redis_server) as server:
            client = httpclient.InferenceServerClient(server.http_url)
            assert await ask_calc(client) == answer.tolist()
            await client.close()
            assert calc_hits(server) == (expected_hits, 1 - expected_hits)
    (model_repository.root / "calc" / "1" / "model.onnx").write_bytes(calc_model("Sub"))
    async with calc_server(model_repository, redis_server) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert await ask_calc(client) == (CALC_A - CALC_B).tolist()
        await client.close()
        assert calc_hits(server) == (0, 1)
