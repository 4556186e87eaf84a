"""The "Extending tritonx" pages run as printed (``blocks.py`` says how): ``backend.md``
installs nothing (CI has installed backend_linear), lists the plugin, runs its tests and serves
and calls a model; every tutorial runs its example's tests; the blocks that need a
single-module example installed as a distribution are skipped with that reason."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

#: the pages' tests on one pytest-xdist worker: the module's ``pages_run`` runs all of its
#: pages at once (again on each worker that took one of its tests), and pages of different
#: modules would meet on the default ports the runner does not rewrite (8080, 9000)
pytestmark = pytest.mark.xdist_group("docs-pages")

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs" / "extending").glob("*.md"))


def page_path(page: str) -> Path:
    return ROOT / "docs" / "extending" / f"{page}.md"


def missing(page: str) -> str | None:
    """What the pages need: the example backend installed (CI installs it)."""
    return None if importlib.util.find_spec("tritonx_backend_linear") else "tritonx_backend_linear"


@pytest.mark.parametrize("page", [p.stem for p in PAGES])
def test_extending_page_runs_as_printed(pages_run: dict[str, Any], page: str) -> None:
    """The pages run several at once (``pages_run``); each test reports its page."""
    if (need := missing(page)) is not None:
        pytest.skip(f"{need} is not installed")
    results = pages_run[page].check()
    skipped = [r.block.reason for r in results if r.status == "skipped"]
    assert all(skipped), "a skipped block gives no reason"
    assert not (ROOT / "models").exists(), "a block wrote into the checkout"
