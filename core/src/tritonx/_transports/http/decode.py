"""``/infer`` request bodies → :class:`~tritonx.types.InferenceRequest`.

Follows Triton's ``http_server.cc`` (messages and error codes included): the JSON header (all
of the body, or its first ``Inference-Header-Content-Length`` bytes) is parsed with orjson
(:func:`~tritonx._transports.http.json_header.parse_json_header`, re-exported here: deep and
huge headers are read there); binary-extension inputs become views on the body
(:mod:`tritonx._transports.http.binary`), JSON ``data`` becomes a numpy array
(:mod:`tritonx._transports.http.json_tensor`). A raw binary request
(``Inference-Header-Content-Length: 0``) is the single input of a single-input model.

A body whose decoding is heavy (:func:`heavy_body`: a JSON header over
:data:`OFFLOAD_JSON_BYTES`, or BYTES binary data over as much) is decoded in a worker thread
by the route, so the event loop keeps serving.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonx._dataplane.shared_memory import SharedMemoryManager, SharedMemoryUse
from tritonx._transports.http.binary import Body, binary_tensor
from tritonx._transports.http.errors import internal
from tritonx._transports.http.json_header import parse_json_header
from tritonx._transports.http.json_tensor import (
    INT64_MAX,
    NOT_ARRAY,
    NOT_BOOL,
    NOT_OBJECT,
    NOT_STRING,
    NOT_UINT,
    UINT64_MAX,
    is_bool,
    is_uint,
    json_tensor,
    missing,
)
from tritonx.config import ModelConfig
from tritonx.datatypes import DataType
from tritonx.errors import invalid_arg
from tritonx.pipeline import Offload
from tritonx.types import SEQUENCE_END, SEQUENCE_START, InferenceRequest
from tritonx.wire import dims_str, request_prefix


@dataclass(slots=True)
class DecodedRequest:
    """A decoded ``/infer`` body: the request and how to send its outputs back.

    :param request: the request for the data plane (``output_parameters`` holds each
        requested output's ``binary_data`` and ``classification``).
    :param binary_default: the encoding of outputs the client did not list
        (``binary_data_output``, or True for raw binary requests).
    :param shm: the shared-memory regions the request reads inputs from and writes outputs
        to (None when it uses none); the route releases it once the response is written.
    """

    request: InferenceRequest
    binary_default: bool = False
    shm: SharedMemoryUse | None = None


#: JSON headers (or control bodies) larger than this are parsed off the event loop, and so
#: are bodies with more BYTES binary data than this.
OFFLOAD_JSON_BYTES = 256 * 1024

#: protocol datatype name → DataType (a dict lookup: cheaper than ``DataType(name)``)
_DATATYPES = {d.value: d for d in DataType}


def heavy_body(body: Body, header_length: int | None) -> bool:
    """Whether decoding ``body`` is worth a worker thread: a JSON header over
    :data:`OFFLOAD_JSON_BYTES`, or as much binary data with a BYTES input among it (BYTES
    elements are parsed one by one)."""
    json_length = len(body) if header_length is None else header_length
    if json_length > OFFLOAD_JSON_BYTES:
        return True
    if len(body) - json_length <= OFFLOAD_JSON_BYTES:
        return False
    return b'"BYTES"' in bytes(memoryview(body)[:json_length])


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
    shm: SharedMemoryManager | None = None,
) -> DecodedRequest:
    """Decode an ``/infer`` body (JSON header + binary tensors) into an InferenceRequest.

    :param header_length: ``Inference-Header-Content-Length`` (None: the whole body is JSON).
    :param shm: the server's shared-memory regions (None: no region is registered).
    :raises TritonXError: with Triton's code and message for every malformed part (the
        regions leased before the error are released).
    """
    request = InferenceRequest(model_name=model_name, inputs={}, model_version=model_version)
    decoded = DecodedRequest(request)
    try:
        _decode(decoded, body, header_length, model_name, max_input_size, shm)
    except BaseException:
        if decoded.shm is not None:
            decoded.shm.release()
        raise
    return decoded


def _decode(
    decoded: DecodedRequest,
    body: Body,
    header_length: int | None,
    model_name: str,
    max_input_size: int,
    shm: SharedMemoryManager | None,
) -> None:
    request = decoded.request
    length = len(body) if header_length is None else header_length
    doc = parse_json_header(body, length, max_input_size)
    if not isinstance(doc, dict):
        doc = {}

    # id
    if "id" in doc:
        rid = doc["id"]
        if not isinstance(rid, str):
            raise internal(f"Unable to parse 'id': {NOT_STRING}")
        request.id = rid

    # request parameters
    if "parameters" in doc:
        params = doc["parameters"]
        if not isinstance(params, dict):
            raise internal("failed to get request params.")
        decoded.binary_default = _parse_parameters(params, request)

    # inputs
    inputs = doc.get("inputs")
    if not isinstance(inputs, list):
        raise internal(
            f"Unable to parse 'inputs': {NOT_ARRAY if 'inputs' in doc else missing('inputs')}"
        )
    offset = length
    total = len(body)
    for item in inputs:
        if not isinstance(item, dict):
            raise internal(f"Unable to parse 'name': {missing('name')}")
        offset = _decode_input(item, body, offset, decoded, model_name, max_input_size, shm)
    if offset != total:
        raise invalid_arg(f"unexpected additional input data for model '{model_name}'")

    # outputs
    if "outputs" in doc:
        outputs = doc["outputs"]
        if not isinstance(outputs, list):
            raise internal(f"Unable to parse 'outputs': {NOT_ARRAY}")
        names: list[str] = []
        for item in outputs:
            names.append(_decode_output(item, decoded, shm))
        request.requested_outputs = tuple(names)


def _parse_parameters(params: dict[str, Any], request: InferenceRequest) -> bool:
    binary_default = False
    flags = 0
    for key, value in params.items():
        if key == "sequence_id":
            if is_uint(value):
                request.correlation_id = value
            elif isinstance(value, str):
                request.correlation_id = value
            else:
                raise internal(f"Unable to parse 'sequence_id': {NOT_STRING}")
        elif key in ("sequence_start", "sequence_end"):
            if not is_bool(value):
                raise internal(f"Unable to parse '{key}': {NOT_BOOL}")
            if value:
                flags |= SEQUENCE_START if key == "sequence_start" else SEQUENCE_END
        elif key in ("priority", "timeout"):
            if not is_uint(value):
                raise internal(f"Unable to parse '{key}': {NOT_UINT}")
            if key == "priority":
                request.priority = value
            else:
                request.timeout_us = value
        elif key == "binary_data_output":
            if not is_bool(value):
                raise internal(f"Unable to parse 'binary_data_output': {NOT_BOOL}")
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


def _shm_params(params: dict[str, Any]) -> tuple[str, int, int]:
    """Triton's ``CheckSharedMemoryData``: region, offset (default 0), byte size (default 0)."""
    region = params["shared_memory_region"]
    if not isinstance(region, str):
        raise internal(f"Unable to parse 'shared_memory_region': {NOT_STRING}")
    values = []
    for key in ("shared_memory_offset", "shared_memory_byte_size"):
        value = params.get(key, 0)
        if not is_uint(value):
            raise internal(f"Unable to parse '{key}': {NOT_UINT}")
        values.append(value)
    return region, values[0], values[1]


