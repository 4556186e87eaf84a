"""ModelStreamInfer's machinery: one call's requests read, each run in its own task through
the inference pipeline, and their messages queued to write in the order Triton writes them
(:class:`InferStream`), within ``--grpc-max-stream-in-flight`` per connection
(:class:`ConnectionLoad`). The servicer's ``ModelStreamInfer`` writes what it queues."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterable, Awaitable
from typing import Any

from tritonx._transports.grpc.decode import DecodedRequest, decode_infer_request
from tritonx._transports.grpc.encode import encode_infer_response, heavy_response, stream_error
from tritonx._transports.grpc.errors import detached
from tritonx._transports.grpc.memory import rejected
from tritonx._transports.grpc.receive import Received, Refusal
from tritonx.errors import TritonXError
from tritonx.pipeline import Call, Headers, Pipeline, ServedModel, is_answer
from tritonx.proto import service_pb2
from tritonx.types import InferenceResponse

log = logging.getLogger("tritonx.grpc")

#: Stream metadata that makes the first error end the stream with a gRPC status.
GRPC_ERROR_METADATA = "triton_grpc_error"


class ConnectionLoad:
    """The ModelStreamInfer requests in flight on one connection, all its calls together
    (``--grpc-max-stream-in-flight``): a call's next message is read while fewer run."""

    __slots__ = ("limit", "streams", "tasks", "waiting")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.tasks = 0
        self.streams = 0
        self.waiting: set[InferStream] = set()

    def wake(self) -> None:
        for stream in list(self.waiting):
            stream.room()


