"""MkDocs hook: pages name what is generated from the code, so the site cannot drift from it.

A line ``<!-- generated: cli.serve_help -->`` in a page is replaced, at build time, by what
``serve_help()`` of ``docs/site_hooks/gen_cli.py`` returns (Markdown). Each ``gen_<topic>.py``
module holds the generators of one topic; a marker naming a module or function that does not
exist fails the build.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
MARKER = re.compile(r"^<!-- generated: (\w+)\.(\w+) -->$", re.M)
_modules: dict[str, ModuleType] = {}


def _module(topic: str) -> ModuleType:
    if topic not in _modules:
        path = HERE / f"gen_{topic}.py"
        if not path.is_file():
            raise ValueError(f"no generator module {path.name} for 'generated: {topic}.*'")
        spec = importlib.util.spec_from_file_location(f"tritonx_site_gen_{topic}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        _modules[topic] = module
    return _modules[topic]


def expand(markdown: str) -> str:
    """``markdown`` with every generated marker replaced by its generator's output."""

    def replace(match: re.Match[str]) -> str:
        topic, name = match.groups()
        generator = getattr(_module(topic), name, None)
        if generator is None:
            raise ValueError(f"gen_{topic}.py has no generator '{name}'")
        return str(generator()).rstrip("\n")

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: expand the page's generated markers."""
    return expand(markdown)
