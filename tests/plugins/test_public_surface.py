"""Plugins use the public surface only: every ``tritonx`` name a plugin's source (or an
example's, ``docs/examples``) imports or reaches as ``tritonx.<module>.<name>`` is in the
``__all__`` of a public module, and none imports ``tritonx._core`` or any underscore module. The public modules are the ones the
README lists under "The public surface"."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: plugins' code, and the examples plugin authors start from (not their tests)
SOURCES = sorted(
    [*ROOT.glob("plugins/*/src/**/*.py"), *ROOT.glob("docs/examples/*/src/**/*.py")]
    + [p for p in ROOT.glob("docs/examples/*/*.py") if not p.name.startswith("test_")]
)


def public_modules() -> set[str]:
    """The modules the public-surface paragraph of ``docs/extending/index.md`` names
    (``tritonx.testing`` is for plugins' tests, not their code)."""
    page = (ROOT / "docs" / "extending" / "index.md").read_text()
    match = re.search(r"\*\*The public surface\.\*\*(.*?)Everything else", page, re.S)
    assert match, "docs/extending/index.md has no '**The public surface.**' paragraph"
    named = set(re.findall(r"`(tritonx(?:\.\w+)?)`", match.group(1)))
    return {m for m in named if not m.split(".")[-1].startswith("_")} - {"tritonx.testing"}


PUBLIC = public_modules()


def exported(module: str) -> set[str]:
    names = set(importlib.import_module(module).__all__)
    if module == "tritonx":  # ``from tritonx import errors``: a public submodule
        names |= {m.removeprefix("tritonx.") for m in PUBLIC if m != "tritonx"}
    return names


def uses(tree: ast.AST) -> Iterator[tuple[int, str, str | None]]:
    """(line, module, name) for every ``tritonx`` import and ``tritonx.<...>`` attribute
    chain; name is None for a module imported whole."""
    bound: set[str] = set()  # local names of the ``tritonx`` package
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tritonx":
                    yield node.lineno, alias.name, None
                    if alias.asname is None:
                        bound.add("tritonx")
                    elif alias.name == "tritonx":
                        bound.add(alias.asname)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "tritonx":
                for alias in node.names:
                    yield node.lineno, node.module, alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in bound:
                yield node.lineno, "tritonx", node.attr
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id in bound
            and f"tritonx.{node.value.attr}" in PUBLIC
        ):
            yield node.lineno, f"tritonx.{node.value.attr}", node.attr


def violations(source: str, filename: str = "<plugin>") -> list[str]:
    found = []
    for line, module, name in sorted(uses(ast.parse(source, filename)), key=lambda u: u[0]):
        where = f"{filename}:{line}"
        if any(part.startswith("_") for part in module.split(".")):
            found.append(f"{where}: imports private module {module}")
        elif module not in PUBLIC:
            found.append(f"{where}: {module} is not a public module")
        elif name is not None and name not in exported(module):
            found.append(f"{where}: {module}.{name} is not in {module}.__all__")
    return found


def test_the_readme_names_the_public_modules() -> None:
    assert {"tritonx", "tritonx.errors", "tritonx.datatypes", "tritonx.proto"} <= PUBLIC
    for module in PUBLIC:
        assert importlib.import_module(module).__all__, module


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_plugins_import_only_the_public_surface(path: Path) -> None:
    assert violations(path.read_text(), str(path.relative_to(ROOT))) == []


def test_the_check_catches_private_and_unexported_names() -> None:
    source = (
        "import tritonx\n"
        "import tritonx._core.lifecycle\n"
        "from tritonx._proto import x\n"
        "from tritonx.errors import Code, _LABELS\n"
        "from tritonx.dataplane import DataPlane\n"
        "from tritonx import errors, Backend, Nope\n"
        "tritonx.Backend, tritonx.errors.invalid_arg, tritonx.errors.nope, tritonx.hidden\n"
    )
    assert [v.split(": ", 1)[1] for v in violations(source)] == [
        "imports private module tritonx._core.lifecycle",
        "imports private module tritonx._proto",
        "tritonx.errors._LABELS is not in tritonx.errors.__all__",
        "tritonx.dataplane is not a public module",
        "tritonx.Nope is not in tritonx.__all__",
        "tritonx.errors.nope is not in tritonx.errors.__all__",
        "tritonx.hidden is not in tritonx.__all__",
    ]
