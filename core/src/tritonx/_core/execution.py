"""How an :class:`~tritonx._core.instances.InstanceScheduler` gets its accepted requests run:
the execution modes, chosen once its instances have loaded, behind one interface
(:class:`Execution`). A mode uses only the scheduler services :class:`SchedulerServices`
names (this module does not import the scheduler).

* :class:`Queued` (default): every request goes to the queue (the direct queue or the
  dynamic batcher); whichever instance thread is free takes the next batch.

* :class:`Inline` (``--inline-execution-us``, tritonx only): for a tiny model the two thread
  hand-offs (loop to instance thread and back) cost more than the execution itself. When the
  instances allow it (:attr:`~tritonx.backend.ModelInstance.inline_execution`), the queue forms
  batches at once (:attr:`~tritonx._core.batcher.Batcher.immediate`), the model's recent
  executions averaged under the limit and nothing is queued, requests are held on the loop
  until the end of its current round and their batches run there, on an idle instance (its
  lock keeps its thread out meanwhile); what cannot run so goes to the queue as before.
  Batches are the ones the queue would form of requests that arrived together.

* :class:`Async` (:attr:`~tritonx.backend.ModelInstance.async_execution`, e.g. a python
  model's worker process): with the same queue conditions (and no decoupled model), requests
  wait on the loop and each batch starts there on an idle instance through ``execute_async``;
  its answer comes back as a loop callback, which starts the next batch. No instance thread
  is woken; what the loop cannot start (no instance ready and none running) goes to the
  queue and the threads.

In every mode the instance threads serve the queue; a mode only decides what reaches it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tritonx._core.batcher import Batcher, DirectQueue, Pending, cancelled_error
from tritonx.backend import ModelInstance, compute_timer
from tritonx.config import ModelConfig
from tritonx.errors import TritonXError
from tritonx.types import InferenceRequest, InferenceResponse

log = logging.getLogger("tritonx.scheduler")

#: Inline execution: executions measured before the average may allow it, the weight of
#: the latest in the average, and the most input bytes a batch run inline may carry.
INLINE_WARMUP = 8
INLINE_WEIGHT = 1 / 8
INLINE_MAX_BYTES = 256 * 1024

#: One execution's (start, compute input end, compute output start, end), perf_counter ns.
Times = tuple[int, int, int, int]


def run_execute(
    instance: ModelInstance, requests: list[InferenceRequest]
) -> tuple[Sequence[InferenceResponse] | None, TritonXError | None, Times]:
    """Call ``instance.execute(requests)`` and time it, with the phases the backend marked
    on its :func:`~tritonx.backend.compute_timer` (unmarked: all compute infer)."""
    timer = compute_timer()
    timer.reset()
    error: TritonXError | None = None
    responses: Sequence[InferenceResponse] | None = None
    start = time.perf_counter_ns()
    try:
        responses = instance.execute(requests)
    except BaseException as exc:
        error = TritonXError.wrap(exc)
    end = time.perf_counter_ns()
    input_end = timer.input_end_ns
    if not start <= input_end <= end:
        input_end = start
    output_start = timer.output_start_ns
    if not input_end <= output_start <= end:
        output_start = end
    return responses, error, (start, input_end, output_start, end)


def trace_queued(request: InferenceRequest, ns: int) -> None:
    """A traced request entered a queue: QUEUE_START (and its inputs at level TENSORS)."""
    trace = request.trace
    if trace is not None:
        trace.report("QUEUE_START", ns)
        trace.report_tensors("TENSOR_QUEUE_INPUT", request.inputs)


def trace_compute(request: InferenceRequest, times: Times) -> None:
    """A traced request was executed: the four COMPUTE timestamps."""
    trace = request.trace
    if trace is not None:
        start, input_end, output_start, end = times
        trace.report("COMPUTE_START", start)
        trace.report("COMPUTE_INPUT_END", input_end)
        trace.report("COMPUTE_OUTPUT_START", output_start)
        trace.report("COMPUTE_END", end)


def call_now(callback: Callable[..., object], *args: Any) -> None:
    """The ``post`` of a batch run on the loop: its answers are handed back at once."""
    callback(*args)


def _input_bytes(batch: list[Pending]) -> int:
    return sum(array.nbytes for p in batch for array in p.request.inputs.values())


class SchedulerServices(Protocol):
    """What the execution modes use of their scheduler (an
    :class:`~tritonx._core.instances.InstanceScheduler`), and nothing else.

    An instance is *claimed* (:meth:`claim`: its lock taken) before a batch runs on it; the
    mode then marks it :attr:`busy` (and, for a batch that outlives the call,
    :attr:`running`), runs the batch (:meth:`execute`, or ``execute_async`` then
    :meth:`complete`), and clears both and releases the lock when the batch is over.
    """

    # (read-only here: a mode changes the lists' items, never the lists)

    @property
    def config(self) -> ModelConfig:
        """The model version's config (its name, ``max_batch_size``)."""

    @property
    def batcher(self) -> Batcher:
        """The queue: the direct queue, the dynamic batcher or the sequence batcher."""

    @property
    def instances(self) -> list[ModelInstance | None]:
        """The loaded instances, by index (None: not loaded, or unloaded)."""

    @property
    def attach_batch_inputs(self) -> Callable[[list[InferenceRequest]], None] | None:
        """Adds the ``batch_input`` tensors to the requests of a batch; None: none declared."""

    @property
    def stopping(self) -> threading.Event:
        """Set once the scheduler stops (it has failed what was queued then)."""

    @property
    def busy(self) -> list[bool]:
        """Whether each instance is executing now, by index."""

    @property
    def running(self) -> list[list[Pending] | None]:
        """The batch each instance is executing, by index (None: none)."""

    @property
    def locks(self) -> list[threading.Lock]:
        """Each instance's lock: held by its thread while it runs a batch, or by whoever
        claimed it (:meth:`claim`) until the batch run on it is over."""

    def claim(self) -> int:
        """The index of an idle, ready instance, its lock taken; -1 when none is."""

    def queue_all(self, batches: list[list[Pending]]) -> None:
        """Put the requests of ``batches`` on the queue, for the instance threads (those
        the stopped queue refuses fail)."""

    def fail_stopped(self, pendings: Sequence[Pending]) -> None:
        """Fail requests the stopped scheduler will not run with the stop's error."""

    def drop_cancelled(self, batch: list[Pending]) -> list[Pending]:
        """Fail the batch's cancelled requests with CANCELLED; the others, to execute."""

    def execute(
        self, instance: ModelInstance, batch: list[Pending], post: Callable[..., object]
    ) -> None:
        """Run ``batch`` on ``instance`` (claimed) and answer it through :meth:`complete`;
        ``post(callback, *args)`` runs a callback on the loop (:func:`call_now` there)."""

    def complete(
        self,
        batch: list[Pending],
        responses: Sequence[InferenceResponse] | None,
        error: TritonXError | None,
        times: Times,
        post: Callable[..., object],
    ) -> None:
        """Answer and count an executed batch: the one completion path of every batch."""

    def fail_batch(self, batch: list[Pending], exc: Exception) -> None:
        """Fail every request of a batch that could not be answered (a bug, a backend
        returning something other than responses) with ``exc``."""


