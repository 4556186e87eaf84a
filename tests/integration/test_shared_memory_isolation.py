"""A client with ``--allow-client-shm=true`` can register its own shared memory, never the
server's: every shared-memory object a ``tritonx serve`` process and its Python backend worker
processes hold (what ``/proc/<pid>/maps`` and ``/proc/<pid>/fd`` show anyone who may read
them), after a Python model served tensors of several sizes, is refused over HTTP and gRPC
(the real tritonclient clients). The transport's segments are nameless (``memfd``): nothing of
them is ever in ``/dev/shm``, not while the model serves, not after its worker is killed.
Registration refuses what is not a regular file the client made (a symbolic link, a FIFO);
ordinary client regions keep working with the Python model.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tritonx.testing import ModelRepositoryBuilder, listening, shared_memory_objects

pytestmark = pytest.mark.skipif(
    not (Path("/proc/self/maps").exists() and os.path.isdir("/dev/shm")),
    reason="needs /proc and /dev/shm",
)

SHM_DIR = "/dev/shm"
IDENTITY_PY = """
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
                    [pb_utils.Tensor("OUT", data.copy()), pb_utils.Tensor("PID", pid)]
                )
            )
        return responses
"""
#: FP32 elements: inline (64 B), one 1 MiB kept segment (400 KB), 4 MiB, 16 MiB
SIZES = (16, 100_000, 1 << 20, 4 << 20)
#: Triton's (HTTP status, gRPC status) of INTERNAL, as tritonclient reports them
INTERNAL = {"http": "500", "grpc": "StatusCode.INTERNAL"}


def shared_files(pid: int) -> set[str]:
    """Every shared-memory object process ``pid`` holds, semaphores included: what an
    attacker reading its ``/proc`` would try to register."""
    return shared_memory_objects(pid, semaphores=True)


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it (the forkserver and the workers it forks)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def restarted(server: Serve, dead: int, timeout: float = 180.0) -> None:
    """Wait until the server has replaced its dead worker ``dead``: a new worker (a process
    its forkserver forked) runs and the model is ready again (served by it: the server let go
    of the dead one before starting the next)."""
    deadline = time.monotonic() + timeout
    while True:
        tree = process_tree(server.proc.pid)
        below = set(tree) - {server.proc.pid, *children(server.proc.pid)} - {dead}
        if below and server.http.is_model_ready("py_identity"):
            return
        assert time.monotonic() < deadline, "the worker was not restarted"
        select.select([], [], [], 0.02)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    return [p for p in process_tree(pid) if p != pid and parent(p) == pid]


def parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def wait_exit(pid: int, timeout: float = 120.0) -> bool:
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


class Serve:
    """``tritonx serve --allow-client-shm=true`` over a repository with the ``py_identity``
    Python model, its segments labelled with a prefix of this test's own."""

    def __init__(self, root: Path) -> None:
        repo = ModelRepositoryBuilder(root)
        repo.add(
            "py_identity",
            backend="python",
            inputs=[("IN", "FP32", [-1])],
            outputs=[("OUT", "FP32", [-1]), ("PID", "INT64", [1])],
            versions={1: {"model.py": IDENTITY_PY}},
        )
        self.prefix = f"tritonx_trust_{uuid.uuid4().hex[:10]}_"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tritonx",
                "serve",
                f"--model-repository={root}",
                "--http-address=127.0.0.1",
                "--http-port=0",
                "--grpc-address=127.0.0.1",
                "--grpc-port=0",
                "--allow-metrics=false",
                "--allow-client-shm=true",
                f"--backend-config=python,shm-region-prefix-name={self.prefix}",
                "--backend-config=python,restart-dead-stubs=true",  # a killed worker comes back
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        # a deadline for a hang, generous for a loaded machine (a server with the Python
        # backend took over 60 s to start there)
        urls, _ = listening(self.proc, timeout=180)
        self.http = httpclient.InferenceServerClient(urls["HTTPService"])
        self.grpc = grpcclient.InferenceServerClient(urls["GRPCInferenceService"])

    def client(self, proto: str) -> Any:
        return self.http if proto == "http" else self.grpc

    def in_dev_shm(self) -> list[str]:
        """Files in /dev/shm labelled with this server's prefix (there must be none)."""
        return [name for name in os.listdir(SHM_DIR) if name.startswith(self.prefix)]

    def close(self) -> None:
        self.http.close()
        self.grpc.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.proc.stderr.close()  # type: ignore[union-attr]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Serve]:
    server = Serve(tmp_path / "models")
    try:
        yield server
    finally:
        server.close()


