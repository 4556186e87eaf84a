"""A model's inputs and outputs as TensorFlow describes them (a SavedModel's signature, a
GraphDef's placeholders and nodes), and the config work done with them: auto-complete (Triton's
tensorflow ``AutoCompleteHelper``) and checking a config against the model
(``ValidateTRITONTFModel``), with Triton's messages.

Pure Python over :class:`TensorInfo` lists: nothing here imports tensorflow.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tritonx.config import EditableModelConfig, IOConfig, ModelConfig
from tritonx.dims import compare_dims, shape_str
from tritonx.errors import Code, TritonXError, invalid_arg

log = logging.getLogger("tritonx.backend.tensorflow")

#: TensorFlow dtype names (``types_pb2.DataType.Name``) → Triton config datatypes: the list
#: Triton's tensorflow backend serves (no BF16, no complex or quantized types).
TF_TO_CONFIG: dict[str, str] = {
    "DT_BOOL": "TYPE_BOOL",
    "DT_UINT8": "TYPE_UINT8",
    "DT_UINT16": "TYPE_UINT16",
    "DT_UINT32": "TYPE_UINT32",
    "DT_UINT64": "TYPE_UINT64",
    "DT_INT8": "TYPE_INT8",
    "DT_INT16": "TYPE_INT16",
    "DT_INT32": "TYPE_INT32",
    "DT_INT64": "TYPE_INT64",
    "DT_HALF": "TYPE_FP16",
    "DT_FLOAT": "TYPE_FP32",
    "DT_DOUBLE": "TYPE_FP64",
    "DT_STRING": "TYPE_STRING",
}
CONFIG_TO_TF: dict[str, str] = {v: k for k, v in TF_TO_CONFIG.items()}


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One model input or output.

    :param name: the name a config uses: the signature key (SavedModel) or the node name
        (GraphDef).
    :param tensor: the tensor in the graph (``serving_default_x:0``, ``Identity:0``).
    :param dtype: TensorFlow's dtype name (``DT_FLOAT``); ``""`` when unknown.
    :param dims: the shape, -1 for unknown dimensions; ``()`` for a scalar or an unknown rank
        (Triton reads both as rank 0).
    """

    name: str
    tensor: str
    dtype: str
    dims: tuple[int, ...] = ()

    @property
    def config_type(self) -> str:
        """The Triton config datatype, ``TYPE_INVALID`` when Triton serves none for it."""
        return TF_TO_CONFIG.get(self.dtype, "TYPE_INVALID")


def type_str(config_type: str) -> str:
    """``TYPE_STRING`` as Triton names the datatype in messages (``TYPE_BYTES``)."""
    return "TYPE_BYTES" if config_type == "TYPE_STRING" else config_type


def check_supported(ios: Iterable[TensorInfo], what: str, model: str) -> None:
    """Triton's message for a signature tensor of a datatype it cannot serve."""
    for io in ios:
        if io.config_type == "TYPE_INVALID":
            raise TritonXError(
                f"unable to process {what} '{io.name}' for '{model}', unsupported datatype "
                f"'{io.dtype}'",
                Code.INTERNAL,
            )


# --------------------------------------------------------------------------- auto-complete


def supports_batch(ios: Iterable[TensorInfo]) -> bool:
    """Triton's ``ModelSupportsBatch``: every tensor of known rank starts with -1."""
    return all(not io.dims or io.dims[0] == -1 for io in ios)


def _find(ios: Sequence[TensorInfo], name: str) -> TensorInfo | None:
    for io in ios:
        if io.name == name:
            return io
    return None


def _config_dims(io: dict[str, Any]) -> list[int]:
    reshape = io.get("reshape")
    if reshape is not None:
        return [int(d) for d in reshape.get("shape", [])]
    return [int(d) for d in io.get("dims", [])]


