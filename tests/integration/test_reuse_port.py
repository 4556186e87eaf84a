"""``--reuse-http-port`` / ``--reuse-grpc-port``: several ``tritonx serve`` processes listen on
the same ports (SO_REUSEPORT) and the kernel spreads new connections over them, as with
tritonserver; without the flag the second server cannot bind."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tritonx.testing import ModelRepositoryBuilder, echo_plugin_env, free_port

CONNECTIONS = 24


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The identity test backend as an installed plugin (a real entry point)."""
    return echo_plugin_env(tmp_path / "site")


class Served:
    """A ``tritonx serve`` subprocess and its metrics port."""

    def __init__(self, proc: subprocess.Popen[str], metrics_port: int, log: Path) -> None:
        self.proc, self.metrics_port, self.log = proc, metrics_port, log

    def successes(self) -> int:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        found = re.search(
            r'^nv_inference_request_success\{model="echo",version="1"\} (\d+)', text, re.M
        )
        assert found is not None, text
        return int(found.group(1))


@pytest.fixture
def start(env: dict[str, str], tmp_path: Path) -> Iterator[object]:
    procs: list[subprocess.Popen[str]] = []

    def run(repo: Path, http: int, grpc: int, *flags: str) -> Served:
        metrics = free_port()
        log = tmp_path / f"server-{len(procs)}.log"
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "tritonx", "serve",
                "--model-repository", str(repo),
                "--http-address", "127.0.0.1", "--http-port", str(http),
                "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc),
                "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics),
                *flags,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
            text=True,
        )  # fmt: skip
        procs.append(proc)
        served = Served(proc, metrics, log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                served.successes()
                return served
            except (OSError, AssertionError):
                time.sleep(0.2)
        return served

    yield run
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(30)


def _infer(client_module: Any, port: int) -> None:
    """One request on a new connection (tritonclient.http) or channel (tritonclient.grpc)."""
    client = client_module.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        data = np.arange(4, dtype=np.float32).reshape(1, 4)
        tensor = client_module.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer("echo", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    finally:
        client.close()


def _infer_http(port: int) -> None:
    _infer(httpclient, port)


def _infer_grpc(port: int) -> None:
    _infer(grpcclient, port)


def test_two_servers_share_the_ports(
    model_repository: ModelRepositoryBuilder, start: object
) -> None:
    model_repository.add_identity("echo", max_batch_size=4)
    http, grpc = free_port(), free_port()
    flags = ("--reuse-http-port=true", "--reuse-grpc-port=true")
    first = start(model_repository.root, http, grpc, *flags)  # type: ignore[operator]
    second = start(model_repository.root, http, grpc, *flags)  # type: ignore[operator]
    for served in (first, second):
        assert served.proc.poll() is None, served.log.read_text()
    for _ in range(CONNECTIONS):
        _infer_http(http)
        _infer_grpc(grpc)
    counts = [first.successes(), second.successes()]
    assert sum(counts) == 2 * CONNECTIONS
    # the kernel hashes each new connection to one of the listeners: both get some
    assert min(counts) > 0, counts


def test_without_the_flag_the_second_server_cannot_bind(
    model_repository: ModelRepositoryBuilder, start: object
) -> None:
    model_repository.add_identity("echo", max_batch_size=4)
    http, grpc = free_port(), free_port()
    first = start(model_repository.root, http, grpc, "--reuse-http-port=true")  # type: ignore[operator]
    assert first.proc.poll() is None, first.log.read_text()
    # the second one asks for reuse on HTTP but not on gRPC: gRPC's bind fails
    second = start(model_repository.root, http, grpc, "--reuse-http-port=true")  # type: ignore[operator]
    assert second.proc.wait(60) != 0
    # and the first one goes on serving
    _infer_http(http)
    _infer_grpc(grpc)
    assert first.successes() == 2


def test_http_port_reuse_needs_the_flag_on_every_server(
    model_repository: ModelRepositoryBuilder, start: object
) -> None:
    model_repository.add_identity("echo", max_batch_size=4)
    http = free_port()
    first = start(model_repository.root, http, free_port())  # type: ignore[operator]
    assert first.proc.poll() is None, first.log.read_text()
    second = start(model_repository.root, http, free_port(), "--reuse-http-port=true")  # type: ignore[operator]
    assert second.proc.wait(60) != 0
    assert f"Unavailable - Socket '127.0.0.1:{http}' already in use" in second.log.read_text()
    _infer_http(http)
    assert first.successes() == 1
