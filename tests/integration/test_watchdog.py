"""The event-loop watchdog: a backend that blocks the loop (its ``execute_async`` runs on the
loop and must not block; this one does) is reported once, with the loop thread's stack naming
the blocking function, and counted in ``tritonx_event_loop_blocked_total``; and a ``tritonx
serve`` whose loop is blocked for good still ends on SIGTERM, at ``--exit-timeout-secs`` plus
the hard-exit grace, with tritonserver's status 1."""

from __future__ import annotations

import asyncio
import logging
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import aiohttp
import numpy as np
import pluggy
import pytest
import tritonclient.http as httpclient

import tritonx
from tritonx import Backend, InferenceRequest, InferenceResponse, LoadContext, ModelInstance
from tritonx.testing import (
    ModelRepositoryBuilder,
    ServerThread,
    echo_plugin_env,
    listening,
    loopback_settings,
)

#: What a test waits at most for something that takes (well) under a second.
PATIENCE_S = 120.0


class LoopBlocker(ModelInstance):
    """Echoes IN as OUT from the event loop (``execute_async``), blocking the loop until
    :attr:`release` is set."""

    async_execution = True
    release = threading.Event()

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        return [InferenceResponse(outputs={"OUT": r.inputs["IN"]}) for r in requests]

    def execute_async(
        self, requests: Sequence[InferenceRequest]
    ) -> asyncio.Future[Sequence[InferenceResponse] | None]:
        block_the_loop_until_released()
        future: asyncio.Future[Sequence[InferenceResponse] | None] = (
            asyncio.get_running_loop().create_future()
        )
        future.set_result(self.execute(requests))
        return future


def block_the_loop_until_released() -> None:
    LoopBlocker.release.wait()


class LoopBlockBackend(Backend):
    name = "loopblock"

    def load(self, ctx: LoadContext) -> ModelInstance:
        return LoopBlocker()


class LoopBlockPlugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(LoopBlockBackend)


class Seen(logging.Handler):
    """Sets :attr:`event` when a record whose message matches ``pattern`` is logged."""

    def __init__(self, pattern: str) -> None:
        super().__init__()
        self.pattern = re.compile(pattern, re.S)
        self.event = threading.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if self.pattern.search(message):
            self.messages.append(message)
            self.event.set()


@pytest.fixture
def watch(request: pytest.FixtureRequest) -> Iterator[dict[str, Seen]]:
    """Handlers on ``tritonx.watchdog``: the incident (with the stack) and its end."""
    seen = {
        "blocked": Seen(r"event loop has been blocked.*block_the_loop_until_released"),
        "ran": Seen(r"event loop ran again"),
    }
    logger = logging.getLogger("tritonx.watchdog")
    level = logger.level
    logger.setLevel(logging.INFO)  # whatever the logging set-up of earlier tests left
    for handler in seen.values():
        logger.addHandler(handler)
    try:
        yield seen
    finally:
        for handler in seen.values():
            logger.removeHandler(handler)
        logger.setLevel(level)
        LoopBlocker.release.set()  # never leave a loop blocked behind a failed test


def _infer(url: str, into: dict[str, object]) -> None:
    try:
        client = httpclient.InferenceServerClient(url, network_timeout=PATIENCE_S)
        tensor = httpclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([3], dtype=np.int32))
        into["result"] = client.infer("blocker", [tensor]).as_numpy("OUT").tolist()
    except Exception as exc:
        into["error"] = exc


def test_a_blocked_loop_is_logged_with_its_stack_and_counted(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: pluggy.PluginManager,
    watch: dict[str, Seen],
) -> None:
    LoopBlocker.release.clear()
    plugin_manager.register(LoopBlockPlugin(), name="loopblock")
    model_repository.add(
        "blocker",
        backend="loopblock",
        inputs=[("IN", "INT32", [1])],
        outputs=[("OUT", "INT32", [1])],
    )
    settings = loopback_settings(
        model_repository.root, allow_grpc=False, event_loop_watchdog_secs=0.2
    )
    with ServerThread(tritonx.Server(settings, plugin_manager=plugin_manager)) as server:
        answer: dict[str, object] = {}
        client = threading.Thread(target=_infer, args=(server.http_url, answer))
        client.start()
        # the watchdog reports the incident while the loop is still blocked
        assert watch["blocked"].event.wait(PATIENCE_S), "no report of the blocked loop"
        (report,) = watch["blocked"].messages  # once per incident
        assert "execute_async" in report  # the stack leads from the caller to the block
        LoopBlocker.release.set()
        client.join(PATIENCE_S)
        assert answer == {"result": [3]}
        assert watch["ran"].event.wait(PATIENCE_S)
        with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=30) as r:
            metrics = r.read().decode()
    assert "# TYPE tritonx_event_loop_blocked counter" in metrics
    count = re.search(r"^tritonx_event_loop_blocked_total (\S+)$", metrics, re.M)
    seconds = re.search(r"^tritonx_event_loop_blocked_seconds_total (\S+)$", metrics, re.M)
    assert count is not None and float(count.group(1)) >= 1, metrics
    assert seconds is not None and float(seconds.group(1)) > 0, metrics


