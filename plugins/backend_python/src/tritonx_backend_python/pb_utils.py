"""``triton_python_backend_utils`` for tritonx: the API Triton ``model.py`` files import.

``import triton_python_backend_utils as pb_utils`` resolves to this module inside a python
model (the worker process, or the server process for in-process models, registers it under
that name). Names, signatures, constants and error messages follow Triton's python_backend;
what depends on where the model runs (BLS, response delivery, logging, metrics) goes through a
:class:`Runtime` installed by the worker or the in-process instance.

Only the standard library and numpy are needed here.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tritonx_backend_python import _dlpack, _ipc

# ---------------------------------------------------------------------- constants

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_GPU = 2

#: Config type names → numpy types (Triton's table; no BF16, which numpy lacks).
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType enum values, by protocol datatype name
_TRITON_TYPE_CODE = {
    "BOOL": 1,
    "UINT8": 2,
    "UINT16": 3,
    "UINT32": 4,
    "UINT64": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FP16": 10,
    "FP32": 11,
    "FP64": 12,
    "BYTES": 13,
    "BF16": 14,
}
_CODE_TO_NUMPY = {
    1: np.bool_,
    2: np.uint8,
    3: np.uint16,
    4: np.uint32,
    5: np.uint64,
    6: np.int8,
    7: np.int16,
    8: np.int32,
    9: np.int64,
    10: np.float16,
    11: np.float32,
    12: np.float64,
    13: np.object_,
}


# ---------------------------------------------------------------------- errors


class TritonModelException(Exception):
    """Raise from ``initialize``/``execute``/``finalize`` to fail them with a message."""


class TritonError:
    """An error carried by an :class:`InferenceResponse` (``TritonError(message, code)``)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        """The error message."""
        return self._message

    def code(self) -> int:
        """One of the ``TritonError`` code constants."""
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"

    def __str__(self) -> str:
        return self._message


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


def _set_process_runtime(runtime: Runtime | None) -> None:
    global _process_runtime
    _process_runtime = runtime


def _runtime() -> Runtime:
    return _current.get() or _process_runtime or _default_runtime


def _bls_runtime() -> Runtime:
    runtime = _runtime()
    if not runtime.bls_open:
        raise TritonModelException("BLS is only supported during the 'execute' function.")
    return runtime


