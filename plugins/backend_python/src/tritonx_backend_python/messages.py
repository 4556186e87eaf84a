"""The messages the server and a model's worker process exchange.

One frozen dataclass per message kind, dispatched on its type. Records repeated inside a
message (a tensor, a request's metadata, a response) are typed tuples.

On the wire (:func:`send` / :func:`recv`, over the worker's socket pairs; see
:mod:`tritonx_backend_python._ipc` for how tensors travel) a message is pickled
(:func:`dumps` / :func:`loads`) as its number (``wire_tag``) followed by its field values: a
plain tuple, so neither end looks a class up by name, which would cost more than everything
else pickle does for a small message. A message holds at most one shared-memory
:class:`~tritonx_backend_python._ipc.Segment` (:func:`segment_of` finds it); its descriptor goes
beside the pickle.

Like ``_ipc`` this module needs only the standard library, numpy and ``pb_utils``: worker
processes running in a model's own environment (``EXECUTION_ENV_PATH``) import it.
"""

from __future__ import annotations

import operator
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from tritonx_backend_python import _ipc, pb_utils
from tritonx_backend_python._ipc import Segment, TensorDesc

#: A pb_utils error on the wire: (message, ``TritonError`` code).
WireError = tuple[str, int]
#: One response on the wire: (segment, tensors, error, parameters JSON).
WireResponse = tuple[Segment | None, list[TensorDesc[str]], WireError | None, str]
#: A batched tensor's name: (index of its request in the batch, tensor name).
BatchKey = tuple[int, str]
#: One request of an :class:`Execute`: (key, id, correlation id, flags, timeout in µs,
#: parameters JSON, requested output names).
RequestMeta = tuple[int, str, int | str, int, int, str, list[str]]
#: One response of a :class:`Done`: (error, parameters JSON).
ResponseMeta = tuple[WireError | None, str]

_PROTOCOL = pickle.HIGHEST_PROTOCOL


class Message:
    """Base of every message."""

    __slots__ = ()

    #: the message's number on the wire (its index in :data:`KINDS`)
    wire_tag: ClassVar[int]
    #: the message's field values, in order
    wire_values: ClassVar[Callable[[Any], tuple[Any, ...]]]


# ---------------------------------------------------------------------- server -> worker


@dataclass(frozen=True, slots=True)
class Init(Message):
    """Import ``model.py`` and call ``initialize``; answered by :class:`Ready` or
    :class:`InitFailed` (after which the worker exits)."""

    model_path: str
    args: dict[str, str]
    decoupled: bool
    shm_prefix: str
    #: (host, port, wait): listen for a debugger (debugpy) there first, and wait for it
    debug: tuple[str, int, bool] | None = None


@dataclass(frozen=True, slots=True)
class AutoComplete(Message):
    """Run the model's ``auto_complete_config`` on ``config`` (JSON); answered by
    :class:`AutoCompleted`."""

    model_path: str
    config: str


@dataclass(frozen=True, slots=True)
class Execute(Message):
    """Run one batch; answered by :class:`Done`."""

    batch_id: int
    segment: Segment | None
    tensors: list[TensorDesc[BatchKey]]
    requests: list[RequestMeta]


@dataclass(frozen=True, slots=True)
class Finalize(Message):
    """Call ``finalize`` and exit; answered by :class:`Finalized`."""


@dataclass(frozen=True, slots=True)
class BlsReply(Message):
    """A response to the model's :class:`BlsCall` ``call_id``."""

    call_id: int
    response: WireResponse
    final: bool


@dataclass(frozen=True, slots=True)
class RpcReply(Message):
    """The answer to the model's :class:`RpcCall` ``call_id``: a value or an error text."""

    call_id: int
    value: Any
    error: str | None


@dataclass(frozen=True, slots=True)
class ReadyCheck(Message):
    """Call the model's ``is_ready()`` (on the control socket, beside a running
    ``execute``); answered by :class:`ReadyAnswer`."""

    call_id: int


# ---------------------------------------------------------------------- worker -> server


@dataclass(frozen=True, slots=True)
class Ready(Message):
    """``initialize`` returned."""

    pid: int
    #: the model defines ``is_ready()`` (answers :class:`ReadyCheck`)
    probes: bool = False


@dataclass(frozen=True, slots=True)
class ReadyAnswer(Message):
    """The answer to :class:`ReadyCheck` ``call_id``: None (ready) or why not."""

    call_id: int
    reason: str | None


@dataclass(frozen=True, slots=True)
class InitFailed(Message):
    """``initialize`` (or importing the model) raised; the worker exits after sending it."""

    error: str
    traceback: str


@dataclass(frozen=True, slots=True)
class AutoCompleted(Message):
    """The completed config (JSON), or the error that stopped it."""

    config: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class Finalized(Message):
    """``finalize`` returned (its errors went to the log)."""


@dataclass(frozen=True, slots=True)
class Done(Message):
    """A batch finished: ``error`` (the batch failed), or one response per request (tensors
    named ``(index, name)``), or no responses (decoupled models send them with :class:`Send`)."""

    batch_id: int
    segment: Segment | None
    tensors: list[TensorDesc[BatchKey]]
    responses: list[ResponseMeta] | None
    error: str | None
    #: how many messages the worker had sent on the control socket by then
    sent: int
    #: the indexes of the requests the model released with ``RESCHEDULE``
    rescheduled: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Send(Message):
    """A decoupled model's response to request ``key`` (``None``: only the final flag)."""

    key: int
    response: WireResponse | None
    final: bool


