"""A real ``tritonx serve`` subprocess for end-to-end tests: :class:`ServeProcess`."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

#: Samples of ``/metrics``: {(sample name, sorted labels): value}.
MetricSamples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class ServeProcess:
    """``tritonx serve`` over ``root`` with ``options``, on free loopback ports, its log in
    the file ``log`` (a pipe nobody reads would fill up and block it). Ready once each of its
    ``listeners`` answers (``http`` and ``grpc``: server ready; ``metrics``: ``/metrics``);
    the ones left out are turned off. A context manager that stops the server on exit.

    :param plugins: ``TRITONX_PLUGINS`` of the server (the test process's own ``TRITONX_*``
        variables are not passed on).
    :param env: variables set in the server's environment (``None``: removed).
    :param timeout: seconds any one wait may take before the test fails (a hang, not a
        measurement).
    """

    def __init__(
        self,
        root: Path | str,
        log: Path,
        *options: str,
        plugins: Sequence[str] = ("backend_onnx", "backend_python"),
        listeners: Sequence[str] = ("http", "grpc", "metrics"),
        env: Mapping[str, str | None] | None = None,
        timeout: float = 60.0,
    ) -> None:
        from tritonx.testing import free_port  # (the package imports this module)

        unknown = set(listeners) - {"http", "grpc", "metrics"}
        if unknown:
            raise ValueError(f"unknown listeners: {sorted(unknown)}")
        self.listeners = tuple(listeners)
        self.timeout = timeout
        self.log = log
        self.http_url = f"127.0.0.1:{free_port()}" if "http" in listeners else ""
        self.grpc_url = f"127.0.0.1:{free_port()}" if "grpc" in listeners else ""
        self.metrics_url = f"127.0.0.1:{free_port()}" if "metrics" in listeners else ""
        args = [sys.executable, "-m", "tritonx", "serve", f"--model-repository={root}"]
        for name, url in (("http", self.http_url), ("grpc", self.grpc_url)):
            if url:
                args += [f"--{name}-address=127.0.0.1", f"--{name}-port={url.rsplit(':', 1)[1]}"]
            else:
                args.append(f"--allow-{name}=false")
        if self.metrics_url:
            args += [
                "--metrics-address=127.0.0.1",
                f"--metrics-port={self.metrics_url.rsplit(':', 1)[1]}",
            ]
        else:
            args.append("--allow-metrics=false")
        environ = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
        environ["TRITONX_PLUGINS"] = ",".join(plugins)
        for key, value in (env or {}).items():
            if value is None:
                environ.pop(key, None)
            else:
                environ[key] = value
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [*args, *options], stdout=out, stderr=subprocess.STDOUT, env=environ
            )
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _wait_ready(self) -> None:
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient

        clients: list[Any] = []
        if self.http_url:
            clients.append(httpclient.InferenceServerClient(self.http_url))
        if self.grpc_url:
            clients.append(grpcclient.InferenceServerClient(self.grpc_url))
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                self.check_alive()
                with contextlib.suppress(Exception):
                    if all(c.is_server_ready() for c in clients) and (
                        not self.metrics_url or self.metrics()
                    ):
                        return
                assert time.monotonic() < deadline, f"not ready:\n{self.log_text()}"
                threading.Event().wait(0.05)  # a bounded poll of the listeners
        finally:
            for client in clients:
                client.close()

    def metrics(self) -> MetricSamples:
        """``/metrics``, as {(sample name, sorted labels): value} (the parser names a
        counter's samples with ``_total``)."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"http://{self.metrics_url}/metrics", timeout=30) as answer:
            text = answer.read().decode()
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def log_size(self) -> int:
        """The log's size now: an offset for :meth:`wait_log`."""
        return self.log.stat().st_size

    def wait_log(self, offset: int, *patterns: str) -> int:
        """Wait until the log, from byte ``offset``, has lines matching ``patterns`` (regular
        expressions) in that order; returns the offset after the last one."""
        deadline = time.monotonic() + self.timeout
        while True:
            with self.log.open("rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            position = 0
            for pattern in patterns:
                found = re.compile(pattern).search(text, position)
                if found is None:
                    break
                position = found.end()
            else:
                return offset + len(text[:position].encode())
            self.check_alive()
            assert time.monotonic() < deadline, f"no {patterns} in the log:\n{self.log_text()}"
            threading.Event().wait(0.02)  # a bounded poll of the log file

    def check_alive(self) -> None:
        """Fail (with the log) if the server has exited."""
        assert self.proc.poll() is None, f"tritonx serve exited:\n{self.log_text()}"

    def log_text(self) -> str:
        """The log's last 8000 characters."""
        return self.log.read_text(errors="replace")[-8000:]

    def close(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 30 s)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
