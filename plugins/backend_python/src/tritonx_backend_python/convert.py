"""Conversions between pb_utils objects (and their wire forms) and the core's requests,
responses and errors, on the server side."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tritonx.backend import LoadContext
from tritonx.config import IOConfig, ModelConfig
from tritonx.datatypes import DataType
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.types import InferenceRequest, InferenceResponse
from tritonx.wire import dims_str
from tritonx_backend_python import _ipc, pb_utils
from tritonx_backend_python.messages import WireError, WireResponse

#: ``pb_utils.TritonError`` codes, in order, as core codes.
CODES = (
    Code.UNKNOWN,
    Code.INTERNAL,
    Code.NOT_FOUND,
    Code.INVALID_ARG,
    Code.UNAVAILABLE,
    Code.UNSUPPORTED,
    Code.ALREADY_EXISTS,
    Code.CANCELLED,
)
_PB_CODE = {code: i for i, code in enumerate(CODES)}


def core_error(error: WireError | pb_utils.TritonError | None) -> TritonXError | None:
    """A pb_utils error (or its wire form) as a TritonXError."""
    if error is None:
        return None
    if isinstance(error, pb_utils.TritonError):
        message, code = error.message(), error.code()
    else:
        message, code = error
    return TritonXError(message, CODES[code] if 0 <= code < len(CODES) else Code.INTERNAL)


def pb_error(error: TritonXError) -> pb_utils.TritonError:
    """A TritonXError as a pb_utils error."""
    return pb_utils.TritonError(error.message, _PB_CODE.get(error.code, 1))


def wire_error(error: TritonXError) -> WireError:
    """A TritonXError in its wire form."""
    return (error.message, _PB_CODE.get(error.code, 1))


def parameters_of(text: str) -> dict[str, Any]:
    """Parameters JSON (of a request or response) as a dict."""
    return json.loads(text) if text and text != "{}" else {}


def parameters_json(parameters: dict[str, Any]) -> str:
    """A parameters dict as JSON, the way pb_utils carries them."""
    return json.dumps(parameters) if parameters else "{}"


def to_core_output(array: np.ndarray, datatype: str) -> np.ndarray:
    """An output array as the core holds it (BYTES: object arrays of ``bytes``)."""
    if datatype == "BYTES":
        return _ipc.as_object_bytes(array)
    if datatype == "BF16" and array.dtype != np.uint16:
        return array.view(np.uint16)
    return array


def _dims_match(shape: Sequence[int], dims: Sequence[int]) -> bool:
    return len(shape) == len(dims) and all(
        d == -1 or d == s for d, s in zip(dims, shape, strict=True)
    )


def _config_name(datatype: str) -> str:
    try:
        return DataType(datatype).config_name
    except ValueError:
        return f"TYPE_{datatype}"


class OutputCheck:
    """Checks what a python model returns against its config, the way Triton's backends do.

    Outputs the client will get (those it requested, or every configured output) must have the
    configured datatype and shape (``-1`` matches any size; batching models add a leading batch
    dimension; an output with ``reshape`` may also have that shape). Outputs the config does not
    declare, or the client did not request, are dropped, as Triton's stub prunes them; the
    state outputs of a sequence batcher's implicit state go to the core as they are.
    """

    def __init__(self, config: ModelConfig) -> None:
        self.outputs: dict[str, IOConfig] = dict(config.output_map)
        self.names = tuple(self.outputs)
        self.batching = config.max_batch_size > 0
        self.states = frozenset(s.output_name for s in config.raw.sequence_batching.state)

    def _shape_ok(self, shape: tuple[int, ...], io: IOConfig) -> bool:
        if self.batching:
            if not shape:
                return False
            shape = shape[1:]
        if shape == io.dims:
            return True
        return _dims_match(shape, io.dims) or (
            io.reshape is not None and _dims_match(shape, io.reshape)
        )

    def check(
        self, tensors: Iterable[tuple[str, np.ndarray, str]], requested: Sequence[str] | None
    ) -> dict[str, np.ndarray]:
        """The outputs to return, as the core holds them.

        :param tensors: ``(name, array, datatype)`` as the model returned them.
        :raises TritonXError: INVALID_ARG with Triton's message for a wrong datatype or shape.
        """
        keep = requested or self.names
        out: dict[str, np.ndarray] = {}
        for name, array, datatype in tensors:
            if name in self.states:
                out[name] = to_core_output(array, datatype)
                continue
            if name not in keep:
                continue
            io = self.outputs.get(name)
            if io is None:
                continue
            if datatype != io.datatype.value:
                raise invalid_arg(
                    f"unexpected datatype {_config_name(datatype)} for inference output "
                    f"'{name}', expecting {io.datatype.config_name}"
                )
            if not self._shape_ok(array.shape, io):
                expected = (-1, *io.dims) if self.batching else io.dims
                raise invalid_arg(
                    f"unexpected shape for output '{name}', model configuration shape is "
                    f"{dims_str(expected)}, inference shape is {dims_str(array.shape)}"
                )
            out[name] = to_core_output(array, datatype)
        return out

    def response(
        self, response: pb_utils.InferenceResponse, requested: Sequence[str] | None
    ) -> InferenceResponse:
        """A pb_utils response as a core response, its outputs checked (a wrong one turns
        the response into an error)."""
        err = core_error(response.error())
        parameters = parameters_of(response.parameters())
        if err is not None:
            return InferenceResponse(error=err, parameters=parameters)
        try:
            outputs = self.check(
                [(t._name, t._array, t._datatype) for t in response._outputs], requested
            )
        except TritonXError as exc:
            return InferenceResponse(error=exc)
        return InferenceResponse(outputs=outputs, parameters=parameters)


def from_core_response(response: InferenceResponse) -> pb_utils.InferenceResponse:
    """A core response (e.g. of a BLS call) as a pb_utils response."""
    if response.error is not None:
        return pb_utils.InferenceResponse(error=pb_error(response.error))
    tensors = [pb_utils.Tensor(name, arr) for name, arr in response.outputs.items()]
    return pb_utils.InferenceResponse(tensors, parameters=dict(response.parameters) or None)


def wire_response(
    response: InferenceResponse | TritonXError, writer: _ipc.ShmWriter
) -> WireResponse:
    """A core response (or error) for the wire, tensors through ``writer``."""
    if isinstance(response, TritonXError):
        return (None, [], wire_error(response), "{}")
    if response.error is not None:
        return (None, [], wire_error(response.error), "{}")
    tensors = [(n, a, _ipc.datatype_of(a)) for n, a in response.outputs.items()]
    segment, descs = _ipc.pack_tensors(tensors, writer)
    return (segment, descs, None, json.dumps(response.parameters or {}))


def input_datatypes(config: ModelConfig) -> dict[str, str]:
    """Each configured input's datatype name."""
    return {io.name: io.datatype.value for io in config.inputs}


def bls_core_request(
    model_name: str,
    model_version: int,
    inputs: dict[str, np.ndarray],
    requested: Sequence[str],
    request_id: str,
    correlation_id: int | str,
    flags: int,
    timeout: int,
    parameters: str,
) -> InferenceRequest:
    """The core request a BLS ``pb_utils.InferenceRequest`` stands for."""
    return InferenceRequest(
        model_name=model_name,
        inputs=inputs,
        model_version=None if model_version is None or model_version < 0 else model_version,
        id=request_id,
        parameters=json.loads(parameters or "{}"),
        requested_outputs=tuple(requested) if requested else None,
        correlation_id=correlation_id,
        flags=flags,
        timeout_us=timeout,
    )


def initialize_args(ctx: LoadContext) -> dict[str, str]:
    """The ``args`` dict Triton passes to ``TritonPythonModel.initialize``."""
    return {
        "model_config": json.dumps(ctx.config.to_json_dict()),
        "model_instance_kind": ctx.instance.kind.removeprefix("KIND_"),
        "model_instance_name": ctx.instance.name,
        "model_instance_device_id": str(ctx.instance.device_id),
        "model_repository": str(ctx.model_dir),
        "model_version": str(ctx.version),
        "model_name": ctx.model_name,
    }
