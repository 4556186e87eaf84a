"""The inference pipeline: the steps every inference request takes, whatever its transport.

A frontend (HTTP's ``/infer`` on aiohttp and on its fast path, ``/generate[_stream]``, gRPC's
``ModelInfer`` and ``ModelStreamInfer``) contributes only what its wire needs: how to decode a
body into an :class:`~tritonx.types.InferenceRequest`, how to encode a response, where its
headers are and how it answers. The steps between are written once, here, in this order:

1. :meth:`Pipeline.resolve`: the version string parsed, the one model lookup of the request,
   a decoupled model refused on a unary endpoint (with Triton's message for the transport);
   :meth:`Pipeline.resolve_loaded` awaits the model's load first when models load on demand
   and it is not loaded (a transport that cannot await there calls
   :meth:`Pipeline.resolve_now`, and :meth:`Pipeline.resolve_loaded` later when it says the
   model must load first; :meth:`Pipeline.loaded` for the other lookups of a model).
2. :meth:`Pipeline.decode`: the transport's decoder on the event loop, or in a worker thread
   when the transport says the body is heavy or the decoder raises :class:`Offload`.
3. :meth:`Pipeline.admit`: headers forwarded into request parameters
   (``--*-header-forward-pattern``), the trace sampled (with the transport's receive
   timestamps), the client's ``X-Request-ID`` kept to echo; the result is a :class:`Call`.
4. :meth:`Call.run` (a coroutine) or :meth:`Call.start` (callbacks, for a transport that
   answers without a task): inference, the response encoded (in a worker thread when the
   transport's ``heavy`` says so), the request's shared-memory lease released once the
   outputs are written, ``INFER_RESPONSE_COMPLETE`` stamped on a traced request;
   :meth:`Call.responses` and :meth:`Call.encode` for streams (:func:`is_answer` tells a
   decoupled model's bare final flag apart, :meth:`Call.response_complete` stamps).
5. :meth:`Call.cancel`: the client went away; the request is dropped if it has not run.

The transport sends the answer: :meth:`Call.send` (or :meth:`Call.sending` and
:meth:`Call.sent` around a write it does not await) stamps a traced request's send times
(``HTTP_SEND_START``... ``GRPC_SEND_END``); then it calls :meth:`Call.finish`.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from tritonx._dataplane.header_forward import HeaderForward
from tritonx._dataplane.shared_memory import SharedMemoryUse, decode_in_thread
from tritonx._dataplane.trace import Trace
from tritonx.errors import NotLoaded, unsupported
from tritonx.types import InferenceRequest, InferenceResponse
from tritonx.wire import parse_version

if TYPE_CHECKING:
    from tritonx._dataplane.shared_memory import SharedMemoryManager
    from tritonx._dataplane.trace import TraceManager
    from tritonx.config import ModelConfig

#: Triton's refusal of a decoupled model on a unary endpoint, by transport.
DECOUPLED_MESSAGES = {
    "http": "HTTP end point doesn't support models with decoupled transaction policy",
    "grpc": "ModelInfer RPC doesn't support models with decoupled transaction policy",
    "inprocess": "infer() doesn't support models with decoupled transaction policy: use infer_stream()",
}

T = TypeVar("T")


class ServedModel(Protocol):
    """A ready model version, resolved once for one request (:meth:`Pipeline.resolve`)."""

    #: the model's name
    name: str
    #: the version requests go to
    version: int
    #: its completed, normalized config
    config: ModelConfig

    @property
    def decoupled(self) -> bool:
        """Whether the model is decoupled (its responses must be streamed)."""
        ...

    def labels(self, output: str) -> list[str] | None:
        """The classification labels of ``output`` (its ``label_filename``), or None."""
        ...


class DataPlaneView(Protocol):
    """The server's data plane as the pipeline calls it (the server's own implements it;
    a frontend plugin gets a :class:`Pipeline` from :meth:`tritonx.handle.ServerHandle.pipeline`
    and never builds one)."""

    #: the client shared-memory regions (system and CUDA) both transports read and write
    shared_memory: SharedMemoryManager
    #: trace settings and sampling
    tracer: TraceManager

    def resolve(self, name: str, version: int | None = None) -> ServedModel:
        """The ready version a request for ``name`` goes to (raises NOT_FOUND, UNAVAILABLE,
        or :class:`~tritonx.errors.NotLoaded` when it may load on demand)."""
        ...

    async def loaded(self, call: Callable[[], T]) -> T:
        """``call()`` once the model it looks up has loaded on demand."""
        ...

    async def infer(
        self, request: InferenceRequest, *, protocol: str = ..., model: ServedModel | None = None
    ) -> InferenceResponse:
        """Run one request and return its response; raises on any failure."""
        ...

    def infer_future(
        self, request: InferenceRequest, *, protocol: str = ..., model: ServedModel | None = None
    ) -> asyncio.Future[InferenceResponse] | None:
        """:meth:`infer` from a callback: the queued request's future, or None when it must
        go through :meth:`infer` (traced, cached)."""
        ...

    def infer_stream(
        self, request: InferenceRequest, *, model: ServedModel | None = None
    ) -> AsyncGenerator[InferenceResponse, None]:
        """Run one request and yield its responses (errors after acceptance as responses)."""
        ...


#: A transport's encoded answer (HTTP body and headers, a protobuf message, SSE bytes...).
A = TypeVar("A")
D = TypeVar("D", bound="Decoded")

#: Encodes a response for the transport's wire.
Encode = Callable[[InferenceResponse], A]
#: Whether encoding a response is worth a worker thread (the transport knows its wire's cost).
Heavy = Callable[[InferenceResponse], bool]


class Decoded(Protocol):
    """What the pipeline reads of a transport's decoded request."""

    #: the request for the data plane
    request: InferenceRequest
    #: the client shared-memory regions it reads and writes (None: none); released by the
    #: pipeline once the response is encoded
    shm: SharedMemoryUse | None


