"""Per-model requirements (``requirements.txt`` / ``TRITONX_REQUIREMENTS``): real installs from
PyPI with uv into a cache folder per test (uv keeps its own cache, so re-installs are quick).

``six`` is the package: tiny, pure Python, with ``__version__``; the server's environment has
1.17.0, the models pin 1.16.0 and 1.17.0, so a model that reports 1.16.0 (from a file in the
cache) proves its environment comes before the server's packages.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import six

from tritonx import InferenceRequest, Server
from tritonx.config import ServerSettings
from tritonx.errors import Code
from tritonx.testing import ModelRepositoryBuilder, loopback_settings, model_status
from tritonx.types import ModelState
from tritonx_backend_python.environment import EnvironmentCache, Installer, trim_output
from tritonx_backend_python.process import WorkerEnv, forkable
from tritonx_backend_python.worker import auto_complete_in_worker

MODELS = Path(__file__).parent / "models"
SIX_MODEL = (MODELS / "six_version.py").read_text()
IO: dict[str, Any] = {"inputs": [("IN", "BYTES", [1])], "outputs": [("INFO", "BYTES", [1])]}
OLD, NEW = "1.16.0", "1.17.0"
#: a requirement no installer can satisfy
BROKEN = "six==99.0"
#: the auto-complete model: max_batch_size = six's minor version (1.16.0 -> 16)
AUTO_COMPLETE = (
    SIX_MODEL
    + """

    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        config = auto_complete_model_config.as_dict()
        if not config["input"]:
            auto_complete_model_config.add_input(
                {"name": "IN", "data_type": "TYPE_STRING", "dims": [1]}
            )
        if not config["output"]:
            auto_complete_model_config.add_output(
                {"name": "INFO", "data_type": "TYPE_STRING", "dims": [1]}
            )
        auto_complete_model_config.set_max_batch_size(int(six.__version__.split(".")[1]))
        return auto_complete_model_config
"""
)


@pytest.fixture(scope="module")
def pypi(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip when the installer cannot resolve the two versions of six (no index reachable)."""
    installer = Installer.find()
    if installer.program is None:
        pytest.skip("uv is not installed")
    target = tmp_path_factory.mktemp("dry-run")
    for version in (OLD, NEW):
        done = subprocess.run(
            [installer.program, "pip", "install", "--dry-run", "--target", str(target),
             f"six=={version}", "--python", sys.executable],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"PyPI cannot be reached: {done.stderr.strip()[-300:]}")


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    return ("backend_python",)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """This test's environment cache (not created: the first build makes it)."""
    return tmp_path / "envs"


def settings(repo: ModelRepositoryBuilder, cache: Path, **python: str) -> ServerSettings:
    """No listeners; the python backend's environments cached in ``cache``."""
    return loopback_settings(
        repo.root,
        backend_config={"python": {"requirements-cache-dir": str(cache), **python}},
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )


def add_six(
    repo: ModelRepositoryBuilder,
    name: str,
    requirements: str | None,
    parameters: dict[str, str] | None = None,
    **kw: Any,
) -> Path:
    """A model reporting its ``six``; ``requirements`` goes to its folder's requirements.txt."""
    folder = repo.add(
        name,
        backend="python",
        parameters=parameters,
        versions={1: {"model.py": SIX_MODEL}},
        **{**IO, **kw},
    )
    if requirements is not None:
        (folder / "requirements.txt").write_text(requirements)
    return folder


async def info(server: Server, model: str) -> dict[str, Any]:
    response = await server.infer(InferenceRequest(model, {"IN": np.array([b"x"], dtype=object)}))
    result: dict[str, Any] = json.loads(response.outputs["INFO"][0])
    return result


