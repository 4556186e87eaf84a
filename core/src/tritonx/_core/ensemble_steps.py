"""The data flow of an ensemble's steps, without the requests that run it
(:mod:`tritonx._core.ensemble` runs them).

Each step of ``ensemble_scheduling`` is resolved once against its composing model's
completed config (:func:`resolve_steps`); a request for some outputs runs only the steps
that lead to them (:func:`pruned_flow`). Between a batching and a non-batching model a
tensor gains or loses a batch dimension of 1 (:func:`reshaped`). A composing model's
response may set the sequence parameters of its outputs (:func:`sequence_override`), which
the ensemble's response then reports (:func:`sequence_parameters`). A step's
``max_inflight_requests`` is a :class:`StepLimiter`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonx._core.ensemble_config import dims_match
from tritonx._core.namespaces import step_model
from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError
from tritonx.types import SEQUENCE_END, SEQUENCE_START

log = logging.getLogger("tritonx.ensemble")

#: Seconds a step waits for a ``max_inflight_requests`` slot before it goes ahead anyway
#: (Triton's ``kMutexTimeoutSeconds``: a pipeline never deadlocks on the limit).
INFLIGHT_WAIT_S = 300.0


@dataclass(frozen=True, slots=True)
class Step:
    """One step, resolved against its composing model's config."""

    index: int
    model: str
    #: None: the latest ready version (``model_version: -1``)
    version: int | None
    #: (model input, ensemble tensor) pairs
    inputs: tuple[tuple[str, str], ...]
    #: model output → ensemble tensor
    outputs: Mapping[str, str]
    #: the model outputs the step asks for
    requested: tuple[str, ...]
    decoupled: bool
    batching: bool
    #: model input → its configured dims (without the batch dimension)
    input_dims: Mapping[str, tuple[int, ...]]


#: The sequence parameters a step's output carries to the steps that read it (Triton's
#: ``parameter_override_``): (correlation id, request flags).
Seq = tuple[int | str, int]

#: An ensemble tensor's value: the array (None when it is absent: an optional ensemble input
#: the request left out, or an output its step did not produce, which is then an absent
#: optional input downstream), the batch size of the request that made it (0 when it came
#: from a model without batching) and, for a step's output, its sequence parameters.
Value = tuple[np.ndarray | None, int, Seq | None]

#: The most requested-output sets whose pruned data flow an ensemble keeps.
PLAN_CACHE = 64

#: Response parameters of a composing model that set the sequence parameters of its outputs.
SEQ_PARAMS = ("sequence_id", "sequence_start", "sequence_end")


def reshaped(dims: Sequence[int], batching: bool, batch_size: int, array: np.ndarray) -> np.ndarray:
    """Triton's ``ReshapeTensorDims``: between a batching and a non-batching model, add or
    drop a batch dimension of 1 when the shapes ask for it (a view, never a copy)."""
    if batching == (batch_size != 0):
        return array
    if batching:
        if dims_match(dims, array.shape):
            return array.reshape((1, *array.shape))
        return array
    if not dims_match(dims, array.shape) and batch_size == 1 and array.ndim > 0:
        return array.reshape(array.shape[1:])
    return array


class StepLimiter:
    """``max_inflight_requests`` for one step, shared by every request of the ensemble."""

    __slots__ = ("_slots",)

    def __init__(self, limit: int) -> None:
        self._slots = asyncio.Semaphore(limit)

    async def acquire(self, ensemble: str, step: int) -> bool:
        try:
            await asyncio.wait_for(self._slots.acquire(), INFLIGHT_WAIT_S)
        except TimeoutError:
            log.error(
                "[Internal Error] Ensemble '%s' unable to schedule step %d for %d seconds. "
                "Proceeding to avoid deadlock.",
                ensemble,
                step,
                int(INFLIGHT_WAIT_S),
            )
            return False
        return True

    def release(self) -> None:
        self._slots.release()


