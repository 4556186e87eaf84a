"""Self-healing workers (``--backend-config=python,restart-dead-stubs=true``; without it a
dead worker stays dead, as Triton's stub: test_dead_stub.py) and the execution timeout (whose
killed worker is restarted either way): worker processes killed for real (their pids come
from files the model writes), served through the in-process API and tritonclient over HTTP
and gRPC."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

from tritonx import InferenceRequest, Server, TritonXError
from tritonx.errors import Code
from tritonx.testing import loopback_settings

LIFECYCLE_IO = {
    "inputs": [("COMMAND", "BYTES", [1])],
    "outputs": [("PID", "INT64", [1]), ("SAW_CANCEL", "BOOL", [1])],
}


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """The folder the test models write their pids to and read their markers from."""
    folder = tmp_path / "state"
    folder.mkdir()
    return folder


@pytest.fixture
def restart_dead() -> bool:
    """Whether the server restarts dead workers (``restart-dead-stubs``)."""
    return True


@pytest.fixture
def server_settings(model_repository, standard_models, add_model, state, restart_dead: bool):
    """The standard models plus ``life`` (one instance) and ``stream`` (decoupled), with
    every listener (and ``restart-dead-stubs=true`` unless ``restart_dead`` says not)."""
    add_model("life", "lifecycle", parameters={"STATE_DIR": str(state)}, **LIFECYCLE_IO)
    add_model(
        "stream",
        "stream",
        parameters={"STATE_DIR": str(state)},
        inputs=[("COUNT", "INT32", [1])],
        outputs=[("PID", "INT64", [1]), ("INDEX", "INT32", [1]), ("SAW_CANCEL", "BOOL", [1])],
        extra="model_transaction_policy { decoupled: true }\n",
    )
    return loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("*",),
        backend_config={"python": {"restart-dead-stubs": "true"}} if restart_dead else {},
    )


def command(value: str) -> dict[str, np.ndarray]:
    return {"COMMAND": np.array([value.encode()], dtype=object)}


async def pid_of(server: Server, model: str = "life") -> int:
    response = await server.infer(InferenceRequest(model, command("pid")))
    return int(response.outputs["PID"][0])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def eventually(check: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0) -> None:
    """Wait until ``check()`` holds (fail after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"still not true after {timeout} s: {check}")
        await asyncio.sleep(0.02)


def own_state(state: Path, name: str) -> Path:
    """A state folder of its own for model ``name``."""
    folder = state / name
    folder.mkdir()
    return folder


def starts(state: Path) -> list[tuple[float, int]]:
    """(time, pid) of every ``initialize`` the lifecycle models ran."""
    path = state / "starts"
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(float(t), int(p)) for t, p in rows]


def http_command(value: str) -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("COMMAND", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([value.encode()], dtype=object))
    return [tensor]


def grpc_command(value: str) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("COMMAND", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([value.encode()], dtype=object))
    return [tensor]


# ---------------------------------------------------------------------- self-healing


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("exit", "exited with code 3"),
        ("os_exit", "exited with code 4"),
        ("segv", "was killed by signal 11 (SIGSEGV)"),
        ("kill", "was killed by signal 9 (SIGKILL)"),
    ],
)
async def test_worker_death_in_execute_restarts_the_instance(
    server: Server, caplog, how: str, reason: str
) -> None:
    caplog.set_level(logging.INFO, "tritonx.backend.python")
    first = await pid_of(server)
    with pytest.raises(TritonXError) as err:
        await server.infer(InferenceRequest("life", command(how)))
    assert err.value.message == "Stub process 'life_0' is not healthy."
    assert err.value.code is Code.INTERNAL
    logged = [r.getMessage() for r in caplog.records if "life_0" in r.getMessage()]
    assert any(f"(pid {first}) {reason}" in line for line in logged), logged
    await eventually(lambda: server.model_ready("life"))
    second = await pid_of(server)
    assert second != first
    await eventually(lambda: not alive(first))
    assert any("instance 'life_0' restarted" in r.getMessage() for r in caplog.records)


async def test_restart_is_immediate_after_serving(server: Server, caplog, state: Path) -> None:
    """Backing off is for workers that die without serving: one that served restarts at once
    each time."""
    for _ in range(3):
        first = await pid_of(server)
        with pytest.raises(TritonXError):
            await server.infer(InferenceRequest("life", command("os_exit")))
        await eventually(lambda: server.model_ready("life"))
        assert await pid_of(server) != first
    assert not any("restarting instance 'life_0' in" in r.getMessage() for r in caplog.records)
    assert len(starts(state)) == 4


