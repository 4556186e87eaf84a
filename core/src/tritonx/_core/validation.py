"""Checking a request against its model's config before any backend sees it
(Triton core's ``InferenceRequest::Normalize``, with its messages)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tritonx.config import ModelConfig
from tritonx.datatypes import DataType
from tritonx.errors import TritonXError, invalid_arg
from tritonx.types import InferenceRequest
from tritonx.wire import dims_str, request_prefix

_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


def _names(names: Iterable[str]) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def _datatype_of(array: np.ndarray, expected: DataType) -> DataType:
    if expected is DataType.BF16 and array.dtype == np.uint16:
        return DataType.BF16
    return DataType.from_numpy(array.dtype)


def validate_request(request: InferenceRequest, config: ModelConfig) -> None:
    """Raise INVALID_ARG with Triton's message unless ``request`` fits ``config``.

    On success sets ``request.batch_size`` and applies configured ``reshape``s.
    """
    model = config.name
    if request.requested_outputs is not None:
        outputs = config.output_map
        for name in request.requested_outputs:
            if name not in outputs:
                raise invalid_arg(f"unexpected inference output '{name}' for model '{model}'")
        if len(set(request.requested_outputs)) != len(request.requested_outputs):
            raise _duplicate_output(request)

    expected = config.input_map
    inputs = request.inputs
    required = config.required_inputs
    if len(inputs) > len(expected) or len(inputs) < len(required):
        raise _input_count_error(request, config)
    for name in inputs:
        if name not in expected:
            raise invalid_arg(f"unexpected inference input '{name}' for model '{model}'")

    max_batch = config.max_batch_size
    batch_size = 1
    if max_batch > 0:
        batch: int | None = None
        for name, array in inputs.items():
            if array.ndim == 0:
                raise invalid_arg(
                    f"{request_prefix(request.id)}input '{name}' has no shape but model requires batch dimension "
                    f"for '{model}'"
                )
            if batch is None:
                batch = array.shape[0]
            elif array.shape[0] != batch:
                raise invalid_arg(
                    f"{request_prefix(request.id)}input '{name}' batch size does not match other inputs for '{model}'"
                )
        batch_size = batch or 0
        if batch_size > max_batch:
            raise invalid_arg(
                f"{request_prefix(request.id)}inference request batch-size must be <= {max_batch} for '{model}'"
            )

    for name, array in inputs.items():
        io = expected[name]
        if (
            array.dtype != io.numpy_dtype
            and (got_type := _datatype_of(array, io.datatype)) is not io.datatype
        ):
            raise invalid_arg(
                f"{request_prefix(request.id)}inference input '{name}' data-type is "
                f"'{got_type.value}', but model '{model}' expects '{io.datatype.value}'"
            )
        shape = array.shape[1:] if max_batch > 0 else array.shape
        if shape != io.dims and (  # equal: the common case, one tuple comparison
            len(shape) != len(io.dims)
            or any(d != -1 and d != s for d, s in zip(io.dims, shape, strict=True))
        ):
            raise _shape_error(request, config, name, array)
        if io.reshape is not None:
            target = ((array.shape[0],) if max_batch > 0 else ()) + io.reshape
            inputs[name] = array.reshape(target)
    request.batch_size = batch_size


# the messages of the failures (built only when a request fails)


def _duplicate_output(request: InferenceRequest) -> TritonXError:
    """A requested output named twice."""
    requested = list(request.requested_outputs or ())
    dup = next(n for n in requested if requested.count(n) > 1)
    return invalid_arg(f"{request_prefix(request.id)}output '{dup}' already exists in request")


def _input_count_error(request: InferenceRequest, config: ModelConfig) -> TritonXError:
    """More inputs than the model has, or fewer than it requires."""
    expected, inputs, required = config.input_map, request.inputs, config.required_inputs
    missing = [n for n in required if n not in inputs]
    got = _names(sorted(inputs))
    miss = _names(missing) if missing else "]"
    if len(required) == len(expected):
        head = f"expected {len(expected)} inputs"
    else:
        head = f"expected number of inputs between {len(required)} and {len(expected)}"
    return invalid_arg(
        f"{request_prefix(request.id)}{head} but got {len(inputs)} inputs for model '{config.name}'. Got input(s) "
        f"{got}, but missing required input(s) {miss}. Please provide all required input(s)."
    )


def _shape_error(
    request: InferenceRequest, config: ModelConfig, name: str, array: np.ndarray
) -> TritonXError:
    """Input ``name``'s shape does not fit its configured dims."""
    io = config.input_map[name]
    batching = config.max_batch_size > 0
    full = (-1, *io.dims) if batching else io.dims
    return invalid_arg(
        f"{request_prefix(request.id)}unexpected shape for input '{name}' for model '{config.name}'. Expected "
        f"{dims_str(full)}, got {dims_str(array.shape)}. " + (_BATCH_NOTE if batching else "")
    )
