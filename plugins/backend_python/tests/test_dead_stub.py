"""A model's worker process (Triton's stub) that dies, as Triton's python backend handles it
(src/python_be.cc: ``TRITONBACKEND_ModelInstanceReady`` answers ``Stub process '<instance>'
is not healthy.``; no request restarts the stub): the model is NOT READY on the
model-readiness endpoints, each check logs Triton's ``Model '<m>' version <v> is not ready:
Stub process '<instance>' is not healthy.``, and it stays so until the model is loaded again.
``--backend-config=python,restart-dead-stubs=true`` restarts dead workers instead (tritonx's
self-healing). Workers are killed for real (their pids come from files the model writes);
everything is asked through tritonclient.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

from tritonx import Server
from tritonx.testing import loopback_settings

LIFECYCLE_IO = {
    "inputs": [("COMMAND", "BYTES", [1])],
    "outputs": [("PID", "INT64", [1]), ("SAW_CANCEL", "BOOL", [1])],
}
NOT_HEALTHY = "Model 'life' version 1 is not ready: Stub process 'life_0' is not healthy."


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    """Wait until ``check()`` holds (fail after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"still not true after {timeout} s: {check}")
        await asyncio.sleep(0.02)


def starts(state: Path) -> list[int]:
    """The pid of every ``initialize`` the model ran."""
    return [int(line.split()[1]) for line in (state / "starts").read_text().splitlines()]


def http_command(value: str) -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("COMMAND", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([value.encode()], dtype=object))
    return [tensor]


def grpc_command(value: str) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("COMMAND", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([value.encode()], dtype=object))
    return [tensor]


@pytest.fixture
def state(tmp_path: Path) -> Path:
    folder = tmp_path / "state"
    folder.mkdir()
    return folder


@pytest.fixture
def python_config() -> dict[str, str]:
    """``--backend-config=python,...`` of the server (none: Triton's behaviour)."""
    return {}


@pytest.fixture
async def served(
    model_repository, add_model, plugin_manager, state: Path, python_config: dict[str, str]
) -> AsyncIterator[tuple[httpclient.InferenceServerClient, grpcclient.InferenceServerClient]]:
    """Clients of a server of ``life`` (one instance, ``life_0``) under explicit model
    control."""
    add_model(
        "life",
        "lifecycle",
        parameters={"STATE_DIR": str(state)},
        extra='instance_group [ { name: "life", count: 1, kind: KIND_CPU } ]\n',
        **LIFECYCLE_IO,
    )
    settings = loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("life",),
        backend_config={"python": python_config} if python_config else {},
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            yield http, grpc
        finally:
            await http.close()
            await grpc.close()


def not_ready_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if " is not ready: " in r.getMessage()]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV], ids=["SIGKILL", "SIGSEGV"])
async def test_a_dead_stub_stays_not_ready_until_the_model_is_loaded_again(
    served, state: Path, caplog: pytest.LogCaptureFixture, sig: signal.Signals
) -> None:
    http, grpc = served
    caplog.set_level(logging.INFO, logger="tritonx.dataplane")
    assert await http.is_model_ready("life") and await grpc.is_model_ready("life")
    (first,) = starts(state)
    os.kill(first, sig)

    async def noticed() -> bool:
        return not await http.is_model_ready("life")

    await eventually(noticed)
    caplog.clear()
    # Triton's answer on both protocols, and its log line once per check
    assert not await http.is_model_ready("life")
    assert not await grpc.is_model_ready("life")
    assert not_ready_lines(caplog) == [NOT_HEALTHY, NOT_HEALTHY]
    # a request does not bring the stub back (Triton restarts no stub): it fails with the
    # instance's error, as Triton's backend answers it, and the model stays not ready, its
    # worker never started again
    with pytest.raises(InferenceServerException) as err:
        await http.infer("life", http_command("pid"))
    assert err.value.message() == "Stub process 'life_0' is not healthy."
    assert err.value.status() == "500"
    with pytest.raises(InferenceServerException) as err:
        await grpc.infer("life", grpc_command("pid"))
    assert err.value.message() == "Stub process 'life_0' is not healthy."
    assert str(err.value.status()) == "StatusCode.INTERNAL"
    with pytest.raises(InferenceServerException) as err:  # the version named
        await grpc.infer("life", grpc_command("pid"), model_version="1")
    assert err.value.message() == "Stub process 'life_0' is not healthy."
    caplog.clear()
    assert not await http.is_model_ready("life")
    assert not await grpc.is_model_ready("life")
    assert not_ready_lines(caplog) == [NOT_HEALTHY, NOT_HEALTHY]
    assert starts(state) == [first]
    # strict readiness (the default): nor is the server ready (Triton's core asks every
    # model's instances too), while it is live
    assert not await http.is_server_ready() and not await grpc.is_server_ready()
    assert await http.is_server_live()
    index = {row["name"]: row for row in await http.get_model_repository_index()}
    assert index["life"]["reason"] == "Stub process 'life_0' is not healthy."
    # loading the model again (its files unchanged) starts a new worker that serves
    await http.load_model("life")
    assert await http.is_model_ready("life") and await grpc.is_model_ready("life")
    result = await http.infer("life", http_command("pid"))
    second = int(result.as_numpy("PID")[0])
    assert starts(state) == [first, second] and second != first
    index = {row["name"]: row for row in await http.get_model_repository_index()}
    assert index["life"]["state"] == "READY"
    assert await http.is_server_ready()


