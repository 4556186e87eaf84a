"""aiohttp's internals stay behind one door (design amendment 11).

``tritonx._transports.http.aiohttp_internals`` is the one module that goes below aiohttp's public API.
These tests fail, naming the name and the aiohttp version, when:

* the installed aiohttp is outside the range ``core/pyproject.toml`` pins;
* a private name that module relies on (``PRIVATE_NAMES``), or a method it overrides
  (``OVERRIDES``), is gone from aiohttp or has another kind;
* a name of its own (or of :class:`~tritonx._transports.http.listener.LimitedSite`) shadows one of aiohttp;
* aiohttp's default parser limits differ from the ones the fast path frames with;
* any other module of ``core/src/tritonx`` or ``plugins/*/src`` uses a private aiohttp name
  (an internal module such as ``aiohttp.web_protocol``, a ``_name`` imported from aiohttp, or
  a ``_name`` attribute of an aiohttp class or object), or the door uses one it does not
  declare.
"""

from __future__ import annotations

import ast
import asyncio
import collections
import functools
import importlib
import inspect
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from packaging.requirements import Requirement

from tritonx._transports.http import aiohttp_internals
from tritonx._transports.http.aiohttp_internals import OVERRIDES, PRIVATE_NAMES, Connection
from tritonx._transports.http.framing import MAX_FIELDS, MAX_LINE
from tritonx._transports.http.listener import LimitedSite

ROOT = Path(__file__).resolve().parents[3]
DOOR = ROOT / "core" / "src" / "tritonx" / "_transports" / "http" / "aiohttp_internals.py"
VERSION = aiohttp.__version__
#: aiohttp's public modules (its documented import surface); any other is internal
PUBLIC_MODULES = frozenset(
    {"aiohttp", "aiohttp.web", "aiohttp.abc", "aiohttp.hdrs", "aiohttp.test_utils"}
)
#: the public API of named tuples (aiohttp has some): underscored, not private
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in NAMEDTUPLE_API


