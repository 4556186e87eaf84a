"""Filler requests of the sequence batcher's direct strategy (Triton's null requests,
``CopyAsNull``): a direct batch covers slots 0 to the highest slot with a request, and each
idle slot below that gets a not-ready request shaped like the batch's others, so every
sequence keeps its row. Fillers run but have no client (``deliver`` None): they are not
answered and collect no statistics.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tritonx._core.batcher import Pending
from tritonx._core.sequence import SequenceSettings
from tritonx.types import InferenceRequest, InferenceResponse, ResponseSender

#: The most filler shapes kept (the cache is emptied when it is full).
MAX_SHAPES = 16


class Fillers:
    """Makes the filler requests of one model, keeping their inputs per shape."""

    __slots__ = ("_decoupled", "_model", "_settings", "_templates")

    def __init__(self, model: str, settings: SequenceSettings, decoupled: bool) -> None:
        self._model = model
        self._settings = settings
        self._decoupled = decoupled
        #: filler inputs by the shapes of the requests they stand beside
        self._templates: dict[tuple[Any, ...], dict[str, np.ndarray]] = {}

    def make(self, representative: Pending) -> Pending:
        """A not-ready request shaped like ``representative``: zeros (empty strings for
        BYTES), the not-ready controls, a zero state. The arrays are read-only and shared
        by the fillers of one shape."""
        inputs = representative.request.inputs
        key = tuple((n, a.shape, a.dtype) for n, a in inputs.items())
        template = self._templates.get(key)
        if template is None:
            settings = self._settings
            controls = settings.injected.difference(s.input_name for s in settings.states)
            template = {}
            for name, array in inputs.items():
                if name in controls:
                    continue
                zeros = (
                    np.full(array.shape, b"", dtype=object)
                    if array.dtype == object
                    else np.zeros(array.shape, array.dtype)
                )
                zeros.flags.writeable = False
                template[name] = zeros
            template.update(settings.notready)
            if len(self._templates) >= MAX_SHAPES:
                self._templates.clear()
            self._templates[key] = template
        request = InferenceRequest(self._model, dict(template))
        if self._decoupled:
            request.response_sender = ResponseSender(_discard)
        return Pending(request, None, -1)


def _discard(response: InferenceResponse | None, final: bool) -> None:
    """The response sender of filler requests of decoupled models."""
