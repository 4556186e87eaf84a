"""``inference.GRPCInferenceService`` over grpc.aio: a thin adapter over :class:`DataPlane`.

Implements the KServe RPCs plus Triton's ModelStreamInfer, ModelConfig, ModelStatistics,
model-repository and shared-memory RPCs, and the trace and logging extensions
(``TraceSetting``, ``LogSettings``).

A failed RPC sets its status with :func:`tritonx._transports.grpc.errors.fail` and returns ``None`` (grpc
sends no message with a non-OK status): nothing raised, so no traceback keeps the request
message alive after the call. Errors that are not TritonXErrors (bugs) are logged and answered
INTERNAL. Inference requests whose decoding or encoding is heavy (large BYTES or typed
contents) run that part in a worker thread so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from tritonx._dataplane.dataplane import DataPlane
from tritonx._dataplane.header_forward import HeaderForward
from tritonx._dataplane.shared_memory import (
    MemoryKind,
    RegionStatus,
    SharedMemoryManager,
    disabled_error,
)
from tritonx._dataplane.stats import Duration, ModelStats
from tritonx._dataplane.trace import Trace
from tritonx._transports.grpc.context import CallContext
from tritonx._transports.grpc.decode import DecodedRequest, decode_infer_request
from tritonx._transports.grpc.encode import encode_infer_response, heavy_response, stream_error
from tritonx._transports.grpc.errors import STATUS, detached, fail
from tritonx._transports.grpc.memory import rejected
from tritonx._transports.grpc.observability import log_settings, trace_setting
from tritonx._transports.grpc.receive import Received, Refusal
from tritonx.errors import NotLoaded, TritonXError, invalid_arg, unsupported
from tritonx.pipeline import Call, Headers, MetadataHeaders, Pipeline, ServedModel
from tritonx.proto import service_pb2, service_pb2_grpc
from tritonx.types import InferenceResponse
from tritonx.wire import parse_version

log = logging.getLogger("tritonx.grpc")

#: Stream metadata that makes the first error end the stream with a gRPC status.
GRPC_ERROR_METADATA = "triton_grpc_error"


class GRPCInferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """The GRPCInferenceService implementation; every method is a grpc.aio coroutine.

    :param forward: ``--grpc-header-forward-pattern`` compiled: the call metadata it
        matches becomes parameters of each inference request (None: nothing is forwarded).
    :param compression: ``--grpc-infer-response-compression-level``'s algorithm for the
        responses of ModelInfer and ModelStreamInfer (None: not compressed).
    :param max_stream_in_flight: ``--grpc-max-stream-in-flight``: ModelStreamInfer requests
        running at once on one connection (its peer address), all its calls together, and of
        one call running or answered and not yet written.
    """

    def __init__(
        self,
        dataplane: DataPlane,
        forward: HeaderForward | None = None,
        compression: grpc.Compression | None = None,
        max_stream_in_flight: int = 128,
    ) -> None:
        self.dataplane = dataplane
        self.compression = compression
        self.max_stream_in_flight = max_stream_in_flight
        #: ModelStreamInfer requests in flight per connection (its peer address)
        self.connection_loads: dict[str, _ConnectionLoad] = {}
        #: the inference RPCs' steps (``forward``: metadata forwarded to each request)
        self.pipeline = Pipeline(dataplane, "grpc", forward)

    # ------------------------------------------------------------------ health / metadata

    async def ServerLive(
        self, request: service_pb2.ServerLiveRequest, context: CallContext
    ) -> service_pb2.ServerLiveResponse:
        """``live``: the server is initialised and not shut down."""
        return service_pb2.ServerLiveResponse(live=self.dataplane.server_live())

    async def ServerReady(
        self, request: service_pb2.ServerReadyRequest, context: CallContext
    ) -> service_pb2.ServerReadyResponse:
        """``ready``: the server (and, with strict readiness, every model) is ready."""
        return service_pb2.ServerReadyResponse(ready=self.dataplane.server_ready())

    async def ModelReady(
        self, request: service_pb2.ModelReadyRequest, context: CallContext
    ) -> service_pb2.ModelReadyResponse:
        """``ready`` of a model version; an unknown model is OK/false (as Triton 2.51)."""
        try:
            version = parse_version(request.version)
        except TritonXError as exc:
            return fail(context, exc)
        return service_pb2.ModelReadyResponse(
            ready=await self.dataplane.model_ready_probed(request.name, version)
        )

    async def ServerMetadata(
        self, request: service_pb2.ServerMetadataRequest, context: CallContext
    ) -> service_pb2.ServerMetadataResponse:
        """Name (``triton``), protocol version and extensions."""
        meta = self.dataplane.server_metadata()
        return service_pb2.ServerMetadataResponse(
            name=meta.name, version=meta.version, extensions=list(meta.extensions)
        )

    async def ModelMetadata(
        self, request: service_pb2.ModelMetadataRequest, context: CallContext
    ) -> service_pb2.ModelMetadataResponse:
        """Versions, platform and input/output tensor metadata of a model."""
        dp = self.dataplane
        try:
            version = parse_version(request.version)
            meta = await dp.loaded(lambda: dp.model_metadata(request.name, version))
        except TritonXError as exc:
            return fail(context, exc)
        tensor = service_pb2.ModelMetadataResponse.TensorMetadata
        return service_pb2.ModelMetadataResponse(
            name=meta.name,
            versions=list(meta.versions),
            platform=meta.platform,
            inputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.inputs],
            outputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.outputs],
        )

    async def ModelConfig(
        self, request: service_pb2.ModelConfigRequest, context: CallContext
    ) -> service_pb2.ModelConfigResponse:
        """The completed, normalized ``inference.ModelConfig`` of a ready version."""
        dp = self.dataplane
        try:
            version = parse_version(request.version)
            config = await dp.loaded(lambda: dp.model_config(request.name, version))
        except TritonXError as exc:
            return fail(context, exc)
        response = service_pb2.ModelConfigResponse()
        response.config.CopyFrom(config.raw)
        return response

    async def ModelStatistics(
        self, request: service_pb2.ModelStatisticsRequest, context: CallContext
    ) -> service_pb2.ModelStatisticsResponse:
        """Statistics of one model (version) or, with an empty name, of every ready model."""
        try:
            rows = self.dataplane.model_statistics(request.name, parse_version(request.version))
        except TritonXError as exc:
            return fail(context, exc)
        response = service_pb2.ModelStatisticsResponse()
        for name, version, stats in rows:
            _fill_stats(response.model_stats.add(), name, version, stats)
        return response

    # ------------------------------------------------------------------ repository

    async def RepositoryIndex(
        self, request: service_pb2.RepositoryIndexRequest, context: CallContext
    ) -> service_pb2.RepositoryIndexResponse:
        """Every model of the repositories, with version, state and reason where known."""
        if request.repository_name:
            return fail(context, unsupported("'repository_name' specification is not supported"))
        response = service_pb2.RepositoryIndexResponse()
        for entry in self.dataplane.repository_index(request.ready):
            row = response.models.add(name=entry.name)
            if entry.version is not None:
                row.version = str(entry.version)
            if entry.state is not None:
                row.state = entry.state.value
            if entry.reason:
                row.reason = entry.reason
        return response

    async def RepositoryModelLoad(
        self, request: service_pb2.RepositoryModelLoadRequest, context: CallContext
    ) -> service_pb2.RepositoryModelLoadResponse:
        """Load or reload a model (explicit mode), with optional config and file overrides."""
        try:
            if request.repository_name:
                raise unsupported("'repository_name' specification is not supported")
            parameters: dict[str, object] = {}
            for key, param in request.parameters.items():
                kind = param.WhichOneof("parameter_choice")
                if key == "config":
                    if kind != "string_param":
                        raise invalid_arg(
                            f"invalid value type for load parameter '{key}', expected string_param."
                        )
                    parameters[key] = param.string_param
                elif key.startswith("file:"):
                    if kind != "bytes_param":
                        raise invalid_arg(
                            f"invalid value type for load parameter '{key}', expected bytes_param."
                        )
                    parameters[key] = param.bytes_param
                else:
                    raise invalid_arg(f"unrecognized load parameter '{key}'.")
            await self.dataplane.load_model(request.model_name, parameters or None)
        except TritonXError as exc:
            return fail(context, exc)
        return service_pb2.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(
        self, request: service_pb2.RepositoryModelUnloadRequest, context: CallContext
    ) -> service_pb2.RepositoryModelUnloadResponse:
        """Unload a model (explicit mode), optionally with the models depending on it."""
        try:
            if request.repository_name:
                raise unsupported("'repository_name' specification is not supported")
            unload_dependents = False
            param = request.parameters.get("unload_dependents")
            if param is not None:
                if param.WhichOneof("parameter_choice") != "bool_param":
                    raise invalid_arg(
                        "invalid value type for 'unload_dependents' parameter, expected bool_param."
                    )
                unload_dependents = param.bool_param
            await self.dataplane.unload_model(request.model_name, unload_dependents)
        except TritonXError as exc:
            return fail(context, exc)
        return service_pb2.RepositoryModelUnloadResponse()

    # ------------------------------------------------------------------ shared memory

    async def SystemSharedMemoryStatus(
        self, request: service_pb2.SystemSharedMemoryStatusRequest, context: CallContext
    ) -> service_pb2.SystemSharedMemoryStatusResponse:
        """The registered system regions (all, or the one named): name, key, offset, size."""
        return self._shm_status(
            MemoryKind.SYSTEM,
            request.name,
            context,
            service_pb2.SystemSharedMemoryStatusResponse(),
            lambda row: {"key": row.key, "offset": row.offset},
        )

    async def SystemSharedMemoryRegister(
        self, request: service_pb2.SystemSharedMemoryRegisterRequest, context: CallContext
    ) -> service_pb2.SystemSharedMemoryRegisterResponse:
        """Register a POSIX shared-memory object (needs ``--allow-client-shm``)."""
        return self._shm_change(
            lambda shm: shm.register_system(
                request.name, request.key, request.offset, request.byte_size
            ),
            context,
            service_pb2.SystemSharedMemoryRegisterResponse(),
        )

    async def SystemSharedMemoryUnregister(
        self, request: service_pb2.SystemSharedMemoryUnregisterRequest, context: CallContext
    ) -> service_pb2.SystemSharedMemoryUnregisterResponse:
        """Unregister one system region, or all of them with an empty name."""
        return self._shm_change(
            lambda shm: shm.unregister(MemoryKind.SYSTEM, request.name),
            context,
            service_pb2.SystemSharedMemoryUnregisterResponse(),
        )

    async def CudaSharedMemoryStatus(
        self, request: service_pb2.CudaSharedMemoryStatusRequest, context: CallContext
    ) -> service_pb2.CudaSharedMemoryStatusResponse:
        """The registered CUDA regions (all, or the one named): name, device, size."""
        return self._shm_status(
            MemoryKind.CUDA,
            request.name,
            context,
            service_pb2.CudaSharedMemoryStatusResponse(),
            lambda row: {"device_id": row.device_id},
        )

    async def CudaSharedMemoryRegister(
        self, request: service_pb2.CudaSharedMemoryRegisterRequest, context: CallContext
    ) -> service_pb2.CudaSharedMemoryRegisterResponse:
        """Open a CUDA IPC handle as a region (needs ``--allow-client-shm``, cuda-python and
        a GPU; else Triton's "GPUs not supported" error)."""
        return self._shm_change(
            lambda shm: shm.register_cuda(
                request.name, request.raw_handle, request.device_id, request.byte_size
            ),
            context,
            service_pb2.CudaSharedMemoryRegisterResponse(),
        )

    async def CudaSharedMemoryUnregister(
        self, request: service_pb2.CudaSharedMemoryUnregisterRequest, context: CallContext
    ) -> service_pb2.CudaSharedMemoryUnregisterResponse:
        """Unregister one CUDA region, or all of them with an empty name."""
        return self._shm_change(
            lambda shm: shm.unregister(MemoryKind.CUDA, request.name),
            context,
            service_pb2.CudaSharedMemoryUnregisterResponse(),
        )

    def _shm_status(
        self,
        kind: MemoryKind,
        name: str,
        context: CallContext,
        response: Any,
        fields: Callable[[RegionStatus], dict[str, Any]],
    ) -> Any:
        """``response`` with a row per registered region of ``kind`` (all, or ``name``):
        its name and size, and the kind's own ``fields``."""
        try:
            rows = self.dataplane.shared_memory.status(kind, name)
        except TritonXError as exc:
            return fail(context, exc)
        for row in rows:
            response.regions[row.name].CopyFrom(
                response.RegionStatus(name=row.name, byte_size=row.byte_size, **fields(row))
            )
        return response

    def _shm_change(
        self, change: Callable[[SharedMemoryManager], None], context: CallContext, response: Any
    ) -> Any:
        """Register or unregister (``change``): refused unless ``--allow-client-shm``."""
        shm = self.dataplane.shared_memory
        try:
            if not shm.allow_client_shm:
                raise disabled_error()
            change(shm)
        except TritonXError as exc:
            return fail(context, exc)
        return response

    # ------------------------------------------------------------------ trace and logging

    async def TraceSetting(
        self, request: service_pb2.TraceSettingRequest, context: CallContext
    ) -> service_pb2.TraceSettingResponse:
        """Update (given settings; an empty value list clears a model's own value) and return
        the global or a model's trace settings."""
        try:
            return trace_setting(self.dataplane, request)
        except TritonXError as exc:
            return fail(context, exc)

    async def LogSettings(
        self, request: service_pb2.LogSettingsRequest, context: CallContext
    ) -> service_pb2.LogSettingsResponse:
        """Update (given settings) and return the server's log settings."""
        try:
            return log_settings(request)
        except TritonXError as exc:
            return fail(context, exc)

    # ------------------------------------------------------------------ inference

    async def ModelInfer(
        self, request: service_pb2.ModelInferRequest | Received, context: CallContext
    ) -> service_pb2.ModelInferResponse:
        """Unary inference; decoupled models are UNIMPLEMENTED here (use the stream).

        A large or compressed message comes as a :class:`~tritonx._transports.grpc.receive.Received`,
        finished here (its raw contents as views; a refusal answered with its status).
        When the client cancels the RPC or its deadline passes, grpc.aio cancels this handler;
        the data plane then cancels the request, which is dropped if it has not run yet."""
        read_ns = time.perf_counter_ns()
        raws: list[memoryview] | None = None
        if isinstance(request, Received):
            received = await request.infer_request()
            if isinstance(received, Refusal):
                rejected()
                return received.fail(context)
            request, raws = received
        try:
            if self.compression is not None:
                context.set_compression(self.compression)
                # grpc.aio applies the algorithm to a unary response only through initial
                # metadata sent on their own (the response's own carry no encoding)
                await context.send_initial_metadata(())
            pipeline = self.pipeline
            served, version = await pipeline.resolve_loaded(
                request.model_name, request.model_version
            )
            decoded = await _decode(pipeline, request, version, raws)
            call = pipeline.admit(
                served, decoded, MetadataHeaders(context.invocation_metadata), (read_ns, read_ns)
            )
            response = await call.run(
                functools.partial(_infer_response, decoded, served), heavy_response
            )
            if call.reply_headers:
                context.set_trailing_metadata(call.reply_headers)
            if call.trace is not None:  # GRPC_SEND_END when grpc has sent it
                call.trace.capture("GRPC_SEND_START", time.perf_counter_ns())
                context.add_done_callback(lambda _: _sent(call))
            return response
        except TritonXError as exc:
            rejected()
            return fail(context, exc)
        except Exception as exc:  # a bug: log it, answer INTERNAL
            log.exception("unexpected error in ModelInfer for model '%s'", request.model_name)
            rejected()
            return fail(context, exc)

    async def ModelStreamInfer(
        self,
        request_iterator: AsyncIterable[service_pb2.ModelInferRequest],
        context: CallContext,
    ) -> AsyncIterator[service_pb2.ModelStreamInferResponse]:
        """Bidirectional streaming inference (see :class:`_Stream`)."""
        if self.compression is not None:
            context.set_compression(self.compression)
        metadata = context.invocation_metadata() or ()
        grpc_error = any(
            key == GRPC_ERROR_METADATA and str(value).lower() == "true" for key, value in metadata
        )
        peer = context.peer()
        load = self.connection_loads.get(peer)
        if load is None:
            load = self.connection_loads[peer] = _ConnectionLoad(self.max_stream_in_flight)
        load.streams += 1
        stream = _Stream(
            self.pipeline,
            grpc_error,
            MetadataHeaders(lambda: metadata),
            self.max_stream_in_flight,
            load,
        )
        reader = asyncio.create_task(stream.read(request_iterator))
        try:
            queue = stream.queue
            while True:
                message, error = await queue.get()
                stream.room()
                if message is None:
                    break
                if error is not None and grpc_error:
                    fail(context, error)  # ends the stream with this status
                    return
                yield message
                if stream.traced:
                    stream.written(message)
            await reader  # re-raise a reader failure, if any
            if stream.refusal is not None:  # a message refused: the call ends with its status
                stream.refusal.fail(context)
                return
        finally:
            reader.cancel()
            stream.cancel()
            stream.drop_traces()
            load.streams -= 1
            if not load.streams and self.connection_loads.get(peer) is load:
                del self.connection_loads[peer]


class _ConnectionLoad:
    """The ModelStreamInfer requests in flight on one connection, all its calls together
    (``--grpc-max-stream-in-flight``): a call's next message is read while fewer run."""

    __slots__ = ("limit", "streams", "tasks", "waiting")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.tasks = 0
        self.streams = 0
        self.waiting: set[_Stream] = set()

    def wake(self) -> None:
        for stream in list(self.waiting):
            stream.room()


class _Stream:
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
        load: _ConnectionLoad | None = None,
    ) -> None:
        self.pipeline = pipeline
        #: the requests in flight on the call's connection (None: this call's only)
        self.load = load if load is not None else _ConnectionLoad(limit)
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
        #: traced requests' messages not yet written (message id → trace)
        self.traced: dict[int, Trace] = {}
        #: traced requests with messages in flight: trace id → [trace, messages not yet
        #: written, still producing]; a trace is finished once both are done
        self.open: dict[int, list[Any]] = {}
        #: the refusal of a message that ended the stream (None: none)
        self.refusal: Refusal | None = None

    def written(self, message: Any) -> None:
        """A message was written: GRPC_SEND_END of its trace (finished after its last)."""
        trace = self.traced.pop(id(message), None)
        if trace is not None:
            trace.capture("GRPC_SEND_END", time.perf_counter_ns())
            entry = self.open[id(trace)]
            entry[1] -= 1
            if entry[1] == 0 and not entry[2]:
                del self.open[id(trace)]
                trace.finish()

    def produced(self, trace: Trace) -> None:
        """The request has no more messages to queue: finish its trace now if every one of
        them was written."""
        entry = self.open.get(id(trace))
        if entry is None or entry[1] == 0:
            self.open.pop(id(trace), None)
            trace.finish()
        else:
            entry[2] = False

    def drop_traces(self) -> None:
        """The call ended: finish the traces whose messages were never all written."""
        for trace, _, _ in self.open.values():
            trace.finish()
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
        target: ServedModel | TritonXError | None
        try:
            target, version = self.pipeline.resolve(
                request.model_name, request.model_version, streaming=True
            )
        except NotLoaded:
            target = None  # run() loads it first (in order, as an ordinary model's request)
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
        decoded = await _decode(pipeline, request, version, raws)
        call = pipeline.admit(served, decoded, self.headers, waited)
        trace = call.trace
        try:
            if trace is None:
                await self._infer_with(request, call, previous, done)
                return
            self.open[id(trace)] = [trace, 0, True]
            try:
                await self._infer_with(request, call, previous, done)
            finally:
                self.produced(trace)
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
        trace = call.trace

        def put(item: tuple[Any, TritonXError | None], last: bool) -> None:
            if trace is not None:
                if last:
                    trace.capture("INFER_RESPONSE_COMPLETE", time.perf_counter_ns())
                trace.capture("GRPC_SEND_START", time.perf_counter_ns())
                self.traced[id(item[0])] = trace
                self.open[id(trace)][1] += 1
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
            if result.empty and not empty_final:
                if trace is not None and result.final:
                    trace.capture("INFER_RESPONSE_COMPLETE", time.perf_counter_ns())
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