@functools.cache
def _private_names_of(cls: Any) -> frozenset[str]:
    """The private names of the aiohttp classes in ``cls``'s MRO: their attributes and slots,
    and every ``self._name`` their source uses (instance attributes without slots)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if not (klass.__module__ or "").startswith("aiohttp"):
            continue
        slots = vars(klass).get("__slots__", ())
        names.update(n for n in [*vars(klass), *([slots] if isinstance(slots, str) else slots)])
        names |= _self_names(klass)
    return frozenset(n for n in names if _private(n))


def _self_names(cls: type) -> set[str]:
    """The ``self._name`` attributes the source of ``cls`` (an aiohttp class) uses."""
    path = getattr(sys.modules.get(cls.__module__), "__file__", None) or ""
    if not path.endswith(".py"):  # a compiled class: vars() and __slots__ list its names
        return set()
    for node in _parsed(path).body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return {
                sub.attr
                for sub in ast.walk(node)
                if isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Name)
                and sub.value.id == "self"
            }
    return set()


@functools.cache
def _parsed(path: str) -> ast.Module:
    return ast.parse(Path(path).read_text(), path)


@functools.cache
def _all_private_names() -> frozenset[str]:
    """Every private name of every class aiohttp and ``aiohttp.web`` export."""
    names: set[str] = set()
    for module in (aiohttp, web):
        for obj in list(vars(module).values()):
            if isinstance(obj, type):
                names |= _private_names_of(obj)
    return frozenset(names)


def _imported(module: str, name: str | None = None) -> Any:
    """``module`` (or its attribute or submodule ``name``); None where it does not exist."""
    try:
        value = importlib.import_module(module)
        if name is None:
            return value
        if hasattr(value, name):
            return getattr(value, name)
        return importlib.import_module(f"{module}.{name}")
    except ImportError:
        return None


def _pinned() -> Requirement:
    project = tomllib.loads((ROOT / "core" / "pyproject.toml").read_text())["project"]
    found = [r for r in map(Requirement, project["dependencies"]) if r.name == "aiohttp"]
    assert len(found) == 1, "core/pyproject.toml should name aiohttp once among its dependencies"
    return found[0]


# ----------------------------------------------------------------------------- the version


def test_the_aiohttp_range_is_pinned() -> None:
    """A lower bound that was tested and an upper bound below the next minor release."""
    specifier = _pinned().specifier
    operators = sorted(spec.operator for spec in specifier)
    assert operators == ["<", ">="], (
        f"core/pyproject.toml should pin aiohttp to a tested range (>=low,<next minor), "
        f"not {str(specifier)!r}"
    )


def test_the_installed_aiohttp_is_in_the_pinned_range() -> None:
    specifier = _pinned().specifier
    assert specifier.contains(VERSION, prereleases=True), (
        f"aiohttp {VERSION} is installed, outside the range core/pyproject.toml pins "
        f"({specifier}): tritonx._transports.http.aiohttp_internals is tested only within it"
    )


# ------------------------------------------------------------- the names the door relies on


@pytest.fixture
async def handler() -> web.RequestHandler:
    """A new aiohttp ``RequestHandler``, as the listener makes one per connection."""

    async def answer(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response()

    return web.RequestHandler(web.Server(answer), loop=asyncio.get_running_loop())


def _kind_of(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, collections.deque):
        return "deque"
    return type(value).__name__


@pytest.mark.parametrize("name", sorted(PRIVATE_NAMES))
def test_a_private_name_the_door_relies_on_is_there(name: str, handler: web.RequestHandler) -> None:
    kind = PRIVATE_NAMES[name]
    where = (
        f"aiohttp {VERSION}: tritonx._transports.http.aiohttp_internals relies on web.RequestHandler's "
        f"private {name!r} ({kind}; the module's docstring says why)"
    )
    if kind == "method":
        assert callable(getattr(web.RequestHandler, name, None)), (
            f"{where}, which this aiohttp does not have as a method"
        )
        return
    assert hasattr(handler, name), f"{where}, which this aiohttp does not have"
    assert _kind_of(getattr(handler, name)) == kind, (
        f"{where}, which is a {_kind_of(getattr(handler, name))} in this aiohttp"
    )


@pytest.mark.parametrize("name", sorted(OVERRIDES))
def test_what_the_connection_overrides_is_there(name: str) -> None:
    """An override of a method aiohttp renamed or dropped would never be called."""
    assert callable(getattr(web.RequestHandler, name, None)), (
        f"aiohttp {VERSION}: tritonx._transports.http.aiohttp_internals.Connection overrides "
        f"web.RequestHandler.{name}, which this aiohttp does not have"
    )


def _own_names(cls: type) -> set[str]:
    slots = vars(cls).get("__slots__", ())
    return {n for n in [*vars(cls), *slots] if not n.startswith("__")}


@pytest.mark.parametrize(
    ("cls", "base", "overrides"),
    [
        (Connection, web.RequestHandler, OVERRIDES),
        # the public methods of aiohttp's BaseSite that a site implements
        (LimitedSite, web.BaseSite, {"__init__", "name", "start", "stop"}),
    ],
    ids=["Connection", "LimitedSite"],
)
def test_own_names_shadow_none_of_aiohttp(cls: type, base: type, overrides: set[str]) -> None:
    """A name of tritonx's own that aiohttp's base class also has would silently replace
    aiohttp's (or share its storage)."""
    theirs = (set(dir(base)) | _private_names_of(base)) - {"_abc_impl"}  # (ABC machinery)
    shadowing = sorted((_own_names(cls) - overrides) & theirs)
    assert not shadowing, (
        f"aiohttp {VERSION}: {cls.__qualname__} defines {shadowing}, which aiohttp's "
        f"{base.__qualname__} has too: rename them"
    )


def test_the_docstring_says_why_for_every_private_name() -> None:
    doc = aiohttp_internals.__doc__ or ""
    missing = [name for name in PRIVATE_NAMES if f"``{name}``" not in doc]
    assert not missing, (
        f"tritonx._transports.http.aiohttp_internals' docstring does not explain {missing}"
    )


def test_the_fast_paths_framing_limits_are_aiohttps() -> None:
    """The listener leaves a head past these limits to aiohttp, which refuses it: they must
    be the limits aiohttp's parser applies (``RequestHandler``'s defaults)."""
    defaults = inspect.signature(web.RequestHandler.__init__).parameters
    limits = {"max_line_size": MAX_LINE, "max_field_size": MAX_LINE, "max_headers": MAX_FIELDS}
    for name, ours in limits.items():
        assert defaults[name].default == ours, (
            f"aiohttp {VERSION}: web.RequestHandler's {name} defaults to "
            f"{defaults[name].default}, tritonx._transports.http.framing frames with {ours}"
        )


# ---------------------------------------------------------------------- containment