class Headers(Protocol):
    """A request's headers (HTTP) or metadata (gRPC), as the pipeline reads them.

    ``get`` and ``in`` take lower-case names; ``items`` gives the names as the client sent
    them (forwarded headers keep those).
    """

    def get(self, name: str, default: None = None, /) -> str | None: ...

    def __contains__(self, name: object, /) -> bool: ...

    def items(self) -> Iterable[tuple[str, str | bytes]]: ...


class Offload(Exception):
    """Raised by a decoder that found the request heavy to convert: the pipeline decodes it
    again, in a worker thread."""


#: A client's correlation id for a request: echoed on its answer (HTTP header, gRPC
#: trailing metadata) when sent as printable ASCII (anything else is not echoed: each
#: transport would decode other bytes its own way).
REQUEST_ID_HEADER = "x-request-id"

#: The timestamps a transport records for a sampled request's arrival (Triton's names).
RECEIVE_STAMPS = {
    "http": ("HTTP_RECV_START", "HTTP_RECV_END"),
    "grpc": ("GRPC_WAITREAD_START", "GRPC_WAITREAD_END"),
}

#: The timestamps that frame the sending of a traced request's answer (Triton's names).
SEND_STAMPS = {
    "http": ("HTTP_SEND_START", "HTTP_SEND_END"),
    "grpc": ("GRPC_SEND_START", "GRPC_SEND_END"),
}


def is_answer(response: InferenceResponse, *, empty_final: bool = False) -> bool:
    """Whether ``response`` is part of the answer: a decoupled model's bare final flag (an
    empty response carrying only ``final=True``) is not, unless the client asked for it
    (``empty_final``: gRPC's ``triton_enable_empty_final_response``)."""
    return empty_final or not response.empty


