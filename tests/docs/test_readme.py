"""The README is the front door: short, pointing into the site, and every command and script in
it runs as printed (``blocks.py`` beside this file says how)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

#: with the other pages' tests on one pytest-xdist worker (tests/docs/test_pages.py says why)
pytestmark = pytest.mark.xdist_group("docs-pages")

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_is_a_front_door() -> None:
    """The README says what tritonx is and points into the site: under ~200 lines, and every
    page it links exists."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+\.md)", readme)
    assert links and all((ROOT / link).is_file() for link in links), links


def test_the_readme_runs_as_printed(page_runner: Any) -> None:
    """Every command and script of the README runs as printed on a fresh server: the set-up
    command is CI's own, `tritonx serve` serves the bundled models, the curl requests and the
    in-process example print what the README prints (``tests/docs/blocks.py`` says how)."""
    pytest.importorskip("tritonx_backend_onnx")
    pytest.importorskip("tritonx_backend_python")
    results = page_runner.run(ROOT / "README.md")
    statuses = [result.status for result in results]
    assert statuses.count("server") == 1
    assert {result.block.lang for result in results if result.status == "ran"} == {
        "console",
        "python",
    }
    assert "compared" in statuses  # the in-process example's printed output
    servers = [result.server for result in results if result.server is not None]
    page_runner.close()
    assert [server.returncode for server in servers] == [0]