@dataclass(frozen=True, slots=True)
class BlsCall(Message):
    """A BLS request from the model, answered by :class:`BlsReply` messages."""

    call_id: int
    model_name: str
    model_version: int
    segment: Segment | None
    tensors: list[TensorDesc[str]]
    requested: list[str]
    request_id: str
    correlation_id: int | str
    flags: int
    timeout: int
    parameters: str
    decoupled: bool
    #: the key of the received request whose trace this call was given (0: none)
    parent: int


@dataclass(frozen=True, slots=True)
class RpcCall(Message):
    """``load`` / ``unload`` / ``ready`` / ``metric_value`` for the model; answered by
    :class:`RpcReply`."""

    call_id: int
    op: str
    kwargs: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Log(Message):
    """A model log line (``pb_utils.LogLevel``)."""

    level: int
    message: str


@dataclass(frozen=True, slots=True)
class NewMetricFamily(Message):
    """``pb_utils.MetricFamily(...)``."""

    name: str
    description: str
    kind: int


@dataclass(frozen=True, slots=True)
class MetricUpdate(Message):
    """``create`` / ``increment`` / ``set`` / ``observe`` on one custom metric."""

    family: str
    labels: tuple[tuple[str, str], ...]
    op: str
    value: Any


# ---------------------------------------------------------------------- the wire

#: Every message class; a message's ``wire_tag`` is its index here.
KINDS: tuple[type[Message], ...] = (
    Init,
    AutoComplete,
    Execute,
    Finalize,
    BlsReply,
    RpcReply,
    Ready,
    InitFailed,
    AutoCompleted,
    Finalized,
    Done,
    Send,
    BlsCall,
    RpcCall,
    Log,
    NewMetricFamily,
    MetricUpdate,
    ReadyCheck,
    ReadyAnswer,
)
_MAKE: tuple[Callable[..., Message], ...] = KINDS


def _values_getter(cls: Any) -> Callable[[Any], tuple[Any, ...]]:
    names = [f.name for f in fields(cls)]
    if len(names) > 1:
        return operator.attrgetter(*names)
    if names:
        get = operator.attrgetter(names[0])
        return lambda message: (get(message),)
    return lambda message: ()


for _tag, _cls in enumerate(KINDS):
    _cls.wire_tag = _tag
    _cls.wire_values = _values_getter(_cls)


def dumps(message: Message) -> bytes:
    """A message as bytes: its tag and field values, pickled."""
    cls = type(message)
    return pickle.dumps((cls.wire_tag, *cls.wire_values(message)), protocol=_PROTOCOL)


def loads(data: bytes, fds: Sequence[int] = ()) -> Message:
    """The message :func:`dumps` made ``data`` from; ``fds``: the descriptors that came with
    it (its segment's, attached to it; closed if the message cannot use them).

    :raises ValueError: the descriptors do not match the message (any other exception: the
        bytes are no message).
    """
    try:
        values = pickle.loads(data)
        message = _MAKE[values[0]](*values[1:])
    except BaseException:
        _ipc.close_fds(fds)
        raise
    segment = segment_of(message)
    if segment is None and not fds:
        return message
    if segment is None or len(fds) != 1:
        _ipc.close_fds(fds)
        raise ValueError(
            f"a {type(message).__name__} message came with {len(fds)} descriptors for "
            f"{int(segment is not None)} shared-memory segment"
        )
    segment.attach(fds[0])
    return message


def segment_of(message: Message) -> Segment | None:
    """The shared-memory segment of ``message`` (None: its tensors, if any, are inline).
    (A message kind that gets a segment field must be added here.)"""
    if isinstance(message, (Execute, Done, BlsCall)):
        return message.segment
    if isinstance(message, (BlsReply, Send)):
        return message.response[0] if message.response is not None else None
    return None


def send(channel: _ipc.Channel, message: Message) -> None:
    """Send ``message`` on ``channel`` with its segment's descriptor. When it cannot be sent
    (the error is raised), its segment goes back to its writer.

    :raises OSError: the peer is gone.
    """
    segment = segment_of(message)
    if segment is None:
        channel.send_bytes(dumps(message))
        return
    try:
        channel.send_bytes(dumps(message), (segment.descriptor(),))
    except BaseException:
        segment.discard()
        raise
    segment.sent()


def recv(channel: _ipc.Channel) -> Message:
    """The next message on ``channel`` (its segment holding the descriptor that came with
    it).

    :raises EOFError: the peer is gone.
    :raises ValueError: what came is no message (any other exception: neither).
    """
    return loads(*channel.recv())


# ---------------------------------------------------------------------- responses


def encode_response(
    response: pb_utils.InferenceResponse | None, writer: _ipc.ShmWriter
) -> WireResponse | None:
    """A pb_utils response for the wire."""
    if response is None:
        return None
    err = response.error()
    error = (err.message(), err.code()) if err is not None else None
    segment, descs = _ipc.pack_tensors(
        ((t.backend_name, t.backend_array, t.backend_datatype) for t in response.output_tensors()),
        writer,
    )
    return (segment, descs, error, response.parameters())


def decode_response(wire: WireResponse) -> pb_utils.InferenceResponse:
    """The inverse of :func:`encode_response`."""
    segment, descs, error, parameters = wire
    tensors = [
        pb_utils.Tensor(name, array, datatype=datatype)
        for name, array, datatype in _ipc.unpack_tensors(segment, descs)
    ]
    err = pb_utils.TritonError(error[0], error[1]) if error is not None else None
    return pb_utils.InferenceResponse(tensors, err, parameters)
