"""Model-config work of the ONNX Runtime backend, following Triton's onnxruntime_backend:
auto-complete from the graph (``AutoCompleteConfig``), checking a config against the graph
(``ValidateInputs`` / ``ValidateOutputs``), and session options from ``parameters``,
``optimization`` and ``--backend-config`` (execution providers: :mod:`.accelerators`).

Functions here work on :class:`~tritonx_backend_onnx.tensors.TensorInfo` lists and the config
protobuf, so they are testable without a session; none imports onnxruntime at module level.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tritonx.config import EditableModelConfig, IOConfig, ModelConfig
from tritonx.datatypes import DataType
from tritonx.dims import compare_dims, shape_str
from tritonx.errors import invalid_arg
from tritonx.parameters import parse_bool, parse_int
from tritonx.proto import model_config_pb2
from tritonx_backend_onnx.tensors import TensorInfo

log = logging.getLogger("tritonx.backend.onnxruntime")

#: ``--backend-config=onnxruntime,default-max-batch-size=N`` (Triton's default is 4).
DEFAULT_MAX_BATCH_SIZE = 4

# --------------------------------------------------------------------------- auto-complete


def auto_complete(
    config: EditableModelConfig,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo],
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> None:
    """Fill ``config`` from the graph's inputs and outputs, in place (Triton's rules).

    * only when the config lists no inputs or no outputs (``batch_input`` counts as inputs);
    * the model "can batch" when every input and output has a variable first dimension: then
      ``max_batch_size`` 0 becomes ``default_max_batch_size``, and ``dynamic_batching {}`` is
      added when ``max_batch_size > 1`` and no scheduler is set; a model that cannot batch with
      a non-zero ``max_batch_size`` is an error;
    * missing inputs/outputs are added in graph order, without the batch dimension; scalars
      get ``dims: [1]`` (plus an empty ``reshape`` when batching).
    """
    input_count = config.input_count
    output_count = config.output_count
    if input_count > 0 and output_count > 0:
        return
    for info in (*inputs, *outputs):
        if info.config_type is None:
            raise invalid_arg(
                f"autofill failed for model '{config.name}': tensor '{info.name}' has "
                f"unsupported datatype {info.ort_type}"
            )
    can_batch = all(len(t.dims) > 0 and t.dims[0] == -1 for t in (*inputs, *outputs))
    if can_batch:
        if config.max_batch_size == 0:
            config.max_batch_size = max(default_max_batch_size, 0)
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
        raise invalid_arg(
            f"autofill failed for model '{config.name}': model does not support batching "
            "while non-zero max_batch_size is specified"
        )
    if input_count == 0:
        _fill_io(config, config.add_input, inputs)
    if output_count == 0:
        _fill_io(config, config.add_output, outputs)


def _fill_io(
    config: EditableModelConfig, add: Callable[..., None], infos: Iterable[TensorInfo]
) -> None:
    batching = config.max_batch_size > 0
    for info in infos:
        assert info.config_type is not None
        dims = info.dims[1:] if batching else info.dims
        if dims:
            add(info.name, info.config_type, dims)
        else:  # a scalar: [1], with an empty reshape when batching (a scalar per batch item)
            add(info.name, info.config_type, [1], reshape=[] if batching else None)


# --------------------------------------------------------------------------- validation


def validate(
    model_config: ModelConfig,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo],
    initializers: Sequence[TensorInfo] = (),
) -> None:
    """Refuse a config that contradicts the graph, with Triton's messages.

    :param initializers: overridable initializers, which a config may list as inputs.
    """
    config = model_config.raw
    name = config.name
    max_batch = config.max_batch_size
    graph_inputs = {t.name: t for t in inputs}
    allowed_inputs = {**{t.name: t for t in initializers}, **graph_inputs}
    # onnxruntime_backend's count, checked first: the configured inputs but the optional
    # ones (taken for initializers), the batch inputs, the sequence controls and states
    # (tritonx also accepts an overridable initializer configured as a required input)
    sb = config.sequence_batching
    expected = (
        sum(1 for io in config.input if not io.optional)
        + len(config.batch_input)
        + len({c.name for c in sb.control_input})
        + len(sb.state)
    )
    required_initializers = sum(
        1
        for io in config.input
        if not io.optional and io.name not in graph_inputs and io.name in allowed_inputs
    )
    if len(graph_inputs) not in (expected, expected - required_initializers):
        raise invalid_arg(
            f"unable to load model '{name}', configuration expects {expected} inputs, model "
            f"provides {len(graph_inputs)}"
        )
    for io in model_config.inputs:
        if io.optional and max_batch != 0:
            raise invalid_arg(
                f"unable to load model '{name}', optional input '{io.name}' is not supported "
                "for models that support batching"
            )
        info = allowed_inputs.get(io.name)
        if info is None:
            raise invalid_arg(
                f"unexpected inference input '{io.name}', allowed inputs are: "
                + ", ".join(allowed_inputs)
            )
        _check_type(name, "input", io, info)
        dims = io.reshape if io.reshape is not None else io.dims
        if io.allow_ragged_batch:
            if info.dims != (-1,):
                raise invalid_arg(
                    f"unable to load model '{name}', configuration expects model provides "
                    f"input with shape [-1]  for ragged input '{io.name}', model provides "
                    + shape_str(info.dims)
                )
        else:
            _check_dims(name, io.name, info.dims, dims, max_batch, exact=False)
    graph_outputs = {t.name: t for t in outputs}
    scattered = {n for b in config.batch_output for n in b.target_name}
    for io in model_config.outputs:
        info = graph_outputs.get(io.name)
        if info is None:
            raise invalid_arg(
                f"unexpected inference output '{io.name}', allowed outputs are: "
                + ", ".join(graph_outputs)
            )
        _check_type(name, "output", io, info)
        if io.name in scattered:
            continue  # (Triton: "The batch output shape doesn't necessarily match the model")
        dims = io.reshape if io.reshape is not None else io.dims
        _check_dims(name, io.name, info.dims, dims, max_batch, exact=True)
    if config.HasField("sequence_batching"):
        _validate_states(config, graph_outputs)


def sequence_tensors(
    config: Any,
) -> tuple[dict[str, DataType], list[tuple[str, DataType, tuple[int, ...]]]]:
    """What the sequence batcher adds to a stateful model's requests: control and state
    input datatypes by name, and the state outputs (name, datatype, dims) it reads back."""
    if not config.HasField("sequence_batching"):
        return {}, []
    sb = config.sequence_batching
    inputs: dict[str, DataType] = {}
    for control_input in sb.control_input:
        for c in control_input.control:
            if len(c.int32_false_true):
                inputs[control_input.name] = DataType.INT32
            elif len(c.fp32_false_true):
                inputs[control_input.name] = DataType.FP32
            elif len(c.bool_false_true):
                inputs[control_input.name] = DataType.BOOL
            elif c.data_type:
                inputs[control_input.name] = _datatype(c.data_type)
    outputs: list[tuple[str, DataType, tuple[int, ...]]] = []
    for state in sb.state:
        datatype = _datatype(state.data_type)
        inputs[state.input_name] = datatype
        outputs.append((state.output_name, datatype, tuple(state.dims)))
    return inputs, outputs


def _datatype(value: int) -> DataType:
    return DataType.from_config(model_config_pb2.DataType.Name(value))


def _validate_states(config: Any, graph_outputs: Mapping[str, TensorInfo]) -> None:
    """State outputs must be graph outputs of the state's datatype (Triton's messages)."""
    for state in config.sequence_batching.state:
        info = graph_outputs.get(state.output_name)
        if info is None:
            raise invalid_arg(
                f"unexpected inference output '{state.output_name}', allowed outputs are: "
                + ", ".join(graph_outputs)
            )
        expected = model_config_pb2.DataType.Name(state.data_type)
        if info.config_type != expected:
            raise invalid_arg(
                f"unable to load model '{config.name}', configuration expects datatype "
                f"{expected} for output state '{state.output_name}', model provides "
                f"{info.type_label}"
            )


def _check_type(model: str, what: str, io: IOConfig, info: TensorInfo) -> None:
    expected = io.datatype.config_name
    if info.config_type != expected:
        raise invalid_arg(
            f"unable to load model '{model}', configuration expects datatype {expected} for "
            f"{what} '{io.name}', model provides {info.type_label}"
        )


def _check_dims(
    model: str,
    tensor: str,
    model_shape: tuple[int, ...],
    dims: tuple[int, ...],
    max_batch: int,
    exact: bool,
) -> None:
    """Triton's ``CompareDimsSupported`` (plus its scalar-tensor rule)."""
    if not model_shape:
        if any(d != 1 for d in dims):
            raise invalid_arg(
                f"unable to load model '{model}', scalar tensor '{tensor}', should only provide "
                "1 in the model configuration when the model doesn't support batching. Model "
                f"configuration provided: {shape_str(dims)}."
            )
        return
    compare_dims(model, tensor, model_shape, dims, max_batch > 0, exact)


