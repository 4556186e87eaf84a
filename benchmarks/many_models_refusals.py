"""Cheap refusals with models loaded on demand (issue 44, finding 8): the server's CPU per
request for model names in no repository, and for requests cycling over more models than
``--max-loaded-models`` holds.

    python benchmarks/many_models_refusals.py [--models 300] [--unknown 10000] [--smoke]
    python benchmarks/many_models_refusals.py --tree /tmp/landed --landed   # an older tree

Models: ``many_models.py``'s (``m00`` ... ``m299``, each a tiny ONNX graph ``OUTPUT0 =
INPUT0 + i``, INT32 [16], one CPU instance). Rows (HTTP, ``tritonclient``; CPU: user +
system of the server process and its descendants over the row, divided by its requests):

* **loaded model**: 2000 inferences of one loaded model (8 concurrent clients,
  ``tritonclient.http.aio``): the reference.
* **unknown names**: ``--unknown`` requests (default 10000), each for a distinct name in no
  repository, same clients; every answer is checked to be Triton's
  ``Request for unknown model: '<name>' is not found`` (404). The server reads its
  repositories for such a name only when its last read is ``--unknown-model-rescan-secs``
  (default 1 s) old.
* **thrash**: ``--max-loaded-models 8``, one client sending requests round-robin over 9
  models for ``--window-s`` (default 10 s), after one warm round: with
  ``--model-min-residency-secs 0`` every request loads its model and unloads another; with
  the default (1 s) a request whose model could only get room by unloading a model loaded
  less than 1 s ago is refused at once (503). The row gives the answered and refused
  requests and the loads (``tritonx_model_on_demand_loads_total``).

``--tree PATH`` serves another checkout (``git worktree add /tmp/landed <rev>``: its
``core/src`` and ``plugins/*/src`` go first on the server's ``PYTHONPATH``); ``--landed``
leaves out the flags an older tree does not have (its thrash row is its only behaviour).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import many_models
import run
from serving import free_port

ON_DEMAND = ("--model-control-mode", "explicit", "--model-load-on-demand", "true")
UNKNOWN = "Request for unknown model: '{}' is not found"


@dataclass
class Row:
    """One measured row."""

    name: str
    requests: int
    seconds: float
    cpu_s: float
    note: str = ""

    @property
    def cpu_ms_per_request(self) -> float:
        return self.cpu_s / self.requests * 1000 if self.requests else 0.0

    def line(self) -> str:
        rate = self.requests / self.seconds if self.seconds else 0.0
        return (
            f"| {self.name} | {self.requests} | {rate:.0f} | {self.cpu_ms_per_request:.3f} "
            f"| {self.note} |"
        )


def _inputs(module: Any) -> list[Any]:
    x = module.InferInput("INPUT0", [1, 16], "INT32")
    x.set_data_from_numpy(np.zeros((1, 16), np.int32))
    return [x]


async def _concurrent(http_port: int, names: list[str], concurrency: int) -> list[str]:
    """Send a request for each of ``names`` (``concurrency`` at a time): the errors' messages
    ('' for an answer)."""
    import tritonclient.http as httpclient
    import tritonclient.http.aio as aioclient
    from tritonclient.utils import InferenceServerException

    client = aioclient.InferenceServerClient(
        f"127.0.0.1:{http_port}", conn_limit=concurrency, conn_timeout=120
    )
    inputs = _inputs(httpclient)
    out = [""] * len(names)
    todo = iter(enumerate(names))

    async def worker() -> None:
        for i, model in todo:
            try:
                await client.infer(model, inputs)
            except InferenceServerException as exc:
                out[i] = f"[{exc.status()}] {exc.message()}"

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await client.close()
    return out


def measured(pid: int, call: Any) -> tuple[Any, float, float]:
    """``call()``'s result, its wall time and the server's CPU seconds over it."""
    cpu, start = run.cpu_seconds(pid), time.perf_counter()
    result = call()
    return result, time.perf_counter() - start, run.cpu_seconds(pid) - cpu


def unknown_rows(pid: int, http_port: int, count: int, concurrency: int) -> list[Row]:
    loaded = [many_models.name(0)] * 2000
    asyncio.run(_concurrent(http_port, loaded[:50], concurrency))  # load, warm
    errors, seconds, cpu = measured(
        pid, lambda: asyncio.run(_concurrent(http_port, loaded, concurrency))
    )
    failed = [e for e in errors if e]
    rows = [Row("loaded model", len(loaded), seconds, cpu, f"{len(failed)} failed")]
    names = [f"no-such-model-{i}" for i in range(count)]
    asyncio.run(_concurrent(http_port, [f"warm-{i}" for i in range(50)], concurrency))
    errors, seconds, cpu = measured(
        pid, lambda: asyncio.run(_concurrent(http_port, names, concurrency))
    )
    wrong = [
        (n, e) for n, e in zip(names, errors, strict=True) if e != f"[404] {UNKNOWN.format(n)}"
    ]
    note = (
        "each answer Triton's unknown-model 404" if not wrong else f"{len(wrong)} wrong: {wrong[0]}"
    )
    rows.append(Row(f"unknown names ({count} distinct)", count, seconds, cpu, note))
    return rows


def scrape_total(metrics_port: int, family: str) -> float:
    return many_models.scrape(metrics_port).get(family, 0.0)


def thrash_row(
    label: str, pid: int, ports: tuple[int, int, int], models: int, window_s: float
) -> Row:
    """One client round-robin over ``models`` models for ``window_s``."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    http_port, _, metrics_port = ports
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}", network_timeout=120)
    inputs = _inputs(httpclient)
    answered = refused = 0
    other: list[str] = []

    def cycle(deadline: float | None, rounds: int = 0) -> int:
        nonlocal answered, refused
        sent = 0
        while (deadline is None and sent < rounds * models) or (
            deadline is not None and time.perf_counter() < deadline
        ):
            i = sent % models
            sent += 1
            try:
                many_models._check(client.infer(many_models.name(i), inputs), i)
                answered += 1
            except InferenceServerException as exc:
                if "--model-min-residency-secs" in str(exc):
                    refused += 1
                else:
                    other.append(str(exc))
        return sent

    try:
        cycle(None, rounds=1)  # warm: every model loaded once
        answered = refused = 0
        loads = scrape_total(metrics_port, "tritonx_model_on_demand_loads_total")
        sent, seconds, cpu = measured(pid, lambda: cycle(time.perf_counter() + window_s))
        loads = scrape_total(metrics_port, "tritonx_model_on_demand_loads_total") - loads
    finally:
        client.close()
    note = (
        f"{answered} answered ({answered / seconds:.0f}/s, "
        f"{cpu / answered * 1000 if answered else 0:.1f} ms CPU each), {refused} refused, "
        f"{loads:.0f} loads"
    )
    if other:
        note += f", {len(other)} other errors, e.g. {other[0][:100]}"
    return Row(label, sent, seconds, cpu, note)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=300)
    parser.add_argument("--unknown", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--tree", type=Path, help="serve this checkout instead")
    parser.add_argument("--landed", action="store_true", help="the tree has no new flags")
    parser.add_argument("--smoke", action="store_true", help="a few models, short rows")
    args = parser.parse_args(argv)
    if args.smoke:
        args.models, args.unknown, args.window_s = 12, 200, 1.0
    if args.tree is not None:
        tree = args.tree.resolve()
        sources = [tree / "core" / "src", *sorted((tree / "plugins").glob("*/src"))]
        os.environ["PYTHONPATH"] = os.pathsep.join(map(str, sources))
    work = Path(tempfile.mkdtemp(prefix="tritonx-bench-refusals-"))
    rows: list[Row] = []
    try:
        repo = many_models.build(work, args.models, run.write_model)
        ports = (free_port(), free_port(), free_port())
        with run.process(run.tritonx_cmd(repo, ports, *ON_DEMAND), ports[0], work / "a.log") as (
            proc,
            _,
        ):
            rows += unknown_rows(proc.pid, ports[0], args.unknown, args.concurrency)
        budget = ("--max-loaded-models", str(args.budget))
        variants = [("thrash, landed tree", ())] if args.landed else []
        if not args.landed:
            variants = [
                ("thrash, --model-min-residency-secs 0", ("--model-min-residency-secs", "0")),
                ("thrash, --model-min-residency-secs 1 (default)", ()),
            ]
        for label, extra in variants:
            ports = (free_port(), free_port(), free_port())
            cmd = run.tritonx_cmd(repo, ports, *ON_DEMAND, *budget, *extra)
            with run.process(cmd, ports[0], work / "thrash.log") as (proc, _):
                rows.append(thrash_row(label, proc.pid, ports, args.budget + 1, args.window_s))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.models} models; server: {args.tree or 'this tree'}")
    print("| row | requests | req/s | server CPU ms/request | |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print(row.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
