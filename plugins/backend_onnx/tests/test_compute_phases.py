"""Triton's compute phases for ONNX models: the backend marks when its inputs are ready and
when ONNX Runtime returned, so ``compute_input`` / ``compute_output`` are measured (not 0) in
the statistics extension and in ``nv_inference_compute_{input,output}_duration_us``; a
backend that marks nothing keeps them at 0 with the whole ``execute`` as compute infer."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from aiohttp import ClientSession

from tritonx import Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, identity, loopback_settings

pytest.importorskip("onnxruntime")
from tritonx_backend_onnx.models import add_sub


def _inputs(rows: int) -> list[httpclient.InferInput]:
    out = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [rows, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((rows, 4), np.float32))
        out.append(tensor)
    return out


def _metric(text: str, name: str, model: str) -> float:
    found = re.search(rf'^{name}{{model="{model}",version="1"}} (\S+)$', text, re.MULTILINE)
    assert found, f"{name} for {model} missing"
    return float(found.group(1))


async def test_onnx_compute_input_and_output_are_measured(
    model_repository: ModelRepositoryBuilder,
) -> None:
    model_repository.add(
        "addsub",
        backend="onnxruntime",
        max_batch_size=8,
        inputs=[("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
        versions={1: {"model.onnx": add_sub()}},
        extra="dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
        "instance_group [ { count: 1, kind: KIND_CPU } ]\n",
    )
    model_repository.add_identity("echo", dims=[4], max_batch_size=8)
    pm = make_plugin_manager(autoload=True, only=["backend_onnx"], extra=[identity])
    async with Server(loopback_settings(model_repository.root), plugin_manager=pm) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            # concurrent requests: the dynamic batcher runs several as one batch
            await asyncio.gather(*(http.infer("addsub", _inputs(1 + i % 2)) for i in range(12)))
            echo = httpclient.InferInput("INPUT0", [1, 4], "FP32")
            echo.set_data_from_numpy(np.ones((1, 4), np.float32))
            await http.infer("echo", [echo])

            stats = (await http.get_inference_statistics("addsub"))["model_stats"][0]
            inference = stats["inference_stats"]
            for phase in ("compute_input", "compute_infer", "compute_output"):
                assert inference[phase]["count"] == 12
                assert inference[phase]["ns"] > 0, phase
            assert stats["execution_count"] < 12  # some requests ran together
            for batch in stats["batch_stats"]:
                assert batch["compute_input"]["ns"] > 0
                assert batch["compute_output"]["ns"] > 0
            grpc_stats = await grpc.get_inference_statistics("addsub", as_json=True)
            row = grpc_stats["model_stats"][0]["inference_stats"]
            assert int(row["compute_input"]["ns"]) == inference["compute_input"]["ns"]

            # a backend that marks no phase: input and output stay 0, counted all the same
            echo_stats = (await http.get_inference_statistics("echo"))["model_stats"][0]
            plain = echo_stats["inference_stats"]
            assert plain["compute_input"] == {"count": 1, "ns": 0}
            assert plain["compute_output"] == {"count": 1, "ns": 0}
            assert plain["compute_infer"]["ns"] > 0

            async with ClientSession() as session:
                async with session.get(f"http://{server.metrics_url}/metrics") as reply:
                    text = await reply.text()
            for name in (
                "nv_inference_compute_input_duration_us",
                "nv_inference_compute_output_duration_us",
            ):
                assert _metric(text, name, "addsub") > 0
                assert _metric(text, name, "echo") == 0
        finally:
            await http.close()
            await grpc.close()
