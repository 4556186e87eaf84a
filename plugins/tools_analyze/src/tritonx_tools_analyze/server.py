"""A ``tritonx serve`` subprocess in explicit mode, and its CPU time and resident memory.

Each variant gets a fresh server (nothing of the previous variant stays in its memory); the
variant is loaded through the load API with a ``config`` override, as a user would. CPU time
and RSS are read from ``/proc`` for the server and its child processes (python backend
workers), so they are the server's alone, not the load generator's.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class ServerError(RuntimeError):
    """The server did not start, or the variant did not load."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
        except OSError:
            continue
        out.extend(int(c) for c in text.split())
    return out


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo.extend(_children(p))
    return seen


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` (those still running)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICK


def rss_bytes(pids: list[int]) -> int:
    """Resident memory of ``pids`` (bytes)."""
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


def busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy since boot (``/proc/stat``)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / _TICK


def own_cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (perf_analyzer runs)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class ResourceSampler:
    """Samples the server tree's RSS (peak) every ``interval`` s and its CPU time between
    :meth:`start` and :meth:`stop`; also the CPU the rest of the machine used meanwhile
    (neither the server nor the load generator: other work that makes numbers noisy)."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_rss = 0
        self.cpu_percent = 0.0
        self.others_percent = 0.0
        self._busy0 = 0.0
        self._own0 = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._cpu0 = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._cpu0 = cpu_seconds(process_tree(self.pid))
        self._busy0 = busy_seconds()
        self._own0 = own_cpu_seconds()
        self.peak_rss = rss_bytes(process_tree(self.pid))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak_rss = max(self.peak_rss, rss_bytes(process_tree(self.pid)))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        wall = time.perf_counter() - self._t0
        cpu = cpu_seconds(process_tree(self.pid)) - self._cpu0
        self.cpu_percent = 100.0 * cpu / wall if wall > 0 else 0.0
        others = busy_seconds() - self._busy0 - cpu - (own_cpu_seconds() - self._own0)
        self.others_percent = max(0.0, 100.0 * others / wall) if wall > 0 else 0.0
        self.peak_rss = max(self.peak_rss, rss_bytes(process_tree(self.pid)))


class ServerProcess:
    """``python -m tritonx serve --model-control-mode=explicit`` on free loopback ports."""

    def __init__(self, repository: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.repository = repository
        self.extra_args = extra_args
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and wait until it is live.

        :raises ServerError: with the server's output when it exits or is not live in time.
        """
        cmd = [
            sys.executable,
            "-m",
            "tritonx",
            "serve",
            "--model-repository",
            str(self.repository),
            "--model-control-mode=explicit",
            "--http-address=127.0.0.1",
            f"--http-port={self.http_port}",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={self.grpc_port}",
            "--allow-metrics=false",
            "--http-status-page=false",
            *self.extra_args,
        ]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        with httpclient.InferenceServerClient(self.url) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise ServerError(f"tritonx serve exited: {self.output()}")
                try:
                    if client.is_server_live():
                        return
                except Exception:
                    pass
                time.sleep(0.1)
        raise ServerError(f"tritonx serve not live after {timeout:.0f} s: {self.output()}")

    def output(self, limit: int = 4000) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-limit:]

    def load(self, model: str, config: dict[str, Any] | None) -> dict[str, Any]:
        """Load ``model`` (with ``config`` as the load API's override) and return the config
        the server reports for it.

        :raises ServerError: with the server's message when the load fails.
        """
        with httpclient.InferenceServerClient(self.url, network_timeout=600.0) as client:
            try:
                client.load_model(model, config=json.dumps(config) if config else None)
                return dict(client.get_model_config(model))
            except InferenceServerException as exc:
                raise ServerError(exc.message() or str(exc)) from None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
