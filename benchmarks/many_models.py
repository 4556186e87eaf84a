"""The many-models rows of ``run.py``: models loaded on their first request
(``--model-control-mode=explicit --model-load-on-demand=true``), with and without a budget on
the loaded models (``--max-loaded-models``), in the same run.

Models: ``m00`` ... ``m39``, each a tiny ONNX graph ``OUTPUT0 = INPUT0 + i`` (INT32 [16],
``i`` the model's number, so every model answers differently and every answer is checked),
one CPU instance, onnxruntime intra-op and inter-op threads 1. Two servers run side by side
on the same repository, nothing loaded at start:

* ``no budget``: ``--model-load-on-demand=true`` (a model stays loaded after its first load);
* ``budget``: the same with ``--max-loaded-models 8`` (the least recently used idle model is
  unloaded to make room, however recently it loaded: ``--model-min-residency-secs 0``; the
  minimum's own rows are in ``many_models_refusals.py``).

Rows, all over HTTP with ``tritonclient``:

* **first request**: on each server, after one unmeasured load (onnxruntime's first session),
  the first request to each of 8 unloaded models (it waits for the load; on the budgeted server
  the 8 slots are full, so it waits for an eviction too) and then 5 more requests to it; the
  median first-request latency against the median latency of the requests to loaded models.
* **throughput**: 8 concurrent clients (``tritonclient.http.aio``) each sending one request
  at a time to a model drawn from a Zipf distribution (``P(m_i) ~ 1/(i+1)``, s = 1, 40 models:
  the 8 most popular take 64% of the requests), the same seeded sequence of models for both
  servers; after one request to every model in turn and 1 s of the workload (both unmeasured),
  four 6 s windows in the order no budget, budget, budget, no budget, summed. The budget row
  shows its hit ratio ``1 - on-demand loads / requests`` (from ``/metrics``:
  ``tritonx_model_on_demand_loads_total``; requests counted by the client: a model's
  ``nv_inference_request_*`` series go when it is unloaded), the share of requests that found
  their model loaded (``1 - tritonx_model_load_waits_total / requests``: requests that joined
  a load another one started waited too), the evictions, the mean wait of a request for its
  model's load, and the most models it held loaded (sampled every 0.1 s).

Alone: ``python benchmarks/many_models.py [--smoke] [--models 40 --budget 8 ...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: the two servers: no budget, --max-loaded-models
PORTS = {"free": (28970, 28971, 28972), "budget": (28980, 28981, 28982)}
SCENARIO = "many_models"
IO = (
    'input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 16 ] } ]\n'
    'output [ { name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 16 ] } ]\n'
)
CONFIG = (
    f'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n{IO}'
    "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
    'parameters { key: "intra_op_thread_count", value: { string_value: "1" } }\n'
    'parameters { key: "inter_op_thread_count", value: { string_value: "1" } }\n'
)
ON_DEMAND = ("--model-control-mode", "explicit", "--model-load-on-demand", "true")


@dataclass
class Settings:
    """The group's sizes (``smoke``: a few models, 1-second windows)."""

    models: int = 40
    budget: int = 8
    concurrency: int = 8
    #: models whose first request is timed, and the requests to each once loaded
    first: int = 8
    loaded_requests: int = 5
    #: the measured windows, alternating the servers (ABBA), and the unmeasured warm-up
    window_s: float = 6.0
    windows: tuple[str, ...] = ("free", "budget", "budget", "free")
    warmup_s: float = 1.0
    zipf_s: float = 1.0
    seed: int = 0

    @classmethod
    def smoke(cls) -> Settings:
        return cls(6, 2, 2, 2, 2, 1.0, ("free", "budget"), 0.3)


def name(i: int) -> str:
    return f"m{i:02d}"


def build(work: Path, count: int, write_model: Callable[..., None]) -> Path:
    """``count`` models ``m<i>``: ``OUTPUT0 = INPUT0 + i``."""
    from onnx import TensorProto, helper, numpy_helper

    from tritonx_backend_onnx.models import make_model

    repo = work / "many-models-repo"
    for i in range(count):
        onnx = make_model(
            [helper.make_node("Add", ["INPUT0", "C"], ["OUTPUT0"])],
            [("INPUT0", TensorProto.INT32, ["batch", 16])],
            [("OUTPUT0", TensorProto.INT32, ["batch", 16])],
            [numpy_helper.from_array(np.full((16,), i, np.int32), "C")],
        ).SerializeToString()
        write_model(repo, name(i), CONFIG, {"model.onnx": onnx})
    return repo


