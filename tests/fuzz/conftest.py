"""A real ``tritonx serve`` on the bundled example repository for the fuzz suites.

Explicit model control with every model loaded, so fuzzed load/unload calls exercise the
repository API; the server's stderr is kept for failure reports. Each fuzz case is followed by a
liveness check: the process must still run and answer ``/v2/health/live``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import pytest
import requests

from tritonx.testing import listening


@dataclass
class Served:
    """The fuzzed server: its process, ports and the log it wrote so far."""

    proc: subprocess.Popen[str]
    http_port: int
    grpc_port: int
    log: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def assert_alive(self) -> None:
        """The process still runs and answers ``/v2/health/live`` with 200."""
        assert self.proc.poll() is None, "server died:\n" + "".join(self.log)[-4000:]
        answer = requests.get(self.base_url + "/v2/health/live", timeout=10)
        assert answer.status_code == 200, answer.text


def example_repository() -> Path:
    return Path(str(resources.files("tritonx") / "examples" / "model_repository"))


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``tritonx serve --model-control-mode=explicit --load-model=*`` on loopback ports."""
    args = [
        sys.executable,
        "-m",
        "tritonx",
        "serve",
        "--model-repository",
        str(example_repository()),
        "--model-control-mode=explicit",
        "--load-model=*",
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--http-port=0",
        "--grpc-port=0",
        "--allow-metrics=false",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(args, env=env, stderr=subprocess.PIPE, text=True)
    addresses, lines = listening(proc, timeout=120)
    port = {name: int(address.rpartition(":")[2]) for name, address in addresses.items()}
    server = Served(proc, port["HTTPService"], port["GRPCInferenceService"], lines)
    stream = proc.stderr
    assert stream is not None
    threading.Thread(target=lambda: lines.extend(stream), daemon=True).start()
    try:
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
