"""Custom metrics of python models (``pb_utils.MetricFamily``) on the server's ``/metrics``.

One :class:`CustomMetrics` holds them per data plane registry; each family is registered in
that registry as a collector of its own that declares its name, so a lookup by name
(``registry.restricted_registry([name])``, the HTTP frontend's ORCA load report) reads that
family only. Families are shared by name across models and instances (as in Triton, where
creating a family that exists returns it), and metrics by their label set. Workers send their updates as messages; in-process
models call the collector directly.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from tritonx.errors import TritonXError, invalid_arg

COUNTER, GAUGE, HISTOGRAM = 0, 1, 2
_TYPES = {COUNTER: "counter", GAUGE: "gauge", HISTOGRAM: "histogram"}

Labels = tuple[tuple[str, str], ...]


@dataclass
class _Value:
    value: float = 0.0
    buckets: tuple[float, ...] = ()
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0


@dataclass
class _Family:
    name: str
    description: str
    kind: int
    metrics: dict[Labels, _Value] = field(default_factory=dict)


class _FamilyCollector:
    """One family as a registry collector, declared by name (``describe``)."""

    def __init__(self, owner: CustomMetrics, family: _Family) -> None:
        self._owner = owner
        self._family = family

    def describe(self) -> list[Metric]:
        family = self._family
        return [Metric(family.name, family.description, _TYPES[family.kind])]

    def collect(self) -> Iterator[Metric]:
        return self._owner.collect(self._family.name)


class CustomMetrics:
    """Every python model's custom metric families.

    :param registry: where each family is registered when it is created (``None``: nowhere;
        :meth:`collect` still reads them).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self._registry = registry

    def family(self, name: str, description: str, kind: int) -> None:
        """Create the family ``name`` (or reuse it when kind and description agree)."""
        with self._lock:
            existing = self._families.get(name)
            if existing is None:
                family = _Family(name, description, kind)
                if self._registry is not None:
                    try:
                        self._registry.register(_FamilyCollector(self, family))
                    except ValueError:  # another collector of the server reports that name
                        raise invalid_arg(
                            f"Family name '{name}' already exists in the server's metrics"
                        ) from None
                self._families[name] = family
            elif existing.kind != kind:  # prometheus-cpp's registry's text, as Triton's
                raise invalid_arg("Family name already exists with different type")

    def op(self, name: str, labels: Labels, op: str, value: Any) -> float | None:
        """Apply ``create``/``increment``/``set``/``observe``/``value`` to one metric."""
        with self._lock:
            family = self._families.get(name)
            if family is None:
                raise TritonXError(f"metric family '{name}' does not exist")
            metric = family.metrics.get(labels)
            if metric is None:
                metric = family.metrics[labels] = _Value()
            if op == "create":
                if family.kind == HISTOGRAM and value is not None and not metric.buckets:
                    metric.buckets = tuple(sorted(float(b) for b in value))
                    metric.counts = [0] * (len(metric.buckets) + 1)
                return None
            if op == "increment":
                metric.value += float(value)
            elif op == "set":
                metric.value = float(value)
            elif op == "observe":
                v = float(value)
                metric.total += v
                metric.count += 1
                for i, bound in enumerate(metric.buckets):
                    if v <= bound:
                        metric.counts[i] += 1
                        break
                else:
                    metric.counts[-1] += 1
            elif op == "value":
                return metric.value
            else:
                raise TritonXError(f"Unknown metric request kind '{op}'")
            return None

    def collect(self, name: str | None = None) -> Iterator[Metric]:
        """The families (or the one named ``name``) in Prometheus form (Triton's sample
        names: no ``_total`` suffix)."""
        with self._lock:
            chosen = (
                self._families.values()
                if name is None
                else [f for f in (self._families.get(name),) if f is not None]
            )
            families = [
                (f.name, f.description, f.kind, [(dict(k), _copy(v)) for k, v in f.metrics.items()])
                for f in chosen
            ]
        for name, description, kind, metrics in families:
            metric = Metric(name, description, _TYPES[kind])
            for labels, value in metrics:
                if kind != HISTOGRAM:
                    metric.add_sample(name, labels, value.value)
                    continue
                # prometheus-cpp's order (Triton's /metrics): _count, _sum, the buckets
                metric.add_sample(f"{name}_count", labels, value.count)
                metric.add_sample(f"{name}_sum", labels, value.total)
                cumulative = 0
                for bound, count in zip((*value.buckets, math.inf), value.counts, strict=True):
                    cumulative += count
                    le = "+Inf" if math.isinf(bound) else _fmt(bound)
                    metric.add_sample(f"{name}_bucket", {**labels, "le": le}, cumulative)
            yield metric


def _copy(v: _Value) -> _Value:
    return _Value(v.value, v.buckets, list(v.counts), v.total, v.count)


def _fmt(bound: float) -> str:
    return str(int(bound)) if bound == int(bound) else repr(bound)


_collectors: weakref.WeakKeyDictionary[CollectorRegistry, CustomMetrics] = (
    weakref.WeakKeyDictionary()
)
_collectors_lock = threading.Lock()


def collector_for(registry: CollectorRegistry | None) -> CustomMetrics:
    """The custom metrics of ``registry`` (created on first use)."""
    if registry is None:
        return CustomMetrics()
    with _collectors_lock:
        collector = _collectors.get(registry)
        if collector is None:
            collector = _collectors[registry] = CustomMetrics(registry)
        return collector


def labels_of(labels: Sequence[Sequence[str]]) -> Labels:
    """Normalise a label list from a message."""
    return tuple((str(k), str(v)) for k, v in labels)