# ----------------------------------------------------------------------------- metrics


def scrape(metrics_port: int) -> dict[str, float]:
    """Every series of ``/metrics`` that starts with ``tritonx_``, summed over its labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("tritonx_"):
            continue
        series, _, value = line.rpartition(" ")
        family = series.split("{", 1)[0]
        totals[family] = totals.get(family, 0.0) + float(value)
    return totals


def delta(after: dict[str, float], before: dict[str, float], family: str) -> float:
    return after.get(family, 0.0) - before.get(family, 0.0)


# ----------------------------------------------------------------------------- requests


def _inputs(module: Any) -> list[Any]:
    x = module.InferInput("INPUT0", [1, 16], "INT32")
    x.set_data_from_numpy(np.zeros((1, 16), np.int32))
    return [x]


def _check(result: Any, i: int) -> None:
    out = result.as_numpy("OUTPUT0")
    if out is None or int(out[0, 0]) != i:
        raise RuntimeError(f"{name(i)} answered {None if out is None else out[0, 0]}, not {i}")


def timed_requests(http_port: int, plan: list[tuple[int, str]]) -> dict[str, list[float]]:
    """One request at a time, in order, per (model number, kind): latencies (ms) by kind."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}", network_timeout=120)
    inputs = _inputs(httpclient)
    out: dict[str, list[float]] = {}
    try:
        for i, kind in plan:
            start = time.perf_counter()
            result = client.infer(name(i), inputs)
            elapsed = (time.perf_counter() - start) * 1000
            _check(result, i)
            out.setdefault(kind, []).append(elapsed)
    finally:
        client.close()
    return out


@dataclass
class Window:
    """What one server did over its measured windows."""

    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    most_loaded: float = 0.0


def zipf_sequence(models: int, s: float, length: int, seed: int) -> list[int]:
    weights = 1.0 / np.arange(1, models + 1) ** s
    rng = np.random.default_rng(seed)
    return [int(i) for i in rng.choice(models, size=length, p=weights / weights.sum())]


async def _drive(
    http_port: int, metrics_port: int, choices: Iterator[int], concurrency: int, seconds: float
) -> tuple[list[float], list[str], float]:
    """``concurrency`` clients, one request at a time each, models from ``choices``, for
    ``seconds``: latencies (ms), errors, the most models loaded at once (sampled)."""
    import tritonclient.http as httpclient
    import tritonclient.http.aio as aioclient

    client = aioclient.InferenceServerClient(
        f"127.0.0.1:{http_port}", conn_limit=concurrency, conn_timeout=120
    )
    inputs = _inputs(httpclient)
    latencies: list[float] = []
    errors: list[str] = []
    most = 0.0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            i = next(choices)
            start = time.perf_counter()
            try:
                result = await client.infer(name(i), inputs)
                _check(result, i)
            except Exception as exc:  # reported in the row
                errors.append(f"{name(i)}: {exc}")
                continue
            latencies.append((time.perf_counter() - start) * 1000)

    async def sample() -> None:
        nonlocal most
        while time.perf_counter() < deadline:
            found = await asyncio.to_thread(scrape, metrics_port)
            most = max(most, found.get("tritonx_loaded_models", 0.0))
            await asyncio.sleep(0.1)

    try:
        await asyncio.gather(sample(), *(worker() for _ in range(concurrency)))
    finally:
        await client.close()
    return latencies, errors, most


def drive(
    http_port: int, metrics_port: int, choices: Iterator[int], concurrency: int, seconds: float
) -> tuple[list[float], list[str], float]:
    return asyncio.run(_drive(http_port, metrics_port, choices, concurrency, seconds))


# ----------------------------------------------------------------------------- the rows


