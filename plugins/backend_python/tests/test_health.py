"""Health that tells the truth, with self-healing workers
(``--backend-config=python,restart-dead-stubs=true``; without it a dead worker stays dead, as
Triton's stub: test_dead_stub.py): a Python model whose every worker is dead or restarting is
not ready, over the in-process API, HTTP and gRPC, and with strict readiness (the default)
neither is the server; both come back by themselves once a worker serves again. A model
with one of its two instances down still serves, so it stays ready (the other instance takes
the requests). The status page counts each instance's restarts. Workers are killed for real (their pids come from files the model writes).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient

from tritonx import InferenceRequest, Server
from tritonx.testing import loopback_settings

LIFECYCLE_IO = {
    "inputs": [("COMMAND", "BYTES", [1])],
    "outputs": [("PID", "INT64", [1]), ("SAW_CANCEL", "BOOL", [1])],
}


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    """Wait until ``check()`` holds (fail after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"still not true after {timeout} s: {check}")
        await asyncio.sleep(0.02)


async def pid_of(server: Server, model: str) -> int:
    request = InferenceRequest(model, {"COMMAND": np.array([b"pid"], dtype=object)})
    return int((await server.infer(request)).outputs["PID"][0])


async def status_rows(server: Server) -> list[dict[str, Any]]:
    """The models of the status page's data (``GET /status/data``)."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{server.http_url}/status/data") as response:
            assert response.status == 200
            rows: list[dict[str, Any]] = (await response.json())["models"]
            return rows


@pytest.fixture
async def server(
    model_repository, add_model, plugin_manager, tmp_path: Path
) -> AsyncIterator[Server]:
    for name, count in (("life", 1), ("pair", 2)):
        folder = tmp_path / name
        folder.mkdir()
        add_model(
            name,
            "lifecycle",
            parameters={"STATE_DIR": str(folder)},
            extra=f'instance_group [ {{ name: "{name}", count: {count}, kind: KIND_CPU }} ]\n',
            **LIFECYCLE_IO,
        )
    settings = loopback_settings(
        model_repository.root, backend_config={"python": {"restart-dead-stubs": "true"}}
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        yield server


async def test_a_model_with_no_live_worker_is_not_ready_nor_is_the_server(
    server: Server, tmp_path: Path
) -> None:
    state = tmp_path / "life"
    http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    grpc = grpcclient.InferenceServerClient(server.grpc_url.removeprefix("grpc://"))
    try:

        async def everyone_says(ready: bool) -> bool:
            answers = [
                server.model_ready("life"),
                server.server_ready(),
                await http.is_model_ready("life"),
                await http.is_server_ready(),
                await grpc.is_model_ready("life"),
                await grpc.is_server_ready(),
            ]
            return answers == [ready] * len(answers)

        assert await everyone_says(True)
        (state / "crash_initialize").touch()  # every restart dies in initialize
        os.kill(await pid_of(server, "life"), signal.SIGKILL)
        await eventually(lambda: everyone_says(False))
        # liveness is not readiness: the server is live, the other model serves
        assert server.server_live() and await http.is_server_live()
        assert server.model_ready("pair")
        row = next(r for r in server.repository_index() if r.name == "life")
        assert row.state.value == "UNAVAILABLE"
        assert "Stub process 'life_0' is not healthy" in row.reason
        # the next restart that initializes brings everything back, by itself
        (state / "crash_initialize").unlink()
        await eventually(lambda: everyone_says(True))
        assert await pid_of(server, "life") > 0
        # the status page counts the restart that took over (failed attempts are no
        # restarts), the other model none
        rows = {r["name"]: r for r in await status_rows(server)}
        assert rows["life"]["stats"]["restarts"] == 1
        assert rows["pair"]["stats"]["restarts"] == 0
    finally:
        await http.close()
        await grpc.close()


async def test_a_model_with_one_live_instance_stays_ready(server: Server, tmp_path: Path) -> None:
    state = tmp_path / "pair"
    pids = {int((state / f"pair_{i}.pid").read_text()) for i in (0, 1)}
    (state / "crash_initialize").touch()
    victim = next(iter(pids))
    os.kill(victim, signal.SIGKILL)

    async def restart_attempted() -> bool:
        # a restart of the victim's instance ran initialize (and died in it)
        return len((state / "starts").read_text().splitlines()) >= 3

    await eventually(restart_attempted)
    (survivor,) = pids - {victim}
    # it serves: the repository index and the in-process API say READY; the readiness
    # endpoints answer as Triton's (an instance whose stub is not healthy makes the model
    # not ready there, and with strict readiness the server: core InferenceServer::IsReady)
    assert server.model_ready("pair") and server.server_ready()
    for _ in range(4):
        assert await pid_of(server, "pair") == survivor
    row = next(r for r in server.repository_index() if r.name == "pair")
    assert row.state.value == "READY"
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert not await http.is_model_ready("pair")
        assert not await grpc.is_model_ready("pair")
        assert not await http.is_server_ready() and not await grpc.is_server_ready()
    finally:
        await http.close()
        await grpc.close()
