"""Triton's Prometheus metrics, rendered at scrape time from the per-version statistics.

Names, help texts, types and labels are Triton's (core ``metrics.cc``,
``metric_model_reporter.cc``): counters carry no ``_total`` suffix, per-model series are
labelled ``model`` and ``version`` (plus ``_<tag>`` for ``metric_tags``), failures also
``reason`` (one series per reason, ``REJECTED``, ``CANCELED``, ``BACKEND``, ``OTHER``, from the
model's load on); labels are written sorted by name, as Triton's prometheus-cpp writes its
label maps (``{model="m",reason="OTHER",version="1"}``, a tag ``_team`` first). Statistics and metrics read the same counters, so they always agree.

tritonx's own families for ``--model-load-on-demand`` are :mod:`tritonx._core.residency_metrics`
(:class:`~tritonx._core.residency_metrics.ResidencyMetrics`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from tritonx._core.namespaces import NAMESPACE_LABEL
from tritonx._dataplane.stats import (
    Histogram,
    LatencyStats,
    LatencyWindow,
    LoadedVersion,
    ModelStats,
)
from tritonx.errors import invalid_arg

if TYPE_CHECKING:
    from tritonx._core.watchdog import LoopWatchdog
    from tritonx.config import ModelConfig, ServerSettings

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
DEFAULT_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.5, 0.05),
    (0.9, 0.01),
    (0.95, 0.001),
    (0.99, 0.001),
    (0.999, 0.001),
)
DEFAULT_BUCKETS: tuple[float, ...] = (100.0, 500.0, 2000.0, 5000.0)

#: Per-model counts: name, help, the :class:`~tritonx._dataplane.stats.ModelStats` attribute.
_COUNTERS = (
    (
        "nv_inference_count",
        "Number of inferences performed (does not include cached requests)",
        "inference_count",
    ),
    (
        "nv_inference_exec_count",
        "Number of model executions performed (does not include cached requests)",
        "execution_count",
    ),
)
_LATENCY_COUNTERS = (
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
        "request",
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
        "queue",
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        "compute_input",
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        "compute_infer",
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        "compute_output",
    ),
)
#: Per-model response-cache counters (Triton's ``metrics.cc``): name, help, statistic, what.
#: Only for versions with the cache in front of them, and with counter latencies on, as Triton.
_CACHE_COUNTERS = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model", "cache_hit", "count"),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model", "cache_miss", "count"),
    (
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        "cache_hit",
        "us",
    ),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        "cache_miss",
        "us",
    ),
)
_CACHE_SUMMARIES = (
    (
        "nv_cache_hit_summary_per_model",
        "Summary of cache hit counts/durations per model, in microseconds.",
        "cache_hit",
    ),
    (
        "nv_cache_miss_summary_per_model",
        "Summary of cache miss counts/durations per model, in microseconds.",
        "cache_miss",
    ),
)
_SUMMARIES = (
    (
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
        "request",
    ),
    (
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
        "queue",
    ),
    (
        "nv_inference_compute_input_summary_us",
        "Summary of compute input duration in microseconds (does not include cached requests)",
        "compute_input",
    ),
    (
        "nv_inference_compute_infer_summary_us",
        "Summary of compute inference duration in microseconds (does not include cached requests)",
        "compute_infer",
    ),
    (
        "nv_inference_compute_output_summary_us",
        "Summary of compute output duration in microseconds (does not include cached requests)",
        "compute_output",
    ),
)


def _bool(text: str, key: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "on"):
        return True
    if value in ("false", "0", "off"):
        return False
    raise invalid_arg(f"--metrics-config {key}: '{text}' is not a boolean")


@dataclass(frozen=True)
class MetricsOptions:
    """``--metrics-config`` settings."""

    counter_latencies: bool = True
    histogram_latencies: bool = False
    summary_latencies: bool = False
    quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> MetricsOptions:
        known = {
            "counter_latencies",
            "histogram_latencies",
            "summary_latencies",
            "summary_quantiles",
        }
        unknown = set(config) - known
        if unknown:
            raise invalid_arg(f"unknown --metrics-config key(s): {', '.join(sorted(unknown))}")
        quantiles = DEFAULT_QUANTILES
        if "summary_quantiles" in config:
            try:
                quantiles = tuple(
                    (float(q), float(e))
                    for q, e in (item.split(":") for item in config["summary_quantiles"].split(","))
                )
            except ValueError:
                raise invalid_arg(
                    "--metrics-config summary_quantiles must be <q>:<error>,..."
                ) from None
        return cls(
            counter_latencies=_bool(config.get("counter_latencies", "true"), "counter_latencies"),
            histogram_latencies=_bool(
                config.get("histogram_latencies", "false"), "histogram_latencies"
            ),
            summary_latencies=_bool(config.get("summary_latencies", "false"), "summary_latencies"),
            quantiles=quantiles,
        )

    def latency_stats(self, config: ModelConfig) -> LatencyStats | None:
        """The latency distributions a version of ``config`` keeps, or None."""
        if not (self.summary_latencies or self.histogram_latencies):
            return None
        lat = LatencyStats()
        if self.summary_latencies:
            lat.request, lat.queue = LatencyWindow(), LatencyWindow()
            lat.compute_input, lat.compute_infer, lat.compute_output = (
                LatencyWindow(),
                LatencyWindow(),
                LatencyWindow(),
            )
        if self.histogram_latencies:
            buckets = DEFAULT_BUCKETS
            for control in config.raw.model_metrics.metric_control:
                if control.metric_identifier.family == "nv_inference_first_response_histogram_ms":
                    buckets = tuple(float(b) for b in control.histogram_options.buckets)
            lat.first_response = Histogram(buckets)
        if self.summary_latencies and config.raw.response_cache.enable:
            lat.cache_hit, lat.cache_miss = LatencyWindow(), LatencyWindow()
        return lat


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    parts = []
    for key, value in pairs:
        escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
        parts.append(f'{key}="{escaped}"')
    return "{" + ",".join(parts) + "}"


def _num(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class CpuSampler:
    """``nv_cpu_utilization`` from /proc/stat deltas, refreshed at most every interval."""

    def __init__(self, interval_ms: int) -> None:
        self.interval = max(interval_ms, 1) / 1000
        self._last: tuple[int, int] | None = self._read()
        self._stamp = time.monotonic()
        self.utilization = 0.0

    @staticmethod
    def _read() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    def sample(self) -> float:
        now = time.monotonic()
        if now - self._stamp >= self.interval:
            current = self._read()
            if current is not None and self._last is not None:
                total = current[0] - self._last[0]
                idle = current[1] - self._last[1]
                self.utilization = max(0.0, min(1.0, 1 - idle / total)) if total > 0 else 0.0
            self._last, self._stamp = current, now
        return self.utilization


def memory() -> tuple[int, int] | None:
    """(total, used) bytes of RAM from /proc/meminfo (used = total - available)."""
    info: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                info[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    total = info.get("MemTotal", 0)
    available = info.get("MemAvailable", info.get("MemFree", 0))
    return total, total - available


class _Version(NamedTuple):
    """One loaded version as the families read it."""

    labels: tuple[tuple[str, str], ...]
    stats: ModelStats
    pending: int
    load_seconds: float
    cached: bool
    #: loaded (False: the residency policy unloaded it; its counters stay, not its gauges)
    resident: bool = True


class _Exposition:
    """The text being rendered: families with at least one sample, in call order."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def family(self, name: str, help_text: str, kind: str, samples: Iterable[str]) -> None:
        rows = list(samples)
        if rows:
            self.parts.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
            self.parts.extend(rows)


