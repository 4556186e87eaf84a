"""Container image sizes and cold starts, one variant (plugin set) after another.

    python benchmarks/image.py                                   # "onnx python", compiled byte-code
    python benchmarks/image.py --variants "onnx python" "onnx python torch" --bytecode compiled none

Each variant is built with deploy/docker/build.sh (podman, or docker) and tagged
``tritonx-bench:<plugins>-<bytecode>``; then, ``--runs`` times each, the time from ``run -d``
to the first 200 on /v2/health/ready is measured for two repositories:

* ``add_sub``: one ONNX model (add_sub, INT32 [16]) mounted read-only at /models: the server's
  own start;
* ``examples``: the bundled example repository (/opt/tritonx/examples, seven Python-backend
  models, so seven worker processes start).

Prints a Markdown table (size in MB as the engine reports it, median cold start in seconds).
Sizes are exact; cold starts are wall times on a shared machine, so compare them within a run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as run_py

ROOT = Path(__file__).resolve().parents[1]
BUILD_SH = ROOT / "deploy" / "docker" / "build.sh"
KEEP_RLIMITS = ROOT / "deploy" / "docker" / "podman-keep-rlimits.conf"


def engine_command() -> tuple[str, dict[str, str]]:
    """podman, else docker; ``run`` adds the resource-limit setting where podman needs it."""
    for program in ("podman", "docker"):
        if shutil.which(program):
            return program, dict(os.environ)
    sys.exit("no container engine (podman or docker)")


def run(engine: str, env: dict[str, str], *args: str) -> str:
    out = subprocess.run([engine, *args], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{engine} {' '.join(args)}: {out.stderr}")
    return out.stdout


def keep_rlimits_if_refused(engine: str, env: dict[str, str], image: str) -> None:
    """On hosts that refuse podman's resource limits, keep the host's (as build.sh does)."""
    probe = subprocess.run(
        [engine, "run", "--rm", "--entrypoint", "true", image],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    if probe.returncode != 0 and "error setting rlimit" in probe.stderr and engine == "podman":
        env["CONTAINERS_CONF"] = str(KEEP_RLIMITS)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def cold_start(
    engine: str, env: dict[str, str], image: str, options: list[str], args: list[str]
) -> float:
    port = free_port()
    name = f"tritonx-bench-{os.getpid()}-{time.monotonic_ns()}"
    health = ["--health-interval=disable"] if engine == "podman" else []
    started = time.monotonic()
    run(engine, env, "run", "-d", "--name", name, *health, f"--publish=127.0.0.1:{port}:8000",
        *options, image, *args)  # fmt: skip
    try:
        while not ready(port):
            if time.monotonic() - started > 600:
                raise RuntimeError(f"{image} not ready after 600 s")
            time.sleep(0.02)
        return time.monotonic() - started
    finally:
        subprocess.run([engine, "rm", "-f", "-v", "-t", "0", name], capture_output=True, env=env)


def add_sub_repository(root: Path) -> Path:
    """One ONNX add_sub (``run.py``'s), readable by the image's user."""
    from onnx import TensorProto

    from tritonx_backend_onnx.models import add_sub

    run_py.write_model(
        root, "add_sub", 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n',
        {"model.onnx": add_sub(TensorProto.INT32, ("batch", 16))},
    )  # fmt: skip
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", default=["onnx python"])
    parser.add_argument("--bytecode", nargs="+", default=["compiled"], choices=["compiled", "none"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-build", action="store_true", help="measure images already built")
    opts = parser.parse_args()
    engine, env = engine_command()
    with tempfile.TemporaryDirectory() as tmp:
        repo = add_sub_repository(Path(tmp) / "models")
        rows = []
        for variant in opts.variants:
            for bytecode in opts.bytecode:
                tag = f"tritonx-bench:{'-'.join(variant.split())}-{bytecode}"
                if not opts.skip_build:
                    subprocess.run(
                        [str(BUILD_SH), "--engine", engine, "--plugins", variant,
                         "--bytecode", bytecode, "--tag", tag],
                        check=True, env={**env, "PYTHON": sys.executable}, stdout=sys.stderr,
                    )  # fmt: skip
                keep_rlimits_if_refused(engine, env, tag)
                size = int(run(engine, env, "image", "inspect", "--format", "{{.Size}}", tag))
                times = {"add_sub": [], "examples": []}
                for _ in range(opts.runs):
                    times["add_sub"].append(
                        cold_start(engine, env, tag, [f"--volume={repo}:/models:ro"], [])
                    )
                    times["examples"].append(
                        cold_start(
                            engine, env, tag, [], ["--model-repository=/opt/tritonx/examples"]
                        )
                    )
                rows.append((variant, bytecode, size, times))
                print(f"{tag}: {size / 1e6:.0f} MB, {times}", file=sys.stderr)
    print(
        "| variant | byte-code | image size | cold start, add_sub (ONNX) | cold start, bundled examples (7 Python models) |"
    )
    print("|---|---|---|---|---|")
    for variant, bytecode, size, times in rows:
        print(
            f"| `{variant}` | {bytecode} | {size / 1e6:.0f} MB "
            f"| {statistics.median(times['add_sub']):.1f} s "
            f"| {statistics.median(times['examples']):.1f} s |"
        )


if __name__ == "__main__":
    main()
