""":class:`~tritonx.types.InferenceResponse` → ``ModelInferResponse`` for the gRPC frontend.

Outputs always go in ``raw_output_contents`` (as Triton sends them), each array turned into
bytes exactly once with ``.tobytes()``; outputs requested with ``classification: k`` are sent
as their top-k classes (:func:`tritonx._dataplane.classification.classify`). Outputs requested in shared
memory are written to their region and sent with an empty ``raw_output_contents`` entry (so
the others keep their index), as Triton sends them. Errors on a stream become
``ModelStreamInferResponse`` messages with ``error_message`` (:func:`stream_error`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tritonx._dataplane.classification import classify
from tritonx._transports.grpc.decode import OFFLOAD_ELEMENTS, DecodedRequest
from tritonx._transports.grpc.errors import bounded_message
from tritonx.config import ModelConfig
from tritonx.datatypes import DataType, serialize_bytes_tensor
from tritonx.errors import TritonXError, unsupported
from tritonx.proto import service_pb2
from tritonx.types import InferenceResponse

#: numpy dtype of an output array → protocol datatype name (BF16 is decided by the config).
_OUTPUT_DATATYPE: dict[np.dtype[Any], str] = {
    d.numpy_dtype: d.value for d in DataType if d not in (DataType.BYTES, DataType.BF16)
}
_UINT16 = np.dtype(np.uint16)


def heavy_response(response: InferenceResponse) -> bool:
    """Whether ``response`` has a BYTES (object) output of more than
    :data:`~tritonx._transports.grpc.decode.OFFLOAD_ELEMENTS` elements, serialized one by one: its
    encoding is worth a worker thread."""
    for array in response.outputs.values():
        if isinstance(array, np.ndarray) and array.dtype.kind == "O":
            if array.size > OFFLOAD_ELEMENTS:
                return True
    return False


def encode_infer_response(
    msg: service_pb2.ModelInferResponse,
    response: InferenceResponse,
    decoded: DecodedRequest | None,
    config: ModelConfig | None,
    labels: Callable[[str], Sequence[str] | None] | None = None,
) -> None:
    """Write ``response`` into ``msg``: metadata, parameters, outputs in ``raw_output_contents``.

    :param decoded: the request, for the outputs it asks to classify (None: none).
    :param config: the model's config (batching for classification, BF16 outputs: ``uint16``
        arrays of outputs configured as BF16, held as raw bits, are sent as BF16).
    :param labels: the classification labels of an output name (its ``label_filename``);
        called only for outputs requested with ``classification``.
    """
    outputs: Mapping[str, Any] = response.outputs
    if decoded is not None and decoded.request.output_parameters:
        outputs = _classified(outputs, decoded.request.output_parameters, config, labels)
    msg.model_name = response.model_name
    msg.model_version = str(response.model_version)
    msg.id = response.id
    if response.parameters:
        params = msg.parameters
        for key, value in response.parameters.items():
            set_parameter(params[key], value)
    if not outputs:
        return
    add = msg.outputs.add
    raws: list[bytes] = []
    shm = decoded.shm if decoded is not None else None
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
                if shm is not None and name in shm.outputs:
                    shm.write_output(name, array)
                    raws.append(b"")
                else:
                    raws.append(serialize_bytes_tensor(array))
                continue
            raise TritonXError(
                f"output '{name}' of model '{response.model_name}' has unsupported numpy "
                f"dtype '{dtype}'"
            )
        if dtype == _UINT16 and config is not None:
            io = config.output_map.get(name)
            if io is not None and io.datatype is DataType.BF16:
                datatype = "BF16"
        add(name=name, datatype=datatype, shape=array.shape)
        if shm is not None and name in shm.outputs:
            shm.write_output(name, array)
            raws.append(b"")
        else:
            raws.append(array.tobytes())
    msg.raw_output_contents.extend(raws)


def _classified(
    outputs: Mapping[str, Any],
    output_parameters: Mapping[str, Mapping[str, Any]],
    config: ModelConfig | None,
    labels: Callable[[str], Sequence[str] | None] | None,
) -> Mapping[str, Any]:
    """``outputs`` with those requested with ``classification: k`` replaced by their top-k
    classes (a new mapping in the same order; the response itself is left as it is)."""
    batched = config is not None and config.max_batch_size > 0
    result: dict[str, Any] | None = None
    for name, options in output_parameters.items():
        count = options.get("classification", 0)
        array = outputs.get(name)
        if count > 0 and array is not None:
            if result is None:
                result = dict(outputs)
            result[name] = classify(
                array, count, batched=batched, labels=labels(name) if labels else None
            )
    return outputs if result is None else result


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
    msg = service_pb2.ModelStreamInferResponse(error_message=bounded_message(err.message))
    infer = msg.infer_response
    if request is not None:
        infer.id = request.id
    if final is not None:
        infer.model_name = model_name
        infer.model_version = model_version
        infer.parameters["triton_final_response"].bool_param = final
    return msg
