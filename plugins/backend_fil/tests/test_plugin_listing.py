"""``tritonx plugins`` lists the FIL plugin, found through its ``tritonx`` entry point (the
installed distribution, or a dist-info written from the pyproject when it is not installed)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

from tritonx.testing import listed_plugins

DIST = "tritonx-backend-fil"
ROOT = Path(__file__).resolve().parent.parent


def _installed() -> bool:
    try:
        importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def test_tritonx_plugins_lists_backend_fil(tmp_path: Path) -> None:
    if _installed():
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
        env["TRITONX_PLUGINS"] = "backend_fil"
        result = subprocess.run(
            [sys.executable, "-m", "tritonx", "plugins"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        plugins = {p["name"]: p for p in json.loads(result.stdout)}
    else:
        plugins = listed_plugins(ROOT, tmp_path)
    plugin = plugins["backend_fil"]
    assert plugin["distribution"] == DIST
    assert plugin["hooks"] == ["tritonx_register_backends"]
    assert plugin["registered"]["backends"] == ["fil"]
    # Triton's FIL backend has no platform name: models say backend: "fil"
    assert plugin["registered"].get("platforms", []) == []