def _decode(
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


def _infer_response(
    decoded: DecodedRequest, served: ServedModel, result: InferenceResponse
) -> service_pb2.ModelInferResponse:
    """The ModelInfer answer for ``result``."""
    response = service_pb2.ModelInferResponse()
    encode_infer_response(response, result, decoded, served.config, served.labels)
    return response


def _sent(call: Call[DecodedRequest]) -> None:
    if call.trace is not None:
        call.trace.capture("GRPC_SEND_END", time.perf_counter_ns())
    call.finish()


def _duration(target: Any, source: Duration) -> None:
    target.count = source.count
    target.ns = source.ns


def _fill_stats(msg: Any, name: str, version: int, stats: ModelStats) -> None:
    msg.name = name
    msg.version = str(version)
    msg.last_inference = stats.last_inference_ms
    msg.inference_count = stats.inference_count
    msg.execution_count = stats.execution_count
    inference = msg.inference_stats
    for field in (
        "success",
        "fail",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
    ):
        _duration(getattr(inference, field), getattr(stats, field))
    for batch_size in sorted(stats.batch_stats):
        batch = stats.batch_stats[batch_size]
        row = msg.batch_stats.add(batch_size=batch_size)
        _duration(row.compute_input, batch.compute_input)
        _duration(row.compute_infer, batch.compute_infer)
        _duration(row.compute_output, batch.compute_output)


__all__ = ["STATUS", "GRPCInferenceServicer"]
