"""How requests reach a worker process: large tensors cross through shared memory in both
directions, never through the worker's sockets (counted by the kernel: the bytes the worker
and this process read with system calls, ``rchar`` in ``/proc/<pid>/io``; shared memory is
mapped, not read), over HTTP and gRPC; the segments are kept and reused while the model is
loaded (seen in ``/dev/shm`` under the backend's ``shm-region-prefix-name``), never while a
response still uses one, and removed when the model is unloaded."""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http as httpsync
import tritonclient.http.aio as httpclient

from tritonx.config import ServerSettings
from tritonx.server import Server
from tritonx.testing import ModelRepositoryBuilder, listening
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

pytestmark = pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/<pid>/io")

SHM_DIR = "/dev/shm"


@pytest.fixture
def shm_prefix(tmp_path: Path) -> str:
    """A segment-name prefix of this test's own (``shm-region-prefix-name``)."""
    return f"tritonx_test_{os.getpid()}_{tmp_path.name}_"


def segments(prefix: str) -> set[str]:
    """The shared-memory segments in /dev/shm whose names start with ``prefix``."""
    return {os.path.basename(p) for p in glob.glob(os.path.join(SHM_DIR, f"{prefix}*"))}


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


@pytest.mark.skipif(not os.path.isdir(SHM_DIR), reason="needs /dev/shm")
async def test_segments_are_reused_never_under_a_live_response_and_removed_on_unload(
    server: Server, shm_prefix: str
) -> None:
    rng = np.random.default_rng(1)

    async def infer(data: np.ndarray) -> np.ndarray:
        response = await server.infer(InferenceRequest("big", {"IN": data}))
        return response.outputs["OUT"]

    first_in = rng.random(ELEMENTS, dtype=np.float32)
    held = await infer(first_in)  # kept: this array is a view of the worker's segment
    kept = segments(shm_prefix)
    assert kept, "a 4 MB tensor should cross through shared memory"
    for _ in range(12):
        data = rng.random(ELEMENTS, dtype=np.float32)
        np.testing.assert_array_equal(await infer(data), data + 1)
        # the held response was not overwritten by the later ones
        np.testing.assert_array_equal(held, first_in + 1)
    # the segments are reused: the held response pins one more, no more appear per request
    reused = segments(shm_prefix)
    assert len(reused) == len(kept) + 1, (kept, reused)
    for _ in range(12):
        data = rng.random(ELEMENTS, dtype=np.float32)
        np.testing.assert_array_equal(await infer(data), data + 1)
    assert segments(shm_prefix) == reused
    np.testing.assert_array_equal(held, first_in + 1)
    await server.unload_model("big")
    assert not segments(shm_prefix)
    # what a response holds stays readable after its segment is gone
    np.testing.assert_array_equal(held, first_in + 1)


def dead_pid() -> int:
    """The id of a process that has ended."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


@pytest.mark.skipif(not os.path.isdir(SHM_DIR), reason="needs /dev/shm")
def test_segments_of_a_killed_server_are_removed_by_its_worker_and_the_next_server(
    server_settings: object, model_repository: ModelRepositoryBuilder, shm_prefix: str
) -> None:
    # (server_settings: the repository with "big"; served here by `tritonx serve`)
    pid = dead_pid()
    orphans = {f"{shm_prefix}{pid}_k0", f"{shm_prefix}{pid}w2_7"}
    someone_elses = f"{shm_prefix}{os.getpid()}w99_k0"  # a live process's: left alone
    for name in (*orphans, someone_elses):
        Path(SHM_DIR, name).write_bytes(b"x")

    def serve() -> tuple[subprocess.Popen[str], str]:
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
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        urls, _ = listening(proc, ("HTTPService",))
        return proc, urls["HTTPService"]

    try:
        proc, url = serve()
        try:
            # the orphans of a dead process were removed when the backend started
            assert segments(shm_prefix) == {someone_elses}
            client = httpsync.InferenceServerClient(url)
            data = np.random.default_rng(2).random(ELEMENTS, dtype=np.float32)
            tensor = httpsync.InferInput("IN", [ELEMENTS], "FP32")
            tensor.set_data_from_numpy(data)
            result = client.infer("big", [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUT"), data + 1)
            worker = int(result.as_numpy("PID")[0])
            theirs = {n for n in segments(shm_prefix) if n.startswith(f"{shm_prefix}{worker}_")}
            ours = segments(shm_prefix) - theirs - {someone_elses}
            assert theirs and ours  # a kept segment each way
            client.close()
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            proc.stderr.close()  # type: ignore[union-attr]
        # the worker sees the server go, removes its own segments and exits
        deadline = time.monotonic() + 20
        while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{worker}").exists(), "the worker outlived its server"
        assert segments(shm_prefix) == ours | {someone_elses}
        # the killed server's own are removed by the next server
        proc, _ = serve()
        try:
            assert segments(shm_prefix) == {someone_elses}
        finally:
            proc.terminate()
            proc.wait(30)
            proc.stderr.close()  # type: ignore[union-attr]
    finally:
        for name in segments(shm_prefix):
            os.unlink(os.path.join(SHM_DIR, name))


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
        "shm-default-byte-size, shm-growth-byte-size, shm-message-queue-size, "
        "shm-region-prefix-name, stub-timeout-seconds)"
    ) in done.stderr
