"""The ``textfile`` example sink: at shutdown the file holds the server's metrics (Triton's
and the process ones the sink added, in the text format node_exporter reads), the process
metrics are on ``/metrics`` too, and a path the textfile collector would skip is refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import aiohttp
import numpy as np
import pluggy
import pytest
from prometheus_client.parser import text_string_to_metric_families

import tritonx
from tritonx.testing import ModelRepositoryBuilder, serve_repository


def samples(text: str) -> dict[str, float]:
    """Sample name and ``model`` label -> value (the other labels dropped)."""
    return {
        f"{s.name}{s.labels.get('model', '')}": s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_writes_the_servers_metrics_to_the_file(
    example: ModuleType,
    register_plugin: Callable[[object], None],
    plugin_manager: pluggy.PluginManager,
    model_repository: ModelRepositoryBuilder,
    tmp_path: Path,
) -> None:
    model_repository.add_identity("echo", datatype="INT32", dims=[1])
    register_plugin(example)
    prom = tmp_path / "tritonx.prom"
    async with serve_repository(
        model_repository,
        plugin_manager,
        metric_sinks={"textfile": {"path": str(prom)}},
        allow_http=False,
        allow_grpc=False,
    ) as server:
        for value in range(3):
            request = tritonx.InferenceRequest("echo", {"INPUT0": np.array([value], np.int32)})
            await server.infer(request)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://{server.metrics_url}/metrics") as resp:
                assert "process_cpu_seconds_total" in samples(await resp.text())
    written = samples(prom.read_text())  # the export at shutdown
    assert written["nv_inference_request_successecho"] == 3
    assert written["process_resident_memory_bytes"] > 0


def test_a_path_the_collector_skips_is_refused(example: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(tritonx.TritonXError, match=r"needs path=<file>\.prom"):
        example.TextfileSink({"path": str(tmp_path / "metrics.txt")})
