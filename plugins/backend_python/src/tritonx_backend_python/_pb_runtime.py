"""The services a model's surroundings provide to ``pb_utils``, and the parts of its API that
go through them: logging (:class:`Logger`), custom metrics (:class:`MetricFamily`,
:class:`Metric`), model control (:func:`load_model`...) and :func:`get_model_dir`.

A :class:`Runtime` is installed by the worker process (one for the whole process,
:func:`set_process_runtime`) or made current by an in-process instance around each call into
its model (:data:`bind` / :data:`unbind`, :class:`bound_runtime`: in-process models share the
module). :func:`current` is the one in force.

Part of the split of :mod:`tritonx_backend_python.pb_utils`, which re-exports Triton's names
(and :class:`Runtime`); :func:`current`, :func:`set_process_runtime`, :data:`bind`,
:data:`unbind`, :class:`bound_runtime` and :func:`bls_runtime` are for this backend's runner
and worker, not part of Triton's API.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tritonx_backend_python._pb_base import TritonModelException

if TYPE_CHECKING:
    from tritonx_backend_python._pb_request import InferenceRequest

# ---------------------------------------------------------------------- the runtime


class Runtime:
    """What a model's surroundings provide; the worker or in-process instance installs one."""

    model_dir: str = ""
    #: whether BLS requests may be made: from the end of ``initialize`` until ``finalize``
    #: starts (Triton's stub refuses them in ``initialize``, ``finalize`` and
    #: ``auto_complete_config``)
    bls_open: bool = False

    def infer(self, request: InferenceRequest, decoupled: bool) -> Any:
        """Run a BLS request: an :class:`InferenceResponse`, or a :class:`ResponseIterator`."""
        raise TritonModelException("BLS requests can only be made from a model being served")

    def log(self, level: int, message: str) -> None:
        """Write a model log line to the server's log."""
        logging.getLogger("tritonx.backend.python.model").log(_PY_LEVEL[level], "%s", message)

    def metric_family(self, name: str, description: str, kind: int) -> None:
        """Create (or reuse) a custom metric family."""
        raise TritonModelException("custom metrics are only available in a model being served")

    def metric_op(
        self, family: str, labels: tuple[tuple[str, str], ...], op: str, value: Any
    ) -> float | None:
        """``create`` / ``increment`` / ``set`` / ``observe`` / ``value`` on one metric."""
        raise TritonModelException("custom metrics are only available in a model being served")

    def control(self, op: str, **kwargs: Any) -> Any:
        """Model control from Python (``load_model`` / ``unload_model`` / ``is_model_ready``)."""
        raise TritonModelException("model control is only available in a model being served")


_default_runtime = Runtime()
_process_runtime: Runtime | None = None
_current: contextvars.ContextVar[Runtime | None] = contextvars.ContextVar(
    "tritonx_python_runtime", default=None
)


def set_process_runtime(runtime: Runtime | None) -> None:
    """Install ``runtime`` for the whole process (a worker: one model per process); for the
    backend's worker, not part of Triton's API."""
    global _process_runtime
    _process_runtime = runtime


def current() -> Runtime:
    """The runtime in force: the one bound in this context, else the process's, else a
    default that refuses what only a served model may do."""
    return _current.get() or _process_runtime or _default_runtime


def bls_runtime() -> Runtime:
    """The runtime in force, if BLS requests may be made now (else Triton's error)."""
    runtime = current()
    if not runtime.bls_open:
        raise TritonModelException("BLS is only supported during the 'execute' function.")
    return runtime


#: ``bind(runtime)``: make ``runtime`` current in this context until :data:`unbind` gets
#: the returned token back; the runner's per-batch path (the context variable's own methods:
#: no context manager, no call layer). For the backend, not part of Triton's API.
bind = _current.set
#: ``unbind(token)``: undo the :data:`bind` that returned ``token``.
unbind = _current.reset


class bound_runtime:
    """Makes ``runtime`` current in this context (in-process models share the module); the
    coroutines an ``async def execute`` starts inherit it. For the backend's runner, not part
    of Triton's API."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def __enter__(self) -> None:
        self.token = _current.set(self.runtime)

    def __exit__(self, *exc: object) -> None:
        _current.reset(self.token)


def get_model_dir() -> str:
    """The folder of the running ``model.py`` (``<repository>/<model>/<version>``)."""
    return current().model_dir


# ---------------------------------------------------------------------- logging

_PY_LEVEL = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}


class LogLevel:
    """Levels of :class:`Logger` (``pb_utils.LogLevel.INFO``...)."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


