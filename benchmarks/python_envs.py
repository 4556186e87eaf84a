"""The python-environments rows of ``run.py`` (``--rows python_envs``): how long the load API
takes (``POST /v2/repository/models/<model>/load``, ``--model-control-mode explicit``) to load a
Python model with one small requirement (``requests==2.32.3`` in its folder's
``requirements.txt``: the package and its 4 dependencies, ~0.5 MB of pure-Python wheels)

* with an empty environment cache and an empty uv cache (``UV_CACHE_DIR`` in the run's work
  folder): the first deployment, which downloads the package and builds the environment;
* after an unload, over the same caches: the environment is cached (the log says ``using the
  cached environment``), so the load starts the worker only (forked from the forkserver,
  the environment put first on its path);
* the same model without requirements (importing the server's own ``requests``), for
  reference;
* and the build alone (the log's ``environment built in X s``).

Each is the median over 3 servers, each with empty caches of its own.

The ratio is cached / cold. Needs uv (a dependency of the python backend) and PyPI: when the
installer cannot resolve the requirement, the rows are left out, saying why.

Alone: ``python benchmarks/python_envs.py``.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: the group name of these rows and their points' scenario
SCENARIO = "python_envs"
#: tritonx's ports for these rows
PORTS = (28960, 28961, 28962)
#: one line, a small pure-Python package and its 4 dependencies (~0.5 MB of wheels)
REQUIREMENT = "requests==2.32.3"
#: servers (each with empty caches) whose median is reported
REPEATS = 3
#: the log line of a finished build
BUILT = re.compile(r"environment built in ([0-9.]+) s")
MODEL = """import numpy as np
import requests
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, batch):
        out = np.array([requests.__version__.encode()], dtype=object)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("VERSION", out)]) for _ in batch]
"""
CONFIG = (
    'backend: "python"\n'
    'input [ { name: "IN", data_type: TYPE_STRING, dims: [ 1 ] } ]\n'
    'output [ { name: "VERSION", data_type: TYPE_STRING, dims: [ 1 ] } ]\n'
    "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
)


def unavailable(work: Path) -> str:
    """Why the rows cannot run here ("" when they can)."""
    try:
        import uv

        program = uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        return "uv is not installed (pip install uv)"
    done = subprocess.run(
        [program, "pip", "install", "--dry-run", "--target", str(work / "dry-run"),
         REQUIREMENT, "--python", sys.executable, "--color", "never"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        return f"PyPI cannot be reached: {done.stderr.strip().splitlines()[-1:]}"
    return ""


def _load_s(http_port: int, model: str, action: str = "load") -> float:
    """Seconds a load (or unload) API call takes."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/v2/repository/models/{model}/{action}",
        data=b"{}",
        method="POST",
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        response.read()
    return time.perf_counter() - started


def points(
    work: Path,
    log_dir: Path,
    *,
    point: Callable[..., Any],
    process: Callable[..., Any],
    tritonx_cmd: Callable[..., list[str]],
    write_model: Callable[..., None],
    repeats: int = REPEATS,
) -> list[Any]:
    """One point: ``extra`` = {"cold_s", "cached_s", "plain_s"}: the median load API seconds
    over ``repeats`` servers, each with empty caches of its own, and "build_s": the median
    build time the log says (``environment built in X s``)."""
    why = unavailable(work)
    if why:
        print(f"python environments rows left out: {why}", file=sys.stderr)
        return []
    result = point(SCENARIO, "tritonx", "-", f"python model + {REQUIREMENT}", 0)
    repo = work / "envs-models"
    write_model(repo, "pinned", CONFIG, {"model.py": MODEL})
    (repo / "pinned" / "requirements.txt").write_text(REQUIREMENT + "\n")
    write_model(repo, "plain", CONFIG, {"model.py": MODEL})
    times: dict[str, list[float]] = {"cold_s": [], "cached_s": [], "plain_s": [], "build_s": []}
    saved = os.environ.get("UV_CACHE_DIR")
    try:
        for run in range(repeats):
            # cold: no environment, and uv downloads the packages too
            os.environ["UV_CACHE_DIR"] = str(work / f"uv-cache-{run}")
            cache = work / f"envs-cache-{run}"
            cmd = tritonx_cmd(
                repo, PORTS, "--model-control-mode", "explicit", "--log-info", "true",
                "--backend-config", f"python,requirements-cache-dir={cache}",
            )  # fmt: skip
            log = log_dir / f"python-envs-{run}.log"
            with process(cmd, PORTS[0], log):
                port = PORTS[0]
                times["cold_s"].append(_load_s(port, "pinned"))
                _load_s(port, "pinned", "unload")
                times["cached_s"].append(_load_s(port, "pinned"))
                _load_s(port, "plain")  # (starts the forkserver)
                _load_s(port, "plain", "unload")
                times["plain_s"].append(_load_s(port, "plain"))
            built = BUILT.search(log.read_text(errors="replace"))
            times["build_s"].append(float(built.group(1)) if built else math.nan)
        result.extra = {key: round(statistics.median(v), 3) for key, v in times.items()}
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if saved is None:
            os.environ.pop("UV_CACHE_DIR", None)
        else:
            os.environ["UV_CACHE_DIR"] = saved
    return [result]


def table_row(p: Any) -> str:
    """The row of run.py's table."""
    if p.error:
        return (
            f"| {SCENARIO} | tritonx | - | {p.model} | - | error: {p.error[:60]} | - | - | - | | |"
        )
    cold, cached, plain, build = (
        p.extra.get(k, 0.0) for k in ("cold_s", "cached_s", "plain_s", "build_s")
    )
    ratio = f"{cached / cold:.2f}x" if cold and cached else "-"
    return (
        f"| {SCENARIO} | tritonx | - | {p.model} | - | - | - | - | - | load: cold {cold} s "
        f"(build {build} s), cached {cached} s, no requirements {plain} s | {ratio} cold |"
    )


def main(argv: list[str] | None = None) -> int:
    import run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tritonx-bench-envs-"))
    try:
        found = points(
            work,
            work,
            point=run.Point,
            process=run.process,
            tritonx_cmd=run.tritonx_cmd,
            write_model=run.write_model,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not found:
        return 0  # left out (said why): not a failure
    print(run.table(found))
    return 1 if any(p.error for p in found) else 0


if __name__ == "__main__":
    sys.exit(main())
