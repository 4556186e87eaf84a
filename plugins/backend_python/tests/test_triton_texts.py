"""Triton's texts (python_backend ``src/pb_stub.cc``, ``src/stub_launcher.cc``,
``src/pb_tensor.cc``): a missing model.py, a worker that dies in ``initialize``, response
parameters that are not a dict, and BF16 ``as_numpy()`` (refused: BF16 goes through DLPack)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tritonx import InferenceRequest, Server, TritonXError
from tritonx.errors import Code
from tritonx.testing import loopback_settings

BOTH_MODES = pytest.mark.parametrize("mode", ["process", "in_process"])
BF16_IO = {
    "inputs": [("INPUT0", "BF16", [3])],
    "outputs": [("OUTPUT0", "BF16", [3]), ("TEXT", "BYTES", [1])],
}


@pytest.fixture
def server_settings(model_repository, add_model):
    add_model("texts", "texts", **BF16_IO)
    return loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("texts",),
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )


def bf16_bits(values: list[float]) -> np.ndarray:
    """The bits of ``values`` as bfloat16 (the top half of their float32 bits)."""
    return (np.array(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


@BOTH_MODES
async def test_missing_model_file(server: Server, model_repository, caplog) -> None:
    caplog.set_level(logging.INFO)
    folder = model_repository.add(
        "no_file",
        backend="python",
        inputs=[("X", "FP32", [1])],
        outputs=[("Y", "FP32", [1])],
        versions={1: {"README": "no model.py here"}},
    )
    expected = (
        "Failed to preinitialize Python stub: Python model file not found in "
        f"'{folder / '1' / 'model.py'}'"
    )
    with pytest.raises(TritonXError) as err:
        await server.load_model("no_file")
    assert expected in err.value.message
    assert any(expected == r.getMessage() for r in caplog.records)


async def test_worker_dying_in_initialize(server: Server, add_model) -> None:
    add_model("dies", "texts", parameters={"DIE_IN_INITIALIZE": "1"}, **BF16_IO)
    with pytest.raises(TritonXError) as err:
        await server.load_model("dies")
    assert "Stub process 'dies_0' is not healthy." in err.value.message


@BOTH_MODES
async def test_response_parameters_not_a_dict(server: Server) -> None:
    request = InferenceRequest(
        "texts", {"INPUT0": bf16_bits([1, 2, 3])}, parameters={"what": "params"}
    )
    with pytest.raises(TritonXError) as err:
        await server.infer(request)
    assert err.value.code is Code.INTERNAL
    assert err.value.message == (
        "Failed to process the request(s) for model 'texts_0', message: "
        "TritonModelException: Expect N8pybind114dictE, got <class 'list'>"
    )


@BOTH_MODES
async def test_bf16_as_numpy_is_refused(server: Server) -> None:
    request = InferenceRequest(
        "texts",
        {"INPUT0": bf16_bits([1, 2, 3])},
        parameters={"what": "bf16"},
        requested_outputs=("TEXT",),
    )
    response = await server.infer(request)
    assert response.outputs["TEXT"][0].decode() == (
        "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and "
        "from_dlpack() instead."
    )


@BOTH_MODES
async def test_bf16_through_dlpack(server: Server) -> None:
    pytest.importorskip("torch")
    request = InferenceRequest(
        "texts",
        {"INPUT0": bf16_bits([1.5, -2.0, 3.25])},
        parameters={"what": "dlpack"},
        requested_outputs=("OUTPUT0",),
    )
    response = await server.infer(request)
    out = response.outputs["OUTPUT0"]
    assert out.dtype == np.uint16  # the core holds BF16 as its bits
    assert out.tolist() == bf16_bits([3.0, -4.0, 6.5]).tolist()