async def test_worker_killed_while_idle_restarts_http(server: Server, http_client, state) -> None:
    """kill -9 from outside while the worker waits: noticed at once, restarted, served again."""
    result = await http_client.infer("life", http_command("pid"))
    first = int(result.as_numpy("PID")[0])
    assert (state / "life_0.pid").read_text() == str(first)
    os.kill(first, signal.SIGKILL)
    await eventually(lambda: (state / "life_0.pid").read_text() != str(first))
    await eventually(lambda: http_client.is_model_ready("life"))
    result = await http_client.infer("life", http_command("pid"))
    assert int(result.as_numpy("PID")[0]) == int((state / "life_0.pid").read_text()) != first
    index = await http_client.get_model_repository_index()
    assert next(r for r in index if r["name"] == "life")["state"] == "READY"


@pytest.mark.parametrize("transport", ["http", "grpc"])
async def test_in_flight_request_fails_when_its_worker_is_killed(
    server: Server, http_client, grpc_client, state, transport: str
) -> None:
    first = await pid_of(server)
    if transport == "http":
        call = asyncio.create_task(http_client.infer("life", http_command("sleep:30")))
    else:
        call = asyncio.create_task(grpc_client.infer("life", grpc_command("sleep:30")))
    await asyncio.sleep(0.3)  # executing now
    killed = time.monotonic()
    os.kill(first, signal.SIGKILL)
    with pytest.raises(InferenceServerException) as err:
        await asyncio.wait_for(call, 10)
    assert time.monotonic() - killed < 2.0, "the death was not noticed at once"
    assert err.value.message() == "Stub process 'life_0' is not healthy."
    expected = "500" if transport == "http" else "StatusCode.INTERNAL"
    assert str(err.value.status()) == expected
    await eventually(lambda: server.model_ready("life"))
    assert await pid_of(server) != first


async def test_worker_killed_mid_traffic_comes_back(server: Server, http_client) -> None:
    """kill -9 while four HTTP clients keep the instance busy: the requests in flight fail with
    Triton's message, the instance restarts, and the same clients are served by the new
    worker."""
    first = await pid_of(server)
    served: list[int] = []
    failures: list[str] = []
    stop = asyncio.Event()

    async def client() -> None:
        while not stop.is_set():
            try:
                result = await http_client.infer("life", http_command("pid"))
            except InferenceServerException as exc:
                failures.append(exc.message() or "")
                await asyncio.sleep(0.01)
                continue
            served.append(int(result.as_numpy("PID")[0]))

    tasks = [asyncio.create_task(client()) for _ in range(4)]
    try:
        await eventually(lambda: len(served) >= 50)
        os.kill(first, signal.SIGKILL)
        await eventually(lambda: any(pid != first for pid in served))
        count = len(served)
        await eventually(lambda: len(served) >= count + 50)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    after = served[served.index(next(pid for pid in served if pid != first)) :]
    assert first not in after  # once the new worker served, nothing reached the old one
    assert len(set(after)) == 1 and alive(after[0])
    assert await pid_of(server) == after[0]
    # in flight when it died, or sent while it restarts (the instance's reason, INTERNAL)
    for message in failures:
        assert message.startswith("Stub process 'life_0' is not healthy"), message
    await eventually(lambda: not alive(first))


async def test_death_noticed_while_a_forked_child_holds_the_socket(
    server: Server, state: Path
) -> None:
    first = await pid_of(server)
    call = asyncio.create_task(server.infer(InferenceRequest("life", command("fork:30"))))
    await eventually((state / "child.pid").exists)
    child = int((state / "child.pid").read_text())
    try:
        killed = time.monotonic()
        os.kill(first, signal.SIGKILL)
        with pytest.raises(TritonXError) as err:
            await asyncio.wait_for(call, 10)
        assert time.monotonic() - killed < 2.0
        assert err.value.message == "Stub process 'life_0' is not healthy."
        await eventually(lambda: server.model_ready("life"))
        assert await pid_of(server) != first
    finally:
        os.kill(child, signal.SIGKILL)


