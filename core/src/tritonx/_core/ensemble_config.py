"""An ensemble's config (``platform: "ensemble"``): the checks of its ``ensemble_scheduling``
alone and against the completed configs of its composing models.

Semantics and messages follow Triton core: ``ValidateEnsembleSchedulingConfig``
(``model_config_utils.cc``: the config alone) and ``ValidateEnsembleConfig``
(``ensemble_scheduler/ensemble_utils.cc``: against the composing models, once they are
loaded). The scheduler that runs ensembles is :mod:`tritonx._core.ensemble`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tritonx.errors import invalid_arg
from tritonx.proto import model_config_pb2
from tritonx.wire import dims_str

ENSEMBLE = "ensemble"


def is_ensemble(config: Any) -> bool:
    """Whether a config (protobuf) is an ensemble's."""
    return bool(config.platform == ENSEMBLE)


def composing_models(config: Any) -> tuple[str, ...]:
    """The names of the models an ensemble's steps call, in step order, without repeats."""
    seen: dict[str, None] = {}
    for step in config.ensemble_scheduling.step:
        seen.setdefault(step.model_name, None)
    return tuple(seen)


# ---------------------------------------------------------------------- the config alone


class _Tensor:
    """An ensemble tensor in the graph of ``validate_scheduling``."""

    __slots__ = ("is_output", "name", "next", "prev", "ready")

    def __init__(self, name: str, is_output: bool) -> None:
        self.name = name
        self.is_output = is_output
        self.ready = False
        self.prev: list[_Tensor] = []
        self.next: list[_Tensor] = []


def validate_scheduling(config: Any) -> None:
    """Triton's ``ValidateEnsembleSchedulingConfig``: the platform, the fields an ensemble
    may not set, every step complete, every ensemble input used, every output written and
    no tensor left unused. Raises INVALID_ARG with Triton's messages."""
    name = config.name
    _check_ensemble_fields(config)
    tensors = _tensor_graph(name, config.ensemble_scheduling.step)
    _mark_ready(config, tensors)
    outputs = _check_outputs_written(config, tensors)
    for tensor_name, node in tensors.items():
        if tensor_name in outputs:
            continue
        if not node.ready or not node.next:
            raise invalid_arg(f"ensemble tensor '{tensor_name}' is unused in ensemble '{name}'")


def _check_ensemble_fields(config: Any) -> None:
    """The platform, the fields an ensemble may not set, and at least one step."""
    name = config.name
    if config.platform != ENSEMBLE:
        raise invalid_arg(
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not {ENSEMBLE}"
        )
    if len(config.instance_group):
        raise invalid_arg(f"instance group should not be specified for ensemble '{name}'")
    if config.HasField("optimization"):
        raise invalid_arg(f"optimization should not be specified for ensemble '{name}'")
    if len(config.model_warmup):
        raise invalid_arg(f"model_warmup can not be specified for ensemble '{name}'")
    if not config.ensemble_scheduling.step:
        raise invalid_arg(f"must specify 'step' for ensemble '{name}'")


def _tensor_graph(name: str, steps: Any) -> dict[str, _Tensor]:
    """Every ensemble tensor the steps name, linked to the tensors its step reads (``prev``)
    and writes (``next``); each step complete, each tensor written by one step at most."""
    tensors: dict[str, _Tensor] = {}
    for index, step in enumerate(steps):
        for field_name, present in (
            ("model_name", bool(step.model_name)),
            ("input_map", len(step.input_map) > 0),
            ("output_map", len(step.output_map) > 0),
        ):
            if not present:
                raise invalid_arg(
                    f"must specify '{field_name}' in step {index} of ensemble '{name}'"
                )
        written: list[_Tensor] = []
        for tensor_name in step.output_map.values():
            node = tensors.get(tensor_name)
            if node is not None:
                if node.is_output:
                    raise invalid_arg(
                        f"ensemble tensor '{tensor_name}' can appear in an output map only once "
                        f"for ensemble '{name}' step {index}"
                    )
                node.is_output = True
            else:
                node = tensors[tensor_name] = _Tensor(tensor_name, True)
            written.append(node)
        for tensor_name in step.input_map.values():
            node = tensors.get(tensor_name)
            if node is None:
                node = tensors[tensor_name] = _Tensor(tensor_name, False)
            for out in written:
                out.prev.append(node)
                node.next.append(out)
    return tensors