class InferStream:
    """One ModelStreamInfer call: reads requests, runs each in its own task, and queues the
    messages to write.

    Responses of non-decoupled models are written in request order (each request's task
    waits for the previous such request's before queuing); decoupled models' responses are
    written as they come, each with ``triton_final_response``. Errors become in-stream
    ``error_message`` messages that leave the stream open, unless the client opened the stream
    with ``triton_grpc_error: true`` metadata (then the first error ends it with a status).
    A refused message (:class:`~tritonx._transports.grpc.receive.Refusal`: too large once inflated, not
    parsable) ends the call with its status, as grpc ends it for a message over its limit.
    Cancelling the call (client cancel, disconnect or deadline) cancels every request of the
    stream still in flight: those not executing yet are dropped (CANCELLED), and decoupled
    models see ``is_cancelled()`` while their further responses are discarded.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        grpc_error: bool,
        headers: Headers,
        limit: int = 128,
        load: ConnectionLoad | None = None,
    ) -> None:
        self.pipeline = pipeline
        #: the requests in flight on the call's connection (None: this call's only)
        self.load = load if load is not None else ConnectionLoad(limit)
        #: requests in flight at most (running, or answered and not yet written): the next
        #: message is read when one ends, so a client that sends faster than it reads waits
        self.limit = limit
        self.room_waiter: asyncio.Future[None] | None = None
        self.grpc_error = grpc_error
        #: the call's metadata (forwarded to every request; a ``traceparent`` may be in it)
        self.headers = headers
        self.queue: asyncio.Queue[
            tuple[service_pb2.ModelStreamInferResponse | None, TritonXError | None]
        ] = asyncio.Queue()
        self.tasks: set[asyncio.Task[None]] = set()
        self.reading = True
        self.previous: asyncio.Future[None] | None = None
        #: traced requests' messages not yet written (message id → the request's call)
        self.traced: dict[int, Call[DecodedRequest]] = {}
        #: traced requests with messages in flight: call id → [call, messages not yet
        #: written, still producing]; a call is finished once both are done
        self.open: dict[int, list[Any]] = {}
        #: the refusal of a message that ended the stream (None: none)
        self.refusal: Refusal | None = None

    def written(self, message: Any) -> None:
        """A message was written: its traced request's send end stamped (the request
        finished after its last)."""
        call = self.traced.pop(id(message), None)
        if call is not None:
            call.sent()
            entry = self.open[id(call)]
            entry[1] -= 1
            if entry[1] == 0 and not entry[2]:
                del self.open[id(call)]
                call.finish()

    def produced(self, call: Call[DecodedRequest]) -> None:
        """The traced request has no more messages to queue: finish it now if every one of
        them was written."""
        entry = self.open.get(id(call))
        if entry is None or entry[1] == 0:
            self.open.pop(id(call), None)
            call.finish()
        else:
            entry[2] = False

    def drop_traces(self) -> None:
        """The call ended: finish the traced requests whose messages were never all
        written."""
        for call, _, _ in self.open.values():
            call.finish()
        self.open.clear()
        self.traced.clear()

    def room(self) -> None:
        """A request ended or a message was taken to be written: the reader may go on."""
        waiter = self.room_waiter
        if waiter is not None and not self._full():
            self.room_waiter = None
            self.load.waiting.discard(self)
            if not waiter.done():
                waiter.set_result(None)

    def _full(self) -> bool:
        load = self.load
        return len(self.tasks) + self.queue.qsize() >= self.limit or load.tasks >= load.limit

    async def read(
        self, request_iterator: AsyncIterable[service_pb2.ModelInferRequest | Received]
    ) -> None:
        try:
            iterator = aiter(request_iterator)
            while True:
                while self._full():
                    self.room_waiter = asyncio.get_running_loop().create_future()
                    self.load.waiting.add(self)
                    try:
                        await self.room_waiter
                    finally:
                        self.load.waiting.discard(self)
                wait_start = time.perf_counter_ns()
                try:
                    request = await anext(iterator)
                except StopAsyncIteration:
                    break
                raws: list[memoryview] | None = None
                if isinstance(request, Received):
                    received = await request.infer_request()
                    if isinstance(received, Refusal):
                        rejected()
                        self.refusal = received
                        self.cancel()
                        break
                    request, raws = received
                self.start(request, (wait_start, time.perf_counter_ns()), raws)
        finally:
            self.reading = False
            self._maybe_end()

    def start(
        self,
        request: service_pb2.ModelInferRequest,
        waited: tuple[int, int] = (0, 0),
        raws: list[memoryview] | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()
        version: int | None = None
        target: ServedModel | TritonXError | None = None
        try:
            resolved = self.pipeline.resolve_now(
                request.model_name, request.model_version, streaming=True
            )
            if resolved is not None:  # else run() loads it first (in order, as an ordinary
                target, version = resolved  # model's request)
        except TritonXError as exc:
            target = detached(exc)  # the request fails in run(), in order
        previous: asyncio.Future[None] | None = None
        done: asyncio.Future[None] | None = None
        if target is None or isinstance(target, TritonXError) or not target.decoupled:
            previous, done = self.previous, loop.create_future()
            self.previous = done
        task = loop.create_task(self.run(request, version, target, previous, done, waited, raws))
        self.tasks.add(task)
        self.load.tasks += 1
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        load = self.load
        load.tasks -= 1
        self.room()
        if load.waiting:
            load.wake()
        if not task.cancelled() and task.exception() is not None:
            log.error("stream request failed", exc_info=task.exception())
        self._maybe_end()

    def _maybe_end(self) -> None:
        if not self.reading and not self.tasks:
            self.queue.put_nowait((None, None))

    def cancel(self) -> None:
        for task in list(self.tasks):
            task.cancel()

    async def run(
        self,
        request: service_pb2.ModelInferRequest,
        version: int | None,
        target: ServedModel | TritonXError | None,
        previous: asyncio.Future[None] | None,
        done: asyncio.Future[None] | None,
        waited: tuple[int, int] = (0, 0),
        raws: list[memoryview] | None = None,
    ) -> None:
        put = self.queue.put_nowait
        try:
            if isinstance(target, TritonXError):
                error = target  # never raised: it holds no frame
            else:
                try:
                    if target is None:  # not loaded (--model-load-on-demand): load it now
                        target, version = await self.pipeline.resolve_loaded(
                            request.model_name, request.model_version, streaming=True
                        )
                        if target.decoupled and done is not None:
                            done.set_result(None)  # its responses stream as they come
                            previous = done = None
                    await self._infer(request, version, target, previous, done, waited, raws)
                    return
                except Exception as exc:  # TritonXError, or a bug reported as INTERNAL
                    if not isinstance(exc, TritonXError):
                        log.exception("unexpected error in ModelStreamInfer")
                    error = detached(exc)
            rejected()
            if previous is not None:
                await previous
            put((stream_error(request, error), error))
        finally:
            if done is not None and not done.done():
                done.set_result(None)

    async def _infer(
        self,
        request: service_pb2.ModelInferRequest,
        version: int | None,
        served: ServedModel,
        previous: asyncio.Future[None] | None,
        done: asyncio.Future[None] | None,
        waited: tuple[int, int] = (0, 0),
        raws: list[memoryview] | None = None,
    ) -> None:
        pipeline = self.pipeline
        decoded = await decode_request(pipeline, request, version, raws)
        call = pipeline.admit(served, decoded, self.headers, waited)
        try:
            if call.trace is None:
                await self._infer_with(request, call, previous, done)
                return
            self.open[id(call)] = [call, 0, True]
            try:
                await self._infer_with(request, call, previous, done)
            finally:
                self.produced(call)
        finally:
            call.release()  # outputs are written (or never will be): regions may go

    async def _infer_with(
        self,
        request: service_pb2.ModelInferRequest,
        call: Call[DecodedRequest],
        previous: asyncio.Future[None] | None,
        done: asyncio.Future[None] | None,
    ) -> None:
        queue_put = self.queue.put_nowait
        traced = call.trace is not None

        def put(item: tuple[Any, TritonXError | None], last: bool) -> None:
            if traced:
                if last:
                    call.response_complete()
                call.sending()
                self.traced[id(item[0])] = call
                self.open[id(call)][1] += 1
            queue_put(item)

        stream = call.responses()
        if done is not None:  # ordinary model: exactly one response, in order
            messages: list[tuple[Any, TritonXError | None]] = []
            async for result in stream:
                messages.append(await self._message(request, call, result, True))
            if previous is not None:
                await previous
            for index, item in enumerate(messages):
                put(item, index == len(messages) - 1)
            return
        empty_final = call.decoded.enable_empty_final_response
        async for result in stream:
            if not is_answer(result, empty_final=empty_final):
                if result.final:
                    call.response_complete()
                continue
            put(await self._message(request, call, result, result.final), result.final)

    async def _message(
        self,
        request: service_pb2.ModelInferRequest,
        call: Call[DecodedRequest],
        result: InferenceResponse,
        final: bool,
    ) -> tuple[service_pb2.ModelStreamInferResponse, TritonXError | None]:
        if result.error is not None:
            error = detached(result.error)
            return (
                stream_error(
                    request,
                    error,
                    final=final,
                    model_name=request.model_name,
                    model_version=request.model_version,
                ),
                error,
            )
        message = service_pb2.ModelStreamInferResponse()
        infer = message.infer_response
        if result.empty:
            infer.id = request.id
            infer.model_name = request.model_name
            infer.model_version = request.model_version
        else:
            served = call.served
            encode = functools.partial(
                encode_infer_response,
                infer,
                decoded=call.decoded,
                config=served.config,
                labels=served.labels,
            )
            try:
                await call.encode(encode, heavy_response, result)
            except TritonXError as exc:
                error = detached(exc)
                return stream_error(request, error), error
        infer.parameters["triton_final_response"].bool_param = final
        return message, None


def decode_request(
    pipeline: Pipeline,
    request: service_pb2.ModelInferRequest,
    version: int | None,
    raws: list[memoryview] | None,
) -> Awaitable[DecodedRequest]:
    """``request`` decoded through the pipeline (inputs heavy to convert in a worker thread);
    the pipeline's coroutine itself, no frame of its own."""
    return pipeline.decode(
        decode_infer_request,
        request,
        version,
        shm=pipeline.dataplane.shared_memory,
        raws=raws,
    )


__all__ = ["GRPC_ERROR_METADATA", "ConnectionLoad", "InferStream", "decode_request"]
