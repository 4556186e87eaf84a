"""Small TensorFlow models for tests and examples, built here (nothing is downloaded; weights
come from a fixed seed): SavedModels saved from a ``tf.Module`` and a GraphDef frozen from a
``tf.function``.

tensorflow is imported inside each function (importing this module stays light).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def tree(folder: Path, prefix: str) -> dict[str, bytes]:
    """Every file under ``folder`` as ``{prefix/relative path: bytes}`` (for
    ``ModelRepositoryBuilder.add(versions={1: tree(...)})``)."""
    return {
        f"{prefix}/{p.relative_to(folder).as_posix()}": p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def dense_module() -> Any:
    """A ``tf.Module`` with two signatures:

    * ``serving_default``: ``x`` FP32 ``[batch, seq, 4]`` (variable ``seq``) ->
      ``y = tanh(x @ W + b)`` FP32 ``[batch, seq, 3]`` and ``total = sum(y)`` per batch item,
      FP32 ``[batch]`` (a scalar per item);
    * ``double``: ``a`` INT64 ``[batch, 2]`` -> ``b = 2 * a``.
    """
    import tensorflow as tf

    class Dense(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(tf.random.stateless_normal((4, 3), seed=(1, 2)), name="w")
            self.b = tf.Variable(tf.random.stateless_normal((3,), seed=(3, 4)), name="b")

        @tf.function(input_signature=[tf.TensorSpec([None, None, 4], tf.float32, name="x")])
        def serve(self, x: Any) -> dict[str, Any]:
            y = tf.tanh(tf.einsum("bsi,io->bso", x, self.w) + self.b)
            return {"y": y, "total": tf.reduce_sum(y, axis=[1, 2])}

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.int64, name="a")])
        def double(self, a: Any) -> dict[str, Any]:
            return {"b": a * 2}

    return Dense()


def save_dense(path: Path) -> Any:
    """Save :func:`dense_module` as a SavedModel at ``path``; returns the module."""
    import tensorflow as tf

    module = dense_module()
    tf.saved_model.save(
        module, str(path), signatures={"serving_default": module.serve, "double": module.double}
    )
    return module


def string_module() -> Any:
    """A ``tf.Module`` whose ``serving_default`` takes ``text`` BYTES ``[batch, 2]`` and
    returns ``upper`` (BYTES, upper-cased) and ``length`` (INT32, bytes per string)."""
    import tensorflow as tf

    class Strings(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.string, name="text")])
        def serve(self, text: Any) -> dict[str, Any]:
            return {"upper": tf.strings.upper(text), "length": tf.strings.length(text)}

    return Strings()


def save_strings(path: Path) -> Any:
    """Save :func:`string_module` as a SavedModel at ``path``; returns the module."""
    import tensorflow as tf

    module = string_module()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return module


def save_parser(path: Path) -> Any:
    """Save a SavedModel whose ``serving_default`` parses ``text`` BYTES ``[batch, 1]`` into
    ``number`` FP32 ``[batch, 1]`` (``tf.strings.to_number``: a string that is not a number
    makes TensorFlow fail the run); returns the module."""
    import tensorflow as tf

    class Parser(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.string, name="text")])
        def serve(self, text: Any) -> dict[str, Any]:
            return {"number": tf.strings.to_number(text)}

    module = Parser()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return module


def frozen_graph() -> tuple[bytes, Any]:
    """A GraphDef frozen from a ``tf.function``: placeholders ``a`` and ``b`` FP32
    ``[batch, 3]`` -> node ``out = a @ W + b`` FP32 ``[batch, 3]`` (W a frozen variable).

    Returns the serialized GraphDef and the concrete function (the reference)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    w = tf.Variable(tf.random.stateless_normal((3, 3), seed=(5, 6)))

    @tf.function
    def fn(a: Any, b: Any) -> Any:
        return tf.identity(tf.matmul(a, w) + b, name="out")

    concrete = fn.get_concrete_function(
        tf.TensorSpec([None, 3], tf.float32, name="a"),
        tf.TensorSpec([None, 3], tf.float32, name="b"),
    )
    frozen = convert_variables_to_constants_v2(concrete)
    return frozen.graph.as_graph_def().SerializeToString(), concrete


def save_tf1(path: Path, tag: str = "serve1") -> None:
    """Save a TensorFlow 1 style SavedModel (graph mode, ``SavedModelBuilder``) tagged
    ``tag`` only: ``serving_default`` maps ``in`` INT32 ``[batch, 3]`` to ``out = in + 10``
    and ``neg = -in``."""
    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default(), v1.Session(graph=graph) as session:
        x = v1.placeholder(tf.int32, [None, 3], name="input")
        out = tf.identity(x + 10, name="output")
        neg = tf.negative(x, name="negated")
        builder = v1.saved_model.Builder(str(path))
        sig = v1.saved_model.predict_signature_def({"in": x}, {"out": out, "neg": neg})
        builder.add_meta_graph_and_variables(
            session, [tag], signature_def_map={"serving_default": sig}
        )
        builder.save()


def graph_with_init_op() -> bytes:
    """A TensorFlow 1 style GraphDef (not frozen) whose variable ``scale`` ([1, 2], FP32,
    initial value [3, 4]) must be initialised by running the ``init`` operation:
    placeholder ``x`` FP32 ``[batch, 2]`` -> ``y = x * scale``."""
    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 2], name="x")
        scale = v1.Variable([[3.0, 4.0]], name="scale")
        tf.identity(x * scale, name="y")
        v1.variables_initializer([scale], name="init")
    return bytes(graph.as_graph_def().SerializeToString())


def save_ragged(path: Path) -> None:
    """Save a SavedModel for ragged batching: ``x`` FP32 ``[-1]`` (the requests' elements,
    flattened and concatenated) and ``ends`` INT32 ``[-1]`` (each request's accumulated element
    count, Triton's ``BATCH_ACCUMULATED_ELEMENT_COUNT``) -> ``sum`` FP32 ``[-1]``, the sum of
    each request's elements."""
    import tensorflow as tf

    class Ragged(tf.Module):
        @tf.function(
            input_signature=[
                tf.TensorSpec([None], tf.float32, name="x"),
                tf.TensorSpec([None], tf.int32, name="ends"),
            ]
        )
        def serve(self, x: Any, ends: Any) -> dict[str, Any]:
            rows = tf.RaggedTensor.from_row_limits(x, tf.cast(ends, tf.int64))
            return {"sum": tf.reduce_sum(rows, axis=1)}

    module = Ragged()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
