"""A python model's own ``is_ready()`` decides its readiness on the model-readiness endpoints
(HTTP ``/v2/models/<m>/ready``, gRPC ``ModelReady``), as Triton's python backend does: True →
READY; False, an exception, a non-boolean or no answer within 5 s → NOT READY, with Triton's
log line ``Model '<m>' version <v> is not ready: <why>``; the same once its worker died. As
Triton's backend (src/python_be.cc ``RunUserModelReadinessCheck``), one ``is_ready()`` call
at a time runs per instance: a check that comes while one runs waits (up to 5 s) for its
answer instead of calling again, and the answer is not kept for later checks."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from grpc import aio

from tritonx import Server
from tritonx.testing import loopback_settings

IO = {"inputs": [("IN", "FP32", [2])], "outputs": [("OUT", "FP32", [2])]}


@pytest.fixture
def state(tmp_path: Path) -> Path:
    folder = tmp_path / "state"
    folder.mkdir()
    (folder / "ready").write_text("true")
    return folder


@pytest.fixture(params=["process", "in_process"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def server(model_repository, add_model, plugin_manager, state: Path) -> AsyncIterator[Server]:
    add_model("probed", "readiness", parameters={"STATE_DIR": str(state)}, **IO)
    settings = loopback_settings(model_repository.root)
    async with Server(settings, plugin_manager=plugin_manager) as server:
        yield server


async def answers(server: Server) -> tuple[bool, bool]:
    """``probed``'s readiness over HTTP and gRPC."""
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        return await http.is_model_ready("probed"), await grpc.is_model_ready("probed")
    finally:
        await http.close()
        await grpc.close()


async def server_answers(server: Server) -> tuple[bool, bool, bool]:
    """The server's readiness over HTTP, gRPC ``ServerReady`` and gRPC's health service."""
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    channel = aio.insecure_channel(server.grpc_url)
    check = channel.unary_unary("/grpc.health.v1.Health/Check")
    try:
        health = await check(b"")  # an empty HealthCheckRequest
        return (
            await http.is_server_ready(),
            await grpc.is_server_ready(),
            health == b"\x08\x01",  # status: SERVING (1)
        )
    finally:
        await http.close()
        await grpc.close()
        await channel.close()


@pytest.mark.parametrize(
    ("what", "ready", "why"),
    [
        ("true", True, None),
        ("async", True, None),
        ("false", False, "Model 'probed_0' is not ready (user-defined check failed)."),
        ("raise", False, "RuntimeError: the database is gone"),
        ("none", False, "is_ready() must return a boolean value"),
    ],
)
async def test_is_ready_decides(
    server: Server, state: Path, caplog: pytest.LogCaptureFixture, what: str, ready: bool, why: Any
) -> None:
    caplog.set_level(logging.INFO, logger="tritonx.dataplane")
    (state / "ready").write_text(what)
    assert await answers(server) == (ready, ready)
    lines = [r.getMessage() for r in caplog.records if "is not ready" in r.getMessage()]
    if why is None:
        assert not lines
    else:
        assert lines == [f"Model 'probed' version 1 is not ready: {why}"] * 2
    # strict server readiness asks the model too (Triton 26.04's InferenceServer::IsReady)
    assert await server_answers(server) == (ready, ready, ready)
    # the model's state as the repository sees it is unchanged: it still serves
    assert server.model_ready("probed")
    (state / "ready").write_text("true")
    assert await answers(server) == (True, True)
    assert await server_answers(server) == (True, True, True)


