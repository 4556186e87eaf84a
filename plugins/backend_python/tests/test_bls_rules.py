"""BLS rules of Triton's stub (python_backend ``src/infer_request.cc``, ``InferRequest::Exec``):
a BLS call is refused with "BLS is only supported during the 'execute' function." before
``initialize`` returned and once ``finalize`` started (a call from ``initialize`` fails the
load, one from ``finalize`` is logged); ``cancel()`` on a decoupled BLS call's response
iterator cancels the callee's request (its ``is_cancelled()`` turns true). In both
execution modes."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from tritonx import InferenceRequest, Server, TritonXError
from tritonx.testing import loopback_settings

BOTH_MODES = pytest.mark.parametrize("mode", ["process", "in_process"])
MODELS = Path(__file__).parent / "models"
REFUSED = "BLS is only supported during the 'execute' function."
STREAM_IO = {
    "inputs": [("COUNT", "INT32", [1])],
    "outputs": [("PID", "INT64", [1]), ("INDEX", "INT32", [1]), ("SAW_CANCEL", "BOOL", [1])],
    "extra": "model_transaction_policy { decoupled: true }\n",
}
CALLER_IO = {"inputs": [("X", "INT32", [1])], "outputs": [("SAW_CANCEL", "BOOL", [1])]}


@pytest.fixture
def server_settings(model_repository, add_model, tmp_path):
    add_model("stream", "stream", parameters={"STATE_DIR": str(tmp_path)}, **STREAM_IO)
    add_model("caller", "bls_rules", **CALLER_IO)
    add_model("bls_final", "bls_rules", parameters={"BLS_IN": "finalize"}, **CALLER_IO)
    return loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("stream", "caller", "bls_final"),
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )


@BOTH_MODES
async def test_bls_in_initialize_fails_the_load(server: Server, add_model) -> None:
    add_model("bls_init", "bls_rules", parameters={"BLS_IN": "initialize"}, **CALLER_IO)
    with pytest.raises(TritonXError) as err:
        await server.load_model("bls_init")
    assert f"Failed to initialize Python stub: TritonModelException: {REFUSED}" in (
        err.value.message
    )
    assert not server.model_ready("bls_init")


@BOTH_MODES
async def test_bls_in_finalize_is_logged(server: Server, caplog) -> None:
    caplog.set_level(logging.INFO)
    await server.unload_model("bls_final")
    assert any(REFUSED in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]


@BOTH_MODES
async def test_cancel_on_a_decoupled_bls_iterator_reaches_the_callee(
    server: Server, tmp_path: Path
) -> None:
    response = await server.infer(InferenceRequest("caller", {"X": np.array([1], np.int32)}))
    assert response.outputs["SAW_CANCEL"].tolist() == [True]
    assert (tmp_path / "stream_saw_cancel").exists()
