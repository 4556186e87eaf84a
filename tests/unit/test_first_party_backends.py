"""The advice a model whose backend is not installed gets names the right distribution:
:data:`tritonx._runtime.plugins.FIRST_PARTY_BACKENDS` matches what ``plugins/*`` provide, and
``tritonx check`` says it (or that tritonx has no plugin for that backend)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tritonx._runtime.plugins import FIRST_PARTY_BACKENDS, collect, make_plugin_manager

ROOT = Path(__file__).resolve().parents[2]


def test_the_table_matches_the_plugin_distributions() -> None:
    """Each installed first-party plugin's backends, by the plugin's own registration."""
    registries = collect(make_plugin_manager())
    owners = registries.backends.owners  # backend name -> entry-point name
    points = {ep.name: ep for ep in importlib.metadata.entry_points(group="tritonx")}
    provided: dict[str, tuple[str, str]] = {}
    for folder in sorted((ROOT / "plugins").glob("backend_*")):
        project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        for entry_point in project.get("entry-points", {}).get("tritonx", {}):
            assert entry_point in points, f"{project['name']} is not installed"
            for backend, owner in owners.items():
                if owner == entry_point:
                    provided[backend] = (project["name"], f"plugins/{folder.name}")
    assert provided == FIRST_PARTY_BACKENDS


def write_model(root: Path, name: str, backend: str) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "{backend}"\n'
        'input [{ name: "x" data_type: TYPE_FP32 dims: [1] }]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [1] }]\n'
    )


def test_check_names_the_distribution_or_says_there_is_none(tmp_path: Path) -> None:
    write_model(tmp_path, "onnx_model", "onnxruntime")
    write_model(tmp_path, "llm", "vllm")
    done = subprocess.run(
        [sys.executable, "-m", "tritonx", "check", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TRITONX_PLUGINS": "backend_python"},
    )
    text = " ".join(done.stderr.split())
    assert (
        "names backend 'onnxruntime', which no installed tritonx plugin provides: install "
        "tritonx-backend-onnx (nothing is published to a package index yet: from a checkout "
        "of tritonx, pip install ./core ./plugins/backend_onnx)" in text
    ), done.stderr
    assert "tritonx has no plugin for backend 'vllm'" in text, done.stderr
    assert done.returncode != 0
