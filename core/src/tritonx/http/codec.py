"""Inference request/response bodies: KServe v2 JSON plus Triton's binary tensor extension.

Decoding follows Triton's ``http_server.cc`` (messages and error codes included): the JSON
header (all of the body, or its first ``Inference-Header-Content-Length`` bytes) is parsed with
orjson; binary inputs become ``np.frombuffer`` views on the request body (no copy); JSON
``data`` (nested or flat) becomes a numpy array. Encoding writes the JSON header, then the
raw bytes of every binary output in order.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from tritonx._core.classification import classify
from tritonx._core.validation import dims_str, request_prefix
from tritonx.config import ModelConfig
from tritonx.datatypes import DataType, serialize_bytes_tensor
from tritonx.errors import TritonXError, invalid_arg, unsupported
from tritonx.http.errors import internal
from tritonx.types import SEQUENCE_END, SEQUENCE_START, InferenceRequest, InferenceResponse

#: Nesting limit of JSON ``data`` arrays (Triton's ``HTTP_MAX_JSON_NESTING_DEPTH``).
MAX_JSON_DEPTH = 100
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

Body = bytes | bytearray

_NUMPY_OPTS = orjson.OPT_SERIALIZE_NUMPY
_LE = struct.Struct("<I")

# What a JSON value must look like for each datatype: (accept, Triton's type-access message).
_NOT_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NOT_INT = "attempt to access JSON non-signed-integer as signed-integer"
_NOT_NUMBER = "attempt to access JSON non-number as double"
_NOT_BOOL = "attempt to access JSON non-boolean as boolean"
_NOT_STRING = "attempt to access JSON non-string as string"
_NOT_ARRAY = "attempt to access JSON non-array as array"
_NOT_OBJECT = "attempt to access JSON non-object as object"


def _missing(name: str) -> str:
    return f"attempt to access non-existing object member '{name}'"


def _is_uint(v: Any) -> bool:
    return type(v) is int and 0 <= v <= UINT64_MAX


def _is_int(v: Any) -> bool:
    return type(v) is int and -(2**63) <= v <= INT64_MAX


def _is_number(v: Any) -> bool:
    return type(v) is int or type(v) is float


def _is_bool(v: Any) -> bool:
    return type(v) is bool


@dataclass(slots=True)
class DecodedRequest:
    """A decoded ``/infer`` body: the request and how to send its outputs back.

    :param request: the request for the data plane (``output_parameters`` holds each
        requested output's ``binary_data`` and ``classification``).
    :param binary_default: the encoding of outputs the client did not list
        (``binary_data_output``, or True for raw binary requests).
    """

    request: InferenceRequest
    binary_default: bool = False


# ---------------------------------------------------------------------------------- decoding


def parse_json_header(body: Body, header_length: int, max_input_size: int) -> Any:
    """Parse the first ``header_length`` bytes of ``body`` as JSON, with Triton's errors."""
    if header_length > max_input_size:
        raise invalid_arg(
            f"request JSON size of {header_length} bytes exceeds the maximum allowed input "
            f"size of {max_input_size} bytes. Use --http-max-input-size to increase the limit."
        )
    if header_length > len(body):
        raise invalid_arg(
            f"unexpected size for request JSON, expecting {header_length - len(body)} more bytes"
        )
    view = memoryview(body)[:header_length] if header_length != len(body) else body
    try:
        return orjson.loads(view)
    except orjson.JSONDecodeError as exc:
        raise internal(f"failed to parse the request JSON buffer: {exc}") from None


def element_count(name: str, shape: Sequence[int]) -> int:
    """Triton's ``GetElementCount`` with its errors (dims above INT64_MAX are invalid)."""
    count = 1
    for dim in shape:
        if dim > INT64_MAX:
            raise invalid_arg(
                f"invalid shape for input '{name}': shape {_signed_dims(shape)} contains one "
                "or more invalid dimensions"
            )
    for dim in shape:
        if dim == 0:
            return 0
    for dim in shape:
        count *= dim
        if count > INT64_MAX:
            raise invalid_arg(
                f"invalid shape for input '{name}': shape {_signed_dims(shape)} causes total "
                f"element count to exceed maximum size of {INT64_MAX}"
            )
    return count


def _signed_dims(shape: Sequence[int]) -> str:
    return dims_str(d - 2**64 if d > INT64_MAX else d for d in shape)


def decode_infer_request(
    body: Body,
    header_length: int | None,
    model_name: str,
    model_version: int | None,
    max_input_size: int,
) -> DecodedRequest:
    """Decode an ``/infer`` body (JSON header + binary tensors) into an InferenceRequest.

    :param header_length: ``Inference-Header-Content-Length`` (None: the whole body is JSON).
    :raises TritonXError: with Triton's code and message for every malformed part.
    """
    length = len(body) if header_length is None else header_length
    doc = parse_json_header(body, length, max_input_size)
    if not isinstance(doc, dict):
        doc = {}
    request = InferenceRequest(model_name=model_name, inputs={}, model_version=model_version)

    # id
    if "id" in doc:
        rid = doc["id"]
        if not isinstance(rid, str):
            raise internal(f"Unable to parse 'id': {_NOT_STRING}")
        request.id = rid

    # request parameters
    binary_default = False
    if "parameters" in doc:
        params = doc["parameters"]
        if not isinstance(params, dict):
            raise internal("failed to get request params.")
        binary_default = _parse_parameters(params, request)

    # inputs
    inputs = doc.get("inputs")
    if not isinstance(inputs, list):
        raise internal(
            f"Unable to parse 'inputs': {_NOT_ARRAY if 'inputs' in doc else _missing('inputs')}"
        )
    offset = length
    total = len(body)
    for item in inputs:
        if not isinstance(item, dict):
            raise internal(f"Unable to parse 'name': {_missing('name')}")
        offset = _decode_input(item, body, offset, request, model_name, max_input_size)
    if offset != total:
        raise invalid_arg(f"unexpected additional input data for model '{model_name}'")

    # outputs
    if "outputs" in doc:
        outputs = doc["outputs"]
        if not isinstance(outputs, list):
            raise internal(f"Unable to parse 'outputs': {_NOT_ARRAY}")
        names: list[str] = []
        for item in outputs:
            names.append(_decode_output(item, request))
        request.requested_outputs = tuple(names)
    return DecodedRequest(request, binary_default)


def _parse_parameters(params: dict[str, Any], request: InferenceRequest) -> bool:
    binary_default = False
    flags = 0
    for key, value in params.items():
        if key == "sequence_id":
            if _is_uint(value):
                request.correlation_id = value
            elif isinstance(value, str):
                request.correlation_id = value
            else:
                raise internal(f"Unable to parse 'sequence_id': {_NOT_STRING}")
        elif key in ("sequence_start", "sequence_end"):
            if not _is_bool(value):
                raise internal(f"Unable to parse '{key}': {_NOT_BOOL}")
            if value:
                flags |= SEQUENCE_START if key == "sequence_start" else SEQUENCE_END
        elif key in ("priority", "timeout"):
            if not _is_uint(value):
                raise internal(f"Unable to parse '{key}': {_NOT_UINT}")
            if key == "priority":
                request.priority = value
            else:
                request.timeout_us = value
        elif key == "binary_data_output":
            if not _is_bool(value):
                raise internal(f"Unable to parse 'binary_data_output': {_NOT_BOOL}")
            binary_default = value
        elif key.startswith("triton_"):
            raise invalid_arg(
                "parameter keys starting with 'triton_' are reserved for Triton usage and "
                "should not be specified."
            )
        elif isinstance(value, (str, int, float)):
            request.parameters[key] = value
        else:
            raise invalid_arg(
                f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or "
                "'string'."
            )
    request.flags = flags
    return binary_default


def _content_fields(item: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
    """Check Triton's "exactly one of data / binary_data_size / shared_memory_region"."""
    has_data = "data" in item
    params = item.get("parameters")
    has_binary = has_shm = False
    if isinstance(params, dict):
        has_binary = "binary_data_size" in params
        has_shm = "shared_memory_region" in params
    count = has_data + has_binary + has_shm
    if count != 1:
        msg = (
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But"
        )
        if count == 0:
            msg += " no field is set"
        else:
            msg += " set"
            if has_data:
                msg += " 'data'"
            if has_binary:
                msg += " 'binary_data_size'"
            if has_shm:
                msg += " 'shared_memory_region'"
        raise invalid_arg(msg)
    return has_binary, params if isinstance(params, dict) else None


def _decode_input(
    item: dict[str, Any],
    body: Body,
    offset: int,
    request: InferenceRequest,
    model_name: str,
    max_input_size: int,
) -> int:
    has_binary, params = _content_fields(item)
    name = item.get("name")
    if not isinstance(name, str):
        raise internal(
            f"Unable to parse 'name': {_NOT_STRING if 'name' in item else _missing('name')}"
        )
    datatype = item.get("datatype")
    if not isinstance(datatype, str):
        raise internal(
            f"Unable to parse 'datatype': {_NOT_STRING if 'datatype' in item else _missing('datatype')}"
        )
    shape = item.get("shape")
    if not isinstance(shape, list):
        raise internal(
            f"Unable to parse 'shape': {_NOT_ARRAY if 'shape' in item else _missing('shape')}"
        )
    for dim in shape:
        if not _is_uint(dim):
            raise internal(f"Unable to parse 'shape': {_NOT_UINT}")
    if name in request.inputs:
        raise invalid_arg(f"{request_prefix(request.id)}input '{name}' already exists in request")
    try:
        dtype: DataType | None = DataType(datatype)
    except ValueError:
        dtype = None

    if has_binary:
        assert params is not None
        size = params["binary_data_size"]
        if not _is_uint(size):
            raise internal(f"Unable to parse 'binary_data_size': {_NOT_UINT}")
        end = offset + size
        if end > len(body):
            raise invalid_arg(
                f"unexpected size for input '{name}', expecting {end - len(body)} additional "
                f"bytes for model '{model_name}'"
            )
        if dtype is None:
            raise invalid_arg(f"invalid datatype for input {name}")
        count = element_count(name, shape)
        request.inputs[name] = _binary_tensor(
            name, dtype, shape, count, body, offset, size, request, model_name
        )
        return end

    if "shared_memory_region" in (params or {}):
        region = params["shared_memory_region"] if params else ""
        raise invalid_arg(f"Unable to find shared memory region: '{region}'")

    count = element_count(name, shape)
    data = item["data"]
    if dtype is None:
        raise invalid_arg(f"invalid datatype for input {name}")
    if dtype in (DataType.FP16, DataType.BF16):
        raise invalid_arg(
            f"receiving {dtype.value} data via JSON is not supported. Please use the binary "
            f"data format for input {name}"
        )
    if not isinstance(data, list):
        raise internal(f"Unable to parse 'data': {_NOT_ARRAY}")
    if count == 0:
        request.inputs[name] = np.empty(shape, dtype=dtype.numpy_dtype)
        return offset
    itemsize = dtype.itemsize
    if dtype is not DataType.BYTES and count * itemsize > max_input_size:
        raise invalid_arg(
            f"JSON input '{name}' has a byte_size ({count * itemsize} bytes) that exceeds the "
            f"maximum allowed value of {max_input_size} bytes. Use --http-max-input-size to "
            "increase the limit."
        )
    request.inputs[name] = json_tensor(name, dtype, shape, count, data, request, model_name)
    return offset


def _binary_tensor(
    name: str,
    dtype: DataType,
    shape: list[int],
    count: int,
    body: Body,
    offset: int,
    size: int,
    request: InferenceRequest,
    model_name: str,
) -> np.ndarray:
    if dtype is DataType.BYTES:
        return _bytes_from_buffer(
            memoryview(body)[offset : offset + size], shape, count, name, request, model_name
        )
    expected = count * dtype.itemsize
    if size != expected:
        raise invalid_arg(
            f"{request_prefix(request.id)}input byte size mismatch for input '{name}' for model "
            f"'{model_name}'. Expected {expected}, got {size}"
        )
    return np.frombuffer(body, dtype=dtype.numpy_dtype, count=count, offset=offset).reshape(shape)


def _bytes_from_buffer(
    view: memoryview,
    shape: list[int],
    count: int,
    name: str,
    request: InferenceRequest,
    model_name: str,
) -> np.ndarray:
    items: list[bytes] = []
    pos, end = 0, len(view)
    checked = 0
    truncated = False
    unpack = _LE.unpack_from
    while pos < end:
        checked += 1
        if pos + 4 > end:
            truncated = True
            break
        (n,) = unpack(view, pos)
        pos += 4
        if checked > count:
            raise invalid_arg(
                f"{request_prefix(request.id)}unexpected number of string elements {checked} "
                f"for inference input '{name}' for model '{model_name}', expecting {count}"
            )
        if pos + n > end:
            truncated = True
            break
        items.append(bytes(view[pos : pos + n]))
        pos += n
    if truncated or checked != count:
        raise invalid_arg(
            f"{request_prefix(request.id)}expected {count} string elements for inference "
            f"input '{name}' for model '{model_name}', got {checked}"
        )
    out = np.empty(count, dtype=object)
    out[:] = items
    return out.reshape(shape)


# Per datatype: (inferred numpy kinds accepted by the fast path, value check, error message).
_JSON_RULES: dict[DataType, tuple[str, Callable[[Any], bool], str]] = {
    DataType.BOOL: ("b", _is_bool, _NOT_BOOL),
    DataType.UINT8: ("iu", _is_uint, _NOT_UINT),
    DataType.UINT16: ("iu", _is_uint, _NOT_UINT),
    DataType.UINT32: ("iu", _is_uint, _NOT_UINT),
    DataType.UINT64: ("iu", _is_uint, _NOT_UINT),
    DataType.INT8: ("iu", _is_int, _NOT_INT),
    DataType.INT16: ("iu", _is_int, _NOT_INT),
    DataType.INT32: ("iu", _is_int, _NOT_INT),
    DataType.INT64: ("iu", _is_int, _NOT_INT),
    DataType.FP32: ("iuf", _is_number, _NOT_NUMBER),
    DataType.FP64: ("iuf", _is_number, _NOT_NUMBER),
}


def json_tensor(
    name: str,
    dtype: DataType,
    shape: list[int],
    count: int,
    data: list[Any],
    request: InferenceRequest,
    model_name: str,
) -> np.ndarray:
    """A JSON ``data`` array (nested or flat, row-major) as a numpy array of ``shape``."""
    if dtype is DataType.BYTES:
        flat = _flatten(data, _is_str, _NOT_STRING)
        if len(flat) != count:
            raise invalid_arg(
                f"{request_prefix(request.id)}expected {count} string elements for inference "
                f"input '{name}' for model '{model_name}', got {len(flat)}"
            )
        out = np.empty(count, dtype=object)
        out[:] = [s.encode("utf-8") for s in flat]
        return out.reshape(shape)
    kinds, check, message = _JSON_RULES[dtype]
    target = dtype.numpy_dtype
    arr: np.ndarray | None = None
    try:
        inferred = np.array(data)
    except (ValueError, OverflowError):
        inferred = None
    if inferred is not None and inferred.dtype.kind in kinds:
        unsigned = dtype.value.startswith("U")
        if not (unsigned and inferred.dtype.kind == "i" and inferred.size and inferred.min() < 0):
            arr = inferred
    if arr is None:
        # Slow path: exact Triton errors (types, ragged data, nesting depth).
        flat = _flatten(data, check, message)
        arr = np.array(flat, dtype=object)
    if arr.size != count:
        if arr.size > count:
            raise internal(
                "Unable to parse 'data': Shape does not match true shape of 'data' field"
            )
        raise internal("Failed to parse 'data' field: shape does not match true shape")
    if arr.dtype.kind == "O" or arr.dtype != target:
        arr = arr.astype(target) if arr.dtype.kind != "O" else _cast_objects(arr, target)
    return arr.reshape(shape)


def _cast_objects(arr: np.ndarray, target: np.dtype) -> np.ndarray:
    # Triton casts out-of-range integers C-style (wrapping); do the same.
    if target.kind in "iu":
        wide = np.array([int(v) & UINT64_MAX for v in arr], dtype=np.uint64)
        return wide.astype(target)
    return arr.astype(target)


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _flatten(data: list[Any], check: Callable[[Any], bool], message: str) -> list[Any]:
    out: list[Any] = []
    append = out.append

    def walk(node: list[Any], depth: int) -> None:
        if depth >= MAX_JSON_DEPTH:
            raise invalid_arg(
                "Unable to parse 'data': JSON nesting depth exceeds maximum allowed limit "
                f"({MAX_JSON_DEPTH})"
            )
        for el in node:
            if type(el) is list:
                walk(el, depth + 1)
            elif check(el):
                append(el)
            else:
                if depth + 1 >= MAX_JSON_DEPTH:
                    raise invalid_arg(
                        "Unable to parse 'data': JSON nesting depth exceeds maximum allowed "
                        f"limit ({MAX_JSON_DEPTH})"
                    )
                raise internal(f"Unable to parse 'data': {message}")

    walk(data, 0)
    return out


def _decode_output(item: Any, request: InferenceRequest) -> str:
    if not isinstance(item, dict):
        raise internal(f"Unable to parse 'name': {_missing('name')}")
    params = item.get("parameters")
    binary = False
    class_count = 0
    if params is not None:
        if not isinstance(params, dict):
            raise internal(f"Unable to parse 'parameters': {_NOT_OBJECT}")
        if "shared_memory_region" in params:
            if "classification" in params:
                raise invalid_arg(
                    "Output can't set both 'shared_memory_region' and 'classification'"
                )
            if params.get("binary_data") is True:
                raise invalid_arg("Output can't set both 'shared_memory_region' and 'binary_data'")
    name = item.get("name")
    if not isinstance(name, str):
        raise internal(
            f"Unable to parse 'name': {_NOT_STRING if 'name' in item else _missing('name')}"
        )
    if params is not None:
        if "classification" in params:
            class_count = params["classification"]
            if not _is_uint(class_count):
                raise internal(f"Unable to set 'classification': {_NOT_UINT}")
        if "shared_memory_region" in params:
            raise invalid_arg(
                f"Unable to find shared memory region: '{params['shared_memory_region']}'"
            )
        if "binary_data" in params:
            binary = params["binary_data"]
            if not _is_bool(binary):
                raise internal(f"Unable to parse 'binary_data': {_NOT_BOOL}")
    request.output_parameters[name] = {"binary_data": binary, "classification": class_count}
    return name


def raw_binary_request(
    body: Body,
    config: ModelConfig,
    model_name: str,
    model_version: int | None,
    max_input_size: int,
) -> DecodedRequest:
    """Triton's "raw binary request" (``Inference-Header-Content-Length: 0``): the whole body
    is the single input of a single-input model; the shape is deduced from the config."""
    if len(body) > max_input_size:
        raise invalid_arg(
            f"Raw input has a byte_size ({len(body)} bytes) that exceeds the maximum allowed "
            f"value of {max_input_size} bytes. Use --http-max-input-size to increase the limit."
        )
    request = InferenceRequest(model_name=model_name, inputs={}, model_version=model_version)
    if len(config.inputs) != 1:
        raise invalid_arg(
            f"Raw request must only have 1 input (found {len(config.inputs)}) to be deduced "
            "but got 1 inputs in request"
        )
    io = config.inputs[0]
    dims = list(io.dims)
    if io.datatype is DataType.BYTES:
        if dims != [1]:
            raise invalid_arg(
                f"Unexpected raw input name '{io.name}' with data type 'BYTES' and shape "
                f"{dims_str(dims)}: raw binary input of BYTES type must have shape [1]"
            )
        arr = np.empty(1, dtype=object)
        arr[0] = bytes(body)
        shape = dims
    else:
        itemsize = io.datatype.itemsize
        variable = [i for i, d in enumerate(dims) if d == -1]
        fixed = 1
        for d in dims:
            if d != -1:
                fixed *= d
        if len(variable) > 1 or (fixed and len(body) % (fixed * itemsize)):
            raise invalid_arg(
                f"{request_prefix('')}input byte size mismatch for input '{io.name}' for model "
                f"'{model_name}'. Expected {fixed * itemsize}, got {len(body)}"
            )
        if variable:
            dims[variable[0]] = len(body) // (fixed * itemsize) if fixed else 0
        shape = dims
        arr = np.frombuffer(body, dtype=io.datatype.numpy_dtype)
    if config.max_batch_size > 0:
        shape = [1, *shape]
    try:
        request.inputs[io.name] = arr.reshape(shape)
    except ValueError:
        count = 1
        for d in shape:
            count *= d
        raise invalid_arg(
            f"{request_prefix('')}input byte size mismatch for input '{io.name}' for model "
            f"'{model_name}'. Expected {count * io.datatype.itemsize}, got {len(body)}"
        ) from None
    return DecodedRequest(request, True)


# ---------------------------------------------------------------------------------- encoding


@dataclass(slots=True)
class EncodedResponse:
    """An encoded ``/infer`` response: ``parts`` joined form the body; ``header_length`` is
    set when binary outputs follow the JSON header."""

    parts: list[bytes | memoryview]
    header_length: int | None


def _output_datatype(name: str, array: np.ndarray, config: ModelConfig | None) -> DataType:
    if array.dtype == np.uint16 and config is not None:
        io = config.output_map.get(name)
        if io is not None and io.datatype is DataType.BF16:
            return DataType.BF16
    return DataType.from_numpy(array.dtype)


def _parameter_json(params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, (bytes, bytearray)):
            raise unsupported(
                "Response parameter of type 'TRITONSERVER_PARAMETER_BYTES' is not currently "
                "supported"
            )
        if isinstance(value, (bool, int, float, str)):
            out[key] = value
        elif isinstance(value, np.generic):
            out[key] = value.item()
        else:
            out[key] = str(value)
    return out


def encode_infer_response(
    response: InferenceResponse,
    decoded: DecodedRequest,
    config: ModelConfig | None,
    labels: Callable[[str], Sequence[str] | None] | None = None,
) -> EncodedResponse:
    """Encode a response as Triton does: JSON outputs inline, binary outputs appended.

    :param config: the model's config (batching for classification, BF16 outputs).
    :param labels: the classification labels of an output name (its ``label_filename``).
    """
    request = decoded.request
    out_params = request.output_parameters
    header: dict[str, Any] = {}
    if response.id:
        header["id"] = response.id
    header["model_name"] = response.model_name or request.model_name
    header["model_version"] = str(response.model_version)
    if response.parameters:
        header["parameters"] = _parameter_json(response.parameters)
    outputs: list[dict[str, Any]] = []
    binary_parts: list[bytes | memoryview] = []
    batched = config is not None and config.max_batch_size > 0
    for name, array in response.outputs.items():
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        opts = out_params.get(name)
        binary = opts["binary_data"] if opts is not None else decoded.binary_default
        class_count = opts["classification"] if opts is not None else 0
        if class_count > 0:
            array = classify(
                array, class_count, batched=batched, labels=labels(name) if labels else None
            )
            dtype = DataType.BYTES
        else:
            dtype = _output_datatype(name, array, config)
        entry: dict[str, Any] = {
            "name": name,
            "datatype": dtype.value,
            "shape": list(array.shape),
        }
        if binary:
            raw = _raw_bytes(array, dtype)
            entry["parameters"] = {"binary_data_size": len(raw)}
            if len(raw):
                binary_parts.append(raw)
        else:
            entry["data"] = _json_data(array, dtype)
        outputs.append(entry)
    header["outputs"] = outputs
    head = orjson.dumps(header, option=_NUMPY_OPTS)
    if binary_parts:
        return EncodedResponse([head, *binary_parts], len(head))
    return EncodedResponse([head], None)


def _raw_bytes(array: np.ndarray, dtype: DataType) -> bytes | memoryview:
    if dtype is DataType.BYTES:
        return serialize_bytes_tensor(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    array = np.ascontiguousarray(array)
    return array.data.cast("B") if array.size else b""


def _json_data(array: np.ndarray, dtype: DataType) -> Any:
    if dtype is DataType.BYTES:
        return [_text(v) for v in array.reshape(-1).tolist()]
    if dtype in (DataType.FP16, DataType.BF16):
        raise invalid_arg(
            f"sending {dtype.value} data via JSON is not supported. Please use the binary "
            "data format for output"
        )
    flat = array.reshape(-1)
    if not flat.flags.c_contiguous or flat.dtype.byteorder == ">":
        flat = np.ascontiguousarray(flat, dtype=flat.dtype.newbyteorder("="))
    return flat


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return value if isinstance(value, str) else str(value)


def join_parts(parts: list[bytes | memoryview]) -> bytes:
    """The response body as one ``bytes`` object."""
    return parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)


def error_for_exception(exc: BaseException) -> TritonXError:
    """Any exception raised while decoding or encoding as a TritonXError (INTERNAL if not one)."""
    return TritonXError.wrap(exc)
