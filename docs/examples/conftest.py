"""The single-module examples (``docs/examples/<example>/<module>.py``) are plain files, not
installed distributions: ``example`` imports the one beside the test asking for it
(``test_<module>.py`` gets ``<module>.py``), afresh for every test."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest


@pytest.fixture
def example(request: pytest.FixtureRequest) -> ModuleType:
    path = request.path.with_name(request.path.name.removeprefix("test_"))
    spec = importlib.util.spec_from_file_location(f"tritonx_example_{path.stem}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
