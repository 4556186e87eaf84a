"""tritonx benchmarks: one command, one table, ratios measured in the same run.

    python benchmarks/run.py            # the full table (~5 min on 2 cores)
    python benchmarks/run.py --smoke    # 1-second points: proves the harness works (CI)
    python benchmarks/run.py --rows backends   # only some groups of rows (--help lists them)
    python benchmarks/run.py --rows backends --backends fil,dali   # only some backends' rows

It generates the models (add_sub ONNX INT32 [16], also under the sequence batcher's direct
and oldest strategies; a ResNet-18-shaped CNN ONNX with random weights and a dynamic batch
axis; Python-backend identity and add_sub), starts
``tritonx serve`` on loopback, drives it with NVIDIA's C++ perf_analyzer (HTTP and gRPC,
binary tensors) and prints, beside it, the reference limits measured in the same run: a bare
aiohttp / grpc.aio endpoint returning canned responses (``bare_server.py``, the protocol limit
of a Python endpoint) and raw onnxruntime in-process at its best batch size (the compute
limit). Results also go to ``benchmarks/results/<time>.json``.

Every perf_analyzer row also has the server's CPU per request: the CPU time (user + system)
of the server process and all its descendants over the whole perf_analyzer run, divided by
the requests the server completed in it (its ``/v2/models/<model>/stats`` success count,
which the bare endpoint keeps too). Unlike infer/s, it hardly moves when other processes
share the cores. ``--rows add_sub`` runs only the add_sub rows and their bare endpoint.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import backends
import cache
import cloud_repo
import many_models
import minilm
import openai_frontend
import python_envs
import shm

ROOT = Path(__file__).resolve().parents[1]
PERF_ANALYZER = ROOT / "tools" / "perf_analyzer" / "run.sh"
PORTS = {
    "tritonx": (28900, 28901, 28902),
    "bare": (28910, 28911, 0),
    "memory": (28920, 28921, 28922),
}

IO_INT32 = """input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 16 ] }, { name: "INPUT1", data_type: TYPE_INT32, dims: [ 16 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 16 ] }, { name: "OUTPUT1", data_type: TYPE_INT32, dims: [ 16 ] } ]
"""
ONE = "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
ORT_THREADS = (
    'parameters { key: "intra_op_thread_count", value: { string_value: "2" } }\n'
    'parameters { key: "inter_op_thread_count", value: { string_value: "1" } }\n'
)
SEQUENCE_CONTROLS = (
    'control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START '
    'int32_false_true: [ 0, 1 ] } ] }, { name: "READY" control [ { kind: '
    "CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] } ]"
)
#: sequence-batcher strategies benchmarked (16 slots / candidate sequences on one instance)
SEQUENCE_STRATEGIES = {
    "direct": "direct { }",
    "oldest": "oldest { max_candidate_sequences: 16 }",
}
PY_IDENTITY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outs = [pb_utils.Tensor(n.replace("INPUT", "OUTPUT"), pb_utils.get_input_tensor_by_name(request, n).as_numpy())
                    for n in ("INPUT0", "INPUT1")]
            responses.append(pb_utils.InferenceResponse(output_tensors=outs))
        return responses
"""
PY_ADD_SUB = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""


@dataclass
class Point:
    """One measured row."""

    scenario: str
    target: str
    protocol: str
    model: str
    concurrency: int
    infer_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    error: str = ""
    #: server CPU (process + descendants, user + system) per completed request, microseconds
    cpu_us_per_req: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- models


def write_model(repo: Path, name: str, config: str, files: dict[str, bytes | str]) -> None:
    model = repo / name
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "config.pbtxt").write_text(f'name: "{name}"\n' + config)
    for filename, content in files.items():
        path = model / "1" / filename
        if isinstance(content, str):
            path.write_text(content)
        else:
            path.write_bytes(content)


