"""Per model-version statistics (Triton's statistics extension), updated on the event loop."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

_now = time.monotonic_ns


@dataclass(slots=True)
class Duration:
    """A count and a total time in nanoseconds (Triton's ``StatisticDuration``)."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


@dataclass(slots=True)
class BatchStats:
    """Compute times of executions of one batch size."""

    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class ModelStats:
    """What ``/v2/models/<m>/stats`` reports for one version."""

    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    batch_stats: dict[int, BatchStats] = field(default_factory=dict)
    #: failures by ``nv_inference_request_failure`` reason (REJECTED, CANCELED, BACKEND, OTHER)
    fail_reasons: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("REJECTED", "CANCELED", "BACKEND", "OTHER"), 0)
    )

    #: summaries / histograms when ``--metrics-config`` asks for them
    latency: LatencyStats | None = None

    def record_success(self, ns: int) -> None:
        """A successful request that took ``ns`` from arrival to response."""
        self.success.add(ns)
        lat = self.latency
        if lat is not None:
            now = _now()
            if lat.request is not None:
                lat.request.observe(ns / 1000, now)
            if lat.first_response is not None:
                lat.first_response.observe(ns / 1e6)

    def record_request_execution(
        self, queue_ns: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """One request's queue time and the compute phases of the execution it was in
        (every request of a batch gets the batch's phases, as in Triton; a backend that does
        not mark its phases has 0 input and output time, counted all the same: perf_analyzer
        requires the three counts to be equal)."""
        self.queue.add(queue_ns)
        self.compute_input.add(input_ns)
        self.compute_infer.add(infer_ns)
        self.compute_output.add(output_ns)
        lat = self.latency
        if lat is not None:
            now = _now()
            for window, value in (
                (lat.queue, queue_ns),
                (lat.compute_input, input_ns),
                (lat.compute_infer, infer_ns),
                (lat.compute_output, output_ns),
            ):
                if window is not None:
                    window.observe(value / 1000, now)

    def record_failure(self, reason: str, ns: int) -> None:
        """A failed request (``reason`` is one of Triton's four failure reasons)."""
        self.fail.add(ns)
        self.fail_reasons[reason] = self.fail_reasons.get(reason, 0) + 1

    def record_execution(
        self,
        batch_size: int,
        input_ns: int,
        infer_ns: int,
        output_ns: int,
        inferences: int | None = None,
    ) -> None:
        """One backend execution of ``batch_size`` items, ``inferences`` of them (default:
        all) for clients (a sequence batch's fillers are not inferences)."""
        self.execution_count += 1
        self.inference_count += batch_size if inferences is None else inferences
        stats = self.batch_stats.get(batch_size)
        if stats is None:
            stats = self.batch_stats[batch_size] = BatchStats()
        stats.compute_input.add(input_ns)
        stats.compute_infer.add(infer_ns)
        stats.compute_output.add(output_ns)


class LatencyWindow:
    """Observations of the last ``max_age_s`` seconds, for Prometheus summaries."""

    __slots__ = ("_items", "count", "max_age_ns", "total")

    def __init__(self, max_age_s: float = 60.0) -> None:
        from collections import deque

        self._items: deque[tuple[int, float]] = deque()
        self.max_age_ns = int(max_age_s * 1e9)
        self.count = 0
        self.total = 0.0

    def observe(self, value: float, now_ns: int) -> None:
        self._items.append((now_ns, value))
        self.count += 1
        self.total += value

    def quantiles(self, qs: tuple[float, ...], now_ns: int) -> list[tuple[float, float]]:
        items = self._items
        while items and now_ns - items[0][0] > self.max_age_ns:
            items.popleft()
        values = sorted(v for _, v in items)
        if not values:
            return [(q, float("nan")) for q in qs]
        return [(q, values[min(len(values) - 1, int(q * len(values)))]) for q in qs]


class Histogram:
    """Cumulative bucket counts (Prometheus histogram)."""

    __slots__ = ("buckets", "count", "counts", "total")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.count = 0
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.total += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1


@dataclass(slots=True)
class LatencyStats:
    """Optional per-version latency distributions (``--metrics-config``)."""

    request: LatencyWindow | None = None
    queue: LatencyWindow | None = None
    compute_input: LatencyWindow | None = None
    compute_infer: LatencyWindow | None = None
    compute_output: LatencyWindow | None = None
    first_response: Histogram | None = None
    #: cache hit / miss (lookup + insert) durations, for versions with the response cache
    cache_hit: LatencyWindow | None = None
    cache_miss: LatencyWindow | None = None


@dataclass(frozen=True, slots=True)
class LoadedVersion:
    """A model version with running instances (or whose statistics the residency policy
    kept when it unloaded it), as the metrics endpoint reports it.

    :param name: the model's name.
    :param version: the version.
    :param metric_tags: the config's ``metric_tags`` (extra labels), sorted by key.
    :param stats: its live statistics.
    :param pending_count: requests accepted but not yet executing.
    :param load_seconds: how long its last successful load took.
    :param cached: whether the response cache sits in front of it (``nv_cache_*`` families).
    :param restarts: how many times its instances restarted since it loaded.
    :param resident: False for a version the residency policy unloaded (evicted, idle):
        its counters are reported on, with no gauges.
    :param namespace: with ``--model-namespacing``, the model's namespace (its repository):
        its metrics get Triton's ``namespace`` label.
    """

    name: str
    version: int
    metric_tags: tuple[tuple[str, str], ...]
    stats: ModelStats
    pending_count: int
    load_seconds: float
    cached: bool = False
    restarts: int = 0
    resident: bool = True
    namespace: str = ""
