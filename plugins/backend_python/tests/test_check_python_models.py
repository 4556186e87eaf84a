"""``tritonx check`` on python models: it resolves each model's ``requirements.txt`` (a dry run
of the installer: nothing is installed, the cache is not created) and imports each
``model.py`` in a throw-away worker (``initialize`` is not run); a requirement that cannot be
installed, an unreachable index, a ``model.py`` whose import fails are ERROR rows and exit 1.
The load error of a model whose import fails, in its requirements' environment, says so.

Real ``python -m tritonx check`` in a subprocess; the resolutions ask PyPI (skipped without it,
as ``test_requirements``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tritonx import Server
from tritonx.testing import ModelRepositoryBuilder, loopback_settings, model_status
from tritonx.types import ModelState
from tritonx_backend_python.environment import Installer

MODELS = Path(__file__).parent / "models"
ADD_SUB = (MODELS / "add_sub.py").read_text()
IO: dict[str, Any] = {
    "inputs": [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
    "outputs": [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
}
#: a package no index has
MISSING = "tritonx-no-such-package-47"


@pytest.fixture(scope="module")
def pypi(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip when the installer cannot resolve from PyPI (no index reachable)."""
    installer = Installer.find()
    if installer.program is None:
        pytest.skip("uv is not installed")
    done = subprocess.run(
        [installer.program, "pip", "install", "--dry-run", "--target",
         str(tmp_path_factory.mktemp("dry-run")), "six==1.16.0", "--python", sys.executable],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"PyPI cannot be reached: {done.stderr.strip()[-300:]}")


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    return ("backend_python",)


def add(repo: ModelRepositoryBuilder, name: str, source: str, requirements: str = "") -> Path:
    folder = repo.add(name, backend="python", versions={1: {"model.py": source}}, **IO)
    if requirements:
        (folder / "requirements.txt").write_text(requirements)
    return folder


