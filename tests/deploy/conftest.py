"""Fixtures of the deployment tests: real ``tritonx serve`` processes (as the container runs
them) with the identity test backend installed as a plugin through a real entry point."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tritonx.testing import echo_plugin_env, free_port


@pytest.fixture
def echo_env(tmp_path: Path) -> dict[str, str]:
    """An environment where the identity backend is an installed plugin (its entry point)."""
    return echo_plugin_env(tmp_path / "site", pythonpath=sys.path)


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """The status of a GET, or None when the connection is refused or fails."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return None


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@dataclass
class Replica:
    """One ``tritonx serve`` process on loopback ports (a pod)."""

    proc: subprocess.Popen[str]
    http_port: int
    grpc_port: int
    metrics_port: int
    log: Path
    name: str = ""
    served: int = field(default=0)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def ready_status(self) -> int | None:
        """The status of GET /v2/health/ready (None: the connection failed)."""
        return http_status(f"http://{self.url}/v2/health/ready", timeout=1)

    def ready(self) -> bool:
        return self.ready_status() == 200

    def accepts_connections(self) -> bool:
        """Whether the HTTP listener accepts a TCP connection."""
        return accepts_connections(self.http_port)

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited: {self.log.read_text()}")
            if self.ready():
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.name} not ready: {self.log.read_text()}")

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)


StartReplica = Callable[..., Replica]


@pytest.fixture
def start_replica(tmp_path: Path, echo_env: dict[str, str]) -> Iterator[StartReplica]:
    """Start ``argv`` (``tritonx serve ...``) with loopback ports added; killed at teardown."""
    started: list[Replica] = []

    def start(argv: list[str], name: str = "replica") -> Replica:
        http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
        log = tmp_path / f"{name}.log"
        proc = subprocess.Popen(
            [
                *argv,
                "--http-address=127.0.0.1",
                f"--http-port={http_port}",
                "--grpc-address=127.0.0.1",
                f"--grpc-port={grpc_port}",
                f"--metrics-port={metrics_port}",
            ],
            env=echo_env,
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
            text=True,
        )
        replica = Replica(proc, http_port, grpc_port, metrics_port, log, name)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        if replica.proc.poll() is None:
            replica.proc.kill()
        replica.proc.wait(30)


# ---------------------------------------------------------------------------- container images
# The image tests (test_image_run.py, test_image_contracts.py) build deploy/docker/Dockerfile
# with deploy/docker/build.sh and run it with podman. Without podman, or without a base image
# (no registry and no mmdebstrap), they are skipped, saying why; .ci/run installs podman, runc
# and mmdebstrap from Debian's packages.

ROOT = Path(__file__).resolve().parents[2]
BUILD_SH = ROOT / "deploy" / "docker" / "build.sh"
KEEP_RLIMITS_CONF = ROOT / "deploy" / "docker" / "podman-keep-rlimits.conf"
#: the tag the tests build ("onnx python", the default plugin set)
TEST_IMAGE = "localhost/tritonx-test:onnx-python"
#: build.sh's exit status when no base image can be had
NO_BASE_STATUS = 3


@dataclass
class Engine:
    """A container engine command (podman or docker) and the environment it runs with."""

    program: str
    env: dict[str, str]

    def __call__(
        self, *args: str, timeout: float = 180, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.program, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{self.program} {' '.join(args)}: exit {result.returncode}\n{result.stderr}"
            )
        return result


def _find_engine() -> Engine:
    if shutil.which("podman") is None:
        pytest.skip(
            "podman is not installed (.ci/run installs Debian's podman; these tests use "
            "podman's healthcheck and volume options, which docker lacks)"
        )
    return Engine("podman", dict(os.environ))


