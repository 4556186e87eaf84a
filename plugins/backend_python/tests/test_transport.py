"""How requests reach a worker process: large tensors cross through shared memory in both
directions, never through the worker's sockets (counted by the kernel: the bytes the worker
and this process read with system calls, ``rchar`` in ``/proc/<pid>/io``; shared memory is
mapped, not read), over HTTP and gRPC; the segments are nameless (``memfd``: nothing in
``/dev/shm``), kept and reused while the model is loaded (seen in ``/proc/<pid>/maps`` and
``/proc/<pid>/fd`` as ``/memfd:<shm-region-prefix-name>...``), never while a response still
uses one, let go of when the model is unloaded, and gone with a killed worker or server."""

from __future__ import annotations

import asyncio
import dataclasses
import glob
import logging
import os
import select
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http as httpsync
import tritonclient.http.aio as httpclient

from tritonx.config import ServerSettings
from tritonx.server import Server
from tritonx.testing import ModelRepositoryBuilder, listening, shared_memory_objects
from tritonx.types import InferenceRequest

ELEMENTS = 1 << 20  # FP32: 4 MiB
MODEL_PY = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            pid = np.array([os.getpid()], dtype=np.int64)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", data + 1), pb_utils.Tensor("PID", pid)]
                )
            )
        return responses
"""

BLS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            answer = pb_utils.InferenceRequest(
                model_name="big",
                inputs=[pb_utils.Tensor("IN", data * 2)],
                requested_output_names=["OUT"],
            ).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out = pb_utils.get_output_tensor_by_name(answer, "OUT").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
"""
STREAM_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            for i in range(4):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data + i)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

pytestmark = pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/<pid>/io")

SHM_DIR = "/dev/shm"


@pytest.fixture
def shm_prefix(tmp_path: Path) -> str:
    """A segment-name prefix of this test's own (``shm-region-prefix-name``)."""
    return f"tritonx_test_{os.getpid()}_{tmp_path.name}_"


@pytest.fixture
def server_settings(model_repository: ModelRepositoryBuilder, shm_prefix: str) -> ServerSettings:
    from tritonx.testing import loopback_settings

    model_repository.add(
        "big",
        backend="python",
        inputs=[("IN", "FP32", [ELEMENTS])],
        outputs=[("OUT", "FP32", [ELEMENTS]), ("PID", "INT64", [1])],
        versions={1: {"model.py": MODEL_PY}},
    )
    return loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("big",),
        backend_config={"python": {"shm-region-prefix-name": shm_prefix}},
    )


def io_bytes(pid: int) -> tuple[int, int]:
    """(bytes read, bytes written) by process ``pid`` through read/write-like system calls."""
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(fields["rchar"]), int(fields["wchar"])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_a_4mb_tensor_moves_no_bytes_through_the_worker_sockets(
    server: object,
    http_client: httpclient.InferenceServerClient,
    grpc_client: grpcclient.InferenceServerClient,
    protocol: str,
) -> None:
    data = np.random.default_rng(0).random(ELEMENTS, dtype=np.float32)
    client, module = (http_client, httpclient) if protocol == "http" else (grpc_client, grpcclient)

    async def infer() -> tuple[np.ndarray, int]:
        tensor = module.InferInput("IN", [ELEMENTS], "FP32")
        tensor.set_data_from_numpy(data)
        result = await client.infer("big", [tensor])
        return result.as_numpy("OUT"), int(result.as_numpy("PID")[0])

    _, pid = await infer()
    assert pid != os.getpid()
    before, here_before = io_bytes(pid), io_bytes(os.getpid())[0]
    rounds = 5
    for _ in range(rounds):
        out, same = await infer()
        assert same == pid
        np.testing.assert_array_equal(out, data + 1)
    read = io_bytes(pid)[0] - before[0]
    here = io_bytes(os.getpid())[0] - here_before
    tensor_bytes = rounds * ELEMENTS * 4  # 20 MiB each way
    # server -> worker: the worker read only the messages from its sockets (a few hundred
    # bytes per request; its inputs are mapped, not read)
    assert read < rounds * 4096, read
    # worker -> server: the server reads the worker's sockets with read(2) (counted; its
    # HTTP and gRPC sockets are read with recv, which is not), and read no output from them
    assert here < tensor_bytes // 20, here


def segments(prefix: str, *pids: int) -> set[str]:
    """The names of the segments labelled ``prefix`` that processes ``pids`` hold."""
    marker = f"/memfd:{prefix}"
    return {
        p[len("/memfd:") :]
        for pid in pids
        for p in shared_memory_objects(pid)
        if p.startswith(marker)
    }


