"""The frontend's pure parts: which convention a model config follows, the tensors written
for it, stop sequences cut from a stream of text, and the API key checks."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format

from tritonx import ModelConfig
from tritonx.proto import model_config_pb2
from tritonx_frontend_openai.auth import Auth
from tritonx_frontend_openai.conventions import Embedder, GenerateParams, Generator, detect
from tritonx_frontend_openai.errors import OpenAIError
from tritonx_frontend_openai.generation import StopMatcher
from tritonx_frontend_openai.options import Options


def config(text: str) -> ModelConfig:
    return ModelConfig(text_format.Parse(text, model_config_pb2.ModelConfig()))


TRTLLM_ENSEMBLE = """
name: "ensemble" platform: "ensemble" max_batch_size: 64
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "bad_words" data_type: TYPE_STRING dims: [ -1 ] optional: true },
  { name: "stop_words" data_type: TYPE_STRING dims: [ -1 ] optional: true },
  { name: "temperature" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
  { name: "random_seed" data_type: TYPE_UINT64 dims: [ 1 ] optional: true },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "end_id" data_type: TYPE_INT32 dims: [ 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
"""

VLLM = """
name: "vllm_model" backend: "vllm" max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true },
  { name: "return_logprobs" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "logprobs" data_type: TYPE_STRING dims: [ -1 ] }
]
"""


def test_detects_a_tensorrt_llm_ensemble() -> None:
    found = detect(config(TRTLLM_ENSEMBLE))
    assert isinstance(found, Generator)
    assert found.format == "tensorrtllm" and not found.decoupled and not found.logprobs
    params = GenerateParams(
        prompt="hi", stream=False, max_tokens=5, stop=("a", "bc"), temperature=0.5, seed=-1
    )
    inputs = found.request_inputs(params)
    assert set(inputs) == {
        "text_input",
        "max_tokens",
        "stop_words",
        "temperature",
        "random_seed",
        "stream",
    }
    assert inputs["text_input"].shape == (1, 1) and inputs["text_input"][0, 0] == b"hi"
    assert inputs["max_tokens"].dtype == np.int32 and inputs["max_tokens"].tolist() == [[5]]
    assert inputs["stop_words"].tolist() == [[b"a", b"bc"]]
    assert inputs["temperature"].dtype == np.float32
    assert inputs["random_seed"].tolist() == [[(1 << 64) - 1]]  # int64 seed as UINT64
    assert inputs["stream"].tolist() == [[False]]


def test_detects_a_vllm_model() -> None:
    found = detect(config(VLLM))
    assert isinstance(found, Generator)
    assert found.format == "vllm" and found.decoupled and found.logprobs
    inputs = found.request_inputs(
        GenerateParams(prompt="x", stream=True, max_tokens=3, logprobs=2, top_p=0.5)
    )
    assert set(inputs) == {"text_input", "stream", "sampling_parameters", "return_logprobs"}
    assert inputs["sampling_parameters"][0] == b'{"max_tokens":3,"top_p":0.5,"logprobs":2}'
    assert inputs["return_logprobs"].tolist() == [True]
    # the format can be forced
    forced = detect(config(VLLM), "tensorrtllm")
    assert isinstance(forced, Generator) and forced.format == "tensorrtllm"


def test_models_that_follow_no_convention() -> None:
    required_end_id = TRTLLM_ENSEMBLE.replace("dims: [ 1 ] optional: true }\n]", "dims: [ 1 ] }\n]")
    assert detect(config(required_end_id)) == (
        "required input(s) end_id outside the tensorrtllm format"
    )
    no_output = VLLM.replace('name: "text_output"', 'name: "text"')
    assert detect(config(no_output)) == "no BYTES output text_output"
    two_outputs = """
        name: "m" max_batch_size: 0
        input [ { name: "A" data_type: TYPE_STRING dims: [ 1 ] } ]
        output [ { name: "B" data_type: TYPE_FP32 dims: [ 4 ] },
                 { name: "C" data_type: TYPE_FP32 dims: [ 4 ] } ]
    """
    assert isinstance(detect(config(two_outputs)), str)


def test_embedding_batches() -> None:
    batching = detect(
        config(
            """name: "e" max_batch_size: 2
               input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
               output [ { name: "V" data_type: TYPE_FP32 dims: [ 3 ] } ]"""
        )
    )
    assert isinstance(batching, Embedder) and batching.dimensions == 3
    batches = batching.batches(["a", "b", "c"])
    assert [(start, inputs["TEXT"].shape) for start, inputs in batches] == [
        (0, (2, 1)),
        (2, (1, 1)),
    ]
    variable = detect(
        config(
            """name: "e" max_batch_size: 0
               input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
               output [ { name: "V" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]"""
        )
    )
    assert isinstance(variable, Embedder)
    ((start, inputs),) = variable.batches(["a", "b", "c"])
    assert start == 0
    assert inputs["TEXT"].tolist() == [b"a", b"b", b"c"]
    rows = variable.vectors({"V": np.arange(9, dtype=np.float32).reshape(3, 3)}, 3)
    assert rows.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    with pytest.raises(OpenAIError):
        variable.vectors({"V": np.zeros(4, np.float32)}, 3)


def test_too_many_stop_words_for_a_fixed_shape() -> None:
    fixed = TRTLLM_ENSEMBLE.replace(
        'name: "stop_words" data_type: TYPE_STRING dims: [ -1 ]',
        'name: "stop_words" data_type: TYPE_STRING dims: [ 1 ]',
    )
    found = detect(config(fixed))
    assert isinstance(found, Generator)
    with pytest.raises(OpenAIError) as caught:
        found.request_inputs(
            GenerateParams(prompt="x", stream=False, max_tokens=1, stop=("a", "b"))
        )
    assert caught.value.status == 400 and caught.value.param == "stop"


def feed(matcher: StopMatcher, pieces: list[str]) -> tuple[list[str], bool]:
    out = []
    for piece in pieces:
        text, stopped = matcher.feed(piece)
        out.append(text)
        if stopped:
            return out, True
    out.append(matcher.flush())
    return out, False


def test_stop_sequences_cut_a_stream() -> None:
    assert feed(StopMatcher(["o w"]), ["Hel", "lo", " wor", "ld"]) == (["Hel", "l", ""], True)
    # a held-back start that does not become a stop string is sent on
    assert feed(StopMatcher(["o w"]), ["Hel", "lo", " there"]) == (
        ["Hel", "l", "o there", ""],
        False,
    )
    assert feed(StopMatcher(["END", "x"]), ["abc", "E", "N", "D!"]) == (["abc", "", "", ""], True)
    assert feed(StopMatcher([]), ["a", "b"]) == (["a", "b", ""], False)
    assert feed(StopMatcher(["zz"]), ["az"]) == (["a", "z"], False)  # held, then flushed


def test_api_keys_and_groups() -> None:
    auth = Auth(Options(api_keys=frozenset({"k1", "k2"})), "/v1")
    auth.check("/v1/chat/completions", {"authorization": "Bearer k2"})
    auth.check("/v1/other", {})  # no API group: not checked
    for headers, code in (
        ({}, None),
        ({"authorization": "Bearer nope"}, "invalid_api_key"),
        ({"authorization": "k1"}, None),
    ):
        with pytest.raises(OpenAIError) as caught:
            auth.check("/v1/models/m", headers)
        assert caught.value.status == 401 and caught.value.code == code
    open_models = Auth(
        Options(api_keys=frozenset({"k"}), auth_apis=frozenset({"inference"})), "/v1"
    )
    open_models.check("/v1/models", {})
    with pytest.raises(OpenAIError):
        open_models.check("/v1/embeddings", {})
