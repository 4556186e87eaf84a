"""tritonserver's SageMaker and Vertex AI flags on the real ``tritonx serve``: they start the
``sagemaker`` and ``vertex_ai`` frontend plugins; ``AIP_MODE=PREDICTION`` makes Vertex AI the
default listener; the ports are checked as tritonserver's ``CheckPortCollision`` checks them."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from tritonx.cli import cli
from tritonx.testing import ModelRepositoryBuilder, echo_plugin_env

#: the log line of a started frontend: "<title> at <url>"
STARTED = re.compile(r'(Sagemaker HTTPService|Vertex AI frontend) at (http://[^\s"]+)')


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The identity test backend installed as a plugin (real entry point); no AIP_*."""
    env = echo_plugin_env(
        tmp_path / "site", plugins=("backend_echo", "frontend_sagemaker", "frontend_vertexai")
    )
    for name in list(env):
        if name.startswith("AIP_"):
            del env[name]
    return env


def tritonx(*args: str) -> list[str]:
    return [sys.executable, "-m", "tritonx", "serve", *args]


@pytest.mark.parametrize(
    ("args", "environ", "message"),
    [
        (
            ("--http-port", "9000", "--grpc-port", "9000"),
            {},
            "The server cannot listen to HTTP requests and GRPC requests at the same address "
            "and port 0.0.0.0:9000",
        ),
        (
            ("--allow-sagemaker=true", "--sagemaker-port", "8000"),
            {},
            "The server cannot listen to HTTP requests and SageMaker requests at the same "
            "address and port 0.0.0.0:8000",
        ),
        (
            ("--allow-sagemaker=true", "--sagemaker-safe-port-range", "8000-8001"),
            {},
            "The server cannot listen to metrics requests at port 8002, allowed port range "
            "is [8000, 8001]",
        ),
        (
            ("--allow-sagemaker=true", "--sagemaker-safe-port-range", "8000"),
            {},
            "'8000' is not <integer>-<integer>",
        ),
        (
            (),
            {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "8002"},
            "The server cannot listen to metrics requests and Vertex AI requests at the same "
            "address and port 0.0.0.0:8002",
        ),
        (
            ("--allow-vertex-ai=true",),
            {"AIP_HTTP_PORT": "80a"},
            "AIP_HTTP_PORT must be a port number, got '80a'",
        ),
    ],
    ids=[
        "http-grpc",
        "sagemaker-http",
        "safe-range",
        "bad-range",
        "vertex-metrics",
        "bad-aip-port",
    ],
)
def test_listener_ports_are_checked_as_tritonserver_checks_them(
    tmp_path: Path, args: tuple[str, ...], environ: dict[str, str], message: str
) -> None:
    """Refused before anything starts (the CLI in-process; AIP_* of this process unset)."""
    unset: dict[str, str | None] = {name: None for name in os.environ if name.startswith("AIP_")}
    result = CliRunner().invoke(
        cli, ["serve", "--model-repository", str(tmp_path), *args], env={**unset, **environ}
    )
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_the_sagemaker_flags_start_the_sagemaker_frontend(
    model_repository: ModelRepositoryBuilder, env: dict[str, str]
) -> None:
    model_repository.add_identity("m")
    args = (
        "--allow-sagemaker=true",
        "--sagemaker-port",
        "0",
        "--sagemaker-thread-count",
        "2",
        "--allow-grpc=false",
        "--allow-metrics=false",
        "--http-port",
        "0",
    )
    with _serving(model_repository.root, env, args, {"Sagemaker HTTPService"}) as (log, urls):
        assert set(urls) == {"Sagemaker HTTPService"}
        with urllib.request.urlopen(urls["Sagemaker HTTPService"] + "/ping", timeout=30) as r:
            assert r.status == 200
        assert "Started HTTPService" in log()


def test_aip_mode_prediction_serves_vertex_ai_alone(
    model_repository: ModelRepositoryBuilder, env: dict[str, str]
) -> None:
    """Under Vertex AI tritonserver opens the Vertex AI port (AIP_HTTP_PORT) and not HTTP or
    gRPC, unless asked, and serves AIP_STORAGE_URI when no --model-repository is given."""
    model_repository.add_identity("m")
    environ = {
        "AIP_STORAGE_URI": str(model_repository.root),
        "AIP_MODE": "PREDICTION",
        "AIP_HTTP_PORT": "0",
        "AIP_HEALTH_ROUTE": "/health",
        "AIP_PREDICT_ROUTE": "/predict",
    }
    with _serving(
        model_repository.root,
        {**env, **environ},
        ("--allow-metrics=false",),
        {"Vertex AI frontend"},
    ) as (log, urls):
        assert set(urls) == {"Vertex AI frontend"}
        with urllib.request.urlopen(urls["Vertex AI frontend"] + "/health", timeout=30) as r:
            assert r.status == 200
        assert "| m     | 1       | READY  |" in log()
        assert "Started HTTPService" not in log()
        assert "Started GRPCInferenceService" not in log()