def messages(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def check(
    repo: ModelRepositoryBuilder, cache: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """``tritonx check`` in a subprocess, with this test's cache."""
    return subprocess.run(
        [sys.executable, "-m", "tritonx", "check", *args,
         "--backend-config", f"python,requirements-cache-dir={cache}", str(repo.root)],
        # COLUMNS pinned: the table is as wide as the terminal, and an inherited narrow one
        # would cut the cells this test reads
        env={**os.environ, "TRITONX_PLUGINS": "backend_python", "COLUMNS": "500"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def check_json(repo: ModelRepositoryBuilder, cache: Path) -> dict[str, dict[str, Any]]:
    result = check(repo, cache, "--json")
    return {m["name"]: m for m in json.loads(result.stdout)}


@pytest.mark.usefixtures("pypi")
async def test_pinned_versions_side_by_side_cached_on_restart_broken_alone(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: Any,
    cache: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The issue's done-when: two models pinning different versions of six serve side by
    side; the second start reuses both environments (log, ``tritonx check``); a model whose
    requirement cannot be installed fails alone, with the installer's message, and is built
    again at the next start."""
    caplog.set_level(logging.INFO, logger="tritonx.backend.python")
    add_six(model_repository, "six_old", f"six=={OLD}\n")
    new = add_six(
        model_repository,
        "six_new",
        None,
        {"TRITONX_REQUIREMENTS": "$$TRITON_MODEL_DIRECTORY/deps/requirements.txt"},
    )
    (new / "deps").mkdir()
    (new / "deps" / "requirements.txt").write_text(f"six=={NEW}\n")
    add_six(model_repository, "broken", f"{BROKEN}\n")
    add_six(model_repository, "plain", None)
    assert six.__version__ == NEW  # the server's own six

    async with Server(settings(model_repository, cache), plugin_manager=plugin_manager) as server:
        old_info, new_info = await info(server, "six_old"), await info(server, "six_new")
        assert old_info["version"] == OLD and new_info["version"] == NEW
        for found in (old_info, new_info):
            assert Path(found["six"]).is_relative_to(cache)  # not the server's six
            assert Path(found["path0"]).is_relative_to(cache)  # the env comes first
            assert found["executable"] == sys.executable  # the server's interpreter
            assert found["numpy"] == np.__file__  # its packages stay behind the env
            # none of six's modules is in the forkserver: the worker was forked from it (a
            # cached environment loads as fast as no environment), not a fresh interpreter
            assert found["ppid"] != os.getpid()
        assert Path(old_info["six"]).parent != Path(new_info["six"]).parent
        assert (await info(server, "plain"))["six"] == six.__file__
        state, reason = model_status(server, "broken")
        assert state == ModelState.UNAVAILABLE
        assert reason.startswith(
            f"{Code.INTERNAL.label}: python model 'broken': installing its requirements"
        )
        assert "uv pip install exited with code" in reason
        assert f"no version of {BROKEN}" in reason  # the installer's line naming it
    assert len(messages(caplog, "building its environment from")) == 3
    assert len(messages(caplog, "environment built in")) == 2
    assert len(list(cache.glob("*.failed"))) == 1
    assert not list(cache.glob("*.tmp-*"))  # the failed build's folder is gone

    out = check_json(model_repository, cache)
    assert out["six_old"]["notes"]["environment"] == f"cached ({Path(old_info['six']).parent})"
    assert out["six_new"]["notes"]["environment"].startswith("cached (")
    # its last build failed: check resolves it again (a dry run), and fails it
    assert out["broken"]["status"] == "ERROR"
    assert f"no version of {BROKEN}" in out["broken"]["error"]
    assert out["plain"]["notes"] == {}
    table = check(model_repository, cache)
    assert table.returncode == 1, table.stdout + table.stderr
    header = [c.strip() for c in table.stdout.splitlines()[1].split("|")[1:-1]]
    assert header[-1] == "Notes"
    assert "environment: cached (" in table.stdout

    caplog.clear()
    async with Server(settings(model_repository, cache), plugin_manager=plugin_manager) as server:
        assert (await info(server, "six_old"))["version"] == OLD
        assert (await info(server, "six_new"))["version"] == NEW
        assert model_status(server, "broken")[0] == ModelState.UNAVAILABLE
    cached = messages(caplog, "using the cached environment")
    assert any("'six_old'" in m for m in cached) and any("'six_new'" in m for m in cached)
    # only the failed one is built again: a failure is not cached
    assert [m.split("'")[1] for m in messages(caplog, "building its environment")] == ["broken"]


@pytest.mark.usefixtures("pypi")
async def test_same_requirements_build_once_leftovers_ignored(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: Any,
    cache: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two models (two instances each) with the same requirements load at once: one build,
    all four instances use it; a killed build's half-built folder is removed, never used."""
    caplog.set_level(logging.INFO, logger="tritonx.backend.python")
    requirements = f"six=={OLD}\n"
    for name in ("twin_a", "twin_b"):
        add_six(
            model_repository,
            name,
            requirements,
            extra="instance_group [ { count: 2, kind: KIND_CPU } ]\n",
        )
    twin_a = model_repository.root / "twin_a"
    key = EnvironmentCache(cache).status(twin_a / "requirements.txt", twin_a, "twin_a").key
    half = cache / f"{key}.tmp-1-killed"
    half.mkdir(parents=True)
    (half / "six.py").write_text("raise ImportError('half-built')\n")

    async with Server(settings(model_repository, cache), plugin_manager=plugin_manager) as server:
        a, b = await info(server, "twin_a"), await info(server, "twin_b")
    assert a["version"] == b["version"] == OLD
    assert a["six"] == b["six"] == str(cache / key / "six.py")
    assert len(messages(caplog, "building its environment")) == 1
    assert len(messages(caplog, "using the cached environment")) == 3
    assert not half.exists()


@pytest.mark.usefixtures("pypi")
def test_concurrent_builds_of_one_hash(
    cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Threads building the same environment at once (each holds its own lock file
    descriptor, as two servers would): one installs, the others wait and reuse it."""
    caplog.set_level(logging.INFO, logger="tritonx.backend.python")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"six=={OLD}\n# concurrent\n")
    environments = EnvironmentCache(cache)
    start = threading.Barrier(4)
    built: list[Path] = []
    errors: list[BaseException] = []

    def build(index: int) -> None:
        start.wait()
        try:
            built.append(environments.ensure(requirements, f"m{index}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(set(built)) == 1 and (built[0] / "six.py").is_file()
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [built[0].name, f"{built[0].name}.lock"]
    )
    assert environments.status(requirements).state == "cached"
    assert len(messages(caplog, "building its environment")) == 1
    assert len(messages(caplog, "using the cached environment")) == 3


@pytest.mark.usefixtures("pypi")
async def test_auto_complete_runs_in_the_environment(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, cache: Path, tmp_path: Path
) -> None:
    """A model without config.pbtxt whose model.py imports six at the top: its
    auto_complete_config runs with the model's six (max_batch_size 16), at load and in
    ``tritonx check`` once cached; before that, check builds nothing and says so."""
    folder = model_repository.add(
        "auto", write_config=False, versions={1: {"model.py": AUTO_COMPLETE}}
    )
    (folder / "requirements.txt").write_text(f"six=={OLD}\n# auto\n")

    before = check_json(model_repository, cache)["auto"]
    assert before["notes"]["environment"].startswith("to build at load (")
    assert before["config"]["max_batch_size"] == 17  # ran with the server's six
    assert not cache.exists()  # check built nothing

    async with Server(settings(model_repository, cache), plugin_manager=plugin_manager) as server:
        assert server.model_config("auto").max_batch_size == 16
        response = await server.infer(
            InferenceRequest("auto", {"IN": np.array([[b"x"]], dtype=object)})
        )
        assert json.loads(response.outputs["INFO"][0][0])["version"] == OLD

    after = check_json(model_repository, cache)["auto"]
    assert after["notes"]["environment"].startswith("cached (")
    assert after["config"]["max_batch_size"] == 16

    # a model.py that cannot even be imported without its environment: check says why
    other = ModelRepositoryBuilder(tmp_path / "other")
    folder = other.add(
        "needs_env",
        write_config=False,
        versions={1: {"model.py": "import tritonx_no_such_package\n" + AUTO_COMPLETE}},
    )
    (folder / "requirements.txt").write_text("six==1.15.0\n")  # not cached (check builds none)
    result = check(other, cache, "--json")
    assert result.returncode == 1
    error = json.loads(result.stdout)[0]["error"]
    assert "No module named 'tritonx_no_such_package'" in error
    assert "auto-complete ran without the model's environment from" in error
    assert "which is to build: `tritonx check` builds nothing" in error


async def test_refused_requirements(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, cache: Path, tmp_path: Path
) -> None:
    """Requirements outside the model's folder (a config may come from a client), a missing
    file, an in-process model with requirements, and requirements beside an
    EXECUTION_ENV_PATH are refused with INVALID_ARG, at load and by ``tritonx check``;
    nothing is built."""
    outside = tmp_path / "outside.txt"
    outside.write_text(f"six=={OLD}\n")
    param = "TRITONX_REQUIREMENTS"
    add_six(model_repository, "escape", None, {param: "../../outside.txt"})
    add_six(model_repository, "absolute", None, {param: str(outside)})
    link = add_six(model_repository, "link", None, {param: "deps.txt"})
    (link / "deps.txt").symlink_to(outside)
    add_six(model_repository, "missing", None, {param: "nope.txt"})
    add_six(model_repository, "inproc", f"six=={OLD}\n", {"TRITONX_EXECUTION_MODE": "in_process"})
    add_six(model_repository, "both", None, {param: "r.txt", "EXECUTION_ENV_PATH": sys.prefix})
    (model_repository.root / "both" / "r.txt").write_text(f"six=={OLD}\n")

    async with Server(settings(model_repository, cache), plugin_manager=plugin_manager) as server:
        reasons = {}
        for name in ("escape", "absolute", "link", "missing", "inproc", "both"):
            state, reasons[name] = model_status(server, name)
            assert state == ModelState.UNAVAILABLE, name
    for name, reason in reasons.items():
        assert reason.startswith(f"{Code.INVALID_ARG.label}: "), name
    inside = "must name a file inside the model's folder"
    assert inside in reasons["escape"] and "'../../outside.txt'" in reasons["escape"]
    assert inside in reasons["absolute"] and inside in reasons["link"]
    assert f"parameter {param} of python model 'missing' names no file" in reasons["missing"]
    assert (
        "python model 'inproc' has its own requirements (requirements.txt) and "
        "TRITONX_EXECUTION_MODE 'in_process': a model running in the server's process cannot "
        "have packages of its own"
    ) in reasons["inproc"]
    assert "gives both EXECUTION_ENV_PATH" in reasons["both"]
    assert not cache.exists()

    result = check(model_repository, cache, "--json")
    assert result.returncode == 1
    out = {m["name"]: m for m in json.loads(result.stdout)}
    for name in ("escape", "absolute", "link", "missing", "inproc", "both"):
        assert out[name]["status"] == "ERROR" and out[name]["error"] in reasons[name], name


@pytest.mark.usefixtures("pypi")
async def test_default_in_process_gives_way_to_requirements(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, cache: Path
) -> None:
    """With ``execution-mode=in_process`` for the whole server, a model with requirements
    still runs in a worker with its environment (as one with EXECUTION_ENV_PATH does); the
    others run in the server's process."""
    add_six(model_repository, "own", f"six=={OLD}\n")
    add_six(model_repository, "shared", None)
    python = {"execution-mode": "in_process"}
    async with Server(
        settings(model_repository, cache, **python), plugin_manager=plugin_manager
    ) as server:
        own, shared = await info(server, "own"), await info(server, "shared")
    assert own["version"] == OLD and own["pid"] != os.getpid()
    assert shared["six"] == six.__file__ and shared["pid"] == os.getpid()


async def test_execution_env_path_leaves_requirements_txt_alone(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: Any,
    cache: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A model with its own EXECUTION_ENV_PATH (here the server's own environment) runs in it:
    a requirements.txt in its folder (Triton model folders may carry one) is not installed,
    and the log says so."""
    caplog.set_level(logging.INFO, logger="tritonx.backend.python")
    add_six(model_repository, "env", f"six=={OLD}\n", {"EXECUTION_ENV_PATH": sys.prefix})
    async with Server(settings(model_repository, cache), plugin_manager=plugin_manager) as server:
        assert (await info(server, "env"))["version"] == NEW
    assert messages(caplog, "requirements.txt is not installed: the model runs in its own")
    assert not cache.exists()


def test_worker_site_dir_comes_first_with_its_pth_files(tmp_path: Path) -> None:
    """The start of a worker with a folder of packages: the folder is first on sys.path, its
    .pth files are read (a path they add comes before the server's packages too), and the
    worker has not imported the server (tritonx) to run the stub."""
    site_dir, extra = tmp_path / "site", tmp_path / "extra"
    site_dir.mkdir()
    extra.mkdir()
    (site_dir / "six.py").write_text("__version__ = '0.0.site'\n")
    (site_dir / "extra.pth").write_text(f"{extra}\n")
    (extra / "iniconfig.py").write_text("VALUE = 7\n")  # the server has pytest's iniconfig
    model = tmp_path / "model.py"
    model.write_text(
        """import sys

import iniconfig
import six


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        facts = [six.__version__.replace(".", "_"), iniconfig.VALUE, "tritonx" in sys.modules]
        config.add_input({"name": "_".join(map(str, facts)), "data_type": "TYPE_FP32", "dims": [1]})
        config.add_input({"name": "P0_" + sys.path[0].replace("/", "_"), "data_type": "TYPE_FP32", "dims": [1]})
        return config
"""
    )
    config = {"name": "m", "backend": "python", "input": [], "output": []}
    completed = auto_complete_in_worker(model, config, WorkerEnv(site_dir=str(site_dir)), 30)
    names = [i["name"] for i in completed["input"]]
    assert names == ["0_0_site_7_False", "P0_" + str(site_dir).replace("/", "_")]


def test_installer_output_trimmed() -> None:
    """A long installer output keeps its first and last lines (the last name the requirement
    that failed), and says how many it left out."""
    text = "\n".join(f"line {i}" for i in range(100)) + "\n\n"
    lines = trim_output(text).splitlines()
    assert len(lines) == 31
    assert lines[:6] == [f"line {i}" for i in range(6)]
    assert lines[6] == "... (70 lines left out)"
    assert lines[-1] == "line 99"
    assert trim_output("error: one\n\n  cause: two\n") == "error: one\n  cause: two"


def test_which_environments_are_forked(tmp_path: Path) -> None:
    """A worker is forked from the forkserver, its model's packages layered first, unless a
    package of the folder is one the forkserver imported already (numpy, the standard
    library's) or the folder has .pth files: those start a fresh interpreter."""

    def folder(name: str, *files: str) -> str:
        path = tmp_path / name
        path.mkdir()
        for file in files:
            (path / file).parent.mkdir(parents=True, exist_ok=True)
            (path / file).write_text("")
        return str(path)

    assert forkable(folder("pure", "six.py", "attrs/__init__.py", "attrs-1.0.dist-info/RECORD"))
    assert forkable(folder("ext", "fastthing.cpython-311-x86_64-linux-gnu.so"))
    assert not forkable(folder("numpy", "numpy/__init__.py"))  # the forkserver has numpy
    assert not forkable(folder("stdlib", "json.py"))  # shadows the standard library's
    assert not forkable(folder("pth", "six.py", "hook.pth"))
