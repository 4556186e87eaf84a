"""Generate the ONNX models of tritonx's bundled example repository.

Writes ``<out>/<model>/config.pbtxt`` and ``<out>/<model>/1/model.onnx`` for the equivalents
of Triton's ``docs/examples/model_repository`` simple models:

* ``simple``: INPUT0, INPUT1 INT32 [16] → OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1;
* ``simple_int8``: the same on INT8 tensors (computed in INT32, cast back: wraps around);
* ``simple_string``: the same on STRING tensors holding decimal integers (parsed as INT32,
  results written back as decimal strings).

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

OPSET = 17
IR_VERSION = 8
DIMS = 16
MAX_BATCH_SIZE = 8

#: where the bundled example repository lives, relative to the repository root
EXAMPLE_REPOSITORY = Path("core/src/tritonx/examples/model_repository")

#: model name → (ONNX element type name, config datatype)
MODELS: dict[str, tuple[str, str]] = {
    "simple": ("INT32", "TYPE_INT32"),
    "simple_int8": ("INT8", "TYPE_INT8"),
    "simple_string": ("STRING", "TYPE_STRING"),
}


def build_model(name: str) -> bytes:
    """The serialized ONNX graph of example model ``name``."""
    from onnx import TensorProto, checker, helper

    elem = getattr(TensorProto, MODELS[name][0])
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
    shape = ["batch", DIMS]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, elem, shape) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, elem, shape) for n in ("OUTPUT0", "OUTPUT1")],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="tritonx make_example_models.py",
        ir_version=IR_VERSION,
    )
    checker.check_model(model, full_check=True)
    return model.SerializeToString(deterministic=True)


def config_text(name: str) -> str:
    """The model's config.pbtxt (the same as Triton's example)."""
    dtype = MODELS[name][1]

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
