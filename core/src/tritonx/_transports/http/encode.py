""":class:`~tritonx.types.InferenceResponse` → ``/infer`` response body, as Triton writes it.

The JSON header carries id, model, version, parameters and every output's name, datatype and
shape; outputs the client asked for as JSON carry ``data`` (:mod:`tritonx._transports.http.json_tensor`),
the others ``binary_data_size``, their raw bytes following the header in output order
(:mod:`tritonx._transports.http.binary`). Outputs requested with ``classification: k`` are sent as their
top-k classes (:func:`tritonx._dataplane.classification.classify`). Outputs requested in shared memory
are written to their region; their entry has name, datatype and shape only (as Triton's).
"""

from __future__ import annotations

import functools
import gzip
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from tritonx._dataplane.classification import classify
from tritonx._transports.http.binary import raw_bytes
from tritonx._transports.http.decode import HEADER_LENGTH, DecodedRequest
from tritonx._transports.http.errors import JSON_CONTENT_TYPE
from tritonx._transports.http.json_tensor import json_data
from tritonx.config import ModelConfig
from tritonx.datatypes import DataType
from tritonx.errors import unsupported
from tritonx.types import InferenceResponse

_NUMPY_OPTS = orjson.OPT_SERIALIZE_NUMPY
#: numpy dtype → (DataType, its name) of the fixed-size types (BF16 is decided by the config)
_FIXED: dict[np.dtype[Any], tuple[DataType, str]] = {
    d.numpy_dtype: (d, d.value) for d in DataType if d not in (DataType.BYTES, DataType.BF16)
}

#: A response with an output of more BYTES elements than this (encoded one by one), or of
#: more numeric elements than :data:`OFFLOAD_NUMERIC_ELEMENTS`, is encoded off the loop.
OFFLOAD_BYTES_ELEMENTS = 16384
OFFLOAD_NUMERIC_ELEMENTS = 262144


def heavy_response(response: InferenceResponse) -> bool:
    """Whether encoding (and compressing) ``response`` is worth a worker thread."""
    for array in response.outputs.values():
        if isinstance(array, np.ndarray) and array.size > OFFLOAD_BYTES_ELEMENTS:
            if array.dtype.kind == "O" or array.size > OFFLOAD_NUMERIC_ELEMENTS:
                return True
    return False


@dataclass(slots=True)
class EncodedResponse:
    """An encoded ``/infer`` response: ``parts`` joined form the body; ``header_length`` is
    set when binary outputs follow the JSON header."""

    parts: list[bytes | memoryview]
    header_length: int | None