class TritonMetrics:
    """Renders the ``nv_*`` families for every loaded model version (and the counters of
    the versions the residency policy unloaded: they go on when it loads them again).

    :param loaded_versions: returns the versions with running instances at scrape time
        (:meth:`tritonx._dataplane.dataplane.DataPlane.loaded_versions`).
    """

    def __init__(
        self, settings: ServerSettings, loaded_versions: Callable[[], Iterable[LoadedVersion]]
    ) -> None:
        self.settings = settings
        self.loaded_versions = loaded_versions
        self.options = MetricsOptions.from_config(settings.metrics_config)
        self.cpu = CpuSampler(settings.metrics_interval_ms) if settings.allow_cpu_metrics else None

    def _versions(self) -> list[_Version]:
        out = []
        for v in self.loaded_versions():
            labels = [("model", v.name), ("version", str(v.version))]
            if v.namespace:  # Triton's label, only with --model-namespacing
                labels.append((NAMESPACE_LABEL, v.namespace))
            labels += [(f"_{k}", val) for k, val in v.metric_tags]
            # Triton's labels are a std::map: prometheus-cpp writes them sorted by name
            labels.sort()
            out.append(
                _Version(
                    tuple(labels), v.stats, v.pending_count, v.load_seconds, v.cached, v.resident
                )
            )
        return out

    def render(self) -> str:
        """The Prometheus text exposition of Triton's metrics."""
        out = _Exposition()
        versions = self._versions()
        _request_families(out, versions, counter_latencies=self.options.counter_latencies)
        _gauge_families(out, versions)
        _summary_families(out, versions, tuple(q for q, _ in self.options.quantiles))
        _histogram_family(out, versions)
        if self.cpu is not None:
            _host_families(out, self.cpu)
        if self.settings.allow_gpu_metrics:
            out.parts.extend(_gpu_families())
        return "".join(out.parts)


