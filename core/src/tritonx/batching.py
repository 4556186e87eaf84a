"""Helpers for backends that run several requests as one batch (the stack-run-split idiom).

:class:`BatchIO` is the ragged-batching variant (``allow_ragged_batch`` inputs, ``batch_input``
and ``batch_output``): ``BatchIO.of(config)`` is None for a model without them; otherwise its
``concat`` flattens ragged inputs and its ``split`` scatters batch outputs, as Triton's backends
do. The core adds the batch inputs to the requests of every batch before ``execute``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tritonx._core.batch_inputs import BatchIO
from tritonx.types import InferenceRequest, InferenceResponse


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
