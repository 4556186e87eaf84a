"""Load generators: perf_analyzer when it is installed, else a built-in one (the real
``tritonclient`` HTTP aio client, ``concurrency`` requests in flight).

Both measure one concurrency level for a time window after a warm-up and report
inferences/s (requests x batch size), latency percentiles and the request count.
"""

from __future__ import annotations

import asyncio
import csv
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient

_NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}


@dataclass
class Measurement:
    """One concurrency level of one variant."""

    concurrency: int
    requests: int
    errors: int
    infer_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float


@dataclass(frozen=True)
class InputSpec:
    """One request input: name, datatype and the shape sent (batch dimension included)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def data(self, rng: np.random.Generator) -> np.ndarray:
        dtype = _NUMPY.get(self.datatype)
        if dtype is None:
            raise ValueError(f"input '{self.name}': datatype {self.datatype} is not supported")
        if dtype is np.object_:
            return np.array([b"1"] * int(np.prod(self.shape)), dtype=object).reshape(self.shape)
        if dtype is np.bool_:
            return rng.integers(0, 2, self.shape).astype(bool)
        if np.issubdtype(dtype, np.integer):
            return rng.integers(0, 8, self.shape).astype(dtype)
        return rng.random(self.shape).astype(dtype)


def input_specs(
    metadata: dict[str, Any],
    max_batch_size: int,
    batch_size: int,
    shapes: dict[str, tuple[int, ...]],
) -> list[InputSpec]:
    """The inputs of a request, from the model metadata: variable dimensions are 1 unless
    ``shapes`` (``--shape``) gives them; batching models get ``batch_size`` in front.

    :raises ValueError: for a shape given for an input the model does not have.
    """
    names = {i["name"] for i in metadata["inputs"]}
    unknown = sorted(set(shapes) - names)
    if unknown:
        raise ValueError(f"--shape names unknown inputs: {', '.join(unknown)}")
    out = []
    for spec in metadata["inputs"]:
        dims = list(spec["shape"])
        if max_batch_size > 0:
            dims = dims[1:]  # the metadata shape starts with -1 for the batch
        dims = list(shapes.get(spec["name"], tuple(1 if d < 0 else d for d in dims)))
        if max_batch_size > 0:
            dims = [batch_size, *dims]
        out.append(InputSpec(spec["name"], spec["datatype"], tuple(dims)))
    return out


def _summary(
    concurrency: int, latencies: list[float], errors: int, seconds: float, batch: int
) -> Measurement:
    if latencies:
        arr = np.array(latencies) * 1000
        p50, p95, p99 = (float(np.percentile(arr, q)) for q in (50, 95, 99))
        mean = float(arr.mean())
    else:
        p50 = p95 = p99 = mean = float("nan")
    return Measurement(
        concurrency=concurrency,
        requests=len(latencies),
        errors=errors,
        infer_per_s=len(latencies) * batch / seconds if seconds > 0 else 0.0,
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        mean_ms=mean,
    )


class BuiltinLoad:
    """``concurrency`` coroutines sending the same request back to back over HTTP."""

    name = "builtin"

    def __init__(
        self, url: str, model: str, inputs: list[InputSpec], batch_size: int, batched: bool
    ) -> None:
        self.url = url
        self.batched = batched
        self.model = model
        self.inputs = inputs
        self.batch_size = batch_size
        rng = np.random.default_rng(0)
        self._arrays = [spec.data(rng) for spec in inputs]

    def measure(self, concurrency: int, warmup_s: float, seconds: float) -> Measurement:
        return asyncio.run(self._measure(concurrency, warmup_s, seconds))

    async def _measure(self, concurrency: int, warmup_s: float, seconds: float) -> Measurement:
        client = aioclient.InferenceServerClient(self.url, conn_limit=max(concurrency, 1))
        inputs = []
        for spec, arr in zip(self.inputs, self._arrays, strict=True):
            inp = aioclient.InferInput(spec.name, list(spec.shape), spec.datatype)
            inp.set_data_from_numpy(arr, binary_data=True)
            inputs.append(inp)
        start = time.perf_counter() + warmup_s
        end = start + seconds
        latencies: list[float] = []
        errors = 0

        async def worker() -> None:
            nonlocal errors
            while True:
                t0 = time.perf_counter()
                if t0 >= end:
                    return
                try:
                    await client.infer(self.model, inputs)
                except Exception:
                    errors += 1
                    if errors > 1000:
                        return
                    continue
                t1 = time.perf_counter()
                if t0 >= start and t1 <= end:
                    latencies.append(t1 - t0)

        try:
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        finally:
            await client.close()
        return _summary(concurrency, latencies, errors, seconds, self.batch_size)

    def check(self) -> None:
        """One request, so a model that cannot be served fails before the sweep.

        :raises RuntimeError: with the server's message.
        """
        with httpclient.InferenceServerClient(self.url) as client:
            inputs = []
            for spec, arr in zip(self.inputs, self._arrays, strict=True):
                inp = httpclient.InferInput(spec.name, list(spec.shape), spec.datatype)
                inp.set_data_from_numpy(arr)
                inputs.append(inp)
            try:
                client.infer(self.model, inputs)
            except Exception as exc:
                raise RuntimeError(f"a request to '{self.model}' failed: {exc}") from None


#: where this repository's ``tools/perf_analyzer/setup.sh`` installs it (run from the root)
REPO_PERF_ANALYZER = Path("tools/perf_analyzer/run.sh")


def find_perf_analyzer(path: str | None) -> str | None:
    """``path`` (``--perf-analyzer``), else ``perf_analyzer`` on ``$PATH``, else the
    repository's ``tools/perf_analyzer/run.sh`` when it is installed, else None."""
    if path:
        return path
    found = shutil.which("perf_analyzer")
    if found is None and (REPO_PERF_ANALYZER.parent / "bin" / "perf_analyzer").is_file():
        found = str(REPO_PERF_ANALYZER.resolve())
    return found