class Pipeline:
    """The per-request steps of one transport (see the module docstring).

    :param dataplane: the server's data plane.
    :param protocol: ``http`` or ``grpc`` (Triton's messages and trace timestamps differ).
    :param forward: the transport's compiled ``--*-header-forward-pattern`` (None: none).
    """

    __slots__ = ("_received", "_send", "dataplane", "forward", "protocol")

    def __init__(
        self, dataplane: DataPlaneView, protocol: str, forward: HeaderForward | None = None
    ) -> None:
        self.dataplane = dataplane
        self.protocol = protocol
        self.forward = forward
        self._received = RECEIVE_STAMPS.get(protocol)
        self._send = SEND_STAMPS.get(protocol)

    def resolve(
        self, model: str, version: str, *, streaming: bool = False
    ) -> tuple[ServedModel, int | None]:
        """The model version the request goes to, and the version it asked for (None: the
        policy's latest). Unless the endpoint ``streaming`` serves every response, a
        decoupled model is refused with Triton's UNSUPPORTED message for the transport."""
        requested = parse_version(version)
        served = self.dataplane.resolve(model, requested)
        if not streaming and served.decoupled:
            raise unsupported(DECOUPLED_MESSAGES[self.protocol])
        return served, requested

    def resolve_now(
        self, model: str, version: str, *, streaming: bool = False
    ) -> tuple[ServedModel, int | None] | None:
        """:meth:`resolve`, or None when the model must load on demand first
        (``--model-load-on-demand``): :meth:`resolve_loaded` loads it (for a transport that
        cannot await where it resolves)."""
        try:
            return self.resolve(model, version, streaming=streaming)
        except NotLoaded:
            return None

    async def resolve_loaded(
        self, model: str, version: str, *, streaming: bool = False
    ) -> tuple[ServedModel, int | None]:
        """:meth:`resolve`, loading the model first when models load on demand and it is
        not loaded (``--model-load-on-demand``)."""
        try:  # (resolve_now's steps, inline: a loaded model costs no extra call)
            return self.resolve(model, version, streaming=streaming)
        except NotLoaded:
            pass
        return await self.loaded(lambda: self.resolve(model, version, streaming=streaming))

    async def loaded(self, lookup: Callable[[], T]) -> T:
        """``lookup()`` (a lookup of a model: its metadata, its config...); should it find
        the model not loaded while models load on demand, once the model has loaded."""
        return await self.dataplane.loaded(lookup)

    async def decode(self, decode: Callable[..., D], *args: Any, **kwargs: Any) -> D:
        """``decode(*args, **kwargs, offload=True)`` on the event loop; should the decoder
        find the request heavy to convert and raise :class:`Offload`, again in a worker
        thread with ``offload=False`` (a lease the thread takes is released should the
        caller be cancelled meanwhile)."""
        try:
            return decode(*args, offload=True, **kwargs)
        except Offload:
            pass
        return await decode_in_thread(functools.partial(decode, offload=False, **kwargs), *args)

    def admit(
        self,
        served: ServedModel,
        decoded: D,
        headers: Headers | None = None,
        received: tuple[int, int] | None = None,
        *,
        forward: bool = True,
    ) -> Call[D]:
        """Forward the matching headers into the request's parameters (unless ``forward``
        is False: Triton's generate endpoints forward none), sample its trace, stamped
        with ``received`` (perf_counter ns of the request's arrival, start and end), and
        keep the client's ``X-Request-ID`` to echo (:attr:`Call.reply_headers`).

        :raises TritonXError: a forwarded header with a reserved name; the request's
            shared-memory lease is released then.
        """
        request = decoded.request
        trace: Trace | None = None
        try:
            if forward and self.forward is not None and headers is not None:
                self.forward.apply(headers.items(), request.parameters)
            tracer = self.dataplane.tracer
            if tracer.active:
                trace = tracer.sample(
                    request.model_name,
                    headers if tracer.exporter is not None else None,  # type: ignore[arg-type]
                )
                if trace is not None:
                    if received is not None and self._received is not None:
                        trace.capture(self._received[0], received[0])
                        trace.capture(self._received[1], received[1])
                    request.trace = trace.root
        except BaseException:
            _release(decoded)
            raise
        call = Call(self, served, decoded, trace)
        request_id = headers.get(REQUEST_ID_HEADER) if headers is not None else None
        if request_id is not None and request_id.isascii() and request_id.isprintable():
            call.reply_headers = ((REQUEST_ID_HEADER, request_id),)  # else: not echoed
        return call


