"""``tritonx plugins`` lists the TensorFlow plugin, found through its ``tritonx`` entry point
(the installed distribution, or a dist-info written from its pyproject when it is not
installed: :func:`tritonx.testing.listed_plugins`), with its backend and platforms; importing the plugin imports no TensorFlow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tritonx.testing import listed_plugins

ROOT = Path(__file__).resolve().parent.parent


def test_tritonx_plugins_lists_backend_tensorflow(tmp_path: Path) -> None:
    plugin = listed_plugins(ROOT, tmp_path)["backend_tensorflow"]
    assert plugin["distribution"] == "tritonx-backend-tensorflow"
    assert plugin["hooks"] == ["tritonx_register_backends"]
    assert plugin["registered"]["backends"] == ["tensorflow"]
    assert sorted(plugin["registered"]["platforms"]) == [
        "tensorflow_graphdef",
        "tensorflow_savedmodel",
    ]
    code = (
        "import sys, tritonx_backend_tensorflow\n"
        "print('tensorflow' in sys.modules, 'keras' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr
