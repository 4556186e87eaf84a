"""A python model's outputs go out as the model made them, as in Triton: neither Triton's
python backend nor its core checks their datatype or shape against the config (the stub only
drops the outputs the client did not request, the core only looks the output up in the
config and applies its ``reshape``). In both execution modes, in-process and over HTTP/gRPC."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient

from tritonx import InferenceRequest, Server
from tritonx.testing import loopback_settings

BOTH_MODES = pytest.mark.parametrize("mode", ["process", "in_process"])
X = ("X", "FP32", [1])
RESHAPED = (
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } } ]\n'
)


@pytest.fixture
def server_settings(model_repository, add_model):
    add_model("column", "as_returned", inputs=[X], outputs=[("OUT", "FP32", [-1, 1])])
    add_model("matrix", "as_returned", inputs=[X], outputs=[("OUT", "FP32", [-1, -1])])
    add_model("single", "as_returned", inputs=[X], outputs=[("OUT", "FP32", [1])])
    add_model(
        "caller", "as_returned", inputs=[X], outputs=[("OUT", "FP32", [1]), ("KIND", "INT32", [1])]
    )
    add_model("reshaped", "as_returned", inputs=[X], extra=RESHAPED)
    return loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("*",),
        allow_metrics=False,
    )


def infer_request(model: str, **parameters: str) -> InferenceRequest:
    return InferenceRequest(model, {"X": np.ones(1, np.float32)}, parameters=parameters)


@BOTH_MODES
@pytest.mark.parametrize("model", ["column", "matrix"])
async def test_output_of_another_shape_passes(server: Server, model: str) -> None:
    """Config ``[-1,1]`` or ``[-1,-1]``, the model returns ``[1]``: Triton answers ``[1]``."""
    response = await server.infer(infer_request(model))
    assert response.outputs["OUT"].shape == (1,)
    assert response.outputs["OUT"].tolist() == [1.0]


@BOTH_MODES
async def test_output_of_another_datatype_passes(server: Server) -> None:
    response = await server.infer(infer_request("single", what="half"))
    assert response.outputs["OUT"].dtype == np.float16


@BOTH_MODES
async def test_bls_answer_keeps_the_callee_datatype(server: Server) -> None:
    """A callee configured FP32 that returns FP16: the BLS caller gets FP16 (TYPE_FP16 = 10),
    as Triton's BLS answer carries the callee's tensor as made."""
    response = await server.infer(infer_request("caller", what="bls", callee="single"))
    assert response.outputs["KIND"].tolist() == [10]
    assert response.outputs["OUT"].dtype == np.float16


@BOTH_MODES
async def test_reshape_gives_the_config_dims(server: Server) -> None:
    """An output with ``reshape { shape: [4] }`` and ``dims: [2,2]``: the model's [4] is
    answered as [2,2] (the core's ``Reshape``)."""
    response = await server.infer(infer_request("reshaped", what="four"))
    assert response.outputs["OUT"].tolist() == [[0, 1], [2, 3]]


async def check_client(client, module) -> None:
    x = module.InferInput("X", [1], "FP32")
    x.set_data_from_numpy(np.ones(1, np.float32))
    result = await client.infer("column", [x])
    assert result.as_numpy("OUT").shape == (1,)
    result = await client.infer("single", [x], parameters={"what": "half"})
    assert result.as_numpy("OUT").dtype == np.float16
    out = result.get_output("OUT")
    assert (out["datatype"] if isinstance(out, dict) else out.datatype) == "FP16"


async def test_over_http(http_client) -> None:
    await check_client(http_client, httpclient)


async def test_over_grpc(grpc_client) -> None:
    await check_client(grpc_client, grpcclient)