async def test_worker_in_its_own_environment_restarts(
    server: Server, add_model, state: Path, tmp_path: Path
) -> None:
    """A worker running a model's EXECUTION_ENV_PATH interpreter (a subprocess, not a
    forkserver child) is watched and restarted the same way."""
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python3").symlink_to(sys.executable)
    state = own_state(state, "in_env")
    add_model(
        "in_env",
        "lifecycle",
        parameters={"STATE_DIR": str(state), "EXECUTION_ENV_PATH": str(env)},
        **LIFECYCLE_IO,
    )
    await server.load_model("in_env")
    first = await pid_of(server, "in_env")
    killed = time.monotonic()
    call = asyncio.create_task(server.infer(InferenceRequest("in_env", command("sleep:30"))))
    await asyncio.sleep(0.3)
    os.kill(first, signal.SIGKILL)
    with pytest.raises(TritonXError) as err:
        await asyncio.wait_for(call, 10)
    assert time.monotonic() - killed < 3.0
    assert err.value.message == "Stub process 'in_env_0' is not healthy."
    await eventually(lambda: server.model_ready("in_env"), timeout=30)
    assert await pid_of(server, "in_env") != first
    await eventually(lambda: not alive(first))


async def test_other_instances_serve_while_one_restarts(
    server: Server, add_model, state: Path
) -> None:
    state = own_state(state, "pair")
    add_model(
        "pair",
        "lifecycle",
        parameters={"STATE_DIR": str(state)},
        extra='instance_group [ { name: "pair", count: 2, kind: KIND_CPU } ]\n',
        **LIFECYCLE_IO,
    )
    await server.load_model("pair")
    pids = {int((state / f"pair_{i}.pid").read_text()) for i in (0, 1)}
    assert len(pids) == 2
    (state / "hold_initialize").touch()  # restarts wait in initialize until it goes
    with pytest.raises(TritonXError) as err:
        await server.infer(InferenceRequest("pair", command("exit")))
    assert err.value.message in {f"Stub process 'pair_{i}' is not healthy." for i in (0, 1)}
    await eventually(lambda: any(not alive(p) for p in pids))
    dead = next(p for p in pids if not alive(p))
    (survivor,) = pids - {dead}
    # while the dead one restarts (held in initialize), the model stays READY and the other
    # instance serves: no request waits for the restart
    await eventually(lambda: len(starts(state)) == 3)
    for _ in range(10):
        assert server.model_ready("pair")
        assert await pid_of(server, "pair") == survivor
    rows = [r for r in server.repository_index() if r.name == "pair"]
    assert rows[0].state.value == "READY"
    # then both serve again: the restarted one in a new worker
    (state / "hold_initialize").unlink()
    restarted = starts(state)[2][1]

    def both_back() -> bool:
        try:
            pids = {int((state / f"pair_{i}.pid").read_text()) for i in (0, 1)}
        except ValueError:  # a worker is writing its pid file right now
            return False
        return pids == {survivor, restarted}

    await eventually(both_back)
    responses = await asyncio.gather(
        *(server.infer(InferenceRequest("pair", command("sleep:0.3"))) for _ in range(2))
    )
    assert {int(r.outputs["PID"][0]) for r in responses} == {survivor, restarted}


async def test_decoupled_streams_fail_when_the_worker_dies(server: Server, grpc_client) -> None:
    request = InferenceRequest("stream", {"COUNT": np.array([100_000], np.int32)})
    responses = server.infer_stream(request)
    first = await anext(responses)
    pid = int(first.outputs["PID"][0])
    os.kill(pid, signal.SIGKILL)
    rest = [r async for r in responses]
    failed = rest[-1]
    assert failed.final and failed.error is not None
    assert failed.error.message == "Stub process 'stream_0' is not healthy."
    assert failed.error.code is Code.INTERNAL
    assert all(r.error is None for r in rest[:-1])
    # over a gRPC stream, after the restart: the same again
    await eventually(lambda: server.model_ready("stream"))

    async def one_request():
        tensor = grpcclient.InferInput("COUNT", [1], "INT32")
        tensor.set_data_from_numpy(np.array([100_000], np.int32))
        yield {"model_name": "stream", "inputs": [tensor]}
        await asyncio.sleep(30)  # keep the stream open

    stream = grpc_client.stream_infer(one_request())
    result, error = await anext(stream)
    assert error is None
    second = int(result.as_numpy("PID")[0])
    assert second != pid
    os.kill(second, signal.SIGKILL)
    async for _result, error in stream:
        if error is not None:
            break
    assert error is not None
    assert error.message() == "Stub process 'stream_0' is not healthy."
    stream.cancel()


