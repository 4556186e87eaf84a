"""The "Extending tritonx" pages run as printed (``blocks.py`` says how): ``backend.md``
installs nothing (CI has installed backend_linear), lists the plugin, runs its tests and serves
and calls a model; every tutorial runs its example's tests; the blocks that need a
single-module example installed as a distribution are skipped with that reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs" / "extending").glob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_extending_page_runs_as_printed(page_runner: Any, page: Path) -> None:
    pytest.importorskip("tritonx_backend_linear")
    results = page_runner.run(page)
    skipped = [r.block.reason for r in results if r.status == "skipped"]
    assert all(skipped), "a skipped block gives no reason"
    assert not (ROOT / "models").exists(), "a block wrote into the checkout"