#: A plugin module for ``tritonx serve``: backend ``loopblock`` whose ``execute_async``
#: blocks the event loop for good.
FOREVER_PLUGIN = """
import threading

import tritonx


def block_the_loop_forever():
    threading.Event().wait()


class Blocker(tritonx.ModelInstance):
    async_execution = True

    def execute(self, requests):
        raise NotImplementedError

    def execute_async(self, requests):
        block_the_loop_forever()


class LoopBlockBackend(tritonx.Backend):
    name = "loopblock"

    def load(self, ctx):
        return Blocker()


@tritonx.hookimpl
def tritonx_register_backends(registry):
    registry.add(LoopBlockBackend)
"""


def test_sigterm_ends_a_server_whose_loop_is_blocked_for_good(
    model_repository: ModelRepositoryBuilder, tmp_path: Path
) -> None:
    model_repository.add(
        "blocker",
        backend="loopblock",
        inputs=[("IN", "INT32", [1])],
        outputs=[("OUT", "INT32", [1])],
    )
    env = echo_plugin_env(tmp_path / "site", FOREVER_PLUGIN)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonx",
            "serve",
            *("--model-repository", str(model_repository.root)),
            *("--http-address", "127.0.0.1", "--http-port", "0"),
            "--allow-grpc=false",
            "--allow-metrics=false",
            *("--exit-timeout-secs", "1", "--event-loop-watchdog-secs", "0.5"),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        addresses, lines = listening(proc, ("HTTPService",))
        log: queue.SimpleQueue[str] = queue.SimpleQueue()
        assert proc.stderr is not None
        stderr = proc.stderr
        reader = threading.Thread(target=lambda: [log.put(line) for line in stderr], daemon=True)
        reader.start()
        threading.Thread(target=_infer, args=(addresses["HTTPService"], {}), daemon=True).start()
        deadline = time.monotonic() + PATIENCE_S
        while not any("block_the_loop_forever" in line for line in lines):
            assert time.monotonic() < deadline, "".join(lines)[-3000:]
            try:
                lines.append(log.get(timeout=1.0))
            except queue.Empty:
                continue
        proc.send_signal(signal.SIGTERM)
        # tritonserver's status when its exit timeout expires
        assert proc.wait(PATIENCE_S) == 1
        reader.join(PATIENCE_S)
        while not log.empty():
            lines.append(log.get())
        text = "".join(lines)
        assert "event loop has been blocked for more than 0.5 s" in text
        assert "Signal (15) received." in text
        assert "failed to stop server: Exit timeout expired. Exiting immediately." in text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


async def test_the_watchdog_setting(model_repository: ModelRepositoryBuilder) -> None:
    """5 s unless set; 0 turns the watchdog (and its metrics) off; a negative one stops the
    start with INVALID_ARG."""
    from tritonx._runtime.plugins import make_plugin_manager
    from tritonx.config import ServerSettings
    from tritonx.errors import Code, TritonXError

    assert ServerSettings().event_loop_watchdog_secs == 5.0
    settings = loopback_settings(
        model_repository.root, allow_http=False, allow_grpc=False, event_loop_watchdog_secs=0
    )
    async with tritonx.Server(settings, plugin_manager=make_plugin_manager(autoload=False)) as s:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://{s.metrics_url}/metrics") as response,
        ):
            assert "tritonx_event_loop_blocked" not in await response.text()
    server = tritonx.Server(
        loopback_settings(model_repository.root, event_loop_watchdog_secs=-1),
        plugin_manager=make_plugin_manager(autoload=False),
    )
    with pytest.raises(TritonXError) as err:
        await server.start()
    assert err.value.code is Code.INVALID_ARG
