"""Texts clients match, third part (issue #53 D), word for word as Triton's:

* a load whose model is no folder, or whose config Triton's poll refuses (a config naming
  another model, as server ``qa/L0_backend_python/model_control`` sends ``model{test}`` with
  curl, which strips the braces from the URL; an empty ``config.pbtxt`` whose backend cannot
  be inferred): ``failed to load '<m>', failed to poll from model repository``
  (core ``model_repository_manager.cc``, ``LoadUnloadModel`` / ``InitializeModelInfo``);
* a backend that is not installed: each version fails as Triton's ``TritonModel::Create``
  does, its reason ``Invalid argument: unable to find backend library ...`` in the index,
  the load API's ``version <v> is at UNAVAILABLE state: ...;`` and the start-up log;
* an empty ``config.pbtxt`` completed from the model file's name (``AutoCompleteBackendFields``);
* ``/generate`` over ``--http-max-input-size`` with an ``Inference-Header-Content-Length``
  header (server ``qa/L0_http/http_input_size_limit_test.py``): Triton's generate reads
  the body as one JSON document, so its text is ``request JSON size of <body> bytes ...``
  (server ``src/http_server.cc``, ``EVBufferToJson``).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator

import aiohttp
import numpy as np
import orjson
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

from tritonx import Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, identity, loopback_settings

LIMIT = 1024
IO = """
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""
NO_BACKEND = (
    "unable to find backend library for backend '{}', try specifying runtime on the model "
    "configuration."
)
CAN_NOT_INFER = (
    "Invalid model name: Could not determine backend for model 'empty' with no backend in "
    "model configuration. Expected model name of the form 'model.<backend_name>'."
)


@pytest.fixture
async def server(
    model_repository: ModelRepositoryBuilder, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[Server]:
    """Explicit model control; ``nobackend`` (backend ``zzz``, versions 1 and 2), ``empty``
    (an empty config.pbtxt, no model file) and ``onnx_auto`` (an empty config.pbtxt and
    ``1/model.onnx``: the ONNX Runtime backend, not installed here) loaded at start-up;
    ``m``, an identity model; a 1 KiB ``--http-max-input-size``."""
    model_repository.add(
        "nobackend", backend="zzz", extra=IO + "version_policy: { all { } }\n", versions=(1, 2)
    )
    model_repository.add("empty", config="")
    model_repository.add("onnx_auto", config="", versions={1: {"model.onnx": b"onnx"}})
    model_repository.add_identity("m", "INT64", dims=[1, -1])
    settings = loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("nobackend", "empty", "onnx_auto", "m"),
        http_max_input_size=LIMIT,
    )
    pm = make_plugin_manager(autoload=False, extra=[identity])
    caplog.set_level(logging.INFO)
    async with Server(settings, plugin_manager=pm) as started:
        yield started


def _model_py(name: str) -> bytes:
    return (
        "import triton_python_backend_utils as pb_utils\n\n\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        f"        print('Hello world from model {name}')\n"
        "        return []\n"
    ).encode()


def _config(name: str) -> str:
    return json.dumps(
        {
            "name": name,
            "backend": "identity",
            "max_batch_size": 4,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        }
    )


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    """What the server logged, from its start-up (the fixture's) on."""
    records = caplog.get_records("setup") + caplog.get_records("call")
    return "\n".join(r.getMessage() for r in records)


async def _both_load_errors(server: Server, name: str, **kw: object) -> list[tuple[str, str]]:
    """(status, message) of ``load_model(name, **kw)`` through the HTTP and gRPC clients."""
    out: list[tuple[str, str]] = []
    for client in (
        httpclient.InferenceServerClient(server.http_url),
        grpcclient.InferenceServerClient(server.grpc_url),
    ):
        try:
            with pytest.raises(InferenceServerException) as err:
                await client.load_model(name, **kw)  # type: ignore[arg-type]
            out.append((str(err.value.status()), err.value.message()))
            assert not await client.is_model_ready(name)
        finally:
            await client.close()
    return out


async def test_a_name_that_is_no_folder_fails_the_poll(server: Server) -> None:
    for name in ("model{test}", "unknown_model"):
        (http, grpc) = await _both_load_errors(server, name)
        expected = f"failed to load '{name}', failed to poll from model repository"
        assert http == ("500", expected)
        assert grpc == ("StatusCode.INTERNAL", expected)


