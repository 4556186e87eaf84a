"""``ModelInferRequest`` → :class:`~tritonx.types.InferenceRequest` for the gRPC frontend.

Raw (``raw_input_contents``) or typed (``InferTensorContents``) tensor data, parameters and
requested outputs, with the checks and messages of Triton's ``src/grpc/infer_handler.cc``.
Raw input bytes become numpy arrays with ``np.frombuffer`` (no copy), and so do inputs in
system shared memory (read-only views on the region, :mod:`tritonx._dataplane.shared_memory`). The raw
contents of a large message are views of the bytes grpc received
(:func:`tritonx._transports.grpc.receive.split_raw_contents`), passed as ``raws``.

BYTES elements and typed contents are converted element by element in Python; the servicer
decodes with ``offload=True``, which raises :class:`Offload` on meeting an input with more
than :data:`OFFLOAD_ELEMENTS` of them, and then decodes the request in a worker thread (so
ordinary requests pay for no separate check). Parsing a BYTES buffer stops at the first
element past the shape's count, so its cost is bounded by the shape, not by the buffer.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonx._dataplane.shared_memory import SharedMemoryManager, SharedMemoryUse
from tritonx.datatypes import DataType
from tritonx.errors import TritonXError, invalid_arg
from tritonx.pipeline import Offload
from tritonx.proto import service_pb2
from tritonx.types import SEQUENCE_END, SEQUENCE_START, InferenceRequest
from tritonx.wire import dims_str, request_prefix

#: Inputs with more elements than this that are converted one by one (BYTES, typed
#: contents) make a request heavy: it is decoded off the event loop.
OFFLOAD_ELEMENTS = 16384

_LE = struct.Struct("<I")

#: The request parameters starting with ``triton_`` that gRPC clients may send.
TRITON_RESERVED_REQUEST_PARAMS = ("triton_enable_empty_final_response",)

_DATATYPES: dict[str, DataType] = {d.value: d for d in DataType}
#: DataType → (numpy dtype, bytes per element), for the fixed-size types
_FIXED = {d: (d.numpy_dtype, d.itemsize) for d in DataType if d is not DataType.BYTES}

#: Typed ``InferTensorContents`` field → the datatype it holds, per declared input datatype
#: (``int_contents`` carries INT8/INT16/INT32, ``uint_contents`` UINT8/UINT16/UINT32).
_FIELD_OF: dict[DataType, str] = {
    DataType.BOOL: "bool_contents",
    DataType.INT8: "int_contents",
    DataType.INT16: "int_contents",
    DataType.INT32: "int_contents",
    DataType.INT64: "int64_contents",
    DataType.UINT8: "uint_contents",
    DataType.UINT16: "uint_contents",
    DataType.UINT32: "uint_contents",
    DataType.UINT64: "uint64_contents",
    DataType.FP32: "fp32_contents",
    DataType.FP64: "fp64_contents",
    DataType.BYTES: "bytes_contents",
}
_FIELD_TYPE: dict[str, DataType] = {
    "bool_contents": DataType.BOOL,
    "int_contents": DataType.INT32,
    "int64_contents": DataType.INT64,
    "uint_contents": DataType.UINT32,
    "uint64_contents": DataType.UINT64,
    "fp32_contents": DataType.FP32,
    "fp64_contents": DataType.FP64,
    "bytes_contents": DataType.BYTES,
}


@dataclass(slots=True)
class DecodedRequest:
    """A decoded ``ModelInferRequest``: the request and what only the transport acts on.

    :param request: the request for the data plane (``output_parameters`` holds the
        ``classification`` of the outputs that ask for it).
    :param enable_empty_final_response: ``triton_enable_empty_final_response``: forward a
        decoupled model's bare final flag on the stream.
    :param shm: the shared-memory regions the request reads inputs from and writes outputs
        to (None when it uses none); the servicer releases it once the response is built.
    """

    request: InferenceRequest
    enable_empty_final_response: bool = False
    shm: SharedMemoryUse | None = None


def decode_infer_request(
    msg: service_pb2.ModelInferRequest,
    model_version: int | None,
    *,
    offload: bool = False,
    shm: SharedMemoryManager | None = None,
    raws: Sequence[bytes | memoryview] | None = None,
) -> DecodedRequest:
    """Decode a ``ModelInferRequest`` for ``model_version`` (its ``model_version`` field,
    already parsed with :func:`tritonx.wire.parse_version`).

    :param offload: raise :class:`Offload` instead of converting an input of more than
        :data:`OFFLOAD_ELEMENTS` BYTES or typed elements.
    :param shm: the server's shared-memory regions (None: no region is registered).
    :param raws: the raw input contents, when they are not in ``msg`` (taken out of the
        message by :func:`tritonx._transports.grpc.receive.split_raw_contents`); None: ``msg``'s.
    :raises TritonXError: with Triton's code and message for every malformed part (the
        regions leased before the error, or before :class:`Offload`, are released).
    """
    request = InferenceRequest(
        model_name=msg.model_name,
        inputs={},
        model_version=model_version,
        id=msg.id,
    )
    decoded = DecodedRequest(request)
    try:
        if msg.parameters:
            _apply_parameters(decoded, msg.parameters)
        request.inputs = _inputs(msg, offload, decoded, shm, raws)
        if msg.outputs:
            request.requested_outputs = _requested_outputs(decoded, msg, shm)
    except BaseException:
        if decoded.shm is not None:
            decoded.shm.release()
        raise
    return decoded


def _shm_use(decoded: DecodedRequest, shm: SharedMemoryManager | None) -> SharedMemoryUse:
    if decoded.shm is None:
        decoded.shm = SharedMemoryUse(shm)
    return decoded.shm


def _shm_params(tensor: Any) -> tuple[str, int, int] | None:
    """Triton's ``ParseSharedMemoryParams``: (region, offset, byte size) of a tensor in
    shared memory, None when it is not, with Triton's messages for malformed parameters."""
    params = tensor.parameters
    name = tensor.name
    region_param = params.get("shared_memory_region")
    region = None
    if region_param is not None:
        if region_param.WhichOneof("parameter_choice") != "string_param":
            raise invalid_arg(
                "invalid value type for 'shared_memory_region' parameter for tensor "
                f"'{name}', expected string_param."
            )
        region = region_param.string_param
    values = [0, 0]
    for i, key in enumerate(("shared_memory_offset", "shared_memory_byte_size")):
        param = params.get(key)
        if param is None:
            continue
        if region is None:
            raise invalid_arg(
                f"'{key}' can not be specified without 'shared_memory_region' parameter for "
                f"tensor '{name}'"
            )
        if param.WhichOneof("parameter_choice") != "int64_param":
            raise invalid_arg(
                f"invalid value type for '{key}' parameter for tensor '{name}', expected "
                "int64_param."
            )
        values[i] = param.int64_param
    if region is None:
        return None
    if "shared_memory_byte_size" not in params:
        raise invalid_arg(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
            f"parameter for tensor '{name}'"
        )
    return region, values[0], values[1]


