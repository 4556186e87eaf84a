"""Triton's generate extension: ``POST /v2/models/<m>[/versions/<v>]/generate[_stream]``.

Follows tritonserver's ``HTTPAPIServer::HandleGenerate`` and ``GenerateRequestClass``
(``src/http_server.cc``), messages and codes included:

* **Request**: a flat JSON object. A key that names a model input becomes that input: a
  scalar or a list, of the datatype the model metadata gives, shaped to the input's metadata
  shape (fixed dims divide the element count, the innermost variable dim takes what remains,
  other variable dims, the batch dim included, are 1). Every other key becomes a request
  parameter (string, integer, double or bool). A ``parameters`` object is read the same way
  (its keys may name inputs too). ``id`` is the request id (and, as in Triton, also a
  parameter). Compressed bodies are refused.
* **Response**: a flat JSON object with ``id`` (when set), ``model_name``, ``model_version``,
  each response parameter and each output (one-element tensors as a scalar, others as a flat
  list, BYTES as strings), keys sorted; a reserved name or a parameter hides an output of the
  same name.
* ``/generate`` answers the model's one response (``application/json``). ``/generate_stream``
  answers Server-Sent Events (``text/event-stream; charset=utf-8``), one ``data: <json>`` event
  per response, errors as ``data: {"error": ...}`` events; the status is the first response's.
  Errors found before inference starts are ordinary JSON error responses.

Where tritonx differs (documented in the README): a ``/generate`` request whose decoupled
model sends no response or several answers 500 with Triton's message (Triton sends that body
with the status it already chose at the first response, usually 200); an empty list for an
input becomes an empty tensor of the fitted shape (Triton sends a shapeless input).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson
from aiohttp import web

from tritonx._transports.http.binary import Body
from tritonx._transports.http.body import read_body
from tritonx._transports.http.decode import OFFLOAD_JSON_BYTES
from tritonx._transports.http.encode import heavy_response
from tritonx._transports.http.errors import (
    JSON_CONTENT_TYPE,
    bounded_message,
    internal,
    method_not_allowed,
    response_for,
    status_code,
)
from tritonx._transports.http.exchange import RequestHeaders, send_traced
from tritonx._transports.http.json_header import parse_json_header
from tritonx._transports.http.json_tensor import (
    MAX_JSON_DEPTH,
    NOT_BOOL,
    NOT_INT,
    NOT_NUMBER,
    NOT_STRING,
    NOT_UINT,
    UINT64_MAX,
    is_bool,
    is_int,
    is_number,
    is_str,
    is_uint,
    json_data,
)
from tritonx._transports.http.keys import DATAPLANE_KEY, PIPELINE_KEY, SETTINGS_KEY, serving_app
from tritonx._transports.http.orca import FORMAT_HEADER, REPORT_HEADER, load_report
from tritonx.config import ModelConfig
from tritonx.datatypes import DataType
from tritonx.errors import TritonXError, invalid_arg, unsupported
from tritonx.pipeline import Call, Offload, PlainDecoded, is_answer
from tritonx.types import InferenceRequest, InferenceResponse, TensorSpec
from tritonx.wire import request_prefix

log = logging.getLogger("tritonx.http")

#: Content type of ``/generate_stream`` answers (tritonserver's exact value).
SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"

#: The one key read as a nested object of further inputs/parameters.
PARAMETERS_KEY = "parameters"

EXACTLY_ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)

_NUMPY_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_SORT_KEYS

# Per datatype: the JSON value check and Triton's message when it fails (TritonJson As*).
_VALUE_RULES = {
    DataType.BOOL: (is_bool, NOT_BOOL),
    DataType.UINT8: (is_uint, NOT_UINT),
    DataType.UINT16: (is_uint, NOT_UINT),
    DataType.UINT32: (is_uint, NOT_UINT),
    DataType.UINT64: (is_uint, NOT_UINT),
    DataType.INT8: (is_int, NOT_INT),
    DataType.INT16: (is_int, NOT_INT),
    DataType.INT32: (is_int, NOT_INT),
    DataType.INT64: (is_int, NOT_INT),
    DataType.FP32: (is_number, NOT_NUMBER),
    DataType.FP64: (is_number, NOT_NUMBER),
}

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# ---------------------------------------------------------------------------------- request


def decode_generate_request(
    body: Body,
    model_name: str,
    model_version: int | None,
    config: ModelConfig,
    max_input_size: int,
) -> InferenceRequest:
    """A generate request body as an :class:`InferenceRequest` (see the module docstring).

    :raises TritonXError: with Triton's code and message for a body that does not parse, a
        non-string ``id``, a value that does not fit its input, or a parameter that is not a
        string, number or bool.
    """
    doc = parse_json_header(body, len(body), max_input_size)
    specs = {spec.name: spec for spec in config.metadata_specs()}
    if isinstance(doc, dict) and _may_repeat(body, specs):
        doc = _ordered(body)
    request = InferenceRequest(model_name=model_name, inputs={}, model_version=model_version)
    if isinstance(doc, dict) and "id" in doc:
        rid = doc["id"]
        if not isinstance(rid, str):
            raise internal(f"Unable to parse 'id': {NOT_STRING}")
        request.id = rid
    if not isinstance(doc, dict):
        raise internal("attempt to get members for non-object")
    _convert(doc, specs, request, max_input_size, top=True)
    return request


class _Members(dict[str, Any]):
    """A JSON object that keeps its members in document order, repeated names included
    (:attr:`members`; the mapping holds the last value of each, as orjson's)."""

    members: list[tuple[str, Any]]


def _members(pairs: list[tuple[str, Any]]) -> _Members:
    obj = _Members(pairs)
    obj.members = pairs
    return obj


def _may_repeat(body: Body, specs: Mapping[str, TensorSpec]) -> bool:
    """Whether an input's name appears more than once in the body (a repeated member
    would be one; orjson keeps only its last value)."""
    raw = bytes(body) if isinstance(body, memoryview) else body
    return any(raw.count(orjson.dumps(name)) > 1 for name in specs)


def _ordered(body: Body) -> Any:
    """The body parsed again with every object's members in order (Triton's generate adds
    inputs member by member: a repeated input fails at its second occurrence)."""
    return json.loads(bytes(body), object_pairs_hook=_members)


def _convert(
    doc: dict[str, Any],
    specs: dict[str, TensorSpec],
    request: InferenceRequest,
    max_input_size: int,
    *,
    top: bool,
) -> None:
    consumed = 0  # input bytes so far, per object as in Triton
    members = doc.members if isinstance(doc, _Members) else doc.items()
    for key, value in members:
        if top and key == PARAMETERS_KEY:
            if key in specs:
                raise invalid_arg(
                    f"Keyword '{key}' for nested schema also given as input tensor name"
                )
            if not isinstance(value, dict):
                raise internal(
                    f"Expected JSON object for keyword: '{key}': attempt to access JSON "
                    "non-object as object"
                )
            try:
                _convert(value, specs, request, max_input_size, top=False)
            except TritonXError as exc:
                raise TritonXError(
                    f"Converting keyword: '{key}': {exc.message}", exc.code
                ) from None
        elif key in specs:
            consumed = _add_input(specs[key], value, request, consumed, max_input_size)
        else:
            _add_parameter(key, value, request)


def _add_parameter(key: str, value: Any, request: InferenceRequest) -> None:
    """Triton's ``SetTritonParameterFromJsonParameter``: string, int64, bool or double."""
    if isinstance(value, (str, bool, float)):
        request.parameters[key] = value
    elif type(value) is int:
        request.parameters[key] = value if _INT64_MIN <= value <= _INT64_MAX else float(value)
    else:
        raise invalid_arg(
            f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
        )


def _depth_error() -> TritonXError:
    return invalid_arg(f"JSON nesting depth exceeds maximum allowed limit ({MAX_JSON_DEPTH})")


def _bytes_size(value: Any, depth: int = 0) -> int:
    """Triton's ``JsonBytesArrayByteSize``: every string's length plus 4."""
    if depth >= MAX_JSON_DEPTH:
        raise _depth_error()
    if isinstance(value, list):
        return sum(_bytes_size(item, depth + 1) for item in value)
    if not is_str(value):
        raise internal(f"Unable to parse JSON bytes array: {NOT_STRING}")
    return len(value.encode("utf-8")) + 4


def _add_input(
    spec: TensorSpec,
    value: Any,
    request: InferenceRequest,
    consumed: int,
    max_input_size: int,
) -> int:
    """Add the input ``spec`` from its JSON ``value``; return the input bytes consumed."""
    name = spec.name
    dtype = DataType(spec.datatype)
    count = len(value) if isinstance(value, list) else 1
    if dtype is DataType.BYTES:
        byte_size = _bytes_size(value)
    else:
        byte_size = count * dtype.itemsize
    if byte_size and byte_size + consumed > max_input_size:
        raise invalid_arg(
            f"request size of {consumed} bytes with input '{name}' of size {byte_size} bytes "
            f"exceeds the maximum allowed input size of {max_input_size}. Use "
            "--http-max-input-size to increase the limit."
        )
    shape = _fit_shape(name, spec.shape, count)
    if name in request.inputs:
        raise invalid_arg(f"{request_prefix(request.id)}input '{name}' already exists in request")
    if dtype in (DataType.FP16, DataType.BF16):
        raise invalid_arg(
            f"receiving {dtype.value} data via JSON is not supported. Please use the binary "
            f"data format for input {name}"
        )
    request.inputs[name] = _tensor(value, dtype, count).reshape(shape)
    return consumed + byte_size


def _fit_shape(name: str, dims: tuple[int, ...], count: int) -> list[int]:
    """Triton's two passes: fixed dims divide ``count``, the innermost variable dim takes what
    remains and other variable dims are 1."""
    shape = list(dims)
    remaining = count
    for dim in reversed(shape):
        if dim != -1:
            if dim == 0 or remaining % dim:
                raise _shape_error(name)
            remaining //= dim
    for i in reversed(range(len(shape))):
        if shape[i] == -1:
            shape[i] = remaining
            remaining = 1
    if remaining != 1:
        raise _shape_error(name)
    return shape


def _shape_error(name: str) -> TritonXError:
    return invalid_arg(f"The schema can not convert input '{name}' to tensor with proper shape")


def _tensor(value: Any, dtype: DataType, count: int) -> np.ndarray:
    """The flat array of ``count`` elements ``value`` holds (Triton's ``ReadDataFromJson``)."""
    leaves: list[Any] = []
    if dtype is DataType.BYTES:
        mismatch = "shape does not match true shape of 'data' field"
        _walk(value, 0, leaves, count, is_str, NOT_STRING, mismatch)
        if len(leaves) != count:
            raise internal(mismatch)
        out = np.empty(count, dtype=object)
        out[:] = [s.encode("utf-8") for s in leaves]
        return out
    check, message = _VALUE_RULES[dtype]
    mismatch = "Shape does not match true shape of 'data' field"
    _walk(value, 0, leaves, count, check, message, mismatch)
    if len(leaves) != count:
        raise internal(mismatch)
    target = dtype.numpy_dtype
    if dtype is DataType.BOOL:
        return np.array(leaves, dtype=np.bool_)
    if target.kind in "iu":  # C-style wrap of out-of-range values, as Triton casts them
        return np.array([v & UINT64_MAX for v in leaves], dtype=np.uint64).astype(target)
    return np.array(leaves, dtype=np.float64).astype(target)


def _walk(
    node: Any,
    depth: int,
    out: list[Any],
    count: int,
    check: Any,
    message: str,
    mismatch: str,
) -> None:
    if depth >= MAX_JSON_DEPTH:
        raise _depth_error()
    if isinstance(node, list):
        for item in node:
            _walk(item, depth + 1, out, count, check, message, mismatch)
        return
    if len(out) >= count:
        raise internal(mismatch)
    if not check(node):
        raise internal(message)
    out.append(node)


# ---------------------------------------------------------------------------------- response


def encode_generate_response(response: InferenceResponse, config: ModelConfig) -> bytes:
    """A successful response as the generate JSON object (see the module docstring).

    :raises TritonXError: an FP16/BF16 output (not sendable as JSON) or a bytes parameter.
    """
    entries: dict[str, Any] = {}
    if response.id:
        entries["id"] = response.id
    entries["model_name"] = response.model_name
    entries["model_version"] = str(response.model_version)
    for key, value in response.parameters.items():
        if isinstance(value, (bytes, bytearray)):
            raise unsupported(
                f"Response parameter '{key}' has type 'TRITONSERVER_PARAMETER_BYTES' which is "
                "not currently supported"
            )
        if isinstance(value, np.generic):
            value = value.item()
        elif not isinstance(value, (bool, int, float, str)):
            value = str(value)
        entries.setdefault(key, value)
    for name, array in response.outputs.items():
        if name in entries:
            continue
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        data = json_data(array, _output_datatype(name, array, config))
        entries[name] = data[0] if array.size == 1 else data
    return orjson.dumps(entries, option=_NUMPY_OPTS)


def _output_datatype(name: str, array: np.ndarray, config: ModelConfig) -> DataType:
    """From the numpy dtype, except BF16 outputs (held as uint16 bits) per the config."""
    if array.dtype == np.uint16:
        io = config.output_map.get(name)
        if io is not None and io.datatype is DataType.BF16:
            return DataType.BF16
    return DataType.from_numpy(array.dtype)


def error_json(error: TritonXError) -> bytes:
    """``{"error": "<message>"}`` (message bounded as every HTTP error body)."""
    return orjson.dumps({"error": bounded_message(error.message)})


def sse_event(payload: bytes) -> bytes:
    """One Server-Sent Event carrying ``payload``."""
    return b"data: " + payload + b"\n\n"


async def _payload(call: Call[PlainDecoded], response: InferenceResponse) -> tuple[bytes, int]:
    """The JSON of one response (or of its error) and the HTTP status it stands for; each
    is a complete response of a traced request (as Triton's generate stamps them)."""
    try:
        if response.error is not None:
            return error_json(response.error), status_code(response.error)
        try:
            encode = functools.partial(encode_generate_response, config=call.served.config)
            return await call.encode(encode, heavy_response, response), 200
        except TritonXError as exc:
            return error_json(exc), status_code(exc)
        except Exception as exc:  # a bug: report it in the answer and keep serving
            log.exception("unexpected error encoding a generate response")
            error = TritonXError.wrap(exc)
            return error_json(error), status_code(error)
    finally:
        call.response_complete()


# ---------------------------------------------------------------------------------- handler


def load_report_headers(request: web.Request) -> tuple[tuple[str, str], ...]:
    """The ``endpoint-load-metrics`` header (ORCA load report, :mod:`.orca`) when the request
    asks for one with ``endpoint-load-metrics-format`` and the report can be made, else none.
    Triton computes it when the first response is ready, on generate answers only."""
    fmt = request.headers.get(FORMAT_HEADER)
    if fmt is None:
        return ()
    report = load_report(fmt, serving_app(request)[DATAPLANE_KEY].metrics_registry)
    return () if report is None else ((REPORT_HEADER, report),)


def _decode(
    body: Body,
    model_name: str,
    model_version: int | None,
    config: ModelConfig,
    max_input_size: int,
    *,
    offload: bool = False,
) -> PlainDecoded:
    """:func:`decode_generate_request` for the pipeline (a large body: in a worker thread)."""
    if offload and len(body) > OFFLOAD_JSON_BYTES:
        raise Offload
    return PlainDecoded(
        decode_generate_request(body, model_name, model_version, config, max_input_size)
    )


async def generate(
    request: web.Request, model: str, version_str: str, *, streaming: bool
) -> web.StreamResponse:
    """``POST .../generate`` (``streaming`` False) or ``.../generate_stream`` (True).

    Checks run in tritonserver's order: method, version, model, content encoding, body.
    Errors raised here are answered as JSON errors by the route dispatcher. A sampled
    request is traced as Triton traces it; headers are not forwarded (Triton forwards them
    on ``/infer`` only).
    """
    if request.method != "POST":
        return method_not_allowed()
    recv_start = time.perf_counter_ns()
    pipeline = serving_app(request)[PIPELINE_KEY]
    settings = serving_app(request)[SETTINGS_KEY]
    served, version = await pipeline.resolve_loaded(model, version_str, streaming=True)
    if request.headers.get("Content-Encoding", "") not in ("", "identity"):
        raise invalid_arg("Unsupported content-encoding, only 'identity' is supported.")
    limit = settings.http_max_input_size
    body = await read_body(request, limit, settings.http_body_timeout_secs, json_only=True)
    recv_end = time.perf_counter_ns()
    decoded = await pipeline.decode(_decode, body, model, version, served.config, limit)
    del body
    call = pipeline.admit(
        served, decoded, RequestHeaders(request), (recv_start, recv_end), forward=False
    )
    try:
        if streaming:
            return await _stream_events(request, call)
        return await _one_response(request, call)
    finally:
        call.finish()


async def _one_response(request: web.Request, call: Call[PlainDecoded]) -> web.StreamResponse:
    """``/generate``: the model's only response (validation errors raise out of here)."""
    first: InferenceResponse | None = None
    count = 0
    report: tuple[tuple[str, str], ...] = ()
    async for response in call.responses():
        if not is_answer(response):
            continue
        count += 1
        if first is None:
            first = response
            report = load_report_headers(request)
    if count != 1 or first is None:
        raise internal(EXACTLY_ONE_RESPONSE)
    if first.error is not None:
        failed = response_for(first.error)
        failed.headers.extend(report)
        return failed
    payload, status = await _payload(call, first)
    reply = web.Response(
        body=payload,
        status=status,
        content_type=JSON_CONTENT_TYPE,
        headers=(*call.reply_headers, *report),
    )
    if call.trace is not None:
        await send_traced(request, reply, call)
    return reply


async def _stream_events(request: web.Request, call: Call[PlainDecoded]) -> web.StreamResponse:
    """``/generate_stream``: one event per response; the status is the first response's.

    An error before the first response (validation, a full queue) raises: the dispatcher
    answers it as JSON. A client that goes away ends the stream at the next response: the
    request is cancelled and the model's remaining responses are dropped.
    """
    stream = call.responses()
    iterator = aiter(stream)
    try:
        first = await anext(iterator, None)
        payload, status = b"", 200
        if first is not None and is_answer(first):
            payload, status = await _payload(call, first)
        headers = {
            "Content-Type": SSE_CONTENT_TYPE,
            **dict(call.reply_headers),
            **dict(load_report_headers(request)),
        }
        answer = web.StreamResponse(status=status, headers=headers)
        try:
            await answer.prepare(request)
            if payload:
                await call.send(answer.write(sse_event(payload)))
            async for response in iterator:
                if not is_answer(response):
                    continue
                payload, _ = await _payload(call, response)
                await call.send(answer.write(sse_event(payload)))
        except ConnectionError:  # the client went away: stop reading the model's responses
            call.request.cancel()
        except Exception as exc:  # a bug once the stream started: end it with an error event
            log.exception("unexpected error in generate_stream")
            call.request.cancel()
            with contextlib.suppress(ConnectionError):
                await answer.write(sse_event(error_json(TritonXError.wrap(exc))))
        return answer
    finally:
        await stream.aclose()  # end the data plane's generator now, not when collected