def build_repository(repo: Path, with_python: bool) -> None:
    from onnx import TensorProto

    from tritonx_backend_onnx.models import add_sub, resnet18

    add_sub_onnx = add_sub(TensorProto.INT32, ("batch", 16))
    cnn = resnet18()
    batching = "max_batch_size: 16\n"
    write_model(
        repo,
        "add_sub",
        f'platform: "onnxruntime_onnx"\n{batching}{IO_INT32}dynamic_batching {{ }}\n{ONE}',
        {"model.onnx": add_sub_onnx},
    )
    write_model(
        repo,
        "add_sub_nobatch",
        f'platform: "onnxruntime_onnx"\n{batching}{IO_INT32}{ONE}',
        {"model.onnx": add_sub_onnx},
    )
    # the same graph under the sequence batcher, with START/READY control inputs it ignores
    add_sub_controls = add_sub(TensorProto.INT32, ("batch", 16), controls=("START", "READY"))
    for strategy, block in SEQUENCE_STRATEGIES.items():
        write_model(
            repo,
            f"add_sub_seq_{strategy}",
            f'platform: "onnxruntime_onnx"\n{batching}{IO_INT32}'
            f"sequence_batching {{ {block} {SEQUENCE_CONTROLS} }}\n{ONE}",
            {"model.onnx": add_sub_controls},
        )
    cnn_io = (
        'input [ { name: "input", data_type: TYPE_FP32, dims: [ 3, 224, 224 ] } ]\n'
        'output [ { name: "logits", data_type: TYPE_FP32, dims: [ 1000 ] } ]\n'
    )
    write_model(
        repo,
        "cnn",
        f'platform: "onnxruntime_onnx"\n{batching}{cnn_io}'
        f"dynamic_batching {{ max_queue_delay_microseconds: 2000 }}\n{ONE}{ORT_THREADS}",
        {"model.onnx": cnn},
    )
    write_model(
        repo,
        "cnn_nobatch",
        f'platform: "onnxruntime_onnx"\n{batching}{cnn_io}{ONE}{ORT_THREADS}',
        {"model.onnx": cnn},
    )
    if with_python:
        write_model(
            repo,
            "py_identity",
            f'backend: "python"\n{batching}{IO_INT32}{ONE}',
            {"model.py": PY_IDENTITY},
        )
        write_model(
            repo,
            "py_add_sub",
            f'backend: "python"\n{batching}{IO_INT32}{ONE}',
            {"model.py": PY_ADD_SUB},
        )


# ----------------------------------------------------------------------------- processes


def wait_ready(http_port: int, timeout: float, proc: subprocess.Popen[bytes]) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=1
            ) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("server did not become ready")


#: the protocol name of rows driven over gRPC's bidirectional ModelStreamInfer
STREAM = "grpc-stream"
#: perf_analyzer's error when its windows' throughputs never agreed within the stability bound
UNSTABLE = "Failed to obtain stable measurement"

#: perf_analyzer's stability bound (%): 999 in --smoke mode, whose 300 ms windows on a loaded
#: machine need not agree (a smoke run checks that every row runs, not its numbers)
_STABILITY = ["100"]

#: the server the next perf_analyzer run measures: (process, its HTTP port), set by process()
_SERVER: list[tuple[subprocess.Popen[bytes], int]] = []


@contextmanager
def process(
    cmd: list[str], http_port: int, log: Path, timeout: float = 180
) -> Iterator[tuple[subprocess.Popen[bytes], float]]:
    with log.open("wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_ready(http_port, timeout, proc)
            _SERVER.append((proc, http_port))
            yield proc, time.monotonic() - started
        finally:
            if _SERVER and _SERVER[-1][0] is proc:
                _SERVER.pop()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)