class Call(Generic[D]):
    """One admitted request: inference, encoding and the release of what it holds.

    :ivar served: the model version it goes to.
    :ivar decoded: the transport's decoded request.
    :ivar trace: its trace when sampled (the transport stamps its send times on it, then
        calls :meth:`finish`), else None.
    :ivar reply_headers: ``(name, value)`` pairs every transport adds to the answer.
    """

    __slots__ = (
        "_answer",
        "_encode",
        "_fail",
        "_future",
        "_heavy",
        "_pipeline",
        "_result",
        "_task",
        "decoded",
        "reply_headers",
        "served",
        "trace",
    )

    def __init__(
        self, pipeline: Pipeline, served: ServedModel, decoded: D, trace: Trace | None
    ) -> None:
        self._pipeline = pipeline
        self.served = served
        self.decoded = decoded
        self.trace = trace
        #: headers (gRPC: trailing metadata) the transport adds to a successful answer
        self.reply_headers: tuple[tuple[str, str], ...] = ()
        self._future: asyncio.Future[InferenceResponse] | None = None
        self._task: asyncio.Task[None] | None = None
        self._answer: Callable[[Any], None] | None = None
        self._fail: Callable[[BaseException], None] | None = None
        self._encode: Encode[Any] | None = None
        self._heavy: Heavy | None = None
        #: :meth:`run`'s encoded response, or its failure
        self._result: object = None

    @property
    def request(self) -> InferenceRequest:
        """The request for the data plane."""
        return self.decoded.request

    # ------------------------------------------------------------------ one response

    async def run(self, encode: Encode[A], heavy: Heavy) -> A:
        """Infer and return the encoded response: :meth:`start`'s steps, driven by a caller
        that awaits (it waits on the scheduler's future itself: no callback hop).
        Cancelling the caller cancels the request; a failure raises, the lease and trace
        closed."""
        try:
            future = self._queue(encode, heavy, self._keep, self._keep_error)
            if future is None:  # traced, or behind the response cache
                await self._infer()
            else:
                try:
                    await future
                except Exception:
                    pass  # the response's failure: _done answers it
                self._done(future)
            task = self._task
            if task is not None:  # encoding in a worker thread
                await task
        except asyncio.CancelledError:
            self.cancel()  # dropped if it has not run yet
            raise
        result: Any = self._result
        self._result = None
        if result.__class__ is _Failure:
            raise result.error
        return result

    def start(
        self,
        encode: Encode[A],
        heavy: Heavy,
        answer: Callable[[A], None],
        fail: Callable[[BaseException], None],
    ) -> None:
        """Queue the request now and call ``answer`` with its encoded response, or ``fail``
        with the error (a response's error, or one raised encoding it), from the event loop,
        once. The lease is released before either is called.

        :raises TritonXError: the request is refused (validation, a full queue, the server
            exiting); the lease is released and the trace finished then.
        """
        future = self._queue(encode, heavy, answer, fail)
        if future is None:  # traced, or behind the response cache: the data plane's coroutine
            self._task = asyncio.get_running_loop().create_task(self._infer())
        else:
            future.add_done_callback(self._done)

    def cancel(self) -> None:
        """The client went away: cancel the request (dropped if it has not run yet); no
        callback of :meth:`start` is called after this."""
        self.decoded.request.cancel()
        self._answer = self._fail = self._encode = self._heavy = None
        if self._future is not None:
            self._future.cancel()
        if self._task is not None:
            self._task.cancel()
        self.finish()

    def _keep(self, result: object) -> None:
        self._result = result

    def _keep_error(self, error: BaseException) -> None:
        self._result = _Failure(error)

    def _queue(
        self,
        encode: Encode[A],
        heavy: Heavy,
        answer: Callable[[A], None],
        fail: Callable[[BaseException], None],
    ) -> asyncio.Future[InferenceResponse] | None:
        """Queue the request on its scheduler and keep what answers it: the scheduler's
        future, or None when the data plane's coroutine must serve it (:meth:`_infer`)."""
        pipeline = self._pipeline
        try:
            future = pipeline.dataplane.infer_future(
                self.decoded.request, protocol=pipeline.protocol, model=self.served
            )
        except BaseException:
            self.finish()
            raise
        self._answer, self._fail, self._encode, self._heavy = answer, fail, encode, heavy
        self._future = future
        return future

    def _done(self, future: asyncio.Future[InferenceResponse]) -> None:
        if future.cancelled():
            return  # cancel() ran: nobody waits
        self._future = None
        error = future.exception()
        if error is not None:
            self._failed(error)
            return
        response = future.result()
        encode, heavy = self._encode, self._heavy
        assert encode is not None and heavy is not None
        if response.error is not None:
            self._failed(response.error)
        elif heavy(response):
            self._task = asyncio.get_running_loop().create_task(self._encoded(response, True))
        else:
            try:
                result = encode(response)
            except Exception as exc:
                self._failed(exc)
                return
            self._answered(result)

    async def _infer(self) -> None:
        dp = self._pipeline.dataplane
        heavy = self._heavy
        assert heavy is not None
        try:
            response = await dp.infer(
                self.decoded.request, protocol=self._pipeline.protocol, model=self.served
            )
        except Exception as exc:
            self._failed(exc)
            return
        await self._encoded(response, heavy(response))

    async def _encoded(self, response: InferenceResponse, offload: bool) -> None:
        encode = self._encode
        assert encode is not None
        try:
            result = await asyncio.to_thread(encode, response) if offload else encode(response)
        except Exception as exc:
            self._failed(exc)
            return
        self._task = None
        self._answered(result)

    def _answered(self, result: object) -> None:
        self.response_complete()
        self.release()
        answer = self._answer
        self._answer = self._fail = self._encode = self._heavy = None
        if answer is not None:
            answer(result)

    def _failed(self, error: BaseException) -> None:
        self._task = None
        self.finish()
        fail = self._fail
        self._answer = self._fail = self._encode = self._heavy = None
        if fail is not None:
            fail(error)

    # ------------------------------------------------------------------ streams

    async def responses(self) -> AsyncGenerator[InferenceResponse, None]:
        """The request's responses (:meth:`~tritonx._dataplane.dataplane.DataPlane.infer_stream`):
        one for an ordinary model, zero or more for a decoupled one; validation errors
        raise, later errors come as responses carrying ``error``. Leaving early cancels the
        request. The lease is released when the iteration ends; the trace stays open."""
        stream = self._pipeline.dataplane.infer_stream(self.decoded.request, model=self.served)
        try:
            async for response in stream:
                yield response
        finally:
            await stream.aclose()  # end the data plane's generator now, not when collected
            self.release()

    async def encode(self, encode: Encode[A], heavy: Heavy, response: InferenceResponse) -> A:
        """One of a stream's responses encoded, in a worker thread when ``heavy``."""
        if heavy(response):
            return await asyncio.to_thread(encode, response)
        return encode(response)

    # ------------------------------------------------------------------ the end

    def response_complete(self) -> None:
        """A response is encoded (the last, or each: as the transport's Triton counterpart
        stamps it): ``INFER_RESPONSE_COMPLETE`` on a traced request."""
        if self.trace is not None:
            self.trace.capture("INFER_RESPONSE_COMPLETE", time.perf_counter_ns())

    def sending(self) -> None:
        """The transport starts sending the answer (or one message of it): a traced
        request's ``HTTP_SEND_START`` or ``GRPC_SEND_START``."""
        trace, stamps = self.trace, self._pipeline._send
        if trace is not None and stamps is not None:
            trace.capture(stamps[0], time.perf_counter_ns())

    def sent(self) -> None:
        """The answer (or one message of it) is sent: a traced request's ``HTTP_SEND_END``
        or ``GRPC_SEND_END``."""
        trace, stamps = self.trace, self._pipeline._send
        if trace is not None and stamps is not None:
            trace.capture(stamps[1], time.perf_counter_ns())

    async def send(self, sending: Awaitable[T]) -> T:
        """Await ``sending`` (the write of the answer, or of one message of it, not started
        yet), framed by :meth:`sending` and :meth:`sent`."""
        if self.trace is None:
            return await sending
        self.sending()
        result = await sending
        self.sent()
        return result

    def release(self) -> None:
        """Release the request's shared-memory lease (if still held): its outputs are
        written, or never will be; the client may unregister the regions from then on."""
        _release(self.decoded)

    def finish(self) -> None:
        """Release the lease (if still held) and finish the trace (if any): the request's
        answer is sent, or it never will be."""
        _release(self.decoded)
        trace, self.trace = self.trace, None
        if trace is not None:
            trace.finish()


