"""``tritonx-sagemaker-serve``: the flags it passes for the environment SageMaker sets (as
Triton's ``docker/sagemaker/serve``), the settings it refuses with their messages, and real
starts of a single-model and a multi-model endpoint in a process of their own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import requests
from sagemaker_testing import add_add_sub

from tritonx.testing import free_port
from tritonx_frontend_sagemaker.serve import ServeError, serve_command

SCRIPT = str(Path(sys.executable).with_name("tritonx-sagemaker-serve"))

#: the python model's answer to INPUT0 = INPUT1 = 0..15 (Triton's L0_sagemaker expectation)
EXPECTED = {
    "model_name": "sm_model",
    "model_version": "1",
    "outputs": [
        {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(0, 32, 2))},
        {"name": "OUTPUT1", "datatype": "INT32", "shape": [1, 16], "data": [0] * 16},
    ],
}
REQUEST = {
    "inputs": [
        {"name": name, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
        for name in ("INPUT0", "INPUT1")
    ]
}


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """``/opt/ml/model`` of a single-model endpoint: the model ``sm_model``."""
    folder = tmp_path / "opt_ml_model"
    add_add_sub(folder, "sm_model")
    return folder


def command(env: Mapping[str, str], model_dir: Path, **kw: str) -> list[str]:
    args, _, _ = serve_command(env, model_dir=str(model_dir), **kw)
    return args


def test_single_model_flags(model_dir: Path) -> None:
    args, env, notes = serve_command(
        {"SAGEMAKER_BIND_TO_PORT": "8123", "SAGEMAKER_TRITON_THREAD_COUNT": "4"},
        model_dir=str(model_dir),
    )
    assert args[1:4] == ["-m", "tritonx", "serve"]
    for flag in (
        "--allow-http=false",
        "--allow-grpc=false",
        "--allow-metrics=false",
        "--model-control-mode=explicit",
        f"--model-repository={model_dir}",
        "--load-model=sm_model",
        "--model-namespacing=true",
        "--log-verbose=true",
        "--backend-config=python,shm-default-byte-size=16777216",
        "--backend-config=python,shm-growth-byte-size=1048576",
    ):
        assert flag in args
    frontend = [a for a in args if "sagemaker" in a]
    assert frontend == [
        "--allow-sagemaker=true",
        "--sagemaker-port=8123",
        "--sagemaker-thread-count=4",
    ]
    assert env["SAGEMAKER_TRITON_PING_MODE"] == "ready"
    assert env["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] == "sm_model"
    assert "WARNING: No SAGEMAKER_TRITON_DEFAULT_MODEL_NAME provided." in notes[0]


def test_settings_passed_on(model_dir: Path) -> None:
    env = {
        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "sm_model",
        "SAGEMAKER_TRITON_ALLOW_GRPC": "true",
        "SAGEMAKER_TRITON_GRPC_PORT": "9001",
        "SAGEMAKER_TRITON_ALLOW_METRICS": "true",
        "SAGEMAKER_TRITON_METRICS_PORT": "9002",
        "SAGEMAKER_TRITON_LOG_VERBOSE": "0",
        "SAGEMAKER_TRITON_LOG_INFO": "false",
        "SAGEMAKER_TRITON_LOG_WARNING": "false",
        "SAGEMAKER_TRITON_LOG_ERROR": "true",
        "SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE": "1024",
        "SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE": "2048",
        "SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING": "false",
        "SAGEMAKER_TRITON_ADDITIONAL_ARGS": "--strict-readiness=false  --exit-timeout-secs=5",
        "SAGEMAKER_REGION": "eu-west-1",  # (the platform's: left alone)
        "SAGEMAKER_SAFE_PORT_RANGE": "9000-9100",
    }
    args = command(env, model_dir)
    for flag in (
        "--allow-grpc=true",
        "--grpc-port=9001",
        "--allow-metrics=true",
        "--metrics-port=9002",
        "--log-verbose=0",
        "--log-info=false",
        "--log-warning=false",
        "--log-error=true",
        "--backend-config=python,shm-default-byte-size=1024",
        "--backend-config=python,shm-growth-byte-size=2048",
        "--model-namespacing=false",
        "--sagemaker-safe-port-range=9000-9100",
    ):
        assert flag in args
    assert args[-2:] == ["--strict-readiness=false", "--exit-timeout-secs=5"]


def test_multi_model_flags(tmp_path: Path) -> None:
    repository = tmp_path / "sagemaker"
    args, env, notes = serve_command(
        {"SAGEMAKER_MULTI_MODEL": "true"},
        model_dir=str(tmp_path / "absent"),
        multi_model_repository=str(repository),
        models_root=str(tmp_path),
    )
    assert repository.is_dir()
    assert f"--model-repository={repository}" in args
    assert f"--frontend-config=sagemaker,models_root={tmp_path}" in args
    assert not any(a.startswith("--load-model") for a in args)
    assert env["SAGEMAKER_TRITON_PING_MODE"] == "live"
    assert notes == ['Triton is running in SageMaker MME mode. Using Triton ping mode: "live"']
    env = {"SAGEMAKER_MULTI_MODEL": "true", "SAGEMAKER_TRITON_OVERRIDE_PING_MODE": "ready"}
    _, env_out, _ = serve_command(env, multi_model_repository=str(repository))
    assert env_out["SAGEMAKER_TRITON_PING_MODE"] == "ready"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"SAGEMAKER_TRITON_INFERENCE_TYPE": "x"},
            "ERROR: Invalid SAGEMAKER_TRITON_INFERENCE_TYPE 'x'",
        ),
        (
            {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "nope"},
            "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME nope does not exist",
        ),
        ({"SAGEMAKER_TRITON_PING_MOD": "live"}, "unknown setting(s) SAGEMAKER_TRITON_PING_MOD"),
        ({"SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT": "2"}, "is not supported by tritonx"),
        ({"SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT": "0.5"}, "is not supported by tritonx"),
        ({"SAGEMAKER_MULTI_MODEL": "yes"}, "SAGEMAKER_MULTI_MODEL must be true or false"),
        ({"SAGEMAKER_TRITON_OVERRIDE_PING_MODE": "always"}, "invalid SAGEMAKER_TRITON_OVERRIDE"),
    ],
)
def test_refused_settings(model_dir: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(ServeError) as refused:
        command(env, model_dir)
    assert message in str(refused.value)


def test_refused_model_folders(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match="No model found in model repository"):
        command({}, tmp_path)
    add_add_sub(tmp_path, "a")
    add_add_sub(tmp_path, "b")
    with pytest.raises(ServeError, match="More than 1 model directory") as refused:
        command({}, tmp_path)
    assert "Directories found in model repository: a b" in str(refused.value)
    (tmp_path / "config.pbtxt").write_text("")
    with pytest.raises(ServeError, match="Incorrect directory structure"):
        command({}, tmp_path)


def test_the_script_refuses_with_status_1(model_dir: Path) -> None:
    env = {**os.environ, "SAGEMAKER_TRITON_INFERENCE_TYPE": "incorrect_inference_type"}
    done = subprocess.run(
        [SCRIPT, "--model-dir", str(model_dir)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "ERROR: Invalid SAGEMAKER_TRITON_INFERENCE_TYPE" in done.stderr


@contextlib.contextmanager
def started(env: Mapping[str, str], log: Path, *options: str) -> Iterator[str]:
    """``tritonx-sagemaker-serve`` run with ``env`` added to a clean environment; yields
    its URL once ``/ping`` answers 200, stops it (SIGTERM) after."""
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SAGEMAKER_", "TRITONX_"))}
    environ.update(
        {
            "TRITONX_PLUGINS": "backend_python,frontend_sagemaker",
            "SAGEMAKER_BIND_TO_PORT": str(port),
        }
    )
    environ.update(env)
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as out:
        proc = subprocess.Popen([SCRIPT, *options], env=environ, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 90
        while True:  # a bounded poll of its readiness, as SageMaker polls /ping
            assert proc.poll() is None, log.read_text()
            with contextlib.suppress(requests.ConnectionError):
                if requests.get(f"{url}/ping", timeout=5).status_code == 200:
                    break
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()


def test_a_single_model_endpoint(model_dir: Path, tmp_path: Path) -> None:
    env = {"SAGEMAKER_TRITON_LOG_VERBOSE": "false"}
    log = tmp_path / "serve.log"
    with started(env, log, "--model-dir", str(model_dir)) as url:
        answer = requests.post(f"{url}/invocations", json=REQUEST)
        assert answer.status_code == 200, answer.text
        result = answer.json()
        assert {key: result[key] for key in EXPECTED} == EXPECTED
    assert "Starting with the only existing model directory sm_model" in log.read_text()


def test_a_multi_model_endpoint(tmp_path: Path) -> None:
    root = tmp_path / "opt_ml_models"
    add_add_sub(root / "123456789abcdefghi", "model")
    env = {"SAGEMAKER_MULTI_MODEL": "true", "SAGEMAKER_TRITON_LOG_VERBOSE": "false"}
    options = ["--multi-model-repository", str(tmp_path / "sagemaker"), "--models-root", str(root)]
    with started(env, tmp_path / "serve.log", *options) as url:
        folder = str(root / "123456789abcdefghi" / "model")
        answer = requests.post(f"{url}/models", json={"model_name": "sm_model", "url": folder})
        assert answer.status_code == 200, answer.text
        answer = requests.post(f"{url}/models/sm_model/invoke", json=REQUEST)
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"] == EXPECTED["outputs"]
        assert requests.delete(f"{url}/models/sm_model").status_code == 200
    assert "Loading SageMaker TargetModel: sm_model" in (tmp_path / "serve.log").read_text()


def test_a_listener_outside_the_safe_port_range(model_dir: Path) -> None:
    """SAGEMAKER_SAFE_PORT_RANGE: tritonx serve refuses a gRPC port outside it, with
    tritonserver's message."""
    env = {
        **os.environ,
        "SAGEMAKER_SAFE_PORT_RANGE": "9000-9100",
        "SAGEMAKER_TRITON_ALLOW_GRPC": "true",
        "SAGEMAKER_TRITON_GRPC_PORT": "9200",
    }
    done = subprocess.run(
        [SCRIPT, "--model-dir", str(model_dir)], env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert (
        "The server cannot listen to GRPC requests at port 9200, allowed port range is "
        "[9000, 9100]" in done.stderr
    )
