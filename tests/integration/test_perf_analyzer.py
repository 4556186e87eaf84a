"""Smoke test: NVIDIA's C++ perf_analyzer (from the tritonclient 2.41.0 wheel) drives tritonx
over gRPC and HTTP and measures nonzero throughput.

Needs ``bash tools/perf_analyzer/setup.sh`` once; skipped otherwise.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tritonx.config import ServerSettings
from tritonx.testing import ModelRepositoryBuilder, ServerThread, loopback_settings

TOOLS = Path(__file__).resolve().parents[2] / "tools" / "perf_analyzer"
RUN = TOOLS / "run.sh"
BINARY = TOOLS / "bin" / "perf_analyzer"

pytestmark = pytest.mark.skipif(
    not BINARY.exists(),
    reason=f"perf_analyzer is not set up: run `bash {TOOLS / 'setup.sh'}`",
)


@pytest.fixture
def server_settings(model_repository: ModelRepositoryBuilder) -> ServerSettings:
    model_repository.add_identity("identity_fp32", max_batch_size=8, dims=[16])
    return loopback_settings(model_repository.root, allow_metrics=False)


def run_perf_analyzer(url: str, protocol: str) -> str:
    command = [
        str(RUN),
        "-m",
        "identity_fp32",
        "-u",
        url,
        "-i",
        protocol,
        "--measurement-interval",
        "500",
        "--concurrency-range",
        "1:2",
        # a smoke test of the protocol, not a measurement: any spread between windows is
        # stable enough (a loaded CI machine otherwise fails "stable measurement")
        "--stability-percentage",
        "999",
        "--max-trials",
        "6",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def throughputs(output: str) -> list[float]:
    return [float(x) for x in re.findall(r"Throughput: ([0-9.]+) infer/sec", output)]


def test_perf_analyzer_grpc(server_thread: ServerThread) -> None:
    output = run_perf_analyzer(server_thread.server.grpc_url, "grpc")
    found = throughputs(output)
    assert len(found) >= 2 and all(t > 0 for t in found), output
    assert "Concurrency: 2, throughput:" in output


def test_perf_analyzer_http(server_thread: ServerThread) -> None:
    output = run_perf_analyzer(server_thread.server.http_url, "http")
    found = throughputs(output)
    assert len(found) >= 2 and all(t > 0 for t in found), output
    assert "Concurrency: 2, throughput:" in output
