"""The three kinds of PyTorch model file, behind one small interface.

* :class:`ScriptProgram`: a TorchScript ``model.pt`` (``torch.jit.load``), run as Triton's
  libtorch backend runs it.
* :class:`ExportedProgram`: a ``torch.export.save`` archive (``model.pt2``), run through
  ``ExportedProgram.module()``.
* :class:`AotiProgram`: an AOTInductor package (``model.pt2`` from
  ``torch._inductor.aoti_compile_and_package``), run through ``aoti_load_package``.

Each maps the configured input names to its call and returns one tensor per configured output.
torch is passed in (``torch`` argument) or imported inside functions: this module imports no
framework at import time.
"""

from __future__ import annotations

import threading
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonx.config import ModelConfig
from tritonx.datatypes import DataType
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx_backend_torch import naming

#: Triton datatypes torch has, as torch dtype attribute names (BF16 beyond Triton's libtorch).
TORCH_DTYPES: dict[DataType, str] = {
    DataType.BOOL: "bool",
    DataType.UINT8: "uint8",
    DataType.INT8: "int8",
    DataType.INT16: "int16",
    DataType.INT32: "int32",
    DataType.INT64: "int64",
    DataType.FP16: "float16",
    DataType.FP32: "float32",
    DataType.FP64: "float64",
    DataType.BF16: "bfloat16",
}


def datatype_of(torch: Any, dtype: Any) -> DataType | None:
    """The Triton datatype of a torch dtype (None when Triton has none for it)."""
    for dt, attr in TORCH_DTYPES.items():
        if getattr(torch, attr) == dtype:
            return dt
    return None


def check_datatypes(config: ModelConfig) -> None:
    """Refuse configured tensors whose datatype torch cannot hold (Triton's message), and BYTES."""
    for kind, ios in (("input", config.inputs), ("output", config.outputs)):
        for io in ios:
            if io.datatype is DataType.BYTES:
                raise TritonXError(
                    f"{kind} '{io.name}' of model '{config.name}' is TYPE_STRING: string "
                    "tensors (Triton's List[str] arguments) are not supported by tritonx's "
                    "pytorch backend; pass token ids or bytes as UINT8/INT64 tensors",
                    Code.UNSUPPORTED,
                )
            if io.datatype not in TORCH_DTYPES:
                raise TritonXError(
                    f"unsupported datatype {io.datatype.config_name} for {kind} '{io.name}' "
                    f"for model '{config.name}'",
                    Code.INTERNAL,
                )


def is_aoti_package(path: Path) -> bool:
    """Whether a ``.pt2`` archive holds AOTInductor-compiled code (else: a torch.export program)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any("/aotinductor/" in f"/{n}" for n in archive.namelist())
    except (OSError, zipfile.BadZipFile) as exc:
        raise TritonXError(f"'{path}' is not a PT2 archive: {exc}", Code.INTERNAL) from exc


def _require_io(config: ModelConfig) -> None:
    """Triton's refusal of a config that lists no inputs or no outputs."""
    if not config.inputs:
        raise TritonXError(
            "model configuration must contain at least one input, none were specified.",
            Code.INTERNAL,
        )
    if not config.outputs:
        raise TritonXError(
            "model configuration must contain at least one output, none were specified.",
            Code.INTERNAL,
        )


class Program:
    """A loaded model: ``run`` takes one tensor per configured input (config order) and
    returns one tensor per configured output (config order)."""

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        raise NotImplementedError


# --------------------------------------------------------------------------- TorchScript


