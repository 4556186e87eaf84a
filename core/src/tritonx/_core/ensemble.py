"""Ensembles (``platform: "ensemble"``): config validation and the scheduler that runs the
steps of ``ensemble_scheduling`` as a data flow over other models.

Semantics and messages follow Triton core: ``ValidateEnsembleSchedulingConfig``
(``model_config_utils.cc``: the config alone), ``ValidateEnsembleConfig``
(``ensemble_scheduler/ensemble_utils.cc``: against the completed configs of the composing
models, once they are loaded) and ``EnsembleContext`` (``ensemble_scheduler.cc``: running a
request).

An ensemble has no instances. Each step is an ordinary request to its composing model through
the :class:`~tritonx.handle.ServerHandle`, so it goes through that model's validation,
scheduler (its dynamic batcher batches steps of different ensemble requests together),
statistics and metrics. A step starts as soon as every tensor it reads exists; independent
steps run concurrently. Tensors pass between steps as the same numpy arrays (at most a view
that adds or drops a batch dimension of 1), never copied.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.proto import model_config_pb2
from tritonx.stats import LatencyStats, ModelStats
from tritonx.types import InferenceRequest, InferenceResponse
from tritonx.wire import dims_str, request_prefix

if TYPE_CHECKING:
    from tritonx.backend import ModelInstance
    from tritonx.handle import ServerHandle

log = logging.getLogger("tritonx.ensemble")

ENSEMBLE = "ensemble"

#: Seconds a step waits for a ``max_inflight_requests`` slot before it goes ahead anyway
#: (Triton's ``kMutexTimeoutSeconds``: a pipeline never deadlocks on the limit).
INFLIGHT_WAIT_S = 300.0


def is_ensemble(config: Any) -> bool:
    """Whether a config (protobuf) is an ensemble's."""
    return bool(config.platform == ENSEMBLE)


def composing_models(config: Any) -> tuple[str, ...]:
    """The names of the models an ensemble's steps call, in step order, without repeats."""
    seen: dict[str, None] = {}
    for step in config.ensemble_scheduling.step:
        seen.setdefault(step.model_name, None)
    return tuple(seen)


# ---------------------------------------------------------------------- the config alone


class _Tensor:
    """An ensemble tensor in the graph of ``validate_scheduling``."""

    __slots__ = ("is_output", "name", "next", "prev", "ready")

    def __init__(self, name: str, is_output: bool) -> None:
        self.name = name
        self.is_output = is_output
        self.ready = False
        self.prev: list[_Tensor] = []
        self.next: list[_Tensor] = []