class _Use:
    """One use of a private aiohttp name in a source file."""

    def __init__(self, path: Path, line: int, what: str, name: str) -> None:
        self.path, self.line, self.what, self.name = path, line, what, name

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.what}"


def _sources() -> list[Path]:
    core = sorted((ROOT / "core" / "src" / "tritonx").rglob("*.py"))
    plugins = sorted((ROOT / "plugins").glob("*/src/**/*.py"))
    assert core, f"no sources under {ROOT / 'core' / 'src' / 'tritonx'}"
    return core + plugins


class _Scan:
    """The private aiohttp names the given files use, found in their syntax trees.

    * imports: of a module of aiohttp other than its public ones, or of a ``_name`` from one;
    * in a class that derives from an aiohttp class (directly or through a class of these
      files): ``self._name``, ``cls._name``, ``super()._name``, and a method, slot or class
      attribute of its own, for every ``_name`` of that aiohttp class;
    * anywhere else: ``x._name`` (and ``getattr(x, "_name")`` ...) for a ``_name`` of any
      aiohttp class that these files do not define themselves (a name their own classes
      define too, such as ``_close``, is not flagged there: the scan cannot tell whose
      object ``x`` is).
    """

    def __init__(self, trees: dict[Path, ast.Module]) -> None:
        self.trees = trees
        self.uses: list[_Use] = []
        #: class name -> the aiohttp classes it derives from
        self.derived: dict[str, set[type]] = {}
        self._find_derived()
        self.own = self._own_names()
        for path, tree in self.trees.items():
            self._scan(path, tree)

    # -------------------------------------------------------------- classes and names

    @staticmethod
    def _aliases(tree: ast.Module) -> dict[str, Any]:
        """Names bound to aiohttp modules or objects by the file's imports."""
        aliases: dict[str, Any] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "aiohttp":
                        if alias.asname:
                            aliases[alias.asname] = _imported(alias.name)
                        else:
                            aliases["aiohttp"] = aiohttp
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == (
                "aiohttp"
            ):
                assert node.module is not None
                for alias in node.names:
                    value = _imported(node.module, alias.name)
                    if value is not None:
                        aliases[alias.asname or alias.name] = value
        return aliases

    def _resolve(self, node: ast.expr, aliases: dict[str, Any]) -> Any:
        if isinstance(node, ast.Name):
            return aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            owner = self._resolve(node.value, aliases)
            return getattr(owner, node.attr, None) if owner is not None else None
        return None

    def _bases(self, cls: ast.ClassDef, aliases: dict[str, Any]) -> set[type]:
        found: set[type] = set()
        for base in cls.bases:
            value = self._resolve(base, aliases)
            if inspect.isclass(value) and (value.__module__ or "").startswith("aiohttp"):
                found.add(value)
            elif isinstance(base, ast.Name) and base.id in self.derived:
                found |= self.derived[base.id]
        return found

    def _find_derived(self) -> None:
        aliases = {path: self._aliases(tree) for path, tree in self.trees.items()}
        changed = True
        while changed:
            changed = False
            for path, tree in self.trees.items():
                for node in ast.walk(tree):
                    if isinstance(node, ast.ClassDef):
                        bases = self._bases(node, aliases[path])
                        if bases - self.derived.get(node.name, set()):
                            self.derived.setdefault(node.name, set()).update(bases)
                            changed = True

    def _own_names(self) -> set[str]:
        """The private names these files' own classes (not aiohttp's subclasses) define:
        methods, class attributes, slots, and attributes assigned through ``self``."""
        own: set[str] = set()
        for tree in self.trees.values():
            for cls in ast.walk(tree):
                if not isinstance(cls, ast.ClassDef) or cls.name in self.derived:
                    continue
                for node in cls.body:
                    own.update(_defined(node))
                for sub in ast.walk(cls):
                    if (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.ctx, ast.Store)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id in ("self", "cls")
                    ):
                        own.add(sub.attr)
        return {name for name in own if _private(name)}

    # ------------------------------------------------------------------------- uses

    def _scan(self, path: Path, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("aiohttp.") and alias.name not in PUBLIC_MODULES:
                        self._use(path, node, f"imports {alias.name}", alias.name)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == (
                "aiohttp"
            ):
                if node.module not in PUBLIC_MODULES:
                    self._use(path, node, f"imports from {node.module}", str(node.module))
                for alias in node.names:
                    if _private(alias.name):
                        self._use(path, node, f"imports {alias.name} from aiohttp", alias.name)
        self._scan_scope(path, tree, None)

    def _scan_scope(self, path: Path, node: ast.AST, bases: set[type] | None) -> None:
        """Walk ``node``, ``bases`` being the aiohttp classes the enclosing class derives
        from (None outside such a class)."""
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                derived = self.derived.get(child.name)
                if derived:
                    self._own_defs(path, child, derived)
                self._scan_scope(path, child, derived or None)
                continue
            if isinstance(child, ast.Attribute):
                self._attribute(path, child, child.value, child.attr, bases)
            elif (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Name)
                and child.func.id in ("getattr", "setattr", "hasattr", "delattr")
                and len(child.args) >= 2
                and isinstance(child.args[1], ast.Constant)
                and isinstance(child.args[1].value, str)
            ):
                self._attribute(path, child, child.args[0], child.args[1].value, bases)
            self._scan_scope(path, child, bases)

    def _attribute(
        self, path: Path, node: ast.AST, receiver: ast.expr, name: str, bases: set[type] | None
    ) -> None:
        if not _private(name):
            return
        selfish = (isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")) or (
            isinstance(receiver, ast.Call)
            and isinstance(receiver.func, ast.Name)
            and receiver.func.id == "super"
        )
        if selfish and bases:
            if any(name in _private_names_of(base) for base in bases):
                self._use(path, node, f"uses aiohttp's private {name}", name)
        elif not selfish and name in _all_private_names() and name not in self.own:
            self._use(path, node, f"uses aiohttp's private {name}", name)

    def _own_defs(self, path: Path, cls: ast.ClassDef, bases: set[type]) -> None:
        """Methods, slots and class attributes of an aiohttp subclass named as aiohttp's."""
        theirs = set().union(*(_private_names_of(base) for base in bases))
        for node in cls.body:
            for name in _defined(node):
                if name in theirs:
                    self._use(path, node, f"{cls.name} defines aiohttp's private {name}", name)

    def _use(self, path: Path, node: ast.AST, what: str, name: str) -> None:
        self.uses.append(_Use(path, getattr(node, "lineno", 0), what, name))