def encode_infer_response(
    response: InferenceResponse,
    decoded: DecodedRequest,
    config: ModelConfig | None,
    labels: Callable[[str], Sequence[str] | None] | None = None,
) -> EncodedResponse:
    """Encode a response as Triton does: JSON outputs inline, binary outputs appended.

    :param config: the model's config (batching for classification, BF16 outputs).
    :param labels: the classification labels of an output name (its ``label_filename``);
        called only for outputs requested with ``classification``.
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
    shm = decoded.shm
    for name, array in response.outputs.items():
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        if shm is not None and name in shm.outputs:
            shm.write_output(name, array)
            dtype = _output_datatype(name, array, config)
            outputs.append({"name": name, "datatype": dtype.value, "shape": list(array.shape)})
            continue
        opts = out_params.get(name)
        binary = opts["binary_data"] if opts is not None else decoded.binary_default
        class_count = opts["classification"] if opts is not None else 0
        fixed = _FIXED.get(array.dtype)
        if class_count > 0:
            array = classify(
                array, class_count, batched=batched, labels=labels(name) if labels else None
            )
            dtype = DataType.BYTES
        elif fixed is not None and fixed[0] is not DataType.UINT16:  # UINT16 may be BF16
            dtype = fixed[0]
            if binary and array.flags.c_contiguous and array.dtype.byteorder != ">":
                # the usual binary output: its bytes as they are (a view, no copy)
                nbytes = array.nbytes
                outputs.append(
                    {
                        "name": name,
                        "datatype": fixed[1],
                        "shape": list(array.shape),
                        "parameters": {"binary_data_size": nbytes},
                    }
                )
                if nbytes:
                    binary_parts.append(array.data.cast("B"))
                continue
        else:
            dtype = _output_datatype(name, array, config)
        entry: dict[str, Any] = {
            "name": name,
            "datatype": dtype.value,
            "shape": list(array.shape),
        }
        if binary:
            raw = raw_bytes(array, dtype)
            entry["parameters"] = {"binary_data_size": len(raw)}
            if len(raw):
                binary_parts.append(raw)
        else:
            entry["data"] = json_data(array, dtype)
        outputs.append(entry)
    header["outputs"] = outputs
    head = orjson.dumps(header, option=_NUMPY_OPTS)
    if binary_parts:
        return EncodedResponse([head, *binary_parts], len(head))
    return EncodedResponse([head], None)


def _output_datatype(name: str, array: np.ndarray, config: ModelConfig | None) -> DataType:
    """The protocol datatype of an output: from its numpy dtype, except that ``uint16``
    arrays of outputs configured as BF16 (held as raw bits) are BF16."""
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


def join_parts(parts: list[bytes | memoryview]) -> bytes:
    """The response body as one ``bytes`` object."""
    return parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)


def response_encoding(accept: str | None) -> str:
    """Triton's ``CompressionTypeUsed``: the best of identity/gzip/deflate by q-value."""
    if not accept:
        return "identity"
    best, weight = "identity", 0.0
    for item in accept.split(","):
        item = item.lstrip(" ")
        if not item:
            continue
        name, sep, q = item.partition(";q=")
        if sep and not name:
            continue
        type_weight = 1.0
        if sep:
            try:
                type_weight = float(q)
            except ValueError:
                continue
        if name in ("identity", "deflate", "gzip") and type_weight > weight:
            best, weight = name, type_weight
    return best


def answer_encoder(
    decoded: DecodedRequest,
    config: ModelConfig,
    labels: Callable[[str], Sequence[str] | None],
    encoding: str,
) -> Callable[[InferenceResponse], tuple[bytes | bytearray, dict[str, str]]]:
    """:func:`encode_answer` for one request: called with the response only (a positional
    partial, the cheapest callable to make and call per request)."""
    return functools.partial(_encode_answer_for, decoded, config, labels, encoding)


def _encode_answer_for(
    decoded: DecodedRequest,
    config: ModelConfig,
    labels: Callable[[str], Sequence[str] | None],
    encoding: str,
    response: InferenceResponse,
) -> tuple[bytes | bytearray, dict[str, str]]:
    return encode_answer(response, decoded, config, labels, encoding)


def encode_answer(
    response: InferenceResponse,
    decoded: DecodedRequest,
    config: ModelConfig,
    labels: Callable[[str], Sequence[str] | None],
    encoding: str,
) -> tuple[bytes | bytearray, dict[str, str]]:
    """The body and headers of an ``/infer`` answer (compressed as ``encoding`` asks)."""
    encoded = encode_infer_response(response, decoded, config, labels)
    headers: dict[str, str] = {}
    if encoded.header_length is not None:
        headers[HEADER_LENGTH] = str(encoded.header_length)
        headers["Content-Type"] = "application/octet-stream"
    else:
        headers["Content-Type"] = JSON_CONTENT_TYPE
    payload: bytes | bytearray = join_parts(encoded.parts)
    if encoding == "gzip":
        payload = gzip.compress(payload, compresslevel=1)
        headers["Content-Encoding"] = "gzip"
    elif encoding == "deflate":
        payload = zlib.compress(payload, 1)
        headers["Content-Encoding"] = "deflate"
    return payload, headers
