"""The example backend inherits the whole backend contract suite, plus one numeric check."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

import tritonx
from tritonx.testing import BackendContract, ModelRepositoryBuilder

pytest.importorskip("tritonx_backend_linear")

W = np.arange(6, dtype=np.float32).reshape(3, 2)
B = np.array([0.5, -0.5], np.float32)


def npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


class TestLinearBackend(BackendContract):
    backend_module = "tritonx_backend_linear"
    plugins = ("backend_linear",)

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder) -> Path:
        return model_repository.add(
            "lin",
            backend="linear",
            max_batch_size=8,
            inputs=[("INPUT0", "FP32", [3])],
            outputs=[("OUTPUT0", "FP32", [2])],
            versions={1: {"model.npz": npz(W=W, b=B)}},
            extra="dynamic_batching { max_queue_delay_microseconds: 500 }\n"
            "instance_group [ { count: 2, kind: KIND_CPU } ]\n",
        )

    async def test_values(self, server: tritonx.Server, model: Path) -> None:
        x = np.ones((2, 3), np.float32)
        response = await server.infer(tritonx.InferenceRequest("lin", {"INPUT0": x}))
        np.testing.assert_allclose(response.outputs["OUTPUT0"], x @ W + B)
