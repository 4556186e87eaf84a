"""``tritonx plugins`` lists the DALI plugin, found through its ``tritonx`` entry point.

With the distribution installed (``pip install -e plugins/backend_dali``) the real
installation is used; otherwise the same entry point is declared in a temporary ``*.dist-info``
next to the source tree, so the command still discovers the plugin the way it discovers any.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import tritonx_backend_dali

DIST = "tritonx-backend-dali"


def _installed() -> bool:
    try:
        importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def test_tritonx_plugins_lists_backend_dali(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
    env["TRITONX_PLUGINS"] = "backend_dali"
    if not _installed():
        info = tmp_path / "tritonx_backend_dali-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.1.0\n")
        (info / "entry_points.txt").write_text("[tritonx]\nbackend_dali = tritonx_backend_dali\n")
        (info / "RECORD").write_text("")
        src = Path(tritonx_backend_dali.__file__).parent.parent
        env["PYTHONPATH"] = os.pathsep.join(
            [str(tmp_path), str(src), *filter(None, [env.get("PYTHONPATH")])]
        )
    result = subprocess.run(
        [sys.executable, "-m", "tritonx", "plugins"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    plugins = {p["name"]: p for p in json.loads(result.stdout)}
    plugin = plugins["backend_dali"]
    assert plugin["distribution"] == DIST
    assert plugin["hooks"] == ["tritonx_register_backends"]
    assert plugin["registered"]["backends"] == ["dali"]
