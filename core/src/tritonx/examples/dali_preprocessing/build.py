"""Builds the DALI pre-processing → CNN example repository (see the package docstring).

DALI, onnx and Pillow are imported inside the functions that need them.
"""

from __future__ import annotations

import importlib
import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np

#: Side of the square images the CNN takes.
SIZE = 32
#: Classes the CNN scores.
CLASSES = 10
#: ImageNet mean and standard deviation per RGB channel, on the 0..255 scale.
MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


def preprocess_pipeline(size: int = SIZE, batch_size: int = 8) -> bytes:
    """The serialized DALI pipeline: ``IMAGE`` (encoded bytes, UINT8 1-D per sample) →
    decode (RGB, CPU) → resize to ``size`` x ``size`` → normalise → CHW FP32."""
    dali = importlib.import_module("nvidia.dali")
    fn = importlib.import_module("nvidia.dali.fn")
    types = importlib.import_module("nvidia.dali.types")

    def define() -> Any:
        images = fn.external_source(device="cpu", name="IMAGE", dtype=types.UINT8, ndim=1)
        images = fn.decoders.image(images, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=size, resize_y=size)
        return fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", mean=list(MEAN), std=list(STD)
        )

    pipe = dali.Pipeline(
        batch_size=batch_size,
        num_threads=1,
        device_id=None,
        output_dtype=[types.FLOAT],
        output_ndim=[3],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pipe:
            pipe.set_outputs(define())
        data: bytes = pipe.serialize()
    return data


def cnn_model(size: int = SIZE, classes: int = CLASSES, seed: int = 0) -> bytes:
    """A small CNN as ONNX, random weights (seed ``seed``): conv3x3(3→8)-relu-maxpool2,
    conv3x3(8→16)-relu, global average pool, fc ``classes``. ``input`` [N,3,size,size] →
    ``logits`` [N,classes]."""
    onnx = importlib.import_module("onnx")
    helper = onnx.helper
    numpy_helper = onnx.numpy_helper
    rng = np.random.default_rng(seed)

    def init(name: str, shape: tuple[int, ...], scale: float) -> Any:
        values = (rng.standard_normal(shape) * scale).astype(np.float32)
        return numpy_helper.from_array(values, name)

    inits = [
        init("w1", (8, 3, 3, 3), 0.3),
        init("b1", (8,), 0.1),
        init("w2", (16, 8, 3, 3), 0.2),
        init("b2", (16,), 0.1),
        init("fc_w", (classes, 16), 0.3),
        init("fc_b", (classes,), 0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    elem = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("input", elem, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("logits", elem, ["batch", classes])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def pil_preprocess(jpeg: bytes, size: int = SIZE) -> np.ndarray:
    """The same pre-processing with Pillow and numpy (decode, bilinear resize, normalise,
    CHW): a reference that agrees with DALI's only loosely (its JPEG decoder and its resize
    filter differ; the plugin README gives the measured difference)."""
    image_module = importlib.import_module("PIL.Image")
    with image_module.open(io.BytesIO(jpeg)) as image:
        rgb = image.convert("RGB").resize((size, size), image_module.Resampling.BILINEAR)
        pixels = np.asarray(rgb, dtype=np.float32)
    normalised = (pixels - np.asarray(MEAN, np.float32)) / np.asarray(STD, np.float32)
    return np.ascontiguousarray(normalised.transpose(2, 0, 1))


def _write(path: Path, content: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)


def build_repository(
    root: Path, *, size: int = SIZE, classes: int = CLASSES, max_batch_size: int = 8
) -> Path:
    """Write ``preprocess``, ``cnn`` and ``dali_cnn`` under ``root``; returns ``root``."""
    root = Path(root)
    _write(root / "preprocess" / "1" / "model.dali", preprocess_pipeline(size, max_batch_size))
    _write(
        root / "preprocess" / "config.pbtxt",
        f"""name: "preprocess"
backend: "dali"
max_batch_size: {max_batch_size}
input [ {{ name: "IMAGE", data_type: TYPE_UINT8, dims: [ -1 ], allow_ragged_batch: true }} ]
output [ {{ name: "PIXELS", data_type: TYPE_FP32, dims: [ 3, {size}, {size} ] }} ]
dynamic_batching {{ }}
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
""",
    )
    _write(root / "cnn" / "1" / "model.onnx", cnn_model(size, classes))
    _write(
        root / "cnn" / "config.pbtxt",
        f"""name: "cnn"
backend: "onnxruntime"
max_batch_size: {max_batch_size}
input [ {{ name: "input", data_type: TYPE_FP32, dims: [ 3, {size}, {size} ] }} ]
output [ {{ name: "logits", data_type: TYPE_FP32, dims: [ {classes} ] }} ]
dynamic_batching {{ }}
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
""",
    )
    _write(
        root / "dali_cnn" / "config.pbtxt",
        f"""name: "dali_cnn"
platform: "ensemble"
max_batch_size: {max_batch_size}
input [ {{ name: "IMAGE", data_type: TYPE_UINT8, dims: [ -1 ] }} ]
output [ {{ name: "LOGITS", data_type: TYPE_FP32, dims: [ {classes} ] }} ]
ensemble_scheduling {{
  step [
    {{
      model_name: "preprocess"
      model_version: -1
      input_map {{ key: "IMAGE" value: "IMAGE" }}
      output_map {{ key: "PIXELS" value: "pixels" }}
    }},
    {{
      model_name: "cnn"
      model_version: -1
      input_map {{ key: "input" value: "pixels" }}
      output_map {{ key: "logits" value: "LOGITS" }}
    }}
  ]
}}
""",
    )
    (root / "dali_cnn" / "1").mkdir(parents=True, exist_ok=True)
    return root
