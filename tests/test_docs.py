"""Docs that cannot drift: hook docstrings name every argument; the request map places every
private module (the README and the site's pages: ``tests/docs``)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from tritonx import hookspecs

ROOT = Path(__file__).resolve().parents[1]
HOOKS = [
    (name, fn)
    for name, fn in vars(hookspecs).items()
    if name.startswith("tritonx_") and callable(fn)
]


@pytest.mark.parametrize(("name", "fn"), HOOKS, ids=[n for n, _ in HOOKS])
def test_every_hook_documents_every_argument(name: str, fn: object) -> None:
    doc = inspect.getdoc(fn)
    assert doc, f"{name} has no docstring"
    for arg in inspect.signature(fn).parameters:  # type: ignore[arg-type]
        assert f":param {arg}:" in doc, f"{name} does not document '{arg}'"


def test_the_request_map_places_every_private_module() -> None:
    """The docs' "Where a request goes" (docs/extending/index.md) names every module under
    ``tritonx/_*/`` (a package by its folder), so a newcomer finds each one's place."""
    page = (ROOT / "docs" / "extending" / "index.md").read_text()
    start = page.index("## Where a request goes")
    fence = page.index("```\ncore/src/tritonx/\n", start)  # the map (a diagram comes first)
    block = page[fence : page.index("```\n", fence + 4)]
    base = ROOT / "core" / "src" / "tritonx"
    missing = []
    for path in sorted(base.glob("_*/**/*.py")):
        if path.name == "__init__.py" and path.parent.parent == base:
            continue  # the layer itself: _core/, _transports/, ...
        name = f"{path.parent.name}/" if path.name == "__init__.py" else path.name
        if not re.search(r"(?<![\w/])" + re.escape(name), block):
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"docs/extending/index.md's request map does not place {missing}"
