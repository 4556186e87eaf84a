"""The sequence batcher: Triton's scheduler for stateful models (core
``sequence_batch_scheduler.cc``), behind the same instance threads as the other schedulers.

Every request carries a correlation ID; the first of a sequence has the START flag, the last
the END flag. A sequence gets a *slot* of one instance and keeps it until its END request runs
or it stays idle longer than ``max_sequence_idle_microseconds``; sequences that find every
slot taken wait in a FIFO backlog. The core adds the control tensors (START, END, READY,
CORRID) and the implicit state (``state``) to each request as ordinary inputs, and keeps the
state outputs a model returns for the sequence's next request.

* **direct** (default): each instance has ``max(1, max_batch_size)`` slots; a batch covers
  slots 0 to the highest slot with a request, one request per slot, and fills idle slots
  below that with *filler* requests (zeros, READY false; :mod:`tritonx._core.sequence_fillers`)
  so every sequence keeps its row.
  ``minimum_slot_utilization`` with ``max_queue_delay_microseconds`` holds a batch until that
  fraction of slots is ready or the oldest request waited that long.
* **oldest**: each instance has ``max_candidate_sequences`` slots and a dynamic batcher over
  the next request of each (one request per sequence in flight, so a batch never holds two
  requests of one sequence), with the strategy's preferred sizes, delay and ordering
  (:class:`~tritonx._core.sequence_scheduler.OldestSequenceBatcher`, beside the
  :class:`~tritonx._core.sequence_scheduler.SequenceScheduler` that runs both).

Idle sequences are released by a reaper thread (later requests without START then fail with
Triton's START message); cancelling a queued request (client cancel or disconnect) ends its
sequence: its queued requests fail CANCELLED and the slot is released.
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tritonx._core.batcher import CANCELED, REJECTED, Pending, cancelled_error
from tritonx._core.sequence import SequenceSettings
from tritonx._core.sequence_fillers import Fillers
from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.types import (
    REQUEST_RELEASE_RESCHEDULE,
    SEQUENCE_END,
    SEQUENCE_START,
    InferenceRequest,
    InferenceResponse,
)

log = logging.getLogger("tritonx.scheduler.sequence")

#: Queued after a sequence's requests to release its slot once they ran (idle timeout,
#: cancellation): Triton's "null request".
RELEASE: Any = object()

#: How often an idle sequence still waiting in the backlog is looked at again (Triton's).
BACKLOG_IDLE_RECHECK_NS = 50_000_000

Reject = Callable[..., None]


class _Sequence:
    """One sequence: its correlation ID, its slot (once it has one) and its state."""

    __slots__ = ("corrid", "corrid_array", "ending", "slot", "state")

    def __init__(self, corrid: int | str, corrid_array: np.ndarray | None) -> None:
        self.corrid = corrid
        self.corrid_array = corrid_array
        self.slot: Slot | None = None
        #: a release marker is queued after its requests (idle timeout, cancellation)
        self.ending = False
        #: implicit state by state input name (None until the first request runs)
        self.state: dict[str, np.ndarray] | None = None


class Slot:
    """One batch slot of one instance and the queue of the sequence that holds it."""

    __slots__ = ("in_flight", "index", "instance", "queue", "sequence")

    def __init__(self, instance: int, index: int) -> None:
        self.instance = instance
        self.index = index
        self.queue: deque[Any] = deque()
        self.sequence: _Sequence | None = None
        #: oldest strategy: a request of this slot is in the dynamic batcher or executing
        self.in_flight = False


class _Backlog:
    """A sequence waiting for a slot, with its requests so far."""

    __slots__ = ("expires_ns", "queue", "sequence")

    def __init__(self, sequence: _Sequence) -> None:
        self.sequence = sequence
        self.queue: deque[Pending] = deque()
        self.expires_ns = 0


class SequenceBatcher:
    """The direct strategy (and what the oldest strategy shares with it).

    :param settings: the model's controls and states
        (:func:`tritonx._core.sequence.sequence_settings`).
    :param active: for each instance, whether it takes requests (False: passive).
    :param reject: fails a request that never ran: ``reject(pending, error, reason)``.
    """

    def __init__(
        self,
        config: ModelConfig,
        settings: SequenceSettings,
        active: Sequence[bool],
        reject: Reject,
    ) -> None:
        sb = config.raw.sequence_batching
        self.model = config.name
        self.settings = settings
        self._reject = reject
        #: ``iterative_sequence``: one request is a whole sequence, which its executions
        #: reschedule (:meth:`reschedule`) until one releases it
        self.iterative = bool(sb.iterative_sequence)
        #: the correlation IDs iterative sequences get when their request has none
        self._next_corrid = 1
        self._idle_ns = int(sb.max_sequence_idle_microseconds) * 1000
        self._max_batch = max(1, config.max_batch_size)
        # direct batches must not mix shapes of inputs with variable dimensions (Triton's
        # enforce_equal_shape_tensors): rows of other shapes wait for a later batch
        self._check_shapes = any(
            -1 in t.dims and not t.allow_ragged_batch for t in config.inputs
        ) or any(t.optional for t in config.inputs)
        self._lock = threading.Lock()
        self._cvs = [threading.Condition(self._lock) for _ in active]
        self._reaper_cv = threading.Condition(self._lock)
        count = self._slot_count(config)
        self._slots: list[list[Slot]] = [
            [Slot(i, s) for s in range(count)] if on else [] for i, on in enumerate(active)
        ]
        # free slots, lowest slot number first so every instance's batches stay small
        self._free: list[tuple[int, int]] = [
            (s, i) for i, on in enumerate(active) if on for s in range(count)
        ]
        heapq.heapify(self._free)
        self._active: dict[int | str, _Sequence] = {}
        self._backlog: deque[_Backlog] = deque()
        self._backlog_map: dict[int | str, _Backlog] = {}
        self._last_seen: dict[int | str, int] = {}
        self._next_idle = 0
        self._next_expiry = 0
        self._queued = 0  # requests in slot queues
        self._backlogged = 0  # requests in the backlog
        self._stopped = False
        #: the filler requests of direct batches
        self._fillers = Fillers(self.model, settings, config.decoupled)
        self._strategy(config, active, reject)
        self._reaper = threading.Thread(
            target=self._reap_loop, name=f"tritonx-{self.model}-sequence-reaper", daemon=True
        )
        self._reaper.start()

    def _slot_count(self, config: ModelConfig) -> int:
        return self._max_batch

    def _strategy(self, config: ModelConfig, active: Sequence[bool], reject: Reject) -> None:
        """The strategy's own settings, before the reaper starts (direct: the slot
        utilization a batch waits for, and Triton's test knobs)."""
        direct = config.raw.sequence_batching.direct
        self._delay_ns = int(direct.max_queue_delay_microseconds) * 1000
        self._utilization = float(direct.minimum_slot_utilization)
        # Triton's test knobs: hold batches until this many requests are queued in slots
        # (and this many in the backlog)
        self._hold = int(os.environ.get("TRITONSERVER_DELAY_SCHEDULER", "0") or 0)
        self._backlog_hold = int(os.environ.get("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", "0") or 0)

    @property
    def pending_count(self) -> int:
        return self._queued + self._backlogged

    @property
    def live_sequences(self) -> int:
        """Sequences started and not ended (holding a slot, or waiting for one)."""
        return len(self._active) + len(self._backlog)

    @property
    def immediate(self) -> bool:
        return False  # a sequence's requests go to its slot's instance

    def split(self, pendings: list[Pending]) -> list[list[Pending]]:
        raise NotImplementedError("sequence batches are formed per slot")

    # ------------------------------------------------------------------ enqueue (event loop)

    def put(self, pending: Pending) -> None:
        """Route a request to its sequence's slot or backlog; raises INVALID_ARG with
        Triton's messages for requests the sequence batcher cannot take."""
        request = pending.request
        cid = request.correlation_id
        if not cid and self.iterative:  # Triton's IterativeSequencer: a sequence of its own
            cid = request.correlation_id = self._next_corrid
            self._next_corrid += 1
            request.flags = SEQUENCE_START
        self.settings.check_correlation_id(request.id, cid)
        if request.batch_size > 1:
            raise invalid_arg(
                f"inference request to model '{self.model}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        if not cid:
            raise invalid_arg(
                f"inference request to model '{self.model}' must specify a non-zero or "
                "non-empty correlation ID"
            )
        flags = request.flags
        start, end = flags & SEQUENCE_START, flags & SEQUENCE_END
        with self._lock:
            if self._stopped:
                raise TritonXError("Server exiting", Code.UNAVAILABLE)
            sequence = self._active.get(cid)
            backlog = self._backlog_map.get(cid) if sequence is None else None
            if not start and sequence is None and backlog is None:
                raise invalid_arg(
                    f"inference request for sequence {cid} to model '{self.model}' must "
                    "specify the START flag on the first request of the sequence"
                )
            now = time.perf_counter_ns()
            if end:
                self._last_seen.pop(cid, None)
            else:
                self._seen(cid, now)
            if start and (sequence is not None or backlog is not None):
                log.warning(
                    "sequence %s for model '%s' has a conflict. The previous sequence did not "
                    "end before this sequence start. Previous sequence will be terminated early.",
                    cid,
                    self.model,
                )
            if sequence is not None:
                assert sequence.slot is not None
                pending.sequence = sequence
                if end:
                    del self._active[cid]
                self._enqueue(sequence.slot, pending)
                return
            if backlog is not None:
                pending.sequence = backlog.sequence
                self._to_backlog(backlog, pending, now)
                if end:
                    del self._backlog_map[cid]
                return
            sequence = _Sequence(
                cid, self.settings.corrid_array(cid) if self.settings.corrid_name else None
            )
            pending.sequence = sequence
            if self._free:
                index, instance = heapq.heappop(self._free)
                slot = self._slots[instance][index]
                slot.sequence, sequence.slot = sequence, slot
                if not end:
                    self._active[cid] = sequence
                self._enqueue(slot, pending)
                return
            backlog = _Backlog(sequence)
            self._backlog.append(backlog)
            self._to_backlog(backlog, pending, now)
            if not end:
                self._backlog_map[cid] = backlog

    def _seen(self, cid: int | str, now: int) -> None:
        """A request of sequence ``cid`` came (or came back) at ``now``: its idle time starts
        again, and the reaper wakes for it if it sleeps without a deadline (lock held)."""
        self._last_seen[cid] = now
        if not self._next_idle:
            self._next_idle = now + self._idle_ns
            self._reaper_cv.notify()

    def _to_backlog(self, backlog: _Backlog, pending: Pending, now: int) -> None:
        backlog.queue.append(pending)
        self._backlogged += 1
        timeout = pending.request.timeout_us
        if timeout:
            expires = now + timeout * 1000
            if not backlog.expires_ns or expires < backlog.expires_ns:
                backlog.expires_ns = expires
            if not self._next_expiry or expires < self._next_expiry:
                self._next_expiry = expires
                self._reaper_cv.notify()
        if self._hold:
            self._notify_all()

    def _enqueue(self, slot: Slot, pending: Pending) -> None:
        slot.queue.append(pending)
        self._queued += 1
        if self._hold:
            self._notify_all()
        else:
            self._cvs[slot.instance].notify()

    def _notify_all(self) -> None:
        for cv in self._cvs:
            cv.notify_all()

    # ------------------------------------------------------------------ batches (instances)

    def get(self, instance: int) -> list[Pending] | None:
        """Block until this instance has a batch; None once stopped."""
        cv = self._cvs[instance]
        slots = self._slots[instance]
        with self._lock:
            while True:
                if self._stopped:
                    return None
                if self._hold:
                    if self._queued < self._hold or self._backlogged < self._backlog_hold:
                        cv.wait()
                        continue
                    self._hold = self._backlog_hold = 0
                    self._notify_all()
                representative: Pending | None = None
                ready = 0
                earliest = 0
                top = -1
                for slot in slots:
                    queue = slot.queue
                    while queue:
                        head = queue[0]
                        if head is RELEASE:
                            queue.popleft()
                            self._release(slot)
                        elif head.request.cancelled and (
                            dropped := self._cancel_locked(head.request)
                        ):  # Triton: a cancelled request cancels its sequence
                            self._reject_cancelled(dropped)
                        else:
                            break
                        queue = slot.queue
                    if queue:
                        head = queue[0]
                        if representative is None:
                            representative = head
                        ready += 1
                        if not earliest or head.enqueue_ns < earliest:
                            earliest = head.enqueue_ns
                        top = slot.index
                if representative is None:
                    cv.wait()
                    continue
                if self._delay_ns and self._utilization:
                    waited = time.perf_counter_ns() - earliest
                    if waited <= self._delay_ns and ready / self._max_batch < self._utilization:
                        cv.wait((self._delay_ns - waited) / 1e9)
                        continue
                return self._form(slots, top, representative)

    def _signature(self, pending: Pending) -> tuple[Any, ...]:
        return tuple((n, a.shape) for n, a in pending.request.inputs.items())

    def _form(self, slots: list[Slot], top: int, representative: Pending) -> list[Pending]:
        """Take one request per slot 0..top (fillers where a slot has none)."""
        check = self._check_shapes
        signature = self._signature(representative) if check else None
        batch: list[Pending | None] = []
        fillers = 0
        for slot in slots[: top + 1]:
            queue = slot.queue
            if not queue or (check and self._signature(queue[0]) != signature):
                batch.append(None)
                fillers += 1
                continue
            pending = queue.popleft()
            self._queued -= 1
            self._inject(pending)
            if pending.request.flags & SEQUENCE_END:
                self._release(slot)
            batch.append(pending)
        if not fillers:
            return batch  # type: ignore[return-value]
        return [p if p is not None else self._fillers.make(representative) for p in batch]

    def _inject(self, pending: Pending) -> None:
        """Add the control tensors and the input state to a request about to run."""
        request = pending.request
        sequence: _Sequence = pending.sequence
        settings = self.settings
        flags = request.flags
        if flags & SEQUENCE_START:
            controls = settings.startend if flags & SEQUENCE_END else settings.start
            sequence.state = None
        elif flags & SEQUENCE_END:
            controls = settings.end
        else:
            controls = settings.cont
        inputs = request.inputs
        inputs.update(controls)
        if sequence.corrid_array is not None:
            inputs[settings.corrid_name] = sequence.corrid_array
        if settings.states:
            state = sequence.state
            if state is None:
                state = sequence.state = {s.input_name: s.initial for s in settings.states}
            inputs.update(state)

    def completed(
        self, batch: Sequence[Pending], responses: Sequence[InferenceResponse] | None
    ) -> None:
        """After an execution (on the instance's thread, before rescheduled rows come back
        through :meth:`reschedule`): keep the state outputs; in iterative sequences, end the
        sequences whose request the execution released."""
        states = self.settings.states
        if states and responses is not None:
            for pending, response in zip(batch, responses, strict=True):
                if pending.deliver is None or response.error is not None:
                    continue
                state = pending.sequence.state
                outputs = response.outputs
                for spec in states:
                    value = outputs.get(spec.output_name)
                    if value is not None:
                        state[spec.input_name] = value
        if self.iterative:
            self._end_released(batch)

    def _end_released(self, batch: Sequence[Pending]) -> None:
        """Iterative sequences: a request released without ``RESCHEDULE`` ends its sequence
        (its slot is freed once its queue ran), as Triton's ``IterativeSequencer`` ends it
        with a cancelled END request."""
        with self._lock:
            for pending in batch:
                request = pending.request
                if (
                    pending.deliver is None
                    or request.release_flags & REQUEST_RELEASE_RESCHEDULE
                    or request.flags & SEQUENCE_END  # its slot was released when it was taken
                ):
                    continue
                sequence: _Sequence = pending.sequence
                cid = sequence.corrid
                if self._active.get(cid) is sequence:
                    del self._active[cid]
                    self._last_seen.pop(cid, None)
                self._end(sequence)

    def reschedule(self, pending: Pending) -> None:
        """Queue a request its execution released with ``RESCHEDULE`` again, in its
        sequence's slot, as neither the start nor the end of it (Triton's
        ``IterativeSequencer::RescheduleRequest``); it fails when its sequence ended
        meanwhile (idle timeout, cancellation, an END request) or the batcher stopped."""
        request = pending.request
        request.flags = 0
        sequence: _Sequence = pending.sequence
        with self._lock:
            slot = sequence.slot
            if self._stopped:
                error = TritonXError("Server exiting", Code.UNAVAILABLE)
            elif slot is None or slot.sequence is not sequence or sequence.ending:
                error = invalid_arg(
                    f"inference request for sequence {sequence.corrid} to model "
                    f"'{self.model}' must specify the START flag on the first request of the "
                    "sequence"
                )
            else:
                now = time.perf_counter_ns()
                pending.requeued_ns = now
                self._seen(sequence.corrid, now)
                self._enqueue(slot, pending)
                return
        self._reject(pending, error, REJECTED)

    # ------------------------------------------------------------------ slots (lock held)

    def _release(self, slot: Slot) -> None:
        """Give the slot to the oldest backlogged sequence, or mark it free (Triton's
        ``ReleaseSequenceSlot``)."""
        if slot.queue:
            log.error("internal: unexpected requests after sequence end in slot %d", slot.index)
        slot.sequence = None
        if self._stopped:
            return
        while self._backlog:
            backlog = self._backlog.popleft()
            sequence = backlog.sequence
            cid = sequence.corrid
            if any(p.request.cancelled for p in backlog.queue):
                # Triton: a backlogged sequence with a cancelled request is cancelled whole
                if self._backlog_map.get(cid) is backlog:
                    del self._backlog_map[cid]
                    self._last_seen.pop(cid, None)
                self._backlogged -= len(backlog.queue)
                self._reject_cancelled(list(backlog.queue))
                continue
            if not backlog.queue[-1].request.flags & SEQUENCE_END:
                if self._backlog_map.get(cid) is backlog:
                    del self._backlog_map[cid]
                self._active[cid] = sequence
            slot.sequence, sequence.slot = sequence, slot
            count = len(backlog.queue)
            self._backlogged -= count
            self._queued += count
            slot.queue.extend(backlog.queue)
            return
        heapq.heappush(self._free, (slot.index, slot.instance))

    def _end(self, sequence: _Sequence) -> None:
        """Release the sequence's slot once its queued requests ran."""
        slot = sequence.slot
        if slot is None or slot.sequence is not sequence or sequence.ending:
            return
        sequence.ending = True
        slot.queue.append(RELEASE)
        self._wake(slot)

    def _wake(self, slot: Slot) -> None:
        self._cvs[slot.instance].notify()

    def cancel(self, request: InferenceRequest) -> None:
        """A request was cancelled (its client went away): if it is still queued, end its
        sequence, failing its queued requests with CANCELLED (from the event loop)."""
        with self._lock:
            cancelled = self._cancel_locked(request)
        self._reject_cancelled(cancelled)

    def _reject_cancelled(self, cancelled: list[Pending]) -> None:
        for pending in cancelled:
            self._reject(pending, cancelled_error(), CANCELED)

    def _cancel_locked(self, request: InferenceRequest) -> list[Pending]:
        """End the sequence of ``request`` if it is still queued: returns it and the requests
        queued after it (the caller fails them); the slot is released once those queued
        before it ran. Nothing when it runs or ran already."""
        cid = request.correlation_id
        cancelled: list[Pending] = []
        if self._stopped:
            return cancelled
        sequence = self._active.get(cid)
        backlog = self._backlog_map.get(cid) if sequence is None else None
        if backlog is None:
            backlog = next((b for b in self._backlog if _holds(b.queue, request)), None)
        if backlog is not None:
            self._backlog.remove(backlog)
            if self._backlog_map.get(cid) is backlog:
                del self._backlog_map[cid]
            self._last_seen.pop(cid, None)
            self._backlogged -= len(backlog.queue)
            cancelled = list(backlog.queue)
        else:
            slot = sequence.slot if sequence is not None else None
            if slot is None or slot.sequence is None or not _holds(slot.queue, request):
                slot = next(
                    (
                        s
                        for slots in self._slots
                        for s in slots
                        if s.sequence is not None and _holds(s.queue, request)
                    ),
                    None,
                )
            if slot is None:
                return cancelled  # running or done already
            owner = slot.sequence
            assert owner is not None
            if self._active.get(owner.corrid) is owner:
                del self._active[owner.corrid]
                self._last_seen.pop(owner.corrid, None)
            queue = slot.queue
            keep: deque[Any] = deque()
            while queue:
                item = queue.popleft()
                if item is not RELEASE and (cancelled or item.request is request):
                    cancelled.append(item)
                else:
                    keep.append(item)
            slot.queue = keep
            self._queued -= len(cancelled)
            self._end(owner)
        return cancelled

    # ------------------------------------------------------------------ reaper thread

    def _reap_loop(self) -> None:
        with self._lock:
            while not self._stopped:
                now = time.perf_counter_ns()
                if self._next_idle and now >= self._next_idle:
                    self._reap_idle(now)
                if self._next_expiry and now >= self._next_expiry:
                    self._expire_backlogs(now)
                deadlines = [d for d in (self._next_idle, self._next_expiry) if d]
                timeout = max(0.0, (min(deadlines) - now) / 1e9) if deadlines else None
                self._reaper_cv.wait(timeout)

    def _reap_idle(self, now: int) -> None:
        """Release the slots of sequences idle for ``max_sequence_idle_microseconds``."""
        next_idle = 0
        for cid, seen in list(self._last_seen.items()):
            deadline = seen + self._idle_ns
            if deadline > now:
                if not next_idle or deadline < next_idle:
                    next_idle = deadline
                continue
            sequence = self._active.get(cid)
            if sequence is not None:
                log.debug("sequence %s of model '%s': max sequence idle exceeded", cid, self.model)
                del self._active[cid]
                del self._last_seen[cid]
                self._end(sequence)
            elif cid in self._backlog_map:  # still waiting for a slot: look again later
                recheck = now + BACKLOG_IDLE_RECHECK_NS
                if not next_idle or recheck < next_idle:
                    next_idle = recheck
            else:
                del self._last_seen[cid]
        self._next_idle = next_idle

    def _expire_backlogs(self, now: int) -> None:
        """Fail the backlogged sequences whose request ``timeout`` passed."""
        next_expiry = 0
        expired: list[_Backlog] = []
        keep: deque[_Backlog] = deque()
        for backlog in self._backlog:
            expires = backlog.expires_ns
            if not expires or expires > now:
                if expires and (not next_expiry or expires < next_expiry):
                    next_expiry = expires
                keep.append(backlog)
                continue
            expired.append(backlog)
            cid = backlog.sequence.corrid
            if self._backlog_map.get(cid) is backlog:
                del self._backlog_map[cid]
            self._backlogged -= len(backlog.queue)
        self._backlog = keep
        self._next_expiry = next_expiry
        error = TritonXError(
            "timeout of the corresponding sequence has been expired", Code.UNAVAILABLE
        )
        for backlog in expired:
            for pending in backlog.queue:
                self._reject(pending, error, REJECTED)

    # ------------------------------------------------------------------ stop

    def stop(self, workers: int) -> list[Pending]:
        """Stop handing out batches; returns the requests still queued."""
        left: list[Pending] = []
        with self._lock:
            self._stopped = True
            for slots in self._slots:
                for slot in slots:
                    left.extend(p for p in slot.queue if p is not RELEASE)
                    slot.queue.clear()
            for backlog in self._backlog:
                left.extend(backlog.queue)
            self._backlog.clear()
            self._backlog_map.clear()
            self._active.clear()
            self._queued = self._backlogged = 0
            self._notify_all()
            self._reaper_cv.notify()
        return left


def _holds(queue: deque[Any], request: InferenceRequest) -> bool:
    return any(item is not RELEASE and item.request is request for item in queue)


__all__ = ["RELEASE", "SequenceBatcher", "Slot"]