async def test_a_stub_that_dies_in_execute_fails_its_request_with_tritons_error(
    served, state: Path
) -> None:
    http, grpc = served
    with pytest.raises(InferenceServerException) as err:
        await grpc.infer("life", grpc_command("segv"))
    assert err.value.message() == "Stub process 'life_0' is not healthy."
    assert str(err.value.status()) == "StatusCode.INTERNAL"
    assert not await http.is_model_ready("life")
    assert len(starts(state)) == 1


async def test_a_model_with_one_dead_stub_of_two_serves_on_the_other(
    model_repository, add_model, plugin_manager, state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its model-readiness endpoints say NOT READY (Triton: any instance not ready), with
    the dead instance's line; the live instance takes every request; nothing restarts."""
    add_model(
        "pair",
        "lifecycle",
        parameters={"STATE_DIR": str(state)},
        extra='instance_group [ { name: "pair", count: 2, kind: KIND_CPU } ]\n',
        **LIFECYCLE_IO,
    )
    caplog.set_level(logging.INFO)
    settings = loopback_settings(model_repository.root)
    async with Server(settings, plugin_manager=plugin_manager) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            pids = {i: int((state / f"pair_{i}.pid").read_text()) for i in (0, 1)}
            os.kill(pids[0], signal.SIGKILL)

            async def logged() -> bool:  # the instance's death is handled
                return any("'pair_0' is not healthy" in r.getMessage() for r in caplog.records)

            await eventually(logged)
            caplog.clear()
            assert not await http.is_model_ready("pair")
            assert not await grpc.is_model_ready("pair")
            line = "Model 'pair' version 1 is not ready: Stub process 'pair_0' is not healthy."
            assert not_ready_lines(caplog) == [line, line]
            # strict server readiness asks every model (Triton 26.04's InferenceServer::IsReady)
            assert not await http.is_server_ready() and not await grpc.is_server_ready()
            for _ in range(4):
                result = await http.infer("pair", http_command("pid"))
                assert int(result.as_numpy("PID")[0]) == pids[1]
            index = {row["name"]: row for row in await http.get_model_repository_index()}
            assert index["pair"]["state"] == "READY"
            assert sorted(starts(state)) == sorted(pids.values())
        finally:
            await http.close()
            await grpc.close()


@pytest.mark.parametrize("python_config", [{"restart-dead-stubs": "true"}])
async def test_restart_dead_stubs_brings_the_worker_back_by_itself(
    served, state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    http, grpc = served
    caplog.set_level(logging.INFO, logger="tritonx.backend.python")
    (first,) = starts(state)
    os.kill(first, signal.SIGKILL)

    async def back() -> bool:
        return len(starts(state)) == 2 and await http.is_model_ready("life")

    await eventually(back)
    result = await grpc.infer("life", grpc_command("pid"))
    assert int(result.as_numpy("PID")[0]) == starts(state)[1] != first
    assert any("instance 'life_0' restarted" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("value", ["maybe", ""])
async def test_restart_dead_stubs_takes_a_boolean(
    model_repository, add_model, plugin_manager, state: Path, value: str
) -> None:
    """A value that is no boolean fails the python backend: its models fail to load, saying
    why."""
    add_model("life", "lifecycle", parameters={"STATE_DIR": str(state)}, **LIFECYCLE_IO)
    settings = loopback_settings(
        model_repository.root, backend_config={"python": {"restart-dead-stubs": value}}
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        try:
            index = {row["name"]: row for row in await http.get_model_repository_index()}
        finally:
            await http.close()
    assert index["life"]["state"] == "UNAVAILABLE"
    assert (
        f"failed to convert 'restart-dead-stubs' value '{value}' to boolean"
        in (index["life"]["reason"])
    )