def _p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def points(
    work: Path,
    log_dir: Path,
    *,
    smoke: bool,
    point: Callable[..., Any],
    process: Callable[..., Any],
    tritonx_cmd: Callable[..., list[str]],
    write_model: Callable[..., None],
    cpu_seconds: Callable[[int], float],
    settings: Settings | None = None,
) -> list[Any]:
    """The rows (``point``, ``process``, ``tritonx_cmd``, ``write_model`` and ``cpu_seconds``
    are run.py's)."""
    try:
        import tritonclient.http.aio  # noqa: F401
    except ImportError as exc:
        print(
            f"many-models rows left out: {exc} (pip install 'tritonclient[http]')", file=sys.stderr
        )
        return []
    s = settings or (Settings.smoke() if smoke else Settings())
    repo = build(work, s.models, write_model)
    budget_args = ("--max-loaded-models", str(s.budget), "--model-min-residency-secs", "0")
    label = {"free": "no budget", "budget": f"--max-loaded-models {s.budget}"}
    rows: list[Any] = []
    try:
        with ExitStack() as stack:
            procs = {}
            for key, extra in (("free", ON_DEMAND), ("budget", (*ON_DEMAND, *budget_args))):
                ports = PORTS[key]
                procs[key], _ = stack.enter_context(
                    process(tritonx_cmd(repo, ports, *extra), ports[0], log_dir / f"many-{key}.log")
                )

            # first request to an unloaded model vs requests to loaded ones
            last = s.models - 1
            first = list(range(s.first))
            for key in ("free", "budget"):
                http, _, metrics = PORTS[key]
                # one unmeasured load (onnxruntime's first session); on the budgeted server the
                # budget filled with other models, so that each timed first request evicts one
                warm = [last] if key == "free" else list(range(last, last - s.budget, -1))
                timed_requests(http, [(i, "warm") for i in warm])
                before = scrape(metrics)
                plan = []
                for i in first:
                    plan += [(i, "first")] + [(i, "loaded")] * s.loaded_requests
                found = timed_requests(http, plan)
                after = scrape(metrics)
                loaded = found["loaded"]
                firsts = found["first"]
                waits = delta(after, before, "tritonx_model_load_waits_total")
                wait_s = delta(after, before, "tritonx_model_load_wait_seconds_total")
                if key == "free":
                    rows.append(
                        point(
                            SCENARIO,
                            "tritonx",
                            "http",
                            "loaded model",
                            1,
                            p50_ms=_p(loaded, 50),
                            p99_ms=_p(loaded, 99),
                            extra={"kind": "loaded", "requests": len(loaded)},
                        )
                    )
                reference = rows[0].p50_ms
                rows.append(
                    point(
                        SCENARIO,
                        "tritonx",
                        "http",
                        f"first request, unloaded model ({label[key]})",
                        1,
                        p50_ms=statistics.median(firsts),
                        p99_ms=max(firsts),
                        extra={
                            "kind": "first",
                            "budget": key == "budget",
                            "models": len(firsts),
                            "loaded_p50_ms": round(_p(loaded, 50), 3),
                            "vs_loaded": round(statistics.median(firsts) / reference, 1),
                            "mean_load_wait_ms": round(wait_s / waits * 1000, 2) if waits else 0.0,
                            "evictions": delta(after, before, "tritonx_model_evictions_total"),
                        },
                    )
                )

            # throughput over more models than the budget
            sequence = zipf_sequence(s.models, s.zipf_s, 1_000_000, s.seed)
            streams = {key: iter(sequence) for key in PORTS}
            for key in PORTS:
                http, _, metrics = PORTS[key]
                timed_requests(http, [(i, "warm") for i in range(s.models)])
                drive(http, metrics, streams[key], s.concurrency, s.warmup_s)
            windows = {key: Window() for key in PORTS}
            for key in s.windows:
                http, _, metrics = PORTS[key]
                w = windows[key]
                before, cpu = scrape(metrics), cpu_seconds(procs[key].pid)
                start = time.perf_counter()
                latencies, errors, most = drive(
                    http, metrics, streams[key], s.concurrency, s.window_s
                )
                w.seconds += time.perf_counter() - start
                w.cpu_s += cpu_seconds(procs[key].pid) - cpu
                after = scrape(metrics)
                for family in after.keys() | before.keys():
                    w.metrics[family] = w.metrics.get(family, 0.0) + delta(after, before, family)
                w.latencies_ms += latencies
                w.errors += errors
                w.most_loaded = max(w.most_loaded, most)
            for key in PORTS:
                w = windows[key]
                n = len(w.latencies_ms)
                loads = w.metrics.get("tritonx_model_on_demand_loads_total", 0.0)
                waits = w.metrics.get("tritonx_model_load_waits_total", 0.0)
                wait_s = w.metrics.get("tritonx_model_load_wait_seconds_total", 0.0)
                row = point(
                    SCENARIO,
                    "tritonx",
                    "http",
                    f"{s.models} models, {label[key]}",
                    s.concurrency,
                    infer_per_s=n / w.seconds if w.seconds else 0.0,
                    p50_ms=_p(w.latencies_ms, 50),
                    p99_ms=_p(w.latencies_ms, 99),
                    cpu_us_per_req=round(w.cpu_s / n * 1e6, 1) if n else 0.0,
                    extra={
                        "kind": "throughput",
                        "budget": key == "budget",
                        "requests": n,
                        "seconds": round(w.seconds, 2),
                        "distribution": f"zipf s={s.zipf_s:g}" if s.zipf_s else "uniform",
                        "on_demand_loads": loads,
                        "hit_ratio": round(1 - loads / n, 4) if n else 0.0,
                        "found_loaded": round(1 - waits / n, 4) if n else 0.0,
                        "evictions": w.metrics.get("tritonx_model_evictions_total", 0.0),
                        "mean_load_wait_ms": round(wait_s / waits * 1000, 2) if waits else 0.0,
                        "most_loaded": w.most_loaded,
                    },
                )
                if w.errors:
                    row.error = f"{len(w.errors)} failed requests, e.g. {w.errors[0]}"
                rows.append(row)
    except Exception as exc:  # the row says what failed
        rows.append(
            point(
                SCENARIO,
                "tritonx",
                "http",
                f"{s.models} models",
                0,
                error=f"{type(exc).__name__}: {exc}",
            )
        )
    return rows