def _build(engine: Engine) -> dict[str, Any]:
    """Run build.sh in a process group of its own, killed whole if it outlives its time."""
    proc = subprocess.Popen(
        [str(BUILD_SH), "--engine", engine.program, "--plugins", "onnx python",
         "--tag", TEST_IMAGE],
        env={**engine.env, "PYTHON": sys.executable},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        _, log = proc.communicate(timeout=1500)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, log = proc.communicate()
        return {"status": -1, "log": log + "\nbuild.sh ran past 1500 s and was killed"}
    return {"status": proc.returncode, "log": log}


@pytest.fixture(scope="session")
def tritonx_image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Engine, str]:
    """The ``onnx python`` image, built once per test run (pytest-xdist workers share it under
    a lock), and the engine that runs it (with podman's resource limits kept on hosts that
    refuse them)."""
    engine = _find_engine()
    # one build per test run: under xdist the workers share the run's temp root and its id
    # names the run; without xdist the run's own temp folder is the only one that sees it
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if run_id else base
    with (shared / "tritonx-image.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = shared / f"tritonx-image-{run_id or 'serial'}.json"
        if not built.exists():
            built.write_text(json.dumps(_build(engine)))
        outcome = json.loads(built.read_text())
    if outcome["status"] == NO_BASE_STATUS:
        pytest.skip(f"no base image: {outcome['log'].strip().splitlines()[-1]}")
    assert outcome["status"] == 0, outcome["log"][-6000:]
    probe = engine("run", "--rm", "--entrypoint", "true", TEST_IMAGE, check=False)
    if probe.returncode != 0 and "error setting rlimit" in probe.stderr:
        assert engine.program == "podman" and "CONTAINERS_CONF" not in engine.env, probe.stderr
        engine.env["CONTAINERS_CONF"] = str(KEEP_RLIMITS_CONF)
        probe = engine("run", "--rm", "--entrypoint", "true", TEST_IMAGE, check=False)
    assert probe.returncode == 0, probe.stderr
    return engine, TEST_IMAGE


@dataclass
class Container:
    """A started container: its name and the host port of each published container port."""

    engine: Engine
    name: str
    ports: dict[int, int]

    def url(self, container_port: int) -> str:
        return f"127.0.0.1:{self.ports[container_port]}"

    def logs(self) -> str:
        result = self.engine("logs", self.name, check=False)
        return result.stdout + result.stderr

    def state(self) -> dict[str, Any]:
        out = self.engine("inspect", "--format", "{{json .State}}", self.name).stdout
        return dict(json.loads(out))

    def exec(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.engine("exec", self.name, *argv, check=check)

    def wait_status(
        self, container_port: int, path: str, status: int = 200, timeout: float = 180
    ) -> None:
        """Poll GET ``path`` on a published port until it answers ``status`` (the container
        must keep running)."""
        deadline = time.monotonic() + timeout
        while http_status(f"http://{self.url(container_port)}{path}", timeout=2) != status:
            if not self.state().get("Running"):
                raise AssertionError(f"{self.name} stopped:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{path} never answered {status}:\n{self.logs()}")
            time.sleep(0.2)

    def wait_log(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.logs():
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never logged:\n{self.logs()}")
            time.sleep(0.2)


StartContainer = Callable[..., Container]


@pytest.fixture
def start_container(tritonx_image: tuple[Engine, str]) -> Iterator[StartContainer]:
    """Start the test image: ``start(*args, ports=[8000, ...], options=[...])`` publishes each
    container port on a free loopback port; ``options`` go before the image (volumes, --user,
    --read-only, --entrypoint, -e). Every container is removed at teardown."""
    engine, image = tritonx_image
    started: list[str] = []

    def start(
        *args: str, ports: Sequence[int] = (8000, 8001, 8002), options: Sequence[str] = ()
    ) -> Container:
        name = f"tritonx-test-{os.getpid()}-{len(started)}-{time.monotonic_ns()}"
        published = {port: free_port() for port in ports}
        publish = [f"--publish=127.0.0.1:{host}:{port}" for port, host in published.items()]
        # --health-interval=disable: the tests run the health check themselves (podman's
        # timers need systemd)
        engine(
            "run", "-d", "--name", name, "--health-interval=disable", *publish, *options,
            image, *args,
        )  # fmt: skip
        started.append(name)
        return Container(engine, name, published)

    yield start
    for name in started:
        engine("rm", "-f", "-v", "-t", "0", name, check=False, timeout=120)


@pytest.fixture
def add_sub_repository(tmp_path: Path) -> Path:
    """A model repository holding the ONNX add_sub (INT32 [16], dynamic batching), readable by
    the image's user (uid 10001) when mounted into a container."""
    from onnx import TensorProto

    from tritonx_backend_onnx.models import add_sub

    repo = tmp_path / "models"
    folder = repo / "add_sub"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.onnx").write_bytes(add_sub(TensorProto.INT32, ("batch", 16)))
    (folder / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: 8\ndynamic_batching { }\n'
    )
    world_readable(repo)
    return repo


def world_readable(root: Path) -> None:
    """Folders 755 and files 644 under ``root`` (the container's user is not the owner)."""
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


@pytest.fixture
def check_add_sub() -> Callable[[Any, str], None]:
    """``check(tritonclient.http or .grpc, url)``: one add_sub inference, both outputs right."""

    def check(module: Any, url: str) -> None:
        client = module.InferenceServerClient(url)
        try:
            a = np.arange(16, dtype=np.int32).reshape(1, 16)
            b = np.full((1, 16), 5, dtype=np.int32)
            inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
            for tensor, value in zip(inputs, (a, b), strict=True):
                tensor.set_data_from_numpy(value)
            result = client.infer("add_sub", inputs)
            assert (result.as_numpy("OUTPUT0") == a + b).all()
            assert (result.as_numpy("OUTPUT1") == a - b).all()
        finally:
            client.close()

    return check
