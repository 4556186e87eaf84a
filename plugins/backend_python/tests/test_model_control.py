"""Model control from a model, as Triton documents it (python_backend README "Model Loading
API", ``src/model_loader.cc``): ``pb_utils.load_model(model_name=..., config=..., files=...)``
loads through the server's repository API (a config override and ``file:`` contents),
``unload_model`` unloads, ``is_model_ready`` answers; outside the explicit model-control mode
the load and unload are refused with the core's message. In both execution modes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tritonx import InferenceRequest, Server
from tritonx.testing import loopback_settings

BOTH_MODES = pytest.mark.parametrize("mode", ["process", "in_process"])
MODELS = Path(__file__).parent / "models"
ADD_SUB_CONFIG = json.dumps(
    {
        "backend": "python",
        "input": [
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]},
        ],
        "output": [
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]},
        ],
    }
)


@pytest.fixture
def control_mode() -> str:
    return "explicit"


@pytest.fixture
def server_settings(model_repository, add_model, control_mode):
    add_model("controller", "controller", outputs=[("RESULT", "BYTES", [1])])
    return loopback_settings(
        model_repository.root,
        model_control_mode=control_mode,
        load_model=("controller",) if control_mode == "explicit" else (),
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )


async def control(server: Server, **parameters: str) -> str:
    response = await server.infer(InferenceRequest("controller", {}, parameters=parameters))
    return response.outputs["RESULT"][0].decode()


def add_sub_inputs() -> dict[str, np.ndarray]:
    return {"INPUT0": np.ones(4, np.float32), "INPUT1": np.full(4, 2, np.float32)}


@BOTH_MODES
async def test_load_with_config_and_files_then_unload(server: Server) -> None:
    """A model that exists only in the call: its config and its model.py are given."""
    assert await control(server, op="ready", name="made", version="") == "False"
    loaded = await control(
        server,
        op="load",
        name="made",
        config=ADD_SUB_CONFIG,
        source_path=str(MODELS / "add_sub.py"),
    )
    assert loaded == "ok"
    assert server.model_ready("made")
    assert await control(server, op="ready", name="made", version="1") == "True"
    assert await control(server, op="ready", name="made", version="2") == "False"
    response = await server.infer(InferenceRequest("made", add_sub_inputs()))
    assert response.outputs["OUTPUT0"].tolist() == [3, 3, 3, 3]
    assert await control(server, op="unload", name="made") == "ok"
    assert not server.model_ready("made")
    assert await control(server, op="ready", name="made", version="") == "False"


@BOTH_MODES
async def test_triton_texts_for_wrong_arguments(server: Server) -> None:
    assert await control(server, op="bad_files", name="made") == (
        "failed to load model 'made', files should be a dictionary of file paths and file contents"
    )
    assert await control(server, op="ready", name="made", version="abc") == (
        "failed to get model version from specified version string 'abc' (details: stol), "
        "version should be an integral value > 0"
    )
    assert await control(server, op="ready", name="made", version="-1") == (
        "failed to get model version from specified version string '-1', version should be "
        "an integral value > 0"
    )
    # a load the server refuses: its error reaches the model
    failed = await control(server, op="load", name="nothing_here")
    assert "nothing_here" in failed and failed != "ok"


@BOTH_MODES
@pytest.mark.parametrize("control_mode", ["none", "poll"])
async def test_refused_outside_explicit_mode(server: Server) -> None:
    refused = "explicit model load / unload is not allowed if polling is enabled"
    assert await control(server, op="load", name="controller") == refused
    assert await control(server, op="unload", name="controller") == refused
    assert await control(server, op="ready", name="controller", version="1") == "True"