def validate_scheduling(config: Any) -> None:
    """Triton's ``ValidateEnsembleSchedulingConfig``: the platform, the fields an ensemble
    may not set, every step complete, every ensemble input used, every output written and
    no tensor left unused. Raises INVALID_ARG with Triton's messages."""
    name = config.name
    if config.platform != ENSEMBLE:
        raise invalid_arg(
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not {ENSEMBLE}"
        )
    if len(config.instance_group):
        raise invalid_arg(f"instance group should not be specified for ensemble '{name}'")
    if config.HasField("optimization"):
        raise invalid_arg(f"optimization should not be specified for ensemble '{name}'")
    if len(config.model_warmup):
        raise invalid_arg(f"model_warmup can not be specified for ensemble '{name}'")
    steps = config.ensemble_scheduling.step
    if not steps:
        raise invalid_arg(f"must specify 'step' for ensemble '{name}'")

    tensors: dict[str, _Tensor] = {}
    for index, step in enumerate(steps):
        for field_name, present in (
            ("model_name", bool(step.model_name)),
            ("input_map", len(step.input_map) > 0),
            ("output_map", len(step.output_map) > 0),
        ):
            if not present:
                raise invalid_arg(
                    f"must specify '{field_name}' in step {index} of ensemble '{name}'"
                )
        written: list[_Tensor] = []
        for tensor_name in step.output_map.values():
            node = tensors.get(tensor_name)
            if node is not None:
                if node.is_output:
                    raise invalid_arg(
                        f"ensemble tensor '{tensor_name}' can appear in an output map only once "
                        f"for ensemble '{name}' step {index}"
                    )
                node.is_output = True
            else:
                node = tensors[tensor_name] = _Tensor(tensor_name, True)
            written.append(node)
        for tensor_name in step.input_map.values():
            node = tensors.get(tensor_name)
            if node is None:
                node = tensors[tensor_name] = _Tensor(tensor_name, False)
            for out in written:
                out.prev.append(node)
                node.next.append(out)

    queue: list[_Tensor] = []
    for tensor in config.input:
        node = tensors.get(tensor.name)
        if node is None:
            raise invalid_arg(f"ensemble input '{tensor.name}' for ensemble {name}' is not used")
        node.ready = True
        queue.append(node)
    while queue:
        current = queue.pop(0)
        for nxt in current.next:
            if nxt.ready:
                continue
            nxt.ready = all(p.ready for p in nxt.prev)
            if nxt.ready:
                queue.append(nxt)

    outputs: set[str] = set()
    for tensor in config.output:
        node = tensors.get(tensor.name)
        if node is None:
            raise invalid_arg(f"ensemble output '{tensor.name}' for ensemble {name}' is not used")
        if not node.ready:
            message = f"output '{tensor.name}' for ensemble '{name}' is not written"
            # walk back to a source that is not connected
            last, prev, seen = node, node.prev, set[str]()
            while prev:
                nodes, prev = prev, []
                for candidate in nodes:
                    if not candidate.ready and candidate.name not in seen:
                        seen.add(candidate.name)
                        last, prev = candidate, candidate.prev
                        break
            if last is not node:
                message += (
                    f": at least one of its depending tensors, '{last.name}', is not connected"
                )
            raise invalid_arg(message)
        outputs.add(tensor.name)
    for tensor_name, node in tensors.items():
        if tensor_name in outputs:
            continue
        if not node.ready or not node.next:
            raise invalid_arg(f"ensemble tensor '{tensor_name}' is unused in ensemble '{name}'")


# ---------------------------------------------------------------------- against composing models


def _type_name(data_type: int) -> str:
    return str(model_config_pb2.DataType.Name(data_type))


def _dims_match(lhs: Sequence[int], rhs: Sequence[int]) -> bool:
    """Triton's ``CompareDimsWithWildcard``: same rank, each dim equal or either -1."""
    return len(lhs) == len(rhs) and all(
        a == b or a == -1 or b == -1 for a, b in zip(lhs, rhs, strict=True)
    )


class _Node:
    """An ensemble tensor as ``ValidateEnsembleConfig`` sees it: its type and shape, the
    model that fixes them, and its place in the data flow (with the decoupled label)."""

    __slots__ = (
        "decoupled",
        "dims",
        "full_dims",
        "label",
        "model",
        "next",
        "prev",
        "sibling",
        "type",
        "visited",
    )

    def __init__(
        self, model: str, batching: bool = False, data_type: int = 0, dims: Sequence[int] = ()
    ) -> None:
        self.model = model
        self.type = data_type
        self.dims = tuple(dims)
        self.full_dims = ((-1,) if batching else ()) + self.dims
        self.decoupled = False
        self.label = 0
        self.visited = False
        self.prev: list[_Node] = []
        self.next: list[_Node] = []
        self.sibling: _Node | None = None


def _consistent(lhs: _Node, rhs: _Node, prefix: str) -> None:
    if lhs.type != rhs.type:
        raise invalid_arg(
            f"{prefix}inconsistent data type: {_type_name(lhs.type)} is inferred from model "
            f"{lhs.model} while {_type_name(rhs.type)} is inferred from model {rhs.model}"
        )
    if not _dims_match(lhs.dims, rhs.dims) and not _dims_match(lhs.full_dims, rhs.full_dims):
        raise invalid_arg(
            f"{prefix}inconsistent shape: {dims_str(lhs.full_dims)} is inferred from model "
            f"{lhs.model} while {dims_str(rhs.full_dims)} is inferred from model {rhs.model}"
        )