async def test_a_config_naming_another_model_fails_the_poll(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """Triton's L0_backend_python model_control case for ``model{test}``: curl globbing
    leaves ``modeltest`` in the URL while the config is named ``model{test}``."""
    body = {
        "parameters": {
            "config": _config("model{test}"),
            "file:/1/model.py": base64.b64encode(_model_py("model{test}")).decode(),
        }
    }
    async with aiohttp.ClientSession(f"http://{server.http_url}") as http:
        async with http.post(
            "/v2/repository/models/modeltest/load",
            data=json.dumps(body),
            headers={"Content-Type": "application/json"},
        ) as resp:
            status, text = resp.status, await resp.text()
    assert status == 500
    assert json.loads(text)["error"].startswith(
        "failed to load 'modeltest', failed to poll from model repository"
    )
    reason = (
        "unexpected directory name 'modeltest' for model 'model{test}', directory name must "
        "equal model name"
    )
    assert f"Poll failed for model directory 'modeltest': {reason}" in _logged(caplog)
    for status_text, message in await _both_load_errors(
        server,
        "modeltest",
        config=_config("model{test}"),
        files={"file:1/model.py": _model_py("model{test}")},
    ):
        assert status_text in ("500", "StatusCode.INTERNAL")
        assert message.startswith(
            "failed to load 'modeltest', failed to poll from model repository"
        )


async def test_an_empty_config_whose_backend_cannot_be_inferred_fails_the_poll(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    assert f"Poll failed for model directory 'empty': {CAN_NOT_INFER}" in _logged(caplog)
    for status_text, message in await _both_load_errors(server, "empty"):
        assert status_text in ("500", "StatusCode.INTERNAL")
        assert message.startswith("failed to load 'empty', failed to poll from model repository")


async def test_a_backend_not_installed_fails_each_version_as_triton(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    reason = "Invalid argument: " + NO_BACKEND.format("zzz")
    # the start-up log: Triton's line for each version
    for v in (1, 2):
        assert f"failed to load 'nobackend' version {v}: {reason}" in _logged(caplog)
    # the repository index, through both clients: one row per version
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        rows = [r for r in await client.get_model_repository_index() if r["name"] == "nobackend"]
    finally:
        await client.close()
    assert rows == [
        {"name": "nobackend", "version": v, "state": "UNAVAILABLE", "reason": reason}
        for v in ("1", "2")
    ]
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        index = await grpc.get_model_repository_index()
    finally:
        await grpc.close()
    assert [(m.version, m.state, m.reason) for m in index.models if m.name == "nobackend"] == [
        (v, "UNAVAILABLE", reason) for v in ("1", "2")
    ]
    # the load API
    expected = (
        "load failed for model 'nobackend': "
        f"version 1 is at UNAVAILABLE state: {reason};"
        f"version 2 is at UNAVAILABLE state: {reason};\n"
    )
    assert await _both_load_errors(server, "nobackend") == [
        ("400", expected),
        ("StatusCode.INVALID_ARGUMENT", expected),
    ]


async def test_an_empty_config_is_completed_from_the_model_file_name(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        rows = [r for r in await client.get_model_repository_index() if r["name"] == "onnx_auto"]
    finally:
        await client.close()
    assert rows == [
        {
            "name": "onnx_auto",
            "version": "1",
            "state": "UNAVAILABLE",
            "reason": "Invalid argument: " + NO_BACKEND.format("onnxruntime"),
        }
    ]


@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
async def test_generate_over_the_input_size_reports_the_json_body_size(
    server: Server, endpoint: str
) -> None:
    """As Triton's http_input_size_limit_test: base64 data of LIMIT bytes for INT64 inputs,
    with an Inference-Header-Content-Length that generate ignores."""
    raw = np.ones(LIMIT, np.int8).tobytes()
    data = base64.b64encode(raw).decode()
    n = LIMIT // 8
    payloads = [
        {"inputs": [{"name": "INPUT0", "datatype": "INT64", "shape": [1, n], "data": data}]},
        {
            "inputs": [
                {"name": "INPUT0", "datatype": "INT64", "shape": [1, n // 2], "data": data[:700]},
                {"name": "INPUT1", "datatype": "INT64", "shape": [1, n // 2], "data": data[700:]},
            ]
        },
    ]
    headers = {
        "Content-Type": "application/json",
        "Inference-Header-Content-Length": str(len(raw)),
    }
    async with aiohttp.ClientSession(f"http://{server.http_url}") as http:
        for payload in payloads:
            body = orjson.dumps(payload)
            assert len(body) > LIMIT
            async with http.post(f"/v2/models/m/{endpoint}", data=body, headers=headers) as resp:
                status, out = resp.status, orjson.loads(await resp.read())
            assert status == 400
            assert out["error"] == (
                f"request JSON size of {len(body)} bytes exceeds the maximum allowed input size "
                f"of {LIMIT} bytes. Use --http-max-input-size to increase the limit."
            )
