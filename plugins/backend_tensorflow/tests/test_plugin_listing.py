"""``tritonx plugins`` lists the TensorFlow plugin, found through its ``tritonx`` entry point,
with its backend and platforms.

With the distribution installed (``pip install -e plugins/backend_tensorflow``) the real
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

import tritonx_backend_tensorflow

DIST = "tritonx-backend-tensorflow"


def _installed() -> bool:
    try:
        importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def test_tritonx_plugins_lists_backend_tensorflow(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
    env["TRITONX_PLUGINS"] = "backend_tensorflow"
    if not _installed():
        info = tmp_path / "tritonx_backend_tensorflow-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.1.0\n")
        (info / "entry_points.txt").write_text(
            "[tritonx]\nbackend_tensorflow = tritonx_backend_tensorflow\n"
        )
        (info / "RECORD").write_text("")
        src = Path(tritonx_backend_tensorflow.__file__).parent.parent
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
    plugin = plugins["backend_tensorflow"]
    assert plugin["distribution"] == DIST
    assert plugin["hooks"] == ["tritonx_register_backends"]
    assert plugin["registered"]["backends"] == ["tensorflow"]
    assert sorted(plugin["registered"]["platforms"]) == [
        "tensorflow_graphdef",
        "tensorflow_savedmodel",
    ]
    # listing the plugins imported no TensorFlow (the plugin keeps start-up light)
    code = (
        "import sys, tritonx_backend_tensorflow\n"
        "print('tensorflow' in sys.modules, 'keras' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.stdout.split() == ["False", "False"], out.stderr