def _request_families(
    out: _Exposition, versions: list[_Version], *, counter_latencies: bool
) -> None:
    """Request outcomes, inference and execution counts and (with ``counter_latencies``)
    the cumulative durations, cache ones for versions with the cache in front of them."""
    out.family(
        "nv_inference_request_success",
        "Number of successful inference requests, all batch sizes",
        "counter",
        (
            f"nv_inference_request_success{_labels(v.labels)} {v.stats.success.count}\n"
            for v in versions
        ),
    )
    out.family(
        "nv_inference_request_failure",
        "Number of failed inference requests, all batch sizes",
        "counter",
        (
            f"nv_inference_request_failure{_labels(sorted((*v.labels, ('reason', r))))} {v.stats.fail_reasons.get(r, 0)}\n"
            for v in versions
            for r in FAILURE_REASONS
        ),
    )
    for name, help_text, attr in _COUNTERS:
        out.family(
            name,
            help_text,
            "counter",
            (f"{name}{_labels(v.labels)} {getattr(v.stats, attr)}\n" for v in versions),
        )
    if not counter_latencies:
        return
    for name, help_text, attr in _LATENCY_COUNTERS:
        source = "success" if attr == "request" else attr
        out.family(
            name,
            help_text,
            "counter",
            (f"{name}{_labels(v.labels)} {_request_us(v.stats, source)}\n" for v in versions),
        )
    for name, help_text, attr, what in _CACHE_COUNTERS:
        out.family(
            name,
            help_text,
            "counter",
            (
                f"{name}{_labels(v.labels)} {_cache_value(v.stats, attr, what)}\n"
                for v in versions
                if v.cached
            ),
        )


def _gauge_families(out: _Exposition, versions: list[_Version]) -> None:
    """Pending requests and load durations."""
    out.family(
        "nv_inference_pending_request_count",
        "Instantaneous number of pending requests awaiting execution per-model.",
        "gauge",
        (
            f"nv_inference_pending_request_count{_labels(v.labels)} {v.pending}\n"
            for v in versions
            if v.resident
        ),
    )
    out.family(
        "nv_model_load_duration_secs",
        "Model load time in seconds",
        "gauge",
        (
            f"nv_model_load_duration_secs{_labels(v.labels)} {_num(round(v.load_seconds, 6))}\n"
            for v in versions
            if v.resident
        ),
    )


