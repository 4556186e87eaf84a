"""``tritonx analyze``: a tiny sweep end to end on the bundled ``simple`` ONNX model (real
``tritonx serve`` subprocesses, the real tritonclient as load generator), its outputs, the
config it writes served by a real server, constraints and bad options."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
from click.testing import CliRunner

import tritonx_tools_analyze
from tritonx.config import EXAMPLE_REPOSITORY
from tritonx_tools_analyze.cli import analyze
from tritonx_tools_analyze.space import Variant, apply, to_pbtxt, variants

pytest.importorskip("tritonx_backend_onnx")

TINY = [
    "--concurrency=1,2",
    "--measurement-seconds=0.3",
    "--warmup-seconds=0.1",
    "--confirm-rounds=1",
    "--max-variants=2",
    "--load-generator=builtin",
    "--quiet",
]


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    shutil.copytree(EXAMPLE_REPOSITORY / "simple", repo / "simple")
    return repo


def run(*args: str) -> Any:
    return CliRunner().invoke(analyze, list(args), catch_exceptions=False)


def test_tiny_sweep_end_to_end(repository: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run("simple", "--model-repository", str(repository), "--output-dir", str(out), *TINY)
    assert result.exit_code == 0, result.output
    assert "best: " in result.output and "infer/s (default config: " in result.output
    data = json.loads((out / "results.json").read_text())
    assert data["model"] == "simple" and data["load_generator"] == "builtin"
    # simple has 2 instances (the CPU default) and no dynamic batching: the first change is
    # one instance
    assert [v["name"] for v in data["variants"]] == ["default", "1inst"]
    assert data["variants"][1]["instance_count"] == 1
    sweep = [r for r in data["rows"] if r["phase"] == "sweep"]
    assert {(r["variant"], r["concurrency"]) for r in sweep} == {
        (v, c) for v in ("default", "1inst") for c in (1, 2)
    }
    for row in sweep:
        assert row["requests"] > 0 and row["errors"] == 0 and row["infer_per_s"] > 0
        assert 0 < row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]
        assert row["cpu_percent"] > 0 and row["rss_mb"] > 10 and row["others_cpu_percent"] >= 0
    with (out / "results.csv").open() as f:
        assert len(list(csv.DictReader(f))) == len(data["rows"])
    # the written config's confirmed throughput is at least the default's (shown in the report)
    confirmed = data["confirmed"]
    best = data["best"]
    if best != "default" or confirmed:
        assert confirmed[best]["infer_per_s"] >= confirmed["default"]["infer_per_s"]
    report = (out / "report.html").read_text()
    assert "default config" in report and "results.csv" in report
    if _has_matplotlib():
        for name in ("pareto.png", "throughput.png", "latency.png", "resources.png"):
            assert (out / name).read_bytes()[:4] == b"\x89PNG"
            assert f"src='{name}'" in report
    # the written config.pbtxt is ready: a server loads it from a repository and serves
    served = tmp_path / "served" / "simple"
    shutil.copytree(repository / "simple" / "1", served / "1")
    shutil.copy(out / "config.pbtxt", served / "config.pbtxt")
    _serve_and_infer(served.parent)


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _serve_and_infer(repo: Path) -> None:
    import tritonclient.http as httpclient

    from tritonx import Server
    from tritonx.testing import ServerThread, loopback_settings

    with ServerThread(
        Server(loopback_settings(repo, allow_grpc=False, allow_metrics=False))
    ) as srv:
        with httpclient.InferenceServerClient(srv.http_url) as client:
            a = np.arange(16, dtype=np.int32).reshape(1, 16)
            inputs = []
            for name in ("INPUT0", "INPUT1"):
                inp = httpclient.InferInput(name, [1, 16], "INT32")
                inp.set_data_from_numpy(a)
                inputs.append(inp)
            res = client.infer("simple", inputs)
            assert (res.as_numpy("OUTPUT0") == 2 * a).all()


def test_latency_budget_nothing_qualifies(repository: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = [a for a in TINY if not a.startswith("--max-variants")] + ["--max-variants=1"]
    result = run(
        "simple",
        "--model-repository",
        str(repository),
        "--output-dir",
        str(out),
        "--latency-budget-ms=0.000001",
        *args,
    )
    assert result.exit_code == 1
    assert "no variant meets the constraints" in result.output
    assert not (out / "config.pbtxt").exists()
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert rows and all(not r["meets_constraints"] and "p99" in r["violations"] for r in rows)
    assert "no variant meets the constraints" in (out / "report.html").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-memory=lots"], "'lots' is not a size"),
        (["--concurrency=0"], "concurrency levels must be integers >= 1"),
        (["--shape=INPUT0"], "'INPUT0' is not <input>:<dim>"),
        (["--load-generator=perf_analyzer", "--perf-analyzer="], "perf_analyzer is not on PATH"),
    ],
)
def test_bad_options(
    repository: Path, args: list[str], message: str, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)  # no tools/perf_analyzer here
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run("simple", "--model-repository", str(repository), *args)
    assert result.exit_code != 0 and message in result.output, result.output


ROOT = Path(__file__).resolve().parents[3]
PERF_ANALYZER = ROOT / "tools" / "perf_analyzer"


@pytest.mark.skipif(
    not (PERF_ANALYZER / "bin" / "perf_analyzer").is_file(),
    reason="perf_analyzer is not installed (bash tools/perf_analyzer/setup.sh)",
)
def test_tiny_sweep_with_perf_analyzer(repository: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = [a for a in TINY if not a.startswith("--load-generator")]
    result = run(
        "simple",
        "--model-repository",
        str(repository),
        "--output-dir",
        str(out),
        "--load-generator=perf_analyzer",
        f"--perf-analyzer={PERF_ANALYZER / 'run.sh'}",
        *args,
    )
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    assert data["load_generator"] == "perf_analyzer"
    sweep = [r for r in data["rows"] if r["phase"] == "sweep"]
    assert len(sweep) == 4 and all(r["infer_per_s"] > 0 for r in sweep)
    assert all(0 < r["p50_ms"] <= r["p99_ms"] for r in sweep)


def test_unknown_model(repository: Path) -> None:
    result = run("nothing", "--model-repository", str(repository))
    assert result.exit_code == 1
    assert "model 'nothing' is not in the repository" in result.output


def test_space() -> None:
    onnx = {"backend": "onnxruntime", "max_batch_size": 8}
    quick = variants(onnx, exhaustive=False, cpu_count=2)
    assert quick[0].is_default and len(quick) == 1 + 2 * 2 * 2
    assert {v.instance_count for v in quick[1:]} == {1, 2}
    assert any(
        v.parameters == (("intra_op_thread_count", "1"), ("inter_op_thread_count", "1"))
        for v in quick
    )
    full = variants(onnx, exhaustive=True, cpu_count=2)
    assert len(full) > len(quick) and {v.max_batch_size for v in full} >= {16, 32}
    # no batching candidates for a model that does not batch, no threads for other backends
    plain = variants({"backend": "python", "max_batch_size": 0}, exhaustive=False)
    assert [v.name for v in plain] == ["default", "1inst", "2inst"]
    config = {
        "name": "m",
        "max_batch_size": 8,
        "dynamic_batching": {},
        "instance_group": [{"count": 3, "kind": "KIND_CPU"}],
    }
    v = Variant(
        "v",
        instance_count=2,
        dynamic_batching=True,
        queue_delay_us=100,
        preferred_batch_sizes=(4, 8),
        parameters=(("intra_op_thread_count", "1"),),
    )
    out = apply(config, v)
    assert out["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]
    assert out["dynamic_batching"] == {
        "max_queue_delay_microseconds": 100,
        "preferred_batch_size": [4, 8],
    }
    assert out["parameters"] == {"intra_op_thread_count": {"string_value": "1"}}
    assert "dynamic_batching" not in apply(config, Variant("n", dynamic_batching=False))
    assert config["instance_group"][0]["count"] == 3  # not changed in place
    assert "max_queue_delay_microseconds: 100" in to_pbtxt(out)


def test_registered_as_a_tritonx_command() -> None:
    group = click.Group()
    tritonx_tools_analyze.tritonx_register_commands(cli=group)
    assert group.commands["analyze"] is analyze
