"""Benchmark: instances of a CPU-busy pure-Python model, 1 vs N, worker processes vs in-process;
and the per-request latency of each execution mode.

    python plugins/backend_python/benchmarks/parallel_instances.py [--requests 8]
        [--iterations 3000000] [--instances 4] [--latency-requests 500]

Every model is served by an in-process ``tritonx.Server`` (no sockets), so the figures measure
the backend, not a transport. With worker processes (the default mode) N instances of a
GIL-bound model run truly in parallel, up to the number of cores; in-process instances share
the server's GIL and do not speed up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import tritonx
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

HERE = Path(__file__).resolve().parent
MODELS = HERE.parent / "tests" / "models"


def build_repository(root: Path, instances: int) -> None:
    """busy_<mode>_<count> models and add_sub_<mode> models."""
    repo = ModelRepositoryBuilder(root)
    busy = (MODELS / "busy.py").read_text()
    add_sub = (MODELS / "add_sub.py").read_text()
    for mode in ("process", "in_process"):
        for count in sorted({1, instances}):
            repo.add(
                f"busy_{mode}_{count}",
                backend="python",
                inputs=[("ITERATIONS", "INT64", [1])],
                outputs=[("TOTAL", "INT64", [1])],
                parameters={"TRITONX_EXECUTION_MODE": mode},
                extra=f"instance_group [ {{ count: {count}, kind: KIND_CPU }} ]\n",
                versions={1: {"model.py": busy}},
            )
        repo.add(
            f"add_sub_{mode}",
            backend="python",
            inputs=[("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
            outputs=[("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
            parameters={"TRITONX_EXECUTION_MODE": mode},
            versions={1: {"model.py": add_sub}},
        )


async def burst(server: tritonx.Server, model: str, requests: int, iterations: int) -> float:
    """Seconds to answer ``requests`` concurrent requests."""
    inputs = {"ITERATIONS": np.array([iterations], dtype=np.int64)}
    start = time.perf_counter()
    await asyncio.gather(
        *(server.infer(tritonx.InferenceRequest(model, dict(inputs))) for _ in range(requests))
    )
    return time.perf_counter() - start


async def latency(server: tritonx.Server, model: str, requests: int) -> list[float]:
    """Per-request latencies (µs) of sequential small requests."""
    inputs = {
        "INPUT0": np.arange(4, dtype=np.float32),
        "INPUT1": np.ones(4, dtype=np.float32),
    }
    out = []
    for _ in range(requests):
        start = time.perf_counter()
        await server.infer(tritonx.InferenceRequest(model, dict(inputs)))
        out.append((time.perf_counter() - start) * 1e6)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=3_000_000)
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--latency-requests", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "models"
        build_repository(root, args.instances)
        settings = loopback_settings(root, allow_http=False, allow_grpc=False, allow_metrics=False)
        pm = make_plugin_manager(only=("backend_python",))
        start = time.perf_counter()
        async with tritonx.Server(settings, plugin_manager=pm) as server:
            print(
                f"loaded {len(server.repository_index())} models in "
                f"{time.perf_counter() - start:.2f} s on {os.cpu_count()} cores"
            )
            print(
                f"\n{args.requests} concurrent requests x {args.iterations:,} loop turns each "
                "(pure Python, holds the GIL)"
            )
            results: dict[tuple[str, int], float] = {}
            for mode in ("process", "in_process"):
                for count in sorted({1, args.instances}):
                    model = f"busy_{mode}_{count}"
                    await burst(server, model, count, 1000)  # warm up
                    seconds = await burst(server, model, args.requests, args.iterations)
                    results[(mode, count)] = seconds
                    print(f"  {mode:>10} mode, {count} instance(s): {seconds:6.2f} s")
            for mode in ("process", "in_process"):
                one, many = results[(mode, 1)], results[(mode, args.instances)]
                print(f"  {mode:>10} mode: {args.instances} instances are {one / many:.2f}x 1")
            print(f"\nlatency of {args.latency_requests} sequential add_sub requests (µs)")
            for mode in ("process", "in_process"):
                model = f"add_sub_{mode}"
                await latency(server, model, 20)
                lat = sorted(await latency(server, model, args.latency_requests))
                p50 = statistics.median(lat)
                p99 = lat[int(len(lat) * 0.99) - 1]
                print(
                    f"  {mode:>10} mode: mean {statistics.fmean(lat):7.1f}  p50 {p50:7.1f}  "
                    f"p99 {p99:7.1f}"
                )


if __name__ == "__main__":
    asyncio.run(main())
