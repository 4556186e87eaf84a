"""Conversions between pb_utils objects (and their wire forms) and the core's requests,
responses and errors, on the server side."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tritonx.backend import LoadContext
from tritonx.config import IOConfig, ModelConfig
from tritonx.errors import Code, TritonXError
from tritonx.types import InferenceRequest, InferenceResponse
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


def _config_shape(shape: tuple[int, ...], io: IOConfig, batching: bool) -> tuple[int, ...]:
    """What Triton's core makes of an output's shape when its config has ``reshape``: the
    sizes at the reshape's ``-1`` positions fill the ``-1`` positions of ``dims``, after the
    batch dimension (``InferenceResponse::Output::Reshape``). A shape that does not fit the
    reshape is left as it is."""
    assert io.reshape is not None
    offset = 1 if batching and shape else 0
    body = shape[offset:]
    if len(body) != len(io.reshape):
        return shape
    variable = [s for s, r in zip(body, io.reshape, strict=True) if r == -1]
    if sum(1 for d in io.dims if d == -1) != len(variable):
        return shape
    sizes = iter(variable)
    new = (*shape[:offset], *(next(sizes) if d == -1 else d for d in io.dims))
    return new if math.prod(new) == math.prod(shape) else shape


class OutputCheck:
    """What becomes of the outputs a python model returns, as in Triton.

    Triton checks neither their datatype nor their shape against the config (the stub keeps
    the outputs the client requested, or every configured output when it requested none;
    the core then only looks up the output's config): an output the config does not declare,
    or the client did not request, is dropped; the others go out as the model made them,
    except that an output whose config has ``reshape`` gets the config's ``dims`` (the core's
    ``Reshape``). The state outputs of a sequence batcher's implicit state go to the core as
    they are.
    """

    def __init__(self, config: ModelConfig) -> None:
        self.outputs: dict[str, IOConfig] = dict(config.output_map)
        self.names = tuple(self.outputs)
        self.batching = config.max_batch_size > 0
        self.states = frozenset(s.output_name for s in config.raw.sequence_batching.state)

    def check(
        self, tensors: Iterable[tuple[str, np.ndarray, str]], requested: Sequence[str] | None
    ) -> dict[str, np.ndarray]:
        """The outputs to return, as the core holds them.

        :param tensors: ``(name, array, datatype)`` as the model returned them.
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
            array = to_core_output(array, datatype)
            if io.reshape is not None:
                shape = _config_shape(array.shape, io, self.batching)
                if shape != array.shape:
                    array = array.reshape(shape)
            out[name] = array
        return out

    def response(
        self, response: pb_utils.InferenceResponse, requested: Sequence[str] | None
    ) -> InferenceResponse:
        """A pb_utils response as a core response (its outputs as :meth:`check` keeps them)."""
        err = core_error(response.error())
        parameters = parameters_of(response.parameters())
        if err is not None:
            return InferenceResponse(error=err, parameters=parameters)
        outputs = self.check(
            [
                (t.backend_name, t.backend_array, t.backend_datatype)
                for t in response.output_tensors()
            ],
            requested,
        )
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
