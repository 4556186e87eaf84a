"""The completion path of an :class:`~tritonx._core.instances.InstanceScheduler`: how every
batch, whichever execution mode ran it (:mod:`tritonx._core.execution`), is answered and
counted, and how requests that never ran are failed.

:meth:`BatchCompletion.complete` runs on the thread that executed the batch (an instance
thread, or the loop): it lets the batcher see the execution (the sequence batcher keeps
its states), queues rescheduled rows again (iterative sequences), finishes the responses
and hands them to the loop through ``post``, where :meth:`BatchCompletion._resolve` counts
the execution's statistics and answers each request (in arrival order with
``preserve_ordering``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from tritonx._core.batcher import BACKEND, CANCELED, REJECTED, Pending, cancelled_error
from tritonx._core.execution import Times, trace_compute
from tritonx._dataplane.stats import ModelStats
from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError
from tritonx.types import REQUEST_RELEASE_ALL, REQUEST_RELEASE_RESCHEDULE, InferenceResponse

log = logging.getLogger("tritonx.scheduler")

#: What runs after each batch executed: ``(batch, responses or None)``.
Executed = Callable[[list[Pending], Sequence[InferenceResponse] | None], None]


class BatchCompletion:
    """The completion path, a base of :class:`~tritonx._core.instances.InstanceScheduler`
    (the sequence scheduler shares it): it answers and counts executed batches and fails
    requests that never ran. Any thread, unless a method says otherwise.

    Its state is set by :meth:`_init_completion`; it reads these of the scheduler:
    """

    #: the version's statistics (replaced when a reload carries the old version's over)
    stats: ModelStats
    config: ModelConfig
    version: int
    decoupled: bool
    _loop: asyncio.AbstractEventLoop | None

    def _init_completion(self, config: ModelConfig, batcher: object) -> None:
        """The completion state of a scheduler of ``config`` fed by ``batcher``."""
        raw = config.raw
        #: responses leave in arrival order (dynamic batching's or the sequence batcher's
        #: oldest strategy's ``preserve_ordering``: one scheduling choice is set at most)
        self.preserve_ordering = bool(
            raw.dynamic_batching.preserve_ordering or raw.sequence_batching.oldest.preserve_ordering
        )
        self._outputs = tuple(config.output_map)
        #: preserve_ordering: answers held until those of earlier requests left
        self._held: dict[int, tuple[Pending, InferenceResponse]] = {}
        self._next_seq = 0
        #: the execution mode's ``executed`` when it measures executions (inline), else None
        #: (the scheduler sets it as it chooses its mode)
        self._timed: Callable[[int], None] | None = None
        #: the batcher's ``completed(batch, responses or None)``, if it has one: called on the
        #: thread that ran a batch, before it is answered (the sequence batcher keeps the
        #: states and issues its slots' next requests)
        self._executed: Executed | None = getattr(batcher, "completed", None)
        #: the batcher's ``reschedule(pending)`` when it takes rescheduled requests back
        #: (iterative sequences), else None
        self._rescheduler: Callable[[Pending], None] | None = (
            getattr(batcher, "reschedule", None) if getattr(batcher, "iterative", False) else None
        )

    def _reject(self, pending: Pending, error: TritonXError, reason: str = REJECTED) -> None:
        """Fail a request that never ran (queue timeout, shutdown, cancelled request or
        sequence); callable from any thread. ``reason`` is its
        ``nv_inference_request_failure`` reason."""
        assert self._loop is not None
        response = InferenceResponse.failed(error)
        self._finish(response, self.config.name, self.version, pending.request.id, None)
        pending.rejected = reason
        if isinstance(pending.deliver, asyncio.Queue):
            self._loop.call_soon_threadsafe(pending.deliver.put_nowait, response)
        else:
            self._loop.call_soon_threadsafe(self._resolve_one, pending, response)

    def complete(
        self,
        batch: list[Pending],
        responses: Sequence[InferenceResponse] | None,
        error: TritonXError | None,
        times: Times,
        post: Callable[..., object],
    ) -> None:
        """Hand an execution's responses (or its error) back through ``post``: the one
        completion path of every batch, whichever mode ran it. Rows without a client
        (``deliver`` None: the sequence batcher's fillers) ran but are not answered."""
        executed = self._executed
        moved = _rescheduled(batch)
        if moved:  # rows released with REQUEST_RELEASE_RESCHEDULE (rare: iterative sequences)
            failed = self._refuse_rescheduling(batch, moved, error)
            if failed is not None or error is not None:
                moved = None  # nothing runs again: the refused rows fail with ``failed``
        else:
            failed = None
        if self.decoupled:
            if error is not None:
                for pending in batch:
                    sender = pending.request.response_sender
                    if pending.deliver is not None and sender is not None and not sender.is_closed:
                        sender.send(InferenceResponse.failed(error), final=True)
            for index, failure in failed or ():
                sender = batch[index].request.response_sender
                if sender is not None and not sender.is_closed:
                    sender.send(failure, final=True)
            if executed is not None:
                executed(batch, None)
            marks: list[InferenceResponse] | None = None
            if moved:
                marks = [RAN] * len(batch)
                for index in moved:
                    marks[index] = RESCHEDULED
                self._reschedule(batch, moved)
            post(self._record, batch, times, marks)
            return
        if error is None and (responses is None or len(responses) != len(batch)):
            got = "None" if responses is None else str(len(responses))
            error = TritonXError(
                f"model '{self.config.name}' returned {got} responses for {len(batch)} requests",
                Code.INTERNAL,
            )
        if error is not None:
            responses = [InferenceResponse.failed(error) for _ in batch]
            for index in moved or ():
                batch[index].request.release_flags = REQUEST_RELEASE_ALL
            moved = None
        assert responses is not None
        if moved or failed:
            responses = list(responses)
            for index, failure in failed or ():
                responses[index] = failure
            for index in moved or ():  # an entry that is a response still gives its states
                if not isinstance(responses[index], InferenceResponse):
                    responses[index] = RESCHEDULED
        if executed is not None:
            executed(batch, responses)
        if moved:
            for index in moved:
                responses[index] = RESCHEDULED  # type: ignore[index]
        name, version = self.config.name, self.version
        for pending, response in zip(batch, responses, strict=True):
            if pending.deliver is not None and response is not RESCHEDULED:
                request = pending.request
                self._finish(response, name, version, request.id, request.requested_outputs)
        if moved:  # last: a batch failing above fails its rescheduled rows too, once
            self._reschedule(batch, moved)
        post(self._resolve, batch, responses, times)

    def _refuse_rescheduling(
        self, batch: list[Pending], moved: list[int], error: TritonXError | None
    ) -> list[tuple[int, InferenceResponse]] | None:
        """The rows ``execute`` released with ``REQUEST_RELEASE_RESCHEDULE`` that fail
        instead of running again: every one when the model does not take rescheduled
        requests (Triton's error, logged as Triton's backends log a failed release); None
        when they run again, or the execution failed (its error answers them)."""
        if error is None and self._rescheduler is not None:
            return None
        for index in moved:
            batch[index].request.release_flags = REQUEST_RELEASE_ALL
        if error is not None:
            return None
        refusal = TritonXError(
            "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model "
            "is not configured to handle such a flag.",
            Code.INVALID_ARG,
        )
        log.error("Failed to release request: %s", refusal.message)
        return [(index, InferenceResponse.failed(refusal)) for index in moved]

    def _reschedule(self, batch: list[Pending], moved: list[int]) -> None:
        """Queue the rescheduled rows again (after the batcher saw the execution)."""
        reschedule = self._rescheduler
        if reschedule is None:
            return
        for index in moved:
            pending = batch[index]
            pending.request.release_flags = REQUEST_RELEASE_ALL
            reschedule(pending)

    def fail_batch(self, batch: list[Pending], exc: Exception) -> None:
        """A batch whose responses could not be handed back (a backend returning something
        other than responses, or a bug here): every request of it fails with the error, as
        a backend failure. Any thread."""
        log.error("model %s: a batch failed outside execute", self.config.name, exc_info=exc)
        error = TritonXError.wrap(exc)
        for pending in batch:
            if pending.deliver is not None:
                self._reject(pending, error, BACKEND)

    def drop_cancelled(self, batch: list[Pending]) -> list[Pending]:
        """Fail the batch's cancelled requests with CANCELLED; the others, to execute."""
        keep: list[Pending] = []
        for pending in batch:
            if pending.request.cancelled:
                self._reject(pending, cancelled_error(), CANCELED)
            else:
                keep.append(pending)
        return keep

    def _finish(
        self,
        response: InferenceResponse,
        name: str,
        version: int,
        request_id: str,
        requested: tuple[str, ...] | None,
    ) -> None:
        response.model_name = name
        response.model_version = version
        response.id = request_id
        if response.error is None:
            outputs = response.outputs
            keep = requested if requested is not None else self._outputs
            if keep and any(n not in keep for n in outputs):
                response.outputs = {n: outputs[n] for n in keep if n in outputs}

    def _record(
        self,
        batch: list[Pending],
        times: Times,
        responses: Sequence[InferenceResponse] | None = None,
    ) -> None:
        """Statistics of one execution, as Triton counts them: the execution's batch size is
        every row it ran (each request's batch size, fillers included: a backend's
        ``total_batch_size``); only requests with a client count as inferences (fillers are
        Triton's null requests, which collect no statistics); a request's queue and compute
        times count only when it succeeded (Triton's failure statistics have neither), and a
        rescheduled row's only once an execution releases it. ``responses``: None for a
        decoupled model (its requests count alike), or :data:`RAN` / :data:`RESCHEDULED`
        marks when some of its rows were rescheduled."""
        stats = self.stats
        start, input_end, output_start, end = times
        phases = (input_end - start, output_start - input_end, end - output_start)
        size = 0
        fillers = 0
        for at, pending in enumerate(batch):
            request = pending.request
            rows = max(request.batch_size, 1)
            size += rows
            if pending.deliver is None:
                fillers += rows
                continue
            if responses is None:
                record_request(stats, pending, start, phases)
            elif (response := responses[at]).error is None and response is not RESCHEDULED:
                record_request(stats, pending, start, phases)
            if request.trace is not None:
                trace_compute(request, times)
        stats.record_execution(size, *phases, inferences=size - fillers)
        stats.last_inference_ms = int(time.time() * 1000)
        if self._timed is not None:
            self._timed(end - start)

    def _resolve(
        self,
        batch: list[Pending],
        responses: Sequence[InferenceResponse],
        times: Times,
    ) -> None:
        self._record(batch, times, responses)
        for pending, response in zip(batch, responses, strict=True):
            if pending.deliver is not None and response is not RESCHEDULED:
                self._resolve_one(pending, response)

    def _resolve_one(self, pending: Pending, response: InferenceResponse) -> None:
        elapsed = time.perf_counter_ns() - pending.enqueue_ns
        if response.error is None:
            self.stats.record_success(elapsed)
            trace = pending.request.trace
            if trace is not None:
                trace.report_tensors("TENSOR_BACKEND_OUTPUT", response.outputs)
        else:
            self.stats.record_failure(pending.rejected or BACKEND, elapsed)
        if not self.preserve_ordering:
            _deliver(pending, response)
            return
        # preserve_ordering: responses leave in arrival order across concurrent batches
        self._held[pending.seq] = (pending, response)
        while self._next_seq in self._held:
            held, held_response = self._held.pop(self._next_seq)
            self._next_seq += 1
            _deliver(held, held_response)


#: What a rescheduled row's response is replaced with: it is neither answered nor counted
#: as a request until an execution releases it (its row counts in the execution's size).
RESCHEDULED = InferenceResponse()
#: A decoupled row that ran and was released (its statistics count as usual).
RAN = InferenceResponse()


def _rescheduled(batch: list[Pending]) -> list[int] | None:
    """The indexes of the rows ``execute`` set ``REQUEST_RELEASE_RESCHEDULE`` on, or None."""
    moved: list[int] | None = None
    for index, pending in enumerate(batch):
        if pending.request.release_flags & REQUEST_RELEASE_RESCHEDULE:
            if moved is None:
                moved = []
            moved.append(index)
    return moved


def record_request(
    stats: ModelStats, pending: Pending, start: int, phases: tuple[int, int, int]
) -> None:
    """A request that succeeded in an execution started at ``start``: its queue time and the
    execution's compute phases, in its model's statistics and, for an ensemble's step, in
    the ensemble's (``compute_sink``)."""
    stats.record_request_execution(start - (pending.requeued_ns or pending.enqueue_ns), *phases)
    sink = pending.request.compute_sink
    if sink is not None:
        sink(*phases)


def _deliver(pending: Pending, response: InferenceResponse) -> None:
    future = pending.deliver
    if isinstance(future, asyncio.Future) and not future.done():
        future.set_result(response)
