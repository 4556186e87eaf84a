"""``inference.GRPCInferenceService``'s handlers, served alike by both gRPC engines (the
event-loop engine, the default, and grpc.aio's; :mod:`tritonx._transports.grpc.server`).

Implements the KServe RPCs plus Triton's ModelConfig, ModelStatistics and model-repository
RPCs; inference goes through :mod:`tritonx.pipeline` (ModelInfer here, ModelStreamInfer's
machinery in :mod:`~tritonx._transports.grpc.stream`), the shared-memory RPCs are
:mod:`~tritonx._transports.grpc.shared_memory_rpcs`' and the trace and logging extensions
(``TraceSetting``, ``LogSettings``) :mod:`~tritonx._transports.grpc.observability`'s.

A failed RPC sets its status with :func:`tritonx._transports.grpc.errors.fail` and returns ``None`` (grpc
sends no message with a non-OK status): nothing raised, so no traceback keeps the request
message alive after the call. Errors that are not TritonXErrors (bugs) are logged and answered
INTERNAL. Inference requests whose decoding or encoding is heavy (large BYTES or typed
contents) run that part in a worker thread (the pipeline's offload) so the event loop keeps
serving.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import grpc

from tritonx._dataplane.dataplane import DataPlane
from tritonx._dataplane.header_forward import HeaderForward
from tritonx._dataplane.stats import Duration, ModelStats
from tritonx._transports.grpc.context import CallContext
from tritonx._transports.grpc.decode import DecodedRequest
from tritonx._transports.grpc.encode import encode_infer_response, heavy_response
from tritonx._transports.grpc.errors import STATUS, fail
from tritonx._transports.grpc.memory import rejected
from tritonx._transports.grpc.observability import log_settings, trace_setting
from tritonx._transports.grpc.receive import Received, Refusal
from tritonx._transports.grpc.shared_memory_rpcs import SharedMemoryRPCs
from tritonx._transports.grpc.stream import (
    GRPC_ERROR_METADATA,
    ConnectionLoad,
    InferStream,
    decode_request,
)
from tritonx.errors import TritonXError, invalid_arg, unsupported
from tritonx.pipeline import Call, MetadataHeaders, Pipeline, ServedModel
from tritonx.proto import service_pb2, service_pb2_grpc
from tritonx.types import InferenceResponse
from tritonx.wire import parse_version

log = logging.getLogger("tritonx.grpc")


class GRPCInferenceServicer(SharedMemoryRPCs, service_pb2_grpc.GRPCInferenceServiceServicer):
    """The GRPCInferenceService implementation; every method is a grpc.aio coroutine (the
    shared-memory RPCs: :class:`~tritonx._transports.grpc.shared_memory_rpcs.SharedMemoryRPCs`).

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
        self.connection_loads: dict[str, ConnectionLoad] = {}
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
        return service_pb2.ServerReadyResponse(ready=await self.dataplane.server_ready_probed())

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
            meta = await self.pipeline.loaded(lambda: dp.model_metadata(request.name, version))
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
            config = await self.pipeline.loaded(lambda: dp.model_config(request.name, version))
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
            decoded = await decode_request(pipeline, request, version, raws)
            call = pipeline.admit(
                served, decoded, MetadataHeaders(context.invocation_metadata), (read_ns, read_ns)
            )
            response = await call.run(
                functools.partial(_infer_response, decoded, served), heavy_response
            )
            if call.reply_headers:
                context.set_trailing_metadata(call.reply_headers)
            if call.trace is not None:  # the send end stamped when grpc has sent it
                call.sending()
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
        """Bidirectional streaming inference (see :class:`~tritonx._transports.grpc.stream.InferStream`)."""
        if self.compression is not None:
            context.set_compression(self.compression)
        metadata = context.invocation_metadata() or ()
        grpc_error = any(
            key == GRPC_ERROR_METADATA and str(value).lower() == "true" for key, value in metadata
        )
        peer = context.peer()
        load = self.connection_loads.get(peer)
        if load is None:
            load = self.connection_loads[peer] = ConnectionLoad(self.max_stream_in_flight)
        load.streams += 1
        stream = InferStream(
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


def _infer_response(
    decoded: DecodedRequest, served: ServedModel, result: InferenceResponse
) -> service_pb2.ModelInferResponse:
    """The ModelInfer answer for ``result``."""
    response = service_pb2.ModelInferResponse()
    encode_infer_response(response, result, decoded, served.config, served.labels)
    return response


def _sent(call: Call[DecodedRequest]) -> None:
    call.sent()
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
