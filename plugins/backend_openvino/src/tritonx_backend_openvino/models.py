"""Models for tests and benchmarks of the OpenVINO backend: ONNX graphs built with the onnx
helper, and the same graphs converted to OpenVINO IR (``openvino.convert_model`` / ``save_model``).

Imports ``onnx`` (a test extra, not a dependency of the backend): install it to use this module.
Nothing here is downloaded; weights are random with a fixed seed."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17

Spec = tuple[str, int, Sequence[int | str | None]]


def onnx_model(
    nodes: Sequence[Any],
    inputs: Sequence[Spec],
    outputs: Sequence[Spec],
    initializers: Sequence[Any] = (),
) -> bytes:
    """A serialized ONNX model (opset 17)."""
    graph = helper.make_graph(
        list(nodes),
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def binary(op: str, elem: int, shape: Sequence[int | str | None] = ("batch", 4)) -> bytes:
    """INPUT0 <op> INPUT1 -> OUTPUT0, and INPUT0 -> OUTPUT1 (Identity)."""
    return onnx_model(
        [
            helper.make_node(op, ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Identity", ["INPUT0"], ["OUTPUT1"]),
        ],
        [("INPUT0", elem, shape), ("INPUT1", elem, shape)],
        [("OUTPUT0", elem, shape), ("OUTPUT1", elem, shape)],
    )


def dense(features: int = 64, out: int = 32, seed: int = 0) -> bytes:
    """x [batch, features] -> y = tanh(x @ W + b) [batch, out], random FP32 weights."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((features, out)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(out).astype(np.float32), "B")
    return onnx_model(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "B"], ["z"]),
            helper.make_node("Tanh", ["z"], ["y"]),
        ],
        [("x", TensorProto.FLOAT, ["batch", features])],
        [("y", TensorProto.FLOAT, ["batch", out])],
        [w, b],
    )


def encoder(vocab: int = 50, hidden: int = 16, seed: int = 0) -> bytes:
    """A MiniLM-shaped encoder: input_ids, attention_mask INT64 [batch, seq] ->
    last_hidden_state FP32 [batch, seq, hidden] (embedding lookup scaled by the mask,
    then a dense layer)."""
    rng = np.random.default_rng(seed)
    emb = numpy_helper.from_array(rng.standard_normal((vocab, hidden)).astype(np.float32), "E")
    w = numpy_helper.from_array(rng.standard_normal((hidden, hidden)).astype(np.float32), "W")
    return onnx_model(
        [
            helper.make_node("Gather", ["E", "input_ids"], ["tok"]),
            helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["maskf", "axis"], ["mask3"]),
            helper.make_node("Mul", ["tok", "mask3"], ["masked"]),
            helper.make_node("MatMul", ["masked", "W"], ["last_hidden_state"]),
        ],
        [
            ("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            ("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
        ],
        [("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden])],
        [emb, w, numpy_helper.from_array(np.array([-1], np.int64), "axis")],
    )


def to_ir(onnx_bytes: bytes, batch_layout: bool = False) -> dict[str, bytes | str]:
    """The ONNX model converted to IR: ``{"model.xml": ..., "model.bin": ...}``.

    :param batch_layout: give every input and output the layout ``N...`` (a batch dimension
        first), which Triton's auto-complete reads as "supports batching".
    """
    import openvino as ov

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "model.onnx"
        src.write_bytes(onnx_bytes)
        model = ov.convert_model(str(src))
        if batch_layout:
            for port in (*model.inputs, *model.outputs):
                port.get_node().set_layout(ov.Layout("N..."))
        ov.save_model(model, str(Path(tmp) / "model.xml"), compress_to_fp16=False)
        return {
            "model.xml": (Path(tmp) / "model.xml").read_text(),
            "model.bin": (Path(tmp) / "model.bin").read_bytes(),
        }
