"""What the sequence batcher injects into a stateful model's requests, read from its config:
the control tensors (``control_input``) and the implicit state (``state``).

Rules and messages follow Triton core: ``GetBooleanSequenceControlProperties`` /
``GetTypedSequenceControlProperties`` and the ``sequence_batching`` part of
``ValidateModelConfig`` (``model_config_utils.cc``), ``SequenceBatchScheduler::Create`` and
``GenerateInitialStateData`` for the initial state (``sequence_batch_scheduler.cc``),
``InferenceRequest::ValidateCorrelationId`` for the request's correlation ID type.

Control tensors have shape ``[1]`` per batch item (``[1, 1]`` for a model that batches) and
are shared, read-only arrays: the batcher adds the same objects to every request.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tritonx.datatypes import DataType, deserialize_bytes_tensor
from tritonx.errors import TritonXError, invalid_arg
from tritonx.proto import model_config_pb2
from tritonx.wire import request_prefix

_Control = model_config_pb2.ModelSequenceBatching.Control
START = _Control.CONTROL_SEQUENCE_START
END = _Control.CONTROL_SEQUENCE_END
READY = _Control.CONTROL_SEQUENCE_READY
CORRID = _Control.CONTROL_SEQUENCE_CORRID

#: The folder (inside the model's folder) ``initial_state { data_file }`` names files in.
INITIAL_STATE_FOLDER = "initial_state"

_CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")
_INTEGER_CORRID = frozenset(("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32"))

#: The situations in which each boolean control is true (false in the others; "notready" is
#: a filler slot of a direct batch).
_TRUE_IN: dict[int, tuple[str, ...]] = {
    START: ("start", "startend"),
    END: ("end", "startend"),
    READY: ("start", "end", "startend", "cont"),
}


def _kind(kind: int) -> str:
    return str(_Control.Kind.Name(kind))


def _check_names(sb: Any, model: str) -> None:
    seen: set[str] = set()
    for control_input in sb.control_input:
        if not control_input.name:
            raise invalid_arg(f"sequence batching control tensor must have a name for {model}")
        if control_input.name in seen:
            raise invalid_arg(
                f"sequence batching control tensor '{control_input.name}' is specified for "
                f"multiple control kinds for {model}"
            )
        seen.add(control_input.name)


def _controls(sb: Any, model: str, kind: int) -> Iterator[tuple[str, Any]]:
    """The (tensor name, control) pairs of ``kind``, in config order: one at most, as
    INVALID_ARG (Triton's message) for a second says once the first was checked."""
    _check_names(sb, model)
    seen = False
    for control_input in sb.control_input:
        for c in control_input.control:
            if c.kind != kind:
                continue
            if seen:
                raise invalid_arg(
                    f"sequence batching specifies multiple {_kind(kind)} tensors for {model}"
                )
            seen = True
            yield control_input.name, c


def boolean_control(sb: Any, model: str, kind: int) -> tuple[str, DataType, Any, Any] | None:
    """The (tensor name, datatype, false value, true value) of a START/END/READY control,
    None when the config has none; raises INVALID_ARG with Triton's messages."""
    found: tuple[str, DataType, Any, Any] | None = None
    name = _kind(kind)
    for tensor, c in _controls(sb, model, kind):
        lists = [
            (len(c.int32_false_true), "int32_false_true", DataType.INT32),
            (len(c.fp32_false_true), "fp32_false_true", DataType.FP32),
            (len(c.bool_false_true), "bool_false_true", DataType.BOOL),
        ]
        given = [item for item in lists if item[0]]
        if not given:
            raise invalid_arg(
                "sequence batching must specify either 'int32_false_true', "
                f"'fp32_false_true' or 'bool_false_true' for {name} for {model}"
            )
        if len(given) > 1:
            raise invalid_arg(
                "sequence batching specifies more than one from 'int32_false_true', "
                f"'fp32_false_true' and 'bool_false_true' for {name} for {model}"
            )
        count, field_name, datatype = given[0]
        if count != 2:
            raise invalid_arg(
                f"sequence batching control '{field_name}' must have exactly 2 entries for "
                f"{name} for {model}"
            )
        values = getattr(c, field_name)
        found = (tensor, datatype, values[0], values[1])
    return found


def typed_control(sb: Any, model: str, kind: int) -> tuple[str, str] | None:
    """The (tensor name, config datatype name) of the CORRID control, None when absent."""
    found: tuple[str, str] | None = None
    for tensor, c in _controls(sb, model, kind):
        found = (tensor, model_config_pb2.DataType.Name(c.data_type))
        if len(c.int32_false_true) or len(c.fp32_false_true) or len(c.bool_false_true):
            raise invalid_arg(
                "sequence batching must not specify either 'int32_false_true', "
                f"'fp32_false_true' or 'bool_false_true' for {_kind(kind)} for {model}"
            )
    return found


def validate_sequence_batching(config: Any) -> None:
    """The ``sequence_batching`` checks of Triton's ``ValidateModelConfig``."""
    name = config.name
    if config.response_cache.enable:
        raise invalid_arg(
            f"Response Cache does not currently support model {name} with sequence batching "
            "scheduler. Please disable the response cache."
        )
    sb = config.sequence_batching
    for kind in (START, END, READY):
        boolean_control(sb, name, kind)
    corrid = typed_control(sb, name, CORRID)
    if corrid is not None and corrid[1] not in _CORRID_TYPES:
        raise invalid_arg(
            f"unexpected data type for control {_kind(CORRID)} for {name}. Allowed data types "
            "are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
        )
    if sb.HasField("oldest"):
        for size in sb.oldest.preferred_batch_size:
            if size <= 0:
                raise invalid_arg(
                    f"sequence batching preferred batch size must be positive for {name}"
                )
            if size > config.max_batch_size:
                raise invalid_arg(
                    f"sequence batching preferred batch size must be <= max batch size for {name}"
                )
    if sb.HasField("direct"):
        utilization = sb.direct.minimum_slot_utilization
        if utilization < 0.0 or utilization > 1.0:
            raise invalid_arg(
                "sequence batching minimum slot utilization must be in range (0.0, 1.0] for " + name
            )


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@dataclass
class StateSpec:
    """One ``sequence_batching.state`` entry: what is fed back, and where it starts."""

    input_name: str
    output_name: str
    datatype: DataType
    #: the state a sequence starts with (zeros, the ``initial_state``, or zeros of shape 1
    #: for each variable dimension)
    initial: np.ndarray


@dataclass
class SequenceSettings:
    """Everything the sequence batcher needs from a model's config, parsed once at load.

    The control dicts map tensor names to the arrays a request gets in each situation.
    """

    model: str
    batching: bool
    start: dict[str, np.ndarray] = field(default_factory=dict)
    end: dict[str, np.ndarray] = field(default_factory=dict)
    startend: dict[str, np.ndarray] = field(default_factory=dict)
    cont: dict[str, np.ndarray] = field(default_factory=dict)
    notready: dict[str, np.ndarray] = field(default_factory=dict)
    corrid_name: str = ""
    corrid_type: str = ""
    states: list[StateSpec] = field(default_factory=list)
    #: names of every tensor the core adds (controls and state inputs)
    injected: frozenset[str] = frozenset()

    def corrid_array(self, correlation_id: int | str) -> np.ndarray:
        """The CORRID control tensor for a sequence (as Triton: 32-bit types keep the low 32
        bits of the ID; a STRING tensor holds the string ID)."""
        shape = (1, 1) if self.batching else (1,)
        kind = self.corrid_type
        if kind == "TYPE_STRING":
            value = (
                correlation_id.encode() if isinstance(correlation_id, str) else b""
            )  # a numeric ID never reaches a STRING control (refused by check_correlation_id)
            return _frozen(np.full(shape, value, dtype=object))
        number = int(correlation_id) if isinstance(correlation_id, int) else 0
        raw = np.full(shape, number & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64)
        if kind == "TYPE_UINT64":
            return _frozen(raw)
        if kind == "TYPE_INT64":
            return _frozen(raw.view(np.int64))
        low = (raw & 0xFFFFFFFF).astype(np.uint32)
        return _frozen(low if kind == "TYPE_UINT32" else low.view(np.int32))

    def check_correlation_id(self, request_id: str, correlation_id: int | str) -> None:
        """Triton's ``ValidateCorrelationId``: the ID's type must fit the CORRID control."""
        kind = self.corrid_type
        if not kind:
            return
        is_string = isinstance(correlation_id, str)
        if is_string and kind != "TYPE_STRING":
            got = "BYTES"
        elif not is_string and kind not in _INTEGER_CORRID:
            got = "UINT64"
        else:
            return
        raise invalid_arg(
            f"{request_prefix(request_id)}sequence batching control '{self.corrid_name}' "
            f"data-type is '{got}', but model '{self.model}' expects "
            f"'{DataType.from_config(kind).value}'"
        )


def sequence_settings(config: Any, model_dir: Path | None) -> SequenceSettings:
    """Parse ``config.sequence_batching`` (a normalized, validated config protobuf).

    :param model_dir: the model's folder (``initial_state`` data files are read from its
        ``initial_state/`` folder).
    :raises TritonXError: INVALID_ARG with Triton's messages for a bad ``state`` entry.
    """
    sb = config.sequence_batching
    name = config.name
    batching = config.max_batch_size > 0
    shape = (1, 1) if batching else (1,)
    settings = SequenceSettings(model=name, batching=batching)
    for kind, truthy in _TRUE_IN.items():
        control = boolean_control(sb, name, kind)
        if control is None:
            continue
        tensor, datatype, false, true = control
        false_array = _frozen(np.full(shape, false, dtype=datatype.numpy_dtype))
        true_array = _frozen(np.full(shape, true, dtype=datatype.numpy_dtype))
        for situation in ("start", "end", "startend", "cont", "notready"):
            chosen = true_array if situation in truthy else false_array
            getattr(settings, situation)[tensor] = chosen
    corrid = typed_control(sb, name, CORRID)
    if corrid is not None:
        settings.corrid_name, settings.corrid_type = corrid
        settings.notready[settings.corrid_name] = settings.corrid_array(
            "" if settings.corrid_type == "TYPE_STRING" else 0
        )
    inputs_seen: set[str] = set()
    outputs_seen: set[str] = set()
    for state in sb.state:
        if state.input_name in inputs_seen or state.output_name in outputs_seen:
            continue  # Triton ignores duplicated state names (with a warning)
        inputs_seen.add(state.input_name)
        outputs_seen.add(state.output_name)
        settings.states.append(_state_spec(state, name, batching, model_dir))
    names = set(settings.start) | inputs_seen
    if settings.corrid_name:
        names.add(settings.corrid_name)
    settings.injected = frozenset(names)
    return settings


def _state_spec(state: Any, model: str, batching: bool, model_dir: Path | None) -> StateSpec:
    type_name = model_config_pb2.DataType.Name(state.data_type)
    if type_name == "TYPE_INVALID":
        raise invalid_arg(f"state '{state.input_name}' of model '{model}' must specify 'data_type'")
    datatype = DataType.from_config(type_name)
    prefix = (1,) if batching else ()
    dims = tuple(1 if d == -1 else int(d) for d in state.dims)
    initial: np.ndarray
    if len(state.initial_state) > 1:
        raise invalid_arg(
            f"initial_state field for state input '{state.input_name}' must contain exactly "
            f"one or zero element. Found '{len(state.initial_state)}' elements."
        )
    if len(state.initial_state) == 1:
        initial = _initial_state(state, state.initial_state[0], datatype, prefix, model_dir)
    elif datatype is DataType.BYTES:
        initial = np.full(prefix + dims, b"", dtype=object)
    else:
        initial = np.zeros(prefix + dims, dtype=datatype.numpy_dtype)
    return StateSpec(state.input_name, state.output_name, datatype, _frozen(initial))


def _initial_state(
    state: Any,
    init: Any,
    datatype: DataType,
    prefix: tuple[int, ...],
    model_dir: Path | None,
) -> np.ndarray:
    """``GenerateInitialStateData``: the initial state's checks, then its data."""
    name = state.input_name
    if init.data_type != state.data_type:
        raise invalid_arg(
            f"The data type used for 'initial_state' field of state '{name}' does not match "
            "the state data type."
        )
    if not init.name:
        raise invalid_arg(
            f"Field 'name' must be set when using initial_state for state input '{name}'."
        )
    if len(init.dims) != len(state.dims):
        raise invalid_arg(
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' "
            f"dimensions for state input '{name}'. {len(init.dims)} != {len(state.dims)}"
        )
    for init_dim, state_dim in zip(init.dims, state.dims, strict=True):
        if init_dim == -1:
            raise invalid_arg(
                f"'initial_state' field for state input name '{name}' contains variable dimensions."
            )
        if state_dim != -1 and init_dim != state_dim:
            raise invalid_arg(
                f"'initial_state' dim for input name '{name}' doesn't match 'state' dim "
                f"description. {init_dim} != {state_dim}"
            )
    shape = prefix + tuple(int(d) for d in init.dims)
    count = int(np.prod(shape, dtype=np.int64))
    which = init.WhichOneof("state_data")
    if which == "zero_data":
        if datatype is DataType.BYTES:
            return np.full(shape, b"", dtype=object)
        return np.zeros(shape, dtype=datatype.numpy_dtype)
    if which != "data_file":
        raise invalid_arg(f"initial_state setting expects state'{name}' to have state_data set")
    path = (model_dir or Path(".")) / INITIAL_STATE_FOLDER / init.data_file
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise invalid_arg(f"failed to open text file for read {path}: {exc.strerror}") from exc
    if datatype is DataType.BYTES:
        try:
            return deserialize_bytes_tensor(data, count).reshape(shape)
        except (TritonXError, ValueError) as exc:
            raise invalid_arg(f"initial_state data file {init.data_file}: {exc}") from exc
    size = count * datatype.itemsize
    if size > len(data):
        raise invalid_arg(
            f"initial_state setting expects {size} bytes, but the data provided from "
            f"{init.data_file}only has {len(data)} bytes."
        )
    return np.frombuffer(data[:size], dtype=datatype.numpy_dtype).reshape(shape).copy()