class Logger:
    """Log to the server's log: ``pb_utils.Logger.log_info("...")``."""

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: int = LogLevel.INFO) -> None:
        """Log ``message`` at ``level``."""
        current().log(int(level), str(message))

    @staticmethod
    def log_info(message: str) -> None:
        """Log at INFO level."""
        current().log(LogLevel.INFO, str(message))

    @staticmethod
    def log_warn(message: str) -> None:
        """Log at WARNING level."""
        current().log(LogLevel.WARNING, str(message))

    @staticmethod
    def log_error(message: str) -> None:
        """Log at ERROR level."""
        current().log(LogLevel.ERROR, str(message))

    @staticmethod
    def log_verbose(message: str) -> None:
        """Log at VERBOSE (debug) level."""
        current().log(LogLevel.VERBOSE, str(message))


# ---------------------------------------------------------------------- custom metrics


class MetricFamily:
    """A custom metric family shown on the server's ``/metrics``:
    ``MetricFamily(name, description, MetricFamily.COUNTER)``, then ``.Metric(labels=...)``."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException("Unknown metric family kind")
        if not name:
            raise TritonModelException("metric family name cannot be empty")
        self.name = name
        self.description = description
        self.kind = kind
        current().metric_family(name, description, kind)

    def Metric(
        self, labels: dict[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> Metric:
        """A metric of this family with the given labels (histograms need ``buckets``)."""
        return Metric(self, labels, buckets)


class Metric:
    """One labelled metric of a :class:`MetricFamily`."""

    def __init__(
        self,
        family: MetricFamily,
        labels: dict[str, str] | None = None,
        buckets: Sequence[float] | None = None,
    ) -> None:
        if family.kind == MetricFamily.HISTOGRAM and buckets is None:
            raise TritonModelException("Missing required buckets for histogram metric")
        if family.kind != MetricFamily.HISTOGRAM and buckets is not None:
            raise TritonModelException("Unexpected buckets found for a non-histogram metric")
        self._family = family
        self._labels = tuple(sorted((str(k), str(v)) for k, v in (labels or {}).items()))
        self._runtime = current()
        self._runtime.metric_op(
            family.name, self._labels, "create", list(buckets) if buckets else None
        )

    def increment(self, value: float) -> None:
        """Add ``value`` (counters: non-negative only)."""
        if self._family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException(
                "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment"
            )
        if self._family.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("Counters can only be incremented by non-negative values")
        self._runtime.metric_op(self._family.name, self._labels, "increment", float(value))

    def set(self, value: float) -> None:
        """Set a gauge to ``value``."""
        if self._family.kind != MetricFamily.GAUGE:
            raise TritonModelException("Set is only supported for gauge metrics")
        self._runtime.metric_op(self._family.name, self._labels, "set", float(value))

    def observe(self, value: float) -> None:
        """Record ``value`` in a histogram."""
        if self._family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("Observe is only supported for histogram metrics")
        self._runtime.metric_op(self._family.name, self._labels, "observe", float(value))

    def value(self) -> float:
        """The current value (counters and gauges)."""
        if self._family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value")
        result = self._runtime.metric_op(self._family.name, self._labels, "value", None)
        return float(result or 0.0)


# ---------------------------------------------------------------------- model control


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) a model through the server's repository API, with a ``config``
    override (JSON) and ``files`` (``{"file:<version>/<name>": bytes}``), as the load API
    takes them; refused as there outside the explicit model-control mode."""
    if files is not None and not isinstance(files, dict):
        raise TritonModelException(
            f"failed to load model '{model_name}', files should be a dictionary of file paths "
            "and file contents"
        )
    current().control("load", model_name=model_name, config=config, files=files or {})


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload a model; explicit model-control mode only."""
    current().control("unload", model_name=model_name, unload_dependents=unload_dependents)


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether the model (``model_version``: a version number as a string; empty: any
    version) is ready."""
    if model_version:
        try:
            version = int(model_version)
        except ValueError:
            raise TritonModelException(
                "failed to get model version from specified version string "
                f"'{model_version}' (details: stol), version should be an integral value > 0"
            ) from None
        if version < 0:
            raise TritonModelException(
                "failed to get model version from specified version string "
                f"'{model_version}', version should be an integral value > 0"
            )
    return bool(current().control("ready", model_name=model_name, model_version=model_version))
