"""Helpers for backends that run several requests as one batch (the stack-run-split idiom:
:func:`concat_inputs`, :func:`split_outputs`), and ragged batching.

:class:`BatchIO` is the ragged-batching variant (``allow_ragged_batch`` inputs, ``batch_input``
and ``batch_output``): ``BatchIO.of(config)`` is None for a model without them; otherwise its
``concat`` flattens ragged inputs and its ``split`` scatters batch outputs, as Triton's backends
do. The core adds the batch inputs to the requests of every batch before ``execute``.

The ragged-batching rules follow Triton's backend utilities (backend ``src/backend_input_collector.cc``,
``backend_output_responder.cc``, ``backend_common.cc``):

* each ``batch_input`` is computed from the shapes of its source input in the requests of the
  batch: ``BATCH_ELEMENT_COUNT`` ([requests], each request's element count),
  ``BATCH_ACCUMULATED_ELEMENT_COUNT`` ([requests], their running sum),
  ``BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO`` ([requests + 1], 0 then the running sum),
  ``BATCH_MAX_ELEMENT_COUNT_AS_SHAPE`` (shape [largest element count]: only its shape
  matters), ``BATCH_ITEM_SHAPE`` ([batch items, source rank - 1]: the shape of every batch
  item without its batch dimension) and ``BATCH_ITEM_SHAPE_FLATTEN`` (the same, flattened);
  of datatype ``TYPE_INT32`` or ``TYPE_FP32``;
* a ragged input (``allow_ragged_batch``) is given to the model flattened: the requests'
  elements concatenated into one 1-dimensional tensor;
* a ``BATCH_SCATTER_WITH_INPUT_SHAPE`` output is read from the model's output as one
  contiguous buffer: each request takes the next elements of the output's configured shape
  (batch dimension first when batching), every -1 taken from the source input's shape at the
  same position in that request.

The core calls :meth:`BatchIO.attach` on every batch it hands to a backend (where the batch is
formed), so every backend receives the batch inputs as ordinary inputs of the requests: each
request holds its part, and the requests' parts concatenated on axis 0 (what
:func:`tritonx.concat_inputs` does) are the batch tensor. A backend that runs ragged batches
uses :meth:`BatchIO.concat` and :meth:`BatchIO.split` (``tritonx.batching.BatchIO``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tritonx.config import ModelConfig
from tritonx.proto import model_config_pb2
from tritonx.types import InferenceRequest, InferenceResponse

_KIND = model_config_pb2.BatchInput.Kind
ELEMENT_COUNT = _KIND.BATCH_ELEMENT_COUNT
ACCUMULATED = _KIND.BATCH_ACCUMULATED_ELEMENT_COUNT
ACCUMULATED_WITH_ZERO = _KIND.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO
MAX_ELEMENT_COUNT_AS_SHAPE = _KIND.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE
ITEM_SHAPE = _KIND.BATCH_ITEM_SHAPE
ITEM_SHAPE_FLATTEN = _KIND.BATCH_ITEM_SHAPE_FLATTEN


def batch_input_tensor(
    kind: int, dtype: type[np.generic], shapes: Sequence[tuple[int, ...]]
) -> np.ndarray:
    """The batch input of ``kind`` for requests whose source input has ``shapes``."""
    counts = [int(np.prod(shape, dtype=np.int64)) for shape in shapes]
    if kind == ELEMENT_COUNT:
        return np.array(counts, dtype)
    if kind == ACCUMULATED:
        return np.cumsum(counts, dtype=np.int64).astype(dtype)
    if kind == ACCUMULATED_WITH_ZERO:
        return np.concatenate(([0], np.cumsum(counts, dtype=np.int64))).astype(dtype)
    if kind == MAX_ELEMENT_COUNT_AS_SHAPE:
        return np.zeros(max(counts, default=0), dtype)
    if kind in (ITEM_SHAPE, ITEM_SHAPE_FLATTEN):
        rank = len(shapes[0]) - 1 if shapes else 0
        rows = [shape[1:] for shape in shapes for _ in range(shape[0] if shape else 0)]
        items = np.array(rows, dtype).reshape(len(rows), rank)
        return items.reshape(-1) if kind == ITEM_SHAPE_FLATTEN else items
    raise ValueError(f"unsupported batch input kind {kind}")


def batch_input_parts(
    kind: int, tensor: np.ndarray, shapes: Sequence[tuple[int, ...]]
) -> list[np.ndarray]:
    """``tensor`` (:func:`batch_input_tensor`) cut into one part per request, so that the parts
    concatenated on axis 0 are ``tensor`` again."""
    n = len(shapes)
    if kind in (ELEMENT_COUNT, ACCUMULATED):
        return [tensor[i : i + 1] for i in range(n)]
    if kind == ACCUMULATED_WITH_ZERO:
        return [tensor[0:2] if i == 0 else tensor[i + 1 : i + 2] for i in range(n)]
    if kind == MAX_ELEMENT_COUNT_AS_SHAPE:
        return [tensor if i == 0 else tensor[:0] for i in range(n)]
    per_item = 1 if kind == ITEM_SHAPE else max(len(shapes[0]) - 1, 0) if shapes else 0
    parts: list[np.ndarray] = []
    start = 0
    for shape in shapes:
        end = start + (shape[0] if shape else 0) * per_item
        parts.append(tensor[start:end])
        start = end
    return parts


class BatchIO:
    """A model's ragged inputs, batch inputs and batch outputs (see the module docstring)."""

    __slots__ = ("_batching", "_inputs", "_outputs", "ragged")

    def __init__(self, config: ModelConfig) -> None:
        raw = config.raw
        self._batching = config.max_batch_size > 0
        #: the inputs with ``allow_ragged_batch``
        self.ragged = frozenset(t.name for t in config.inputs if t.allow_ragged_batch)
        fp32 = model_config_pb2.DataType.TYPE_FP32
        #: (kind, numpy dtype, source input, target names) per ``batch_input``
        self._inputs = [
            (
                int(bi.kind),
                np.float32 if bi.data_type == fp32 else np.int32,
                bi.source_input[0],
                tuple(bi.target_name),
            )
            for bi in raw.batch_input
        ]
        outputs = {t.name: t for t in config.outputs}
        #: target output → (source input, shape template with the batch dimension)
        self._outputs: dict[str, tuple[str, tuple[int, ...]]] = {}
        for bo in raw.batch_output:
            for target in bo.target_name:
                io = outputs[target]
                dims = io.reshape if io.reshape is not None else io.dims
                template = ((-1,) if self._batching else ()) + tuple(dims)
                self._outputs[target] = (bo.source_input[0], template)

    @classmethod
    def of(cls, config: ModelConfig) -> BatchIO | None:
        """The model's ``BatchIO``; None when it has no ragged input, batch input or output."""
        raw = config.raw
        if (
            not len(raw.batch_input)
            and not len(raw.batch_output)
            and not any(t.allow_ragged_batch for t in config.inputs)
        ):
            return None
        return cls(config)

    @property
    def batch_inputs(self) -> frozenset[str]:
        """The names of the batch inputs."""
        return frozenset(name for *_, targets in self._inputs for name in targets)

    @property
    def batch_outputs(self) -> frozenset[str]:
        """The names of the outputs scattered with their source input's shapes."""
        return frozenset(self._outputs)

    def attach(self, requests: Sequence[InferenceRequest]) -> None:
        """Add each batch input to the requests of a batch: every request gets its part (in a
        new ``inputs`` dict: the one the request came with may be shared)."""
        extra: list[dict[str, np.ndarray]] = [{} for _ in requests]
        for kind, dtype, source, targets in self._inputs:
            shapes = [tuple(int(d) for d in r.inputs[source].shape) for r in requests]
            tensor = batch_input_tensor(kind, dtype, shapes)
            parts = batch_input_parts(kind, tensor, shapes)
            for added, part in zip(extra, parts, strict=True):
                for target in targets:
                    added[target] = part
        for request, added in zip(requests, extra, strict=True):
            request.inputs = {**request.inputs, **added}

    def concat(self, requests: Sequence[InferenceRequest]) -> dict[str, np.ndarray]:
        """The batch's input tensors: ragged inputs flattened and concatenated, the others
        (batch inputs included) concatenated on axis 0."""
        names = requests[0].inputs.keys()
        out: dict[str, np.ndarray] = {}
        for name in names:
            arrays = [r.inputs[name] for r in requests]
            if name in self.ragged:
                arrays = [a.reshape(-1) for a in arrays]
            out[name] = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0)
        return out

    def split(
        self, requests: Sequence[InferenceRequest], outputs: Mapping[str, np.ndarray]
    ) -> list[InferenceResponse]:
        """One response per request: batch outputs scattered with the shapes of their source
        input, the other outputs split by each request's batch size."""
        per_request: list[dict[str, np.ndarray]] = [{} for _ in requests]
        for name, array in outputs.items():
            scatter = self._outputs.get(name)
            if scatter is None:
                start = 0
                for request, out in zip(requests, per_request, strict=True):
                    if len(requests) == 1:
                        out[name] = array
                        continue
                    end = start + request.batch_size
                    out[name] = array[start:end]
                    start = end
                continue
            source, template = scatter
            flat = np.asarray(array).reshape(-1)
            offset = 0
            for request, out in zip(requests, per_request, strict=True):
                shape = _scatter_shape(template, request.inputs[source].shape)
                count = int(np.prod(shape, dtype=np.int64))
                out[name] = flat[offset : offset + count].reshape(shape)
                offset += count
        return [InferenceResponse(outputs=out) for out in per_request]


