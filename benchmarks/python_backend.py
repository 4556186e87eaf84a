"""The Python backend's transport, measured: a Python identity model served by ``tritonx serve``
(its instance in a worker process, the default) driven by perf_analyzer over HTTP and gRPC at
concurrency 1, 4 and 16, and a 4 MB FP32 identity over the Python backend beside the ONNX
identity (HTTP and gRPC, concurrency 1 and 4), for one or more source trees (``--tree label=path``: each server runs with
``PYTHONPATH`` pointing at that tree's ``core/src`` and plugin sources), the trees alternating
(A B, B A, A B ...) so that the load of a shared machine falls on each alike. Figures are the
median over the rounds.

Each row: requests/s and p50 (perf_analyzer), and the server's CPU time per request (user +
system time of the server process and all its descendants, the workers included, over the
point, divided by the requests the model's statistics counted in that time).

    python benchmarks/python_backend.py --tree before=/path/to/old/checkout --tree after=.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # (benchmarks/run.py: perf_analyzer, process, write_model, ...)

PORTS = (28960, 28961, 28962)
ELEMENTS = 1 << 20  # FP32: 4 MiB per tensor
PY_IDENTITY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""
ONE = "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
SRC = (
    "core/src",
    "plugins/backend_onnx/src",
    "plugins/backend_python/src",
)


def build(repo: Path) -> None:
    """py_identity (FP32 [16]), py_identity_4mb and onnx_identity_4mb (FP32 [1048576])."""
    from onnx import TensorProto

    from tritonx_backend_onnx.models import identity

    def io(n: int) -> str:
        return (
            f'input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ {n} ] }} ]\n'
            f'output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ {n} ] }} ]\n'
        )

    python = 'backend: "python"\nmax_batch_size: 0\n'
    run.write_model(repo, "py_identity", python + io(16) + ONE, {"model.py": PY_IDENTITY})
    run.write_model(repo, "py_identity_4mb", python + io(ELEMENTS) + ONE, {"model.py": PY_IDENTITY})
    run.write_model(
        repo,
        "onnx_identity_4mb",
        'platform: "onnxruntime_onnx"\nmax_batch_size: 0\n' + io(ELEMENTS) + ONE,
        {"model.onnx": identity(TensorProto.FLOAT, [ELEMENTS])},
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its descendants (live ones)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{p}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return total


def successes(model: str) -> int:
    url = f"http://127.0.0.1:{PORTS[0]}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=5) as r:
        stats = json.loads(r.read())
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


def measure(
    pid: int, label: str, proto: str, model: str, c: int, window_ms: int, out: Path
) -> run.Point:
    url = f"127.0.0.1:{PORTS[0] if proto == 'http' else PORTS[1]}"
    before_cpu, before_n = cpu_seconds(pid), successes(model)
    point = run.perf_analyzer(
        run.Point("python_backend", label, proto, model, c), url, window_ms, out
    )
    cpu, n = cpu_seconds(pid) - before_cpu, successes(model) - before_n
    if n:
        point.extra["cpu_us_per_req"] = cpu / n * 1e6
    return point


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="label=path (repeatable)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--window-ms", type=int, default=1500)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--big-concurrency", default="1,4")
    parser.add_argument("--big-protocols", default="http,grpc", help="protocols of the 4 MB rows")
    parser.add_argument("--perf-analyzer", default=str(run.PERF_ANALYZER))
    args = parser.parse_args()
    run.PERF_ANALYZER = Path(args.perf_analyzer)
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("this", str(run.ROOT))]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    big = [int(c) for c in args.big_concurrency.split(",")]
    big_protocols = args.big_protocols.split(",")
    work = Path(tempfile.mkdtemp(prefix="tritonx-pybench-"))
    repo = work / "repo"
    build(repo)
    rows: dict[tuple[str, str, str, int], list[run.Point]] = defaultdict(list)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    for r in range(args.rounds):
        # A B, B A, A B ...: a load that rises or falls during the run falls on each alike
        for label, path in trees if r % 2 == 0 else trees[::-1]:
            env_path = os.pathsep.join(str(Path(path).resolve() / s) for s in SRC)
            os.environ["PYTHONPATH"] = env_path
            os.environ["TRITONX_PLUGINS"] = "backend_onnx,backend_python"  # only these
            cmd = run.tritonx_cmd(repo, PORTS)
            with run.process(cmd, PORTS[0], work / f"{label}-{r}.log") as (proc, _):
                for proto in ("http", "grpc"):
                    for c in concurrencies:
                        p = measure(proc.pid, label, proto, "py_identity", c, args.window_ms, work)
                        rows[(label, proto, "py_identity", c)].append(p)
                for proto in big_protocols:
                    for model in ("py_identity_4mb", "onnx_identity_4mb"):
                        for c in big:
                            p = measure(proc.pid, label, proto, model, c, args.window_ms, work)
                            rows[(label, proto, model, c)].append(p)
            print(f"round {r + 1} {label} done, load average {os.getloadavg()}", flush=True)
    print(f"\nload average at end: {os.getloadavg()}")
    print("| tree | protocol | model | conc | infer/s | p50 ms | server CPU µs/req |")
    print("|---|---|---|---:|---:|---:|---:|")
    best: dict[tuple[str, str, str, int], float] = {}
    for key, points in sorted(
        rows.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][3], kv[0][0])
    ):
        ok = [p for p in points if not p.error]
        if not ok:
            print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | error: {points[0].error} | | |")
            continue
        rate = statistics.median(p.infer_per_s for p in ok)
        best[key] = rate
        p50 = statistics.median(p.p50_ms for p in ok)
        cpu = [p.extra["cpu_us_per_req"] for p in ok if "cpu_us_per_req" in p.extra]
        cpu_text = f"{statistics.median(cpu):.0f}" if cpu else ""
        print(
            f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {rate:.0f} | {p50:.2f} | {cpu_text} |"
        )
    labels = [t[0] for t in trees]
    if len(labels) >= 2:
        first, last = labels[0], labels[-1]
        print(f"\nratios {last} / {first}:")
        for (label, proto, model, c), rate in sorted(best.items()):
            other = best.get((first, proto, model, c))
            if label == last and other:
                print(f"  {proto} {model} c{c}: {rate / other:.2f}x")
    print("\n4 MB: Python identity / ONNX identity:")
    for label in labels:
        for proto in big_protocols:
            for c in big:
                py, onnx = (
                    best.get((label, proto, "py_identity_4mb", c)),
                    best.get((label, proto, "onnx_identity_4mb", c)),
                )
                if py and onnx:
                    print(f"  {label} {proto} c{c}: {py / onnx:.2f}x")
    time.sleep(0)


if __name__ == "__main__":
    main()
