"""Ragged batching (``allow_ragged_batch``) with ``batch_input`` and ``batch_output``, as
Triton's dynamic batcher and backends do (server ``docs/user_guide/ragged_batching.md``,
backend ``backend_input_collector.cc`` / ``backend_output_responder.cc``): an ONNX model
receives the ragged input flattened with the batch inputs Triton computes, and its batch
output is scattered back with each request's input shape. Batches are forced with
``TRITONSERVER_DELAY_SCHEDULER`` (the first batch waits until that many requests are queued);
nothing sleeps and no duration is asserted."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import pluggy
import pytest
import tritonclient.http.aio as httpclient
from onnx import TensorProto, helper, numpy_helper

import tritonx
from tritonx import InferenceRequest, Server
from tritonx.testing import ModelRepositoryBuilder, loopback_settings
from tritonx_backend_onnx.models import make_model

WAIT_S = 60.0

BATCH_INPUTS = (
    ("BATCH_ELEMENT_COUNT", "COUNT"),
    ("BATCH_ACCUMULATED_ELEMENT_COUNT", "ACC"),
    ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "ACCZ"),
    ("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", "MAXS"),
    ("BATCH_ITEM_SHAPE", "ITEM"),
    ("BATCH_ITEM_SHAPE_FLATTEN", "ITEMF"),
)


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    return ("backend_onnx",)


def ragged_model() -> bytes:
    """INPUT [-1] (ragged) and the six batch inputs; per request (batch size 1 each): its
    element count, running count, start offset, the batch's largest count, its item shape
    (flattened and not) and, scattered, INPUT * 2."""
    i64 = TensorProto.INT64

    def const(name: str, values: list[int]) -> Any:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    nodes = [
        helper.make_node("Unsqueeze", ["COUNT", "ax1"], ["OUT_COUNT"]),
        helper.make_node("Unsqueeze", ["ACC", "ax1"], ["OUT_ACC"]),
        helper.make_node("Slice", ["ACCZ", "zero", "minus1", "ax0"], ["starts"]),
        helper.make_node("Unsqueeze", ["starts", "ax1"], ["OUT_START"]),
        helper.make_node("Shape", ["MAXS"], ["max_count"]),
        helper.make_node("Shape", ["COUNT"], ["n"]),
        helper.make_node("Concat", ["n", "one"], ["n_by_1"], axis=0),
        helper.make_node("Expand", ["max_count", "n_by_1"], ["OUT_MAX"]),
        helper.make_node("Identity", ["ITEM"], ["OUT_ITEM"]),
        helper.make_node("Unsqueeze", ["ITEMF", "ax1"], ["OUT_ITEMF"]),
        helper.make_node("Mul", ["INPUT", "two"], ["OUT_SCATTER"]),
    ]
    initializers = [
        const("ax0", [0]),
        const("ax1", [1]),
        const("zero", [0]),
        const("minus1", [-1]),
        const("one", [1]),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
    ]
    int32, fp32 = TensorProto.INT32, TensorProto.FLOAT
    model = make_model(
        nodes,
        [
            ("INPUT", fp32, ["t"]),
            ("COUNT", int32, ["n"]),
            ("ACC", int32, ["n"]),
            ("ACCZ", int32, ["n1"]),
            ("MAXS", fp32, ["m"]),
            ("ITEM", int32, ["b", 1]),
            ("ITEMF", int32, ["f"]),
        ],
        [
            ("OUT_COUNT", int32, ["n", 1]),
            ("OUT_ACC", int32, ["n", 1]),
            ("OUT_START", int32, ["n", 1]),
            ("OUT_MAX", i64, ["n", 1]),
            ("OUT_ITEM", int32, ["b", 1]),
            ("OUT_ITEMF", int32, ["n", 1]),
            ("OUT_SCATTER", fp32, ["t"]),
        ],
        initializers,
    )
    return model.SerializeToString()


def batch_input_config(source: str = "INPUT") -> str:
    items = []
    for kind, target in BATCH_INPUTS:
        dtype = "TYPE_FP32" if target == "MAXS" else "TYPE_INT32"
        items.append(
            f'{{ kind: {kind} target_name: "{target}" data_type: {dtype} '
            f'source_input: "{source}" }}'
        )
    return "batch_input [\n  " + ",\n  ".join(items) + "\n]\n"


RAGGED_CONFIG = (
    'name: "ragged"\nbackend: "onnxruntime"\nmax_batch_size: 16\n'
    'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]\n'
    + batch_input_config()
    + "output [\n"
    + ",\n".join(
        f'  {{ name: "{name}" data_type: {dtype} dims: [ {dims} ] }}'
        for name, dtype, dims in (
            ("OUT_COUNT", "TYPE_INT32", "1"),
            ("OUT_ACC", "TYPE_INT32", "1"),
            ("OUT_START", "TYPE_INT32", "1"),
            ("OUT_MAX", "TYPE_INT64", "1"),
            ("OUT_ITEM", "TYPE_INT32", "1"),
            ("OUT_ITEMF", "TYPE_INT32", "1"),
            ("OUT_SCATTER", "TYPE_FP32", "-1"),
        )
    )
    + "\n]\n"
    'batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUT_SCATTER" '
    'source_input: "INPUT" } ]\n'
    "dynamic_batching { }\n"
    "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
)


def add_ragged(repo: ModelRepositoryBuilder) -> None:
    repo.add("ragged", config=RAGGED_CONFIG, versions={1: {"model.onnx": ragged_model()}})


def server(repo: ModelRepositoryBuilder, pm: pluggy.PluginManager) -> Server:
    return Server(loopback_settings(repo.root, allow_grpc=False), plugin_manager=pm)


async def infer_ragged(client: Any, data: np.ndarray) -> dict[str, np.ndarray]:
    inp = httpclient.InferInput("INPUT", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    result = await client.infer("ragged", [inp])
    names = ("OUT_COUNT", "OUT_ACC", "OUT_START", "OUT_MAX", "OUT_ITEM", "OUT_ITEMF")
    return {n: result.as_numpy(n) for n in (*names, "OUT_SCATTER")}


async def test_ragged_requests_batch_with_triton_batch_inputs_and_scattered_output(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: pluggy.PluginManager,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the docs' example: requests of shapes [1, 3], [1, 4], [1, 5] form one batch: the model
    # sees INPUT [12] and the batch inputs; OUT_SCATTER [12] goes back as [1, 3], [1, 4], [1, 5]
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    add_ragged(model_repository)
    datas = [np.arange(n, dtype=np.float32).reshape(1, n) + 10 * n for n in (3, 4, 5)]
    async with server(model_repository, plugin_manager) as srv:
        async with httpclient.InferenceServerClient(srv.http_url) as client:
            results = await asyncio.wait_for(
                asyncio.gather(*(infer_ragged(client, d) for d in datas)), WAIT_S
            )
    # the three arrive in any order: the start offsets give the order in the batch
    order = sorted(range(3), key=lambda i: int(results[i]["OUT_START"][0, 0]))
    start = 0
    for i in order:
        count = datas[i].size
        out = results[i]
        assert out["OUT_COUNT"].tolist() == [[count]]
        assert out["OUT_START"].tolist() == [[start]]
        assert out["OUT_ACC"].tolist() == [[start + count]]
        assert out["OUT_MAX"].tolist() == [[5]]  # the batch's largest element count
        assert out["OUT_ITEM"].tolist() == [[count]]
        assert out["OUT_ITEMF"].tolist() == [[count]]
        assert out["OUT_SCATTER"].shape == datas[i].shape
        np.testing.assert_array_equal(out["OUT_SCATTER"], datas[i] * 2)
        start += count
    assert start == 12


async def test_a_ragged_request_alone(
    model_repository: ModelRepositoryBuilder, plugin_manager: pluggy.PluginManager
) -> None:
    add_ragged(model_repository)
    data = np.array([[1.0, 2.0]], np.float32)
    async with server(model_repository, plugin_manager) as srv:
        async with httpclient.InferenceServerClient(srv.http_url) as client:
            out = await asyncio.wait_for(infer_ragged(client, data), WAIT_S)
    assert out["OUT_COUNT"].tolist() == [[2]]
    assert out["OUT_START"].tolist() == [[0]]
    assert out["OUT_ACC"].tolist() == [[2]]
    assert out["OUT_MAX"].tolist() == [[2]]
    assert out["OUT_ITEM"].tolist() == [[2]]
    np.testing.assert_array_equal(out["OUT_SCATTER"], data * 2)


async def test_warmup_of_a_model_with_batch_inputs(
    model_repository: ModelRepositoryBuilder, plugin_manager: pluggy.PluginManager
) -> None:
    """Warmup samples get the batch inputs too (as Triton's backend computes them at warmup):
    the model loads and serves."""
    warmup = (
        'model_warmup [ { name: "ragged_zeros" batch_size: 2 count: 2 inputs { key: "INPUT" '
        "value: { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } } } ]\n"
    )
    model_repository.add(
        "ragged", config=RAGGED_CONFIG + warmup, versions={1: {"model.onnx": ragged_model()}}
    )
    data = np.array([[1.0, 2.0]], np.float32)
    async with server(model_repository, plugin_manager) as srv:
        assert srv.model_ready("ragged")
        async with httpclient.InferenceServerClient(srv.http_url) as client:
            out = await asyncio.wait_for(infer_ragged(client, data), WAIT_S)
    np.testing.assert_array_equal(out["OUT_SCATTER"], data * 2)


class Recorder(tritonx.Backend):
    """Records the batch tensors ``concat_inputs`` makes of each batch's requests."""

    name = "batch_recorder"
    seen: ClassVar[list[dict[str, np.ndarray]]] = []

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return RecorderInstance()


class RecorderInstance(tritonx.ModelInstance):
    def execute(self, requests: Sequence[InferenceRequest]) -> list[tritonx.InferenceResponse]:
        # each request holds its part of every batch input: concatenated, the batch tensor
        Recorder.seen.append(
            {
                target: np.concatenate([r.inputs[target] for r in requests])
                for _, target in BATCH_INPUTS
            }
        )
        return [
            tritonx.InferenceResponse(outputs={"OUT": np.zeros((r.batch_size, 1), np.int32)})
            for r in requests
        ]


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(Recorder)


async def test_every_backend_receives_the_batch_inputs_as_inputs(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: pluggy.PluginManager,
    register_plugin: Callable[[object], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # requests of batch size 2 ([2, 2, 3]) and 1 ([1, 2, 1]) of a source input with dims
    # [-1, -1]: Triton's batch tensors over the batch of both
    register_plugin(Plugin())
    Recorder.seen.clear()
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "2")
    model_repository.add(
        "recorded",
        config='name: "recorded"\nbackend: "batch_recorder"\nmax_batch_size: 8\n'
        'input [ { name: "X" data_type: TYPE_INT32 dims: [ -1, -1 ] allow_ragged_batch: true } ]\n'
        + batch_input_config("X")
        + 'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        "dynamic_batching { }\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n",
    )
    shapes = ([2, 2, 3], [1, 2, 1])
    async with server(model_repository, plugin_manager) as srv:
        async with httpclient.InferenceServerClient(srv.http_url) as client:

            async def send(shape: list[int]) -> None:
                inp = httpclient.InferInput("X", shape, "INT32")
                inp.set_data_from_numpy(np.zeros(shape, np.int32))
                await client.infer("recorded", [inp])

            await asyncio.wait_for(asyncio.gather(*(send(s) for s in shapes)), WAIT_S)
    (seen,) = Recorder.seen
    # the two arrive in any order
    first, second = shapes if seen["COUNT"].tolist() == [12, 2] else shapes[::-1]
    counts = [int(np.prod(first)), int(np.prod(second))]
    assert seen["COUNT"].tolist() == counts
    assert seen["ACC"].tolist() == [counts[0], counts[0] + counts[1]]
    assert seen["ACCZ"].tolist() == [0, counts[0], counts[0] + counts[1]]
    assert seen["MAXS"].shape == (12,) and seen["MAXS"].dtype == np.float32
    rows = [first[1:]] * first[0] + [second[1:]] * second[0]
    assert seen["ITEM"].tolist() == rows
    assert seen["ITEMF"].tolist() == [d for row in rows for d in row]
    assert seen["ITEM"].dtype == np.int32