def _map_step(ensemble: str, step: Any, model: Any, tensors: dict[str, _Node]) -> None:
    """Triton's ``ValidateTensorMapping`` for one step."""
    model_name = step.model_name
    batching = model.max_batch_size > 0
    input_names = {t.name for t in model.input}
    for model_input, tensor in step.input_map.items():
        if model_input not in input_names:
            raise invalid_arg(
                f"in ensemble {ensemble}, ensemble tensor {tensor} is mapping to non-existing "
                f"input {model_input} in model {model_name}"
            )
    for model_input in model.input:
        tensor = step.input_map.get(model_input.name)
        if tensor is None:
            if model_input.optional:
                continue
            raise invalid_arg(
                f"in ensemble {ensemble}, input {model_input.name} in model {model_name} is not "
                "mapped to any ensemble tensors"
            )
        node = _Node(model_name, batching, model_input.data_type, model_input.dims)
        known = tensors.get(tensor)
        if known is not None:
            _consistent(known, node, f"in ensemble {ensemble}, ensemble tensor {tensor}: ")
        else:
            tensors[tensor] = node
    output_names = {t.name for t in model.output}
    for model_output, tensor in step.output_map.items():
        if model_output not in output_names:
            raise invalid_arg(
                f"in ensemble {ensemble}, ensemble tensor {tensor} is mapped from non-existing "
                f"output {model_output} in model {model_name}"
            )
    sibling = _Node(model_name)
    for model_output, tensor in step.output_map.items():
        config = next(t for t in model.output if t.name == model_output)
        node = _Node(model_name, batching, config.data_type, config.dims)
        known = tensors.get(tensor)
        if known is not None:
            _consistent(known, node, f"in ensemble {ensemble}, ensemble tensor {tensor}: ")
        else:
            known = tensors[tensor] = node
        known.sibling = sibling
    decoupled = bool(model.model_transaction_policy.decoupled)
    for tensor in step.output_map.values():
        node = tensors[tensor]
        node.decoupled = decoupled
        for source in step.input_map.values():
            prev = tensors[source]
            node.prev.append(prev)
            prev.next.append(node)


def validate_with_composing(config: Any, composing: Mapping[str, Any]) -> bool:
    """Triton's ``ValidateEnsembleConfig``: batch sizes, every step's input and output maps
    against its model's completed config (``composing``: model name → config protobuf),
    consistent types and shapes, and decoupled branches that never merge. Returns whether the
    ensemble is decoupled (some path goes through a decoupled model) and records it in the
    config's ``model_transaction_policy``, as Triton does."""
    name = config.name
    batching = config.max_batch_size > 0
    tensors: dict[str, _Node] = {}
    for tensor in config.input:
        dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
        tensors[tensor.name] = _Node(name, batching, tensor.data_type, dims)
    sink = _Node(name)
    for tensor in config.output:
        dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
        node = tensors.setdefault(tensor.name, _Node(name, batching, tensor.data_type, dims))
        sink.prev.append(node)
        node.next.append(sink)

    for step in config.ensemble_scheduling.step:
        model = composing[step.model_name]
        if model.max_batch_size != 0 and model.max_batch_size < config.max_batch_size:
            raise invalid_arg(
                f"ensemble {name} allows maximum batch size {config.max_batch_size}, but it "
                f"contains model {step.model_name} which only allows maximum batch size to be "
                f"{model.max_batch_size}"
            )
        _map_step(name, step, model, tensors)

    label = 0
    queue: list[_Node] = []
    for tensor in config.input:
        node = tensors[tensor.name]
        node.visited = True
        queue.append(node)
    while queue:
        current = queue.pop(0)
        for nxt in current.next:
            if nxt.visited or not all(p.visited for p in nxt.prev):
                continue
            prev_label = nxt.prev[0].label
            if any(p.label != prev_label for p in nxt.prev):
                raise invalid_arg(
                    f"in ensemble {name}, step of model '{nxt.model}' receives inputs "
                    "originated from different decoupled models"
                )
            sibling = nxt.sibling
            if sibling is not None and sibling.visited:
                nxt.label = sibling.label
            else:
                if nxt.decoupled:
                    label += 1
                    nxt.label = label
                else:
                    nxt.label = prev_label
                if sibling is not None:
                    sibling.label = nxt.label
                    sibling.visited = True
            nxt.visited = True
            queue.append(nxt)
    decoupled = label != 0
    config.model_transaction_policy.decoupled = decoupled
    return decoupled


