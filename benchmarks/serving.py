"""``tritonx serve`` as a subprocess on loopback, for the benchmarks that measure the server
process itself (its RSS and CPU from ``/proc``): ``grpc_memory.py``, ``trace_memory.py``."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    """A loopback port free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Served:
    """A ready server: its process id and ports."""

    pid: int
    http_port: int
    grpc_port: int


@contextlib.contextmanager
def serve(repo: Path, extra: list[str], log: Path, stop_wait: float = 60) -> Iterator[Served]:
    """``tritonx serve`` over ``repo`` (more flags in ``extra``, output to ``log``), yielded
    once ``/v2/health/ready`` answers 200; SIGTERM at the end, SIGKILL ``stop_wait`` seconds
    later."""
    http, grpc_port, metrics = free_port(), free_port(), free_port()
    cmd = [sys.executable, "-m", "tritonx", "serve", "--model-repository", str(repo)]
    cmd += [
        "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
        "--http-port", str(http), "--grpc-port", str(grpc_port),
        "--metrics-port", str(metrics), "--log-info", "false", *extra,
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: see {log}")
            try:
                url = f"http://127.0.0.1:{http}/v2/health/ready"
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become ready")
            time.sleep(0.05)
        yield Served(proc.pid, http, grpc_port)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(stop_wait)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
