"""``pb_utils`` requests and responses: :class:`InferenceRequest` (received, or built for a
BLS call), :class:`InferenceResponse`, the :class:`InferenceResponseSender` of a received
request, the :class:`ResponseIterator` of a decoupled BLS call, and the small
:class:`InferenceTrace` and :class:`PreferredMemory` handles.

Part of the split of :mod:`tritonx_backend_python.pb_utils`, which re-exports these names.
The names that start with ``backend_`` are how this backend's runner and worker deal with
these objects (a received request's sender and cancellation check, its release flags, a
BLS iterator's feed...): they are not part of Triton's ``pb_utils`` API, whose names never
start so.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tritonx_backend_python._pb_base import (
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    TritonError,
    TritonModelException,
    check_parameters,
    is_int,
    is_sequence,
    refused,
    text_arg,
)
from tritonx_backend_python._pb_runtime import bls_runtime
from tritonx_backend_python._pb_tensor import Tensor


class PreferredMemory:
    """Where BLS outputs should be placed (tritonx always uses CPU memory)."""

    def __init__(self, preferred_memory_type: int = 0, preferred_device_id: int = 0) -> None:
        if not (is_int(preferred_memory_type) and is_int(preferred_device_id)):
            raise refused(
                "PreferredMemory(preferred_memory_type: MemoryType, preferred_device_id: int = 0)",
                (preferred_memory_type, preferred_device_id),
            )
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """A request's trace handle: ``request.trace()`` of a request the model received.

    Pass it to a BLS request (``pb_utils.InferenceRequest(..., trace=request.trace())``) to
    trace that call as a child of the received request (``parent_id`` = its trace id), as
    Triton does; a BLS request given no trace is not traced.
    """

    def __init__(self, parent: Any = None) -> None:
        #: what the server knows the received request by (None: a handle of no request): the
        #: parent of a BLS call given this trace; for the backend's runtimes, not part of
        #: Triton's API
        self.backend_parent = parent

    def get_context(self, mode: str = "opentelemetry") -> str | None:
        """The trace context (None: tracing is off)."""
        return None


class _Required:
    """The default of an argument pybind's signature gives none (refused when left out)."""

    def __repr__(self) -> str:
        return "<missing>"


_REQUIRED: Any = _Required()

# how Triton's pybind layer writes these constructors in its TypeError
_REQUEST_SIGNATURE = (
    "c_python_backend_utils.InferenceRequest(request_id: str = '', correlation_id: object = 0, "
    "inputs: list[c_python_backend_utils.Tensor], requested_output_names: list[str], "
    "model_name: str, model_version: int = -1, flags: int = 0, timeout: int = 0, "
    "preferred_memory: c_python_backend_utils.PreferredMemory = <PreferredMemory>, "
    "trace: c_python_backend_utils.InferenceTrace = <InferenceTrace>, parameters: object = None)"
)
_RESPONSE_SIGNATURE = (
    "c_python_backend_utils.InferenceResponse(output_tensors: list[c_python_backend_utils."
    "Tensor] = [], error: c_python_backend_utils.TritonError = None, parameters: object = None)"
)
_TEXT = (str, bytes, bytearray)


def _request_args_convert(args: tuple[Any, ...]) -> bool:
    """Whether pybind converts an ``InferenceRequest``'s arguments to its C++ parameters (the
    values the constructor checks itself, correlation id and parameters, aside)."""
    (
        request_id,
        correlation_id,
        inputs,
        requested,
        model_name,
        model_version,
        flags,
        timeout,
        preferred_memory,
        trace,
        _parameters,
    ) = args
    return (
        isinstance(request_id, _TEXT)
        and correlation_id is not None
        and isinstance(model_name, _TEXT)
        and is_sequence(inputs)
        and all(isinstance(tensor, Tensor) for tensor in inputs)
        and is_sequence(requested)
        and all(isinstance(name, _TEXT) for name in requested)
        and is_int(model_version)
        and is_int(flags)
        and 0 <= flags < 1 << 32
        and is_int(timeout)
        and 0 <= timeout < 1 << 64
        and (preferred_memory is None or isinstance(preferred_memory, PreferredMemory))
        and (trace is None or isinstance(trace, InferenceTrace))
    )