def table_row(p: Any, by: dict[tuple[str, str, str, int], Any]) -> str:
    """The row of run.py's table."""
    e = p.extra
    head = f"| {SCENARIO} | {p.target} | {p.protocol} | {p.model} | {p.concurrency} |"
    if p.error:
        return f"{head} error: {p.error[:80]} | - | - | - | | |"
    if e.get("kind") == "loaded":
        return f"{head} - | {p.p50_ms:.2f} | {p.p99_ms:.2f} | - | | {e['requests']} requests |"
    if e.get("kind") == "first":
        vs = (
            f"loaded model p50 ({e['models']} models; mean load wait "
            f"{e['mean_load_wait_ms']} ms, {e['evictions']:.0f} evictions; p99 column: slowest)"
        )
        return f"{head} - | {p.p50_ms:.2f} | {p.p99_ms:.2f} | - | {e['vs_loaded']}x | {vs} |"
    cpu = f"{p.cpu_us_per_req:.0f}" if p.cpu_us_per_req else "-"
    value = f"| {p.infer_per_s:.0f} | {p.p50_ms:.2f} | {p.p99_ms:.2f} | {cpu} |"
    if not e.get("budget"):
        return (
            f"{head[:-1]}{value} | {e['distribution']}, {e['requests']} requests, "
            f"{e['on_demand_loads']:.0f} loads |"
        )
    free = next(
        (
            q
            for q in by.values()
            if q.scenario == SCENARIO
            and q.extra.get("kind") == "throughput"
            and not q.extra.get("budget")
        ),
        None,
    )
    r = f"{p.infer_per_s / free.infer_per_s:.2f}x" if free and free.infer_per_s else "-"
    return (
        f"{head[:-1]}{value} {r} | no budget; {e['distribution']}, hit ratio "
        f"{e['hit_ratio']:.3f} (found loaded {e['found_loaded']:.3f}), {e['on_demand_loads']:.0f} "
        f"loads, {e['evictions']:.0f} evictions, load wait {e['mean_load_wait_ms']} ms, "
        f"at most {e['most_loaded']:.0f} loaded |"
    )


def main(argv: list[str] | None = None) -> int:
    import run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    defaults = Settings()
    parser.add_argument("--models", type=int, default=defaults.models)
    parser.add_argument("--budget", type=int, default=defaults.budget)
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument("--window-s", type=float, default=defaults.window_s)
    parser.add_argument("--zipf-s", type=float, default=defaults.zipf_s, help="0: uniform")
    args = parser.parse_args(argv)
    if args.smoke:
        settings = Settings.smoke()
    else:
        settings = Settings(
            models=args.models,
            budget=args.budget,
            concurrency=args.concurrency,
            window_s=args.window_s,
            zipf_s=args.zipf_s,
        )
    work = Path(tempfile.mkdtemp(prefix="tritonx-bench-many-"))
    try:
        found = points(
            work,
            work,
            smoke=args.smoke,
            point=run.Point,
            process=run.process,
            tritonx_cmd=run.tritonx_cmd,
            write_model=run.write_model,
            cpu_seconds=run.cpu_seconds,
            settings=settings,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(run.table(found))
    return 1 if any(p.error for p in found) else 0


if __name__ == "__main__":
    sys.exit(main())