def _mark_ready(config: Any, tensors: dict[str, _Tensor]) -> None:
    """Mark ready the tensors the ensemble inputs lead to (every ensemble input used)."""
    name = config.name
    queue: list[_Tensor] = []
    for tensor in config.input:
        node = tensors.get(tensor.name)
        if node is None:
            raise invalid_arg(f"ensemble input '{tensor.name}' for ensemble {name}' is not used")
        node.ready = True
        queue.append(node)
    while queue:
        current = queue.pop(0)
        for nxt in current.next:
            if nxt.ready:
                continue
            nxt.ready = all(p.ready for p in nxt.prev)
            if nxt.ready:
                queue.append(nxt)


def _check_outputs_written(config: Any, tensors: dict[str, _Tensor]) -> set[str]:
    """The ensemble outputs' names, each one written (ready); else Triton's message, naming
    a tensor it depends on that is not connected."""
    name = config.name
    outputs: set[str] = set()
    for tensor in config.output:
        node = tensors.get(tensor.name)
        if node is None:
            raise invalid_arg(f"ensemble output '{tensor.name}' for ensemble {name}' is not used")
        if not node.ready:
            message = f"output '{tensor.name}' for ensemble '{name}' is not written"
            # walk back to a source that is not connected
            last, prev, seen = node, node.prev, set[str]()
            while prev:
                nodes, prev = prev, []
                for candidate in nodes:
                    if not candidate.ready and candidate.name not in seen:
                        seen.add(candidate.name)
                        last, prev = candidate, candidate.prev
                        break
            if last is not node:
                message += (
                    f": at least one of its depending tensors, '{last.name}', is not connected"
                )
            raise invalid_arg(message)
        outputs.add(tensor.name)
    return outputs


# ---------------------------------------------------------------------- against composing models


def _type_name(data_type: int) -> str:
    return str(model_config_pb2.DataType.Name(data_type))


def dims_match(lhs: Sequence[int], rhs: Sequence[int]) -> bool:
    """Triton's ``CompareDimsWithWildcard``: same rank, each dim equal or either -1."""
    return len(lhs) == len(rhs) and all(
        a == b or a == -1 or b == -1 for a, b in zip(lhs, rhs, strict=True)
    )


class _Node:
    """An ensemble tensor as ``ValidateEnsembleConfig`` sees it: its type and shape, the
    model that fixes them, and its place in the data flow (with the decoupled label)."""

    __slots__ = (
        "decoupled",
        "dims",
        "full_dims",
        "label",
        "model",
        "next",
        "prev",
        "sibling",
        "type",
        "visited",
    )

    def __init__(
        self, model: str, batching: bool = False, data_type: int = 0, dims: Sequence[int] = ()
    ) -> None:
        self.model = model
        self.type = data_type
        self.dims = tuple(dims)
        self.full_dims = ((-1,) if batching else ()) + self.dims
        self.decoupled = False
        self.label = 0
        self.visited = False
        self.prev: list[_Node] = []
        self.next: list[_Node] = []
        self.sibling: _Node | None = None


def _consistent(lhs: _Node, rhs: _Node, prefix: str) -> None:
    if lhs.type != rhs.type:
        raise invalid_arg(
            f"{prefix}inconsistent data type: {_type_name(lhs.type)} is inferred from model "
            f"{lhs.model} while {_type_name(rhs.type)} is inferred from model {rhs.model}"
        )
    if not dims_match(lhs.dims, rhs.dims) and not dims_match(lhs.full_dims, rhs.full_dims):
        raise invalid_arg(
            f"{prefix}inconsistent shape: {dims_str(lhs.full_dims)} is inferred from model "
            f"{lhs.model} while {dims_str(rhs.full_dims)} is inferred from model {rhs.model}"
        )


def _merge(ensemble: str, tensors: dict[str, _Node], tensor: str, node: _Node) -> _Node:
    """The node of ``tensor``: ``node`` for a new tensor, else the known one, which must be
    consistent with it."""
    known = tensors.get(tensor)
    if known is None:
        known = tensors[tensor] = node
    else:
        _consistent(known, node, f"in ensemble {ensemble}, ensemble tensor {tensor}: ")
    return known


