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
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tritonx_backend_python._pb_base import TritonModelException, is_int, refused, text_arg

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

    def metric_update(
        self, family: str, labels: tuple[tuple[str, str], ...], op: str, value: Any
    ) -> None:
        """``create`` / ``increment`` / ``set`` / ``observe`` on one metric, returning once
        the server applied it (it is on ``/metrics``, as when Triton's stub gets its parent's
        answer). This default gives :meth:`metric_op` the update, then reads the metric back:
        a server handles one model instance's metric messages in order, so its answer comes
        after the update (and carries the error of a metric it does not know)."""
        self.metric_op(family, labels, op, value)
        self.metric_op(family, labels, "value", None)

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
        if type(message) is not str or not is_int(level):
            message = text_arg(message, _LOG_SIGNATURE, (message, level), "log")
            if not is_int(level):
                raise refused(_LOG_SIGNATURE, (message, level), function="log")
        current().log(int(level), message)

    @staticmethod
    def log_info(message: str) -> None:
        """Log at INFO level."""
        if type(message) is not str:
            message = text_arg(message, _LOG_AT_SIGNATURE, (message,), "log_info")
        current().log(LogLevel.INFO, message)

    @staticmethod
    def log_warn(message: str) -> None:
        """Log at WARNING level."""
        if type(message) is not str:
            message = text_arg(message, _LOG_AT_SIGNATURE, (message,), "log_warn")
        current().log(LogLevel.WARNING, message)

    @staticmethod
    def log_error(message: str) -> None:
        """Log at ERROR level."""
        if type(message) is not str:
            message = text_arg(message, _LOG_AT_SIGNATURE, (message,), "log_error")
        current().log(LogLevel.ERROR, message)

    @staticmethod
    def log_verbose(message: str) -> None:
        """Log at VERBOSE (debug) level."""
        if type(message) is not str:
            message = text_arg(message, _LOG_AT_SIGNATURE, (message,), "log_verbose")
        current().log(LogLevel.VERBOSE, message)


_LOG_SIGNATURE = (
    "(message: str, level: c_python_backend_utils.Logger.LogLevel = <LogLevel.INFO: 0>) -> None"
)
_LOG_AT_SIGNATURE = "(message: str) -> None"


# ---------------------------------------------------------------------- custom metrics

_FAMILY_SIGNATURE = (
    "c_python_backend_utils.MetricFamily(name: str, description: str, "
    "kind: c_python_backend_utils.MetricKind)"
)
_CLEARED = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The "
    "'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have "
    "been deleted."
)
# a live family of each name in this process: a family of the same name and another kind
# is refused here (Triton's registry refuses it; a worker's updates reach the server later)
_live_families: weakref.WeakValueDictionary[str, MetricFamily] = weakref.WeakValueDictionary()
_live_lock = threading.Lock()


def _message(exc: BaseException) -> str:
    text = getattr(exc, "message", None)
    return text if isinstance(text, str) else str(exc)


