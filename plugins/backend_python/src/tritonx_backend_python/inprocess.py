"""A model instance whose model runs in the server process, on the core's instance thread
(``TRITONX_EXECUTION_MODE: in_process``)."""

from __future__ import annotations

import itertools
import json
import logging
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tritonx.backend import LoadContext, ModelInstance
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.types import REQUEST_RELEASE_RESCHEDULE, InferenceRequest, InferenceResponse
from tritonx_backend_python import pb_utils
from tritonx_backend_python.bridge import ServerBridge
from tritonx_backend_python.convert import (
    OutputCheck,
    bls_core_request,
    from_core_response,
    initialize_args,
    input_datatypes,
    parameters_json,
    pb_error,
    to_core_output,
)
from tritonx_backend_python.debug import MODELS_VARIABLE as DEBUG_VARIABLE
from tritonx_backend_python.debug import debug_setting
from tritonx_backend_python.runner import (
    MODULE_NAME,
    Deliver,
    ExecuteFailed,
    ModelRunner,
    auto_complete,
    exception_text,
    forget_modules,
    rescheduled,
)

log = logging.getLogger("tritonx.backend.python")

_seq = itertools.count()


class InProcessRuntime(pb_utils.Runtime):
    """pb_utils' services for a model running inside the server process."""

    def __init__(self, bridge: ServerBridge, model_dir: str) -> None:
        self.bridge = bridge
        self.model_dir = model_dir

    def infer(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        inputs = {
            t.backend_name: to_core_output(t.backend_array, t.backend_datatype)
            for t in request.inputs()
        }
        core = bls_core_request(
            request.model_name(),
            request.model_version(),
            inputs,
            request.requested_output_names(),
            request.request_id(),
            request.correlation_id(),
            request.flags(),
            request.timeout(),
            request.parameters(),
        )
        iterator = pb_utils.ResponseIterator(core.cancel)
        first = threading.Event()

        def emit(response: InferenceResponse | TritonXError, final: bool) -> None:
            if isinstance(response, TritonXError):
                iterator.backend_put(pb_utils.InferenceResponse(error=pb_error(response)), final)
            else:
                iterator.backend_put(from_core_response(response), final)
            first.set()

        try:
            parent = request.trace().backend_parent
            future = self.bridge.submit(
                self.bridge.infer(
                    core, decoupled, emit, parent if isinstance(parent, InferenceRequest) else None
                )
            )
        except TritonXError as exc:
            emit(exc, True)
            future = None
        if decoupled:
            # as Triton's InferRequest::Exec: the call returns once its first response is
            # there (an ``async_exec`` stays awaiting until then)
            first.wait()
            return iterator
        if future is not None:
            future.result()
        return next(iterator)

    def log(self, level: int, message: str) -> None:
        self.bridge.log(level, message)

    def metric_family(self, name: str, description: str, kind: int) -> None:
        self.bridge.metrics.family(name, description, kind)

    def metric_op(
        self, family: str, labels: tuple[tuple[str, str], ...], op: str, value: Any
    ) -> float | None:
        return self.bridge.metrics.op(family, labels, op, value)

    def control(self, op: str, **kwargs: Any) -> Any:
        try:
            return self.bridge.submit(self.bridge.control(op, kwargs)).result()
        except TritonXError as exc:  # as Triton's stub raises the server's error
            raise pb_utils.TritonModelException(exc.message) from None


class InProcessInstance(ModelInstance):
    """A model instance running in the server process, on the core's instance thread."""

    def __init__(self, ctx: LoadContext) -> None:
        if debug_setting(ctx.model_name, ctx.instance.index) is not None:
            raise invalid_arg(
                f"{DEBUG_VARIABLE} names model '{ctx.model_name}', whose instances run in the "
                "server process (TRITONX_EXECUTION_MODE in_process): only a worker process "
                "can be debugged alone; attach the debugger to the server instead"
            )
        self.ctx = ctx
        self.name = ctx.instance.name
        self.decoupled = ctx.config.decoupled
        self.bridge = ServerBridge(ctx.server, ctx.logger)
        assert ctx.model_path is not None
        self.runtime = InProcessRuntime(self.bridge, str(ctx.model_path.parent))
        self.runner = ModelRunner(self.name, self.decoupled, self.runtime)
        self._outputs = [io.name for io in ctx.config.outputs]
        self._datatypes = input_datatypes(ctx.config)
        self._check = OutputCheck(ctx.config)
        sys.modules.setdefault(MODULE_NAME, pb_utils)
        # a package of its own for the version folder (several models share this process)
        self._module_name = (
            f"tritonx_python_model_{ctx.model_name}_{ctx.version}_{next(_seq)}."
            f"{ctx.model_path.stem}"
        )
        try:
            self.runner.initialize(ctx.model_path, self._module_name, initialize_args(ctx))
        except Exception as exc:
            self.runner.close()
            forget_modules(self._module_name)
            raise TritonXError(
                f"Failed to initialize Python stub: {exception_text(exc)}", Code.INTERNAL
            ) from exc

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse] | None:
        """Run the model's ``execute`` on this thread."""
        datatypes, outputs = self._datatypes, self._outputs
        pb_requests: list[pb_utils.InferenceRequest] = []
        for request in requests:
            pb_request = pb_utils.InferenceRequest(
                request_id=request.id,
                correlation_id=request.correlation_id,
                inputs=[
                    pb_utils.Tensor(name, array, datatype=datatypes.get(name))
                    for name, array in request.inputs.items()
                ],
                requested_output_names=list(request.requested_outputs or outputs),
                model_name="",
                flags=request.flags,
                timeout=request.timeout_us,
                parameters=parameters_json(request.parameters),
                trace=pb_utils.InferenceTrace(request),
            )
            pb_request.backend_cancelled = request.is_cancelled
            pb_requests.append(pb_request)
        check = self._check
        try:
            responses = self.runner.execute(
                pb_requests, _deliverer(requests, check) if self.decoupled else None
            )
        except ExecuteFailed as exc:
            # logged as Triton's stub logs it (and as a worker does)
            details = "".join(traceback.format_exception(exc.__cause__ or exc))
            self.bridge.log(pb_utils.LogLevel.ERROR, f"{exc}\n{details}")
            # the requests answered before the failure keep their response (as in Triton)
            responses = exc.responses(len(requests))
            if responses is None:
                raise TritonXError(str(exc), Code.INTERNAL) from exc.__cause__
            return [
                check.response(r, request.requested_outputs)
                for r, request in zip(responses, requests, strict=True)
            ]
        again = rescheduled(pb_requests)
        for index in again:  # the core runs them again (iterative sequences)
            requests[index].release_flags = REQUEST_RELEASE_RESCHEDULE
        if responses is None:
            return None
        return [
            InferenceResponse() if index in again else check.response(r, request.requested_outputs)
            for index, (r, request) in enumerate(zip(responses, requests, strict=True))
        ]

    def probe_ready(self) -> str | None:
        """The model's own ``is_ready()``, if it defines one (in this process: no timeout
        can stop it)."""
        return self.runner.readiness()

    def unload(self) -> None:
        """Call the model's ``finalize``."""
        try:
            self.runner.finalize()
        except Exception as exc:
            log.exception(
                "finalize of python model '%s' failed: %s", self.name, exception_text(exc)
            )
        finally:
            forget_modules(self._module_name)


def _deliverer(requests: Sequence[InferenceRequest], check: OutputCheck) -> Deliver:
    """Where a decoupled model's responses go: each request's core response sender."""

    def deliver(index: int, response: pb_utils.InferenceResponse | None, final: bool) -> None:
        request = requests[index]
        sender = request.response_sender
        assert sender is not None
        core = None if response is None else check.response(response, request.requested_outputs)
        sender.send(core, final=final)

    return deliver


def auto_complete_here(model_path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Run the model's ``auto_complete_config`` in this process."""
    name = f"tritonx_python_autocomplete_{next(_seq)}.{model_path.stem}"
    try:
        return auto_complete(model_path, name, json.loads(json.dumps(config)))
    except Exception as exc:
        raise invalid_arg(
            f"Failed to initialize Python stub for auto-complete: {exception_text(exc)}"
        ) from exc
    finally:
        forget_modules(name)
