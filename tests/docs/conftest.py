"""Fixtures of the documentation tests: ``page_runner`` runs a page's blocks as printed
(``blocks.py`` beside this file says how)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _blocks_module() -> ModuleType:
    """``tests/docs/blocks.py``, imported once (the tests use ``--import-mode=importlib``, so
    the module beside them is not importable by name)."""
    name = "tritonx_doc_blocks"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("blocks.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def blocks() -> ModuleType:
    """The block runner's module (``parse``, ``PageRunner``, ``BlockFailed``, ...)."""
    return _blocks_module()


@pytest.fixture
def page_runner(blocks: ModuleType, tmp_path: Path) -> Iterator[object]:
    """A ``PageRunner`` on this checkout in a fresh scratch folder; its servers are stopped
    (SIGINT, then waited for) when the test ends, passed or failed."""
    with blocks.PageRunner(ROOT, tmp_path) as runner:
        yield runner