def _shm_use(decoded: DecodedRequest, shm: SharedMemoryManager | None) -> SharedMemoryUse:
    if decoded.shm is None:
        decoded.shm = SharedMemoryUse(shm)
    return decoded.shm


def _decode_input(
    item: dict[str, Any],
    body: Body,
    offset: int,
    decoded: DecodedRequest,
    model_name: str,
    max_input_size: int,
    shm: SharedMemoryManager | None,
) -> int:
    request = decoded.request
    params = item.get("parameters")
    if (
        type(params) is dict
        and len(params) == 1
        and "binary_data_size" in params
        and "data" not in item
    ):
        has_binary = True  # the usual binary input: nothing else to check in _content_fields
    else:
        has_binary, params = _content_fields(item)
    name, shape, dtype = _input_head(item, request)
    if has_binary:
        assert params is not None
        size = params["binary_data_size"]
        if not is_uint(size):
            raise internal(f"Unable to parse 'binary_data_size': {NOT_UINT}")
        end = offset + size
        if end > len(body):
            raise invalid_arg(
                f"unexpected size for input '{name}', expecting {end - len(body)} additional "
                f"bytes for model '{model_name}'"
            )
        if dtype is None:
            raise invalid_arg(f"invalid datatype for input {name}")
        count = element_count(name, shape)
        request.inputs[name] = binary_tensor(
            name, dtype, shape, count, body, offset, size, request, model_name
        )
        return end

    if params is not None and "shared_memory_region" in params:
        region, shm_offset, shm_size = _shm_params(params)
        if dtype is None:
            raise invalid_arg(f"invalid datatype for input {name}")
        count = element_count(name, shape)
        view = _shm_use(decoded, shm).input(region, shm_offset, shm_size)
        request.inputs[name] = binary_tensor(
            name, dtype, shape, count, view, 0, len(view), request, model_name
        )
        return offset

    request.inputs[name] = _json_input(
        item, name, dtype, shape, request, model_name, max_input_size
    )
    return offset


