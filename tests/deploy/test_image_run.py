"""The image, built and run: deploy/docker/build.sh builds the ``onnx python`` variant, and the
container serves a model repository mounted read-only to the real tritonclient over HTTP and
gRPC, with /metrics, its HEALTHCHECK, a non-root user, a Python model with its own
requirements.txt (the environment cache in a volume, reused by the next container), and a
SIGTERM that stops it within --exit-timeout-secs while a request is still running.

Skipped, saying why, without podman (or a running docker) or a base image; .ci/run installs
podman, runc and mmdebstrap from Debian's packages."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tritonx.testing import ModelRepositoryBuilder

pytestmark = [pytest.mark.container, pytest.mark.xdist_group("container-image")]

#: under 600 MB: the issue's bound for the CPU "onnx python" image (Triton's smallest
#: published image is several GB)
MAX_IMAGE_BYTES = 600_000_000
SIX = "1.16.0"

SIX_MODEL = """
import json
import numpy as np
import six
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        info = json.dumps({"six": six.__version__, "file": six.__file__}).encode()
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("INFO", np.array([info], dtype=object))])
            for _ in requests
        ]
"""

#: holds its request until the process ends: the SIGTERM test's in-flight request
HOLD_MODEL = """
import threading
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        print("tritonx-test: holding a request", flush=True)
        threading.Event().wait()