def tritonx_cmd(repo: Path, ports: tuple[int, int, int], *extra: str) -> list[str]:
    http, grpc, metrics = ports
    return [
        sys.executable,
        "-m",
        "tritonx",
        "serve",
        "--model-repository",
        str(repo),
        "--http-address",
        "127.0.0.1",
        "--grpc-address",
        "127.0.0.1",
        "--http-port",
        str(http),
        "--grpc-port",
        str(grpc),
        "--metrics-port",
        str(metrics),
        "--log-info",
        "false",
        *extra,
    ]


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants."""
    out = subprocess.run(
        ["ps", "-o", "rss=", "--ppid", str(pid), "-p", str(pid)], capture_output=True, text=True
    )
    children = subprocess.run(
        ["pgrep", "-P", str(pid)], capture_output=True, text=True
    ).stdout.split()
    total = sum(int(x) for x in out.stdout.split()) * 1024
    for child in children:
        grand = subprocess.run(
            ["pgrep", "-P", child], capture_output=True, text=True
        ).stdout.split()
        for g in grand:
            total += rss_bytes(int(g))
    return total


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, ()))
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its descendants (live ones, and the finished
    children they waited for), in seconds."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in descendants(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the command: state ppid ... utime(12) stime(13) cutime(14) cstime(15)
        total += sum(int(x) for x in fields[11:15])
    return total / ticks


def served_requests(http_port: int, model: str) -> int:
    """Requests ``model`` completed successfully (its stats' success count, all versions)."""
    with urllib.request.urlopen(
        f"http://127.0.0.1:{http_port}/v2/models/{model}/stats", timeout=10
    ) as r:
        doc = json.load(r)
    return sum(int(m["inference_stats"]["success"]["count"]) for m in doc["model_stats"])


# ----------------------------------------------------------------------------- measurements


def perf_analyzer(
    point: Point, url: str, window_ms: int, out_dir: Path, extra: Sequence[str] = ()
) -> Point:
    csv_path = out_dir / f"{point.target}-{point.model}-{point.protocol}-{point.concurrency}.csv"
    cmd = [
        str(PERF_ANALYZER),
        "-m",
        point.model,
        "-u",
        url,
        "-i",
        "grpc" if point.protocol == STREAM else point.protocol,
        *(["--streaming"] if point.protocol == STREAM else []),
        "--concurrency-range",
        str(point.concurrency),
        "-p",
        str(window_ms),
        "--stability-percentage",
        _STABILITY[0],
        "--max-trials",
        "3",
        "-f",
        str(csv_path),
        *extra,
    ]
    server = _SERVER[-1] if _SERVER else None
    before = (
        (cpu_seconds(server[0].pid), served_requests(server[1], point.model)) if server else None
    )
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    # the CPU per request stands even when perf_analyzer found no stable throughput
    if server is not None and before is not None and server[0].poll() is None:
        cpu = cpu_seconds(server[0].pid) - before[0]
        requests = served_requests(server[1], point.model) - before[1]
        if requests > 0:
            point.cpu_us_per_req = round(cpu / requests * 1e6, 1)
    if done.returncode != 0 or not csv_path.exists():
        point.error = (
            (done.stdout + done.stderr).strip().splitlines()[-1:][0]
            if (done.stdout + done.stderr).strip()
            else "failed"
        )
        return point
    with csv_path.open() as f:
        row = next(csv.DictReader(f))
    point.infer_per_s = float(row["Inferences/Second"])
    point.p50_ms = float(row["p50 latency"]) / 1000
    point.p99_ms = float(row["p99 latency"]) / 1000
    return point


def raw_onnxruntime(cnn: bytes, seconds: float) -> list[Point]:
    """The compute limit: onnxruntime in-process, intra-op threads 2, per batch size."""
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 2, 1
    session = ort.InferenceSession(cnn, opts, providers=["CPUExecutionProvider"])
    points = []
    for batch in (1, 4, 8, 16):
        x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
        session.run(None, {"input": x})
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            session.run(None, {"input": x})
            n += 1
        elapsed = time.perf_counter() - start
        points.append(
            Point(
                "cnn",
                "onnxruntime",
                "in-process",
                f"cnn batch {batch}",
                batch,
                infer_per_s=n * batch / elapsed,
                p50_ms=elapsed / n * 1000,
            )
        )
    return points


def memory_point(work: Path, count: int, log_dir: Path) -> Point:
    from onnx import TensorProto

    from tritonx_backend_onnx.models import add_sub

    repo = work / "many"
    onnx_bytes = add_sub(TensorProto.INT32, ("batch", 16))
    for i in range(count):
        write_model(
            repo,
            f"m{i:03d}",
            f'platform: "onnxruntime_onnx"\nmax_batch_size: 16\n{IO_INT32}{ONE}',
            {"model.onnx": onnx_bytes},
        )
    point = Point("memory", "tritonx", "-", f"{count} tiny models", 0)
    with process(
        tritonx_cmd(repo, PORTS["memory"]), PORTS["memory"][0], log_dir / "memory.log"
    ) as (proc, ready_s):
        time.sleep(0.5)
        point.extra = {
            "load_s": round(ready_s, 2),
            "rss_mib": round(rss_bytes(proc.pid) / 2**20, 1),
        }
    return point


# ----------------------------------------------------------------------------- table


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def table(points: list[Point]) -> str:
    by = {(p.target, p.protocol, p.model, p.concurrency): p for p in points}
    rows = [
        "| scenario | server | protocol | model | conc | infer/s | p50 ms | p99 ms "
        "| server CPU us/req | ratio | vs |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    best_ort = max((p.infer_per_s for p in points if p.target == "onnxruntime"), default=0.0)
    for p in points:
        r, vs = "", ""
        if p.target == "tritonx" and p.model == "add_sub":
            ref = by.get(("bare", p.protocol, "add_sub", p.concurrency))
            r, vs = (ratio(p.infer_per_s, ref.infer_per_s), "bare endpoint") if ref else ("", "")
        elif p.target == "tritonx-web" and p.model == "add_sub":
            ref = by.get(("bare", p.protocol, "add_sub", p.concurrency))
            fast = by.get(("tritonx", p.protocol, "add_sub", p.concurrency))
            r = ratio(p.infer_per_s, ref.infer_per_s) if ref else ""
            vs = "bare endpoint; --http-fast-infer false"
            if fast and fast.cpu_us_per_req and p.cpu_us_per_req:
                vs += (
                    f" (the fast path: {ratio(fast.cpu_us_per_req, p.cpu_us_per_req)} its CPU/req)"
                )
        elif p.scenario == "minilm":
            r, vs = minilm.ratio_row(p, by)
        elif p.scenario == "cache":
            r, vs = cache.ratio_row(p, by)
        elif p.scenario == "shm":
            r, vs = shm.ratio_row(p, by)
        elif p.target == "tritonx" and p.model == "cnn":
            r, vs = ratio(p.infer_per_s, best_ort), "raw onnxruntime, best batch"
        elif p.target == "tritonx" and p.model.startswith("add_sub_seq_"):
            base = by.get(("tritonx", p.protocol, "add_sub", p.concurrency))
            if base and base.infer_per_s and p.infer_per_s:
                extra_us = 1e6 / p.infer_per_s - 1e6 / base.infer_per_s
                r = ratio(p.infer_per_s, base.infer_per_s)
                vs = f"add_sub without sequence batching ({extra_us:+.0f} us/request)"
        elif p.target == "tritonx" and p.model.endswith("_nobatch"):
            base = by.get(("tritonx", p.protocol, p.model.removesuffix("_nobatch"), p.concurrency))
            r, vs = (
                (ratio(base.infer_per_s, p.infer_per_s), "batching on / off") if base else ("", "")
            )
        if p.scenario == "backends":
            rows.append(backends.table_row(p, by))
            continue
        if p.scenario == "cloud":
            rows.append(cloud_repo.table_row(p))
            continue
        if p.scenario == many_models.SCENARIO:
            rows.append(many_models.table_row(p, by))
            continue
        if p.scenario == python_envs.SCENARIO:
            rows.append(python_envs.table_row(p))
            continue
        if p.scenario == openai_frontend.SCENARIO:
            rows.append(openai_frontend.table_row(p, by))
            continue
        if p.scenario == "memory":
            rows.append(
                f"| memory | tritonx | - | {p.model} | - | - | - | - | - | load {p.extra.get('load_s')} s, "
                f"RSS {p.extra.get('rss_mib')} MiB | |"
            )
            continue
        value = f"{p.infer_per_s:.0f}" if not p.error else f"error: {p.error[:60]}"
        cpu = f"{p.cpu_us_per_req:.0f}" if p.cpu_us_per_req else "-"
        rows.append(
            f"| {p.scenario} | {p.target} | {p.protocol} | {p.model} | {p.concurrency} | {value} | "
            f"{p.p50_ms:.2f} | {p.p99_ms:.2f} | {cpu} | {r} | {vs} |"
        )
    return "\n".join(rows)


# ----------------------------------------------------------------------------- main

#: the groups of rows ``--rows`` selects (``add_sub``: tritonx add_sub and the bare endpoint)
ROWS = (
    "add_sub",
    "webpath",
    "grpcaio",
    "cnn",
    "py",
    "sequence",
    "batching",
    "minilm",
    "cache",
    "shm",
    "onnxruntime",
    "memory",
    "cloud",
    "backends",
    "many_models",
    "openai",
    "python_envs",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="1-second points, a few rows (CI)")
    parser.add_argument(
        "--window-ms", type=int, default=2000, help="perf_analyzer measurement window"
    )
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--memory-models", type=int, default=100)
    parser.add_argument(
        "--cloud-models", type=int, default=100, help="models of the S3-vs-local-disk row"
    )
    parser.add_argument(
        "--rows",
        default=",".join(ROWS),
        help="comma-separated groups of rows to run (default: all): " + ", ".join(ROWS),
    )
    parser.add_argument(
        "--backends",
        default=",".join(backends.BACKENDS),
        help="the backends of the `backends` rows (default: all): " + ", ".join(backends.BACKENDS),
    )
    args = parser.parse_args(argv)
    rows = set(args.rows.split(","))
    chosen = args.backends.split(",")
    if set(chosen) - set(backends.BACKENDS):
        parser.error(f"unknown --backends {sorted(set(chosen) - set(backends.BACKENDS))}")
    if rows - set(ROWS):
        parser.error(f"unknown --rows {sorted(rows - set(ROWS))}: choose from {', '.join(ROWS)}")
    if not (ROOT / "tools" / "perf_analyzer" / "bin" / "perf_analyzer").exists():
        print(
            f"perf_analyzer is not set up: run `bash {ROOT / 'tools/perf_analyzer/setup.sh'}`",
            file=sys.stderr,
        )
        return 2
    try:
        import tritonx_backend_python  # noqa: F401

        with_python = True
    except ImportError:
        with_python = False
    concurrencies = [1] if args.smoke else [int(c) for c in args.concurrency.split(",")]
    if args.smoke:
        _STABILITY[0] = "999"
    window = 300 if args.smoke else args.window_ms
    stamp = time.strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tritonx-bench-"))
    log_dir = args.out / f"{stamp}-logs"
    log_dir.mkdir(exist_ok=True)
    points: list[Point] = []
    try:
        repo = work / "repo"
        build_repository(repo, with_python)
        protocols = ("http", "grpc")
        # reference: the bare endpoint
        http, grpc_port, _ = PORTS["bare"]
        bare = [
            sys.executable,
            str(ROOT / "benchmarks" / "bare_server.py"),
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc_port),
        ]
        with process(bare, http, log_dir / "bare.log"):
            # gRPC streaming (ModelStreamInfer) too: the recommended fast path
            for proto in (*protocols, STREAM) if "add_sub" in rows else ():
                for c in concurrencies:
                    url = f"127.0.0.1:{http if proto == 'http' else grpc_port}"
                    points.append(
                        perf_analyzer(
                            Point("add_sub", "bare", proto, "add_sub", c), url, window, log_dir
                        )
                    )
        # tritonx
        ports = PORTS["tritonx"]
        with process(tritonx_cmd(repo, ports), ports[0], log_dir / "tritonx.log"):
            models = [m for m in ("add_sub", "cnn") if m in rows]
            if with_python and "py" in rows:
                models += ["py_identity", "py_add_sub"]
            for model in models:
                for proto in (*protocols, STREAM) if model == "add_sub" else protocols:
                    for c in concurrencies:
                        if args.smoke and model == "cnn" and proto == "http":
                            continue
                        url = f"127.0.0.1:{ports[0] if proto == 'http' else ports[1]}"
                        points.append(
                            perf_analyzer(
                                Point(
                                    model.split("_")[0] if model.startswith("py") else model,
                                    "tritonx",
                                    proto,
                                    model,
                                    c,
                                ),
                                url,
                                window,
                                log_dir,
                            )
                        )
            top = max(concurrencies)
            # 16 concurrent sequences (each perf_analyzer context drives its own sequence)
            sequences = 1 if args.smoke else 16
            for proto in (protocols if not args.smoke else ("grpc",)) if "sequence" in rows else ():
                url = f"127.0.0.1:{ports[0] if proto == 'http' else ports[1]}"
                if sequences not in concurrencies:
                    points.append(
                        perf_analyzer(
                            Point("add_sub", "tritonx", proto, "add_sub", sequences),
                            url,
                            window,
                            log_dir,
                        )
                    )
                for strategy in SEQUENCE_STRATEGIES:
                    model = f"add_sub_seq_{strategy}"
                    points.append(
                        perf_analyzer(
                            Point("sequence", "tritonx", proto, model, sequences),
                            url,
                            window,
                            log_dir,
                        )
                    )
            for model in ("add_sub_nobatch", "cnn_nobatch") if "batching" in rows else ():
                for proto in protocols if not args.smoke else ("grpc",):
                    url = f"127.0.0.1:{ports[0] if proto == 'http' else ports[1]}"
                    points.append(
                        perf_analyzer(
                            Point("batching", "tritonx", proto, model, top), url, window, log_dir
                        )
                    )
        # add_sub over HTTP through aiohttp's web layer, without the /infer fast path
        if "webpath" in rows:
            web_cmd = tritonx_cmd(repo, ports, "--http-fast-infer", "false")
            with process(web_cmd, ports[0], log_dir / "tritonx-web.log"):
                for c in concurrencies:
                    points.append(
                        perf_analyzer(
                            Point("add_sub", "tritonx-web", "http", "add_sub", c),
                            f"127.0.0.1:{ports[0]}",
                            window,
                            log_dir,
                        )
                    )
        # gRPC through grpcio's grpc.aio server (--grpc-engine aio) beside the default
        # event-loop engine's rows above
        if "grpcaio" in rows:
            aio_cmd = tritonx_cmd(repo, ports, "--grpc-engine", "aio")
            with process(aio_cmd, ports[0], log_dir / "tritonx-aio.log"):
                aio_models = ["add_sub"] + (["py_identity"] if with_python and "py" in rows else [])
                for model in aio_models:
                    for c in concurrencies:
                        points.append(
                            perf_analyzer(
                                Point(
                                    "py" if model == "py_identity" else model,
                                    "tritonx-aio",
                                    "grpc",
                                    model,
                                    c,
                                ),
                                f"127.0.0.1:{ports[1]}",
                                window,
                                log_dir,
                            )
                        )
        # the MiniLM ensemble (tokenize -> encoder -> pool) vs its steps in-process
        points.extend(
            []
            if "minilm" not in rows
            else minilm.points(
                work,
                log_dir,
                max(window, 1000),  # ~10 ms requests: short windows are not stable
                [1] if args.smoke else [1, 16],
                ("grpc",) if args.smoke else protocols,
                point=Point,
                measure=perf_analyzer,
                process=process,
                tritonx_cmd=tritonx_cmd,
                seconds=0.5 if args.smoke else 3.0,
            )
        )
        # the response cache: a model hit with the same input, with and without the cache
        points.extend(
            []
            if "cache" not in rows
            else cache.points(
                work,
                log_dir,
                window,
                [1] if args.smoke else [1, max(concurrencies)],
                ("grpc",) if args.smoke else protocols,
                smoke=args.smoke,
                point=Point,
                measure=perf_analyzer,
                process=process,
                tritonx_cmd=tritonx_cmd,
                write_model=write_model,
            )
        )
        # system shared memory: a 4 MB identity with tensors on the wire vs in shared memory
        points.extend(
            []
            if "shm" not in rows
            else shm.points(
                work,
                log_dir,
                window,
                [1] if args.smoke else [1, 4],
                ("grpc",) if args.smoke else protocols,
                point=Point,
                measure=perf_analyzer,
                process=process,
                tritonx_cmd=tritonx_cmd,
                write_model=write_model,
            )
        )
        from tritonx_backend_onnx.models import resnet18

        if "onnxruntime" in rows:
            points.extend(raw_onnxruntime(resnet18(), 0.5 if args.smoke else 3.0))
        if "memory" in rows:
            points.append(memory_point(work, 5 if args.smoke else args.memory_models, log_dir))
        # time to ready: N tiny models from an S3 store (moto) vs local disk
        points.extend(
            []
            if "cloud" not in rows
            else cloud_repo.points(
                work,
                log_dir,
                5 if args.smoke else args.cloud_models,
                point=Point,
                process=process,
                tritonx_cmd=tritonx_cmd,
                write_model=write_model,
            )
        )
        # one model on each framework backend vs the framework in-process, load and memory
        points.extend(
            []
            if "backends" not in rows
            else backends.points(
                work,
                log_dir,
                # requests of 20-1000 ms (a batch of 16 at concurrency 16): long windows, so
                # that a window holds enough requests to be stable on a busy machine
                2000 if args.smoke else max(window, 5000),
                [1] if args.smoke else [1, 16],
                ("http",),
                smoke=args.smoke,
                point=Point,
                measure=perf_analyzer,
                process=process,
                tritonx_cmd=tritonx_cmd,
                rss_bytes=rss_bytes,
                seconds=0.3 if args.smoke else 3.0,
                only=chosen,
            )
        )
        # models loaded on their first request, with and without --max-loaded-models
        points.extend(
            []
            if "many_models" not in rows
            else many_models.points(
                work,
                log_dir,
                smoke=args.smoke,
                point=Point,
                process=process,
                tritonx_cmd=tritonx_cmd,
                write_model=write_model,
                cpu_seconds=cpu_seconds,
            )
        )
        # a python model's own requirements: cold build vs cached environment, time to ready
        points.extend(
            []
            if "python_envs" not in rows
            else python_envs.points(
                work,
                log_dir,
                point=Point,
                process=process,
                tritonx_cmd=tritonx_cmd,
                write_model=write_model,
            )
        )
        # the OpenAI frontend plugin: streaming chat (TTFT, ITL), chat, embeddings vs in-process
        points.extend(
            []
            if "openai" not in rows
            else openai_frontend.points(
                work,
                log_dir,
                smoke=args.smoke,
                point=Point,
                process=process,
                tritonx_cmd=tritonx_cmd,
                cpu_seconds=cpu_seconds,
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = table(points)
    print(text)
    result = {
        "date": stamp,
        "machine": f"{os.cpu_count()} cores",
        "command": " ".join([sys.executable, *sys.argv]),
        "points": [asdict(p) for p in points],
    }
    (args.out / f"{stamp}.json").write_text(json.dumps(result, indent=2))
    # the smoke run checks that the harness works, not the numbers: a point perf_analyzer
    # could not measure stably in its 1-second windows (a busy machine) is no failure there
    failed = [p for p in points if p.error and not (args.smoke and UNSTABLE in p.error)]
    for p in failed:
        print(
            f"FAILED {p.target} {p.protocol} {p.model} c={p.concurrency}: {p.error}",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
