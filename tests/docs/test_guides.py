"""The serving guides run as printed (``blocks.py`` says how): each page's server, the model
folders it writes, its commands and client scripts, outputs compared where they are
deterministic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    "python-models",
    "openai",
    "many-models",
    "ensembles-and-bls",
    "sequences",
    "shared-memory",
    "response-cache",
    "reloading-and-stopping",
    "health",
]
#: plugins a page's server needs
NEEDS = {"openai": ["tritonx_frontend_openai", "openai"]}


@pytest.mark.parametrize("page", PAGES)
def test_guide_runs_as_printed(page_runner: Any, page: str) -> None:
    pytest.importorskip("tritonx_backend_onnx")
    pytest.importorskip("tritonx_backend_python")
    for module in NEEDS.get(page, []):
        pytest.importorskip(module)
    results = page_runner.run(ROOT / "docs" / "guides" / f"{page}.md")
    assert any(result.status == "ran" for result in results), "nothing of the page ran"
    skipped = [result.block for result in results if result.status == "skipped"]
    assert all(block.reason for block in skipped), "a block is skipped without a reason"
    servers = [result.server for result in results if result.server is not None]
    page_runner.close()
    assert all(server.returncode == 0 for server in servers), [s.returncode for s in servers]
    assert not (ROOT / "models").exists(), "a block wrote into the checkout"
