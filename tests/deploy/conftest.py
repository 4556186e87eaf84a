"""Fixtures of the deployment tests: real ``tritonx serve`` processes (as the container runs
them) with the identity test backend installed as a plugin through a real entry point."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tritonx.testing import echo_plugin_env, free_port


@pytest.fixture
def echo_env(tmp_path: Path) -> dict[str, str]:
    """An environment where the identity backend is an installed plugin (its entry point)."""
    return echo_plugin_env(tmp_path / "site", pythonpath=sys.path)


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """The status of a GET, or None when the connection is refused or fails."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return None


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@dataclass
class Replica:
    """One ``tritonx serve`` process on loopback ports (a pod)."""

    proc: subprocess.Popen[str]
    http_port: int
    grpc_port: int
    metrics_port: int
    log: Path
    name: str = ""
    served: int = field(default=0)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def ready_status(self) -> int | None:
        """The status of GET /v2/health/ready (None: the connection failed)."""
        return http_status(f"http://{self.url}/v2/health/ready", timeout=1)

    def ready(self) -> bool:
        return self.ready_status() == 200

    def accepts_connections(self) -> bool:
        """Whether the HTTP listener accepts a TCP connection."""
        return accepts_connections(self.http_port)

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited: {self.log.read_text()}")
            if self.ready():
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.name} not ready: {self.log.read_text()}")

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)


StartReplica = Callable[..., Replica]


@pytest.fixture
def start_replica(tmp_path: Path, echo_env: dict[str, str]) -> Iterator[StartReplica]:
    """Start ``argv`` (``tritonx serve ...``) with loopback ports added; killed at teardown."""
    started: list[Replica] = []

    def start(argv: list[str], name: str = "replica") -> Replica:
        http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
        log = tmp_path / f"{name}.log"
        proc = subprocess.Popen(
            [
                *argv,
                "--http-address=127.0.0.1",
                f"--http-port={http_port}",
                "--grpc-address=127.0.0.1",
                f"--grpc-port={grpc_port}",
                f"--metrics-port={metrics_port}",
            ],
            env=echo_env,
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
            text=True,
        )
        replica = Replica(proc, http_port, grpc_port, metrics_port, log, name)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        if replica.proc.poll() is None:
            replica.proc.kill()
        replica.proc.wait(30)
