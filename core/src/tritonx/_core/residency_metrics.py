"""tritonx's Prometheus families for ``--model-load-on-demand`` (:class:`ResidencyMetrics`),
read at scrape time from :class:`~tritonx._core.residency.Residency` (Triton has none of
these). Triton's own families are :mod:`tritonx._core.metrics`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

if TYPE_CHECKING:
    from tritonx._core.residency import Residency


class ResidencyMetrics:
    """tritonx's families for ``--model-load-on-demand`` (:mod:`tritonx._core.residency`),
    a collector the server registers in its metrics registry:

    * ``tritonx_model_on_demand_loads_total{model}``: loads a request started, completed;
    * ``tritonx_model_on_demand_load_failures_total{model}``: those that failed;
    * ``tritonx_model_evictions_total{model,reason}``: unloads to stay within a budget
      (``reason="budget"``) or of an idle model (``reason="idle"``);
    * ``tritonx_model_load_waits_total{model}`` and
      ``tritonx_model_load_wait_seconds_total{model}``: requests that waited for their
      model's load, and how long they waited in all;
    * ``tritonx_model_memory_bytes{model}``: what each loaded model added to the server's
      resident memory (workers included) when it loaded;
    * ``tritonx_loaded_models``, ``tritonx_max_loaded_models`` (0: no limit),
      ``tritonx_model_memory_used_bytes`` (with a memory budget: the growth it bounds,
      :mod:`~tritonx._core.memory_accounting`) and
      ``tritonx_model_memory_budget_bytes`` (0: no limit);
    * ``tritonx_model_min_residency_refusals_total{model}``: requests refused because only
      models loaded less than ``--model-min-residency-secs`` ago could make room for their
      model, and ``tritonx_model_min_residency_seconds`` (that setting);
    * ``tritonx_model_repository_scans_total``: reads of every repository (start-up, polls,
      index, load API, on-demand loads, and lookups of unknown names once the last read is
      ``--unknown-model-rescan-secs`` old).

    Triton has none of these: they are tritonx's own.
    """

    def __init__(self, residency: Residency) -> None:
        self.residency = residency

    def collect(self) -> Iterator[Metric]:
        yield from self._per_model()
        yield from self._per_reason_and_memory()
        yield from self._totals()

    def _per_model(self) -> Iterator[Metric]:
        """The counters by model."""
        r = self.residency
        for name, help_text, counts in (
            (
                "tritonx_model_on_demand_loads",
                "Number of model loads started by a request (--model-load-on-demand)",
                r.loads,
            ),
            (
                "tritonx_model_on_demand_load_failures",
                "Number of model loads started by a request that failed",
                r.load_failures,
            ),
            (
                "tritonx_model_load_waits",
                "Number of requests that waited for a model load",
                r.waits,
            ),
            (
                "tritonx_model_load_wait_seconds",
                "Cumulative seconds requests waited for model loads",
                r.wait_seconds,
            ),
            (
                "tritonx_model_min_residency_refusals",
                "Number of requests refused because only models loaded less than "
                "--model-min-residency-secs ago could make room for their model",
                r.min_residency_refusals,
            ),
        ):
            family = CounterMetricFamily(name, help_text, labels=["model"])
            for model in sorted(counts):
                family.add_metric([model], counts[model])
            yield family

    def _per_reason_and_memory(self) -> Iterator[Metric]:
        """The evictions by model and reason, the loaded models' footprints."""
        r = self.residency
        evictions = CounterMetricFamily(
            "tritonx_model_evictions",
            "Number of models unloaded to stay within a budget (reason=budget) or idle "
            "(reason=idle)",
            labels=["model", "reason"],
        )
        for (model, reason), count in sorted(r.evictions.items()):
            evictions.add_metric([model, reason], count)
        yield evictions
        memory = GaugeMetricFamily(
            "tritonx_model_memory_bytes",
            "Bytes the model added to the server's resident memory (workers included) at its load",
            labels=["model"],
        )
        for model, footprint in sorted(r.footprints.items()):
            memory.add_metric([model], footprint)
        yield memory

    def _totals(self) -> Iterator[Metric]:
        """The loaded models, the budgets and settings, the reads of the repositories."""
        r = self.residency
        yield GaugeMetricFamily(
            "tritonx_loaded_models", "Number of models loaded", value=r.loaded_count()
        )
        yield GaugeMetricFamily(
            "tritonx_max_loaded_models",
            "--max-loaded-models (0: no limit)",
            value=r.max_models,
        )
        if r.memory_budget:
            yield GaugeMetricFamily(
                "tritonx_model_memory_used_bytes",
                "Bytes billed to --model-memory-budget: the growth of the server's resident "
                "memory (workers included) over what it held the last time no model was "
                "loaded (0 with none loaded)",
                value=r.memory_used(),
            )
        yield GaugeMetricFamily(
            "tritonx_model_memory_budget_bytes",
            "--model-memory-budget (0: no limit)",
            value=r.memory_budget,
        )
        yield GaugeMetricFamily(
            "tritonx_model_min_residency_seconds",
            "--model-min-residency-secs (0: no minimum)",
            value=r.min_residency,
        )
        yield CounterMetricFamily(
            "tritonx_model_repository_scans",
            "Number of reads of every model repository (a request for an unknown model "
            "reads them only once the last read is --unknown-model-rescan-secs old)",
            value=r.scans,
        )
