"""How config tensor names map onto a model's inputs and outputs (no torch import).

TorchScript (Triton's rules): inputs are matched by forward-argument name when every
configured input is one, else by the ``<name>__<index>`` convention when every name follows
it, else by their order in the config; outputs by ``<name>__<index>`` or config order.

Exported programs (``model.pt2``): every input and output *leaf* of the program's pytree
signature answers to Triton's ``torch_aoti`` names (``INPUT__<i>`` / ``OUTPUT__<i>`` ordinals,
``ARGS[i]``, ``KWARGS[key]``, ``RESULT``, ``RESULT[key]`` paths) and to a friendly name: the
forward-argument (placeholder) name of an input, the key of a top-level output dictionary.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tritonx.errors import invalid_arg

log = logging.getLogger("tritonx.backend.pytorch")

_NAMED_INDEX = re.compile(r"__(\d+)$")


def named_index(name: str) -> int | None:
    """The index of a ``<name>__<index>`` name (Triton: the digits after the first ``__``)."""
    start = name.find("__")
    if start < 0:
        return None
    digits = name[start + 2 :]
    return int(digits) if digits.isdigit() else None


def input_positions(model: str, names: Sequence[str], arguments: Sequence[str]) -> list[int]:
    """The forward-argument position of each configured input ``names`` (Triton's rules)."""
    if all(n in arguments for n in names):
        return [arguments.index(n) for n in names]
    indices = [named_index(n) for n in names]
    if all(i is not None for i in indices):
        return [i for i in indices if i is not None]
    log.warning(
        "input '%s' or previous input(s) are neither an input argument to the model '%s' nor "
        "do they follow the <name>__<index> naming convention. Falling back to enforcing "
        "strict ordering from model configuration.",
        next(n for n, i in zip(names, indices, strict=True) if i is None),
        model,
    )
    return list(range(len(names)))


def output_positions(model: str, names: Sequence[str]) -> list[int]:
    """The position of each configured output in a tuple result (Triton's rules)."""
    indices = [named_index(n) for n in names]
    if all(i is not None for i in indices):
        return [i for i in indices if i is not None]
    log.warning(
        "output '%s' or previous output(s) of the model '%s' do not follow the "
        "<name>__<index> naming convention. Falling back to enforcing strict ordering from "
        "model configuration.",
        next(n for n, i in zip(names, indices, strict=True) if i is None),
        model,
    )
    return list(range(len(names)))


# --------------------------------------------------------------------------- pytree leaves


@dataclass(frozen=True)
class Leaf:
    """One tensor of an exported program's flattened inputs or outputs.

    :param index: position in the flat list.
    :param path: Triton's path name (``ARGS[0]``, ``KWARGS[mask]``, ``RESULT[logits]``).
    :param friendly: the name auto-complete gives it (argument name, output key, ordinal).
    """

    index: int
    path: str
    friendly: str

    def names(self, prefix: str) -> tuple[str, ...]:
        """Every name this leaf answers to (``prefix`` is ``INPUT`` or ``OUTPUT``)."""
        return (self.friendly, self.path, f"{prefix}__{self.index}")


def _paths(structure: Any, path: str, out: dict[int, str]) -> None:
    if isinstance(structure, int):
        out[structure] = path
    elif isinstance(structure, dict):
        for key, value in structure.items():
            _paths(value, f"{path}[{key}]", out)
    elif isinstance(structure, (list, tuple)):
        for i, value in enumerate(structure):
            _paths(value, f"{path}[{i}]", out)
    elif structure is not None:
        raise invalid_arg(
            f"unsupported container '{type(structure).__name__}' in the program's signature: "
            "only tensors, tuples, lists and dictionaries are supported"
        )


def input_leaves(structure: Any, placeholder_names: Sequence[str] | None = None) -> list[Leaf]:
    """Leaves of an unflattened ``(args, kwargs)`` whose leaves are their flat indices."""
    args, kwargs = structure
    paths: dict[int, str] = {}
    _paths(tuple(args), "ARGS", paths)
    _paths(dict(kwargs), "KWARGS", paths)
    leaves = []
    for index in sorted(paths):
        friendly = f"INPUT__{index}"
        if placeholder_names is not None and index < len(placeholder_names):
            friendly = placeholder_names[index]
        else:
            match = re.fullmatch(r"KWARGS\[([^\[\]]+)\]", paths[index])
            if match:
                friendly = match.group(1)
        leaves.append(Leaf(index, paths[index], friendly))
    return leaves


def output_leaves(structure: Any) -> list[Leaf]:
    """Leaves of an unflattened output structure whose leaves are their flat indices."""
    paths: dict[int, str] = {}
    _paths(structure, "RESULT", paths)
    leaves = []
    for index in sorted(paths):
        match = re.fullmatch(r"RESULT\[([^\[\]]+)\]", paths[index])
        top_dict = isinstance(structure, dict)
        friendly = match.group(1) if match and top_dict else f"OUTPUT__{index}"
        leaves.append(Leaf(index, paths[index], friendly))
    return leaves


def resolve(model: str, kind: str, names: Sequence[str], leaves: Sequence[Leaf]) -> list[int]:
    """The leaf index each configured name refers to; unknown names are INVALID_ARG."""
    prefix = "INPUT" if kind == "input" else "OUTPUT"
    table: dict[str, int] = {}
    for leaf in leaves:
        for name in leaf.names(prefix):
            table.setdefault(name, leaf.index)
    out = []
    for name in names:
        if name not in table:
            allowed = ", ".join(leaf.friendly for leaf in leaves)
            raise invalid_arg(
                f"unexpected inference {kind} '{name}' for model '{model}', allowed {kind}s "
                f"are: {allowed} (or their {prefix}__<index> / path names)"
            )
        out.append(table[name])
    return out
