"""Small ONNX graphs built with the onnx helper API, for tests and benchmarks.

Imports ``onnx`` (not a dependency of the backend itself): install it to use this module.
Nothing here is downloaded; weights are random with a fixed seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def make_model(
    nodes: Sequence[Any],
    inputs: Sequence[tuple[str, int, Sequence[int | str | None]]],
    outputs: Sequence[tuple[str, int, Sequence[int | str | None]]],
    initializers: Sequence[Any] = (),
    name: str = "g",
) -> onnx.ModelProto:
    """An ONNX model (opset 17) from nodes and (name, element type, shape) inputs/outputs."""
    graph = helper.make_graph(
        list(nodes),
        name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def add_sub(
    elem: int = TensorProto.FLOAT,
    shape: Sequence[int | str | None] = ("batch", 4),
    controls: Sequence[str] = (),
) -> bytes:
    """INPUT0, INPUT1 → OUTPUT0 = sum, OUTPUT1 = difference.

    :param controls: names of extra INT32 ``[batch, 1]`` inputs the graph ignores: the
        sequence batcher's control tensors, for the same model under ``sequence_batching``.
    """
    extra = [(name, TensorProto.INT32, [shape[0], 1]) for name in controls]
    return make_model(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        [("INPUT0", elem, shape), ("INPUT1", elem, shape), *extra],
        [("OUTPUT0", elem, shape), ("OUTPUT1", elem, shape)],
    ).SerializeToString()


def identity(elem: int, shape: Sequence[int | str | None]) -> bytes:
    """INPUT0 → OUTPUT0 unchanged."""
    return make_model(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        [("INPUT0", elem, shape)],
        [("OUTPUT0", elem, shape)],
    ).SerializeToString()


def resnet18(num_classes: int = 1000, seed: int = 0) -> bytes:
    """A ResNet-18-shaped CNN with random weights and a dynamic batch axis:
    conv7x7/2-bn-relu-maxpool, 4 stages of 2 basic blocks (64/128/256/512 channels),
    global average pool, fc ``num_classes``. Input ``input`` [N,3,H,W] → ``logits`` [N,classes]."""
    rng = np.random.default_rng(seed)
    nodes: list[Any] = []
    inits: list[Any] = []
    counter = iter(range(10_000))

    def weight(shape: tuple[int, ...], scale: float) -> str:
        name = f"w{next(counter)}"
        inits.append(
            numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)
        )
        return name

    def conv_bn(x: str, cin: int, cout: int, k: int, stride: int, relu: bool) -> str:
        w = weight((cout, cin, k, k), (2.0 / (cin * k * k)) ** 0.5)
        y = f"t{next(counter)}"
        nodes.append(
            helper.make_node(
                "Conv",
                [x, w],
                [y],
                kernel_shape=[k, k],
                strides=[stride, stride],
                pads=[k // 2] * 4,
            )
        )
        scale, bias = weight((cout,), 0.0), weight((cout,), 0.0)
        inits[-2] = numpy_helper.from_array(np.ones(cout, np.float32), scale)
        mean, var = weight((cout,), 0.0), weight((cout,), 0.0)
        inits[-1] = numpy_helper.from_array(np.ones(cout, np.float32), var)
        z = f"t{next(counter)}"
        nodes.append(helper.make_node("BatchNormalization", [y, scale, bias, mean, var], [z]))
        if not relu:
            return z
        r = f"t{next(counter)}"
        nodes.append(helper.make_node("Relu", [z], [r]))
        return r

    x = conv_bn("input", 3, 64, 7, 2, relu=True)
    pooled = f"t{next(counter)}"
    nodes.append(
        helper.make_node(
            "MaxPool", [x], [pooled], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        )
    )
    x, cin = pooled, 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = conv_bn(x, cin, cout, 3, stride, relu=True)
            y = conv_bn(y, cout, cout, 3, 1, relu=False)
            shortcut = (
                conv_bn(x, cin, cout, 1, stride, relu=False) if (stride != 1 or cin != cout) else x
            )
            s, r = f"t{next(counter)}", f"t{next(counter)}"
            nodes += [
                helper.make_node("Add", [y, shortcut], [s]),
                helper.make_node("Relu", [s], [r]),
            ]
            x, cin = r, cout
    gap, flat = f"t{next(counter)}", f"t{next(counter)}"
    nodes += [
        helper.make_node("GlobalAveragePool", [x], [gap]),
        helper.make_node("Flatten", [gap], [flat], axis=1),
    ]
    fc_w, fc_b = weight((num_classes, 512), 0.05), weight((num_classes,), 0.01)
    nodes.append(helper.make_node("Gemm", [flat, fc_w, fc_b], ["logits"], transB=1))
    model = make_model(
        nodes,
        [("input", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [("logits", TensorProto.FLOAT, ["batch", num_classes])],
        inits,
        name="resnet18",
    )
    return model.SerializeToString()


def sequence_accumulator(reset_on_start: bool = True, corrid: bool = False) -> bytes:
    """A stateful model for the sequence batcher, INT32 ``[batch, 1]`` tensors throughout:
    ``ACC_OUT = READY * INPUT + KEEP * ACC_IN`` and ``OUTPUT = ACC_OUT (+ CORRID)``, where the
    controls START, READY (and CORRID, INT32, added to OUTPUT when ``corrid``) and the state
    ``ACC_IN`` / ``ACC_OUT`` are inputs and outputs the server provides and reads back.

    :param reset_on_start: KEEP = 1 - START (the graph restarts the sum itself); without it
        KEEP = 1 and there is no START input: the sum restarts from the initial state the
        server feeds at each sequence start.
    """
    int32 = TensorProto.INT32
    nodes: list[Any] = [helper.make_node("Mul", ["READY", "INPUT"], ["ADDED"])]
    names = ["INPUT", "READY", "ACC_IN"]
    kept = "ACC_IN"
    if reset_on_start:
        names.append("START")
        one = helper.make_tensor("ONE_VALUE", int32, [], [1])
        nodes += [
            helper.make_node("Constant", [], ["ONE"], value=one),
            helper.make_node("Sub", ["ONE", "START"], ["KEEP"]),
            helper.make_node("Mul", ["ACC_IN", "KEEP"], ["KEPT"]),
        ]
        kept = "KEPT"
    nodes.append(helper.make_node("Add", ["ADDED", kept], ["ACC_OUT"]))
    if corrid:
        names.append("CORRID")
        nodes.append(helper.make_node("Add", ["ACC_OUT", "CORRID"], ["OUTPUT"]))
    else:
        nodes.append(helper.make_node("Identity", ["ACC_OUT"], ["OUTPUT"]))
    shape: list[int | str | None] = ["batch", 1]
    return make_model(
        nodes,
        [(n, int32, shape) for n in names],
        [("OUTPUT", int32, shape), ("ACC_OUT", int32, shape)],
        name="sequence_accumulator",
    ).SerializeToString()
