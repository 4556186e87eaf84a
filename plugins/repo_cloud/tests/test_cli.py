"""``tritonx serve`` with the plugin loaded by its ``repo_cloud`` entry point: an S3 (moto)
repository beside a local one, polled every second. Needs the distribution installed
(``pip install -e plugins/repo_cloud``): skipped, saying so, when its entry point is missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import tritonclient.http as httpclient
from onnx import TensorProto, helper

from tritonx.testing import ModelRepositoryBuilder, installed_plugins
from tritonx_backend_onnx.models import make_model

pytestmark = pytest.mark.skipif(
    not {"repo_cloud", "backend_onnx"} <= installed_plugins(),
    reason="the repo_cloud (or backend_onnx) entry point is not installed: "
    "pip install -e plugins/repo_cloud (and plugins/backend_onnx)",
)

IO = (
    'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] }, '
    '{ name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
    'output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
)
A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([10, 20, 30, 40], dtype=np.float32)


def onnx_model(op: str) -> bytes:
    f32 = TensorProto.FLOAT
    return make_model(
        [helper.make_node(op, ["INPUT0", "INPUT1"], ["OUTPUT0"])],
        [("INPUT0", f32, [4]), ("INPUT1", f32, [4])],
        [("OUTPUT0", f32, [4])],
    ).SerializeToString()


def config(name: str) -> str:
    return f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n{IO}'


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def infer(client: httpclient.InferenceServerClient, name: str) -> np.ndarray:
    inputs = []
    for input_name, value in (("INPUT0", A), ("INPUT1", B)):
        tensor = httpclient.InferInput(input_name, [4], "FP32")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    return np.asarray(client.infer(name, inputs).as_numpy("OUTPUT0"))


class Serve:
    """A ``tritonx serve`` process; its output goes to a file read by the test."""

    def __init__(self, repos: list[str], env: dict[str, str], log: Path, *extra: str) -> None:
        self.http = free_port()
        self.log = log
        cmd = [sys.executable, "-m", "tritonx", "serve", "--http-address", "127.0.0.1"]
        cmd += ["--grpc-address", "127.0.0.1", "--http-port", str(self.http)]
        cmd += ["--grpc-port", str(free_port()), "--metrics-port", str(free_port())]
        for repo in repos:
            cmd += ["--model-repository", repo]
        cmd += list(extra)
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60) -> httpclient.InferenceServerClient:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{self.http}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.text()
            try:
                if client.is_server_ready():
                    return client
            except Exception:
                pass
            time.sleep(0.1)
        raise AssertionError(f"not ready in {timeout} s:\n{self.text()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Serve]]:
    started: list[Serve] = []

    def start(repos: list[str], env: dict[str, str], *extra: str) -> Serve:
        process = Serve(repos, env, tmp_path / f"serve{len(started)}.log", *extra)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def test_serve_polls_an_s3_repository_beside_a_local_one(
    make_bucket: Callable[[str], Any],
    model_repository: ModelRepositoryBuilder,
    serve: Callable[..., Serve],
    tmp_path: Path,
) -> None:
    store = make_bucket("s3")
    store.put("remote/config.pbtxt", config("remote").encode())
    store.put("remote/1/model.onnx", onnx_model("Add"))
    store.put("steady/config.pbtxt", config("steady").encode())
    store.put("steady/1/model.onnx", onnx_model("Sub"))
    model_repository.add(
        "local", config=config("local"), versions={1: {"model.onnx": onnx_model("Mul")}}
    )
    mount = tmp_path / "mount"
    mount.mkdir()
    env = {**store.env, "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
    server = serve(
        [store.url, str(model_repository.root)],
        env,
        "--model-control-mode",
        "poll",
        "--repository-poll-secs",
        "1",
    )
    client = server.wait_ready()
    np.testing.assert_array_equal(infer(client, "remote"), A + B)
    np.testing.assert_array_equal(infer(client, "steady"), A - B)
    np.testing.assert_array_equal(infer(client, "local"), A * B)
    store.put("remote/1/model.onnx", onnx_model("Mul"))
    deadline = time.monotonic() + 30
    while not np.array_equal(infer(client, "remote"), A * B):
        assert time.monotonic() < deadline, server.text()
        time.sleep(0.2)
    time.sleep(2.5)  # two more polls: nothing changed, nothing downloaded
    assert server.stop() == 0
    log = server.text()
    assert log.count("localized model 'remote'") == 2, log
    assert log.count("localized model 'steady'") == 1, log  # polled, never downloaded again
    assert "localized model 'local'" not in log  # local models are used in place
    assert list(mount.iterdir()) == []


def test_serve_refuses_a_missing_bucket(
    make_bucket: Callable[[str], Any], serve: Callable[..., Serve]
) -> None:
    store = make_bucket("s3")
    server = serve([store.url.replace(store.name, store.name + "x")], store.env)
    assert server.proc.wait(60) == 1
    assert (
        "error: creating server: Internal - Unable to create S3 filesystem client. Check "
        "account credentials. Exception: 'NoSuchBucket'" in server.text()
    )


def test_check_reads_an_s3_repository_and_releases_its_copies(
    make_bucket: Callable[[str], Any], tmp_path: Path
) -> None:
    """``tritonx check s3://...``: the models are downloaded, checked and removed again."""
    store = make_bucket("s3")
    store.put("remote/config.pbtxt", config("remote").encode())
    store.put("remote/1/model.onnx", onnx_model("Add"))
    store.put("broken/config.pbtxt", b'name: "broken"\nplatform: "onnxruntime_onnx"\n')
    mount = tmp_path / "mount"
    mount.mkdir()
    env = {**os.environ, **store.env, "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
    done = subprocess.run(
        [sys.executable, "-m", "tritonx", "check", "--json", store.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # 'broken' has no version
    models = {m["name"]: m for m in json.loads(done.stdout)}
    assert models["remote"]["status"] == "OK" and models["remote"]["versions"] == [1]
    assert models["remote"]["repository"] == store.url
    assert models["broken"]["status"] == "ERROR"
    assert [p for p in mount.rglob("*") if p.is_file()] == []
