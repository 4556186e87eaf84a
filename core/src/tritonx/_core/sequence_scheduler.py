"""The sequence scheduler: the instance scheduler of a model with ``sequence_batching``, fed
by a sequence batcher of the config's strategy (direct: :class:`~tritonx._core.
sequence_batcher.SequenceBatcher`; oldest: :class:`OldestSequenceBatcher`, its slots' next
requests batched by a dynamic batcher per instance). See :mod:`tritonx._core.sequence_batcher`
for the slots, the backlog and the fillers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial
from typing import Any

from tritonx._core.batcher import DynamicBatcher, Pending, Reject
from tritonx._core.instances import InstanceScheduler
from tritonx._core.sequence import sequence_settings
from tritonx._core.sequence_batcher import RELEASE, SequenceBatcher, Slot
from tritonx.backend import LoadContext
from tritonx.config import ModelConfig
from tritonx.proto import model_config_pb2
from tritonx.types import SEQUENCE_END, InferenceRequest, InferenceResponse


class OldestSequenceBatcher(SequenceBatcher):
    """The oldest strategy: ``max_candidate_sequences`` slots per instance, whose next
    requests an instance's own dynamic batcher batches together."""

    def _strategy(self, config: ModelConfig, active: Sequence[bool], reject: Reject) -> None:
        """One dynamic batcher per instance, with the strategy's preferred sizes, delay and
        ordering (they hold batches: no slot utilization, no test knobs, as Triton's)."""
        oldest = config.raw.sequence_batching.oldest
        dynamic = model_config_pb2.ModelDynamicBatching(
            preferred_batch_size=list(oldest.preferred_batch_size),
            max_queue_delay_microseconds=oldest.max_queue_delay_microseconds,
            preserve_ordering=oldest.preserve_ordering,
        )
        self._batchers = [
            DynamicBatcher(config, reject, dynamic, drop_cancelled=False) if on else None
            for on in active
        ]
        self._delay_ns = 0
        self._utilization = 0.0
        self._hold = self._backlog_hold = 0

    def _slot_count(self, config: ModelConfig) -> int:
        candidates = int(config.raw.sequence_batching.oldest.max_candidate_sequences)
        return candidates if candidates > 0 else max(1, config.max_batch_size)

    @property
    def pending_count(self) -> int:
        return (
            self._queued
            + self._backlogged
            + sum(b.pending_count for b in self._batchers if b is not None)
        )

    def _enqueue(self, slot: Slot, pending: Pending) -> None:
        slot.queue.append(pending)
        self._queued += 1
        if not slot.in_flight:
            self._issue(slot)

    def _wake(self, slot: Slot) -> None:
        if not slot.in_flight:
            self._issue(slot)

    def _issue(self, slot: Slot) -> None:
        """Send the slot's next request to its instance's dynamic batcher, unless one is in
        flight (Triton's ``CompleteAndNext``)."""
        batcher = self._batchers[slot.instance]
        assert batcher is not None
        while slot.queue and not slot.in_flight and not self._stopped:
            pending = slot.queue[0]
            if pending is not RELEASE and pending.request.cancelled:
                # Triton: a cancelled request cancels its sequence (the slot is released)
                dropped = self._cancel_locked(pending.request)
                if dropped:
                    self._reject_cancelled(dropped)
                    continue
            slot.queue.popleft()
            if pending is RELEASE:
                self._release(slot)
                continue
            self._queued -= 1
            self._inject(pending)
            slot.in_flight = True
            if pending.request.flags & SEQUENCE_END:
                self._release(slot)
            batcher.put(pending)

    def get(self, instance: int) -> list[Pending] | None:
        batcher = self._batchers[instance]
        assert batcher is not None
        return batcher.get(instance)

    def completed(
        self, batch: Sequence[Pending], responses: Sequence[InferenceResponse] | None
    ) -> None:
        super().completed(batch, responses)
        with self._lock:
            for pending in batch:
                slot = pending.sequence.slot
                slot.in_flight = False
                self._issue(slot)

    def stop(self, workers: int) -> list[Pending]:
        left = super().stop(workers)
        for batcher in self._batchers:
            if batcher is not None:
                left.extend(batcher.stop(1))
        return left


def sequence_batcher(
    config: ModelConfig, contexts: Sequence[LoadContext], passive: Sequence[bool]
) -> Callable[[Reject], SequenceBatcher]:
    """The batcher of a model with ``sequence_batching`` for a
    :class:`SequenceScheduler`: a :class:`SequenceBatcher` (direct) or an
    :class:`OldestSequenceBatcher` (oldest), over the controls and states its config
    declares (parsed here, once: INVALID_ARG for a bad ``state``)."""
    raw = config.raw
    settings = sequence_settings(raw, contexts[0].model_dir if contexts else None)
    active = [not p for p in passive]
    kind = OldestSequenceBatcher if raw.sequence_batching.HasField("oldest") else SequenceBatcher
    return lambda reject: kind(config, settings, active, reject)


class SequenceScheduler(InstanceScheduler):
    """The instance threads of a model with ``sequence_batching``, fed by the batcher
    :func:`sequence_batcher` makes.

    Batches complete through the instance scheduler's one completion path: a batch runs
    whole (its rows are slots; cancelled requests end their sequences in the batcher), the
    sequences keep their state outputs before the responses are answered, and fillers
    (``deliver`` None) count in the execution's batch size only. A request cancelled by its
    client (a cancelled future, a stream left) ends its sequence if it is still queued.
    """

    drops_cancelled = False
    updates_instances = False

    batcher: SequenceBatcher

    @property
    def in_use(self) -> bool:
        return self._inflight.count > 0 or self.batcher.live_sequences > 0

    # ------------------------------------------------------------------ requests

    def submit(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        future = super().submit(request)
        future.add_done_callback(partial(self._on_done, request))
        return future

    def _on_done(self, request: InferenceRequest, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            self.batcher.cancel(request)

    async def stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        try:
            async for response in super().stream(request):
                yield response
        except asyncio.CancelledError:
            self.batcher.cancel(request)
            raise