async def test_repeated_crashes_back_off(server: Server, caplog, state: Path) -> None:
    first = await pid_of(server)
    (state / "crash_initialize").touch()  # from now on every initialize dies
    os.kill(first, signal.SIGKILL)
    # three failed restarts recorded (each initialize writes its start before dying)
    await eventually(lambda: len(starts(state)) >= 4, timeout=30)
    attempts = [t for t, _ in starts(state)[1:]]
    # the waits between attempts double (0.5 s, then 1 s): no spinning. Lower bounds only:
    # a loaded machine makes the gaps longer, never shorter
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.4 and gaps[1] >= 0.9, gaps
    messages = [r.getMessage() for r in caplog.records]
    assert any("restarting instance 'life_0' in 0.5 s (restart 2)" in m for m in messages)
    assert any("restart 1 of instance 'life_0' failed" in m for m in messages)
    assert not server.model_ready("life")
    row = next(r for r in server.repository_index() if r.name == "life")
    assert row.state.value == "UNAVAILABLE"
    assert "Stub process 'life_0' is not healthy: restarting it failed" in row.reason
    # once initialize works again, the next restart brings it back
    (state / "crash_initialize").unlink()
    await eventually(lambda: server.model_ready("life"), timeout=15)
    assert await pid_of(server) == starts(state)[-1][1]


async def test_unload_and_reload_while_restarting(server: Server, state: Path) -> None:
    first = await pid_of(server)
    (state / "crash_initialize").touch()
    os.kill(first, signal.SIGKILL)
    await eventually(lambda: len(starts(state)) >= 3)  # backing off between failed restarts
    started = time.monotonic()
    await server.unload_model("life")
    assert time.monotonic() - started < 3.0
    assert not server.model_ready("life")
    count = len(starts(state))
    await asyncio.sleep(1.0)
    assert len(starts(state)) == count, "an unloaded instance restarted"
    (state / "crash_initialize").unlink()
    await server.load_model("life")
    second = await pid_of(server)
    assert second not in {p for _, p in starts(state)[:-1]}
    # unload while a restart is running initialize: the starting worker is killed
    (state / "slow_initialize").write_text("30")
    os.kill(second, signal.SIGKILL)
    await eventually(lambda: len(starts(state)) == count + 2)
    starting = starts(state)[-1][1]
    started = time.monotonic()
    await server.unload_model("life")
    assert time.monotonic() - started < 3.0
    await eventually(lambda: not alive(starting))
    (state / "slow_initialize").unlink()
    await server.load_model("life")
    assert await pid_of(server) == starts(state)[-1][1]


# ---------------------------------------------------------------------- execution timeout


async def add_timed(server: Server, add_model, state: Path, seconds: str, name: str = "timed"):
    """Load ``name``: the lifecycle model with TRITONX_EXECUTION_TIMEOUT_SECS ``seconds`` and
    its own state folder (returned)."""
    state = own_state(state, name)
    add_model(
        name,
        "lifecycle",
        parameters={"STATE_DIR": str(state), "TRITONX_EXECUTION_TIMEOUT_SECS": seconds},
        **LIFECYCLE_IO,
    )
    await server.load_model(name)
    return state


@pytest.mark.parametrize("restart_dead", [False])  # the timeout restarts by itself
async def test_execution_timeout_ends_a_hung_execute(server: Server, add_model, state) -> None:
    await add_timed(server, add_model, state, "1")
    first = await pid_of(server, "timed")
    started = time.monotonic()
    hung, queued = await asyncio.gather(
        server.infer(InferenceRequest("timed", command("hang"))),
        server.infer(InferenceRequest("timed", command("pid"))),
        return_exceptions=True,
    )
    assert isinstance(hung, TritonXError), hung
    assert hung.code is Code.INTERNAL
    assert hung.message == (
        "execute() of model 'timed' timed out after 1 s on instance 'timed_0' "
        "(TRITONX_EXECUTION_TIMEOUT_SECS); its worker process was killed and is being restarted"
    )
    # the request queued behind it ran on the restarted worker
    assert not isinstance(queued, BaseException), queued
    second = int(queued.outputs["PID"][0])
    assert second != first
    assert time.monotonic() - started < 6.0
    await eventually(lambda: not alive(first))
    assert await pid_of(server, "timed") == second