class PerfAnalyzerLoad(BuiltinLoad):
    """NVIDIA's perf_analyzer (C++), one run per concurrency level, read from its CSV (its
    own warm-up; its CSV has no mean latency, so ``mean_ms`` is NaN)."""

    name = "perf_analyzer"

    def __init__(
        self,
        executable: str,
        url: str,
        model: str,
        inputs: list[InputSpec],
        batch_size: int,
        batched: bool,
    ) -> None:
        super().__init__(url, model, inputs, batch_size, batched)
        self.executable = executable

    def measure(self, concurrency: int, warmup_s: float, seconds: float) -> Measurement:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "pa.csv"
            cmd = [
                self.executable,
                "-m",
                self.model,
                "-u",
                self.url,
                "-i",
                "http",
                "--concurrency-range",
                f"{concurrency}:{concurrency}",
                # three windows make one measurement: together ``seconds``
                "--measurement-interval",
                str(max(100, int(seconds * 1000 / 3))),
                "--max-trials",
                "3",
                # every window counts (the sweep compares; it does not wait for stability)
                "--stability-percentage",
                "999",
                "--percentile",
                "99",
                "-f",
                str(out),
            ]
            if self.batch_size > 1:
                cmd += ["-b", str(self.batch_size)]
            for spec in self.inputs:
                dims = spec.shape[1:] if self.batched else spec.shape
                cmd += ["--shape", f"{spec.name}:{','.join(map(str, dims))}"]
            for _ in range(3):  # a busy machine can fail even a 999% stability check: retry
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                if "Failed to obtain stable measurement" not in done.stdout + done.stderr:
                    break
            if done.returncode != 0 or not out.is_file():
                raise RuntimeError(
                    f"perf_analyzer failed ({done.returncode}): "
                    f"{(done.stderr or done.stdout)[-2000:]}"
                )
            rows = list(csv.DictReader(out.open()))
        row = rows[-1]
        us = {k: float(v) / 1000 for k, v in row.items() if k and k.endswith("latency")}
        return Measurement(
            concurrency=concurrency,
            requests=-1,
            errors=0,
            infer_per_s=float(row["Inferences/Second"]),
            p50_ms=us.get("p50 latency", float("nan")),
            p95_ms=us.get("p95 latency", float("nan")),
            p99_ms=us.get("p99 latency", float("nan")),
            mean_ms=us.get("Avg latency", float("nan")),
        )
