"""A python model that loads another model from its ``initialize`` (python_backend README
"Model Loading API", Triton's qa/python_models/bls_model_loading): ``pb_utils.is_model_ready``,
``pb_utils.load_model(model_name=..., config=..., files=...)``; the loaded model is then
served to ``tritonclient`` clients. The loading model is loaded at the server's start
(``--load-model``, alone or with ``*``) or later by a client's load request, in the explicit
model-control mode; outside it the load is refused with the core's message (Triton's
``ModelRepositoryManager::LoadUnloadModel``). In both execution modes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient

from tritonx import Server
from tritonx.testing import loopback_settings

BOTH_MODES = pytest.mark.parametrize("mode", ["process", "in_process"])
MODELS = Path(__file__).parent / "models"
ADD_SUB_IO = {
    "inputs": [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
    "outputs": [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
}
#: the config of a model that exists only in the load call (its model.py is a file override)
MADE_CONFIG = json.dumps(
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
REFUSED = "explicit model load / unload is not allowed if polling is enabled"

#: flow → (model control mode, models loaded at the start, the loader's parameters)
FLOWS = {
    "at_start": ("explicit", ("loader",), {"LOAD_NAME": "add_sub"}),
    "at_start_with_all": ("explicit", ("*",), {"LOAD_NAME": "add_sub"}),
    "by_client": ("explicit", (), {"LOAD_NAME": "add_sub"}),
    "files_at_start": (
        "explicit",
        ("loader",),
        {
            "LOAD_NAME": "made",
            "LOAD_CONFIG_FILE": "made.json",
            "LOAD_SOURCE": str(MODELS / "add_sub.py"),
        },
    ),
    "files_by_client": (
        "explicit",
        (),
        {
            "LOAD_NAME": "made",
            "LOAD_CONFIG_FILE": "made.json",
            "LOAD_SOURCE": str(MODELS / "add_sub.py"),
        },
    ),
    "none_mode": ("none", (), {"LOAD_NAME": "add_sub"}),
    # Triton's bls_model_loading: a client loads the model that runs the checks
    "triton_checks": ("explicit", (), {}),
}


@pytest.fixture
def flow() -> str:
    return "at_start"


@pytest.fixture
def server_settings(model_repository, add_model, flow, mode, tmp_path):
    control, at_start, parameters = FLOWS[flow]
    if flow == "triton_checks":
        add_triton_checks(model_repository, add_model, mode, tmp_path)
        return loopback_settings(
            model_repository.root, model_control_mode=control, allow_metrics=False
        )
    if "LOAD_CONFIG_FILE" in parameters:
        config_file = tmp_path / parameters["LOAD_CONFIG_FILE"]
        config_file.write_text(MADE_CONFIG)
        parameters = {**parameters, "LOAD_CONFIG_FILE": str(config_file)}
    add_model("add_sub", "add_sub", **ADD_SUB_IO)
    add_model(
        "loader",
        "initialize_loader",
        outputs=[("RESULT", "BYTES", [1])],
        parameters=parameters,
    )
    return loopback_settings(
        model_repository.root,
        model_control_mode=control,
        load_model=at_start,
        allow_metrics=False,
    )


async def loader_result(client, module) -> str:
    result = await client.infer("loader", [])
    return result.as_numpy("RESULT")[0].decode()


async def add_sub(client, module, name: str) -> list[float]:
    inputs = []
    for key, value in (("INPUT0", 1.0), ("INPUT1", 2.0)):
        tensor = module.InferInput(key, [4], "FP32")
        tensor.set_data_from_numpy(np.full(4, value, np.float32))
        inputs.append(tensor)
    result = await client.infer(name, inputs)
    return result.as_numpy("OUTPUT0").tolist()


CLIENTS = pytest.mark.parametrize("client_kind", ["http", "grpc"])


@pytest.fixture
def client_kind() -> str:
    return "http"


@pytest.fixture
async def client(server: Server, client_kind: str):
    module = httpclient if client_kind == "http" else grpcclient
    url = server.http_url if client_kind == "http" else server.grpc_url
    conn = module.InferenceServerClient(url)
    try:
        yield conn, module
    finally:
        await conn.close()


@BOTH_MODES
@CLIENTS
@pytest.mark.parametrize(
    "flow", ["at_start", "at_start_with_all", "by_client", "files_at_start", "files_by_client"]
)
async def test_the_loaded_model_is_served(client, flow: str) -> None:
    conn, module = client
    if FLOWS[flow][1] == ():  # a client loads the loading model
        await conn.load_model("loader")
    loaded = FLOWS[flow][2]["LOAD_NAME"]
    result = await loader_result(conn, module)
    assert result.endswith("load=ok after=True"), result
    if flow != "at_start_with_all":  # there the start may have loaded add_sub first
        assert result.startswith("before=False "), result
    assert await conn.is_model_ready(loaded)
    assert await add_sub(conn, module, loaded) == [3.0] * 4
    index = await conn.get_model_repository_index()
    names = [m["name"] for m in index] if module is httpclient else [m.name for m in index.models]
    assert loaded in names


@BOTH_MODES
@pytest.mark.parametrize("flow", ["none_mode"])
async def test_refused_outside_explicit_mode(client, flow: str) -> None:
    """Under the default mode (NONE) every model of the repository is loaded at the start,
    and a model's load request is refused with the core's message."""
    conn, module = client
    result = await loader_result(conn, module)
    # (add_sub loads at the same time: whether it was ready then is a race)
    assert result.split(" load=")[1].split(" after=")[0] == REFUSED, result
    assert await add_sub(conn, module, "add_sub") == [3.0] * 4


def add_triton_checks(model_repository, add_model, mode: str, tmp_path: Path) -> None:
    """Triton's bls_model_loading set-up: a model of versions 2 and 3 (policy "all") and the
    model whose ``initialize`` runs the checks (``models/loading_checks.py``)."""
    code = (MODELS / "sum_diff.py").read_text()
    model_repository.add(
        "int32_model",
        backend="python",
        parameters={"TRITONX_EXECUTION_MODE": mode} if mode != "process" else None,
        versions={2: {"model.py": code}, 3: {"model.py": code}},
        extra="version_policy: { all { }}\n",
        **ADD_SUB_IO,  # type: ignore[arg-type]
    )
    config_file = tmp_path / "override.json"
    config_file.write_text(MADE_CONFIG)
    add_model(
        "bls_model_loading",
        "loading_checks",
        outputs=[("RESULT", "BYTES", [1])],
        parameters={
            "LOAD_NAME": "int32_model",
            "FILE_SOURCE": str(MODELS / "sum_diff.py"),
            "FILE_CONFIG": str(config_file),
        },
    )


@BOTH_MODES
@CLIENTS
@pytest.mark.parametrize("flow", ["triton_checks"])
async def test_triton_model_loading_checks(client, flow: str) -> None:
    """A client loads the model after the start (Triton's flow); every check passes, and
    what they leave is served: the override model, not the model they unloaded."""
    conn, module = client
    await conn.load_model("bls_model_loading")
    result = await conn.infer("bls_model_loading", [])
    assert result.as_numpy("RESULT")[0].decode() == "ok"
    assert await add_sub(conn, module, "override_model") == [3.0] * 4
    assert not await conn.is_model_ready("int32_model")