# ---------------------------------------------------------------------- the scheduler


@dataclass(frozen=True, slots=True)
class _Step:
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


#: An ensemble tensor's value: the array and the batch size of the request that made it
#: (0 when it came from a model without batching), or None when the step that should have
#: written it did not (the tensor is then an absent optional input downstream).
_Value = tuple[np.ndarray, int] | None


def _reshaped(
    dims: Sequence[int], batching: bool, batch_size: int, array: np.ndarray
) -> np.ndarray:
    """Triton's ``ReshapeTensorDims``: between a batching and a non-batching model, add or
    drop a batch dimension of 1 when the shapes ask for it (a view, never a copy)."""
    if batching == (batch_size != 0):
        return array
    if batching:
        if _dims_match(dims, array.shape):
            return array.reshape((1, *array.shape))
        return array
    if not _dims_match(dims, array.shape) and batch_size == 1 and array.ndim > 0:
        return array.reshape(array.shape[1:])
    return array


class _Limiter:
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


class EnsembleScheduler:
    """Runs one version of an ensemble: each request is a data flow over its steps.

    :param composing: the completed configs of the composing models the ensemble was
        validated against (model name → config).
    """

    instances: Sequence[ModelInstance | None] = ()
    pending_count = 0

    def __init__(
        self,
        config: ModelConfig,
        version: int,
        server: ServerHandle,
        composing: Mapping[str, ModelConfig],
        latency: LatencyStats | None = None,
    ) -> None:
        raw = config.raw
        self.config = config
        self.name = config.name
        self.version = version
        self.server = server
        self.decoupled = config.decoupled
        self.stats = ModelStats(latency=latency)
        self.batching = config.max_batch_size > 0
        self.inputs = tuple(t.name for t in raw.input)
        self.outputs = tuple(t.name for t in raw.output)
        self.output_dims = {
            t.name: tuple(t.reshape.shape if t.HasField("reshape") else t.dims) for t in raw.output
        }
        steps: list[_Step] = []
        consumers: dict[str, list[int]] = {}
        for index, step in enumerate(raw.ensemble_scheduling.step):
            model = composing[step.model_name]
            inputs = tuple(step.input_map.items())
            steps.append(
                _Step(
                    index=index,
                    model=step.model_name,
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
        self.steps = tuple(steps)
        self.consumers = {t: tuple(s) for t, s in consumers.items()}
        self._targets = tuple(dict.fromkeys((s.model, s.version) for s in self.steps))
        limit = int(raw.ensemble_scheduling.max_inflight_requests)
        self.limiters = tuple(_Limiter(limit) for _ in self.steps) if limit > 0 else ()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runs: set[_Run] = set()
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Nothing to load: the composing models are loaded already."""
        self._loop = asyncio.get_running_loop()

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until no request is in flight; False if ``timeout`` passed first."""
        if self._inflight == 0:
            return True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def stop(self, timeout: float | None = None, error: TritonXError | None = None) -> bool:
        """Fail the requests still running (after :meth:`drain`, there are none) with
        ``error`` (default: "Server exiting") and cancel their steps."""
        error = error or TritonXError("Server exiting", Code.UNAVAILABLE)
        for run in list(self._runs):
            run.abort(error)
        return True

    def is_ready(self) -> bool:
        """Ready while every composing model (at the version a step names) is."""
        ready = self.server.model_ready
        return all(ready(model, version) for model, version in self._targets)

    def not_ready_reason(self) -> str:
        for model, version in self._targets:
            if not self.server.model_ready(model, version):
                if version is not None:
                    return (
                        f"ensemble '{self.name}' depends on '{model}' whose required version "
                        f"{version} is not loaded."
                    )
                return f"ensemble '{self.name}' depends on '{model}' which has no loaded version."
        return ""

    @property
    def inflight(self) -> int:
        return self._inflight

    # ------------------------------------------------------------------ requests

    def submit(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        """Run a (validated) request of a non-decoupled ensemble; the future (a task:
        cancelling it cancels the steps still running) gets its response."""
        loop = self._loop or asyncio.get_running_loop()
        if request.trace is not None:
            request.trace.report("QUEUE_START", time.perf_counter_ns())
        task = loop.create_task(self._unary(request))
        self._track()
        task.add_done_callback(self._untrack)
        return task

    async def _unary(self, request: InferenceRequest) -> InferenceResponse:
        start = time.perf_counter_ns()
        run = _Run(self, request, None)
        self._runs.add(run)
        try:
            response = await run.execute()
        except asyncio.CancelledError:
            run.cancel()
            self.stats.record_failure("OTHER", time.perf_counter_ns() - start)
            raise
        finally:
            self._runs.discard(run)
        self._record(run, response.error is None, start)
        return response

    async def stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        """Run a request of a decoupled ensemble; yield its responses until the final one."""
        start = time.perf_counter_ns()
        if request.trace is not None:
            request.trace.report("QUEUE_START", start)
        responses: asyncio.Queue[InferenceResponse] = asyncio.Queue()
        run = _Run(self, request, responses.put_nowait)
        self._runs.add(run)
        self._track()
        failed = True
        try:
            task = asyncio.ensure_future(run.execute())
            try:
                while True:
                    response = await responses.get()
                    yield response
                    if response.final:
                        break
            finally:
                if not run.finished:  # the consumer left: cancel the request and its steps
                    request.cancel()
                    run.cancel()
                    task.cancel()
            failed = run.error is not None
        finally:
            self._runs.discard(run)
            self._untrack()
            if failed:
                self.stats.record_failure("OTHER", time.perf_counter_ns() - start)
            else:
                self._record(run, True, start)

    # ------------------------------------------------------------------ internals

    def _record(self, run: _Run, ok: bool, start: int) -> None:
        run.recorded = ok
        elapsed = time.perf_counter_ns() - start
        stats = self.stats
        if not ok:
            stats.record_failure("OTHER", elapsed)
            return
        # Triton: no queue of its own; the compute times are the sums of those the composing
        # models recorded for the steps' requests
        phases = run.compute_input_ns, run.compute_infer_ns, run.compute_output_ns
        stats.record_success(elapsed)
        stats.record_request_execution(0, *phases)
        stats.record_execution(max(run.batch_size, 1), *phases)
        stats.last_inference_ms = int(time.time() * 1000)
        if run.request.compute_sink is not None:  # a step of an enclosing ensemble
            run.request.compute_sink(*phases)

    def late_compute(self, run: _Run, phases: tuple[int, int, int]) -> None:
        """A step's compute durations recorded after ``run`` was answered and counted (a
        decoupled step's model records its execution when ``execute`` returns, which may be
        after its final response): added to the ensemble's compute times."""
        stats = self.stats
        totals = [(stats.compute_input, stats.compute_infer, stats.compute_output)]
        batch = stats.batch_stats.get(max(run.batch_size, 1))
        if batch is not None:
            totals.append((batch.compute_input, batch.compute_infer, batch.compute_output))
        for durations in totals:
            for duration, ns in zip(durations, phases, strict=True):
                duration.ns += ns
        if run.request.compute_sink is not None:
            run.request.compute_sink(*phases)

    def _track(self) -> None:
        self._inflight += 1
        self._idle.clear()

    def _untrack(self, _: object = None) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()


@dataclass(eq=False)
class _Run:
    """One ensemble request on its way through the steps (Triton's ``EnsembleContext``).

    Every ensemble tensor holds values by iteration: a decoupled step answers any number of
    times, and each answer feeds the next steps as one more iteration of its output tensors;
    a step runs once per iteration for which all of its inputs exist.

    :param emit: for decoupled ensembles, where responses go as they are ready; None for the
        others, whose one response :meth:`execute` returns.
    """

    scheduler: EnsembleScheduler
    request: InferenceRequest
    emit: Callable[[InferenceResponse], None] | None
    error: TritonXError | None = None
    #: the compute durations the composing models recorded for the steps' requests, summed
    #: (the ensemble's compute times in its statistics)
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    #: None while running; then whether it succeeded (counted in the statistics)
    recorded: bool | None = None
    batch_size: int = 0
    _values: dict[str, dict[int, _Value]] = field(default_factory=dict)
    _counters: dict[str, int] = field(default_factory=dict)
    _launched: set[tuple[int, int]] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    #: the steps' requests sent and not answered yet
    _steps: set[InferenceRequest] = field(default_factory=set)
    _inflight: int = 0
    _result: InferenceResponse | None = None
    _sent: bool = False
    finished: bool = False
    _cancelled: bool = False
    _done: asyncio.Future[InferenceResponse] | None = None

    async def execute(self) -> InferenceResponse:
        sched = self.scheduler
        request = self.request
        self._done = asyncio.get_running_loop().create_future()
        self.batch_size = request.batch_size if sched.batching else 0
        updated: list[tuple[str, int]] = []
        for name in sched.inputs:
            array = request.inputs.get(name)
            value: _Value = None if array is None else (array, self.batch_size)
            updated.append((name, self._add(name, value)))
        jobs = self._launch(updated)
        try:
            if not jobs:
                self._finish(None)
            else:  # the first step runs in this task, the others (if any) in their own
                self._spawn(jobs[1:])
                await self._drive(*jobs[0])
            return await self._done
        except asyncio.CancelledError:
            self.cancel()
            raise

    def cancel(self) -> None:
        """Cancel the steps still running; no more steps start."""
        self._cancelled = True
        self.finished = True
        for task in list(self._tasks):
            task.cancel()

    def abort(self, error: TritonXError) -> None:
        """Answer with ``error`` now and cancel the steps still running."""
        if self.finished:
            return
        self.error = error
        self._finish(None)
        self.cancel()

    # ------------------------------------------------------------------ tensors and steps

    def _add(self, tensor: str, value: _Value) -> int:
        iteration = self._counters.get(tensor, 0)
        self._counters[tensor] = iteration + 1
        values = self._values.get(tensor)
        if values is None:
            values = self._values[tensor] = {}
        values[iteration] = value
        return iteration

    def _launch(self, updated: list[tuple[str, int]]) -> list[tuple[_Step, InferenceRequest]]:
        """The steps whose inputs now all exist for an updated iteration, with their
        requests (counted in flight from here on).

        Cancellation is checked here, between steps (Triton): once the ensemble request is
        cancelled, the steps still pending and the steps it launches are cancelled too, so
        their models drop them before they run and the ensemble fails CANCELLED."""
        if self.request.cancelled:
            for step_request in self._steps:
                step_request.cancel()
        if self.error is not None or self._cancelled:
            return []
        sched = self.scheduler
        values = self._values
        jobs: list[tuple[_Step, InferenceRequest]] = []
        for tensor, iteration in updated:
            for index in sched.consumers.get(tensor, ()):
                key = (index, iteration)
                if key in self._launched:
                    continue
                step = sched.steps[index]
                if all(iteration in values.get(t, ()) for _, t in step.inputs):
                    self._launched.add(key)
                    jobs.append((step, self._request(step, iteration)))
        return jobs

    def _spawn(self, jobs: list[tuple[_Step, InferenceRequest]]) -> None:
        """Run each job in a task of its own (steps that run concurrently)."""
        loop = asyncio.get_running_loop()
        for step, request in jobs:
            task = loop.create_task(self._drive(step, request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _drive(self, step: _Step, request: InferenceRequest) -> None:
        """Run a step, then, in the same task, the first step its outputs unblock (a chain
        of steps costs no task switches); further unblocked steps get tasks of their own."""
        job: tuple[_Step, InferenceRequest] | None = (step, request)
        while job is not None:
            jobs = await self._run_step(*job)
            job = jobs[0] if jobs else None
            if len(jobs) > 1:
                self._spawn(jobs[1:])

    def _request(self, step: _Step, iteration: int) -> InferenceRequest:
        request = self.request
        inputs: dict[str, np.ndarray] = {}
        for model_input, tensor in step.inputs:
            value = self._values[tensor][iteration]
            if value is None:  # an optional input nobody wrote
                continue
            array, batch_size = value
            inputs[model_input] = _reshaped(
                step.input_dims.get(model_input, ()), step.batching, batch_size, array
            )
        self._prune(step, iteration)
        step_request = InferenceRequest(
            model_name=step.model,
            inputs=inputs,
            model_version=step.version,
            id=request.id,
            parameters=dict(request.parameters) if request.parameters else {},
            requested_outputs=step.requested,
            correlation_id=request.correlation_id,
            flags=request.flags,
            priority=request.priority,
            timeout_us=request.timeout_us,
            trace=request.trace.spawn_child() if request.trace is not None else None,
            compute_sink=self._add_compute,
        )
        if request.cancelled:
            step_request.cancel()
        self._steps.add(step_request)
        self._inflight += 1
        return step_request

    def _add_compute(self, compute_input: int, compute_infer: int, compute_output: int) -> None:
        if self.recorded is not None:  # answered already: only a success counts compute time
            if self.recorded:
                self.scheduler.late_compute(self, (compute_input, compute_infer, compute_output))
            return
        self.compute_input_ns += compute_input
        self.compute_infer_ns += compute_infer
        self.compute_output_ns += compute_output

    def _prune(self, step: _Step, iteration: int) -> None:
        """Drop the step's input values that no other step of this iteration still needs
        (decoupled streams would otherwise keep every iteration)."""
        sched = self.scheduler
        launched = self._launched
        for _, tensor in step.inputs:
            if tensor in sched.output_dims:
                continue
            if all((c, iteration) in launched for c in sched.consumers[tensor]):
                self._values[tensor].pop(iteration, None)

    async def _run_step(
        self, step: _Step, request: InferenceRequest
    ) -> list[tuple[_Step, InferenceRequest]]:
        """Send one step's request; returns the steps its answer unblocked (a decoupled
        step starts those itself, as its responses come)."""
        sched = self.scheduler
        jobs: list[tuple[_Step, InferenceRequest]] = []
        limiter = sched.limiters[step.index] if sched.limiters else None
        acquired = False
        final_seen = False
        try:
            if limiter is not None and not request.cancelled:  # cancelled: no slot to wait for
                acquired = await limiter.acquire(sched.name, step.index)
            if step.decoupled:
                # read to the end (not ``break``): the stream then closes at once
                async for response in sched.server.infer_stream(request):
                    if response.error is not None:
                        raise response.error
                    if final_seen:
                        continue
                    final_seen = response.final
                    self._spawn(self._on_response(step, request, response, final_seen))
            else:
                response = await sched.server.infer(request)
                final_seen = True
                jobs = self._on_response(step, request, response, True)
        except asyncio.CancelledError:
            if not final_seen:
                self._inflight -= 1
            raise
        except Exception as exc:
            error = TritonXError.wrap(exc)
            log.warning(
                "ensemble '%s' step %d (model '%s') failed: %s",
                sched.name,
                step.index,
                step.model,
                error.message,
            )
            if self.error is None:
                self.error = error
            if not final_seen:
                self._inflight -= 1
            if self._inflight == 0 and not self._cancelled:
                self._finish(None)
        finally:
            self._steps.discard(request)
            if acquired and limiter is not None:
                limiter.release()
        return jobs

    def _on_response(
        self,
        step: _Step,
        request: InferenceRequest,
        response: InferenceResponse,
        final: bool,
    ) -> list[tuple[_Step, InferenceRequest]]:
        """A composing model answered: store its outputs, answer the ensemble request when
        its outputs are complete, and return the steps they unblock."""
        if final:
            self._inflight -= 1
        answer: InferenceResponse | None = None
        jobs: list[tuple[_Step, InferenceRequest]] = []
        if not response.empty:
            batch_size = request.batch_size if step.batching else 0
            produced = response.outputs
            updated: list[tuple[str, int]] = []
            for model_output, tensor in step.outputs.items():
                array = produced.get(model_output)
                value: _Value = None if array is None else (array, batch_size)
                updated.append((tensor, self._add(tensor, value)))
            jobs = self._launch(updated)
            if self.error is None:
                answer = self._answer(updated)
        if self._cancelled:
            return []
        if self._inflight == 0:
            self._finish(answer)
        elif answer is not None:
            self._send(answer, final=False)
        return jobs

    def _wanted(self) -> tuple[str, ...]:
        requested = self.request.requested_outputs
        return requested if requested is not None else self.scheduler.outputs

    def _answer(self, updated: list[tuple[str, int]]) -> InferenceResponse | None:
        """Triton's ``CheckAndSetEnsembleOutput``: a response when an updated tensor is a
        requested output and every requested output has that iteration."""
        wanted = self._wanted()
        values = self._values
        iteration: int | None = None
        for tensor, it in updated:
            if tensor not in wanted:
                continue
            if all(it in values.get(name, ()) for name in wanted):
                iteration = it
        if iteration is None:
            return None
        sched = self.scheduler
        outputs: dict[str, np.ndarray] = {}
        for name in sched.outputs:
            if name not in wanted:
                continue
            value = values[name][iteration]
            if not sched.consumers.get(name):
                del values[name][iteration]
            if value is None:  # "Composing models did not output tensor"
                continue
            array, batch_size = value
            outputs[name] = _reshaped(sched.output_dims[name], sched.batching, batch_size, array)
        return InferenceResponse(
            outputs=outputs,
            model_name=sched.name,
            model_version=sched.version,
            id=self.request.id,
        )

    # ------------------------------------------------------------------ the end

    def _send(self, response: InferenceResponse, final: bool) -> None:
        response.final = final
        self._sent = True
        if self.emit is not None:
            self.emit(response)
        else:
            self._result = response

    def _finish(self, answer: InferenceResponse | None) -> None:
        """No step runs any more: send the last response, the final flag or the error."""
        if self.finished:
            return
        self.finished = True
        sched = self.scheduler
        if self.error is not None:
            failed = InferenceResponse.failed(
                TritonXError(f"in ensemble '{sched.name}', {self.error.message}", self.error.code)
            )
            failed.model_name, failed.model_version = sched.name, sched.version
            failed.id = self.request.id
            self._send(failed, final=True)
        elif answer is not None:
            self._send(answer, final=True)
        elif sched.decoupled:
            self._send(
                InferenceResponse(
                    model_name=sched.name,
                    model_version=sched.version,
                    id=self.request.id,
                    final=True,
                    empty=True,
                ),
                final=True,
            )
        elif not self._sent:
            self.error = TritonXError(
                f"in ensemble '{sched.name}', {request_prefix(self.request.id)}unexpected "
                "deadlock, at least one output is not set while no more ensemble steps can be "
                "made",
                Code.INVALID_ARG,
            )
            failed = InferenceResponse.failed(self.error)
            self._send(failed, final=True)
        assert self._done is not None
        if not self._done.done():
            result = self._result
            if self.emit is not None or result is None:
                result = InferenceResponse(model_name=sched.name, model_version=sched.version)
            result.final = True
            self._done.set_result(result)
