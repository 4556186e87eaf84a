"""The in-memory request and response every part of tritonx speaks.

Transports decode the wire into an :class:`InferenceRequest`, the data plane validates it, a
scheduler hands lists of them to a backend's ``execute``, and the backend answers with one
:class:`InferenceResponse` per request (or, for decoupled models, sends any number of them
through ``request.response_sender``). Tensors are always ``numpy.ndarray``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tritonx.errors import TritonXError

if TYPE_CHECKING:
    from tritonx._dataplane.trace import RequestTrace

#: Request flags, as Triton's ``TRITONSERVER_RequestFlag``.
SEQUENCE_START = 1
SEQUENCE_END = 2

#: Release flags a backend sets on ``request.release_flags`` during ``execute``, as Triton's
#: ``TRITONSERVER_RequestReleaseFlag``: the request is done (the default), or it goes back to
#: its model's queue for another execution (models with ``sequence_batching {
#: iterative_sequence: true }`` only; Triton's request rescheduling).
REQUEST_RELEASE_ALL = 1
REQUEST_RELEASE_RESCHEDULE = 2


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A tensor as model metadata describes it: name, protocol datatype, shape (-1 = any)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(slots=True, eq=False)
class InferenceRequest:
    """One inference request: a mapping of input names to numpy arrays plus its options.

    :param model_name: the model asked for.
    :param model_version: the version asked for; ``None`` means the policy's latest ready one.
    :param inputs: input tensors by name.
    :param id: the client's request id, echoed in the response.
    :param parameters: request parameters (strings, ints, floats, bools) for the model.
    :param requested_outputs: names of the outputs to return; ``None`` returns all of them.
    :param output_parameters: per-output options from the client (``binary_data``,
        ``classification``), read by the transports.
    :param correlation_id: sequence id (0 or "" when the request is not in a sequence).
    :param flags: :data:`SEQUENCE_START` / :data:`SEQUENCE_END` bits.
    :param priority: scheduling priority (0 = the model's default level).
    :param timeout_us: queue timeout in microseconds (0 = the model's default).

    A transport calls :meth:`cancel` when the client went away (HTTP disconnect, gRPC
    cancel or deadline); schedulers drop a cancelled request before it executes and backends
    may poll :meth:`is_cancelled` (python_backend's ``request.is_cancelled()``).

    A backend reschedules a request (Triton's ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``) by
    setting :attr:`release_flags` to :data:`REQUEST_RELEASE_RESCHEDULE` before ``execute``
    returns: it is executed again in a later batch, with its sequence's state, and answered
    by a later execution (a non-decoupled model's entry for it in the returned list is
    ignored). Only models with ``sequence_batching { iterative_sequence: true }`` take it;
    elsewhere the request fails with Triton's error.
    """

    model_name: str
    inputs: dict[str, np.ndarray]
    model_version: int | None = None
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    requested_outputs: tuple[str, ...] | None = None
    output_parameters: dict[str, dict[str, Any]] = field(default_factory=dict)
    correlation_id: int | str = 0
    flags: int = 0
    priority: int = 0
    timeout_us: int = 0
    #: Set by the core for decoupled models; backends send responses through it.
    response_sender: ResponseSender | None = None
    #: Set by the core after validation: the batch size (1 for models without batching).
    batch_size: int = 1
    #: True once :meth:`cancel` was called (from any thread).
    cancelled: bool = False
    #: The request's trace when it is traced (set by the transport that sampled it, or from
    #: a parent request's ``trace.spawn_child()``); None otherwise.
    trace: RequestTrace | None = None
    #: Set by an ensemble on its steps' requests (Triton's secondary statistics): called on
    #: the event loop with the compute input, infer and output durations (ns) the step's
    #: model records for this request, which the ensemble's own statistics sum up.
    compute_sink: Callable[[int, int, int], None] | None = None
    #: Set by a backend during ``execute``: :data:`REQUEST_RELEASE_ALL` (done) or
    #: :data:`REQUEST_RELEASE_RESCHEDULE` (execute it again); the core resets it.
    release_flags: int = REQUEST_RELEASE_ALL

    def cancel(self) -> None:
        """Mark the request cancelled: its client is gone, its answer will not be read."""
        self.cancelled = True

    def is_cancelled(self) -> bool:
        """Whether the request was cancelled (python_backend's ``is_cancelled()``)."""
        return self.cancelled

    def __getitem__(self, name: str) -> np.ndarray:
        return self.inputs[name]

    def get_response_sender(self) -> ResponseSender:
        """The sender of a decoupled model's responses (raises for non-decoupled models)."""
        if self.response_sender is None:
            raise TritonXError("this model is not decoupled: return responses from execute()")
        return self.response_sender


@dataclass(slots=True, eq=False)
class InferenceResponse:
    """The answer to one request: output tensors by name, or an error.

    ``model_name``, ``model_version`` and ``id`` are filled in by the core.
    """

    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    error: TritonXError | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    model_name: str = ""
    model_version: int = 0
    id: str = ""
    #: For streamed responses: whether this is the last response of its request.
    final: bool = True
    #: True for the bare "final" flag a decoupled model sent without a response; transports
    #: forward it only when the client asked for empty final responses.
    empty: bool = False

    @classmethod
    def failed(cls, error: BaseException) -> InferenceResponse:
        """A response carrying only an error (a non-TritonXError becomes INTERNAL)."""
        return cls(error=TritonXError.wrap(error))

    def raise_for_error(self) -> InferenceResponse:
        """Raise the response's error, if any; return the response otherwise."""
        if self.error is not None:
            raise self.error
        return self


class ResponseSender:
    """Sends a decoupled model's responses for one request, from any thread.

    Mirrors python_backend's ``InferenceResponseSender``: call :meth:`send` zero or more
    times, and exactly once with ``final=True`` (with or without a response) when done.
    """

    __slots__ = ("_closed", "_deliver")

    def __init__(self, deliver: Callable[[InferenceResponse | None, bool], None]) -> None:
        self._deliver = deliver
        self._closed = False

    def send(self, response: InferenceResponse | None = None, *, final: bool = False) -> None:
        """Send ``response`` (may be ``None`` with ``final=True``: no more responses)."""
        if self._closed:
            raise TritonXError("Unable to send response. Response sender has been closed.")
        if response is None and not final:
            raise TritonXError("Response must be set when the final flag is not set")
        if final:
            self._closed = True
        self._deliver(response, final)

    @property
    def is_closed(self) -> bool:
        """True once the final flag has been sent."""
        return self._closed


class ModelState(enum.Enum):
    """A model version's state, as Triton's repository index reports it."""

    UNKNOWN = "UNKNOWN"
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass(frozen=True, slots=True)
class ModelEvent:
    """A model version changed state (passed to the ``tritonx_model_event`` hook)."""

    model_name: str
    version: int
    state: ModelState
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RepositoryEntry:
    """One row of the repository index: a model, and a version's state when it has one."""

    name: str
    version: int | None = None
    state: ModelState | None = None
    reason: str = ""
    #: tritonx only (``--model-load-on-demand``): bytes the model added to the server's
    #: resident memory when it loaded (None: not measured, or not loaded)
    memory_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    """What ``/v2/models/<m>`` and gRPC ModelMetadata return."""

    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    """What ``/v2`` and gRPC ServerMetadata return."""

    name: str
    version: str
    extensions: tuple[str, ...]


__all__ = [
    "REQUEST_RELEASE_ALL",
    "REQUEST_RELEASE_RESCHEDULE",
    "SEQUENCE_END",
    "SEQUENCE_START",
    "InferenceRequest",
    "InferenceResponse",
    "ModelEvent",
    "ModelMetadata",
    "ModelState",
    "RepositoryEntry",
    "ResponseSender",
    "ServerMetadata",
    "TensorSpec",
]
