"""Per model-version statistics (Triton's statistics extension), updated on the event loop."""

from __future__ import annotations

from dataclasses import dataclass, field


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

    def record_execution(
        self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """One backend execution of ``batch_size`` items."""
        self.execution_count += 1
        self.inference_count += batch_size
        stats = self.batch_stats.get(batch_size)
        if stats is None:
            stats = self.batch_stats[batch_size] = BatchStats()
        stats.compute_input.add(input_ns)
        stats.compute_infer.add(infer_ns)
        stats.compute_output.add(output_ns)
