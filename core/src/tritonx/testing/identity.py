"""The ``identity`` test backend: each output echoes the input at the same position.

Registered only by the test fixtures (``tritonx.testing``), never by the server itself.
Model ``parameters`` make it useful for scheduler tests:

* ``execute_delay_ms``: sleep this long in every ``execute`` call;
* ``fail_value``: a request whose first input element equals this value gets an error;
* ``repeat``: for decoupled models, how many responses to send per request (default 1),
  or the first element of the input named by ``repeat_input``.

Every instance appends the batch sizes it executes to ``IdentityBackend.batches[model]``.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

import tritonx
from tritonx import Backend, InferenceRequest, InferenceResponse, LoadContext, ModelInstance
from tritonx.errors import Code, TritonXError


@tritonx.hookimpl
def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
    registry.add(IdentityBackend)


class IdentityBackend(Backend):
    """Echo backend used by tests and the backend contract suite."""

    name = "identity"
    batches: ClassVar[dict[str, list[int]]] = defaultdict(list)
    loads: ClassVar[dict[str, int]] = defaultdict(int)
    _lock = threading.Lock()

    def load(self, ctx: LoadContext) -> ModelInstance:
        params = ctx.parameters
        if params.get("fail_load"):
            raise TritonXError(
                f"identity model '{ctx.model_name}' asked to fail its load", Code.INVALID_ARG
            )
        if params.get("load_delay_ms"):
            time.sleep(float(params["load_delay_ms"]) / 1000)
        with self._lock:
            self.loads[ctx.model_name] += 1
        return IdentityInstance(ctx)


class IdentityInstance(ModelInstance):
    def __init__(self, ctx: LoadContext) -> None:
        params = ctx.parameters
        self.model = ctx.model_name
        self.instance = ctx.instance.name
        self.delay = float(params.get("execute_delay_ms", "0")) / 1000
        self.fail_value = params.get("fail_value")
        self.repeat = int(params.get("repeat", "1"))
        self.repeat_input = params.get("repeat_input")
        self.inputs = [t.name for t in ctx.config.inputs]
        self.outputs = [t.name for t in ctx.config.outputs]
        self.decoupled = ctx.config.decoupled

    def _answer(self, request: InferenceRequest) -> InferenceResponse:
        if self.fail_value is not None and request.inputs:
            first = next(iter(request.inputs.values())).reshape(-1)
            if first.size and str(first[0]) == self.fail_value:
                return InferenceResponse.failed(
                    TritonXError(f"fail_value {self.fail_value} seen", Code.INVALID_ARG)
                )
        outputs: dict[str, np.ndarray] = {}
        for src, dst in zip(self.inputs, self.outputs, strict=False):
            if src in request.inputs:
                outputs[dst] = request.inputs[src]
        return InferenceResponse(outputs=outputs, parameters={"instance": self.instance})

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse] | None:
        with IdentityBackend._lock:
            IdentityBackend.batches[self.model].append(sum(r.batch_size for r in requests))
        if self.delay:
            time.sleep(self.delay)
        if not self.decoupled:
            return [self._answer(r) for r in requests]
        for request in requests:
            sender = request.get_response_sender()
            count = self.repeat
            if self.repeat_input:
                count = int(request.inputs[self.repeat_input].reshape(-1)[0])
            for _ in range(count):
                sender.send(self._answer(request))
            sender.send(final=True)
        return None