def auto_complete(
    config: EditableModelConfig,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo],
    default_max_batch_size: int,
) -> None:
    """Fill ``config`` from a SavedModel signature, in place (Triton's rules):

    * ``max_batch_size`` 0 becomes ``default-max-batch-size`` when the signature supports
      batching (every tensor's first dimension is -1) and the configured tensors agree;
      a ``max_batch_size`` on a signature that cannot batch is an error;
      ``dynamic_batching {}`` is added when ``max_batch_size > 1`` and no scheduler is set;
    * configured inputs and outputs get their missing datatype and dims; inputs the config
      leaves out are added; outputs are all added when the config lists none;
    * rank-0 tensors cannot be completed (dims must be given).
    """
    name = config.name
    doc = config.to_dict()
    cfg_inputs: list[dict[str, Any]] = list(doc.get("input", []))
    cfg_outputs: list[dict[str, Any]] = list(doc.get("output", []))
    batching = _complete_batching(
        doc, name, (cfg_inputs, cfg_outputs), (inputs, outputs), default_max_batch_size
    )
    _complete_inputs(doc, name, cfg_inputs, inputs, batching)
    _complete_outputs(name, cfg_outputs, outputs, batching)
    doc["input"] = cfg_inputs
    doc["output"] = cfg_outputs
    config.update_from_dict(doc)


def _complete_batching(
    doc: dict[str, Any],
    name: str,
    config_ios: tuple[list[dict[str, Any]], list[dict[str, Any]]],
    model_ios: tuple[Sequence[TensorInfo], Sequence[TensorInfo]],
    default_max_batch_size: int,
) -> bool:
    """Check or fill ``max_batch_size`` and add ``dynamic_batching`` in the config ``doc``;
    True when the completed tensors get a batch dimension."""
    max_batch = int(doc.get("max_batch_size", 0))
    sig_batch = supports_batch((*model_ios[0], *model_ios[1]))
    if not sig_batch and max_batch > 0:
        raise TritonXError(
            f"unable to autofill for '{name}', configuration specified max-batch {max_batch} "
            "but model signature does not support batching",
            Code.INTERNAL,
        )
    hint = False
    if sig_batch:
        if config_ios[0] or config_ios[1]:
            hint = _batch_hint(name, config_ios, model_ios)
        else:
            hint = sig_batch
    batching = hint and default_max_batch_size > 0
    if max_batch == 0:
        max_batch = max(default_max_batch_size, 0) if batching else 0
        doc["max_batch_size"] = max_batch
        if batching:
            log.warning(
                "autofilled max_batch_size to %d for model '%s' since batching is supporrted "
                "but no max_batch_size is specified in model configuration. Must specify "
                "max_batch_size to utilize autofill with a larger max batch size",
                max_batch,
                name,
            )
    if max_batch > 1 and "sequence_batching" not in doc and "dynamic_batching" not in doc:
        doc["dynamic_batching"] = {}
    return batching


def _complete_inputs(
    doc: dict[str, Any],
    name: str,
    cfg_inputs: list[dict[str, Any]],
    inputs: Sequence[TensorInfo],
    batching: bool,
) -> None:
    """Complete the configured inputs, then add the model's others (those that are not a
    batch input's target nor a sequence control input)."""
    left = list(inputs)
    for io_cfg in cfg_inputs:
        model_io = _find(left, io_cfg.get("name", ""))
        if model_io is None:
            continue
        _fill_missing(name, model_io, io_cfg, batching)
        left.remove(model_io)
    for batch_input in doc.get("batch_input", []):
        for target in batch_input.get("target_name", []):
            found = _find(left, target)
            if found is not None:
                left.remove(found)
    for control in doc.get("sequence_batching", {}).get("control_input", []):
        found = _find(left, control.get("name", ""))
        if found is not None:
            left.remove(found)
    for model_io in left:
        blank: dict[str, Any] = {}
        _fill_missing(name, model_io, blank, batching)
        cfg_inputs.append(blank)


def _complete_outputs(
    name: str, cfg_outputs: list[dict[str, Any]], outputs: Sequence[TensorInfo], batching: bool
) -> None:
    """All the model's outputs when none is configured, else complete the configured ones."""
    if not cfg_outputs:
        for model_io in outputs:
            if not model_io.dims:
                raise invalid_arg(
                    f"Unable to autofill for '{name}': the rank of model tensor "
                    f"'{model_io.name}' is 0 which is not supported"
                )
            out: dict[str, Any] = {"name": model_io.name, "data_type": model_io.config_type}
            _set_dims(model_io, out, batching)
            cfg_outputs.append(out)
    else:
        for io_cfg in cfg_outputs:
            found = _find(outputs, io_cfg.get("name", ""))
            if found is not None:
                _fill_missing(name, found, io_cfg, batching)


