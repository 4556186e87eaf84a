"""A model's inputs and outputs as OpenVINO describes them, and the config work done with them:
auto-complete (Triton's openvino ``AutoCompleteConfig``) and checking a config against the model
(``ValidateInputs`` / ``ValidateOutputs``).

Pure Python over :class:`PortInfo` lists: nothing here imports openvino.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tritonx.config import EditableModelConfig, IOConfig, ModelConfig
from tritonx.datatypes import DataType
from tritonx.errors import Code, TritonXError, invalid_arg

log = logging.getLogger("tritonx.backend.openvino")

#: OpenVINO element type names → Triton datatypes this backend serves. Triton's openvino
#: backend serves the same list less BF16; FP64 is left out because OpenVINO's CPU plugin
#: computes f64 in f32 (1e300 becomes 3.4e38), and OpenVINO strings are not mapped to BYTES.
ELEMENT_TO_DATATYPE: dict[str, DataType] = {
    "boolean": DataType.BOOL,
    "u8": DataType.UINT8,
    "u16": DataType.UINT16,
    "u32": DataType.UINT32,
    "u64": DataType.UINT64,
    "i8": DataType.INT8,
    "i16": DataType.INT16,
    "i32": DataType.INT32,
    "i64": DataType.INT64,
    "f16": DataType.FP16,
    "f32": DataType.FP32,
    "bf16": DataType.BF16,
}
DATATYPE_TO_ELEMENT: dict[DataType, str] = {v: k for k, v in ELEMENT_TO_DATATYPE.items()}


@dataclass(frozen=True, slots=True)
class PortInfo:
    """One model input or output.

    :param name: the port's first tensor name (``get_any_name``).
    :param names: every tensor name of the port (a config may use any of them).
    :param element: OpenVINO's element type name (``f32``, ``i64``, ``boolean``...).
    :param dims: the shape, -1 for every dynamic dimension; None for a dynamic rank.
    :param batch_layout: whether the port's layout has a batch (``N``) dimension.
    """

    name: str
    names: frozenset[str]
    element: str
    dims: tuple[int, ...] | None
    batch_layout: bool = False

    @property
    def datatype(self) -> DataType | None:
        """The Triton datatype, None when this backend does not serve the element type."""
        return ELEMENT_TO_DATATYPE.get(self.element)


def shape_str(dims: Iterable[int] | None) -> str:
    """Triton's ``ShapeToString``: ``[-1,16]`` (``[...]`` for a dynamic rank)."""
    return "[...]" if dims is None else "[" + ",".join(str(d) for d in dims) + "]"


def unsupported_datatype(datatype: str, what: str, tensor: str, model: str) -> TritonXError:
    """Triton's message for a datatype the backend cannot serve (INTERNAL, as Triton)."""
    reason = ""
    if datatype in ("TYPE_FP64", "f64"):
        reason = " (OpenVINO's CPU plugin computes FP64 in FP32 precision)"
    return TritonXError(
        f"unsupported datatype {datatype} for {what} '{tensor}' for model '{model}'{reason}",
        Code.INTERNAL,
    )


# --------------------------------------------------------------------------- auto-complete


def auto_complete(
    config: EditableModelConfig,
    inputs: Sequence[PortInfo],
    outputs: Sequence[PortInfo],
    default_max_batch_size: int,
) -> None:
    """Fill ``config`` from the model's ports, in place (Triton's openvino rules).

    * the model supports batching when every input's and output's layout has a batch (``N``)
      dimension: then ``max_batch_size`` 0 becomes ``default_max_batch_size`` (at least 1), and
      ``dynamic_batching {}`` is added when ``max_batch_size > 1`` and no scheduler is set; a
      non-zero ``max_batch_size`` on a model without batch layout is kept, with a warning;
    * inputs (outputs) are added only when the config lists none, in model order, without the
      batch dimension when batching; a rank-0 port gets ``dims: [1]``.
    """
    ports = (*inputs, *outputs)
    if ports and all(p.batch_layout for p in ports):
        if config.max_batch_size == 0:
            config.max_batch_size = max(default_max_batch_size, 1)
            log.warning(
                "autofilled max_batch_size to %d for model '%s' since batching is supported "
                "but no max_batch_size is specified in model configuration. Must specify "
                "max_batch_size to utilize autofill with a larger max batch size",
                config.max_batch_size,
                config.name,
            )
        if config.max_batch_size > 1 and not config.has_scheduler:
            config.enable_dynamic_batching()
    elif config.max_batch_size != 0:
        log.warning(
            "model layout for model %s does not support batching while non-zero "
            "max_batch_size is specified",
            config.name,
        )
    if config.input_count == 0:
        _fill(config, config.add_input, inputs, "input")
    if config.output_count == 0:
        _fill(config, config.add_output, outputs, "output")