class _bound_runtime:
    """Makes ``runtime`` current in this context (in-process models share the module); the
    coroutines an ``async def execute`` starts inherit it."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def __enter__(self) -> None:
        self.token = _current.set(self.runtime)

    def __exit__(self, *exc: object) -> None:
        _current.reset(self.token)


def get_model_dir() -> str:
    """The folder of the running ``model.py`` (``<repository>/<model>/<version>``)."""
    return _runtime().model_dir


# ---------------------------------------------------------------------- tensors


class Tensor:
    """A named tensor; ``Tensor(name, numpy_array)``. BYTES tensors are object arrays."""

    __slots__ = ("_array", "_datatype", "_name")

    def __init__(self, name: str, data: Any, *, datatype: str | None = None) -> None:
        name = _text(name)
        if not isinstance(name, str) or not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        array = data if isinstance(data, np.ndarray) else np.asarray(data)
        if datatype is None:
            try:
                datatype = _ipc.datatype_of(array)
            except TypeError as exc:
                raise TritonModelException(str(exc)) from None
        if datatype == "BF16" and array.dtype != np.uint16:
            array = array.view(np.uint16)
        self._name = name
        self._array = array
        self._datatype = datatype

    def name(self) -> str:
        """The tensor's name."""
        return self._name

    def as_numpy(self) -> np.ndarray:
        """The data as a numpy array; BF16 is refused as Triton refuses it (numpy has no
        bfloat16): use ``to_dlpack()`` / ``from_dlpack()``."""
        if self._datatype == "BF16":
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. Use "
                "to_dlpack() and from_dlpack() instead."
            )
        return self._array

    def triton_dtype(self) -> int:
        """The ``TRITONSERVER_DataType`` code (13 for BYTES, 14 for BF16...)."""
        return _TRITON_TYPE_CODE[self._datatype]

    def shape(self) -> list[int]:
        """The tensor's shape."""
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        """Always True: tritonx python models see CPU tensors."""
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule of the data (not for BYTES tensors)."""
        if self._datatype == "BYTES":
            raise TritonModelException("DLPack does not have support for string tensors.")
        if self._datatype == "BF16":
            return _dlpack.export_bf16(self._array)
        return self._array.__dlpack__()

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU, device 0

    @staticmethod
    def from_dlpack(name: str, dlpack: Any) -> Tensor:
        """A tensor from any object with ``__dlpack__`` (torch, numpy, ...) or a capsule;
        a bfloat16 one becomes a BF16 tensor."""
        source = dlpack
        if not hasattr(dlpack, "__dlpack__"):  # a bare capsule
            source = type("_Capsule", (), {})()
            source.__dlpack__ = lambda stream=None: dlpack
            source.__dlpack_device__ = lambda: (1, 0)
        try:
            array = np.from_dlpack(source)
        except (BufferError, TypeError, ValueError, RuntimeError):
            capsule = dlpack.__dlpack__() if hasattr(dlpack, "__dlpack__") else dlpack
            bits = _dlpack.import_bf16(capsule)
            if bits is None:
                raise
            return Tensor(name, bits, datatype="BF16")
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self._datatype}, shape={list(self._array.shape)})"


def serialize_byte_tensor(input_tensor: np.ndarray) -> np.ndarray | None:
    """Triton's BYTES wire encoding of an array, as a 1-D uint8 array (None if empty)."""
    if input_tensor.size == 0:
        return None
    if input_tensor.dtype != object and input_tensor.dtype.type != np.bytes_:
        raise TritonModelException("cannot serialize bytes tensor: invalid datatype")
    return np.frombuffer(_ipc.serialize_bytes(input_tensor), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    """Decode Triton's BYTES wire encoding into a 1-D object array of ``bytes``."""
    return _ipc.deserialize_bytes(encoded_tensor)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input tensor named ``name``, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The response's output tensor named ``name``, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``input`` entry of a config dict with this name, or None."""
    for entry in model_config.get("input", ()):
        if entry["name"] == name:
            return entry
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``output`` entry of a config dict with this name, or None."""
    for entry in model_config.get("output", ()):
        if entry["name"] == name:
            return entry
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether the config dict sets ``model_transaction_policy { decoupled: true }``."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def triton_to_numpy_type(data_type: int) -> Any:
    """numpy type for a ``TRITONSERVER_DataType`` / config enum code (None if unknown)."""
    return _CODE_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """The ``TRITONSERVER_DataType`` code for a numpy type (None if unsupported)."""
    if data_type in (np.object_, np.bytes_):
        return 13
    for code, np_type in _CODE_TO_NUMPY.items():
        if data_type == np_type:
            return code
    return None


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """numpy type for a config type name such as ``"TYPE_FP32"``."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


# ---------------------------------------------------------------------- requests and responses


def _text(value: Any) -> Any:
    """A name given as ``bytes`` (e.g. read from a BYTES tensor) as ``str``, as the C++
    bindings of python_backend accept it."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def _check_parameters(parameters: Any) -> str:
    if parameters is None:
        return "{}"
    if isinstance(parameters, str):
        return parameters
    if not isinstance(parameters, dict):
        # Triton's text names the C++ type it wanted (typeid(py::dict).name() under GCC)
        raise TritonModelException(f"Expect N8pybind114dictE, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return json.dumps(parameters)


class PreferredMemory:
    """Where BLS outputs should be placed (tritonx always uses CPU memory)."""

    def __init__(self, preferred_memory_type: int = 0, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """A request's trace handle: ``request.trace()`` of a request the model received.

    Pass it to a BLS request (``pb_utils.InferenceRequest(..., trace=request.trace())``) to
    trace that call as a child of the received request (``parent_id`` = its trace id), as
    Triton does; a BLS request given no trace is not traced.
    """

    def __init__(self, parent: Any = None) -> None:
        #: what the server knows the received request by (None: a handle of no request)
        self._parent = parent

    def get_context(self, mode: str = "opentelemetry") -> str | None:
        """The trace context (None: tracing is off)."""
        return None


class InferenceRequest:
    """A request: one the model received, or a BLS request it builds to call another model.

    ``InferenceRequest(model_name=..., inputs=[...], requested_output_names=[...])`` then
    ``.exec()``, ``.exec(decoupled=True)`` or ``await .async_exec()``.
    """

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        model_name: str = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        if not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        self._request_id = _text(request_id)
        self._correlation_id = correlation_id
        self._inputs = list(inputs)
        self._requested = [_text(name) for name in requested_output_names]
        self._model_name = _text(model_name)
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._preferred_memory = preferred_memory or PreferredMemory()
        self._trace = trace or InferenceTrace()
        self._parameters = _check_parameters(parameters)
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self._sender: InferenceResponseSender | None = None
        #: asks the server whether the request was cancelled (set on requests a model gets)
        self._cancelled: Callable[[], bool] | None = None
        self._cancel_seen = False

    def inputs(self) -> list[Tensor]:
        """The input tensors."""
        return self._inputs

    def request_id(self) -> str:
        """The request id ("" when the client gave none)."""
        return self._request_id

    def correlation_id(self) -> int | str:
        """The sequence correlation id (0 when not in a sequence)."""
        return self._correlation_id

    def flags(self) -> int:
        """``TRITONSERVER_REQUEST_FLAG_SEQUENCE_START`` / ``_END`` bits."""
        return self._flags

    def set_flags(self, flags: int) -> None:
        """Set the request flags (BLS requests)."""
        self._flags = flags

    def timeout(self) -> int:
        """The request timeout in microseconds (0 = none)."""
        return self._timeout

    def parameters(self) -> str:
        """The request parameters, as a JSON string."""
        return self._parameters

    def trace(self) -> InferenceTrace:
        """The request's trace handle."""
        return self._trace

    def requested_output_names(self) -> list[str]:
        """The output names the client asked for (all configured outputs if none)."""
        return self._requested

    def model_name(self) -> str:
        """The model the (BLS) request is for."""
        return self._model_name

    def model_version(self) -> int:
        """The model version the (BLS) request is for (-1 = latest)."""
        return self._model_version

    def get_response_sender(self) -> InferenceResponseSender:
        """The sender of this request's responses (decoupled models, and since 24.06 any)."""
        if self._sender is None:
            raise TritonModelException(
                "Unable to send response. Response sender has no reference to the decoupled "
                "state of the model."
            )
        self._sender._taken = True
        return self._sender

    def is_cancelled(self) -> bool:
        """Whether the request was cancelled (its client went away); asks the server each
        time until it says yes."""
        if not self._cancel_seen and self._cancelled is not None and self._cancelled():
            self._cancel_seen = True
        return self._cancel_seen

    def set_release_flags(self, flags: int) -> None:
        """``TRITONSERVER_REQUEST_RELEASE_ALL`` (the default) or ``_RESCHEDULE``: run the
        request again in a later batch (models with ``sequence_batching {
        iterative_sequence: true }``; set it before ``execute`` returns, and return None for
        the request from a non-decoupled model)."""
        self._release_flags = flags

    def exec(self, decoupled: bool = False) -> Any:
        """Run this BLS request and wait: an :class:`InferenceResponse`, or with
        ``decoupled=True`` an iterator over the responses (errors are response errors)."""
        return _bls_runtime().infer(self, decoupled)

    async def async_exec(self, decoupled: bool = False) -> Any:
        """Awaitable :meth:`exec`, run in the event loop's executor."""
        loop = asyncio.get_running_loop()
        runtime = _bls_runtime()
        return await loop.run_in_executor(None, functools.partial(runtime.infer, self, decoupled))

    def __repr__(self) -> str:
        return f"InferenceRequest(model_name={self._model_name!r}, id={self._request_id!r})"


class InferenceResponse:
    """A response: output tensors, or an error (``InferenceResponse(error=TritonError(...))``)."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | str | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        if isinstance(error, str):
            error = TritonError(error)
        for tensor in output_tensors or ():
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    f"Expected a list of 'Tensor' objects as output_tensors, found type "
                    f"'{type(tensor)}'."
                )
        self._outputs = list(output_tensors or ())
        self._error = error
        self._parameters = _check_parameters(parameters)

    def output_tensors(self) -> list[Tensor]:
        """The output tensors."""
        return self._outputs

    def has_error(self) -> bool:
        """Whether the response carries an error."""
        return self._error is not None

    def error(self) -> TritonError | None:
        """The response's error, or None."""
        return self._error

    def parameters(self) -> str:
        """The response parameters, as a JSON string."""
        return self._parameters

    def __repr__(self) -> str:
        if self._error is not None:
            return f"InferenceResponse(error={self._error!r})"
        return f"InferenceResponse({[t.name() for t in self._outputs]})"


class InferenceResponseSender:
    """Sends one request's responses: ``send(response, flags=...)``; the last call carries
    ``TRITONSERVER_RESPONSE_COMPLETE_FINAL``."""

    def __init__(
        self,
        deliver: Callable[[InferenceResponse | None, bool], None],
        decoupled: bool,
        is_cancelled: Callable[[], bool] | None = None,
    ) -> None:
        self._deliver = deliver
        self._decoupled = decoupled
        self._is_cancelled = is_cancelled
        self._lock = threading.Lock()
        self._closed = False
        self._sent = 0
        #: whether the model took it (``request.get_response_sender()``)
        self._taken = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        """Send ``response``; ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL`` ends the request."""
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"Expected an 'InferenceResponse' object, found type '{type(response)}'."
            )
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than "
                        "one response."
                    )
                if response is None and final and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete "
                        "final before sending a response."
                    )
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            if final:
                self._closed = True
            if response is not None:
                self._sent += 1
            self._deliver(response, final)

    def is_cancelled(self) -> bool:
        """Whether the client cancelled the request."""
        return bool(self._is_cancelled and self._is_cancelled())

    def _count_final(self, response: InferenceResponse) -> None:
        """A non-decoupled ``execute`` returned ``response`` for this request: count it as
        the final response (Triton's checks: not a second response, not after the final
        flag), without delivering it."""
        with self._lock:
            if self._sent > 0:
                raise TritonModelException(
                    "Unable to send response. Non-decoupled model cannot send more than "
                    "one response."
                )
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            self._closed = True
            self._sent += 1

    def _close(self) -> None:
        with self._lock:
            self._closed = True

    @property
    def closed(self) -> bool:
        """Whether the final flag was sent."""
        return self._closed


