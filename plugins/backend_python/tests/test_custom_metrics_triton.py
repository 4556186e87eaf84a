"""Custom metrics (``pb_utils.MetricFamily`` / ``Metric``) as Triton's qa
``L0_backend_python/custom_metrics`` sees them from inside ``execute``: a histogram's lines on
``/metrics`` as prometheus-cpp writes them (``le`` last), each observation there once
``observe()`` returned, the bucket checks, a family of the same name and another kind, and
the lifetime of a family's metrics (python_backend ``src/metric_family.cc``, ``src/metric.cc``;
core ``src/metric_family.cc``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http.aio as httpclient

from tritonx import Server
from tritonx.testing import loopback_settings

BOTH_MODES = pytest.mark.parametrize("mode", ["process", "in_process"])
LABELS = 'example1="histogram_label1",model="triton_metrics"'
CLEARED = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The "
    "'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have "
    "been deleted."
)


@pytest.fixture
def server_settings(model_repository, add_model):
    add_model(
        "triton_metrics",
        "triton_metrics",
        inputs=[("TEST", "BYTES", [1]), ("URL", "BYTES", [1])],
        outputs=[("OUT", "BYTES", [1])],
    )
    return loopback_settings(
        model_repository.root, model_control_mode="explicit", load_model=("triton_metrics",)
    )


async def run(server: Server, test: str) -> object:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        inputs = []
        for name, value in (("TEST", test), ("URL", server.metrics_url)):
            tensor = httpclient.InferInput(name, [1], "BYTES")
            tensor.set_data_from_numpy(np.array([value.encode()], dtype=object))
            inputs.append(tensor)
        result = await client.infer("triton_metrics", inputs)
    finally:
        await client.close()
    return json.loads(result.as_numpy("OUT")[0])


@BOTH_MODES
async def test_histogram_lines_are_triton_s(server: Server) -> None:
    seen = await run(server, "histogram")
    name = "tx_histogram_e2e"
    for line in (
        f"{name}_count{{{LABELS}}} 0\n",
        f"{name}_sum{{{LABELS}}} 0\n",
        f'{name}_bucket{{{LABELS},le="0.1"}} 0\n',
        f'{name}_bucket{{{LABELS},le="+Inf"}} 0\n',
    ):
        assert line in seen["before"]
    after = seen["after"]
    expected = [
        f"{name}_count{{{LABELS}}} 3\n",
        f"{name}_sum{{{LABELS}}} {sum([0.05, 1.5, 6.0])}\n",
        f'{name}_bucket{{{LABELS},le="0.1"}} 1\n',
        f'{name}_bucket{{{LABELS},le="1"}} 1\n',
        f'{name}_bucket{{{LABELS},le="2.5"}} 2\n',
        f'{name}_bucket{{{LABELS},le="5"}} 2\n',
        f'{name}_bucket{{{LABELS},le="10"}} 3\n',
        f'{name}_bucket{{{LABELS},le="+Inf"}} 3\n',
    ]
    for line in expected:
        assert line in after
    # prometheus-cpp's order: _count, _sum, then the buckets
    assert [after.index(line) for line in expected] == sorted(after.index(x) for x in expected)
    assert after.count(f"{name}_bucket{{{LABELS}") == 6


@BOTH_MODES
async def test_histogram_bucket_checks(server: Server) -> None:
    assert await run(server, "histogram_args") == {
        "missing": "TritonModelException: Failed to create metric. Missing required buckets.",
        "none": "TritonModelException: Failed to create metric. Missing required buckets.",
        "unsorted": "TritonModelException: Error when creating Metric: Bucket Boundaries "
        "must be strictly sorted",
        "duplicate": "TritonModelException: Error when creating Metric: Bucket Boundaries "
        "must be strictly sorted",
        "empty": "ok",
        "counter": "TritonModelException: Failed to create metric. Unexpected buckets found.",
        "tuple": "TritonModelException: Failed to create metric. Buckets must be a list.",
    }


@BOTH_MODES
async def test_family_of_another_kind_is_refused(server: Server) -> None:
    assert await run(server, "dup_family_diff_kind") == {
        "gauge": "TritonModelException: Error when creating MetricFamily: Family name already "
        "exists with different type",
        "counter": "ok",
    }


@BOTH_MODES
async def test_each_kind_refuses_what_it_does_not_support(server: Server) -> None:
    def failed(operation: str, text: str) -> str:
        return f"TritonModelException: Failed to {operation} metric value: {text}"

    assert await run(server, "misuse") == {
        "tx_misuse_counter": {
            "increment": failed(
                "increment",
                "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
                "non-negative values.",
            ),
            "set": failed("set", "TRITONSERVER_METRIC_KIND_COUNTER does not support Set"),
            "observe": failed(
                "observe", "TRITONSERVER_METRIC_KIND_COUNTER does not support Observe"
            ),
        },
        "tx_misuse_gauge": {
            "increment": "ok",
            "set": "ok",
            "observe": failed("observe", "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe"),
        },
        "tx_misuse_histogram": {
            "increment": failed(
                "increment", "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment"
            ),
            "set": failed("set", "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Set"),
            "observe": "ok",
        },
    }


@BOTH_MODES
async def test_metric_after_its_family_is_gone(server: Server) -> None:
    seen = await run(server, "lifetime")
    for ops in seen.values():
        assert ops == {
            "increment": f"TritonModelException: Failed to increment metric value: {CLEARED}",
            "set": f"TritonModelException: Failed to set metric value: {CLEARED}",
            "observe": f"TritonModelException: Failed to observe metric value: {CLEARED}",
            "value": f"TritonModelException: Failed to get metric value: {CLEARED}",
        }
