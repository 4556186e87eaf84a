"""Running requests on model instances: one worker thread per instance, fed from one queue.

The event loop validates a request and puts it on the version's queue (a ``DirectQueue`` or,
with ``dynamic_batching``, a ``DynamicBatcher``); whichever instance thread is free
(:mod:`~tritonx._core.instance_thread`) takes the next batch, waits for the rate limiter if it
is on, calls the backend's ``execute`` and hands the responses back to the loop with one
``call_soon_threadsafe`` per batch (:mod:`~tritonx._core.completion` completes them). Backends are
synchronous and never see two concurrent ``execute`` calls on one instance.

How requests reach the instances (the queue and its threads, batches run inline on the loop,
or started there on asynchronous instances) is the execution mode
(:mod:`tritonx._core.execution`, which uses the scheduler only through its
:class:`~tritonx._core.execution.SchedulerServices`); every batch, however it ran, is answered
and counted by one completion path (:mod:`tritonx._core.completion`), which the sequence
scheduler shares.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from tritonx._core.batcher import (
    BACKEND,
    CANCELED,
    Batcher,
    Pending,
    Reject,
)
from tritonx._core.completion import BatchCompletion
from tritonx._core.execution import (
    Async,
    Execution,
    Inline,
    Queued,
    run_execute,
    trace_queued,
)
from tritonx._core.inflight import InFlight
from tritonx._core.instance_groups import match_instances
from tritonx._core.instance_thread import run_instance_thread
from tritonx._core.probes import Probes
from tritonx._core.rate_limiter import RateLimiter, Ticket
from tritonx._core.watchdog import format_stack
from tritonx._dataplane.stats import LatencyStats, ModelStats
from tritonx.backend import Backend, LoadContext, ModelInstance
from tritonx.batching import BatchIO
from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError
from tritonx.types import (
    InferenceRequest,
    InferenceResponse,
    ResponseSender,
)

log = logging.getLogger("tritonx.scheduler")

#: Seconds instance threads get to unload at stop when no execution is running.
UNLOAD_GRACE_S = 5.0

#: Seconds an instance that agreed to :meth:`~tritonx.backend.ModelInstance.abort` gets to
#: answer its batch and unload (then its thread is abandoned as well).
ABORT_GRACE_S = 5.0


class InstanceScheduler(BatchCompletion):
    """Runs one model version's requests on its instances: a worker thread per instance
    pulls batches from a :class:`~tritonx._core.batcher.Batcher` (the direct queue or the
    dynamic batcher, chosen by :func:`tritonx._core.scheduler.make_scheduler`).

    Here: the instances' lifecycle (start, instance-group updates, stop) and the requests'
    way in. Elsewhere: the threads' loop (:mod:`tritonx._core.instance_thread`), the
    execution modes (:mod:`tritonx._core.execution`), which the scheduler serves as
    :class:`~tritonx._core.execution.SchedulerServices`, and the completion path
    (:class:`~tritonx._core.completion.BatchCompletion`, a base class).
    """

    #: a batch's requests cancelled since they were queued are dropped before it runs (the
    #: sequence scheduler runs every row of a batch: its batcher ends cancelled sequences)
    drops_cancelled = True

    def __init__(
        self,
        config: ModelConfig,
        version: int,
        backend: Backend,
        contexts: Sequence[LoadContext],
        batcher: Callable[[Reject], Batcher],
        passive: Sequence[bool] | None = None,
        rate_limiter: RateLimiter | None = None,
        latency: LatencyStats | None = None,
        inline_execution_us: float = 0.0,
    ) -> None:
        self.config = config
        self.version = version
        self.backend = backend
        self.contexts = list(contexts)
        self.passive = list(passive or [False] * len(self.contexts))
        self.decoupled = config.decoupled
        self.stats = ModelStats(latency=latency)
        self.instances: list[ModelInstance | None] = [None] * len(self.contexts)
        self.rate_limiter = rate_limiter or RateLimiter()
        self.batcher = batcher(self._reject)
        self._init_completion(config, self.batcher)
        #: one per instance, by index
        self._threads: list[threading.Thread] = []
        #: set as :meth:`stop` begins (the queue stops and its requests fail right after)
        self.stopping = threading.Event()
        #: what requests the stopped scheduler will not run fail with (see :meth:`stop`)
        self._stop_error = TritonXError("Server exiting", Code.UNAVAILABLE)
        #: the batch each instance is executing (on its thread or through execute_async)
        self.running: list[list[Pending] | None] = [None] * len(self.contexts)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inflight = InFlight()
        #: whether each instance is executing now (each flag set by its own thread only)
        self.busy = [False] * len(self.contexts)
        self._seq = 0
        #: every instance loaded and none can become unready (``is_ready`` not overridden):
        #: readiness is known without asking them (it is asked for at every request)
        self._steady = False
        #: the probes of :meth:`probe_ready` in flight, one per instance at most
        self._probes = Probes()
        #: held by an instance's thread, or by the loop running a batch inline on it
        self.locks = [threading.Lock() for _ in self.contexts]
        #: instances out of service (:meth:`update_instances`): removed (passive from then on,
        #: unloaded, their thread gone or leaving), or added and not serving yet (loading,
        #: warming up): skipped by readiness, by the loop's execution modes and by updates
        self.out_of_service = [False] * len(self.contexts)
        self._inline_limit_ns = int(inline_execution_us * 1000)
        #: how accepted requests reach the instances (chosen at start)
        self.execution: Execution = Queued(self.batcher)
        self._route = self.execution.submit
        #: adds the ``batch_input`` tensors to the requests of each batch it runs
        batch_io = BatchIO.of(config)
        self.attach_batch_inputs = (
            batch_io.attach if batch_io is not None and batch_io.batch_inputs else None
        )

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start one thread per instance and wait until every instance has loaded.

        If any instance fails to load, the others are unloaded and the error is raised.
        """
        self._loop = asyncio.get_running_loop()
        tickets = [self._ticket(ctx) for ctx in self.contexts]
        ready = [
            self._start_thread(index, ctx, tickets[index])
            for index, ctx in enumerate(self.contexts)
        ]
        results = await asyncio.gather(*ready, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.stop()
            raise TritonXError.wrap(errors[0])
        self._steady = self._is_steady()
        self._choose_execution()

    def _start_thread(
        self, index: int, ctx: LoadContext, ticket: Ticket | None, go: threading.Event | None = None
    ) -> asyncio.Future[None]:
        """Start instance ``index``'s thread (:func:`run_instance_thread`); the future is
        done once the instance loaded (or failed to)."""
        assert self._loop is not None
        ready: asyncio.Future[None] = self._loop.create_future()
        thread = threading.Thread(
            target=run_instance_thread,
            args=(self, self._loop, index, ctx, ready, ticket, go),
            name=f"tritonx-{ctx.instance.name}-v{self.version}",
            daemon=True,
        )
        self._threads.append(thread)
        thread.start()
        return ready

    def _choose_execution(self) -> None:
        """The execution mode the serving instances allow (the loop's Async or Inline modes
        when every one of them can run batches so, else the queue); when it changes (an
        instance-group update), what the old mode held on the loop goes to the queue."""
        assert self._loop is not None
        active = [
            instance
            for instance, passive, out in zip(
                self.instances, self.passive, self.out_of_service, strict=True
            )
            if not passive and not out
        ]
        immediate = (
            bool(active)
            and not self.decoupled
            and not self.rate_limiter.enabled
            and self.batcher.immediate
        )
        kind: type[Any] = Queued
        if immediate and all(i is not None and i.async_execution for i in active):
            kind = Async
        elif (
            immediate
            and self._inline_limit_ns > 0
            and all(i is not None and i.inline_execution for i in active)
        ):
            kind = Inline
        if type(self.execution) is kind:
            return
        held = self.execution.stop()
        if kind is Async:
            self.execution = Async(self, self._loop)
        elif kind is Inline:
            self.execution = Inline(self, self._loop, self._inline_limit_ns)
        else:
            self.execution = Queued(self.batcher)
        self._timed = self.execution.executed if isinstance(self.execution, Inline) else None
        self._route = self.execution.submit  # the mode's submit, one lookup per request
        if held:
            self.queue_all([held])

    def _is_steady(self) -> bool:
        return not all(self.passive) and all(
            instance is not None and type(instance).is_ready is ModelInstance.is_ready
            for instance, gone in zip(self.instances, self.out_of_service, strict=True)
            if not gone
        )

    #: whether :meth:`update_instances` can change the instances in place (the sequence
    #: scheduler's slots belong to its instances: a new instance group reloads it)
    updates_instances = True

    async def update_instances(
        self,
        config: ModelConfig,
        contexts: Sequence[LoadContext],
        passive: Sequence[bool],
        warm: Callable[[list[tuple[str, ModelInstance]]], Awaitable[None]],
    ) -> tuple[int, int]:
        """Change the instances to those of ``config``'s instance groups while serving, as
        Triton's ``UpdateInstanceGroup``: an instance whose group settings (all but the
        group's name and count) and device match a running one's reuses it, untouched; the
        others are loaded, warmed up (``warm``) and only then take requests; running
        instances left over finish their batch and are unloaded. Returns (added, removed).

        :raises TritonXError: a new instance failed to load or warm up; the instances
            running before keep serving, unchanged.
        """
        assert self._loop is not None
        changes = match_instances(self.contexts, self.out_of_service, contexts, passive)
        go = threading.Event()
        added = [self._add_instance(ctx) for ctx in changes.added]
        ready = [
            self._start_thread(i, self.contexts[i], self._ticket(self.contexts[i]), go)
            for i in added
        ]
        results = await asyncio.gather(*ready, return_exceptions=True)
        error = next((r for r in results if isinstance(r, BaseException)), None)
        if error is None:
            try:
                await warm(
                    [
                        (self.contexts[i].instance.name, instance)
                        for i in added
                        if (instance := self.instances[i]) is not None
                    ]
                )
            except BaseException as exc:
                error = exc
        if error is not None:  # the instances that were running stay as they are
            await asyncio.gather(*(self._retire(index) for index in added))
            go.set()
            raise TritonXError.wrap(error)
        for index, is_passive in zip(added, changes.added_passive, strict=True):
            self.passive[index] = is_passive
            self.out_of_service[index] = False
        go.set()  # (their threads read passive once they pass it)
        self.config = config
        await asyncio.gather(*(self._retire(index) for index in changes.removed))
        self._steady = self._is_steady()
        self._choose_execution()  # (an added instance may not run batches on the loop)
        return len(added), len(changes.removed)

    def _add_instance(self, ctx: LoadContext) -> int:
        """A new instance's index, out of service (passive) until it is loaded and warmed
        up; ``ctx``, renumbered to that index, becomes its context."""
        index = len(self.contexts)
        ctx = dataclasses.replace(ctx, instance=dataclasses.replace(ctx.instance, index=index))
        self.contexts.append(ctx)
        self.passive.append(True)
        self.instances.append(None)
        self.running.append(None)
        self.busy.append(False)
        self.locks.append(threading.Lock())
        self.out_of_service.append(True)
        return index

    async def _retire(self, index: int) -> None:
        """Take instance ``index`` out of service: no batch goes to it any more, the one it
        runs finishes, then it is unloaded (its thread leaves when it next wakes)."""
        self.out_of_service[index] = True
        self.passive[index] = True
        retire = getattr(self.batcher, "retire", None)
        if retire is not None:
            retire(index)
        await asyncio.to_thread(self._unload_retired, index)

    def _unload_retired(self, index: int) -> None:
        with self.locks[index]:  # (its running batch, if any, ends first)
            instance, self.instances[index] = self.instances[index], None
        if instance is None:
            return
        try:
            instance.unload()
        except Exception:
            log.exception(
                "unloading instance %s of %s failed",
                self.contexts[index].instance.name,
                self.config.name,
            )

    def _ticket(self, ctx: LoadContext) -> Ticket | None:
        if not self.rate_limiter.enabled:
            return None
        group = next(g for g in ctx.config.raw.instance_group if g.name == ctx.instance.group_name)
        resources = [
            (r.name, int(r.count), bool(r.__getattribute__("global")))
            for r in group.rate_limiter.resources
        ]
        return self.rate_limiter.register(
            resources, ctx.instance.device_id, int(group.rate_limiter.priority)
        )

    async def stop(self, timeout: float | None = None, error: TritonXError | None = None) -> bool:
        """Stop the workers and unload every instance; requests still queued fail with
        ``error`` (default: Triton's "Server exiting").

        With ``timeout``, what still runs after that many seconds (an execution, an
        instance's unload) is ended: the instance is asked to
        :meth:`~tritonx.backend.ModelInstance.abort` (a python model's worker process is
        killed, failing its batch) and given :data:`ABORT_GRACE_S` to finish; the thread of
        one that cannot be stopped is abandoned (a daemon) and its batch fails with
        ``error``. Returns False when the timeout was reached.
        """
        if error is not None:
            self._stop_error = error
        self.stopping.set()
        self._steady = False
        active = sum(1 for p in self.passive if not p)
        # retired instances' threads may still wait in the queue (one stop each)
        active += sum(
            1
            for gone, thread in zip(self.out_of_service, self._threads, strict=False)
            if gone and thread.is_alive()
        )
        left = self.batcher.stop(active)
        left.extend(self.execution.stop())
        if self._loop is not None:
            self.fail_stopped(left)
        threads, self._threads = self._threads, []
        if timeout is not None and not any(self.busy):
            # nothing runs: the threads only unload their instances, which gets a grace period
            timeout = max(timeout, UNLOAD_GRACE_S)
        if await asyncio.to_thread(_join_all, threads, timeout):
            return True
        await self._end_stuck(threads)
        return False

    async def _end_stuck(self, threads: list[threading.Thread]) -> None:
        """The stop's timeout is up: abort the instances whose thread still runs, wait
        :data:`ABORT_GRACE_S` for those that can be stopped, abandon the others."""
        stuck = [index for index, thread in enumerate(threads) if thread.is_alive()]
        candidates = [(index, self.instances[index]) for index in stuck]
        for index, _ in candidates:
            log.warning(
                "model '%s' version %d: instance %s is still %s when the time to unload "
                "it is up: aborting it",
                self.config.name,
                self.version,
                self.contexts[index].instance.name,
                "executing" if self.busy[index] else "unloading",
            )
        results = await asyncio.gather(
            *(asyncio.to_thread(_abort, instance) for _, instance in candidates)
        )
        aborted = [threads[index] for (index, _), ok in zip(candidates, results, strict=True) if ok]
        if aborted:
            await asyncio.to_thread(_join_all, aborted, ABORT_GRACE_S)
        for index in stuck:
            if threads[index].is_alive():
                self._abandon(index, threads[index])

    def _abandon(self, index: int, thread: threading.Thread) -> None:
        """Leave instance ``index``'s thread to itself (a daemon: it ends with the process),
        logging where it is stuck, and fail the batch it holds with the stop's error."""
        batch, self.running[index] = self.running[index], None
        frame = sys._current_frames().get(thread.ident or -1)
        stack = format_stack(frame) if frame is not None else ""
        log.warning(
            "model '%s' version %d: instance %s could not be stopped: its thread %s is "
            "abandoned (%d requests of its batch fail)%s",
            self.config.name,
            self.version,
            self.contexts[index].instance.name,
            thread.name,
            sum(1 for p in batch or () if p.deliver is not None),
            f"; it is at:\n{stack}" if stack else "",
        )
        for pending in batch or ():
            if pending.deliver is not None:
                self._reject(pending, self._stop_error, BACKEND)

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until no request is in flight; False if ``timeout`` passed first."""
        return await self._inflight.drain(timeout)

    @property
    def inflight(self) -> int:
        return self._inflight.count

    @property
    def in_use(self) -> bool:
        return self._inflight.count > 0

    @property
    def pending_count(self) -> int:
        """Requests accepted but not yet executing (``nv_inference_pending_request_count``)."""
        return self.batcher.pending_count + self.execution.waiting

    def is_ready(self) -> bool:
        """Every instance loaded, and at least one that takes requests ready (the others may
        be recovering, e.g. a python model's worker process being restarted)."""
        if self._steady:
            return True
        ready = False
        for instance, passive, gone in zip(
            self.instances, self.passive, self.out_of_service, strict=True
        ):
            if gone:
                continue
            if instance is None:
                return False
            if not ready and not passive and instance.is_ready():
                ready = True
        return ready

    async def probe_ready(self) -> str | None:
        """Ask every instance that can be asked (overrides ``probe_ready``), at once; the
        first reason any gives (Triton: one instance not ready makes the model not ready).
        An instance being asked is not asked again: the check waits for that answer
        (:class:`~tritonx._core.probes.Probes`)."""
        probes = [
            self._probes.ask(i, self.contexts[index].instance.name)
            for index, i in enumerate(self.instances)
            if i is not None and type(i).probe_ready is not ModelInstance.probe_ready
        ]
        if not probes:
            return None
        reasons = await asyncio.gather(*probes)
        return next((r for r in reasons if r is not None), None)

    def restarts(self) -> int:
        """The instances' restarts since they loaded."""
        return sum(i.restarts for i in self.instances if i is not None)

    def not_ready_reason(self) -> str:
        """The first not-ready instance's ``not_ready_reason()``."""
        for instance in self.instances:
            if instance is not None and not instance.is_ready():
                return instance.not_ready_reason()
        return "model instance is not ready"

    # ------------------------------------------------------------------ requests

    def submit(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        """Queue a (validated) request of a non-decoupled model; the future gets its response.

        Raises UNAVAILABLE when the queue is full.
        """
        assert self._loop is not None
        future: asyncio.Future[InferenceResponse] = self._loop.create_future()
        pending = Pending(request, future, self._seq)
        start = self._route(pending)
        if request.trace is not None:
            trace_queued(request, pending.enqueue_ns)
        self._seq += 1
        inflight = self._inflight
        inflight.track()
        future.add_done_callback(inflight.untrack)
        if start:  # (once the request is counted: it may be answered at once)
            self.execution.start()
        return future

    async def stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        """Queue a request of a decoupled model; yield its responses until the final one."""
        assert self._loop is not None
        loop = self._loop
        responses: asyncio.Queue[InferenceResponse | None] = asyncio.Queue()
        model, version, rid = self.config.name, self.version, request.id
        outputs = request.requested_outputs

        listening = True

        def deliver(response: InferenceResponse | None, final: bool) -> None:
            if not listening:  # the consumer went away: drop it quietly
                return
            if response is not None:
                self._finish(response, model, version, rid, outputs)
                response.final = final
            elif final:
                response = InferenceResponse(
                    model_name=model, model_version=version, id=rid, final=True, empty=True
                )
            loop.call_soon_threadsafe(responses.put_nowait, response)

        request.response_sender = ResponseSender(deliver)
        pending = Pending(request, responses, -1)
        self.batcher.put(pending)
        trace = request.trace
        if trace is not None:
            trace_queued(request, pending.enqueue_ns)
        self._inflight.track()
        failed: str | None = None
        ended = False
        try:
            while True:
                response = await responses.get()
                if response is None:
                    ended = True
                    return
                if trace is not None and response.error is None:
                    trace.report_tensors("TENSOR_BACKEND_OUTPUT", response.outputs)
                if response.error is not None and failed is None:
                    failed = pending.rejected or BACKEND
                ended = response.final
                yield response
                if ended:
                    return
        finally:
            self._inflight.untrack()
            if not ended:  # the consumer left before the final response: cancel the request
                listening = False
                request.cancel()
                failed = failed or CANCELED
            elapsed = time.perf_counter_ns() - pending.enqueue_ns
            if failed is None:
                self.stats.record_success(elapsed)
            else:
                self.stats.record_failure(failed, elapsed)

    # ------------------------------------------------------------------ internals

    def fail_stopped(self, pendings: Sequence[Pending]) -> None:
        """Fail requests the stopping scheduler will not run with the stop's error (Triton's
        "Server exiting", or the not-ready answer of a model being unloaded)."""
        for pending in pendings:
            self._reject(pending, self._stop_error)

    def claim(self) -> int:
        """The index of an idle, ready instance, its lock taken; -1 when none is."""
        for index, lock in enumerate(self.locks):
            if self.passive[index] or not lock.acquire(blocking=False):
                continue
            instance = self.instances[index]
            if instance is not None and (self._steady or instance.is_ready()):
                return index
            lock.release()
        return -1

    def queue_all(self, batches: list[list[Pending]]) -> None:
        for batch in batches:
            for pending in batch:
                try:
                    self.batcher.put(pending)
                except TritonXError as exc:  # stopped meanwhile
                    self._reject(pending, exc)

    def execute(
        self, instance: ModelInstance, batch: list[Pending], post: Callable[..., object]
    ) -> None:
        """Run ``batch`` on ``instance``; ``post(callback, *args)`` runs a callback on the
        loop (``call_soon_threadsafe`` from an instance thread, at once when inline)."""
        if self.drops_cancelled and any(p.request.cancelled for p in batch):
            batch = self.drop_cancelled(batch)  # (cancelled since it was queued)
            if not batch:
                return
        requests = [p.request for p in batch]
        if self.attach_batch_inputs is not None:
            self.attach_batch_inputs(requests)
        responses, error, times = run_execute(instance, requests)
        self.complete(batch, responses, error, times, post)


def _abort(instance: ModelInstance | None) -> bool:
    """``instance.abort()``; False when there is none or it failed (then it is abandoned)."""
    if instance is None:
        return False
    try:
        return bool(instance.abort())
    except Exception:
        log.exception("aborting an instance failed")
        return False


def _join_all(threads: list[threading.Thread], timeout: float | None = None) -> bool:
    deadline = None if timeout is None else time.monotonic() + timeout
    for thread in threads:
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in threads)
