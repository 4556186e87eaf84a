"""The documentation site builds in strict mode: a broken link, a missing page of the nav, a
missing snippet file or a generator that fails stops the build (and so CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert (site / "index.html").is_file()
    assert (site / "getting-started" / "index.html").is_file()
