"""Generate the ONNX models of tritonx's bundled example repository.

Writes ``<out>/<model>/config.pbtxt`` and ``<out>/<model>/1/model.onnx`` for the equivalents
of Triton's ``docs/examples/model_repository`` simple models:

* ``simple``: INPUT0, INPUT1 INT32 [16] → OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1;
* ``simple_int8``: the same on INT8 tensors (computed in INT32, cast back: wraps around);
* ``simple_string``: the same on STRING tensors holding decimal integers (parsed as INT32,
  results written back as decimal strings);

and the stateful models tritonclient's sequence examples
(``simple_*_sequence_*_infer_client.py``, with and without ``-d``) use:

* ``simple_sequence`` (direct strategy, START/READY controls): OUTPUT = READY * (INPUT + START);
* ``simple_dyna_sequence`` (oldest strategy, START/END/READY and a UINT64 CORRID control):
  OUTPUT = READY * (INPUT + START + END * CORRID);
* ``simple_string_dyna_sequence`` (oldest strategy, a STRING CORRID holding a decimal number,
  implicit state ``ACC_IN``/``ACC_OUT``): an accumulator, ACC = INPUT + (1 - START) * ACC_IN,
  OUTPUT = READY * (ACC + END * int(CORRID)).

All take a batch dimension (``max_batch_size: 8``). The graphs use ONNX opset 17 (IR version 8),
which every onnxruntime since 1.14 runs. The output is deterministic, so the committed files
can be checked against a fresh run (the backend's tests do)::

    python plugins/backend_onnx/scripts/make_example_models.py            # the bundled repo
    python plugins/backend_onnx/scripts/make_example_models.py --out DIR  # somewhere else

Needs the ``onnx`` package (``pip install onnx``); nothing is downloaded.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

OPSET = 17
IR_VERSION = 8
DIMS = 16
MAX_BATCH_SIZE = 8

#: where the bundled example repository lives, relative to the repository root
EXAMPLE_REPOSITORY = Path("core/src/tritonx/examples/model_repository")

#: add/sub model name → (ONNX element type name, config datatype)
ADD_SUB: dict[str, tuple[str, str]] = {
    "simple": ("INT32", "TYPE_INT32"),
    "simple_int8": ("INT8", "TYPE_INT8"),
    "simple_string": ("STRING", "TYPE_STRING"),
}

#: the stateful models (sequence batching)
SEQUENCE = ("simple_sequence", "simple_dyna_sequence", "simple_string_dyna_sequence")

#: every generated model
MODELS: tuple[str, ...] = (*ADD_SUB, *SEQUENCE)


def build_model(name: str) -> bytes:
    """The serialized ONNX graph of example model ``name``."""
    if name in SEQUENCE:
        return _sequence_model(name)
    from onnx import TensorProto, helper

    elem = getattr(TensorProto, ADD_SUB[name][0])
    int32 = TensorProto.INT32
    nodes = []
    if elem == int32:
        a, b = "INPUT0", "INPUT1"
    else:  # compute in INT32, as Triton's examples do
        nodes += [
            helper.make_node("Cast", ["INPUT0"], ["INPUT0_I32"], to=int32),
            helper.make_node("Cast", ["INPUT1"], ["INPUT1_I32"], to=int32),
        ]
        a, b = "INPUT0_I32", "INPUT1_I32"
    sum_, diff = ("OUTPUT0", "OUTPUT1") if elem == int32 else ("SUM_I32", "DIFF_I32")
    nodes += [
        helper.make_node("Add", [a, b], [sum_]),
        helper.make_node("Sub", [a, b], [diff]),
    ]
    if elem != int32:
        nodes += [
            helper.make_node("Cast", ["SUM_I32"], ["OUTPUT0"], to=elem),
            helper.make_node("Cast", ["DIFF_I32"], ["OUTPUT1"], to=elem),
        ]
    shape: list[str | int] = ["batch", DIMS]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, elem, shape) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, elem, shape) for n in ("OUTPUT0", "OUTPUT1")],
    )
    return _serialize(graph)


def _serialize(graph: Any) -> bytes:
    from onnx import checker, helper

    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="tritonx make_example_models.py",
        ir_version=IR_VERSION,
    )
    checker.check_model(model, full_check=True)
    return model.SerializeToString(deterministic=True)


def _sequence_model(name: str) -> bytes:
    """The graph of a stateful example: INT32 ``[batch, 1]`` tensors throughout (the
    controls too), CORRID as UINT64 or STRING."""
    from onnx import TensorProto, helper

    int32 = TensorProto.INT32
    shape: list[str | int] = ["batch", 1]
    inputs = ["INPUT", "START"]
    outputs = ["OUTPUT"]
    corrid_type = int32
    if name == "simple_sequence":
        inputs.append("READY")
        nodes = [
            helper.make_node("Add", ["INPUT", "START"], ["SUM"]),
            helper.make_node("Mul", ["READY", "SUM"], ["OUTPUT"]),
        ]
    elif name == "simple_dyna_sequence":
        inputs += ["END", "READY", "CORRID"]
        corrid_type = TensorProto.UINT64
        nodes = [
            helper.make_node("Cast", ["CORRID"], ["CORRID_I32"], to=int32),
            helper.make_node("Add", ["INPUT", "START"], ["SUM"]),
            helper.make_node("Mul", ["END", "CORRID_I32"], ["END_CORRID"]),
            helper.make_node("Add", ["SUM", "END_CORRID"], ["TOTAL"]),
            helper.make_node("Mul", ["READY", "TOTAL"], ["OUTPUT"]),
        ]
    else:  # simple_string_dyna_sequence: an accumulator in the implicit state
        inputs += ["END", "READY", "CORRID", "ACC_IN"]
        outputs.append("ACC_OUT")
        corrid_type = TensorProto.STRING
        one = helper.make_tensor("ONE_VALUE", int32, [], [1])
        nodes = [
            helper.make_node("Constant", [], ["ONE"], value=one),
            helper.make_node("Sub", ["ONE", "START"], ["NOT_START"]),
            helper.make_node("Mul", ["ACC_IN", "NOT_START"], ["KEPT"]),
            helper.make_node("Add", ["INPUT", "KEPT"], ["ACC_OUT"]),
            helper.make_node("Cast", ["CORRID"], ["CORRID_I32"], to=int32),
            helper.make_node("Mul", ["END", "CORRID_I32"], ["END_CORRID"]),
            helper.make_node("Add", ["ACC_OUT", "END_CORRID"], ["TOTAL"]),
            helper.make_node("Mul", ["READY", "TOTAL"], ["OUTPUT"]),
        ]
    graph = helper.make_graph(
        nodes,
        name,
        [
            helper.make_tensor_value_info(n, corrid_type if n == "CORRID" else int32, shape)
            for n in inputs
        ],
        [helper.make_tensor_value_info(n, int32, shape) for n in outputs],
    )
    return _serialize(graph)


def _control(name: str, kind: str) -> str:
    return (
        f'    {{\n      name: "{name}"\n      control [\n        {{\n          kind: {kind}\n'
        "          int32_false_true: [ 0, 1 ]\n        }\n      ]\n    }"
    )


def _sequence_config(name: str) -> str:
    """The config.pbtxt of a stateful example (Triton's, for the two it ships)."""
    controls = [_control("START", "CONTROL_SEQUENCE_START")]
    if name != "simple_sequence":
        controls.append(_control("END", "CONTROL_SEQUENCE_END"))
    controls.append(_control("READY", "CONTROL_SEQUENCE_READY"))
    instances = "  {\n    kind: KIND_CPU\n  }\n"
    strategy = state = parameters = ""
    if name != "simple_sequence":
        corrid_type = "TYPE_UINT64" if name == "simple_dyna_sequence" else "TYPE_STRING"
        controls.append(
            '    {\n      name: "CORRID"\n      control [\n        {\n'
            f"          kind: CONTROL_SEQUENCE_CORRID\n          data_type: {corrid_type}\n"
            "        }\n      ]\n    }"
        )
        strategy = (
            "  max_sequence_idle_microseconds: 10000000\n"
            "  oldest {\n    max_candidate_sequences: 1024\n"
            "    max_queue_delay_microseconds: 10000\n  }\n"
        )
        instances = "  {\n    count: 2\n    kind: KIND_CPU\n  }\n"
    if name == "simple_dyna_sequence":
        parameters = (
            'parameters [\n  {\n    key: "execute_delay_ms"\n'
            '    value: { string_value: "3" }\n  }\n]\n'
        )
    if name == "simple_string_dyna_sequence":
        state = (
            "  state [\n    {\n"
            '      input_name: "ACC_IN"\n      output_name: "ACC_OUT"\n'
            "      data_type: TYPE_INT32\n      dims: [ 1 ]\n"
            "      initial_state {\n        data_type: TYPE_INT32\n        dims: [ 1 ]\n"
            '        zero_data: true\n        name: "zero"\n      }\n'
            "    }\n  ]\n"
        )
    return (
        f'name: "{name}"\n'
        'platform: "onnxruntime_onnx"\n'
        f"max_batch_size: {MAX_BATCH_SIZE}\n"
        "sequence_batching {\n"
        f"{strategy}"
        "  control_input [\n" + ",\n".join(controls) + "\n  ]\n"
        f"{state}"
        "}\n"
        'input [\n  {\n    name: "INPUT"\n    data_type: TYPE_INT32\n    dims: [ 1 ]\n  }\n]\n'
        'output [\n  {\n    name: "OUTPUT"\n    data_type: TYPE_INT32\n    dims: [ 1 ]\n  }\n]\n'
        f"{parameters}"
        f"instance_group [\n{instances}]\n"
    )


def config_text(name: str) -> str:
    """The model's config.pbtxt (the same as Triton's example)."""
    if name in SEQUENCE:
        return _sequence_config(name)
    dtype = ADD_SUB[name][1]

    def tensors(prefix: str) -> str:
        items = [
            f'  {{\n    name: "{prefix}{i}"\n    data_type: {dtype}\n    dims: [ {DIMS} ]\n  }}'
            for i in (0, 1)
        ]
        return "[\n" + ",\n".join(items) + "\n]\n"

    return (
        f'name: "{name}"\n'
        'platform: "onnxruntime_onnx"\n'
        f"max_batch_size: {MAX_BATCH_SIZE}\n"
        f"input {tensors('INPUT')}"
        f"output {tensors('OUTPUT')}"
    )


def write(out: Path) -> list[Path]:
    """Write every example model under ``out``; returns the files written."""
    written: list[Path] = []
    for name in MODELS:
        model_dir = out / name
        (model_dir / "1").mkdir(parents=True, exist_ok=True)
        config = model_dir / "config.pbtxt"
        config.write_text(config_text(name))
        onnx_file = model_dir / "1" / "model.onnx"
        onnx_file.write_bytes(build_model(name))
        written += [config, onnx_file]
    return written


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--out DIR`` (default: the bundled example repository)."""
    root = Path(__file__).resolve().parents[3]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=root / EXAMPLE_REPOSITORY)
    args = parser.parse_args(argv)
    for path in write(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