def _input_head(
    item: dict[str, Any], request: InferenceRequest
) -> tuple[str, list[int], DataType | None]:
    """An input's name, shape and datatype (None: not one of the protocol's), checked in
    Triton's order; a name already in ``request`` is refused."""
    name = item.get("name")
    if not isinstance(name, str):
        raise internal(
            f"Unable to parse 'name': {NOT_STRING if 'name' in item else missing('name')}"
        )
    datatype = item.get("datatype")
    if not isinstance(datatype, str):
        raise internal(
            f"Unable to parse 'datatype': {NOT_STRING if 'datatype' in item else missing('datatype')}"
        )
    shape = item.get("shape")
    if not isinstance(shape, list):
        raise internal(
            f"Unable to parse 'shape': {NOT_ARRAY if 'shape' in item else missing('shape')}"
        )
    for dim in shape:
        if type(dim) is not int or not 0 <= dim <= UINT64_MAX:
            raise internal(f"Unable to parse 'shape': {NOT_UINT}")
    if name in request.inputs:
        raise invalid_arg(f"{request_prefix(request.id)}input '{name}' already exists in request")
    return name, shape, _DATATYPES.get(datatype)


def _json_input(
    item: dict[str, Any],
    name: str,
    dtype: DataType | None,
    shape: list[int],
    request: InferenceRequest,
    model_name: str,
    max_input_size: int,
) -> np.ndarray:
    """An input given as JSON ``data``, with Triton's size and datatype checks."""
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
        raise internal(f"Unable to parse 'data': {NOT_ARRAY}")
    if count == 0:
        return np.empty(shape, dtype=dtype.numpy_dtype)
    itemsize = dtype.itemsize
    if dtype is not DataType.BYTES and itemsize > 1 and count > INT64_MAX // itemsize:
        raise invalid_arg(
            f"byte size overflow for input '{name}': element count ({count}) * data type size "
            f"({itemsize}) exceeds maximum allowed size ({INT64_MAX})"
        )
    if dtype is not DataType.BYTES and count * itemsize > max_input_size:
        raise invalid_arg(
            f"JSON input '{name}' has a byte_size ({count * itemsize} bytes) that exceeds the "
            f"maximum allowed value of {max_input_size} bytes. Use --http-max-input-size to "
            "increase the limit."
        )
    return json_tensor(name, dtype, shape, count, data, request, model_name)


def _decode_output(item: Any, decoded: DecodedRequest, shm: SharedMemoryManager | None) -> str:
    request = decoded.request
    if not isinstance(item, dict):
        raise internal(f"Unable to parse 'name': {missing('name')}")
    params = item.get("parameters")
    binary = False
    class_count = 0
    if params is not None:
        if not isinstance(params, dict):
            raise internal(f"Unable to parse 'parameters': {NOT_OBJECT}")
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
            f"Unable to parse 'name': {NOT_STRING if 'name' in item else missing('name')}"
        )
    if params is not None:
        if "classification" in params:
            class_count = params["classification"]
            if not is_uint(class_count):
                raise internal(f"Unable to set 'classification': {NOT_UINT}")
        if "shared_memory_region" in params:
            region, offset, size = _shm_params(params)
            _shm_use(decoded, shm).output(name, region, offset, size)
        if "binary_data" in params:
            binary = params["binary_data"]
            if not is_bool(binary):
                raise internal(f"Unable to parse 'binary_data': {NOT_BOOL}")
    request.output_parameters[name] = {"binary_data": binary, "classification": class_count}
    return name


#: The header naming the JSON header's length in a binary-extension body.
HEADER_LENGTH = "Inference-Header-Content-Length"
INT32_MAX = 2**31 - 1