def _apply_parameters(decoded: DecodedRequest, parameters: Any) -> None:
    """Triton's ``SetInferenceRequestMetadata``: sequence/priority/timeout keys are request
    options, ``triton_*`` keys are reserved, everything else goes to the model."""
    request = decoded.request
    params = request.parameters
    for key, param in parameters.items():
        kind = param.WhichOneof("parameter_choice")
        if key == "sequence_id":
            if kind == "int64_param":
                request.correlation_id = param.int64_param
            elif kind == "string_param":
                request.correlation_id = param.string_param
            else:
                raise invalid_arg(
                    "invalid value type for 'sequence_id' parameter, expected int64_param "
                    "or string_param."
                )
        elif key in ("sequence_start", "sequence_end"):
            if kind != "bool_param":
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
            if param.bool_param:
                request.flags |= SEQUENCE_START if key == "sequence_start" else SEQUENCE_END
        elif key == "priority":
            if kind == "int64_param":
                if param.int64_param < 0:
                    raise invalid_arg("invalid value for 'priority', expected value >= 0.")
                request.priority = param.int64_param
            elif kind == "uint64_param":
                request.priority = param.uint64_param
            else:
                raise invalid_arg(
                    "invalid value type for 'priority' parameter, expected int64_param or "
                    "uint64_param."
                )
        elif key == "timeout":
            if kind != "int64_param":
                raise invalid_arg(
                    "invalid value type for 'timeout' parameter, expected int64_param."
                )
            request.timeout_us = param.int64_param
        elif key.startswith("triton_"):
            if key not in TRITON_RESERVED_REQUEST_PARAMS:
                raise invalid_arg(
                    "parameter keys starting with 'triton_' are reserved for Triton usage. "
                    "Only the following keys starting with 'triton_' are allowed: "
                    + " ".join(TRITON_RESERVED_REQUEST_PARAMS)
                )
            if kind != "bool_param":
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
            decoded.enable_empty_final_response = param.bool_param
        elif kind in ("int64_param", "bool_param", "string_param", "double_param"):
            params[key] = getattr(param, kind)
        else:
            raise invalid_arg(
                f"invalid value type for '{key}' parameter, expected int64_param, "
                "bool_param, or string_param."
            )


