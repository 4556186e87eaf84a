"""Ensembles (``platform: "ensemble"``): the scheduler that runs the steps of
``ensemble_scheduling`` as a data flow over other models (Triton core's ``EnsembleContext``,
``ensemble_scheduler.cc``). The config's validation is :mod:`tritonx._core.ensemble_config`;
the steps' data flow, resolved once per version, is :mod:`tritonx._core.ensemble_steps`.

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
from typing import TYPE_CHECKING

import numpy as np

from tritonx._core.ensemble_steps import (
    PLAN_CACHE,
    Seq,
    Step,
    StepLimiter,
    Value,
    pruned_flow,
    reshaped,
    resolve_steps,
    sequence_override,
    sequence_parameters,
)
from tritonx._core.inflight import InFlight
from tritonx._dataplane.stats import LatencyStats, ModelStats
from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError
from tritonx.types import InferenceRequest, InferenceResponse
from tritonx.wire import request_prefix

if TYPE_CHECKING:
    from tritonx.backend import ModelInstance
    from tritonx.handle import ServerHandle

log = logging.getLogger("tritonx.ensemble")


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
        #: the steps, and ensemble tensor → the steps that read it
        self.steps, self.consumers = resolve_steps(raw.ensemble_scheduling.step, composing)
        #: ensemble tensor → the step that writes it
        self.producers = {t: s.index for s in self.steps for t in s.outputs.values()}
        self._plans: dict[frozenset[str], Mapping[str, tuple[int, ...]]] = {}
        self.full_plan = self.plan(None)
        self._targets = tuple(dict.fromkeys((s.model, s.version) for s in self.steps))
        limit = int(raw.ensemble_scheduling.max_inflight_requests)
        self.limiters = tuple(StepLimiter(limit) for _ in self.steps) if limit > 0 else ()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runs: set[_Run] = set()
        self._inflight = InFlight()

    def plan(self, requested: Sequence[str] | None) -> Mapping[str, tuple[int, ...]]:
        """The data flow of a request for ``requested`` (None: every output): tensor → the
        steps that read it, without the steps none of whose outputs lead to a requested
        output (Triton prunes them: they do not run)."""
        key = frozenset(self.outputs if requested is None else requested)
        known = self._plans.get(key)
        if known is not None:
            return known
        consumers = pruned_flow(key, self.steps, self.producers, self.consumers)
        if len(self._plans) < PLAN_CACHE:
            self._plans[key] = consumers
        return consumers

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Nothing to load: the composing models are loaded already."""
        self._loop = asyncio.get_running_loop()

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until no request is in flight; False if ``timeout`` passed first."""
        return await self._inflight.drain(timeout)

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

    def restarts(self) -> int:
        """An ensemble has no instances of its own (its composing models report theirs)."""
        return 0

    async def probe_ready(self) -> str | None:
        """Nothing to ask: an ensemble is ready while its composing models are."""
        return None

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
        return self._inflight.count

    @property
    def in_use(self) -> bool:
        return self._inflight.count > 0

    # ------------------------------------------------------------------ requests

    def submit(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        """Run a (validated) request of a non-decoupled ensemble; the future (a task:
        cancelling it cancels the steps still running) gets its response."""
        loop = self._loop or asyncio.get_running_loop()
        if request.trace is not None:
            request.trace.report("QUEUE_START", time.perf_counter_ns())
        task = loop.create_task(self._unary(request))
        self._inflight.track()
        task.add_done_callback(self._inflight.untrack)
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
        self._inflight.track()
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
            self._inflight.untrack()
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
    _values: dict[str, dict[int, Value]] = field(default_factory=dict)
    #: this request's data flow (:meth:`EnsembleScheduler.plan`)
    _consumers: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
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
        requested = request.requested_outputs
        self._consumers = sched.full_plan if requested is None else sched.plan(requested)
        updated: list[tuple[str, int]] = []
        for name in sched.inputs:
            value: Value = (request.inputs.get(name), self.batch_size, None)
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

    def _add(self, tensor: str, value: Value) -> int:
        iteration = self._counters.get(tensor, 0)
        self._counters[tensor] = iteration + 1
        values = self._values.get(tensor)
        if values is None:
            values = self._values[tensor] = {}
        values[iteration] = value
        return iteration

    def _launch(self, updated: list[tuple[str, int]]) -> list[tuple[Step, InferenceRequest]]:
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
        consumers = self._consumers
        jobs: list[tuple[Step, InferenceRequest]] = []
        for tensor, iteration in updated:
            for index in consumers.get(tensor, ()):
                key = (index, iteration)
                if key in self._launched:
                    continue
                step = sched.steps[index]
                if all(iteration in values.get(t, ()) for _, t in step.inputs):
                    self._launched.add(key)
                    jobs.append((step, self._request(step, iteration)))
        return jobs

    def _spawn(self, jobs: list[tuple[Step, InferenceRequest]]) -> None:
        """Run each job in a task of its own (steps that run concurrently)."""
        loop = asyncio.get_running_loop()
        for step, request in jobs:
            task = loop.create_task(self._drive(step, request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _drive(self, step: Step, request: InferenceRequest) -> None:
        """Run a step, then, in the same task, the first step its outputs unblock (a chain
        of steps costs no task switches); further unblocked steps get tasks of their own."""
        job: tuple[Step, InferenceRequest] | None = (step, request)
        while job is not None:
            jobs = await self._run_step(*job)
            job = jobs[0] if jobs else None
            if len(jobs) > 1:
                self._spawn(jobs[1:])

    def _request(self, step: Step, iteration: int) -> InferenceRequest:
        request = self.request
        inputs: dict[str, np.ndarray] = {}
        # Triton's InitStep: the step's sequence parameters are the ensemble request's, or
        # those its inputs carry from the steps that wrote them (the first input's when they
        # differ, with Triton's error line)
        correlation_id, flags = request.correlation_id, request.flags
        carried = False
        for model_input, tensor in step.inputs:
            array, batch_size, seq = self._values[tensor][iteration]
            if array is not None:  # else an optional input nobody wrote
                inputs[model_input] = reshaped(
                    step.input_dims.get(model_input, ()), step.batching, batch_size, array
                )
            if seq is None:
                continue
            if carried and seq != (correlation_id, flags):
                log.error(
                    "%sDifferent set of response parameters are set for '%s'. Parameter "
                    "correlation ID %s, flags %d is used.",
                    request_prefix(request.id),
                    step.model,
                    correlation_id,
                    flags,
                )
                continue
            correlation_id, flags = seq
            carried = True
        self._prune(step, iteration)
        step_request = InferenceRequest(
            model_name=step.model,
            inputs=inputs,
            model_version=step.version,
            id=request.id,
            parameters=dict(request.parameters) if request.parameters else {},
            requested_outputs=step.requested,
            correlation_id=correlation_id,
            flags=flags,
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

    def _prune(self, step: Step, iteration: int) -> None:
        """Drop the step's input values that no other step of this iteration still needs
        (decoupled streams would otherwise keep every iteration)."""
        launched = self._launched
        consumers = self._consumers
        wanted = self._wanted()
        for _, tensor in step.inputs:
            if tensor in wanted:  # the response takes it
                continue
            if all((c, iteration) in launched for c in consumers[tensor]):
                self._values[tensor].pop(iteration, None)

    async def _run_step(
        self, step: Step, request: InferenceRequest
    ) -> list[tuple[Step, InferenceRequest]]:
        """Send one step's request; returns the steps its answer unblocked (a decoupled
        step starts those itself, as its responses come)."""
        sched = self.scheduler
        jobs: list[tuple[Step, InferenceRequest]] = []
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
        step: Step,
        request: InferenceRequest,
        response: InferenceResponse,
        final: bool,
    ) -> list[tuple[Step, InferenceRequest]]:
        """A composing model answered: store its outputs, answer the ensemble request when
        its outputs are complete, and return the steps they unblock."""
        if final:
            self._inflight -= 1
        answer: InferenceResponse | None = None
        jobs: list[tuple[Step, InferenceRequest]] = []
        if not response.empty:
            batch_size = request.batch_size if step.batching else 0
            produced = response.outputs
            # Triton's ConsumeResponse: outputs carry the step's sequence parameters, or
            # those the response's parameters set; a mapped output the model did not
            # produce carries the overridden ones (flags 0 unless set), as Triton's
            seq: Seq = (request.correlation_id, request.flags)
            missing = (request.correlation_id, 0)
            if response.parameters:
                override = sequence_override(response.parameters, request.correlation_id)
                if override is not None:
                    seq = missing = override
            consumers = self._consumers
            wanted = self._wanted()
            updated: list[tuple[str, int]] = []
            for model_output, tensor in step.outputs.items():
                if not consumers.get(tensor) and tensor not in wanted:
                    continue  # read by no step this request runs, and not asked for
                array = produced.get(model_output)
                value: Value = (array, batch_size, seq if array is not None else missing)
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
        consumers = self._consumers
        outputs: dict[str, np.ndarray] = {}
        parameters: dict[str, int | str | bool] = {}
        for name in sched.outputs:
            if name not in wanted:
                continue
            array, batch_size, seq = values[name][iteration]
            if not consumers.get(name):
                del values[name][iteration]
            if array is None:
                log.debug("Composing models did not output tensor %s", name)
                continue
            outputs[name] = reshaped(sched.output_dims[name], sched.batching, batch_size, array)
            if seq is not None:  # Triton: a step's output brings its sequence parameters
                parameters.update(sequence_parameters(seq, self.request.correlation_id))
        return InferenceResponse(
            outputs=outputs,
            parameters=parameters,
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


__all__ = ["EnsembleScheduler"]