def infer(client: Any, proto: str, data: np.ndarray) -> int:
    """``py_identity`` on ``data`` (checked); the worker's pid."""
    module = httpclient if proto == "http" else grpcclient
    tensor = module.InferInput("IN", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer("py_identity", [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUT"), data)
    return int(result.as_numpy("PID")[0])


def refused(proto: str, call: Callable[[], Any]) -> tuple[str, str]:
    """The (status, message) ``call()`` fails with."""
    with pytest.raises(InferenceServerException) as info:
        call()
    status = info.value.status()
    assert status == INTERNAL[proto] or status in ("400", "StatusCode.INVALID_ARGUMENT"), status
    return status, info.value.message()


def test_no_client_can_register_the_servers_own_shared_memory(served: Serve) -> None:
    rng = np.random.default_rng(0)
    workers = set()
    for proto in ("http", "grpc"):
        for size in SIZES:
            for _ in range(2):  # the second request reuses the segments of the first
                workers.add(infer(served.client(proto), proto, rng.random(size, np.float32)))
    assert len(workers) == 1
    (worker,) = workers
    tree = process_tree(served.proc.pid)
    assert worker in tree
    held = {pid: shared_files(pid) for pid in tree}
    # the transport's segments exist (a 4 MB tensor crossed each way): the server and its
    # worker hold them
    assert any(served.prefix in p for p in held[served.proc.pid]), held
    assert any(served.prefix in p for p in held[worker]), held
    # whatever an attacker makes of what it sees, no key reaches any of it
    everything = set().union(*held.values())
    keys: set[str] = set()
    for path in everything:
        name = path.removeprefix(f"{SHM_DIR}/").removeprefix("/memfd:")
        keys.update((name, f"/{name}", path))
    for proto in ("http", "grpc"):
        client = served.client(proto)
        for i, key in enumerate(sorted(keys)):
            register = partial(client.register_system_shared_memory, f"r{i}", key, 1)
            status, message = refused(proto, register)
            if not key.startswith(f"{SHM_DIR}/"):
                assert (status, message) == (
                    INTERNAL[proto],
                    f"Unable to open shared memory region: '{key}'",
                )
    assert not served.grpc.get_system_shared_memory_status().regions
    assert served.http.get_system_shared_memory_status() == []
    # they are nameless: nothing of them is in /dev/shm, nothing there is the server's
    assert all(p.startswith(f"/memfd:{served.prefix}") for p in everything), everything
    assert not served.in_dev_shm()
    # the model still serves every size
    for size in SIZES:
        assert infer(served.http, "http", rng.random(size, np.float32)) == worker


def test_client_regions_still_work_and_a_killed_worker_leaves_nothing(served: Serve) -> None:
    tag = uuid.uuid4().hex[:10]
    elements = 1 << 20  # 4 MiB each way
    data = np.random.default_rng(1).random(elements, np.float32)
    regions = [
        shm.create_shared_memory_region(f"{tag}_{io}", f"/tritonx-trust-{tag}-{io}", data.nbytes)
        for io in ("in", "out")
    ]
    try:
        shm.set_shared_memory_region(regions[0], [data])
        for proto in ("http", "grpc"):
            client = served.client(proto)
            module = httpclient if proto == "http" else grpcclient
            client.register_system_shared_memory(
                f"{tag}_in", f"/tritonx-trust-{tag}-in", data.nbytes
            )
            client.register_system_shared_memory(
                f"{tag}_out", f"/tritonx-trust-{tag}-out", data.nbytes
            )
            tensor = module.InferInput("IN", [elements], "FP32")
            tensor.set_shared_memory(f"{tag}_in", data.nbytes)
            out = module.InferRequestedOutput("OUT")
            out.set_shared_memory(f"{tag}_out", data.nbytes)
            pid = module.InferRequestedOutput("PID")
            result = client.infer("py_identity", [tensor], outputs=[out, pid])
            got = shm.get_contents_as_numpy(regions[1], np.float32, [elements])
            np.testing.assert_array_equal(got, data)
            worker = int(result.as_numpy("PID")[0])
            client.unregister_system_shared_memory()
        # a killed worker takes its segments with it; the restarted one serves again
        os.kill(worker, signal.SIGKILL)
        assert wait_exit(worker)
        restarted(served, worker)
        replacement = infer(served.http, "http", data)
        assert replacement != worker
        assert not [
            p
            for p in shared_files(served.proc.pid)
            if p.startswith(f"/memfd:{served.prefix}{worker}_")
        ]
        assert not served.in_dev_shm()
        # a killed server: its worker exits, and nothing is left in /dev/shm
        served.proc.send_signal(signal.SIGKILL)
        served.proc.wait(30)
        assert wait_exit(replacement), "the worker outlived its server"
        assert not served.in_dev_shm()
    finally:
        for region in regions:
            shm.destroy_shared_memory_region(region)


def test_registration_refuses_what_is_not_a_regular_file(served: Serve, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:10]
    target = tmp_path / "elsewhere"
    target.write_bytes(b"\0" * 4096)
    link, fifo = f"tritonx-trust-{tag}-link", f"tritonx-trust-{tag}-fifo"
    os.symlink(target, os.path.join(SHM_DIR, link))
    os.mkfifo(os.path.join(SHM_DIR, fifo))
    try:
        for proto in ("http", "grpc"):
            client = served.client(proto)
            # shm_open follows no symbolic link: a file elsewhere cannot be passed off
            register = client.register_system_shared_memory
            assert refused(proto, partial(register, "l", link, 1)) == (
                INTERNAL[proto],
                f"Unable to open shared memory region: '{link}'",
            )
            assert refused(proto, partial(register, "f", fifo, 1)) == (
                INTERNAL[proto],
                f"Invalid shared memory region: '{fifo}'",
            )
        assert served.http.get_system_shared_memory_status() == []
    finally:
        os.unlink(os.path.join(SHM_DIR, link))
        os.unlink(os.path.join(SHM_DIR, fifo))
