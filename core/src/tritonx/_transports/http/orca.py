"""ORCA load reports on generate responses (tritonserver's ``src/orca_http.cc``).

A ``/generate`` or ``/generate_stream`` request carrying ``endpoint-load-metrics-format:
text`` or ``json`` gets an ``endpoint-load-metrics`` response header computed from the
``nv_trt_llm_kv_cache_block_metrics`` gauge family (the family TensorRT-LLM's backend
reports; a Python model can report it with ``pb_utils.MetricFamily``). Its samples labelled
``kv_cache_block_type`` = ``tokens_per``, ``used`` and ``max`` give::

    kv_cache_utilization = used / max        (0 when max is 0)
    max_token_capacity   = max * tokens_per  (an unsigned integer)

written as Triton writes them::

    JSON {"named_metrics":{"kv_cache_utilization":0.5,"max_token_capacity":1600}}
    TEXT named_metrics.kv_cache_utilization=0.500000, named_metrics.max_token_capacity=1600

(JSON: RapidJSON's shortest double; TEXT: ``std::to_string``, six decimals.) Any other
format, or a family missing one of the three samples, writes no header and logs an error, as
Triton; here that log line is rate-limited, since the header is the client's.

As in Triton's parser, when several samples carry one type the last one read wins, and a
negative, NaN or infinite value counts as missing (Triton reads the values from the
Prometheus text with a pattern that matches only unsigned decimals).

Triton renders its whole Prometheus text per request to find the family; here the family is
read from the registry by name (``CollectorRegistry.restricted_registry``), which visits only
the collectors that declare that name (a prometheus_client ``Gauge``, a collector with
``describe``, each python-model family), so a report costs the family's samples, whatever
else the server holds.
"""

from __future__ import annotations

import decimal
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

log = logging.getLogger("tritonx.http")

#: The request header naming the report's format (``text`` or ``json``).
FORMAT_HEADER = "endpoint-load-metrics-format"
#: The response header carrying the report.
REPORT_HEADER = "endpoint-load-metrics"
#: The gauge family the report is computed from, and its label naming the block count.
KV_CACHE_FAMILY = "nv_trt_llm_kv_cache_block_metrics"
BLOCK_TYPE_LABEL = "kv_cache_block_type"
TOKENS_PER, USED, MAX = "tokens_per", "used", "max"
#: The two reported metrics (Triton's keys).
UTILIZATION_KEY = "kv_cache_utilization"
CAPACITY_KEY = "max_token_capacity"
FORMATS = ("text", "json")

_UINT64_MAX = 2**64 - 1
#: At most one error line per this many seconds and reason (bad format, missing metrics).
LOG_INTERVAL_S = 60.0
#: How much of a client's header value a log line quotes.
_QUOTED = 32


