"""A Python model whose ``execute`` never returns cannot hold an unload, a reload or the server's
exit: at ``--model-unload-timeout-secs`` (``--exit-timeout-secs`` when the server exits) the
requests it held fail, its worker process is killed (its thread abandoned in in-process mode)
and the unload completes; the model can be loaded again. Real tritonclient calls against an
in-process server, and ``tritonx serve`` stopped by SIGTERM while such an unload waits."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http as syncclient
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

from tritonx import Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, listening, loopback_settings

pytest.importorskip("tritonx_backend_python")

#: execute() answers X as Y, except for X == 1: then it says so in a file of STATE_DIR and
#: blocks forever on an event nothing sets.
HANG_PY = """
import json
import os
import threading

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.state = parameters["STATE_DIR"]["string_value"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if int(x[0]) == 1:
                marker = os.path.join(self.state, f"hung-{os.getpid()}-{threading.get_ident()}")
                open(marker, "w").close()
                threading.Event().wait()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
"""

UNLOAD_TIMEOUT_S = 1.0
#: What a test waits at most for something that takes (well) under a second.
PATIENCE_S = 120.0

NOT_READY = "Request for unknown model: 'hang' version 1 is not at ready state"


def add_hang(repo: ModelRepositoryBuilder, state: Path, mode: str = "process") -> None:
    parameters = {"STATE_DIR": str(state)}
    if mode != "process":
        parameters["TRITONX_EXECUTION_MODE"] = mode
    repo.add(
        "hang",
        backend="python",
        inputs=[("X", "INT32", [1])],
        outputs=[("Y", "INT32", [1])],
        parameters=parameters,
        versions={1: {"model.py": HANG_PY}},
    )


@pytest.fixture
def state(tmp_path: Path) -> Path:
    folder = tmp_path / "state"
    folder.mkdir()
    return folder


@contextlib.asynccontextmanager
async def hang_server(repo: ModelRepositoryBuilder) -> AsyncIterator[Server]:
    server = Server(
        loopback_settings(
            repo.root,
            model_control_mode="explicit",
            load_model=("hang",),
            model_unload_timeout_secs=UNLOAD_TIMEOUT_S,
        ),
        plugin_manager=make_plugin_manager(autoload=True, only=["backend_python"]),
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def until(check: Any, what: str) -> None:
    """Wait for ``check()`` (an event the server makes happen) to hold."""
    deadline = time.monotonic() + PATIENCE_S
    while not await check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.02)


async def hung(state: Path) -> bool:
    return any(state.glob("hung-*"))


async def pending_count(server: Server) -> int:
    """``nv_inference_pending_request_count`` of ``hang`` from ``/metrics``."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{server.metrics_url}/metrics") as response,
    ):
        text = await response.text()
    for line in text.splitlines():
        if line.startswith("nv_inference_pending_request_count{") and 'model="hang"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def http_x(value: int) -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("X", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [tensor]


