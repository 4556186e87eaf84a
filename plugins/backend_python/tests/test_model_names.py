"""Model names with shell metacharacters, loaded through the load API with a config and a
model.py (as Triton's ``L0_backend_python/model_control`` test sends them): Triton's python
backend refuses to start a stub for them (``Invalid stub name: contains invalid
characters``), so the load fails and nothing serves under that name; ordinary names load."""

from __future__ import annotations

import json

import pytest
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

from tritonx import Server
from tritonx.testing import loopback_settings

MODEL_PY = b"""import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""
# every character of Triton's INVALID_CHARS (";|&$`<>()[]{}\\\"'*?~#!")
INVALID = [f"model{c}test" for c in ";|&$`<>()[]{}\\\"'*?~#!"]


@pytest.fixture
def server_settings(model_repository):
    return loopback_settings(model_repository.root, model_control_mode="explicit")


def config(name: str) -> str:
    return json.dumps(
        {
            "name": name,
            "backend": "python",
            "max_batch_size": 4,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        }
    )


async def test_names_with_shell_metacharacters_are_refused(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    try:
        for name in INVALID:
            with pytest.raises(InferenceServerException) as err:
                await client.load_model(
                    name, config=config(name), files={"file:1/model.py": MODEL_PY}
                )
            assert "Invalid stub name: contains invalid characters" in err.value.message(), name
            assert err.value.status() == "400", name
            assert not await client.is_model_ready(name)
        for name in ("TestModel123", "model-with-hyphens", "model_with_underscores"):
            await client.load_model(name, config=config(name), files={"file:1/model.py": MODEL_PY})
            assert await client.is_model_ready(name)
    finally:
        await client.close()