@pytest.mark.parametrize("timeout", [None, "3600"], ids=["loop_reads", "thread_reads"])
async def test_a_worker_whose_answer_is_unreadable_is_restarted(
    server: Server, add_model, state, caplog, timeout: str | None
) -> None:
    """Bytes on its sockets that are no message (the model writes them): the worker is
    killed, its request fails with Triton's error saying why, the instance comes back, and
    nothing escapes to the event loop. (Without an execution timeout the event loop reads
    the answer, with one the instance thread does.)"""
    name = "garbled"
    parameters = {"STATE_DIR": str(own_state(state, name))}
    if timeout is not None:
        parameters["TRITONX_EXECUTION_TIMEOUT_SECS"] = timeout
    add_model(name, "lifecycle", parameters=parameters, **LIFECYCLE_IO)
    await server.load_model(name)
    first = await pid_of(server, name)
    caplog.set_level(logging.ERROR)
    with pytest.raises(TritonXError) as err:
        await asyncio.wait_for(server.infer(InferenceRequest(name, command("garbage"))), 20)
    assert err.value.code is Code.INTERNAL
    assert err.value.message.startswith(
        f"Stub process '{name}_0' is not healthy: its answer could not be read ("
    ), err.value
    await eventually(lambda: not alive(first))
    second = None

    async def serves_again() -> bool:
        nonlocal second
        try:
            second = await pid_of(server, name)
        except TritonXError:
            return False
        return True

    await eventually(serves_again, 20.0)
    assert second != first
    escaped = [r for r in caplog.records if r.name == "asyncio"]
    assert not escaped, [r.getMessage() for r in escaped]


@pytest.mark.parametrize("restart_dead", [False])  # the timeout restarts by itself
async def test_unload_and_reload_with_a_hung_execute(
    server: Server, add_model, state, model_repository
) -> None:
    state = await add_timed(server, add_model, state, "1")
    first = await pid_of(server, "timed")
    hung = asyncio.create_task(server.infer(InferenceRequest("timed", command("hang"))))
    await asyncio.sleep(0.3)
    model_py = model_repository.root / "timed" / "1" / "model.py"
    model_py.write_text(model_py.read_text() + "\n# changed: load it again\n")
    started = time.monotonic()
    await server.load_model("timed")  # a reload: the old version drains, then goes
    assert time.monotonic() - started < 5.0
    with pytest.raises(TritonXError) as err:
        await hung
    assert "timed out after 1 s" in err.value.message
    second = await pid_of(server, "timed")
    assert second != first
    await eventually(lambda: not alive(first))
    hung = asyncio.create_task(server.infer(InferenceRequest("timed", command("hang"))))
    await asyncio.sleep(0.3)
    started = time.monotonic()
    await server.unload_model("timed")
    assert time.monotonic() - started < 5.0
    with pytest.raises(TritonXError):
        await hung
    await eventually(lambda: not alive(second))
    await eventually(lambda: all(not alive(p) for _, p in starts(state)))


async def test_server_exit_kills_a_hung_worker(server_settings, plugin_manager, state) -> None:
    """No timeout parameter: the server's exit timeout still ends the hung execute."""
    settings = loopback_settings(
        server_settings.model_repository[0],
        model_control_mode="explicit",
        load_model=("life",),
        exit_timeout_secs=1.0,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )
    server = Server(settings, plugin_manager=plugin_manager)
    await server.start()
    try:
        pid = await pid_of(server)
        hung = asyncio.create_task(server.infer(InferenceRequest("life", command("hang"))))
        await asyncio.sleep(0.3)
    finally:
        started = time.monotonic()
        await server.stop()
    assert time.monotonic() - started < 1.0 + 3.0
    with pytest.raises(TritonXError):
        await hung
    await eventually(lambda: not alive(pid))


@pytest.mark.parametrize("value", ["soon", "0", "-2", "nan"])
async def test_execution_timeout_must_be_a_positive_number(
    server: Server, add_model, state, value: str
) -> None:
    with pytest.raises(TritonXError) as err:
        await add_timed(server, add_model, state, value)
    assert (
        "parameter TRITONX_EXECUTION_TIMEOUT_SECS must be a number of seconds greater than 0, "
        f"got '{value}'" in err.value.message
    )


async def test_execution_timeout_needs_a_worker_process(server: Server, add_model, state) -> None:
    add_model(
        "timed_here",
        "lifecycle",
        parameters={
            "STATE_DIR": str(state),
            "TRITONX_EXECUTION_TIMEOUT_SECS": "1",
            "TRITONX_EXECUTION_MODE": "in_process",
        },
        **LIFECYCLE_IO,
    )
    with pytest.raises(TritonXError) as err:
        await server.load_model("timed_here")
    assert "parameter TRITONX_EXECUTION_TIMEOUT_SECS of model 'timed_here' needs" in (
        err.value.message
    )