def _check_mapped(
    ensemble: str, model: str, mapping: Mapping[str, str], tensors: Any, relation: str, kind: str
) -> None:
    """Every model tensor that ``mapping`` (model tensor → ensemble tensor) names is one of
    the model's ``tensors`` (its inputs or outputs: ``kind``)."""
    names = {t.name for t in tensors}
    for name, tensor in mapping.items():
        if name not in names:
            raise invalid_arg(
                f"in ensemble {ensemble}, ensemble tensor {tensor} is {relation} non-existing "
                f"{kind} {name} in model {model}"
            )


def _map_step(ensemble: str, step: Any, model: Any, tensors: dict[str, _Node]) -> None:
    """Triton's ``ValidateTensorMapping`` for one step."""
    model_name = step.model_name
    batching = model.max_batch_size > 0
    _check_mapped(ensemble, model_name, step.input_map, model.input, "mapping to", "input")
    for model_input in model.input:
        tensor = step.input_map.get(model_input.name)
        if tensor is None:
            if model_input.optional:
                continue
            raise invalid_arg(
                f"in ensemble {ensemble}, input {model_input.name} in model {model_name} is not "
                "mapped to any ensemble tensors"
            )
        node = _Node(model_name, batching, model_input.data_type, model_input.dims)
        _merge(ensemble, tensors, tensor, node)
    _check_mapped(ensemble, model_name, step.output_map, model.output, "mapped from", "output")
    sibling = _Node(model_name)
    for model_output, tensor in step.output_map.items():
        config = next(t for t in model.output if t.name == model_output)
        node = _Node(model_name, batching, config.data_type, config.dims)
        _merge(ensemble, tensors, tensor, node).sibling = sibling
    decoupled = bool(model.model_transaction_policy.decoupled)
    for tensor in step.output_map.values():
        node = tensors[tensor]
        node.decoupled = decoupled
        for source in step.input_map.values():
            prev = tensors[source]
            node.prev.append(prev)
            prev.next.append(node)


def validate_with_composing(config: Any, composing: Mapping[str, Any]) -> bool:
    """Triton's ``ValidateEnsembleConfig``: batch sizes, every step's input and output maps
    against its model's completed config (``composing``: model name → config protobuf),
    consistent types and shapes, and decoupled branches that never merge. Returns whether the
    ensemble is decoupled (some path goes through a decoupled model) and records it in the
    config's ``model_transaction_policy``, as Triton does."""
    name = config.name
    batching = config.max_batch_size > 0
    tensors: dict[str, _Node] = {}
    for tensor in config.input:
        dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
        tensors[tensor.name] = _Node(name, batching, tensor.data_type, dims)
    sink = _Node(name)
    for tensor in config.output:
        dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
        node = tensors.setdefault(tensor.name, _Node(name, batching, tensor.data_type, dims))
        sink.prev.append(node)
        node.next.append(sink)

    for step in config.ensemble_scheduling.step:
        model = composing[step.model_name]
        if model.max_batch_size != 0 and model.max_batch_size < config.max_batch_size:
            raise invalid_arg(
                f"ensemble {name} allows maximum batch size {config.max_batch_size}, but it "
                f"contains model {step.model_name} which only allows maximum batch size to be "
                f"{model.max_batch_size}"
            )
        _map_step(name, step, model, tensors)

    label = 0
    queue: list[_Node] = []
    for tensor in config.input:
        node = tensors[tensor.name]
        node.visited = True
        queue.append(node)
    while queue:
        current = queue.pop(0)
        for nxt in current.next:
            if nxt.visited or not all(p.visited for p in nxt.prev):
                continue
            prev_label = nxt.prev[0].label
            if any(p.label != prev_label for p in nxt.prev):
                raise invalid_arg(
                    f"in ensemble {name}, step of model '{nxt.model}' receives inputs "
                    "originated from different decoupled models"
                )
            sibling = nxt.sibling
            if sibling is not None and sibling.visited:
                nxt.label = sibling.label
            else:
                if nxt.decoupled:
                    label += 1
                    nxt.label = label
                else:
                    nxt.label = prev_label
                if sibling is not None:
                    sibling.label = nxt.label
                    sibling.visited = True
            nxt.visited = True
            queue.append(nxt)
    decoupled = label != 0
    config.model_transaction_policy.decoupled = decoupled
    if decoupled and config.response_cache.enable:  # Triton: ValidateModelConfig, after this
        raise invalid_arg(
            f"Response Cache does not currently support model {name} with 'decoupled' "
            "transaction policy. Please disable the response cache."
        )
    return decoupled