def test_a_contract_whose_plugin_is_not_installed_is_refused(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """``TRITONX_PLUGINS`` limits the plugins loaded: without the SageMaker plugin the flag
    stops the start, naming what is installed."""
    result = subprocess.run(
        tritonx("--model-repository", str(tmp_path), "--allow-sagemaker=true"),
        env={**env, "TRITONX_PLUGINS": "backend_echo"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "unknown frontend 'sagemaker'" in result.stderr


# ---------------------------------------------------------------------------------- helpers


def _answered(sock: socket.socket, path: str) -> socket.socket:
    """``sock`` once a ``GET path`` on it is answered (the server has accepted it); kept
    open. A server out of descriptors never answers: the socket's timeout fails the test."""
    sock.settimeout(30)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, "closed before the answer"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    match = re.search(rb"(?i)content-length: *(\d+)", head)
    length = int(match.group(1)) if match else 0
    while len(body) < length:
        chunk = sock.recv(4096)
        assert chunk, "closed before the whole answer"
        body += chunk
    return sock


class _serving:
    """A ``tritonx serve`` subprocess until each frontend of ``expect`` has logged its URL
    (frontends start last): (the log so far, {title: url}); SIGTERM at exit."""

    def __init__(
        self,
        repo: Path | None,
        env: dict[str, str],
        args: Sequence[str],
        expect: set[str],
        *,
        nofile: int | None = None,
    ) -> None:
        where = () if repo is None else ("--model-repository", str(repo))

        def limit() -> None:  # (in the child) an open-file limit of ``nofile``
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(
            tritonx(*where, *args),
            env=env,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=limit,
        )
        self.expect = expect
        self.lines: list[str] = []

    def __enter__(self) -> tuple[Callable[[], str], dict[str, str]]:
        assert self.proc.stderr is not None
        urls: dict[str, str] = {}
        for line in self.proc.stderr:
            self.lines.append(line)
            match = STARTED.search(line)
            if match:
                urls[match.group(1)] = match.group(2)
                if self.expect <= set(urls):
                    break
        else:
            raise AssertionError("the server exited: " + "".join(self.lines))
        return (lambda: "".join(self.lines)), urls

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            _, rest = self.proc.communicate(timeout=60)
            self.lines.append(rest)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def test_tritonx_plugins_lists_both_frontends(env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tritonx", "plugins"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    frontends = {
        name
        for plugin in json.loads(result.stdout)
        for name in plugin.get("registered", {}).get("frontends", [])
    }
    assert {"sagemaker", "vertex_ai"} <= frontends


def test_idle_connections_on_the_frontends_leave_descriptors_for_the_http_port(
    model_repository: ModelRepositoryBuilder, env: dict[str, str]
) -> None:
    """The HTTP listeners (the HTTP port, SageMaker, Vertex AI) share the process's
    descriptors: a client holding idle connections on both frontend ports (more than either's
    share) cannot starve the HTTP port, whose health answers at once."""
    model_repository.add_identity("m")
    environ = {"AIP_HEALTH_ROUTE": "/health", "AIP_PREDICT_ROUTE": "/predict", "AIP_HTTP_PORT": "0"}
    args = (
        "--allow-sagemaker=true",
        "--sagemaker-port",
        "0",
        "--allow-vertex-ai=true",
        "--allow-grpc=false",
        "--allow-metrics=false",
        "--http-port",
        "0",
    )
    expect = {"Sagemaker HTTPService", "Vertex AI frontend"}
    serving = _serving(model_repository.root, {**env, **environ}, args, expect, nofile=128)
    with serving as (log, urls):
        http = re.search(r"Started HTTPService at (\S+):(\d+)", log())
        assert http is not None
        held: list[socket.socket] = []
        try:
            for title, url in urls.items():
                port = int(url.rsplit(":", 1)[1])
                path = "/ping" if title.startswith("Sagemaker") else "/health"
                for _ in range(60):  # each answered once (accepted), then held idle
                    held.append(_answered(socket.create_connection(("127.0.0.1", port)), path))
            health = f"http://127.0.0.1:{http.group(2)}/v2/health/ready"
            with urllib.request.urlopen(health, timeout=30) as answer:
                assert answer.status == 200
        finally:
            for sock in held:
                sock.close()
