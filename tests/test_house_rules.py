"""The house rules of the source tree (design amendment 14; CONTRIBUTING.md), checked on the
source itself:

* importing the plugin interface (``tritonx.errors``, ``tritonx.types``, ``tritonx.backend``,
  ...) loads neither the server nor aiohttp nor grpc;
* no import cycle, type-only and function-local imports counted, spans more than three
  modules;
* no module uses another module's private names (``obj._name`` where ``_name`` belongs to a
  class or module defined elsewhere): modules talk through public methods and Protocols;
* no product module is over 700 lines and no function over 80, unless its docstring says why
  (a line starting ``Long because``).

The product code is ``core/src`` and ``plugins/*/src`` (the examples' model code included).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = [ROOT / "core" / "src", *sorted(ROOT.glob("plugins/*/src"))]
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80
REASON = "Long because"
#: the interface modules a plugin imports first; none may load these
HEAVY = (
    "aiohttp",
    "grpc",
    "tritonx.server",
    "tritonx._core",
    "tritonx._transports",
    "tritonx._runtime",
    "tritonx._dataplane.dataplane",
)
#: underscore names of other libraries' public API (named tuples, ``sys._getframe``...)
FOREIGN_API = frozenset(
    {
        "_replace",
        "_asdict",
        "_fields",
        "_make",
        "_field_defaults",
        "_exit",
        "_getframe",
        "_current_frames",
    }
)


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module


def _modules() -> dict[str, Module]:
    found = {}
    for base in SOURCE_ROOTS:
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            found[name] = Module(name, path, ast.parse(path.read_text(), str(path)))
    return found


MODULES = _modules()


def _where(module: Module, line: int) -> str:
    return f"{module.path.relative_to(ROOT)}:{line}"


# ------------------------------------------------------------------ the interface imports light


#: the plugin interface: the modules the public surface (docs/extending/index.md) names
INTERFACE = [
    "tritonx.backend",
    "tritonx.batching",
    "tritonx.cache",
    "tritonx.config",
    "tritonx.datatypes",
    "tritonx.dims",
    "tritonx.errors",
    "tritonx.frontend",
    "tritonx.handle",
    "tritonx.hookspecs",
    "tritonx.metrics",
    "tritonx.parameters",
    "tritonx.pipeline",
    "tritonx.proto",
    "tritonx.registry",
    "tritonx.repoagent",
    "tritonx.repository",
    "tritonx.types",
    "tritonx.wire",
]


@pytest.mark.parametrize("interface", INTERFACE)
def test_importing_the_interface_loads_no_server(interface: str) -> None:
    """``python -X importtime -c 'import tritonx.errors'`` (and the other interface modules a
    plugin starts from) lists no server module, no aiohttp and no grpc."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {interface}"],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = [line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()]
    assert interface in imported
    loaded = [m for m in imported if m.split(".")[0] in HEAVY or m.startswith(HEAVY)]
    assert not loaded, f"import {interface} loads {loaded}"


def test_the_interface_list_is_the_readmes_public_surface() -> None:
    """The docs' "public surface" (docs/extending/index.md) names exactly the interface."""
    page = (ROOT / "docs" / "extending" / "index.md").read_text()
    match = re.search(r"\*\*The public surface\.\*\*(.*?)Everything else", page, re.S)
    assert match is not None
    named = set(re.findall(r"`(tritonx\.\w+)`", match.group(1))) - {"tritonx.testing"}
    assert named == set(INTERFACE)


def test_the_lazy_names_resolve_to_their_modules() -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, tritonx; "
            "assert 'tritonx.server' not in sys.modules; "
            "assert all(getattr(tritonx, n) is not None for n in tritonx.__all__); "
            "assert tritonx.Server.__module__ == 'tritonx.server'",
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr


# ------------------------------------------------------------------ import cycles


def _imports(module: Module) -> Iterator[str]:
    """Every module of the tree ``module`` imports, at any depth (type-only and
    function-local imports included)."""
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base in MODULES:
                yield base
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:
                    yield f"{base}.{alias.name}"


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(sorted(component))
    return found


def test_no_import_cycle_spans_more_than_three_modules() -> None:
    graph = {name: set(_imports(module)) - {name} for name, module in MODULES.items()}
    large = [c for c in _components(graph) if len(c) > 3]
    assert not large, f"import cycles over 3 modules: {large}"


def test_the_cycle_check_sees_type_only_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"d"}, "d": {"a"}, "e": {"a"}}
    assert sorted(map(len, _components(graph))) == [1, 4]
    module = Module(
        "tritonx.x",
        ROOT / "x.py",
        ast.parse("if TYPE_CHECKING:\n    from tritonx.server import Server\n"),
    )
    assert list(_imports(module)) == ["tritonx.server"]


# ------------------------------------------------------------------ private names


def _defined(module: Module) -> set[str]:
    """The underscore names a module defines: functions, classes, attributes it assigns
    (``self._x = ``, ``obj._x = ``), module names, parameters and slots."""
    names = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries, getattr names
    return {n for n in names if n.startswith("_")}


def _private_uses(module: Module, ours: set[str]) -> Iterator[tuple[int, str]]:
    """``obj._name`` in ``module`` where ``_name`` is one of the tree's own private names
    (``ours``) and not one ``module`` defines itself; ``self``/``cls``/``super()`` aside."""
    own = _defined(module)
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Attribute):
            continue
        attr = node.attr
        if not attr.startswith("_") or attr.startswith("__") or attr in FOREIGN_API:
            continue
        target = node.value
        if isinstance(target, ast.Name) and target.id in ("self", "cls"):
            continue
        if isinstance(target, ast.Call) and getattr(target.func, "id", None) == "super":
            continue
        if attr in ours and attr not in own:
            yield node.lineno, f"{ast.unparse(target)}.{attr}"


def test_no_module_uses_another_modules_private_names() -> None:
    ours = set().union(*(_defined(m) for m in MODULES.values()))
    found = [
        f"{_where(module, line)}: {use}"
        for module in MODULES.values()
        for line, use in _private_uses(module, ours)
    ]
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_the_private_name_check_catches_a_friend() -> None:
    owner = Module(
        "a", ROOT / "a.py", ast.parse("class A:\n    def __init__(s):\n        s._x = 1\n")
    )
    friend = Module("b", ROOT / "b.py", ast.parse("def f(a):\n    return a._x, a._replace()\n"))
    assert list(_private_uses(friend, _defined(owner))) == [(2, "a._x")]
    assert not list(_private_uses(owner, _defined(owner)))


# ------------------------------------------------------------------ sizes


def _reason(node: ast.AST) -> bool:
    doc = ast.get_docstring(node) if isinstance(node, ast.AST) else None  # type: ignore[arg-type]
    return doc is not None and any(line.strip().startswith(REASON) for line in doc.splitlines())


def test_no_module_over_700_lines_without_a_reason() -> None:
    long = [
        f"{module.path.relative_to(ROOT)}: {lines} lines"
        for module in MODULES.values()
        if (lines := len(module.path.read_text().splitlines())) > MAX_MODULE_LINES
        and not _reason(module.tree)
    ]
    assert not long, "modules over 700 lines (split by concern, or say why):\n" + "\n".join(long)


def test_no_function_over_80_lines_without_a_reason() -> None:
    long = [
        f"{_where(module, node.lineno)}: {node.name} {lines} lines"
        for module in MODULES.values()
        for node in ast.walk(module.tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (lines := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION_LINES
        and not _reason(node)
    ]
    assert not long, "functions over 80 lines (name the steps, or say why):\n" + "\n".join(long)
