"""The benchmark harness in its 1-second smoke mode, so it cannot rot (numbers not checked:
speed goals live in the benchmark's table, never in tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    not (ROOT / "tools" / "perf_analyzer" / "bin" / "perf_analyzer").exists(),
    reason="perf_analyzer is not set up: run `bash tools/perf_analyzer/setup.sh`",
)
@pytest.mark.timeout(600)  # its run.py subprocess's own bound: ~150 s on a quiet machine
def test_benchmark_smoke(tmp_path: Path) -> None:
    """Every group of rows runs once; the ``backends`` group on ONNX Runtime only (the other
    frameworks' rows took ~130 s of the smoke run's ~300 s; their serving is tested by
    tests/integration/test_framework_backends_repository.py and the plugins' own tests, and a
    full ``run.py`` runs their rows)."""
    pytest.importorskip("onnx")
    pytest.importorskip("tritonx_backend_onnx")
    command = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--smoke"]
    done = subprocess.run(
        [*command, "--backends", "onnxruntime", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (result,) = tmp_path.glob("*.json")
    points = json.loads(result.read_text())["points"]
    served = {(p["target"], p["protocol"], p["model"]) for p in points if p["infer_per_s"] > 0}
    assert {
        ("bare", "http", "add_sub"),
        ("tritonx", "grpc", "add_sub"),
        ("tritonx-web", "http", "add_sub"),
        ("tritonx", "grpc", "cnn"),
    } <= served
    assert any(p["scenario"] == "memory" and p["extra"]["rss_mib"] > 0 for p in points)
    assert "| add_sub | tritonx | http |" in done.stdout


def test_hotpath_benchmark_runs() -> None:
    """``benchmarks/hotpath.py`` imports the transports' conversions by name: it must keep
    running when they move (a module split once broke it silently)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "hotpath.py"), "--calls", "20"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "http encode binary" in done.stdout and "grpc parse + decode" in done.stdout


@pytest.mark.skipif(
    not (ROOT / "tools" / "perf_analyzer" / "bin" / "perf_analyzer").exists(),
    reason="perf_analyzer is not set up: run `bash tools/perf_analyzer/setup.sh`",
)
def test_ab_harness_compares_two_trees() -> None:
    """``benchmarks/ab.py`` runs two servers at once and prints a ratio per row (this tree
    against itself here; the number is not checked)."""
    pytest.importorskip("tritonx_backend_onnx")
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "ab.py"),
            str(ROOT),
            str(ROOT),
            "--rows",
            "add_sub:http:1",
            "--rounds",
            "1",
            "--window-ms",
            "500",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| add_sub:http:1 |" in done.stdout