"""

BYTES_IO = (
    'input [ { name: "IN" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
    'output [ { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
)


def add_python_model(root: Path, name: str, source: str, requirements: str | None = None) -> None:
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(source)
    (folder / "config.pbtxt").write_text(f'backend: "python"\n{BYTES_IO}')
    if requirements is not None:
        (folder / "requirements.txt").write_text(requirements)
    for path in [folder, *folder.rglob("*")]:  # readable by the image's user (uid 10001)
        path.chmod(0o755 if path.is_dir() else 0o644)


def host_network_options() -> list[str]:
    """What pip and uv inside the container need to reach PyPI as this host does: its proxy
    variables and, where SSL_CERT_FILE names a bundle (a proxy's own certificate authority),
    that bundle."""
    options: list[str] = []
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        if os.environ.get(name):
            options += ["-e", f"{name}={os.environ[name]}"]
    bundle = os.environ.get("SSL_CERT_FILE")
    if bundle and Path(bundle).is_file():
        options += [
            f"--volume={bundle}:/etc/ssl/host-ca.crt:ro",
            "-e", "SSL_CERT_FILE=/etc/ssl/host-ca.crt",
            "-e", "PIP_CERT=/etc/ssl/host-ca.crt",
        ]  # fmt: skip
    return options


def six_info(container: Any) -> dict[str, str]:
    client = httpclient.InferenceServerClient(container.url(8000))
    try:
        inp = httpclient.InferInput("IN", [1], "BYTES")
        inp.set_data_from_numpy(np.array([b"x"], dtype=object))
        out = client.infer("six_env", [inp]).as_numpy("INFO")
        return dict(json.loads(out[0]))
    finally:
        client.close()


def test_image_shape(tritonx_image: tuple[Any, str]) -> None:
    """Small, non-root, the health check and entry point declared, no compiler inside."""
    engine, image = tritonx_image
    size = int(engine("image", "inspect", "--format", "{{.Size}}", image).stdout)
    assert size < MAX_IMAGE_BYTES, f"{image} is {size / 1e6:.0f} MB"
    (inspect,) = json.loads(engine("image", "inspect", image).stdout)
    config = inspect["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["tritonx", "serve"]
    assert "--model-repository=/models" in config["Cmd"]
    # docker keeps it in Config, podman beside it
    health = config.get("Healthcheck") or inspect.get("Healthcheck")
    assert health["Test"] == ["CMD", "python", "/opt/tritonx/healthcheck.py"]
    assert set(config["ExposedPorts"]) == {"8000/tcp", "8001/tcp", "8002/tcp"}
    probe = engine(
        "run", "--rm", "--entrypoint", "sh", image, "-c",
        "for c in gcc cc g++ make; do command -v $c; done; "
        "test -L /opt/tritonx/examples && ls /opt/tritonx/examples/simple/config.pbtxt",
        check=False,
    )  # fmt: skip
    assert probe.stdout.strip() == "/opt/tritonx/examples/simple/config.pbtxt", probe


def test_serves_a_read_only_repository(
    start_container: Any,
    tritonx_image: tuple[Any, str],
    add_sub_repository: Path,
    check_add_sub: Any,
    tmp_path: Path,
) -> None:
    engine, image = tritonx_image
    repo = add_sub_repository
    add_python_model(repo, "six_env", SIX_MODEL, requirements=f"six=={SIX}\n")
    cache = f"tritonx-test-cache-{os.getpid()}-{tmp_path.name}"
    engine("volume", "create", cache)
    try:
        options = [f"--volume={repo}:/models:ro", f"--volume={cache}:/var/cache/tritonx"]
        options += host_network_options()
        container = start_container(options=options)  # the image's own CMD
        container.wait_status(8000, "/v2/health/ready", timeout=600)
        check_add_sub(httpclient, container.url(8000))
        check_add_sub(grpcclient, container.url(8001))
        info = six_info(container)  # from the model's own environment, in the volume
        assert info["six"] == SIX and info["file"].startswith("/var/cache/tritonx/requirements/")
        with urllib.request.urlopen(f"http://{container.url(8002)}/metrics", timeout=30) as r:
            text = r.read().decode()
        assert 'nv_inference_request_success{model="add_sub",version="1"} 2' in text, text
        health = engine("healthcheck", "run", container.name, check=False)
        assert health.returncode == 0, health.stdout + health.stderr
        assert container.exec("id", "-u").stdout.strip() == "10001"
        status = container.exec("cat", "/proc/1/status").stdout
        assert any(line.split()[:2] == ["Uid:", "10001"] for line in status.splitlines())
        # the mount is read-only even to the server
        assert container.exec("touch", "/models/x", check=False).returncode != 0
        engine("stop", "-t", "120", container.name, timeout=180)

        # the next container finds the environment in the volume: nothing to build
        check = engine(
            "run", "--rm", *options, "--entrypoint", "tritonx", image, "check", "/models",
            "--backend-config=python,requirements-cache-dir=/var/cache/tritonx/requirements",
            check=False, timeout=300,
        )  # fmt: skip
        assert "cached (/var/cache/tritonx/requirements/" in check.stdout, check
    finally:
        engine("volume", "rm", "-f", cache, check=False)


def test_sigterm_stops_within_the_exit_timeout(
    start_container: Any, tritonx_image: tuple[Any, str], tmp_path: Path
) -> None:
    """A request the model never answers does not hold the container past --exit-timeout-secs:
    SIGTERM (``stop`` with a grace far longer) ends it by itself, not by the engine's SIGKILL."""
    engine, _ = tritonx_image
    repo = ModelRepositoryBuilder(tmp_path / "models").root
    repo.chmod(0o755)
    add_python_model(repo, "hold", HOLD_MODEL)
    container = start_container(
        "--model-repository=/models", "--exit-timeout-secs=2",
        options=[f"--volume={repo}:/models:ro"],
    )  # fmt: skip
    container.wait_status(8000, "/v2/health/ready")
    client = httpclient.InferenceServerClient(container.url(8000), network_timeout=600)
    inp = httpclient.InferInput("IN", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"x"], dtype=object))
    pending = client.async_infer("hold", [inp])
    try:
        container.wait_log("tritonx-test: holding a request")
        stop = engine("stop", "-t", "300", container.name, timeout=400)
        assert stop.returncode == 0
        state = container.state()
        assert not state["Running"]
        # 137 would be the engine's SIGKILL after its 300 s
        assert state["ExitCode"] in (0, 1), (state, container.logs())
        logs = container.logs()
        assert "Waiting for in-flight requests to complete." in logs, logs
        with pytest.raises(Exception):  # noqa: B017 - the connection ends unanswered
            pending.get_result()
    finally:
        client.close()
