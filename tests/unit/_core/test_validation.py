import numpy as np
import pytest
from google.protobuf import text_format

from tritonx._core.validation import validate_request
from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError
from tritonx.proto import model_config_pb2
from tritonx.types import InferenceRequest

CONFIG = ModelConfig(
    text_format.Parse(
        'name: "simple" max_batch_size: 8 '
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, '
        '{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ] '
        'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]',
        model_config_pb2.ModelConfig(),
    )
)


def request(**inputs: np.ndarray) -> InferenceRequest:
    return InferenceRequest("simple", dict(inputs), id="r1")


def ok(batch: int = 1) -> np.ndarray:
    return np.zeros((batch, 16), np.int32)


def error(req: InferenceRequest) -> str:
    with pytest.raises(TritonXError) as err:
        validate_request(req, CONFIG)
    assert err.value.code is Code.INVALID_ARG
    return err.value.message


def test_valid_request_sets_batch_size() -> None:
    req = request(INPUT0=ok(3), INPUT1=ok(3))
    validate_request(req, CONFIG)
    assert req.batch_size == 3


def test_messages_match_triton() -> None:
    assert error(request(INPUT0=ok())) == (
        "[request id: r1] expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) "
        "['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s)."
    )
    assert (
        error(request(INPUT0=ok(), INPUTX=ok()))
        == "unexpected inference input 'INPUTX' for model 'simple'"
    )
    assert error(request(INPUT0=ok(9), INPUT1=ok(9))) == (
        "[request id: r1] inference request batch-size must be <= 8 for 'simple'"
    )
    assert error(request(INPUT0=ok().astype(np.float32), INPUT1=ok())) == (
        "[request id: r1] inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'"
    )
    msg = error(request(INPUT0=np.zeros((1, 8), np.int32), INPUT1=ok()))
    assert msg.startswith(
        "[request id: r1] unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]. NOTE:"
    )
    assert error(request(INPUT0=ok(1), INPUT1=ok(2))).endswith(
        "batch size does not match other inputs for 'simple'"
    )
    bad_out = InferenceRequest(
        "simple", {"INPUT0": ok(), "INPUT1": ok()}, requested_outputs=("NOPE",)
    )
    assert error(bad_out) == "unexpected inference output 'NOPE' for model 'simple'"


def test_empty_id_prefix() -> None:
    req = InferenceRequest("simple", {"INPUT0": ok(9), "INPUT1": ok(9)})
    assert error(req).startswith("[request id: <id_unknown>] ")