class Execution(Protocol):
    """What the scheduler asks of its execution mode (called on the event loop only)."""

    def submit(self, pending: Pending) -> bool | None:
        """Take an accepted request; raises UNAVAILABLE when the queue is full. True: call
        :meth:`start` once the scheduler counted the request in flight."""

    def start(self) -> None:
        """Start what :meth:`submit` took (when it returned True)."""

    @property
    def waiting(self) -> int:
        """Requests held on the loop for an instance (counted as pending)."""

    def stop(self) -> list[Pending]:
        """The scheduler stops: the requests held on the loop, to fail."""


class Queued:
    """Every request goes to the queue; the instance threads run its batches."""

    __slots__ = ("submit",)

    waiting = 0

    def __init__(self, batcher: Batcher) -> None:
        #: the queue's own ``put``: no call is added on the way to it
        self.submit: Callable[[Pending], bool | None] = batcher.put

    def start(self) -> None:
        pass

    def stop(self) -> list[Pending]:
        return []


class Inline:
    """Short batches run on the loop, at the end of its round (see the module docstring).

    :param limit_ns: ``--inline-execution-us``: the most the average execution may take.
    """

    __slots__ = ("_batcher", "_count", "_held", "_limit_ns", "_loop", "_mean_ns", "_scheduler")

    #: held requests are not counted: they run (or are queued) at the end of this round
    waiting = 0

    def __init__(
        self, scheduler: SchedulerServices, loop: asyncio.AbstractEventLoop, limit_ns: int
    ) -> None:
        self._scheduler = scheduler
        self._batcher = scheduler.batcher
        self._loop = loop
        self._limit_ns = limit_ns
        #: requests held on the loop until the end of its round
        self._held: list[Pending] = []
        #: average execution time (ns) and executions measured
        self._mean_ns = 0.0
        self._count = 0

    def submit(self, pending: Pending) -> bool:
        batcher = self._batcher
        if (
            self._count >= INLINE_WARMUP
            and self._mean_ns <= self._limit_ns
            and not batcher.pending_count
        ):
            if not self._held:
                self._loop.call_soon(self._run)
            self._held.append(pending)
        else:
            batcher.put(pending)
        return False

    def start(self) -> None:
        pass

    def executed(self, took_ns: int) -> None:
        """A batch of the model executed in ``took_ns`` (any instance, once per batch): the
        average that allows running inline."""
        count = self._count
        self._mean_ns = (
            took_ns if not count else self._mean_ns + (took_ns - self._mean_ns) * INLINE_WEIGHT
        )
        self._count = count + 1

    def stop(self) -> list[Pending]:
        return []  # the held requests fail when their round ends (the scheduler stopped)

    def _run(self) -> None:
        """Run the held requests' batches on the loop, each on an idle instance; the rest
        (no instance idle, a large batch) go to the queue; all fail when the scheduler
        stopped meanwhile."""
        sched = self._scheduler
        held, self._held = self._held, []
        if sched.stopping.is_set():  # stop() has failed the queued ones: these too
            sched.fail_stopped(held)
            return
        try:
            batches = sched.batcher.split(held)
        except Exception:  # a bug: the instance threads take them as always
            log.exception("forming inline batches of %s failed", sched.config.name)
            sched.queue_all([held])
            return
        for at, batch in enumerate(batches):
            index = -1
            if _input_bytes(batch) <= INLINE_MAX_BYTES:
                index = sched.claim()
            if index < 0:
                sched.queue_all(batches[at:])
                return
            instance = sched.instances[index]
            assert instance is not None
            sched.busy[index] = True
            try:
                sched.execute(instance, batch, call_now)
            except Exception as exc:
                sched.fail_batch(batch, exc)
            finally:
                sched.busy[index] = False
                sched.locks[index].release()


