"""Wire ↔ core conversion for the gRPC frontend.

``ModelInferRequest`` → :class:`~tritonx.types.InferenceRequest` (raw or typed tensor
contents, parameters, requested outputs) and :class:`~tritonx.types.InferenceResponse` →
``ModelInferResponse`` (outputs always in ``raw_output_contents``), with the checks and
messages of Triton's ``src/grpc/infer_handler.cc``.

Hot path: raw input bytes become numpy arrays with ``np.frombuffer`` (no copy), and each
output is turned into bytes exactly once with ``.tobytes()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonx._core.validation import dims_str, request_prefix
from tritonx._proto import service_pb2
from tritonx.dataplane import parse_version
from tritonx.datatypes import DataType, deserialize_bytes_tensor, serialize_bytes_tensor
from tritonx.errors import TritonXError, invalid_arg, unsupported
from tritonx.types import SEQUENCE_END, SEQUENCE_START, InferenceRequest, InferenceResponse

#: The request parameters starting with ``triton_`` that gRPC clients may send.
TRITON_RESERVED_REQUEST_PARAMS = ("triton_enable_empty_final_response",)

_DATATYPES: dict[str, DataType] = {d.value: d for d in DataType}

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
#: numpy dtype of an output array → protocol datatype name (BF16 is decided by the config).
_OUTPUT_DATATYPE: dict[np.dtype[Any], str] = {
    d.numpy_dtype: d.value for d in DataType if d not in (DataType.BYTES, DataType.BF16)
}
_UINT16 = np.dtype(np.uint16)


@dataclass(slots=True)
class StreamOptions:
    """Per-request options that only the transport acts on."""

    #: ``triton_enable_empty_final_response``: forward a decoupled model's bare final flag.
    enable_empty_final_response: bool = False


# ---------------------------------------------------------------------- requests


def request_from_proto(
    msg: service_pb2.ModelInferRequest,
) -> tuple[InferenceRequest, StreamOptions]:
    """Decode a ``ModelInferRequest``; raises INVALID_ARG :class:`TritonXError` on bad input."""
    request = InferenceRequest(
        model_name=msg.model_name,
        inputs={},
        model_version=parse_version(msg.model_version),
        id=msg.id,
    )
    options = StreamOptions()
    if msg.parameters:
        _apply_parameters(request, options, msg.parameters)
    request.inputs = _inputs(msg)
    if msg.outputs:
        request.requested_outputs = _requested_outputs(request, msg)
    return request, options


def _apply_parameters(request: InferenceRequest, options: StreamOptions, parameters: Any) -> None:
    """Triton's ``SetInferenceRequestMetadata``: sequence/priority/timeout keys are request
    options, ``triton_*`` keys are reserved, everything else goes to the model."""
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
            options.enable_empty_final_response = param.bool_param
        elif kind in ("int64_param", "bool_param", "string_param", "double_param"):
            params[key] = getattr(param, kind)
        else:
            raise invalid_arg(
                f"invalid value type for '{key}' parameter, expected int64_param, "
                "bool_param, or string_param."
            )


def _inputs(msg: service_pb2.ModelInferRequest) -> dict[str, np.ndarray]:
    model = msg.model_name
    raws = msg.raw_input_contents
    nraw = len(raws)
    inputs: dict[str, np.ndarray] = {}
    index = 0
    for io in msg.inputs:
        name = io.name
        if io.parameters and "shared_memory_region" in io.parameters:
            raise unsupported(
                f"shared memory input '{name}' for model '{model}': client shared memory "
                "is not supported by this server"
            )
        datatype = _DATATYPES.get(io.datatype)
        if datatype is None:
            raise invalid_arg(
                f"{request_prefix(msg.id)}invalid datatype '{io.datatype}' for input "
                f"'{name}' of model '{model}'"
            )
        shape = tuple(io.shape)
        if any(d < 0 for d in shape):
            raise invalid_arg(
                f"{request_prefix(msg.id)}unexpected shape for input '{name}' for model "
                f"'{model}': dimensions must be non-negative, got {dims_str(shape)}"
            )
        has_contents = io.HasField("contents")
        if has_contents and nraw:
            raise invalid_arg(
                "contents field must not be specified when using raw_input_contents for "
                f"'{name}' for model '{model}'"
            )
        if has_contents:
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
    raw: bytes,
) -> np.ndarray:
    count = math.prod(shape)
    if datatype is DataType.BYTES:
        try:
            array = deserialize_bytes_tensor(raw)
        except TritonXError as exc:
            raise invalid_arg(
                f"{request_prefix(msg.id)}input '{name}' for model '{msg.model_name}': "
                f"{exc.message}"
            ) from None
        if array.size != count:
            raise _string_count_error(msg, name, count, array.size)
        return array.reshape(shape)
    expected = count * datatype.itemsize
    if len(raw) != expected:
        raise _byte_size_error(msg, name, expected, len(raw))
    return np.frombuffer(raw, dtype=datatype.numpy_dtype).reshape(shape)


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
    request: InferenceRequest, msg: service_pb2.ModelInferRequest
) -> tuple[str, ...]:
    names: list[str] = []
    for out in msg.outputs:
        names.append(out.name)
        if not out.parameters:
            continue
        for key, param in out.parameters.items():
            if key == "classification":
                kind = param.WhichOneof("parameter_choice")
                if kind not in ("int64_param", "uint64_param"):
                    raise invalid_arg(
                        "invalid value type for 'classification' parameter, expected int64_param."
                    )
                request.output_parameters.setdefault(out.name, {})["classification"] = int(
                    getattr(param, kind)
                )
            elif key == "shared_memory_region":
                raise unsupported(
                    f"shared memory output '{out.name}' for model '{msg.model_name}': client "
                    "shared memory is not supported by this server"
                )
    return tuple(names)


# ---------------------------------------------------------------------- responses


def set_parameter(param: Any, value: object) -> None:
    """Store a Python value in an ``InferParameter`` (bool, int, float or str)."""
    if isinstance(value, bool):
        param.bool_param = value
    elif isinstance(value, int):
        param.int64_param = value
    elif isinstance(value, float):
        param.double_param = value
    elif isinstance(value, (bytes, bytearray)):
        raise unsupported(
            "Response parameter of type 'TRITONSERVER_PARAMETER_BYTES' is not currently supported"
        )
    else:
        param.string_param = str(value)


#: Returns the configured datatype name of ``output`` of ``(model, version)``, or None.
DatatypeLookup = Callable[[str, int, str], "str | None"]


def fill_response(
    msg: service_pb2.ModelInferResponse,
    response: InferenceResponse,
    configured_datatype: DatatypeLookup | None = None,
) -> None:
    """Write ``response`` into ``msg``: metadata, parameters, outputs in ``raw_output_contents``.

    :param configured_datatype: consulted for ``uint16`` arrays only, to tell BF16 outputs
        (held as raw ``uint16`` bits) from UINT16 ones.
    """
    msg.model_name = response.model_name
    msg.model_version = str(response.model_version)
    msg.id = response.id
    if response.parameters:
        params = msg.parameters
        for key, value in response.parameters.items():
            set_parameter(params[key], value)
    outputs = response.outputs
    if not outputs:
        return
    add = msg.outputs.add
    raws: list[bytes] = []
    for name, array in outputs.items():
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        dtype = array.dtype
        datatype = _OUTPUT_DATATYPE.get(dtype)
        if datatype is None and dtype.byteorder == ">":  # the wire is little-endian
            array = array.astype(dtype.newbyteorder("<"))
            dtype = array.dtype
            datatype = _OUTPUT_DATATYPE.get(dtype)
        if datatype is None:
            if dtype.kind in "OSU":
                add(name=name, datatype="BYTES", shape=array.shape)
                raws.append(serialize_bytes_tensor(array))
                continue
            raise TritonXError(
                f"output '{name}' of model '{response.model_name}' has unsupported numpy "
                f"dtype '{dtype}'"
            )
        if dtype == _UINT16 and configured_datatype is not None:
            configured = configured_datatype(response.model_name, response.model_version, name)
            if configured == "BF16":
                datatype = "BF16"
        add(name=name, datatype=datatype, shape=array.shape)
        raws.append(array.tobytes())
    msg.raw_output_contents.extend(raws)


def response_to_proto(
    response: InferenceResponse, configured_datatype: DatatypeLookup | None = None
) -> service_pb2.ModelInferResponse:
    """A new ``ModelInferResponse`` holding ``response``."""
    msg = service_pb2.ModelInferResponse()
    fill_response(msg, response, configured_datatype)
    return msg


def stream_error(
    request: service_pb2.ModelInferRequest | None,
    error: BaseException,
    *,
    final: bool | None = None,
    model_name: str = "",
    model_version: str = "",
) -> service_pb2.ModelStreamInferResponse:
    """An in-stream error message: ``error_message`` plus the request id (and, for errors
    reported after the request was accepted, model, version and ``triton_final_response``)."""
    err = TritonXError.wrap(error)
    msg = service_pb2.ModelStreamInferResponse(error_message=err.message)
    infer = msg.infer_response
    if request is not None:
        infer.id = request.id
    if final is not None:
        infer.model_name = model_name
        infer.model_version = model_version
        infer.parameters["triton_final_response"].bool_param = final
    return msg