@dataclass(slots=True)
class _Failure:
    """:meth:`Call.run`'s failure, kept until it raises it."""

    error: BaseException


def _release(decoded: Decoded) -> None:
    """Release ``decoded``'s shared-memory lease once (its outputs are written, or the
    request failed): the client may unregister the regions from then on."""
    shm = decoded.shm
    if shm is not None:
        decoded.shm = None
        shm.release()


@dataclass(slots=True)
class PlainDecoded:
    """A decoded request that holds no shared memory (``/generate``)."""

    request: InferenceRequest
    shm: SharedMemoryUse | None = None


class MetadataHeaders:
    """:class:`Headers` over gRPC invocation metadata (lower-case names; ``-bin`` values are
    bytes and are never looked up), read from ``source`` on first use only.

    :param source: returns the metadata pairs (``ServicerContext.invocation_metadata``).
    """

    __slots__ = ("_map", "_pairs", "_source")

    def __init__(self, source: Callable[[], Iterable[tuple[str, str | bytes]] | None]) -> None:
        self._source = source
        self._pairs: tuple[tuple[str, str | bytes], ...] | None = None
        self._map: Mapping[str, str] | None = None

    def _lookup(self) -> Mapping[str, str]:
        if self._map is None:
            self._map = {k: v for k, v in self.items() if isinstance(v, str)}
        return self._map

    def get(self, name: str, default: None = None, /) -> str | None:
        if self._map is None:  # a lookup or two per request: no dict for them
            for key, value in self.items():
                if key == name and isinstance(value, str):
                    return value
            return default
        return self._map.get(name, default)

    def __contains__(self, name: object, /) -> bool:
        return name in self._lookup()

    def __getitem__(self, name: str) -> str:
        return self._lookup()[name]

    def keys(self) -> Iterable[str]:
        return self._lookup().keys()

    def items(self) -> Iterable[tuple[str, str | bytes]]:
        if self._pairs is None:
            self._pairs = tuple(self._source() or ())
        return self._pairs


__all__ = [
    "Call",
    "DataPlaneView",
    "Decoded",
    "Encode",
    "Headers",
    "Heavy",
    "MetadataHeaders",
    "Offload",
    "Pipeline",
    "PlainDecoded",
    "ServedModel",
    "is_answer",
]