class ScriptProgram(Program):
    """A TorchScript module and how config names map to its ``forward``."""

    def __init__(self, torch: Any, module: Any, config: ModelConfig) -> None:
        self._module = module
        self._name = config.name
        schema = module.forward.schema
        arguments = list(schema.arguments)
        if arguments and arguments[0].name == "self":
            arguments = arguments[1:]
        kinds = [str(a.type.kind()) for a in arguments]
        names = [io.name for io in config.inputs]
        _require_io(config)
        self._dict_input = len(arguments) == 1 and kinds[0] == "DictType"
        self._names = names
        if not self._dict_input:
            if "DictType" in kinds:
                raise TritonXError(
                    "Multiple inputs of kind DictType were detected. Only a single input of "
                    "type Dict(str, Tensor) is supported.",
                    Code.INTERNAL,
                )
            for argument, kind in zip(arguments, kinds, strict=True):
                if kind != "TensorType":
                    raise TritonXError(
                        f"An input of type '{argument.type}' was detected in the model. Only "
                        "a single input of type Dict(str, Tensor) or input(s) of type Tensor "
                        "are supported.",
                        Code.INTERNAL,
                    )
            if len(arguments) != len(names):
                raise invalid_arg(
                    f"unable to load model '{config.name}', configuration expects "
                    f"{len(names)} inputs, model provides {len(arguments)}"
                )
            self._positions = naming.input_positions(
                config.name, names, [a.name for a in arguments]
            )
            if sorted(self._positions) != list(range(len(names))):
                raise invalid_arg(
                    f"unable to load model '{config.name}': the configured inputs "
                    f"{', '.join(names)} do not name each of the {len(arguments)} forward "
                    "arguments exactly once"
                )
        self._outputs = [io.name for io in config.outputs]
        returns = list(schema.returns)
        if returns and str(returns[0].type.kind()) == "DictType":
            self._output_positions = []  # a dictionary result: outputs are read by key
        else:
            self._output_positions = naming.output_positions(config.name, self._outputs)

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        if self._dict_input:
            result = self._module.forward(dict(zip(self._names, inputs, strict=True)))
        else:
            args: list[Any] = [None] * len(inputs)
            for position, tensor in zip(self._positions, inputs, strict=True):
                args[position] = tensor
            result = self._module.forward(*args)
        return self._select(result)

    def _select(self, result: Any) -> list[Any]:
        if isinstance(result, dict):  # beyond Triton: outputs named by the dictionary's keys
            missing = [n for n in self._outputs if n not in result]
            if missing:
                raise invalid_arg(
                    f"The output {missing[0]} in the model configuration is not a key of the "
                    f"dictionary the model returned (keys: {', '.join(map(str, result))})"
                )
            return [result[n] for n in self._outputs]
        if not self._output_positions:
            raise invalid_arg(
                "output must be of type Tensor, List[str] or Tuple containing one of these two "
                f"types, or a dictionary of tensors; got {type(result).__name__}"
            )
        values = list(result) if isinstance(result, (tuple, list)) else [result]
        for name, position in zip(self._outputs, self._output_positions, strict=True):
            if position >= len(values):
                raise invalid_arg(
                    f"The output {name} in the model configuration refers to an output index "
                    f"which doesn't exist. This model has {len(values)} outputs"
                )
        return [values[p] for p in self._output_positions]


# --------------------------------------------------------------------------- torch.export


@dataclass
class Signature:
    """The flattened signature of an exported program."""

    in_spec: Any
    out_spec: Any
    inputs: list[naming.Leaf]
    outputs: list[naming.Leaf]


def signature_from_specs(
    torch: Any, in_spec: Any, out_spec: Any, placeholder_names: Sequence[str] | None = None
) -> Signature:
    """The :class:`Signature` of pytree ``in_spec`` / ``out_spec``."""
    from torch.utils import _pytree as pytree

    structure = pytree.tree_unflatten(list(range(in_spec.num_leaves)), in_spec)
    outputs = pytree.tree_unflatten(list(range(out_spec.num_leaves)), out_spec)
    return Signature(
        in_spec,
        out_spec,
        naming.input_leaves(structure, placeholder_names),
        naming.output_leaves(outputs),
    )