async def test_an_is_ready_that_hangs_is_not_ready(
    server: Server, state: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    if mode == "in_process":
        pytest.skip("no timeout can stop an is_ready() running in the server's process")
    caplog.set_level(logging.INFO, logger="tritonx.dataplane")
    (state / "ready").write_text("hang")
    http = httpclient.InferenceServerClient(server.http_url)
    try:
        assert not await http.is_model_ready("probed")
    finally:
        await http.close()
    assert (
        "Model 'probed' version 1 is not ready: Timed out waiting for user-defined is_ready() "
        "response" in [r.getMessage() for r in caplog.records]
    )


async def test_a_dead_worker_logs_tritons_line(
    model_repository, add_model, plugin_manager, tmp_path: Path, mode: str, caplog
) -> None:
    if mode == "in_process":
        pytest.skip("only a worker process can die")
    life = tmp_path / "life"
    life.mkdir()
    add_model(
        "life",
        "lifecycle",
        parameters={"STATE_DIR": str(life)},
        extra='instance_group [ { name: "life", count: 1, kind: KIND_CPU } ]\n',
        inputs=[("COMMAND", "BYTES", [1])],
        outputs=[("PID", "INT64", [1]), ("SAW_CANCEL", "BOOL", [1])],
    )
    caplog.set_level(logging.INFO, logger="tritonx.dataplane")
    settings = loopback_settings(model_repository.root)
    async with Server(settings, plugin_manager=plugin_manager) as server:
        (life / "crash_initialize").touch()  # restarts keep dying
        os.kill(int((life / "life_0.pid").read_text()), signal.SIGKILL)
        http = httpclient.InferenceServerClient(server.http_url)
        try:
            while await http.is_model_ready("life"):  # until the death is noticed
                pass
        finally:
            await http.close()
    assert any(
        r.getMessage().startswith(
            "Model 'life' version 1 is not ready: Stub process 'life_0' is not healthy"
        )
        for r in caplog.records
    )


async def test_a_slow_is_ready_answers_the_checks_that_wait_for_it(
    model_repository, add_model, plugin_manager, tmp_path: Path, mode: str, caplog
) -> None:
    """Triton's qa ``test_is_ready_takes_long_time``: the check that started the call says
    NOT READY after 5 s; the next one waits for that same call and says READY once it
    answers."""
    if mode == "in_process":
        pytest.skip("no timeout can stop an is_ready() running in the server's process")
    state = tmp_path / "slow"
    state.mkdir()
    add_model("slow", "slow_ready", parameters={"STATE_DIR": str(state)}, **IO)
    caplog.set_level(logging.INFO, logger="tritonx.dataplane")
    caplog.set_level(logging.DEBUG, logger="tritonx.backend.python")

    def calls() -> int:
        return len((state / "calls").read_text().splitlines())

    def joins() -> int:
        return sum("joins the is_ready() call in flight" in r.getMessage() for r in caplog.records)

    settings = loopback_settings(model_repository.root)
    async with Server(settings, plugin_manager=plugin_manager) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            (state / "hold").touch()  # is_ready() answers once this goes
            assert not await http.is_model_ready("slow")
            # still running: the next check calls no second is_ready(), it waits for the
            # first (and says so when that does not answer either)
            assert not await grpc.is_model_ready("slow")
            assert calls() == 1
            lines = [r.getMessage() for r in caplog.records if "is not ready" in r.getMessage()]
            assert lines == [
                "Model 'slow' version 1 is not ready: Timed out waiting for user-defined "
                "is_ready() response",
                "Model 'slow' version 1 is not ready: Timed out waiting for in-flight "
                "is_ready() response",
            ]
            # a check waiting for the call gets its answer when it comes: READY
            waiting = asyncio.create_task(grpc.is_model_ready("slow"))
            deadline = asyncio.get_running_loop().time() + 30
            while joins() < 2:  # the check waits for the call in flight (the server logs it)
                assert asyncio.get_running_loop().time() < deadline, "the check never waited"
                await asyncio.sleep(0.01)
            (state / "hold").unlink()
            assert await waiting
            assert calls() == 1
            # the answer is not kept: the next check calls is_ready() again
            assert await http.is_model_ready("slow")
            assert calls() == 2
        finally:
            await http.close()
            await grpc.close()
