"""Server CPU per request of two tritonx source trees, measured interleaved:

    python benchmarks/ab.py OLD_TREE NEW_TREE [--rows add_sub:grpc:4,...] [--rounds 4]

A tree is a checkout of this repository (``git worktree add /tmp/old <rev>``). Both
servers (``tritonx serve`` with ``PYTHONPATH=<tree>/core/src``, over the repository
``run.py`` builds) are up at once, on their own ports, and every row is measured on one then
the other, the order swapped each round: whatever else the machine is doing falls on both
alike. Two sequential ``run.py`` tables drift by 10-20% per row on a shared 2-core machine;
interleaved, the same tree against itself stays within a few percent.

A row is ``model:protocol:concurrency`` (protocol ``http``, ``grpc`` or ``grpc-stream``).
Each point is perf_analyzer's (``run.py``'s) server CPU (user + system, process and
descendants) over its completed requests. Prints each row's points and the median ratio
new/old (below 1: the new tree spends less CPU per request).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run
from serving import free_port

DEFAULT_ROWS = (
    "add_sub:http:1,add_sub:http:4,add_sub:grpc:1,add_sub:grpc:4,"
    "add_sub:grpc-stream:4,py_identity:http:4,py_identity:grpc:4"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="the reference tree")
    parser.add_argument("new", type=Path, help="the tree measured against it")
    parser.add_argument("--rows", default=DEFAULT_ROWS, help="model:protocol:concurrency,...")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--window-ms", type=int, default=3000)
    args = parser.parse_args(argv)
    rows = [tuple(r.split(":")) for r in args.rows.split(",")]
    with tempfile.TemporaryDirectory(prefix="tritonx-ab-") as tmp:
        work = Path(tmp)
        repo = work / "repo"
        run.build_repository(repo, with_python=any(m.startswith("py_") for m, _, _ in rows))
        servers: dict[str, tuple[subprocess.Popen[bytes], tuple[int, int, int]]] = {}
        try:
            for name, tree in (("old", args.old), ("new", args.new)):
                ports = (free_port(), free_port(), free_port())
                # the tree's core and plugins (entry points come from the installed
                # metadata: a plugin whose entry module moved must be disabled)
                sources = [tree.resolve() / "core" / "src"]
                sources += sorted((tree.resolve() / "plugins").glob("*/src"))
                env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, sources)))
                with (work / f"{name}.log").open("wb") as log:
                    proc = subprocess.Popen(
                        run.tritonx_cmd(repo, ports),
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                servers[name] = (proc, ports)
                run.wait_ready(ports[0], 180, proc)
            points = _measure(servers, rows, args.rounds, args.window_ms, work)
        finally:
            for proc, _ in servers.values():
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(30)
    print("| row | old CPU us/req | new CPU us/req | new/old (median) |")
    print("|---|---|---|---:|")
    for row in rows:
        old, new = points["old"][row], points["new"][row]
        ratio = statistics.median(new) / statistics.median(old) if old and new else 0.0
        cells = (" ".join(f"{v:.0f}" for v in old), " ".join(f"{v:.0f}" for v in new))
        print(f"| {':'.join(row)} | {cells[0]} | {cells[1]} | {ratio:.2f} |")
    return 0


def _measure(
    servers: dict[str, tuple[subprocess.Popen[bytes], tuple[int, int, int]]],
    rows: list[tuple[str, ...]],
    rounds: int,
    window_ms: int,
    work: Path,
) -> dict[str, dict[tuple[str, ...], list[float]]]:
    points: dict[str, dict[tuple[str, ...], list[float]]] = {
        name: {row: [] for row in rows} for name in servers
    }
    for number in range(rounds):
        order = ["old", "new"] if number % 2 == 0 else ["new", "old"]
        for row in rows:
            model, protocol, concurrency = row
            for name in order:
                proc, (http, grpc, _) = servers[name]
                point = run.Point("ab", "tritonx", protocol, model, int(concurrency))
                run._SERVER[:] = [(proc, http)]
                url = f"127.0.0.1:{http if protocol == 'http' else grpc}"
                measured = run.perf_analyzer(point, url, window_ms, work)
                if measured.cpu_us_per_req > 0:
                    points[name][row].append(measured.cpu_us_per_req)
        print(f"round {number + 1}/{rounds} measured", file=sys.stderr, flush=True)
    return points


if __name__ == "__main__":
    raise SystemExit(main())