class Async:
    """Batches start on the loop through ``execute_async`` (see the module docstring)."""

    __slots__ = (
        "_batcher",
        "_dispatching",
        "_loop",
        "_scheduler",
        "_singles",
        "_started",
        "_waiting",
        "_window",
    )

    def __init__(self, scheduler: SchedulerServices, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduler = scheduler
        self._batcher = scheduler.batcher
        self._loop = loop
        #: requests waiting on the loop for an instance
        self._waiting: deque[Pending] = deque()
        #: a dispatch of the waiting requests is due at the end of the loop's round
        self._dispatching = False
        #: batches started through ``execute_async`` and not answered yet
        self._started = 0
        #: each batch is one request (the direct queue): nothing is gained by waiting for
        #: the end of the loop's round to start it
        self._singles = isinstance(scheduler.batcher, DirectQueue)
        #: requests the first waiting batch is formed from
        self._window = 1 if self._singles else max(1, int(scheduler.config.max_batch_size))

    def submit(self, pending: Pending) -> bool:
        batcher = self._batcher
        if batcher.pending_count:
            batcher.put(pending)
            return False
        self._waiting.append(pending)
        if self._singles:
            return True
        if not self._dispatching:
            self._dispatching = True
            self._loop.call_soon(self._dispatch)
        return False

    def start(self) -> None:
        self._dispatch()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def stop(self) -> list[Pending]:
        left = list(self._waiting)
        self._waiting.clear()
        return left

    def _dispatch(self) -> None:
        """Start the waiting requests' batches on idle instances; when none is idle and none
        is running, hand them to the queue and the threads. (At the end of the loop's round,
        so that requests arriving together are batched together; at once for the direct
        queue.)"""
        self._dispatching = False
        sched = self._scheduler
        waiting = self._waiting
        if sched.stopping.is_set():  # stop() has failed the queued ones: these too
            sched.fail_stopped(list(waiting))
            waiting.clear()
            return
        window = self._window
        while waiting:
            index = sched.claim()
            if index < 0:
                break
            first = [waiting[at] for at in range(min(len(waiting), window))]
            try:
                batch = sched.batcher.split(first)[0]
            except Exception:  # a bug: the instance threads take them as always
                log.exception("forming a batch of %s failed", sched.config.name)
                sched.locks[index].release()
                break
            for _ in batch:
                waiting.popleft()
            self._start(index, batch)
        if waiting and not self._started:  # nothing will come back for them
            left = list(waiting)
            waiting.clear()
            sched.queue_all([left])

    def _start(self, index: int, batch: list[Pending]) -> None:
        """Start ``batch`` on instance ``index`` (claimed) through ``execute_async``."""
        sched = self._scheduler
        if any(p.request.cancelled for p in batch):  # cancelled while waiting
            batch = sched.drop_cancelled(batch)
            if not batch:
                sched.locks[index].release()
                return
        instance = sched.instances[index]
        assert instance is not None
        sched.busy[index] = True
        sched.running[index] = batch
        self._started += 1
        start = time.perf_counter_ns()
        try:
            requests = [p.request for p in batch]
            if sched.attach_batch_inputs is not None:
                sched.attach_batch_inputs(requests)
            future = instance.execute_async(requests)
        except BaseException as exc:
            self._done(index, batch, start, None, TritonXError.wrap(exc))
            return
        future.add_done_callback(functools.partial(self._collect, index, batch, start))

    def _collect(
        self,
        index: int,
        batch: list[Pending],
        start: int,
        future: asyncio.Future[Sequence[InferenceResponse] | None],
    ) -> None:
        if future.cancelled():
            self._done(index, batch, start, None, cancelled_error())
            return
        exc = future.exception()
        if exc is not None:
            self._done(index, batch, start, None, TritonXError.wrap(exc))
        else:
            self._done(index, batch, start, future.result(), None)

    def _done(
        self,
        index: int,
        batch: list[Pending],
        start: int,
        responses: Sequence[InferenceResponse] | None,
        error: TritonXError | None,
    ) -> None:
        """An asynchronous batch is over: free its instance, start the next batch (so the
        instance works while the loop answers this one), answer it."""
        end = time.perf_counter_ns()
        sched = self._scheduler
        sched.busy[index] = False
        sched.running[index] = None
        self._started -= 1
        sched.locks[index].release()
        if self._waiting and not self._dispatching:
            self._dispatch()
        try:
            sched.complete(batch, responses, error, (start, start, end, end), call_now)
        except Exception as exc:
            sched.fail_batch(batch, exc)