def _summary_families(
    out: _Exposition, versions: list[_Version], quantiles: tuple[float, ...]
) -> None:
    """The latency summaries of versions that keep them (``summary_latencies``)."""
    now = time.monotonic_ns()
    summaries = [(name, help_text, attr, versions) for name, help_text, attr in _SUMMARIES]
    summaries += [
        (name, help_text, attr, [v for v in versions if v.cached])
        for name, help_text, attr in _CACHE_SUMMARIES
    ]
    for name, help_text, attr, rendered in summaries:
        rows: list[str] = []
        for v in rendered:
            window = getattr(v.stats.latency, attr, None) if v.stats.latency else None
            if window is None:
                continue
            if attr == "request" and v.cached:
                # Triton leaves the request summary out for versions with the cache on
                # (metric_model_reporter.cc: it would mix hits and executions).
                continue
            for q, value in window.quantiles(quantiles, now):
                rows.append(f"{name}{_labels((*v.labels, ('quantile', _num(q))))} {_num(value)}\n")
            rows.append(f"{name}_sum{_labels(v.labels)} {_num(window.total)}\n")
            rows.append(f"{name}_count{_labels(v.labels)} {window.count}\n")
        out.family(name, help_text, "summary", rows)


def _histogram_family(out: _Exposition, versions: list[_Version]) -> None:
    """The first-response histogram of versions that keep it (``histogram_latencies``)."""
    name = "nv_inference_first_response_histogram_ms"
    rows: list[str] = []
    for v in versions:
        hist = v.stats.latency.first_response if v.stats.latency else None
        if hist is None:
            continue
        for bound, count in zip(hist.buckets, hist.counts, strict=True):
            rows.append(f"{name}_bucket{_labels((*v.labels, ('le', _num(bound))))} {count}\n")
        rows.append(f"{name}_bucket{_labels((*v.labels, ('le', '+Inf')))} {hist.count}\n")
        rows.append(f"{name}_sum{_labels(v.labels)} {_num(hist.total)}\n")
        rows.append(f"{name}_count{_labels(v.labels)} {hist.count}\n")
    out.family(name, "Duration from request to first response in milliseconds", "histogram", rows)


def _host_families(out: _Exposition, cpu: CpuSampler) -> None:
    """CPU utilization and RAM (``--allow-cpu-metrics``)."""
    out.family(
        "nv_cpu_utilization",
        "CPU utilization rate [0.0 - 1.0]",
        "gauge",
        [f"nv_cpu_utilization {_num(cpu.sample())}\n"],
    )
    mem = memory()
    if mem is None:
        return
    for name, help_text, value in (
        ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", mem[0]),
        ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", mem[1]),
    ):
        out.family(name, help_text, "gauge", [f"{name} {value}\n"])


class LoopMetrics:
    """tritonx's event-loop families (Triton has none, hence the ``tritonx_`` prefix), read
    from the :class:`~tritonx._core.watchdog.LoopWatchdog`; a collector the server registers
    in its metrics registry, so ``/metrics`` and the metric sinks get them:

    * ``tritonx_event_loop_blocked_total``: times the loop did not run for longer than
      ``--event-loop-watchdog-secs`` (counted when detected, each incident once);
    * ``tritonx_event_loop_blocked_seconds_total``: how long those incidents lasted (added
      when the loop runs again).
    """

    def __init__(self, watchdog: LoopWatchdog) -> None:
        self.watchdog = watchdog

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "tritonx_event_loop_blocked",
            "Number of times the event loop was blocked for longer than --event-loop-watchdog-secs",
            value=self.watchdog.blocked_count,
        )
        yield CounterMetricFamily(
            "tritonx_event_loop_blocked_seconds",
            "Cumulative seconds the event loop was blocked in those incidents",
            value=self.watchdog.blocked_seconds,
        )