def released(*arrays: np.ndarray) -> asyncio.Event:
    """An event set once every one of ``arrays`` is gone (the caller drops its references,
    then waits): a response's memory goes back to the worker only then."""
    loop = asyncio.get_running_loop()
    event = asyncio.Event()
    left = len(arrays)

    def gone() -> None:
        nonlocal left
        left -= 1
        if not left:
            loop.call_soon_threadsafe(event.set)

    for array in arrays:
        weakref.finalize(array, gone)
    return event


def wait_exit(pid: int, timeout: float = 30.0) -> bool:
    """Wait until process ``pid`` (not necessarily a child) has ended; False past
    ``timeout``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)
    finally:
        os.close(fd)


def wait_restarted(server: int, dead: int, ready: Callable[[], bool]) -> None:
    """Wait until server ``server`` has replaced its dead worker ``dead``: a new worker runs
    (a grandchild: forkserver workers are the forkserver's children) and the model is
    ready."""

    def parent(pid: int) -> int:
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return 0

    deadline = time.monotonic() + 60
    while True:
        pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
        children = {pid for pid in pids if parent(pid) == server}
        if {pid for pid in pids if parent(pid) in children} - {dead} and ready():
            return
        assert time.monotonic() < deadline, "the worker was not restarted"
        select.select([], [], [], 0.02)


async def test_segments_are_reused_never_under_a_live_response_and_removed_on_unload(
    server: Server, shm_prefix: str
) -> None:
    rng = np.random.default_rng(1)
    here = os.getpid()

    async def infer_and_let_go(data: np.ndarray) -> None:
        response = await server.infer(InferenceRequest("big", {"IN": data}))
        np.testing.assert_array_equal(response.outputs["OUT"], data + 1)
        # The response's memory is the worker's again once its arrays are gone: not when
        # this coroutine drops them, but when the event loop does too (it holds the
        # finished request's future until the end of the iteration that resumed this
        # coroutine). A request sent before then may find the segment still in use and the
        # worker take another one (which it must: never under a live response).
        gone = released(*response.outputs.values())
        del response
        await gone.wait()

    first_in = rng.random(ELEMENTS, dtype=np.float32)
    first = await server.infer(InferenceRequest("big", {"IN": first_in}))
    worker = int(first.outputs["PID"][0])
    held = first.outputs["OUT"]  # kept: this array is a view of the worker's segment
    del first
    kept = segments(shm_prefix, here, worker)
    assert kept, "a 4 MB tensor should cross through shared memory"
    # nameless: nothing of the transport is in /dev/shm (and so no client can register it)
    assert not {
        p
        for p in shared_memory_objects(here) | shared_memory_objects(worker)
        if p.startswith(SHM_DIR)
    }
    for _ in range(12):
        await infer_and_let_go(rng.random(ELEMENTS, dtype=np.float32))
        # the held response was not overwritten by the later ones
        np.testing.assert_array_equal(held, first_in + 1)
    # the segments are reused: the held response pins one more, no more appear per request
    reused = segments(shm_prefix, here, worker)
    assert len(reused) == len(kept) + 1, (kept, reused)
    for _ in range(12):
        await infer_and_let_go(rng.random(ELEMENTS, dtype=np.float32))
    assert segments(shm_prefix, here, worker) == reused
    np.testing.assert_array_equal(held, first_in + 1)
    await server.unload_model("big")
    assert wait_exit(worker)
    # what a response holds stays readable after its worker is gone: the only segment left
    # is the one under it, the worker's, until it is gone too
    (left,) = segments(shm_prefix, here)
    assert left.startswith(f"{shm_prefix}{worker}_"), left
    np.testing.assert_array_equal(held, first_in + 1)
    gone = released(held)
    del held
    await gone.wait()
    assert not segments(shm_prefix, here)


async def test_bls_calls_and_decoupled_responses_cross_in_segments_too(
    server: Server, model_repository: ModelRepositoryBuilder, shm_prefix: str
) -> None:
    """The control socket carries segments as the data socket does: a BLS call's tensors
    (worker to server) and its answer (server to worker), a decoupled model's responses; each
    kept, reused, and never overwritten under a response still held."""
    io = {"inputs": [("IN", "FP32", [ELEMENTS])], "outputs": [("OUT", "FP32", [ELEMENTS])]}
    model_repository.add("bls_big", backend="python", versions={1: {"model.py": BLS_PY}}, **io)
    model_repository.add(
        "stream_big",
        backend="python",
        versions={1: {"model.py": STREAM_PY}},
        extra="model_transaction_policy { decoupled: true }",
        **io,
    )
    await server.load_model("bls_big")
    await server.load_model("stream_big")
    rng = np.random.default_rng(3)
    held = []
    for _ in range(3):
        data = rng.random(ELEMENTS, dtype=np.float32)
        response = await server.infer(InferenceRequest("bls_big", {"IN": data}))
        np.testing.assert_array_equal(response.outputs["OUT"], data * 2 + 1)
        held.append((data * 2 + 1, response.outputs["OUT"]))
        streamed = [
            r.outputs["OUT"]
            async for r in server.infer_stream(InferenceRequest("stream_big", {"IN": data}))
            if not r.empty
        ]
        assert len(streamed) == 4
        for i, out in enumerate(streamed):
            held.append((data + i, out))
    for expected, out in held:  # every response held is intact
        np.testing.assert_array_equal(out, expected)
    # all of it in nameless segments (the kept ones of the server and the three workers)
    assert segments(shm_prefix, os.getpid())
    assert not {p for p in shared_memory_objects(os.getpid()) if p.startswith(SHM_DIR)}


def test_a_killed_worker_or_server_leaves_nothing_behind(
    server_settings: object, model_repository: ModelRepositoryBuilder, shm_prefix: str
) -> None:
    # (server_settings: the repository with "big"; served here by `tritonx serve`)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonx",
            "serve",
            f"--model-repository={model_repository.root}",
            "--http-address=127.0.0.1",
            "--http-port=0",
            "--grpc-address=127.0.0.1",
            "--grpc-port=0",
            "--allow-metrics=false",
            f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
            "--backend-config=python,restart-dead-stubs=true",  # the killed worker comes back
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        urls, _ = listening(proc, ("HTTPService",))
        client = httpsync.InferenceServerClient(urls["HTTPService"])

        def infer() -> int:
            data = np.random.default_rng(2).random(ELEMENTS, dtype=np.float32)
            tensor = httpsync.InferInput("IN", [ELEMENTS], "FP32")
            tensor.set_data_from_numpy(data)
            result = client.infer("big", [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUT"), data + 1)
            return int(result.as_numpy("PID")[0])

        worker = infer()
        # a kept segment each way, held by both processes, in memory only
        assert segments(shm_prefix, proc.pid) and segments(shm_prefix, worker)
        assert not glob.glob(os.path.join(SHM_DIR, f"{shm_prefix}*"))
        # a killed worker takes its segments with it; the server lets go of its mappings of
        # them before it starts the next worker
        os.kill(worker, signal.SIGKILL)
        assert wait_exit(worker)
        wait_restarted(proc.pid, worker, lambda: client.is_model_ready("big"))
        restarted = infer()
        assert restarted != worker
        assert not {
            n for n in segments(shm_prefix, proc.pid) if n.startswith(f"{shm_prefix}{worker}_")
        }
        assert segments(shm_prefix, restarted)
        client.close()
        # a killed server: its worker sees it go and exits; nothing was ever in /dev/shm
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert wait_exit(restarted), "the worker outlived its server"
        assert not glob.glob(os.path.join(SHM_DIR, f"{shm_prefix}*"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        proc.stderr.close()  # type: ignore[union-attr]


async def test_triton_shm_sizes_are_accepted_with_a_warning(
    server_settings: ServerSettings, plugin_manager: object, shm_prefix: str, caplog
) -> None:
    caplog.set_level(logging.WARNING)
    python = {
        "shm-region-prefix-name": shm_prefix,
        "shm-default-byte-size": "16777216",
        "shm-growth-byte-size": "1048576",
    }
    settings = dataclasses.replace(server_settings, backend_config={"python": python})
    async with Server(settings, plugin_manager=plugin_manager) as server:  # type: ignore[arg-type]
        data = np.ones(ELEMENTS, dtype=np.float32)
        response = await server.infer(InferenceRequest("big", {"IN": data}))
        np.testing.assert_array_equal(response.outputs["OUT"], data + 1)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for key in ("shm-default-byte-size", "shm-growth-byte-size"):
        assert any(
            f"--backend-config=python,{key} has no effect in tritonx" in w for w in warnings
        ), warnings


@pytest.mark.parametrize("command", ["serve", "check"])
def test_a_misspelt_key_is_refused(
    server_settings: object, model_repository: ModelRepositoryBuilder, command: str
) -> None:
    args = [sys.executable, "-m", "tritonx", command]
    if command == "serve":
        args += ["--model-repository", str(model_repository.root), "--http-port=0"]
        args += ["--grpc-port=0", "--allow-metrics=false"]
    else:
        args.append(str(model_repository.root))
    args.append("--backend-config=python,shm-defualt-byte-size=1048576")
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert (
        "--backend-config=python,shm-defualt-byte-size: backend 'python' has no setting "
        "'shm-defualt-byte-size' (its settings: default-max-batch-size, execution-mode, "
        "requirements-allowed-options, requirements-cache-dir, requirements-index-urls, "
        "requirements-install-timeout-seconds, restart-dead-stubs, shm-default-byte-size, "
        "shm-growth-byte-size, "
        "shm-message-queue-size, shm-region-prefix-name, stub-timeout-seconds)"
    ) in done.stderr
