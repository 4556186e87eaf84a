"""The memory budget against a client that inflates its zero: a real ``tritonx serve``
subprocess serving Python models, driven by the real tritonclient gRPC and HTTP clients.

The budget's zero is measured when a load finds no model loaded
(:mod:`tritonx._core.memory_accounting`, rule 2). A gRPC message is received whole before
its model is looked up, so the first request for a model (none loaded) holds its message in
the server while that zero is measured: a large one moves the zero up by its size, and once
it is freed the growth over the zero hid that much of the models' memory (a 400 MiB first
message let a budget of two models hold five, billing 0 bytes). What is billed is never less
than the loaded models' footprints: the budget still holds two.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tritonx.testing import ModelRepositoryBuilder, ServeProcess

pytest.importorskip("tritonx_backend_python", reason="needs the Python backend plugin")

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="the budgets measure memory through /proc"
)

MiB = 1 << 20
ON_DEMAND = (
    "--model-control-mode=explicit",
    "--model-load-on-demand=true",
    "--model-min-residency-secs=0",
)
MODELS = ("m0", "m1", "m2", "m3")
#: the first request's message: larger than what the budget leaves past two models
LARGE = 256 * MiB

#: OUTPUT0: how many values INPUT0 has; 32 MiB held from ``initialize`` on (all touched)
PYTHON_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.ballast = np.ones(32 << 20, dtype=np.uint8)

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", np.array([data.size], dtype=np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    for name in MODELS:
        repo.add(
            name,
            backend="python",
            extra="instance_group [ { count: 1, kind: KIND_CPU } ]\n",
            versions={1: {"model.py": PYTHON_MODEL}},
            inputs=[("INPUT0", "FP32", [-1])],
            outputs=[("OUTPUT0", "FP32", [1])],
        )
    return repo.root


def infer(client: httpclient.InferenceServerClient, model: str) -> None:
    tensor = httpclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(np.ones(4, np.float32))
    assert client.infer(model, [tensor]).as_numpy("OUTPUT0").tolist() == [4.0]


def footprints(metrics: dict[Any, float]) -> dict[str, float]:
    """``tritonx_model_memory_bytes`` by model: the loaded models' footprints."""
    return {
        dict(labels)["model"]: value
        for (name, labels), value in metrics.items()
        if name == "tritonx_model_memory_bytes"
    }


def test_a_large_first_message_does_not_make_room_for_more_models(
    repository: Path, tmp_path: Path
) -> None:
    roomy = (*ON_DEMAND, f"--model-memory-budget={1 << 34}")
    with ServeProcess(
        repository, tmp_path / "roomy.log", *roomy, listeners=("http", "metrics")
    ) as s:
        client = httpclient.InferenceServerClient(s.http_url)
        try:
            infer(client, "m0")
        finally:
            client.close()
        size = footprints(s.metrics())["m0"]
    budget = int(2.5 * size)  # room for two models, never three
    options = (*ON_DEMAND, f"--model-memory-budget={budget}")
    with ServeProcess(repository, tmp_path / "serve.log", *options) as server:
        large = grpcclient.InferInput("INPUT0", [LARGE // 4], "FP32")
        large.set_data_from_numpy(np.ones(LARGE // 4, np.float32))
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        client = httpclient.InferenceServerClient(server.http_url)
        held: list[dict[str, float]] = []
        try:
            answer = grpc.infer("m0", [large]).as_numpy("OUTPUT0")  # loads m0: the zero measured
            assert answer is not None and answer.tolist() == [LARGE // 4]
            del large
            for model in MODELS[1:]:
                infer(client, model)
                held.append(footprints(server.metrics()))
        finally:
            client.close()
            grpc.close()
        log = server.log_text()
    for loaded in held:
        assert len(loaded) <= 2 and sum(loaded.values()) <= budget, (held, log)
