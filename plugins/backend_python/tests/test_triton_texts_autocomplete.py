"""Python models' auto-complete as Triton's (issue #53 D):

* ``auto_complete_config`` that returns nothing (server ``qa/L0_model_config/
  autofill_noplatform/python/no_return``): python_backend ``src/pb_stub.cc`` refuses it with
  ``auto_complete_config function in model '<m>' must return a valid pb.ModelConfig object.``,
  an error of the version's load (``stub_launcher.cc``): Triton logs ``failed to load '<m>'
  version 1: Internal: ...`` and the index has that reason;
* an empty ``config.pbtxt`` beside ``1/model.py``: core ``AutoCompleteBackendFields`` infers
  the python backend from the file name, the model's ``auto_complete_config`` completes the
  rest, and the model serves.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient

from tritonx import Server
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

from .conftest import MODELS

BOTH_MODES = pytest.mark.parametrize("mode", ["process", "in_process"])
NO_RETURN = (
    "auto_complete_config function in model 'no_return' must return a valid pb.ModelConfig object."
)


@pytest.fixture
def server_settings(
    model_repository: ModelRepositoryBuilder, mode: str, caplog: pytest.LogCaptureFixture
) -> Iterator[object]:
    parameters = (
        ""
        if mode == "process"
        else 'parameters { key: "TRITONX_EXECUTION_MODE" value: { string_value: "in_process" } }\n'
    )
    model_repository.add(
        "no_return",
        config='name: "no_return"\nbackend: "python"\n' + parameters,
        versions={1: {"model.py": (MODELS / "auto_complete_no_return.py").read_text()}},
    )
    model_repository.add(
        "empty_config",
        config=parameters,
        versions={1: {"model.py": (MODELS / "auto_complete.py").read_text()}},
    )
    caplog.set_level(logging.INFO)
    yield loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("no_return", "empty_config"),
        allow_metrics=False,
    )


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    records = caplog.get_records("setup") + caplog.get_records("call")
    return "\n".join(r.getMessage() for r in records)


@BOTH_MODES
async def test_auto_complete_config_returning_nothing(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """Triton's text (its QA greps the log for it), as the reason of the version's load.
    (Triton's reason is ``Internal: <text>``; tritonx's says where it came from:
    ``Invalid argument: Failed to initialize Python stub for auto-complete:
    TritonModelException: <text>``.)"""
    logged = [
        line
        for line in _logged(caplog).splitlines()
        if line.startswith("failed to load 'no_return' version 1: ")
    ]
    assert len(logged) == 1 and NO_RETURN in logged[0], logged
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        rows = [r for r in await http.get_model_repository_index() if r["name"] == "no_return"]
        assert [(r["version"], r["state"]) for r in rows] == [("1", "UNAVAILABLE")]
        assert NO_RETURN in rows[0]["reason"]
        index = await grpc.get_model_repository_index()
        assert [(m.version, m.reason) for m in index.models if m.name == "no_return"] == [
            ("1", rows[0]["reason"])
        ]
    finally:
        await http.close()
        await grpc.close()


@BOTH_MODES
async def test_an_empty_config_is_completed_by_the_python_model(server: Server) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    try:
        assert await http.is_model_ready("empty_config")
        config = await http.get_model_config("empty_config")
        assert (config["backend"], config["max_batch_size"]) == ("python", 4)
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        inp = httpclient.InferInput("INPUT0", [2, 4], "FP32")
        inp.set_data_from_numpy(x)
        result = await http.infer("empty_config", [inp])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 2)
    finally:
        await http.close()
