"""``nv_inference_request_failure`` as Triton exposes it (core ``metric_model_reporter.cc``,
server ``docs/user_guide/metrics.md``): one series per reason (REJECTED, CANCELED, BACKEND,
OTHER) from the load on, labels written sorted by name as prometheus-cpp writes them, so the
exposition lines scrapers and Triton's own tests match are found as they are."""

from __future__ import annotations

import aiohttp
import numpy as np
import pytest
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

from tritonx import Server
from tritonx.config import ServerSettings
from tritonx.testing import ModelRepositoryBuilder, loopback_settings


@pytest.fixture
def server_settings(model_repository: ModelRepositoryBuilder) -> ServerSettings:
    for name, extra in (
        ("plain", ""),
        ("tagged", 'metric_tags { key: "team" value: "search" }'),
    ):
        model_repository.add_identity(
            name,
            datatype="INT32",
            dims=[1],
            max_batch_size=4,
            parameters={"fail_value": "13"},
            extra=extra,
        )
    return loopback_settings(model_repository.root, allow_grpc=False)


async def _lines(server: Server) -> list[str]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{server.metrics_url}/metrics") as resp:
            return (await resp.text()).splitlines()


def _input(value: int, datatype: str = "INT32") -> httpclient.InferInput:
    tensor = httpclient.InferInput("INPUT0", [1, 1], datatype)
    dtype = np.int32 if datatype == "INT32" else np.float32
    tensor.set_data_from_numpy(np.full((1, 1), value, dtype))
    return tensor


async def test_failure_series_have_tritons_labels_in_tritons_order(server: Server) -> None:
    before = await _lines(server)
    for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
        assert f'nv_inference_request_failure{{model="plain",reason="{reason}",version="1"}} 0' in (
            before
        )
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        for model in ("plain", "tagged"):
            await client.infer(model, [_input(1)])
            with pytest.raises(InferenceServerException):  # the model fails it: BACKEND
                await client.infer(model, [_input(13)])
            with pytest.raises(InferenceServerException):  # refused by the core: OTHER
                await client.infer(model, [_input(1, "FP32")])
    finally:
        await client.close()
    lines = await _lines(server)
    for reason, count in (("REJECTED", 0), ("CANCELED", 0), ("BACKEND", 1), ("OTHER", 1)):
        # the line Triton's QA tests (L0_model_queue, L0_request_cancellation) look for
        assert (
            f'nv_inference_request_failure{{model="plain",reason="{reason}",version="1"}} {count}'
            in lines
        )
        # a metric tag's label ("_team") sorts first
        assert (
            f'nv_inference_request_failure{{_team="search",model="tagged",reason="{reason}",'
            f'version="1"}} {count}' in lines
        )
    assert 'nv_inference_request_success{model="plain",version="1"} 1' in lines
    assert 'nv_inference_request_success{_team="search",model="tagged",version="1"} 1' in lines
    assert "# TYPE nv_inference_request_failure counter" in lines
