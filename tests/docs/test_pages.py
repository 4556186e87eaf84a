"""The guides, references and front pages of the site run as printed (``blocks.py`` says how):
each page's ``console``/``sh``/``python`` blocks run against the servers the page starts, their
printed output compared where it is deterministic; a block that cannot run here is skipped
with its reason."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

#: the pages' tests on one pytest-xdist worker: the module's ``pages_run`` runs all of its
#: pages at once (again on each worker that took one of its tests), and pages of different
#: modules would meet on the default ports the runner does not rewrite (8080, 9000)
pytestmark = pytest.mark.xdist_group("docs-pages")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: each page, and what its blocks need: plugins (importable modules) and programs (``kubectl``,
#: which ``.ci/run`` installs into the virtual environment when it can)
PAGES: dict[str, tuple[str, ...]] = {
    "index.md": (),
    "coming-from-triton.md": ("tritonx_backend_onnx", "tritonx_backend_python"),
    "troubleshooting.md": ("tritonx_backend_onnx", "tritonx_backend_python"),
    "performance.md": (),
    "guides/security.md": ("tritonx_backend_onnx", "tritonx_backend_python"),
    "guides/tracing-and-logging.md": ("tritonx_backend_onnx", "tritonx_backend_python"),
    "guides/metrics.md": ("tritonx_backend_onnx", "tritonx_backend_python"),
    "guides/kubernetes.md": ("kubectl",),
    "guides/container-image.md": (),
    "guides/status-page.md": ("tritonx_backend_onnx", "tritonx_backend_python"),
    "guides/analyze.md": ("tritonx_tools_analyze",),
    "reference/behaviour.md": ("tritonx_backend_onnx", "tritonx_backend_python"),
    "reference/cli.md": ("tritonx_backend_onnx", "tritonx_backend_python"),
    "reference/config-parameters.md": (),
    "reference/endpoints.md": (
        "tritonx_backend_onnx",
        "tritonx_backend_python",
        "tritonx_frontend_openai",
    ),
    "reference/plugins.md": ("tritonx_backend_onnx",),
}


def test_every_reference_page_is_listed() -> None:
    """A page added under ``docs/reference`` gets a test here."""
    found = {f"reference/{page.name}" for page in (DOCS / "reference").glob("*.md")}
    assert found <= set(PAGES)


def page_path(page: str) -> Path:
    return DOCS / page


def missing(page: str) -> str | None:
    """The first thing the page needs that is not installed."""
    for need in PAGES[page]:
        if need == "kubectl":
            found = shutil.which(need, path=str(Path(sys.executable).parent)) or shutil.which(need)
            if found is None:
                return "kubectl"
        elif importlib.util.find_spec(need) is None:
            return need
    return None


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_runs_as_printed(pages_run: dict[str, Any], blocks: Any, page: str) -> None:
    """The pages run several at once (``pages_run``); each test reports its page."""
    if (need := missing(page)) is not None:
        pytest.skip(f"{need} is not installed")
    path = DOCS / page
    parsed = blocks.parse(path)
    assert all(block.reason for block in parsed if block.directive == "skip"), (
        "a skipped block gives no reason"
    )
    results = pages_run[page].check()
    assert all(r.block.reason for r in results if r.status == "skipped")
    assert not (ROOT / "models").exists(), "a block wrote into the checkout"
