"""A Vertex AI deployment end to end: ``tritonx serve`` started as Vertex AI starts a
custom container (``AIP_MODE=PREDICTION``, ``AIP_HTTP_PORT``, ``AIP_PREDICT_ROUTE``,
``AIP_HEALTH_ROUTE``, ``AIP_STORAGE_URI`` a ``gs://`` folder, passed as
``--model-repository=$AIP_STORAGE_URI``), the model read from gcp-storage-emulator through the
``repo_cloud`` plugin, and served on the predict route.

The emulator is started here (one per module), as ``plugins/repo_cloud/tests`` start theirs;
the model is written with Google's own client library."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

pytest.importorskip("gcsfs")
pytest.importorskip("google.cloud.storage")
pytest.importorskip("tritonx_repo_cloud")

from tritonx.testing import echo_plugin_env, free_port

BIN = Path(sys.executable).parent
ECHO: dict[str, Any] = {
    "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}]
}
CONFIG = """name: "addsub"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""


def wait_until(ready: Any, proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    """Poll ``ready()`` until true; fail if ``proc`` exits or ``timeout`` passes (a hang,
    not a measurement)."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"{what} exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"{what} not ready within {timeout:.0f} s"
        threading.Event().wait(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def connects(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def gcs() -> Iterator[str]:
    """gcp-storage-emulator (in memory) on a free loopback port: its URL."""
    command = BIN / "gcp-storage-emulator"
    if not command.exists():
        pytest.skip("gcp-storage-emulator not found: pip install gcp-storage-emulator")
    port = free_port()
    proc = subprocess.Popen(
        [str(command), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: connects(port), proc, "gcp-storage-emulator")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def storage_uri(gcs: str) -> str:
    """A bucket holding Triton's qa ``single_model`` repository (one model, ``addsub``):
    the ``gs://`` URI Vertex AI passes as ``AIP_STORAGE_URI``."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": gcs}
    )
    name = f"vertex-{uuid.uuid4().hex[:12]}"
    bucket = client.create_bucket(name)
    bucket.blob("model/addsub/config.pbtxt").upload_from_string(CONFIG)
    bucket.blob("model/addsub/1/").upload_from_string(b"")  # the version folder
    return f"gs://{name}/model"


@pytest.fixture(scope="module")
def container(
    gcs: str, storage_uri: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """``tritonx serve`` as a Vertex AI custom container runs it: its predict route's URL
    and its log."""
    folder = tmp_path_factory.mktemp("container")
    env = echo_plugin_env(
        folder / "plugin", plugins=("backend_echo", "repo_cloud", "frontend_vertexai")
    )
    (folder / "mount").mkdir()
    port = free_port()
    env.update(
        {
            "AIP_MODE": "PREDICTION",
            "AIP_HTTP_PORT": str(port),
            "AIP_PREDICT_ROUTE": "/v1/endpoints/1/deployedModels/2:predict",
            "AIP_HEALTH_ROUTE": "/v1/endpoints/1/deployedModels/2",
            "AIP_STORAGE_URI": storage_uri,
            "STORAGE_EMULATOR_HOST": gcs,
            "TRITON_GCS_MOUNT_DIRECTORY": str(folder / "mount"),
        }
    )
    # the container's command, as for Triton: AIP_MODE=PREDICTION starts the Vertex AI
    # endpoint on AIP_HTTP_PORT, and not the HTTP and gRPC ones
    command = [
        sys.executable,
        "-m",
        "tritonx",
        "serve",
        f"--model-repository={env['AIP_STORAGE_URI']}",
        "--allow-metrics=false",
    ]
    log = folder / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    health = base + env["AIP_HEALTH_ROUTE"]

    def healthy() -> bool:
        try:
            return requests.get(health, timeout=5).status_code == 200
        except requests.ConnectionError:
            return False

    try:
        try:
            wait_until(healthy, proc, "tritonx serve")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{log.read_text(errors='replace')[-4000:]}") from None
        assert f"Started Vertex AI HTTPService at 0.0.0.0:{port}" in log.read_text()
        yield base + env["AIP_PREDICT_ROUTE"], log
    finally:
        stop(proc)
    assert proc.returncode == 0, log.read_text(errors="replace")[-4000:]


def test_the_model_in_the_bucket_serves_on_the_predict_route(
    container: tuple[str, Path],
) -> None:
    answer = requests.post(container[0], json=ECHO, timeout=30)
    answer.raise_for_status()
    assert answer.json()["model_name"] == "addsub"
    assert answer.json()["outputs"][0]["data"] == [1.0, 2.0]


def test_the_redirect_reads_the_index_of_the_bucket(container: tuple[str, Path]) -> None:
    answer = requests.post(
        container[0], headers={"X-Vertex-Ai-Triton-Redirect": "v2/repository/index"}, timeout=30
    )
    assert answer.json() == [{"name": "addsub", "version": "1", "state": "READY"}]


def test_only_the_vertex_port_listens(container: tuple[str, Path]) -> None:
    """Under ``AIP_MODE=PREDICTION`` the HTTP and gRPC endpoints are off, as in Triton."""
    log = container[1].read_text()
    assert "Started Vertex AI HTTPService at " in log
    assert "Started HTTPService" not in log
    assert "Started GRPCInferenceService" not in log