def _inputs(
    msg: service_pb2.ModelInferRequest,
    offload: bool,
    decoded: DecodedRequest,
    shm: SharedMemoryManager | None,
    raws: Sequence[bytes | memoryview] | None = None,
) -> dict[str, np.ndarray]:
    model = msg.model_name
    if raws is None:
        raws = msg.raw_input_contents
    nraw = len(raws)
    inputs: dict[str, np.ndarray] = {}
    index = 0
    for io in msg.inputs:
        name = io.name
        in_shm = _shm_params(io) if io.parameters else None
        datatype = _DATATYPES.get(io.datatype)
        if datatype is None:
            raise invalid_arg(
                f"{request_prefix(msg.id)}invalid datatype '{io.datatype}' for input "
                f"'{name}' of model '{model}'"
            )
        shape = tuple(io.shape)
        if shape and min(shape) < 0:
            raise invalid_arg(
                f"{request_prefix(msg.id)}unexpected shape for input '{name}' for model "
                f"'{model}': dimensions must be non-negative, got {dims_str(shape)}"
            )
        has_contents = io.HasField("contents")
        if offload and (has_contents or datatype is DataType.BYTES):
            if math.prod(shape) > OFFLOAD_ELEMENTS:
                raise Offload
        if in_shm is not None:
            if has_contents:
                raise invalid_arg(
                    "unexpected 'content' provided when using shared memory for input tensor "
                    f"'{name}' for model '{model}'"
                )
            raw = _shm_use(decoded, shm).input(*in_shm)
            array = _raw_input(msg, name, datatype, shape, raw)
        elif has_contents and nraw:
            raise invalid_arg(
                "contents field must not be specified when using raw_input_contents for "
                f"'{name}' for model '{model}'"
            )
        elif has_contents:
            array = _typed_input(msg, name, datatype, shape, io.contents)
        elif index < nraw:
            array = _raw_input(msg, name, datatype, shape, raws[index])
            index += 1
        else:
            raise invalid_arg(
                f"unable to find data for input tensor '{name}' for model '{model}' in request."
            )
        if name in inputs:
            raise invalid_arg(f"{request_prefix(msg.id)}input '{name}' already exists in request")
        inputs[name] = array
    if index < nraw:
        raise invalid_arg(
            f"{request_prefix(msg.id)}expected {index} raw_input_contents (one per input) for "
            f"model '{model}', got {nraw}"
        )
    return inputs


def _byte_size_error(
    msg: service_pb2.ModelInferRequest, name: str, expected: int, got: int
) -> TritonXError:
    return invalid_arg(
        f"{request_prefix(msg.id)}input byte size mismatch for input '{name}' for model "
        f"'{msg.model_name}'. Expected {expected}, got {got}"
    )


def _string_count_error(
    msg: service_pb2.ModelInferRequest, name: str, expected: int, got: int
) -> TritonXError:
    return invalid_arg(
        f"{request_prefix(msg.id)}expected {expected} string elements for inference input "
        f"'{name}' for model '{msg.model_name}', got {got}"
    )