def _defined(node: ast.stmt) -> list[str]:
    """The names a statement of a class body defines: a method, class attributes, or the
    entries of ``__slots__``."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return [node.name]
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if "__slots__" in names and node.value is not None:
            return [
                c.value
                for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            ]
        return names
    return []


@functools.cache
def _scan() -> _Scan:
    return _Scan({path: ast.parse(path.read_text(), str(path)) for path in _sources()})


def _uses(door: bool) -> Iterator[_Use]:
    return (use for use in _scan().uses if (use.path == DOOR) == door)


def test_no_private_aiohttp_name_outside_the_door() -> None:
    outside = [str(use) for use in _uses(door=False)]
    assert not outside, (
        f"aiohttp {VERSION}: private aiohttp names used outside "
        f"tritonx._transports.http.aiohttp_internals (go through that module, and add what it needs to "
        f"its PRIVATE_NAMES and docstring):\n" + "\n".join(outside)
    )


def test_the_door_declares_every_private_name_it_uses() -> None:
    used = {use.name for use in _uses(door=True)}
    undeclared = sorted(used - set(PRIVATE_NAMES) - OVERRIDES)
    assert not undeclared, (
        f"aiohttp {VERSION}: tritonx._transports.http.aiohttp_internals uses {undeclared}, which its "
        f"PRIVATE_NAMES does not declare"
    )
    stale = sorted(set(PRIVATE_NAMES) - used)
    assert not stale, f"PRIVATE_NAMES declares {stale}, which the module no longer uses"


def test_the_scan_finds_private_uses() -> None:
    """The scan itself: each kind of use it must catch, in a file of its own."""
    source = """
import aiohttp.web_protocol
from aiohttp.http_parser import HttpRequestParser
from aiohttp import web, _helpers
from aiohttp.web import BaseSite

class Site(BaseSite):
    __slots__ = ("_runner",)
    def f(self):
        return self._ssl_context

class Deeper(Site):
    def g(self):
        return super()._backlog

def h(request: web.Request, site):
    getattr(site, "_server")
    return request._payload
"""
    scan = _Scan({DOOR.parent / "example_scan_input.py": ast.parse(source)})
    found = {use.name for use in scan.uses}
    assert found >= {
        "aiohttp.web_protocol",
        "aiohttp.http_parser",
        "_helpers",
        "_runner",
        "_ssl_context",
        "_backlog",
        "_server",
        "_payload",
    }, [str(use) for use in scan.uses]