class _Throttle:
    """One log line per :data:`LOG_INTERVAL_S`, counting the lines it held back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0.0
        self._held = 0

    def allow(self) -> int | None:
        """The number of lines held back since the last one, or ``None``: hold this one."""
        now = time.monotonic()
        with self._lock:
            if now < self._next:
                self._held += 1
                return None
            self._next = now + LOG_INTERVAL_S
            held, self._held = self._held, 0
            return held


#: each server's throttles (by its registry): the bad-format line and the missing-metrics line
_throttles: weakref.WeakKeyDictionary[CollectorRegistry, tuple[_Throttle, _Throttle]] = (
    weakref.WeakKeyDictionary()
)


def _throttles_of(registry: CollectorRegistry) -> tuple[_Throttle, _Throttle]:
    pair = _throttles.get(registry)
    if pair is None:
        pair = _throttles[registry] = (_Throttle(), _Throttle())
    return pair


def _log(throttle: _Throttle, words: Callable[[], str]) -> None:
    """Log the line ``words`` makes, unless ``throttle`` holds it (then it is not made)."""
    held = throttle.allow()
    if held is None:
        return
    message = words()
    if held:
        message += f" ({held} more since the last such line)"
    log.error(message)


def load_report(fmt: str, registry: CollectorRegistry) -> str | None:
    """The ``endpoint-load-metrics`` value for a request that asked for format ``fmt``, or
    ``None`` (an unknown format, or metrics missing: an error is logged, rate-limited)."""
    if fmt not in FORMATS:
        _log(
            _throttles_of(registry)[0],
            lambda: (
                f"{FORMAT_HEADER} request header is set to an invalid type "
                f"{fmt[:_QUOTED]!a}{'...' if len(fmt) > _QUOTED else ''} (expected 'text' "
                f"or 'json'), no {REPORT_HEADER} header written"
            ),
        )
        return None
    blocks = kv_cache_blocks(registry)
    if blocks is None:
        _log(
            _throttles_of(registry)[1],
            lambda: (
                f"{FORMAT_HEADER} request header is set but one or more of the kv metrics "
                f"({KV_CACHE_FAMILY} with {BLOCK_TYPE_LABEL} {TOKENS_PER}, {USED} and {MAX}) was "
                f"not found or invalid, no {REPORT_HEADER} header written"
            ),
        )
        return None
    tokens_per, used, max_blocks = blocks
    utilization = used / max_blocks if max_blocks > 0 else 0.0
    capacity = _uint64(max_blocks * tokens_per)
    if fmt == "json":
        return (
            f'JSON {{"named_metrics":{{"{UTILIZATION_KEY}":{rapidjson_double(utilization)},'
            f'"{CAPACITY_KEY}":{capacity}}}}}'
        )
    return (
        f"TEXT named_metrics.{UTILIZATION_KEY}={to_string(utilization)}, "
        f"named_metrics.{CAPACITY_KEY}={capacity}"
    )


def kv_cache_blocks(registry: CollectorRegistry) -> tuple[float, float, float] | None:
    """``(tokens_per, used, max)`` from the registry's kv-cache block family, or ``None``
    when one of them is missing (or negative, NaN or infinite). Only the collectors that
    declare the family's name are read."""
    found = _block_values(registry.restricted_registry([KV_CACHE_FAMILY]).collect())
    if found is None or min(found.values()) < 0:
        return None
    return found[TOKENS_PER], found[USED], found[MAX]


def _block_values(metrics: Iterable[Metric]) -> dict[str, float] | None:
    """Each block type's last valid value (-1: none), or ``None``: no such family."""
    found: dict[str, float] | None = None
    for metric in metrics:
        if metric.name != KV_CACHE_FAMILY:
            continue
        if found is None:
            found = {TOKENS_PER: -1.0, USED: -1.0, MAX: -1.0}
        for sample in metric.samples:
            kind = sample.labels.get(BLOCK_TYPE_LABEL)
            if sample.name != KV_CACHE_FAMILY or kind not in found:
                continue
            value = float(sample.value)
            if value >= 0 and math.isfinite(value):  # what Triton's pattern reads
                found[kind] = value
    return found


def _uint64(value: float) -> int:
    """``static_cast<uint64_t>`` of a non-negative double: truncated, saturated at the top
    (where C++ leaves the result undefined)."""
    if not math.isfinite(value) or value >= _UINT64_MAX:
        return _UINT64_MAX
    return int(value)


def to_string(value: float) -> str:
    """C++'s ``std::to_string(double)`` (``%f``): six decimals."""
    return f"{value:f}"


def rapidjson_double(value: float) -> str:
    """A double as RapidJSON's ``Writer`` writes it (Triton's JSON): the shortest digits
    that read back the same, ``1.0`` for integers, exponents only outside
    ``1e-6 <= |value| < 1e21``, ``NaN``/``Infinity`` (Triton's writer allows them)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0.0"
    digits_t = decimal.Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digits_t.digits))
    exponent = int(digits_t.exponent)
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    length = len(digits)
    kk = length + exponent  # 10^(kk-1) <= value < 10^kk
    if 0 <= exponent and kk <= 21:
        text = digits + "0" * exponent + ".0"
    elif 0 < kk <= 21:
        text = digits[:kk] + "." + digits[kk:]
    elif -6 < kk <= 0:
        text = "0." + "0" * -kk + digits
    elif length == 1:
        text = f"{digits}e{kk - 1}"
    else:
        text = f"{digits[0]}.{digits[1:]}e{kk - 1}"
    return sign + text


__all__ = [
    "FORMAT_HEADER",
    "KV_CACHE_FAMILY",
    "REPORT_HEADER",
    "kv_cache_blocks",
    "load_report",
    "rapidjson_double",
    "to_string",
]