def _fill(
    config: EditableModelConfig, add: Callable[..., None], ports: Iterable[PortInfo], what: str
) -> None:
    batching = config.max_batch_size > 0
    for port in ports:
        datatype = port.datatype
        if datatype is None:
            raise unsupported_datatype(port.element, what, port.name, config.name)
        if port.dims is None:
            raise invalid_arg(
                f"autofill failed for model '{config.name}': {what} '{port.name}' has a dynamic "
                "rank; specify its dims in the model configuration"
            )
        dims = list(port.dims[1:] if batching else port.dims)
        if batching and not port.dims:
            raise invalid_arg(
                f"autofill failed for model '{config.name}': {what} '{port.name}' is a scalar, "
                "which cannot have a batch dimension"
            )
        add(port.name, datatype, dims or [1])


# --------------------------------------------------------------------------- validation


def find_port(ports: Sequence[PortInfo], name: str) -> PortInfo | None:
    """The port one of whose tensor names is ``name``."""
    for port in ports:
        if name in port.names:
            return port
    return None


def validate_inputs(
    model_config: ModelConfig, inputs: Sequence[PortInfo], check_dims: bool = True
) -> None:
    """Refuse configured inputs that contradict the model's, with Triton's messages.

    :param check_dims: False with ``RESHAPE_IO_LAYERS``: the config's dims are applied to the
        model instead of being compared with it (only their number is checked).
    """
    name = model_config.name
    max_batch = model_config.max_batch_size
    if len(inputs) != len(model_config.inputs):
        raise invalid_arg(
            f"unable to load model '{name}', configuration expects "
            f"{len(model_config.inputs)} inputs, model provides {len(inputs)}"
        )
    for io in model_config.inputs:
        port = find_port(inputs, io.name)
        if port is None:
            raise invalid_arg(
                f"unexpected inference input '{io.name}', allowed inputs are: "
                + ", ".join(p.name for p in inputs)
            )
        _check_datatype(name, "input", io)
        if check_dims:
            _check_dims(name, io, port, max_batch, exact=False)
        elif io.reshape is None and port.dims is not None:
            rank = len(io.dims) + (1 if max_batch > 0 else 0)
            if rank != len(port.dims):
                raise invalid_arg(
                    f"unable to load model '{name}', RESHAPE_IO_LAYERS cannot give input "
                    f"'{io.name}' of shape {shape_str(port.dims)} the {rank} dimensions the "
                    "model configuration specifies"
                )


def validate_outputs(model_config: ModelConfig, outputs: Sequence[PortInfo]) -> None:
    """Refuse configured outputs that contradict the (reshaped) model's, with Triton's
    messages; dims are compared exactly, the batch dimension aside."""
    name = model_config.name
    max_batch = model_config.max_batch_size
    for io in model_config.outputs:
        port = find_port(outputs, io.name)
        if port is None:
            raise invalid_arg(
                f"unexpected inference output '{io.name}', allowed outputs are: "
                + ", ".join(p.name for p in outputs)
            )
        _check_datatype(name, "output", io)
        _check_dims(name, io, port, max_batch, exact=True)


def _check_datatype(model: str, what: str, io: IOConfig) -> None:
    if io.datatype not in DATATYPE_TO_ELEMENT:
        raise unsupported_datatype(io.datatype.config_name, what, io.name, model)


def _check_dims(model: str, io: IOConfig, port: PortInfo, max_batch: int, exact: bool) -> None:
    """Triton's ``CompareDimsSupported``, with the batch dimension left to the backend (it is
    made dynamic, or fixed to ``max_batch_size``, when the model is compiled)."""
    if port.dims is None:
        return  # a dynamic rank takes any configured shape
    dims = io.reshape if io.reshape is not None else io.dims
    model_shape = port.dims
    if not model_shape:
        if any(d != 1 for d in dims) or max_batch > 0:
            raise invalid_arg(
                f"unable to load model '{model}', scalar tensor '{io.name}', should only provide "
                "1 in the model configuration when the model doesn't support batching. Model "
                f"configuration provided: {shape_str(dims)}."
            )
        return
    if max_batch > 0:
        full = (-1, *dims)
        if len(model_shape) != len(full) or not _match(model_shape[1:], tuple(dims), exact):
            raise invalid_arg(
                f"model '{model}', tensor '{io.name}': the model expects {len(model_shape)} "
                f"dimensions (shape {shape_str(model_shape)}) but the model configuration "
                f"specifies {len(full)} dimensions (an initial batch dimension because "
                "max_batch_size > 0 followed by the explicit tensor shape, making complete "
                f"shape {shape_str(full)})"
            )
    elif len(model_shape) != len(dims) or not _match(model_shape, tuple(dims), exact):
        raise invalid_arg(
            f"model '{model}', tensor '{io.name}': the model expects {len(model_shape)} "
            f"dimensions (shape {shape_str(model_shape)}) but the model configuration "
            f"specifies {len(dims)} dimensions (shape {shape_str(dims)})"
        )


def _match(model_shape: tuple[int, ...], dims: tuple[int, ...], exact: bool) -> bool:
    return all(m == d for m, d in zip(model_shape, dims, strict=True) if exact or m != -1)