def render_registry(registry: CollectorRegistry) -> str:
    """A prometheus_client registry in text form, keeping each family's own name.

    ``generate_latest`` renames counter families to ``<name>_total`` in HELP/TYPE; Triton's
    counters (and backends' custom ones) carry no suffix, so they are written as named.
    """
    out: list[str] = []
    for metric in registry.collect():
        help_text = metric.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {metric.name} {help_text}\n# TYPE {metric.name} {metric.type}\n")
        for sample in metric.samples:
            labels = _labels(_label_order(metric.type, sample.labels)) if sample.labels else ""
            out.append(f"{sample.name}{labels} {_num(sample.value)}\n")
    return "".join(out)


def _label_order(kind: str, labels: dict[str, str]) -> list[tuple[str, str]]:
    """A sample's labels as prometheus-cpp (Triton) writes them: sorted by name, then a
    histogram bucket's ``le`` (a summary's ``quantile``) last, whatever its name sorts as."""
    pairs = sorted(labels.items())
    extra = {"histogram": "le", "summary": "quantile"}.get(kind)
    if extra is not None and extra in labels:
        pairs.remove((extra, labels[extra]))
        pairs.append((extra, labels[extra]))
    return pairs


def _request_us(stats: ModelStats, attr: str) -> int:
    return getattr(stats, attr).ns // 1000


def _cache_value(stats: ModelStats, attr: str, what: str) -> int:
    duration = getattr(stats, attr)
    return int(duration.count if what == "count" else duration.ns // 1000)


#: Triton's GPU families (name, help, type) by what :func:`_gpu_families` reads from NVML
GPU_FAMILIES: dict[str, tuple[str, str, str]] = {
    "util": ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "gauge"),
    "total": ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "gauge"),
    "used": ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "gauge"),
    "power": ("nv_gpu_power_usage", "GPU power usage in watts", "gauge"),
    "limit": ("nv_gpu_power_limit", "GPU power management limit in watts", "gauge"),
    "energy": (
        "nv_energy_consumption",
        "GPU energy consumption in joules since the Triton Server started",
        "counter",
    ),
}


def _gpu_families() -> list[str]:
    """Triton's GPU gauges through NVML (pynvml), when a GPU and pynvml are present."""
    from tritonx._core.devices import gpu_count

    if gpu_count() == 0:
        return []
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:
        return []
    rows: dict[str, list[str]] = {
        k: [] for k in ("util", "total", "used", "power", "limit", "energy")
    }
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            lb = _labels([("gpu_uuid", uuid)])
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            rows["util"].append(
                f"nv_gpu_utilization{lb} {_num(pynvml.nvmlDeviceGetUtilizationRates(h).gpu / 100)}\n"
            )
            rows["total"].append(f"nv_gpu_memory_total_bytes{lb} {mem.total}\n")
            rows["used"].append(f"nv_gpu_memory_used_bytes{lb} {mem.used}\n")
            rows["power"].append(
                f"nv_gpu_power_usage{lb} {_num(pynvml.nvmlDeviceGetPowerUsage(h) / 1000)}\n"
            )
            rows["limit"].append(
                f"nv_gpu_power_limit{lb} {_num(pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000)}\n"
            )
            rows["energy"].append(
                f"nv_energy_consumption{lb} {_num(pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000)}\n"
            )
    except Exception:
        pass
    finally:
        pynvml.nvmlShutdown()
    out: list[str] = []
    for key, (name, help_text, kind) in GPU_FAMILIES.items():
        if rows[key]:
            out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
            out.extend(rows[key])
    return out


__all__ = ["GPU_FAMILIES", "MetricsOptions", "TritonMetrics"]