def _raw_input(
    msg: service_pb2.ModelInferRequest,
    name: str,
    datatype: DataType,
    shape: tuple[int, ...],
    raw: bytes | memoryview,
) -> np.ndarray:
    count = math.prod(shape)
    if datatype is DataType.BYTES:
        return _bytes_input(msg, name, raw, count).reshape(shape)
    np_dtype, itemsize = _FIXED[datatype]
    expected = count * itemsize
    if len(raw) != expected:
        raise _byte_size_error(msg, name, expected, len(raw))
    return np.frombuffer(raw, dtype=np_dtype).reshape(shape)


def _bytes_input(
    msg: service_pb2.ModelInferRequest, name: str, raw: bytes | memoryview, count: int
) -> np.ndarray:
    """Length-prefixed BYTES elements of ``raw``: exactly ``count`` of them, else
    INVALID_ARG (parsing stops at the first element past ``count``, as Triton's)."""
    view = memoryview(raw)
    items: list[bytes] = []
    append = items.append
    unpack = _LE.unpack_from
    pos, end = 0, len(view)
    truncated = ""
    while pos < end:
        if pos + 4 > end:
            truncated = "incomplete 4-byte length prefix"
            break
        (n,) = unpack(view, pos)
        pos += 4
        if len(items) == count:
            raise invalid_arg(
                f"{request_prefix(msg.id)}unexpected number of string elements {count + 1} "
                f"for inference input '{name}' for model '{msg.model_name}', expecting {count}"
            )
        if pos + n > end:
            truncated = f"element of {n} bytes runs past the buffer"
            break
        append(view[pos : pos + n].tobytes())
        pos += n
    if truncated:
        raise invalid_arg(
            f"{request_prefix(msg.id)}input '{name}' for model '{msg.model_name}': BYTES "
            f"tensor is truncated: {truncated}"
        )
    if len(items) != count:
        raise _string_count_error(msg, name, count, len(items))
    array = np.empty(count, dtype=object)
    array[:] = items
    return array


def _typed_input(
    msg: service_pb2.ModelInferRequest,
    name: str,
    datatype: DataType,
    shape: tuple[int, ...],
    contents: Any,
) -> np.ndarray:
    fields = contents.ListFields()
    model = msg.model_name
    count = math.prod(shape)
    if len(fields) > 1:
        raise invalid_arg(
            f"unexpected explicit tensor data for input tensor '{name}' for model '{model}', "
            "binary data was already supplied."
        )
    if not fields:  # contents present but empty: zero elements
        values: Any = ()
        got_count = 0
    else:
        descriptor, values = fields[0]
        field_name = descriptor.name
        if _FIELD_OF.get(datatype) != field_name:
            field_type = _FIELD_TYPE.get(field_name, DataType.BYTES)
            raise invalid_arg(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model}' of type '{field_type.value}', expected datatype "
                f"'{datatype.value}'"
            )
        got_count = len(values)
    if datatype is DataType.BYTES:
        if got_count != count:
            raise _string_count_error(msg, name, count, got_count)
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    if got_count != count:
        itemsize = datatype.itemsize
        raise _byte_size_error(msg, name, count * itemsize, got_count * itemsize)
    wide = _FIELD_TYPE[_FIELD_OF[datatype]] if datatype in _FIELD_OF else datatype
    array = np.array(values, dtype=wide.numpy_dtype)
    if wide is not datatype:  # INT8/INT16/UINT8/UINT16 carried in 32-bit fields
        array = array.astype(datatype.numpy_dtype)
    return array.reshape(shape)


def _requested_outputs(
    decoded: DecodedRequest, msg: service_pb2.ModelInferRequest, shm: SharedMemoryManager | None
) -> tuple[str, ...]:
    request = decoded.request
    names: list[str] = []
    for out in msg.outputs:
        names.append(out.name)
        if not out.parameters:
            continue
        in_shm = _shm_params(out)
        param = out.parameters.get("classification")
        if param is not None:
            kind = param.WhichOneof("parameter_choice")
            if kind not in ("int64_param", "uint64_param"):
                raise invalid_arg(
                    "invalid value type for 'classification' parameter, expected int64_param."
                )
            if in_shm is not None:
                raise invalid_arg(
                    "output can't set both 'shared_memory_region' and 'classification'"
                )
            request.output_parameters.setdefault(out.name, {})["classification"] = int(
                getattr(param, kind)
            )
        if in_shm is not None:
            _shm_use(decoded, shm).output(out.name, *in_shm)
    return tuple(names)