class ResponseIterator:
    """The responses of a decoupled BLS request, as they arrive (``exec(decoupled=True)``)."""

    _END = object()

    def __init__(self, cancel: Callable[[], None] | None = None) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._cancel = cancel
        self._done = False

    def _put(self, response: InferenceResponse, final: bool) -> None:
        self._queue.put(response)
        if final:
            self._queue.put(self._END)

    def __iter__(self) -> Iterator[InferenceResponse]:
        return self

    def __next__(self) -> InferenceResponse:
        if self._done:
            raise StopIteration
        item = self._queue.get()
        if item is self._END:
            self._done = True
            raise StopIteration
        return item

    def cancel(self) -> None:
        """Ask the server to stop the request (best effort)."""
        if self._cancel is not None:
            self._cancel()


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
        _runtime().log(int(level), str(message))

    @staticmethod
    def log_info(message: str) -> None:
        """Log at INFO level."""
        _runtime().log(LogLevel.INFO, str(message))

    @staticmethod
    def log_warn(message: str) -> None:
        """Log at WARNING level."""
        _runtime().log(LogLevel.WARNING, str(message))

    @staticmethod
    def log_error(message: str) -> None:
        """Log at ERROR level."""
        _runtime().log(LogLevel.ERROR, str(message))

    @staticmethod
    def log_verbose(message: str) -> None:
        """Log at VERBOSE (debug) level."""
        _runtime().log(LogLevel.VERBOSE, str(message))


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
        _runtime().metric_family(name, description, kind)

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
        self._runtime = _runtime()
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
    _runtime().control("load", model_name=model_name, config=config, files=files or {})


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload a model; explicit model-control mode only."""
    _runtime().control("unload", model_name=model_name, unload_dependents=unload_dependents)


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
    return bool(_runtime().control("ready", model_name=model_name, model_version=model_version))


# ---------------------------------------------------------------------- auto-complete


class ModelConfig:
    """The config ``auto_complete_config(auto_complete_model_config)`` receives and returns."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        config = json.loads(model_config) if isinstance(model_config, str) else model_config
        config.setdefault("input", [])
        config.setdefault("output", [])
        config.setdefault("max_batch_size", 0)
        self._model_config: dict[str, Any] = config

    def as_dict(self) -> dict[str, Any]:
        """The configuration as a dict."""
        return self._model_config

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Set ``max_batch_size`` (error if the config already has a larger one)."""
        current = int(self._model_config.get("max_batch_size", 0))
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._name}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        """Use the dynamic batcher unless another scheduler is configured."""
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def _add_io(self, kind: str, entry: dict[str, Any], allowed: tuple[str, ...]) -> None:
        name = entry.get("name", "")
        for prop in entry:
            if prop not in allowed:
                listing = ", ".join(f"'{p}'" for p in allowed[:-1]) + f" and '{allowed[-1]}'"
                raise ValueError(
                    f"{kind} '{name}' in auto-complete-config function for model "
                    f"'{self._name}' contains property other than {listing}."
                )
        if "name" not in entry:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{self._name}' is missing "
                "'name' property."
            )
        for prop in ("data_type", "dims"):
            if prop not in entry:
                raise ValueError(
                    f"{kind} '{name}' in auto-complete-config function for model "
                    f"'{self._name}' is missing '{prop}' property."
                )
        for current in self._model_config[kind]:
            if current["name"] != name:
                continue
            ctype = current.get("data_type", "TYPE_INVALID")
            if ctype != "TYPE_INVALID" and ctype != entry["data_type"]:
                raise ValueError(
                    f"unable to load model '{self._name}', configuration expects datatype "
                    f"{ctype} for {kind} '{name}', model provides {entry['data_type']}"
                )
            cdims = [int(d) for d in current.get("dims", [])]
            if cdims and cdims != [int(d) for d in entry["dims"]]:
                raise ValueError(
                    f"model '{self._name}', tensor '{name}': the model expects dims "
                    f"{list(entry['dims'])} but the model configuration specifies dims {cdims}"
                )
            if (
                "optional" in current
                and "optional" in entry
                and current["optional"] != entry["optional"]
            ):
                raise ValueError(
                    f"model '{self._name}', tensor '{name}': the model expects optional "
                    f"{entry['optional']} but the model configuration specifies optional "
                    f"{current['optional']}"
                )
            current["data_type"] = entry["data_type"]
            current["dims"] = list(entry["dims"])
            if "optional" in entry:
                current["optional"] = entry["optional"]
            return
        self._model_config[kind].append(dict(entry))

    def add_input(self, input: dict[str, Any]) -> None:
        """Add an input ``{name, data_type, dims[, optional]}`` (checked against the config)."""
        self._add_io("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        """Add an output ``{name, data_type, dims}`` (checked against the config)."""
        self._add_io("output", output, ("name", "data_type", "dims"))

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        """Set ``model_transaction_policy`` (``{"decoupled": bool}``)."""
        for prop in transaction_policy_dict:
            if prop != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            new = bool(transaction_policy_dict["decoupled"])
            if "decoupled" in policy and bool(policy["decoupled"]) != new:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = new