def parse_header_length(value: str | None, content_length: int) -> int | None:
    """The ``Inference-Header-Content-Length`` header's ``value`` checked against a body of
    ``content_length`` bytes, with Triton's errors (None: no such header, all JSON).

    Without the header Triton takes the body's length as the header's: an empty body (no
    ``Content-Length``, ``Content-Length: 0`` or no chunk) is then a raw binary request
    of zero bytes (``GetInferenceHeaderLength``), not a JSON document that fails to parse.
    """
    if value is None:
        return None if content_length else 0
    try:
        parsed = int(value.strip())
    except ValueError:
        raise invalid_arg(f"Unable to parse {HEADER_LENGTH}, got: {value}") from None
    if not -(2**31) <= parsed <= INT32_MAX:
        raise invalid_arg(
            f"Unable to parse {HEADER_LENGTH}, value is out of range [ {-(2**31)}, {INT32_MAX} "
            f"], got: {value}"
        )
    if parsed < 0 or parsed > content_length:
        raise invalid_arg(
            f"inference header size should be in range (0, {content_length}), got: {value}"
        )
    return parsed


def decode_body(
    body: Body,
    header_value: str | None,
    config: ModelConfig,
    model_name: str,
    model_version: int | None,
    max_input_size: int,
    shm: SharedMemoryManager | None = None,
    *,
    offload: bool = False,
) -> DecodedRequest:
    """An ``/infer`` body, raw binary or JSON with binary tensors, decoded for
    ``model_name`` (whose ``config`` shapes a raw binary input).

    :param header_value: the ``Inference-Header-Content-Length`` header as sent (None: none).
    :param offload: raise :class:`~tritonx.pipeline.Offload` instead of decoding a body
        that is heavy to decode (:func:`heavy_body`): the pipeline decodes it again in a
        worker thread.
    """
    header_length = parse_header_length(header_value, len(body))
    if header_length == 0:
        return raw_binary_request(body, config, model_name, model_version, max_input_size)
    if offload and heavy_body(body, header_length):
        raise Offload
    return decode_infer_request(body, header_length, model_name, model_version, max_input_size, shm)


def raw_binary_request(
    body: Body,
    config: ModelConfig,
    model_name: str,
    model_version: int | None,
    max_input_size: int,
) -> DecodedRequest:
    """Triton's "raw binary request" (``Inference-Header-Content-Length: 0``): the whole body
    is the single input of a single-input model; the shape is deduced from the config, with
    Triton's messages (core ``InferenceRequest::Normalize``)."""
    if len(body) > max_input_size:
        raise invalid_arg(
            f"Raw input has a byte_size ({len(body)} bytes) that exceeds the maximum allowed "
            f"value of {max_input_size} bytes. Use --http-max-input-size to increase the limit."
        )
    prefix = request_prefix("")
    request = InferenceRequest(model_name=model_name, inputs={}, model_version=model_version)
    if len(config.inputs) != 1:
        raise invalid_arg(
            f"{prefix}Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(config.inputs)} inputs in '{model_name}' model configuration"
        )
    io = config.inputs[0]
    shape = [1] if config.max_batch_size != 0 else []
    dynamic = -1
    fixed = 1
    for dim in io.dims:
        if dim == -1:
            if dynamic != -1:
                raise invalid_arg(
                    f"{prefix}The shape of the raw input '{io.name}' can not be deduced because "
                    "there are more than one variable-sized dimension"
                )
            dynamic = len(shape)
        else:
            fixed *= dim
        shape.append(dim)
    if io.datatype is DataType.BYTES:
        if dynamic != -1 or fixed != 1:
            raise invalid_arg(
                f"{prefix}For BYTE datatype raw input '{io.name}', the model must have input "
                "shape [1]"
            )
        arr = np.empty(1, dtype=object)
        arr[0] = bytes(body)
        request.inputs[io.name] = arr.reshape(shape)
        return DecodedRequest(request, True)
    itemsize = io.datatype.itemsize
    if dynamic != -1:
        shape[dynamic] = len(body) // fixed // itemsize if fixed else 0
    expected = itemsize
    for dim in shape:
        expected *= dim
    if expected != len(body):
        raise invalid_arg(
            f"{prefix}input byte size mismatch for input '{io.name}' for model "
            f"'{model_name}'. Expected {expected}, got {len(body)}"
        )
    request.inputs[io.name] = np.frombuffer(body, dtype=io.datatype.numpy_dtype).reshape(shape)
    return DecodedRequest(request, True)
