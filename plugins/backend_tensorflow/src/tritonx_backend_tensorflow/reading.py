"""Reading a TensorFlow model without running it: the platform constants, a SavedModel's meta
graph and serving signature (as Triton picks them), a frozen GraphDef, and their inputs and
outputs as :class:`~tritonx_backend_tensorflow.signature.TensorInfo` lists.

tensorflow (and its protobuf modules) are imported inside the functions (:func:`import_tf`),
never at import time.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from tritonx import ModelConfig
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx_backend_tensorflow.signature import TensorInfo, check_supported

log = logging.getLogger("tritonx.backend.tensorflow")

SAVEDMODEL = "tensorflow_savedmodel"
GRAPHDEF = "tensorflow_graphdef"
#: The model file of each platform when the config names none (Triton's names).
DEFAULT_FILES = {SAVEDMODEL: "model.savedmodel", GRAPHDEF: "model.graphdef"}
#: Signatures that are never the serving one (Triton skips them when it picks one).
_NOT_SERVING = ("__saved_model_init_op", "__saved_model_train_op")


def import_tf() -> Any:
    """The ``tensorflow`` module, imported on first use (UNAVAILABLE without it)."""
    # TensorFlow's C++ INFO lines (oneDNN notices, session starts) are not server logs
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    try:
        import tensorflow as tf
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise TritonXError(
            f"the tensorflow backend needs the tensorflow-cpu (or tensorflow) package: {exc}",
            Code.UNAVAILABLE,
        ) from exc
    return tf


def tf_error(exc: BaseException) -> TritonXError:
    """A TensorFlow exception as a TritonXError (INTERNAL, TensorFlow's message)."""
    if isinstance(exc, TritonXError):
        return exc
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return TritonXError(message.strip(), Code.INTERNAL)


def platform_of(config: ModelConfig) -> str:
    """The config's TensorFlow platform; another value is Triton's INVALID_ARG."""
    platform = config.platform
    if platform not in DEFAULT_FILES:
        raise invalid_arg(f"platform {platform} not supported for TensorFlow model '{config.name}'")
    return platform


def _dtype_name(tf: Any, dtype: Any) -> str:
    from tensorflow.core.framework import types_pb2

    enum = dtype if isinstance(dtype, int) else tf.dtypes.as_dtype(dtype).as_datatype_enum
    return str(types_pb2.DataType.Name(enum))


def _dims(shape: Any) -> tuple[int, ...]:
    """A ``TensorShapeProto`` as Triton reads it: an unknown rank is rank 0."""
    if shape.unknown_rank:
        return ()
    return tuple(int(d.size) for d in shape.dim)


def read_saved_model(path: Path) -> Any:
    """The ``SavedModel`` message of a SavedModel folder (``saved_model.pb`` or ``.pbtxt``)."""
    from google.protobuf import message, text_format
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    pb, pbtxt = path / "saved_model.pb", path / "saved_model.pbtxt"
    try:
        if pb.is_file():
            proto.ParseFromString(pb.read_bytes())
        elif pbtxt.is_file():
            text_format.Parse(pbtxt.read_text(), proto)
        else:
            raise TritonXError(
                f"SavedModel file does not exist at: {path}/{{saved_model.pbtxt|saved_model.pb}}",
                Code.INTERNAL,
            )
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as exc:
        raise TritonXError(
            f"Could not parse SavedModel at {path}: {exc or 'not a SavedModel protobuf'}",
            Code.INTERNAL,
        ) from exc
    return proto


def pick_meta_graph(proto: Any, tag: str, model: str) -> Any:
    """The meta graph whose tag set is exactly ``{tag}`` (``serve`` when empty), as
    TensorFlow's ``LoadSavedModel`` (which Triton calls) picks it, with its message."""
    tag = tag or "serve"
    for meta in proto.meta_graphs:
        if set(meta.meta_info_def.tags) == {tag}:
            return meta
    available = "; ".join(
        "{ " + ", ".join(sorted(m.meta_info_def.tags)) + " }" for m in proto.meta_graphs
    )
    raise TritonXError(
        f"Could not find meta graph def matching supplied tags: {{ {tag} }}. To inspect "
        "available tag-sets in the SavedModel, please use the SavedModel CLI: "
        f"`saved_model_cli` (this one has: {available or 'none'})",
        Code.INTERNAL,
    )


def pick_signature(meta: Any, name: str, model: str) -> tuple[str, Any]:
    """The signature ``name`` (``serving_default`` when empty, else the first other than the
    init and train ones, with a warning), as Triton picks it."""
    key = name or "serving_default"
    defs = meta.signature_def
    if key in defs:
        return key, defs[key]
    if not name:
        for other in sorted(defs):
            if other not in _NOT_SERVING:
                log.warning(
                    "unable to find serving signature '%s' in model '%s'; using signature '%s'",
                    key,
                    model,
                    other,
                )
                return other, defs[other]
    raise TritonXError(f"unable to load model '{model}', expected '{key}' signature", Code.INTERNAL)


def signature_io(tf: Any, sig: Any, model: str) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """A signature's inputs and outputs (sorted by name), unsupported datatypes refused."""
    inputs = [
        TensorInfo(k, v.name, _dtype_name(tf, v.dtype), _dims(v.tensor_shape))
        for k, v in sorted(sig.inputs.items())
    ]
    outputs = [
        TensorInfo(k, v.name, _dtype_name(tf, v.dtype), _dims(v.tensor_shape))
        for k, v in sorted(sig.outputs.items())
    ]
    for ios in (inputs, outputs):
        for io in ios:
            if not io.tensor:
                raise TritonXError(
                    f"unable to load model '{model}': signature tensor '{io.name}' is not a "
                    "dense tensor (composite and sparse signature tensors are not supported)",
                    Code.INTERNAL,
                )
    check_supported(inputs, "input", model)
    check_supported(outputs, "output", model)
    return inputs, outputs


def read_graph_def(tf: Any, path: Path, model: str) -> Any:
    """The ``GraphDef`` in ``path`` (binary protobuf), Triton's messages for bad ones."""
    from google.protobuf import message

    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(path.read_bytes())
    except (message.DecodeError, OSError) as exc:
        raise TritonXError(f"Can't parse {path} as binary proto: {exc}", Code.INTERNAL) from exc
    if not graph_def.node:
        raise TritonXError(f"model {model} has an empty network", Code.INTERNAL)
    return graph_def


def graph_io(tf: Any, graph: Any, graph_def: Any) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """A GraphDef's potential inputs (placeholders) and outputs (every other node)."""
    inputs: list[TensorInfo] = []
    outputs: list[TensorInfo] = []
    for node in graph_def.node:
        if node.op == "Placeholder":
            dtype = _dtype_name(tf, node.attr["dtype"].type)
            dims = _dims(node.attr["shape"].shape) if "shape" in node.attr else ()
            inputs.append(TensorInfo(node.name, f"{node.name}:0", dtype, dims))
        else:
            op = graph.get_operation_by_name(node.name)
            dtype = _dtype_name(tf, op.outputs[0].dtype) if op.outputs else ""
            outputs.append(TensorInfo(node.name, f"{node.name}:0", dtype))
    return inputs, outputs


def placeholder_io(tf: Any, graph_def: Any) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """A GraphDef's potential inputs (placeholders) and outputs (every other node, datatype
    unknown), read from the ``GraphDef`` alone (no graph, no session)."""
    inputs = [
        TensorInfo(
            n.name,
            f"{n.name}:0",
            _dtype_name(tf, n.attr["dtype"].type),
            _dims(n.attr["shape"].shape),
        )
        for n in graph_def.node
        if n.op == "Placeholder"
    ]
    outputs = [
        TensorInfo(n.name, f"{n.name}:0", "") for n in graph_def.node if n.op != "Placeholder"
    ]
    return inputs, outputs