def _scatter_shape(template: tuple[int, ...], source: tuple[Any, ...]) -> tuple[int, ...]:
    """Triton's naive rule: a -1 of the output takes the source input's dimension there."""
    return tuple(
        int(source[i]) if d == -1 and i < len(source) else int(d) for i, d in enumerate(template)
    )


def concat_inputs(requests: Sequence[InferenceRequest]) -> dict[str, np.ndarray]:
    """Each input of ``requests`` concatenated along the batch axis (axis 0).

    With one request the arrays are returned as they are (no copy).
    """
    if len(requests) == 1:
        return dict(requests[0].inputs)
    names = requests[0].inputs.keys()
    return {n: np.concatenate([r.inputs[n] for r in requests], axis=0) for n in names}


def split_outputs(
    requests: Sequence[InferenceRequest], outputs: Mapping[str, np.ndarray]
) -> list[InferenceResponse]:
    """Split batched ``outputs`` back into one response per request (by each batch size).

    The slices are views of ``outputs``: no tensor bytes are copied.
    """
    if len(requests) == 1:
        return [InferenceResponse(outputs=dict(outputs))]
    responses: list[InferenceResponse] = []
    start = 0
    for request in requests:
        end = start + request.batch_size
        responses.append(InferenceResponse(outputs={n: a[start:end] for n, a in outputs.items()}))
        start = end
    return responses


__all__ = [
    "BatchIO",
    "concat_inputs",
    "split_outputs",
]