def grpc_x(value: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("X", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [tensor]


async def hold_requests(
    server: Server, state: Path, client: httpclient.InferenceServerClient
) -> tuple[asyncio.Task[Any], list[asyncio.Task[Any]]]:
    """One request executing (stuck) and two queued behind it on the only instance."""
    stuck = asyncio.ensure_future(client.infer("hang", http_x(1)))
    await until(lambda: hung(state), "execute() started")
    queued = [asyncio.ensure_future(client.infer("hang", http_x(0))) for _ in range(2)]
    await until(lambda: _equals(pending_count(server), 2), "two requests queued")
    return stuck, queued


async def _equals(value: Any, expected: int) -> bool:
    return bool(await value == expected)


async def failure(task: asyncio.Task[Any]) -> InferenceServerException:
    """The error a held request was answered with (it must be answered)."""
    with pytest.raises(InferenceServerException) as caught:
        await asyncio.wait_for(task, PATIENCE_S)
    return caught.value


@pytest.mark.parametrize("mode", ["process", "in_process"])
async def test_unload_of_a_hung_model_ends_at_its_timeout(
    model_repository: ModelRepositoryBuilder, state: Path, mode: str
) -> None:
    add_hang(model_repository, state, mode)
    async with hang_server(model_repository) as server:
        client = httpclient.InferenceServerClient(server.http_url, conn_timeout=PATIENCE_S)
        try:
            stuck, queued = await hold_requests(server, state, client)
            # the unload waits UNLOAD_TIMEOUT_S for them, then ends what still runs
            await asyncio.wait_for(client.unload_model("hang"), PATIENCE_S)
            assert not await client.is_model_ready("hang")
            error = await failure(stuck)
            if mode == "process":  # its worker process was killed: Triton's error for that
                assert error.status() == "500", error
                assert "Stub process 'hang_0' is not healthy." in str(error.message())
            else:  # its thread is abandoned: failed as a request of an unloaded version
                assert error.status() == "503", error
                assert NOT_READY in str(error.message())
            for task in queued:
                error = await failure(task)
                assert error.status() == "503" and NOT_READY in str(error.message()), error

            await asyncio.wait_for(client.load_model("hang"), PATIENCE_S)
            result = await client.infer("hang", http_x(7))
            assert result.as_numpy("Y").tolist() == [7]
        finally:
            await client.close()


async def test_reload_of_a_hung_model_replaces_it_at_the_unload_timeout(
    model_repository: ModelRepositoryBuilder, state: Path
) -> None:
    add_hang(model_repository, state)
    async with hang_server(model_repository) as server:
        client = httpclient.InferenceServerClient(server.http_url, conn_timeout=PATIENCE_S)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            stuck, queued = await hold_requests(server, state, client)
            model_py = model_repository.root / "hang" / "1" / "model.py"
            model_py.write_text(HANG_PY + "\n# changed: the load below reloads the model\n")
            # the new version loads, then the old one is unloaded: its held requests fail
            await asyncio.wait_for(grpc.load_model("hang"), PATIENCE_S)
            error = await failure(stuck)
            assert "Stub process 'hang_0' is not healthy." in str(error.message()), error
            for task in queued:
                error = await failure(task)
                assert error.status() == "503" and NOT_READY in str(error.message()), error
            assert await grpc.is_model_ready("hang")
            result = await grpc.infer("hang", grpc_x(5))
            assert result.as_numpy("Y").tolist() == [5]
        finally:
            await client.close()
            await grpc.close()


def _infer(url: str, value: int, into: dict[str, object]) -> None:
    try:
        client = syncclient.InferenceServerClient(url, network_timeout=PATIENCE_S)
        tensor = syncclient.InferInput("X", [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
        into["result"] = client.infer("hang", [tensor]).as_numpy("Y")
    except Exception as exc:
        into["error"] = exc


def _unload(url: str, into: dict[str, object]) -> None:
    try:
        syncclient.InferenceServerClient(url, network_timeout=PATIENCE_S).unload_model("hang")
        into["done"] = True
    except Exception as exc:
        into["error"] = exc


def test_sigterm_stops_the_server_while_a_hung_model_unloads(
    model_repository: ModelRepositoryBuilder, state: Path
) -> None:
    """The issue's case: an unload of the hung model is waiting (its own timeout is long)
    when SIGTERM comes; the server still stops within --exit-timeout-secs and a margin."""
    add_hang(model_repository, state)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonx",
            "serve",
            *("--model-repository", str(model_repository.root)),
            *("--model-control-mode", "explicit", "--load-model", "hang"),
            *("--http-address", "127.0.0.1", "--http-port", "0"),
            "--allow-grpc=false",
            "--allow-metrics=false",
            *("--exit-timeout-secs", "2", "--model-unload-timeout-secs", "600"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        addresses, _ = listening(proc, ("HTTPService",))
        url = addresses["HTTPService"]
        held: dict[str, object] = {}
        unloaded: dict[str, object] = {}
        threads = [
            threading.Thread(target=_infer, args=(url, 1, held)),
            threading.Thread(target=_unload, args=(url, unloaded)),
        ]
        threads[0].start()
        asyncio.run(until(lambda: hung(state), "execute() started"))
        threads[1].start()
        client = syncclient.InferenceServerClient(url)

        async def unloading() -> bool:
            index = client.get_model_repository_index()
            return any(m["name"] == "hang" and m.get("state") == "UNLOADING" for m in index)

        asyncio.run(until(unloading, "the unload started"))
        proc.send_signal(signal.SIGTERM)
        _, log = proc.communicate(timeout=PATIENCE_S)
        for thread in threads:
            thread.join(PATIENCE_S)
        assert proc.returncode == 0, log[-3000:]
        assert "Exit timeout expired" not in log
        # the request the model held got an answer: the error of its killed worker
        assert "is not healthy" in str(held.get("error")), held
        assert unloaded.get("done"), unloaded
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


async def test_the_unload_timeout_setting(model_repository: ModelRepositoryBuilder) -> None:
    """30 s unless set; a negative one stops the start with INVALID_ARG (the CLI refuses it
    as a usage error)."""
    from click.testing import CliRunner

    from tritonx.cli import cli
    from tritonx.config import ServerSettings
    from tritonx.errors import Code, TritonXError

    assert ServerSettings().model_unload_timeout_secs == 30.0
    server = Server(
        loopback_settings(model_repository.root, model_unload_timeout_secs=-1.0),
        plugin_manager=make_plugin_manager(autoload=False),
    )
    with pytest.raises(TritonXError) as err:
        await server.start()
    assert err.value.code is Code.INVALID_ARG
    assert "--model-unload-timeout-secs must be 0 or more" in err.value.message
    result = CliRunner().invoke(cli, ["serve", "--model-unload-timeout-secs", "-1"])
    assert result.exit_code == 2 and "--model-unload-timeout-secs" in result.output