# --------------------------------------------------------------------------- session options


#: Triton's ``optimization { graph { level } }`` → ``GraphOptimizationLevel`` member name.
GRAPH_LEVELS = {-1: "ORT_ENABLE_BASIC", 1: "ORT_ENABLE_EXTENDED", 2: "ORT_DISABLE_ALL"}


@dataclass
class SessionSettings:
    """What the session and run options are built from (merged model + backend settings)."""

    graph_level: str = "ORT_ENABLE_ALL"
    execution_mode: int = 0
    intra_op_thread_count: int = 0
    inter_op_thread_count: int = 0
    enable_mem_arena: bool | None = None
    enable_mem_pattern: bool | None = None
    session_entries: dict[str, str] = field(default_factory=dict)
    run_entries: dict[str, str] = field(default_factory=dict)
    custom_op_libraries: list[str] = field(default_factory=list)


#: Keys read from model ``parameters`` (and, as defaults, from ``--backend-config``).
SESSION_KEYS = (
    "intra_op_thread_count",
    "inter_op_thread_count",
    "execution_mode",
    "enable_mem_arena",
    "enable_mem_pattern",
    "memory.enable_memory_arena_shrinkage",
    "session.use_device_allocator_for_initializers",
)


def session_settings(
    config: Any,
    parameters: Mapping[str, str],
    backend_config: Mapping[str, str],
) -> SessionSettings:
    """Merge ``--backend-config`` defaults and model ``parameters`` (which win) into settings."""
    values = {k: backend_config[k] for k in SESSION_KEYS if k in backend_config}
    values.update({k: parameters[k] for k in SESSION_KEYS if k in parameters})
    s = SessionSettings()
    if config.optimization.HasField("graph"):
        s.graph_level = GRAPH_LEVELS.get(config.optimization.graph.level, "ORT_ENABLE_ALL")
    if "execution_mode" in values:
        s.execution_mode = parse_int("execution_mode", values["execution_mode"])
        if s.execution_mode not in (0, 1):
            raise invalid_arg(
                "Invalid configuration value provided. Expected values for  execution_mode "
                f"are 0 or 1 but got {s.execution_mode} ."
            )
    for key in ("intra_op_thread_count", "inter_op_thread_count"):
        if key in values:
            count = parse_int(key, values[key])
            if count < 0:
                raise invalid_arg(f"'{key}' must be >= 0, got {count}")
            setattr(s, key, count)
    for key in ("enable_mem_arena", "enable_mem_pattern"):
        if key in values:
            setattr(s, key, parse_bool(key, values[key]))
    key = "session.use_device_allocator_for_initializers"
    if key in values:
        s.session_entries[key] = values[key]
    key = "memory.enable_memory_arena_shrinkage"
    if key in values:
        s.run_entries[key] = values[key]
    s.custom_op_libraries = list(config.model_operations.op_library_filename)
    return s


def make_session_options(ort: Any, s: SessionSettings) -> tuple[Any, Any]:
    """``(SessionOptions, RunOptions)`` for ``s``."""
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, s.graph_level)
    so.execution_mode = (
        ort.ExecutionMode.ORT_PARALLEL
        if s.execution_mode == 1
        else ort.ExecutionMode.ORT_SEQUENTIAL
    )
    if s.intra_op_thread_count > 0:
        so.intra_op_num_threads = s.intra_op_thread_count
    if s.inter_op_thread_count > 0:
        so.inter_op_num_threads = s.inter_op_thread_count
    if s.enable_mem_arena is not None:
        so.enable_cpu_mem_arena = s.enable_mem_arena
    if s.enable_mem_pattern is not None:
        so.enable_mem_pattern = s.enable_mem_pattern
    for key, value in s.session_entries.items():
        so.add_session_config_entry(key, value)
    for library in s.custom_op_libraries:
        so.register_custom_ops_library(library)
    ro = ort.RunOptions()
    for key, value in s.run_entries.items():
        ro.add_run_config_entry(key, value)
    return so, ro
