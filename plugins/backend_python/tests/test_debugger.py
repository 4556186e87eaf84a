"""Debugging a ``model.py``: ``TRITONX_DEBUG_MODEL`` starts a model's workers under debugpy,
each instance on its own loopback port, and a DAP client (the protocol VS Code and PyCharm
speak, written here over a plain socket) connected to that port gets its answers.

* Without ``TRITONX_DEBUG_WAIT`` the model loads and serves at once; the DAP client's
  ``initialize`` request is answered by each instance's debugger.
* With ``TRITONX_DEBUG_WAIT=1`` the load waits until a debugger has attached (``initialize``,
  ``attach``, ``configurationDone``) and only then does the model become ready and serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tritonx import InferenceRequest, Server, TritonXError
from tritonx.testing import ModelRepositoryBuilder, free_port, loopback_settings

pytest.importorskip("debugpy", reason="debugging a model needs debugpy (the [debug] extra)")

MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(
                        "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2
                    )
                ]
            )
            for r in requests
        ]
"""


class DapClient:
    """A Debug Adapter Protocol client: ``Content-Length``-framed JSON over TCP."""

    def __init__(self, port: int, deadline: float) -> None:
        self.sock = self._connect(port, deadline)
        self.sock.settimeout(max(1.0, deadline - time.monotonic()))
        self._buffer = b""
        self._seq = 0

    @staticmethod
    def _connect(port: int, deadline: float) -> socket.socket:
        # the worker starts listening once its Init arrives: retry until it does
        while True:
            try:
                return socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)

    def send(self, command: str, arguments: dict[str, Any] | None = None) -> int:
        self._seq += 1
        body = json.dumps(
            {"seq": self._seq, "type": "request", "command": command, "arguments": arguments or {}}
        ).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self._seq

    def _message(self) -> dict[str, Any]:
        while b"\r\n\r\n" not in self._buffer:
            self._read()
        head, _, rest = self._buffer.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            self._buffer = head + b"\r\n\r\n" + rest
            self._read()
            head, _, rest = self._buffer.partition(b"\r\n\r\n")
        self._buffer = rest[length:]
        message: dict[str, Any] = json.loads(rest[:length])
        return message

    def _read(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("the debug adapter closed the connection")
        self._buffer += chunk

    def response(self, seq: int) -> dict[str, Any]:
        """The response to request ``seq`` (events before it are skipped)."""
        while True:
            message = self._message()
            if message.get("type") == "response" and message.get("request_seq") == seq:
                return message

    def event(self, name: str) -> dict[str, Any]:
        while True:
            message = self._message()
            if message.get("type") == "event" and message.get("event") == name:
                return message

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.send("disconnect", {"terminateDebuggee": False})
        self.sock.close()


@contextlib.contextmanager
def dap(port: int, timeout: float = 60.0) -> Iterator[DapClient]:
    client = DapClient(port, time.monotonic() + timeout)
    try:
        yield client
    finally:
        client.close()


def initialize(client: DapClient) -> dict[str, Any]:
    seq = client.send(
        "initialize",
        {"clientID": "tritonx-test", "adapterID": "debugpy", "pathFormat": "path"},
    )
    return client.response(seq)


def add_model(repo: ModelRepositoryBuilder, name: str, instances: int = 1) -> None:
    repo.add(
        name,
        backend="python",
        inputs=[("IN", "FP32", [2])],
        outputs=[("OUT", "FP32", [2])],
        extra=f"instance_group [ {{ count: {instances}, kind: KIND_CPU }} ]\n",
        versions={1: {"model.py": MODEL}},
    )


async def doubles(server: Server, name: str) -> None:
    response = await server.infer(
        InferenceRequest(name, inputs={"IN": np.array([1.5, 2.0], np.float32)})
    )
    assert response.outputs["OUT"].tolist() == [3.0, 4.0]


def consecutive_free_ports(count: int) -> int:
    """The first of ``count`` consecutive TCP ports free on the loopback interface now."""
    while True:
        first = free_port()
        with contextlib.ExitStack() as stack:
            try:
                for port in range(first + 1, first + count):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return first


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    return ("backend_python",)


async def test_each_instance_answers_a_dap_client(
    model_repository: ModelRepositoryBuilder,
    monkeypatch: pytest.MonkeyPatch,
    plugin_manager: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    add_model(model_repository, "debugged", instances=2)
    add_model(model_repository, "plain")
    port = consecutive_free_ports(2)
    monkeypatch.setenv("TRITONX_DEBUG_MODEL", f"debugged:{port}")
    monkeypatch.delenv("TRITONX_DEBUG_WAIT", raising=False)
    settings = loopback_settings(model_repository.root)
    async with Server(settings, plugin_manager=plugin_manager) as server:
        assert server.model_ready("debugged") and server.model_ready("plain")
        await doubles(server, "debugged")
        for instance in range(2):
            with dap(port + instance) as client:
                answer = await asyncio.to_thread(initialize, client)
            assert answer["success"] is True, answer
            assert answer["command"] == "initialize"
            assert answer["body"]["supportsConfigurationDoneRequest"] is True
        await doubles(server, "debugged")
        await doubles(server, "plain")
    text = caplog.text
    for instance in range(2):
        assert f"listens for a debugger on 127.0.0.1:{port + instance}" in text
    assert "'plain'" not in "".join(
        r.getMessage() for r in caplog.records if "listens for a debugger" in r.getMessage()
    )


async def test_the_load_waits_for_the_debugger_to_attach(
    model_repository: ModelRepositoryBuilder, monkeypatch: pytest.MonkeyPatch, plugin_manager: Any
) -> None:
    add_model(model_repository, "debugged")
    port = free_port()
    monkeypatch.setenv("TRITONX_DEBUG_MODEL", f"debugged:{port}")
    monkeypatch.setenv("TRITONX_DEBUG_WAIT", "1")
    settings = loopback_settings(model_repository.root, model_control_mode="explicit")
    async with Server(settings, plugin_manager=plugin_manager) as server:
        load = asyncio.create_task(server.load_model("debugged"))

        def attach() -> None:
            with dap(port) as client:
                assert initialize(client)["success"] is True
                # the model is still loading: its initialize waits for the debugger
                assert not load.done()
                assert not server.model_ready("debugged")
                seq = client.send("attach", {"justMyCode": False})
                client.event("initialized")
                done = client.send("configurationDone")
                assert client.response(done)["success"] is True
                assert client.response(seq)["success"] is True
                # attached: the load completes while the debugger stays connected
                asyncio.run_coroutine_threadsafe(asyncio.wait_for(load, 60), loop).result()
                assert server.model_ready("debugged")
                asyncio.run_coroutine_threadsafe(doubles(server, "debugged"), loop).result()

        loop = asyncio.get_running_loop()
        await asyncio.to_thread(attach)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("debugged:0", "the port of model 'debugged' must be a number from 1 to 65535"),
        ("debugged:http", "got 'http'"),
        (":5678", "':5678' names no model"),
    ],
)
async def test_a_malformed_setting_fails_the_load(
    model_repository: ModelRepositoryBuilder,
    monkeypatch: pytest.MonkeyPatch,
    plugin_manager: Any,
    value: str,
    message: str,
) -> None:
    add_model(model_repository, "debugged")
    monkeypatch.setenv("TRITONX_DEBUG_MODEL", value)
    settings = loopback_settings(model_repository.root, model_control_mode="explicit")
    async with Server(settings, plugin_manager=plugin_manager) as server:
        with pytest.raises(TritonXError, match=message):
            await server.load_model("debugged")
        assert not server.model_ready("debugged")


async def test_an_in_process_model_cannot_be_debugged_alone(
    model_repository: ModelRepositoryBuilder, monkeypatch: pytest.MonkeyPatch, plugin_manager: Any
) -> None:
    model_repository.add(
        "inside",
        backend="python",
        inputs=[("IN", "FP32", [2])],
        outputs=[("OUT", "FP32", [2])],
        parameters={"TRITONX_EXECUTION_MODE": "in_process"},
        versions={1: {"model.py": MODEL}},
    )
    monkeypatch.setenv("TRITONX_DEBUG_MODEL", "inside")
    settings = loopback_settings(model_repository.root, model_control_mode="explicit")
    async with Server(settings, plugin_manager=plugin_manager) as server:
        with pytest.raises(TritonXError, match="only a worker process can be debugged alone"):
            await server.load_model("inside")