def check(
    repo: ModelRepositoryBuilder, cache: Path, *config: str
) -> subprocess.CompletedProcess[str]:
    """``tritonx check --json`` in a subprocess, with ``cache`` as the environment cache."""
    options = [f"--backend-config=python,{c}" for c in (f"requirements-cache-dir={cache}", *config)]
    return subprocess.run(
        [sys.executable, "-m", "tritonx", "check", "--json", *options, str(repo.root)],
        env={**os.environ, "TRITONX_PLUGINS": "backend_python"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def rows(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in json.loads(result.stdout)}


def test_import_failures_are_errors(tmp_path: Path) -> None:
    """ModuleNotFoundError, ImportError and SyntaxError at import: ERROR rows, exit 1; the
    model's ``initialize`` is not run; a good model alone: exit 0."""
    repo = ModelRepositoryBuilder(tmp_path / "repo")
    add(repo, "good", ADD_SUB.replace("def initialize(self, args):", "def initialize(self, args):\n        raise RuntimeError('initialize ran')", 1))  # fmt: skip
    add(repo, "missing_module", "import tritonx_no_such_module_47\n" + ADD_SUB)
    add(repo, "import_error", "raise ImportError('libfoo.so: cannot open shared object')\n")
    add(repo, "syntax_error", ADD_SUB + "\ndef broken(:\n")
    result = check(repo, tmp_path / "envs")
    assert result.returncode == 1, result.stderr
    out = rows(result)
    assert out["good"]["status"] == "OK", out["good"]
    assert out["missing_module"]["status"] == "ERROR"
    assert (
        "ModuleNotFoundError: No module named 'tritonx_no_such_module_47'"
        in (out["missing_module"]["error"])
    )
    assert "ImportError: libfoo.so: cannot open shared object" in out["import_error"]["error"]
    assert "SyntaxError: " in out["syntax_error"]["error"]

    alone = ModelRepositoryBuilder(tmp_path / "alone")
    add(alone, "good", ADD_SUB)
    result = check(alone, tmp_path / "envs")
    assert result.returncode == 0, result.stdout + result.stderr
    assert rows(result)["good"]["status"] == "OK"


def test_unreachable_index_is_an_error(tmp_path: Path) -> None:
    """A requirements file whose (allowed) index cannot be reached: an ERROR row saying what
    the installer said, not OK; nothing is built."""
    index = "http://127.0.0.1:9/simple"
    repo = ModelRepositoryBuilder(tmp_path / "repo")
    add(repo, "offline", ADD_SUB, f"--index-url {index}\n{MISSING}\n")
    result = check(repo, tmp_path / "envs", f"requirements-index-urls={index}")
    assert result.returncode == 1, result.stdout + result.stderr
    row = rows(result)["offline"]
    assert row["status"] == "ERROR"
    assert "python model 'offline': resolving its requirements" in row["error"]
    assert "uv pip install --dry-run exited with code" in row["error"]
    assert not (tmp_path / "envs").exists() or not any((tmp_path / "envs").iterdir())


@pytest.mark.usefixtures("pypi")
def test_unresolvable_requirements_are_errors(tmp_path: Path) -> None:
    """A requirement no index has: ERROR with the installer's message, exit 1; a model whose
    requirements resolve stays OK (exit 0) and nothing is installed."""
    repo = ModelRepositoryBuilder(tmp_path / "repo")
    add(repo, "unresolvable", ADD_SUB, f"{MISSING}==1.0\n")
    add(repo, "resolvable", "import six\n" + ADD_SUB, "six==1.16.0\n")
    # a module the environment (not built: check builds nothing) may bring: a note, not OK-ed
    add(repo, "env_module", "import tritonx_no_such_module_47\n" + ADD_SUB, "six==1.16.0\n")
    cache = tmp_path / "envs"
    result = check(repo, cache)
    assert result.returncode == 1, result.stderr
    out = rows(result)
    assert out["unresolvable"]["status"] == "ERROR"
    assert MISSING in out["unresolvable"]["error"]
    assert "uv pip install --dry-run exited with code" in out["unresolvable"]["error"]
    assert out["resolvable"]["status"] == "OK", out["resolvable"]
    assert out["resolvable"]["notes"]["environment"].startswith("to build at load (")
    assert "import" not in out["resolvable"]["notes"]
    assert out["env_module"]["status"] == "OK", out["env_module"]
    assert out["env_module"]["notes"]["import"] == (
        "not checked: ModuleNotFoundError: No module named 'tritonx_no_such_module_47' "
        "without the model's environment, which is to build at load"
    )

    (repo.root / "unresolvable" / "requirements.txt").unlink()
    result = check(repo, cache)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not cache.exists() or not any(cache.iterdir())  # check installed nothing


@pytest.mark.usefixtures("pypi")
async def test_load_error_names_the_requirements(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, tmp_path: Path
) -> None:
    """A model whose model.py imports a package its requirements.txt does not list: the load
    error says the model runs in its own environment from that file; ``tritonx check`` (the
    environment cached now: the import runs in it) says the same."""
    folder = add(
        model_repository, "unlisted", "import six\nimport tritonx_no_such_module_47\n" + ADD_SUB,
        "six==1.16.0\n",
    )  # fmt: skip
    cache = tmp_path / "envs"
    settings = loopback_settings(
        model_repository.root,
        backend_config={"python": {"requirements-cache-dir": str(cache)}},
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        state, reason = model_status(server, "unlisted")
    assert state == ModelState.UNAVAILABLE
    assert "ModuleNotFoundError: No module named 'tritonx_no_such_module_47'" in reason
    assert f"installed from {folder.resolve() / 'requirements.txt'}" in reason
    assert "check that it lists this package" in reason

    result = check(model_repository, cache)
    assert result.returncode == 1
    row = rows(result)["unlisted"]
    assert row["status"] == "ERROR"
    assert "No module named 'tritonx_no_such_module_47'" in row["error"]
    assert "check that it lists this package" in row["error"]
