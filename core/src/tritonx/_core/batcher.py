"""Queues between the event loop and instance threads: which requests run together.

``DirectQueue`` is Triton's default scheduler (one request per execution). ``DynamicBatcher``
is Triton's dynamic batcher (core ``dynamic_batch_scheduler.cc``): priority levels with queue
policies (timeouts with REJECT or DELAY, maximum queue size), batches that respect
``max_batch_size``, ``preferred_batch_size``, ``max_queue_delay_microseconds`` and shape
compatibility. Instance threads call ``get()``, which blocks until a batch is due.

Both drop cancelled requests (:meth:`~tritonx.types.InferenceRequest.cancel`: the client went
away) when they reach them, before they take an instance or a batch slot, and answer them with
Triton's CANCELLED status (failure reason ``CANCELED``), as Triton's queues do.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError
from tritonx.proto import model_config_pb2
from tritonx.types import InferenceRequest

_STOP = object()
DELAY = model_config_pb2.ModelQueuePolicy.TimeoutAction.DELAY

#: Failure reasons of ``nv_inference_request_failure`` (Triton's four).
REJECTED, CANCELED, BACKEND, OTHER = "REJECTED", "CANCELED", "BACKEND", "OTHER"


def cancelled_error() -> TritonXError:
    """What a cancelled request that never ran is answered with: Triton's bare CANCELLED
    status (core ``Status(Status::Code::CANCELLED)``, no message)."""
    return TritonXError("", Code.CANCELLED)


class Pending:
    """A request waiting for (or in) execution, with where its result goes.

    :param deliver: the scheduler's handle for the result (a future or a stream queue).
    """

    __slots__ = (
        "deadline_ns",
        "deliver",
        "enqueue_ns",
        "level",
        "rejected",
        "request",
        "requeued_ns",
        "seq",
        "sequence",
        "shapes",
    )

    #: the request's sequence (set by the sequence batcher only, never read elsewhere)
    sequence: Any

    def __init__(self, request: InferenceRequest, deliver: Any, seq: int = 0) -> None:
        self.request = request
        self.deliver = deliver
        self.seq = seq
        self.enqueue_ns = time.perf_counter_ns()
        self.deadline_ns = 0
        self.level = 0
        self.shapes: tuple[Any, ...] | None = None
        #: the failure reason (REJECTED, CANCELED) when the request failed without running
        #: (queue timeout, shutdown, cancelled sequence); "" otherwise
        self.rejected = ""
        #: when a rescheduled request was queued again (its queue time counts from there,
        #: as Triton's); 0 until then
        self.requeued_ns = 0


class Batcher(Protocol):
    """What instance threads pull batches from.

    ``get(instance)`` receives the index of the instance asking for work, so a batcher can
    pin requests to an instance (a sequence stays on the slot it started on); it blocks until
    a batch is due and returns None once the batcher is stopped.

    A batcher may also have ``completed(batch, responses)`` (responses None for a decoupled
    model): the scheduler calls it on the thread that ran each batch, before the batch is
    answered (the sequence batcher keeps state outputs and issues its slots' next requests).
    """

    def put(self, pending: Pending) -> None: ...
    def get(self, instance: int) -> list[Pending] | None: ...
    @property
    def immediate(self) -> bool:
        """Whether a batch is formed as soon as an instance is free, from what is queued
        then (no queue delay, priorities, queue policy or held start): then
        :meth:`split` forms the batches ``get`` would form of requests queued together."""
        ...

    def split(self, pendings: list[Pending]) -> list[list[Pending]]:
        """The batches ``get`` would form, in order, of ``pendings`` queued together
        (an :attr:`immediate` batcher only)."""
        ...

    def stop(self, workers: int) -> list[Pending]: ...
    @property
    def pending_count(self) -> int: ...


#: How a batcher fails a request it will not run: ``reject(pending, error, reason)``, with
#: ``reason`` one of the failure reasons above; callable from any thread, never blocking.
Reject = Callable[[Pending, TritonXError, str], None]


class DirectQueue:
    """Triton's default scheduler: each free instance takes the oldest request alone.

    :param reject: fails the cancelled requests the queue drops.
    """

    def __init__(self, reject: Reject) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._reject = reject

    def put(self, pending: Pending) -> None:
        self._queue.put(pending)

    @property
    def immediate(self) -> bool:
        return True

    def split(self, pendings: list[Pending]) -> list[list[Pending]]:
        return [[pending] for pending in pendings]

    def get(self, instance: int = 0) -> list[Pending] | None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return None
            if not item.request.cancelled:
                return [item]
            self._reject(item, cancelled_error(), CANCELED)

    def stop(self, workers: int) -> list[Pending]:
        """Stop the ``workers``; returns the requests still queued (the scheduler fails
        them: they would otherwise wait for an instance that may never be free again)."""
        left: list[Pending] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                left.append(item)
        for _ in range(workers):
            self._queue.put(_STOP)
        return left

    @property
    def pending_count(self) -> int:
        return self._queue.qsize()


class _Level:
    """One priority level: its queue, its delayed queue and its policy."""

    __slots__ = ("allow_override", "delay_action", "delayed", "max_size", "queue", "timeout_ns")

    def __init__(self, policy: Any) -> None:
        self.queue: deque[Pending] = deque()
        self.delayed: deque[Pending] = deque()
        self.timeout_ns = int(policy.default_timeout_microseconds) * 1000
        self.allow_override = bool(policy.allow_timeout_override)
        self.delay_action = policy.timeout_action == DELAY
        self.max_size = int(policy.max_queue_size)

    def __len__(self) -> int:
        return len(self.queue) + len(self.delayed)


class DynamicBatcher:
    """Triton's dynamic batcher over one model version's queue.

    :param reject: called (under the batcher's lock, from any thread) with requests whose queue
        timeout expired under the REJECT action and with cancelled requests; it must not block.
    :param settings: the ``ModelDynamicBatching`` message to follow instead of the config's
        ``dynamic_batching`` (the sequence batcher's oldest strategy builds one).
    :param drop_cancelled: False keeps cancelled requests (the oldest strategy, which must see
        each of its requests complete, drops them before they get here).
    """

    def __init__(
        self,
        config: ModelConfig,
        reject: Reject,
        settings: Any = None,
        *,
        drop_cancelled: bool = True,
    ) -> None:
        db = config.raw.dynamic_batching if settings is None else settings
        self.max_batch = max(1, config.max_batch_size)
        # (Triton's normalization: no preferred size means max_batch_size)
        self.preferred = frozenset(int(s) for s in db.preferred_batch_size) or frozenset(
            {self.max_batch}
        )
        self.max_preferred = max(self.preferred)
        self.delay_ns = int(db.max_queue_delay_microseconds) * 1000
        self.levels_count = int(db.priority_levels)
        self.default_level = int(db.default_priority_level) if self.levels_count else 1
        count = max(1, self.levels_count)
        self._levels = [
            _Level(
                db.priority_queue_policy[i]
                if i in db.priority_queue_policy
                else db.default_queue_policy
            )
            for i in range(1, count + 1)
        ]
        self._ragged = frozenset(t.name for t in config.inputs if t.allow_ragged_batch)
        self._batching = config.max_batch_size > 0
        self._reject = reject
        self._drop = drop_cancelled
        lock = threading.RLock()
        self._cond = threading.Condition(lock)
        # the queue-timeout thread waits on its own condition (a worker's notify never
        # wakes it in a worker's place)
        self._timer_cond = threading.Condition(lock)
        self._timer: threading.Thread | None = None
        self._count = 0
        self._stopped = False
        #: instances removed by an instance-group update (:meth:`retire`)
        self._retired: set[int] = set()
        self._next_deadline = 0
        # Triton's test knob: hold the first batch until this many requests are queued
        self._hold = int(os.environ.get("TRITONSERVER_DELAY_SCHEDULER", "0") or 0)

    @property
    def pending_count(self) -> int:
        return self._count

    @property
    def immediate(self) -> bool:
        return (
            self.delay_ns == 0
            and self.levels_count == 0
            and not self._hold
            and not any(lvl.timeout_ns or lvl.max_size for lvl in self._levels)
        )

    def split(self, pendings: list[Pending]) -> list[list[Pending]]:
        """As :meth:`_decide` forms batches without a queue delay, one after the other."""
        batches: list[list[Pending]] = []
        start = 0
        while start < len(pendings):
            count, best, _, _, _ = self._scan(pendings[start:], False)
            take = best or count
            batches.append(pendings[start : start + take])
            start += take
        return batches

    # ------------------------------------------------------------------ enqueue

    def put(self, pending: Pending) -> None:
        """Queue a request; raises UNAVAILABLE "Exceeds maximum queue size" when full."""
        request = pending.request
        level = request.priority
        if self.levels_count == 0:
            index = 0
        else:
            if level < 1 or level > self.levels_count:
                level = self.default_level
            index = level - 1
        lvl = self._levels[index]
        pending.level = index
        timeout = lvl.timeout_ns
        if (
            lvl.allow_override
            and request.timeout_us
            and timeout
            and request.timeout_us * 1000 < timeout
        ):
            timeout = request.timeout_us * 1000
        with self._cond:
            if self._stopped:
                raise TritonXError("Server exiting", Code.UNAVAILABLE)
            if lvl.max_size and len(lvl) >= lvl.max_size:
                raise TritonXError("Exceeds maximum queue size", Code.UNAVAILABLE)
            if timeout:
                pending.deadline_ns = pending.enqueue_ns + timeout
                if not self._next_deadline or pending.deadline_ns < self._next_deadline:
                    self._next_deadline = pending.deadline_ns
                    self._timer_cond.notify()
                if self._timer is None:
                    self._timer = threading.Thread(
                        target=self._time_out, name="tritonx-queue-timeout", daemon=True
                    )
                    self._timer.start()
            lvl.queue.append(pending)
            self._count += 1
            self._cond.notify()

    # ------------------------------------------------------------------ batch formation

    def retire(self, instance: int) -> None:
        """Instance ``instance`` was removed (an instance-group update): its ``get`` returns
        None from now on."""
        with self._cond:
            self._retired.add(instance)
            self._cond.notify_all()

    def get(self, instance: int = 0) -> list[Pending] | None:
        """Block until a batch is due and return it; None once stopped (or ``instance``
        retired)."""
        with self._cond:
            while True:
                if self._stopped or (self._retired and instance in self._retired):
                    return None
                now = time.perf_counter_ns()
                if self._next_deadline and now >= self._next_deadline:
                    self._expire(now)
                if self._count == 0 or self._count < self._hold:
                    self._cond.wait()
                    continue
                self._hold = 0
                take, wake_ns = self._decide(now)
                if take < 0:  # a cancelled request in the batch's reach
                    self._drop_cancelled()
                    continue
                if take:
                    batch = self._pop(take)
                    if self._count:
                        self._cond.notify()
                    return batch
                if self._next_deadline:
                    wake_ns = min(wake_ns, self._next_deadline)
                self._cond.wait(max(0.0, (wake_ns - now) / 1e9))

    def _ordered(self) -> Iterator[Pending]:
        for lvl in self._levels:
            yield from lvl.queue
            yield from lvl.delayed

    def _signature(self, pending: Pending) -> tuple[Any, ...]:
        if pending.shapes is None:
            ragged = self._ragged
            pending.shapes = tuple(
                sorted(
                    (name, () if name in ragged else array.shape[1:])
                    for name, array in pending.request.inputs.items()
                )
            )
        return pending.shapes

    def _scan(self, items: Iterable[Pending], drop: bool) -> tuple[int, int, int, bool, int]:
        """Triton's ``GetDynamicBatch`` walk over the queue: (requests in the pending batch,
        requests up to the best preferred size (0: none), the pending batch size, whether the
        batch cannot grow, the oldest enqueue time in the batch); count -1 when ``drop`` and a
        request it reaches is cancelled.

        The pending batch grows while requests fit ``max_batch_size`` and the first one's
        shapes; the best preferred size is the largest preferred size reached, or the size
        before the largest preferred size would be exceeded."""
        pending = count = best = 0
        oldest = 0
        first: Pending | None = None
        for item in items:
            if drop and item.request.cancelled:
                return -1, 0, 0, False, 0
            size = max(item.request.batch_size if self._batching else 1, 1)
            if first is None:
                first = item
            else:
                if pending + size > self.max_preferred and best == 0:
                    best = count
                if pending + size > self.max_batch or self._signature(item) != self._signature(
                    first
                ):
                    return count, best, pending, True, oldest
            if not count or item.enqueue_ns < oldest:
                oldest = item.enqueue_ns
            pending += size
            count += 1
            if pending in self.preferred:
                best = count
        return count, best, pending, False, oldest

    def _decide(self, now: int) -> tuple[int, int]:
        """(how many queued requests to send now, or 0 and when to look again); (-1, 0)
        when a request the batch would reach is cancelled (drop those first).

        As Triton's ``GetDynamicBatch``: the best preferred batch (:meth:`_scan`) is sent at
        once unless the oldest request waited the queue delay, in which case everything
        pending is sent; so is a batch that cannot grow or reached the largest preferred
        size; otherwise the batch waits for the delay (with no delay: it is sent)."""
        count, best, pending, send_now, oldest = self._scan(self._ordered(), self._drop)
        if count < 0:
            return -1, 0
        exceeded = self.delay_ns != 0 and now - oldest >= self.delay_ns
        if best and not exceeded:
            return best, 0
        if send_now or pending >= self.max_preferred or exceeded or self.delay_ns == 0:
            return count, 0
        return 0, oldest + self.delay_ns

    def _pop(self, count: int) -> list[Pending]:
        batch: list[Pending] = []
        for lvl in self._levels:
            for dq in (lvl.queue, lvl.delayed):
                while dq and len(batch) < count:
                    batch.append(dq.popleft())
            if len(batch) == count:
                break
        self._count -= len(batch)
        return batch

    def _expire(self, now: int) -> None:
        """Apply queue timeouts: REJECT fails the request, DELAY moves it behind the others."""
        next_deadline = 0
        for lvl in self._levels:
            keep: deque[Pending] = deque()
            for pending in lvl.queue:
                deadline = pending.deadline_ns
                if deadline and deadline <= now:
                    pending.deadline_ns = 0
                    if lvl.delay_action:
                        lvl.delayed.append(pending)
                    else:
                        self._count -= 1
                        self._reject(
                            pending,
                            TritonXError("Request timeout expired", Code.UNAVAILABLE),
                            REJECTED,
                        )
                    continue
                if deadline and (not next_deadline or deadline < next_deadline):
                    next_deadline = deadline
                keep.append(pending)
            lvl.queue = keep
        self._next_deadline = next_deadline

    def _time_out(self) -> None:
        """Apply queue timeouts while no instance asks for a batch (every instance busy):
        Triton's batcher rejects expired requests while it waits for a free slot."""
        with self._cond:
            while not self._stopped:
                now = time.perf_counter_ns()
                deadline = self._next_deadline
                if deadline and now >= deadline:
                    self._expire(now)
                    continue
                self._timer_cond.wait((deadline - now) / 1e9 if deadline else None)

    def _drop_cancelled(self) -> None:
        """Fail every queued cancelled request with CANCELLED (Triton's queues do it while
        they look for the next batch)."""
        dropped = 0
        for lvl in self._levels:
            for name in ("queue", "delayed"):
                dq: deque[Pending] = getattr(lvl, name)
                if not any(p.request.cancelled for p in dq):
                    continue
                keep: deque[Pending] = deque()
                for pending in dq:
                    if pending.request.cancelled:
                        dropped += 1
                        self._reject(pending, cancelled_error(), CANCELED)
                    else:
                        keep.append(pending)
                setattr(lvl, name, keep)
        self._count -= dropped

    # ------------------------------------------------------------------ stop

    def stop(self, workers: int) -> list[Pending]:
        """Stop handing out batches; returns the requests still queued."""
        with self._cond:
            self._stopped = True
            left = list(self._ordered())
            for lvl in self._levels:
                lvl.queue.clear()
                lvl.delayed.clear()
            self._count = 0
            self._cond.notify_all()
            self._timer_cond.notify_all()
        return left