def _batch_hint(
    name: str,
    config_ios: tuple[list[dict[str, Any]], list[dict[str, Any]]],
    model_ios: tuple[Sequence[TensorInfo], Sequence[TensorInfo]],
) -> bool:
    """Whether the configured tensors say "batching" (Triton's explicit batch hint): a tensor
    whose configured rank is the model's less one says yes, another rank says no; a tensor
    configured without dims hints yes weakly; ``allow_ragged_batch`` says yes."""
    hint = False
    explicit: bool | None = None
    for ios, model in zip(config_ios, model_ios, strict=True):
        for io_cfg in ios:
            if io_cfg.get("allow_ragged_batch"):
                return True
            model_io = _find(model, io_cfg.get("name", ""))
            if model_io is None:
                continue
            dims = _config_dims(io_cfg)
            model_explicit = len(model_io.dims) > 0
            if model_explicit and not dims and explicit is None:
                hint = True
            elif model_explicit and dims:
                agrees = len(dims) == len(model_io.dims) - 1
                if explicit is not None and explicit != agrees:
                    raise TritonXError(
                        f"unable to autofill for '{name}', model tensor configurations are "
                        "contradicting each other in terms of whether batching is supported",
                        Code.INTERNAL,
                    )
                explicit = agrees
                hint = agrees
    return hint


def _set_dims(model_io: TensorInfo, io_cfg: dict[str, Any], batching: bool) -> None:
    dims = list(model_io.dims[1:] if batching else model_io.dims)
    if not dims:  # a scalar per batch item: [1], reshaped to []
        dims = [1]
        io_cfg["reshape"] = {"shape": []}
    io_cfg["dims"] = dims


def _fill_missing(name: str, model_io: TensorInfo, io_cfg: dict[str, Any], batching: bool) -> None:
    """Triton's ``FillMissingValues``: the name (of a blank entry), the datatype when it is
    missing or invalid, the dims when none are given."""
    if not io_cfg:
        io_cfg["name"] = model_io.name
    if io_cfg.get("data_type", "TYPE_INVALID") not in CONFIG_TO_TF:
        io_cfg["data_type"] = model_io.config_type
    if not io_cfg.get("dims"):
        if not model_io.dims:
            raise invalid_arg(
                f"Unable to autofill for '{name}': the rank of model tensor '{model_io.name}' "
                "is 0 and dimensions are not defined"
            )
        _set_dims(model_io, io_cfg, batching)


# --------------------------------------------------------------------------- validation


def check_datatypes(config: ModelConfig) -> None:
    """Triton's ``ValidateModelConfig``: every configured datatype must be one TensorFlow
    serves (BF16 is not)."""
    for io in (*config.inputs, *config.outputs):
        if io.datatype.config_name not in CONFIG_TO_TF:
            raise invalid_arg(
                f"unsupported datatype '{io.datatype.config_name}' for tensor '{io.name}' for "
                f"model '{config.name}'"
            )


def _allowed(what: str, name: str, allowed: Iterable[str]) -> TritonXError:
    return invalid_arg(
        f"unexpected inference {what} '{name}', allowed {what}s are: "
        + ", ".join(sorted(set(allowed)))
    )


def _config_shape(io: IOConfig) -> tuple[int, ...]:
    return io.reshape if io.reshape is not None else io.dims


def _check_type(model: str, what: str, io: IOConfig, model_io: TensorInfo) -> None:
    if model_io.dtype and model_io.config_type != io.datatype.config_name:
        raise invalid_arg(
            f"unable to load model '{model}', configuration expects datatype "
            f"{io.datatype.config_name} for {what} '{io.name}', model provides "
            f"{type_str(model_io.config_type)}"
        )


def extra_input_names(config: ModelConfig) -> list[str]:
    """Inputs the core feeds besides the configured ones: sequence control tensors and
    implicit state."""
    raw = config.raw
    names: list[str] = []
    if raw.HasField("sequence_batching"):
        names.extend(c.name for c in raw.sequence_batching.control_input)
        names.extend(s.input_name for s in raw.sequence_batching.state)
    return names


def state_outputs(config: ModelConfig) -> list[tuple[str, tuple[int, ...]]]:
    """Implicit state (sequence batching): the model outputs holding each state's next value,
    with the state's dims."""
    raw = config.raw
    if not raw.HasField("sequence_batching"):
        return []
    return [(s.output_name, tuple(s.dims)) for s in raw.sequence_batching.state]