class InferenceRequest:
    """A request: one the model received, or a BLS request it builds to call another model.

    ``InferenceRequest(model_name=..., inputs=[...], requested_output_names=[...])`` then
    ``.exec()``, ``.exec(decoupled=True)`` or ``await .async_exec()``.
    """

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] = _REQUIRED,
        requested_output_names: Sequence[str] = _REQUIRED,
        model_name: str = _REQUIRED,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        args = (
            request_id,
            correlation_id,
            inputs,
            requested_output_names,
            model_name,
            model_version,
            flags,
            timeout,
            preferred_memory,
            trace,
            parameters,
        )
        if not _request_args_convert(args):
            raise refused(_REQUEST_SIGNATURE, args)
        # Triton's order: the parameters, then the correlation id
        self._parameters = check_parameters(parameters)
        if not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        self._request_id = text_arg(request_id, _REQUEST_SIGNATURE, args)
        self._correlation_id = correlation_id
        self._inputs = list(inputs)
        self._requested = [
            n if type(n) is str else text_arg(n, _REQUEST_SIGNATURE, args)
            for n in requested_output_names
        ]
        self._model_name = text_arg(model_name, _REQUEST_SIGNATURE, args)
        self._model_version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._preferred_memory = preferred_memory or PreferredMemory()
        self._trace = trace or InferenceTrace()
        # plain attributes, not properties: the runner reads them for every request. For the
        # backend's runner and worker, not part of Triton's API:
        #: the flags ``set_release_flags`` set (``..._RESCHEDULE``: run the request again)
        self.backend_release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        #: the request's sender (the runner gives one to each request it passes ``execute``)
        self.backend_sender: InferenceResponseSender | None = None
        #: asks the server whether the request was cancelled (set on requests a model gets)
        self.backend_cancelled: Callable[[], bool] | None = None
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
        if self.backend_sender is None:
            raise TritonModelException(
                "Unable to send response. Response sender has no reference to the decoupled "
                "state of the model."
            )
        self.backend_sender.backend_taken = True
        return self.backend_sender

    def is_cancelled(self) -> bool:
        """Whether the request was cancelled (its client went away); asks the server each
        time until it says yes."""
        if (
            not self._cancel_seen
            and self.backend_cancelled is not None
            and self.backend_cancelled()
        ):
            self._cancel_seen = True
        return self._cancel_seen

    def set_release_flags(self, flags: int) -> None:
        """``TRITONSERVER_REQUEST_RELEASE_ALL`` (the default) or ``_RESCHEDULE``: run the
        request again in a later batch (models with ``sequence_batching {
        iterative_sequence: true }``; set it before ``execute`` returns, and return None for
        the request from a non-decoupled model)."""
        self.backend_release_flags = flags

    def exec(self, decoupled: bool = False) -> Any:
        """Run this BLS request and wait: an :class:`InferenceResponse`, or with
        ``decoupled=True`` an iterator over the responses (errors are response errors)."""
        return bls_runtime().infer(self, decoupled)

    async def async_exec(self, decoupled: bool = False) -> Any:
        """Awaitable :meth:`exec`, run in the event loop's executor."""
        loop = asyncio.get_running_loop()
        runtime = bls_runtime()
        return await loop.run_in_executor(None, functools.partial(runtime.infer, self, decoupled))

    def __repr__(self) -> str:
        return f"InferenceRequest(model_name={self._model_name!r}, id={self._request_id!r})"


class InferenceResponse:
    """A response: output tensors, or an error (``InferenceResponse(error=TritonError(...))``)."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] = (),
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        if not (
            (error is None or isinstance(error, TritonError))
            and is_sequence(output_tensors)
            and all(isinstance(tensor, Tensor) for tensor in output_tensors)
        ):
            raise refused(_RESPONSE_SIGNATURE, (output_tensors, error, parameters))
        self._outputs = list(output_tensors)
        self._error = error
        self._parameters = check_parameters(parameters)

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
        #: whether the model took it (``request.get_response_sender()``); for the backend's
        #: runner, not part of Triton's API
        self.backend_taken = False

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

    def backend_count_final(self, response: InferenceResponse) -> None:
        """A non-decoupled ``execute`` returned ``response`` for this request: count it as
        the final response (Triton's checks: not a second response, not after the final
        flag), without delivering it. For the backend's runner, not part of Triton's API."""
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

    def backend_close(self) -> None:
        """Refuse any further response (``execute`` failed: the runner answers the request).
        For the backend's runner, not part of Triton's API."""
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

    def backend_put(self, response: InferenceResponse, final: bool) -> None:
        """Hand the iterator the call's next response (``final``: its last). For the backend's
        runtimes, which feed it, not part of Triton's API."""
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
