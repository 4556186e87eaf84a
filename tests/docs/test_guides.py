"""The serving guides run as printed (``blocks.py`` says how): each page's server, the model
folders it writes, its commands and client scripts, outputs compared where they are
deterministic. The pages run several at once (``pages_run``); each test reports its page."""

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
    "sagemaker",
    "vertex-ai",
]
#: modules every guide's server needs, and those of some pages
NEEDS = ["tritonx_backend_onnx", "tritonx_backend_python"]
PAGE_NEEDS = {
    "openai": ["tritonx_frontend_openai", "openai"],
    "sagemaker": ["tritonx_frontend_sagemaker"],
    "vertex-ai": ["tritonx_frontend_vertexai"],
}


def page_path(page: str) -> Path:
    return ROOT / "docs" / "guides" / f"{page}.md"


def missing(page: str) -> str | None:
    """The first module the page needs that is not installed."""
    needs = NEEDS + PAGE_NEEDS.get(page, [])
    return next((m for m in needs if importlib.util.find_spec(m) is None), None)


@pytest.mark.parametrize("page", PAGES)
def test_guide_runs_as_printed(pages_run: dict[str, Any], page: str) -> None:
    if (module := missing(page)) is not None:
        pytest.skip(f"{module} is not installed")
    results = pages_run[page].check()
    assert any(result.status == "ran" for result in results), "nothing of the page ran"
    skipped = [result.block for result in results if result.status == "skipped"]
    assert all(block.reason for block in skipped), "a block is skipped without a reason"
    servers = [result.server for result in results if result.server is not None]
    assert all(server.returncode == 0 for server in servers), [s.returncode for s in servers]
    assert not (ROOT / "models").exists(), "a block wrote into the checkout"