def _check_fed_inputs(config: ModelConfig, model_inputs: set[str]) -> None:
    """Batch inputs must be model inputs, and so must the control and state tensors the core
    feeds (Triton's message for a sequence control)."""
    for bi in config.raw.batch_input:
        for target in bi.target_name:
            if target not in model_inputs:
                raise _allowed("input", target, model_inputs)
    for control in extra_input_names(config):
        if control not in model_inputs:
            raise TritonXError(
                f"configuration specified sequence control '{control}', but model does not "
                "provide that input",
                Code.INTERNAL,
            )


def _check_state_outputs(config: ModelConfig, model_outputs: set[str]) -> None:
    for name, _ in state_outputs(config):
        if name not in model_outputs:
            raise _allowed("output", name, model_outputs)


def validate_savedmodel(
    config: ModelConfig, inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo]
) -> None:
    """Triton's savedmodel ``ValidateTRITONTFModel``: the configured inputs are exactly the
    signature's, outputs are among the signature's, dims and datatypes agree."""
    model = config.name
    batching = config.max_batch_size > 0
    expected = {io.name for io in inputs}
    for io in config.inputs:
        if io.name not in expected:
            raise _allowed("input", io.name, expected)
    extra = extra_input_names(config)
    _check_fed_inputs(config, expected)
    count = len(config.inputs) + len(config.raw.batch_input) + len(extra)
    if len(expected) != count:
        raise invalid_arg(
            f"unable to load model '{model}', configuration expects {count} inputs, model "
            f"provides {len(expected)}"
        )
    for io in config.inputs:
        model_io = _find(inputs, io.name)
        assert model_io is not None
        if model_io.dims:
            if io.allow_ragged_batch:
                if model_io.dims != (-1,):
                    raise invalid_arg(
                        f"unable to load model '{model}', configuration expects model provides "
                        f"input with shape [-1]  for ragged input '{io.name}', model provides "
                        f"{shape_str(model_io.dims)}"
                    )
            else:
                compare_dims(model, io.name, model_io.dims, _config_shape(io), batching, False)
        _check_type(model, "input", io, model_io)
    allowed = {io.name for io in outputs}
    _check_state_outputs(config, allowed)
    batch_outputs = {t for b in config.raw.batch_output for t in b.target_name}
    for io in config.outputs:
        if io.name not in allowed:
            raise _allowed("output", io.name, allowed)
        model_io = _find(outputs, io.name)
        assert model_io is not None
        if model_io.dims and io.name not in batch_outputs:
            compare_dims(model, io.name, model_io.dims, _config_shape(io), batching, True)
        _check_type(model, "output", io, model_io)


def validate_graphdef(
    config: ModelConfig, inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo]
) -> None:
    """Triton's graphdef ``ValidateTRITONTFModel``: configured inputs are placeholders and
    outputs other nodes; beyond Triton, the datatypes TensorFlow knows for them and the ranks
    of placeholders with a known shape are checked (Triton's requests would fail instead)."""
    model = config.name
    if not config.inputs and not config.outputs:
        raise invalid_arg(
            f"unable to load model '{model}': a GraphDef model carries no signature, so its "
            "configuration must list its inputs and outputs (auto-complete is only available "
            "for SavedModel)"
        )
    if len(inputs) < len(config.inputs):
        raise invalid_arg(
            f"unable to load model '{model}', configuration expects {len(config.inputs)} "
            f"inputs, model provides at most {len(inputs)}"
        )
    potential_inputs = {io.name for io in inputs}
    _check_fed_inputs(config, potential_inputs)
    for io in config.inputs:
        if io.name not in potential_inputs:
            raise _allowed("input", io.name, potential_inputs)
        model_io = _find(inputs, io.name)
        assert model_io is not None
        _check_type(model, "input", io, model_io)
        if model_io.dims and not io.allow_ragged_batch:
            compare_dims(
                model, io.name, model_io.dims, _config_shape(io), config.max_batch_size > 0, False
            )
    potential_outputs = {io.name for io in outputs}
    _check_state_outputs(config, potential_outputs)
    for io in config.outputs:
        if io.name not in potential_outputs:
            raise _allowed("output", io.name, potential_outputs)
        model_io = _find(outputs, io.name)
        assert model_io is not None
        _check_type(model, "output", io, model_io)