class _TreeProgram(Program):
    """A program called with the unflattened ``(args, kwargs)`` of its input leaves."""

    def __init__(self, fn: Any, signature: Signature, config: ModelConfig) -> None:
        from torch.utils import _pytree as pytree

        self._pytree = pytree
        self._fn = fn
        self._sig = signature
        names = [io.name for io in config.inputs]
        _require_io(config)
        positions = naming.resolve(config.name, "input", names, signature.inputs)
        if sorted(positions) != list(range(len(signature.inputs))):
            missing = [
                leaf.friendly for leaf in signature.inputs if leaf.index not in set(positions)
            ]
            raise invalid_arg(
                f"unable to load model '{config.name}', configuration expects {len(names)} "
                f"inputs, model provides {len(signature.inputs)}"
                + (
                    f" (model input(s) {', '.join(missing)} not in the model configuration)"
                    if missing
                    else ""
                )
            )
        self._positions = positions
        self._outputs = naming.resolve(
            config.name, "output", [io.name for io in config.outputs], signature.outputs
        )

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        flat: list[Any] = [None] * len(inputs)
        for position, tensor in zip(self._positions, inputs, strict=True):
            flat[position] = tensor
        args, kwargs = self._pytree.tree_unflatten(flat, self._sig.in_spec)
        leaves = self._pytree.tree_leaves(self._fn(*args, **kwargs))
        return [leaves[i] for i in self._outputs]


#: ``torch.export.load`` keeps its deserializer in a global: one load at a time.
_export_load_lock = threading.Lock()


def load_exported(torch: Any, path: Path) -> tuple[Any, Signature]:
    """``torch.export.load`` a program and read its signature."""
    with _export_load_lock:
        program = torch.export.load(str(path))
    spec = program.call_spec
    return program, signature_from_specs(
        torch, spec.in_spec, spec.out_spec, list(program.graph_signature.user_inputs)
    )


class ExportedProgram(_TreeProgram):
    """A ``torch.export`` program, run through its ``module()`` (given as ``module``)."""

    def __init__(self, torch: Any, module: Any, signature: Signature, config: ModelConfig):
        super().__init__(module, signature, config)


class AotiProgram(_TreeProgram):
    """An AOTInductor package."""

    def __init__(self, torch: Any, compiled: Any, config: ModelConfig) -> None:
        from torch.utils import _pytree as pytree

        in_spec, out_spec = (pytree.treespec_loads(s) for s in compiled.loader.get_call_spec())
        super().__init__(compiled, signature_from_specs(torch, in_spec, out_spec), config)


# --------------------------------------------------------------------------- auto-complete


@dataclass(frozen=True)
class TensorMeta:
    """A program input or output for auto-complete: name, datatype, dims (-1 = dynamic)."""

    name: str
    datatype: DataType
    dims: tuple[int, ...]


def exported_io(
    torch: Any, program: Any, signature: Signature
) -> tuple[list[TensorMeta], list[TensorMeta]]:
    """Inputs and outputs of a ``torch.export`` program, from its graph's fake tensors."""
    from torch.export.graph_signature import OutputKind

    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    user_inputs = list(program.graph_signature.user_inputs)
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    values = list(output_node.args[0])
    user_outputs = [
        v
        for v, spec in zip(values, program.graph_signature.output_specs, strict=True)
        if spec.kind == OutputKind.USER_OUTPUT
    ]

    def meta(name: str, value: Any) -> TensorMeta:
        val = getattr(value, "meta", {}).get("val") if value is not None else None
        if val is None or not hasattr(val, "dtype"):
            raise invalid_arg(f"tensor '{name}' of the exported program is not a tensor")
        dt = datatype_of(torch, val.dtype)
        if dt is None:
            raise invalid_arg(
                f"autofill failed: tensor '{name}' has unsupported datatype {val.dtype}"
            )
        dims = tuple(d if isinstance(d, int) else -1 for d in val.shape)
        return TensorMeta(name, dt, dims)

    inputs = [meta(leaf.friendly, nodes.get(user_inputs[leaf.index])) for leaf in signature.inputs]
    outputs = [meta(leaf.friendly, user_outputs[leaf.index]) for leaf in signature.outputs]
    return inputs, outputs
