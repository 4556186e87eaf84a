"""The metrics endpoint parsed with prometheus_client's parser, against the traffic sent and
the statistics endpoint."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tritonx import InferenceRequest, Server
from tritonx.config import ServerSettings
from tritonx.errors import TritonXError
from tritonx.testing import ModelRepositoryBuilder, loopback_settings


@pytest.fixture
def server_settings(model_repository: ModelRepositoryBuilder) -> ServerSettings:
    model_repository.add_identity(
        "id",
        datatype="INT32",
        dims=[1],
        max_batch_size=4,
        parameters={"fail_value": "13"},
        extra='metric_tags { key: "team" value: "search" }',
    )
    return loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        metrics_config={"summary_latencies": "true", "histogram_latencies": "true"},
    )


async def scrape(server: Server) -> tuple[str, dict[str, Any]]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{server.metrics_url}/metrics") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
            text = await resp.text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    return text, families


def value(families: dict[str, Any], name: str, **labels: str) -> float:
    # the parser reports counter samples as <name>_total, whatever the text says
    for sample in families[
        name.removesuffix("_count").removesuffix("_bucket") if name not in families else name
    ].samples:
        if sample.name in (name, name + "_total") and all(
            sample.labels.get(k) == v for k, v in labels.items()
        ):
            return float(sample.value)
    raise AssertionError(f"no sample {name} {labels}")


async def test_metrics_match_traffic_and_statistics(server: Server) -> None:
    for i in range(5):
        await server.infer(InferenceRequest("id", {"INPUT0": np.full((2, 1), i, np.int32)}))
    with pytest.raises(TritonXError):
        await server.infer(InferenceRequest("id", {"INPUT0": np.full((1, 1), 13, np.int32)}))
    with pytest.raises(TritonXError):
        await server.infer(InferenceRequest("id", {"INPUT0": np.zeros((1, 1), np.float32)}))

    text, fam = await scrape(server)
    labels = {"model": "id", "version": "1", "_team": "search"}
    # Triton's names: counters without a _total suffix
    assert (
        "\nnv_inference_request_success{" in text
        and "nv_inference_request_success_total" not in text
    )
    assert "# TYPE nv_inference_request_success counter" in text
    assert value(fam, "nv_inference_request_success", **labels) == 5
    assert value(fam, "nv_inference_request_failure", reason="BACKEND", **labels) == 1
    assert value(fam, "nv_inference_request_failure", reason="OTHER", **labels) == 1
    assert value(fam, "nv_inference_request_failure", reason="REJECTED", **labels) == 0
    assert value(fam, "nv_inference_count", **labels) == 11  # 5 x 2 items + the failing one
    assert value(fam, "nv_inference_exec_count", **labels) == 6
    assert value(fam, "nv_inference_pending_request_count", **labels) == 0

    ((_, _, stats),) = server.model_statistics("id")
    assert value(fam, "nv_inference_request_duration_us", **labels) == stats.success.ns // 1000
    assert value(fam, "nv_inference_queue_duration_us", **labels) == stats.queue.ns // 1000
    assert (
        value(fam, "nv_inference_compute_infer_duration_us", **labels)
        == stats.compute_infer.ns // 1000
    )
    assert stats.success.count == 5 and stats.fail.count == 2
    assert stats.inference_count == 11 and stats.execution_count == 6

    summary = fam["nv_inference_request_summary_us"]
    assert summary.type == "summary"
    assert {s.labels.get("quantile") for s in summary.samples if "quantile" in s.labels} >= {
        "0.5",
        "0.99",
    }
    hist = fam["nv_inference_first_response_histogram_ms"]
    assert hist.type == "histogram"
    assert value(fam, "nv_inference_first_response_histogram_ms_count", **labels) == 5
    assert 0.0 <= value(fam, "nv_cpu_utilization") <= 1.0
    assert value(fam, "nv_cpu_memory_total_bytes") >= value(fam, "nv_cpu_memory_used_bytes") > 0
    assert value(fam, "nv_model_load_duration_secs", **labels) >= 0


async def test_metrics_endpoint_quirks(server: Server) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{server.metrics_url}/other") as resp:
            assert resp.status == 200 and await resp.read() == b""
        async with session.post(f"http://{server.metrics_url}/metrics") as resp:
            assert resp.status == 405
        async with session.get(f"http://{server.metrics_url}/metrics/") as resp:
            assert resp.status == 200 and "nv_inference_count" in await resp.text()


async def test_the_metrics_listener_serves_no_inference(server: Server) -> None:
    """An ``/infer`` request that the inference listener's fast path would serve (plain
    POST, Content-Length, JSON) gets the metrics app's answer on the metrics port, no
    inference: the metrics address may be public where the HTTP one is not."""
    body = b'{"inputs":[{"name":"INPUT0","shape":[1,1],"datatype":"INT32","data":[7]}]}'
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"http://{server.metrics_url}/v2/models/id/infer", data=body
        ) as resp:
            assert resp.status == 405
            assert b"outputs" not in await resp.read()
    assert server.model_statistics("id")[0][2].inference_count == 0


async def test_unloaded_models_leave_the_metrics(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    model_repository.add_identity("gone", datatype="INT32", dims=[1])
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        model_control_mode="explicit",
        load_model=("gone",),
    )
    async with Server(settings, plugin_manager=plugin_manager) as srv:
        text, _ = await scrape(srv)
        assert 'model="gone"' in text
        await srv.unload_model("gone")
        text, _ = await scrape(srv)
        assert 'model="gone"' not in text


def test_metrics_config_is_checked() -> None:
    from tritonx._core.metrics import MetricsOptions

    with pytest.raises(TritonXError, match="unknown --metrics-config"):
        MetricsOptions.from_config({"bogus": "1"})
    opts = MetricsOptions.from_config(
        {"summary_quantiles": "0.5:0.05,0.9:0.01", "counter_latencies": "false"}
    )
    assert opts.quantiles == ((0.5, 0.05), (0.9, 0.01)) and not opts.counter_latencies


async def test_metric_sinks_add_collectors(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    from prometheus_client.core import GaugeMetricFamily

    import tritonx

    class Temperature:
        def collect(self) -> Any:
            yield GaugeMetricFamily(
                "acme_board_temperature_celsius", "Board temperature", value=42.0
            )

    exported: list[tuple[str, dict[str, float]]] = []

    class Sink(tritonx.MetricSink):
        name = "acme"

        def collectors(self) -> Any:
            return [Temperature()]

        def export(self, registry: Any) -> None:
            samples = {
                f"{s.name}{sorted(s.labels.items())}": s.value
                for family in registry.collect()
                for s in family.samples
            }
            exported.append((self.config["target"], samples))

    class Unused(tritonx.MetricSink):
        name = "unused"

        def collectors(self) -> Any:
            raise AssertionError("a sink not named in --metric-sink is never built")

    class Plugin:
        @tritonx.hookimpl
        def tritonx_register_metric_sinks(self, registry: tritonx.MetricSinkRegistry) -> None:
            registry.add(Sink)
            registry.add(Unused)

    plugin_manager.register(Plugin())
    model_repository.add_identity("id", datatype="INT32", dims=[1])
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_cpu_metrics=False,
        metric_sinks={"acme": {"target": "board-1"}},
        metrics_interval_ms=50,
    )
    async with Server(settings, plugin_manager=plugin_manager) as srv:
        text, fam = await scrape(srv)
        await asyncio.sleep(0.3)
    assert value(fam, "acme_board_temperature_celsius") == 42.0
    # export() ran periodically (and once at stop) with its own settings, on a registry
    # holding Triton's nv_* families and the sink's collector
    assert len(exported) >= 2
    target, samples = exported[-1]
    assert target == "board-1"
    assert samples["acme_board_temperature_celsius[]"] == 42.0
    assert any(k.startswith("nv_inference_count[") for k in samples)

    bad = loopback_settings(model_repository.root, metric_sinks={"nosuch": {}})
    with pytest.raises(tritonx.PluginError, match="unknown metric sink 'nosuch'"):
        async with Server(bad, plugin_manager=plugin_manager):
            pass
    assert "nv_cpu_utilization" not in text