class MetricFamily:
    """A custom metric family shown on the server's ``/metrics``:
    ``MetricFamily(name, description, MetricFamily.COUNTER)``, then ``.Metric(labels=...)``.

    As in Triton, a family's metrics live as long as the family object: once it is gone
    (deleted, or never kept, as in ``MetricFamily(...).Metric()``), using one of them raises
    :class:`TritonModelException`.
    """

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        self._metrics: weakref.WeakSet[Metric] = weakref.WeakSet()
        if type(name) is not str or type(description) is not str or type(kind) is not int:
            args = (name, description, kind)
            name = text_arg(name, _FAMILY_SIGNATURE, args)
            description = text_arg(description, _FAMILY_SIGNATURE, args)
            if not is_int(kind):
                raise refused(_FAMILY_SIGNATURE, args)
            kind = int(kind)
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException("Unknown metric family kind")
        if not name:
            raise TritonModelException("metric family name cannot be empty")
        self.name = name
        self.description = description
        self.kind = kind
        with _live_lock:
            live = _live_families.get(name)
            if live is not None and live.kind != kind:
                raise TritonModelException(
                    "Error when creating MetricFamily: Family name already exists with "
                    "different type"
                )
            try:
                current().metric_family(name, description, kind)
            except TritonModelException:
                raise
            except Exception as exc:
                raise TritonModelException(
                    f"Error when creating MetricFamily: {_message(exc)}"
                ) from None
            if live is None:
                _live_families[name] = self

    def Metric(
        self, labels: dict[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> Metric:
        """A metric of this family with the given labels (histograms need ``buckets``)."""
        return Metric(self, labels, buckets)

    def __del__(self) -> None:
        # Triton's ~MetricFamily clears its metrics: they refuse any use from now on
        for metric in list(getattr(self, "_metrics", ())):
            metric.cleared = True


def _number(value: Any, function: str) -> float:
    """``value`` as pybind converts it to a ``double`` (else pybind's TypeError)."""
    if type(value) is float:
        return value
    if isinstance(value, (str, bytes)) or not hasattr(type(value), "__float__"):
        raise refused("(self: Metric, arg0: float) -> None", (value,), function=function)
    return float(value)


class Metric:
    """One labelled metric of a :class:`MetricFamily`; each operation is on ``/metrics``
    when it returns (Triton's stub waits for its parent too)."""

    def __init__(
        self,
        family: MetricFamily,
        labels: dict[str, str] | None = None,
        buckets: Sequence[float] | None = None,
    ) -> None:
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        bounds = self._bounds(family.kind, buckets)
        self.family_name = family.name
        self.kind = family.kind
        #: whether its family is gone (Triton's ``is_cleared_``); set by the family
        self.cleared = False
        self._labels = tuple(sorted((str(k), str(v)) for k, v in (labels or {}).items()))
        self._runtime = current()
        self._apply("create", bounds, "Error when creating Metric")
        family._metrics.add(self)

    @staticmethod
    def _bounds(kind: int, buckets: Any) -> list[float] | None:
        """Triton's checks of a metric's ``buckets`` (src/metric_family.cc, and the
        histogram's own in prometheus-cpp)."""
        if buckets is None:
            if kind == MetricFamily.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Missing required buckets.")
            return None
        if not isinstance(buckets, list):
            raise TritonModelException("Failed to create metric. Buckets must be a list.")
        if kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Unexpected buckets found.")
        bounds = [_number(b, "Metric") for b in buckets]
        if any(b >= a for a, b in zip(bounds[1:], bounds, strict=False)):
            raise TritonModelException(
                "Error when creating Metric: Bucket Boundaries must be strictly sorted"
            )
        return bounds

    def _apply(self, op: str, value: Any, failed: str) -> None:
        if self.cleared:
            raise TritonModelException(f"{failed}: {_CLEARED}")
        try:
            self._runtime.metric_update(self.family_name, self._labels, op, value)
        except Exception as exc:
            raise TritonModelException(f"{failed}: {_message(exc)}") from None

    def increment(self, value: float) -> None:
        """Add ``value`` (counters: non-negative only)."""
        value = _number(value, "increment")
        failed = "Failed to increment metric value"
        self._check_kind(failed, "Increment", MetricFamily.COUNTER, MetricFamily.GAUGE)
        if not self.cleared and self.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException(
                f"{failed}: TRITONSERVER_METRIC_KIND_COUNTER can only be incremented "
                "monotonically by non-negative values."
            )
        self._apply("increment", value, failed)

    def set(self, value: float) -> None:
        """Set a gauge to ``value``."""
        value = _number(value, "set")
        failed = "Failed to set metric value"
        self._check_kind(failed, "Set", MetricFamily.GAUGE)
        self._apply("set", value, failed)

    def observe(self, value: float) -> None:
        """Record ``value`` in a histogram."""
        value = _number(value, "observe")
        failed = "Failed to observe metric value"
        self._check_kind(failed, "Observe", MetricFamily.HISTOGRAM)
        self._apply("observe", value, failed)

    def _check_kind(self, failed: str, operation: str, *kinds: int) -> None:
        """Triton's error for an ``operation`` this metric's kind does not support (a
        cleared metric fails in :meth:`_apply` instead)."""
        if not self.cleared and self.kind not in kinds:
            name = {MetricFamily.COUNTER: "COUNTER", MetricFamily.GAUGE: "GAUGE"}.get(
                self.kind, "HISTOGRAM"
            )
            raise TritonModelException(
                f"{failed}: TRITONSERVER_METRIC_KIND_{name} does not support {operation}"
            )

    def value(self) -> float:
        """The current value (counters and gauges)."""
        failed = "Failed to get metric value"
        if self.cleared:
            raise TritonModelException(f"{failed}: {_CLEARED}")
        if self.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException(
                f"{failed}: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value"
            )
        try:
            result = self._runtime.metric_op(self.family_name, self._labels, "value", None)
        except Exception as exc:
            raise TritonModelException(f"{failed}: {_message(exc)}") from None
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