def sequence_override(parameters: Mapping[str, object], correlation_id: int | str) -> Seq | None:
    """The sequence parameters a composing model's response sets (``sequence_id``,
    ``sequence_start``, ``sequence_end``), or None when it sets none; INVALID_ARG with
    Triton's messages for a parameter of the wrong type."""
    if not any(name in parameters for name in SEQ_PARAMS):
        return None
    flags = 0
    if "sequence_id" in parameters:
        value = parameters["sequence_id"]
        if isinstance(value, np.integer):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise TritonXError(
                "expected parameter 'sequence_id' to be TRITONSERVER_PARAMETER_INT or "
                "TRITONSERVER_PARAMETER_STRING",
                Code.INVALID_ARG,
            )
        correlation_id = value
    for name, bit in (("sequence_start", SEQUENCE_START), ("sequence_end", SEQUENCE_END)):
        if name not in parameters:
            continue
        value = parameters[name]
        if not isinstance(value, (bool, np.bool_)):
            raise TritonXError(
                f"expect parameter '{name}' to be TRITONSERVER_PARAMETER_BOOL", Code.INVALID_ARG
            )
        if value:
            flags |= bit
    return correlation_id, flags


def sequence_parameters(seq: Seq, request_id: int | str) -> dict[str, int | str | bool]:
    """The response parameters Triton adds to an ensemble response for an output a step
    wrote: its sequence id (typed as the ensemble request's correlation id) and flags."""
    correlation_id, flags = seq
    sequence_id: int | str
    if isinstance(request_id, str):
        sequence_id = correlation_id if isinstance(correlation_id, str) else str(correlation_id)
    else:
        sequence_id = correlation_id if isinstance(correlation_id, int) else 0
    return {
        "sequence_id": sequence_id,
        "sequence_start": bool(flags & SEQUENCE_START),
        "sequence_end": bool(flags & SEQUENCE_END),
    }


def resolve_steps(
    steps: Iterable[Any], composing: Mapping[str, ModelConfig]
) -> tuple[tuple[Step, ...], dict[str, tuple[int, ...]]]:
    """The steps of ``ensemble_scheduling`` (``ModelEnsembling.Step`` messages) resolved
    against their composing models' completed configs, and for each ensemble tensor the
    steps that read it (in step order)."""
    resolved: list[Step] = []
    consumers: dict[str, list[int]] = {}
    for index, step in enumerate(steps):
        model = composing[step.model_name]
        inputs = tuple(step.input_map.items())
        resolved.append(
            Step(
                index=index,
                model=step_model(step),  # (in its namespace, with --model-namespacing)
                version=None if step.model_version < 0 else int(step.model_version),
                inputs=inputs,
                outputs=dict(step.output_map),
                requested=tuple(step.output_map),
                decoupled=model.decoupled,
                batching=model.max_batch_size > 0,
                input_dims={t.name: t.dims for t in model.inputs},
            )
        )
        for _, tensor in inputs:
            uses = consumers.setdefault(tensor, [])
            if index not in uses:
                uses.append(index)
    return tuple(resolved), {t: tuple(s) for t, s in consumers.items()}


def pruned_flow(
    requested: Iterable[str],
    steps: Sequence[Step],
    producers: Mapping[str, int],
    consumers: Mapping[str, tuple[int, ...]],
) -> dict[str, tuple[int, ...]]:
    """The data flow of a request for the ``requested`` outputs: tensor → the steps that
    read it, without the steps none of whose outputs lead to a requested output (Triton
    prunes them: they do not run). ``producers``: ensemble tensor → the step that writes
    it."""
    active: set[int] = set()
    needed = set(requested)
    pending = list(needed)
    while pending:
        index = producers.get(pending.pop())
        if index is None or index in active:  # an ensemble input, or a step seen
            continue
        active.add(index)
        for _, tensor in steps[index].inputs:
            if tensor not in needed:
                needed.add(tensor)
                pending.append(tensor)
    return {
        tensor: tuple(i for i in readers if i in active) for tensor, readers in consumers.items()
    }
