"""Plugin discovery through real entry points: two small distributions are written to a
folder on PYTHONPATH (a module and its ``*.dist-info`` with ``entry_points.txt``), and the
real ``tritonx`` command is run against them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pluggy
import pytest

import tritonx
from tritonx._runtime.plugins import collect, describe_plugins, make_plugin_manager
from tritonx.errors import PluginError

PLUGIN = """
import tritonx

@tritonx.hookimpl
def tritonx_register_backends(registry):
    class B(tritonx.Backend):
        name = "{backend}"
        platforms = ("{backend}_platform",)
        def load(self, ctx):
            raise NotImplementedError
    B.__module__ = __name__
    registry.add(B)
"""


def write_dist(site: Path, dist: str, module: str, body: str) -> None:
    (site / f"{module}.py").write_text(textwrap.dedent(body))
    info = site / f"{dist.replace('-', '_')}-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(f"[tritonx]\n{module} = {module}\n")
    (info / "top_level.txt").write_text(module + "\n")
    (info / "RECORD").write_text("")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    write_dist(site, "tritonx-backend-alpha", "backend_alpha", PLUGIN.format(backend="alpha"))
    write_dist(site, "tritonx-backend-beta", "backend_beta", PLUGIN.format(backend="beta"))
    return site


def run_cli(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
    environ["PYTHONPATH"] = str(site)
    environ["TRITONX_PLUGINS"] = env.pop("TRITONX_PLUGINS", "backend_alpha,backend_beta")
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-m", "tritonx", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
    )


def names(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    return [p["name"] for p in json.loads(result.stdout)]


def test_plugins_json_lists_distribution_version_and_registrations(site: Path) -> None:
    result = run_cli(site, "plugins")
    data = {p["name"]: p for p in json.loads(result.stdout)}
    alpha = data["backend_alpha"]
    assert alpha["distribution"] == "tritonx-backend-alpha" and alpha["version"] == "1.2.3"
    assert alpha["hooks"] == ["tritonx_register_backends"]
    assert alpha["registered"] == {"backends": ["alpha"], "platforms": ["alpha_platform"]}


def test_env_switches(site: Path) -> None:
    assert names(run_cli(site, "plugins", TRITONX_PLUGINS="backend_beta")) == ["backend_beta"]
    assert names(run_cli(site, "plugins", TRITONX_DISABLE_PLUGINS="backend_alpha")) == [
        "backend_beta"
    ]
    assert names(run_cli(site, "plugins", TRITONX_DISABLE_PLUGIN_AUTOLOAD="1")) == []


def test_registration_hooks_go_through_pluggy(site: Path) -> None:
    """Each plugin's registration call is a pluggy hook call, so tracing shows it."""
    result = run_cli(site, "plugins", TRITONX_TRACE_PLUGINS="1")
    assert result.returncode == 0, result.stderr
    calls = [line for line in result.stderr.splitlines() if "tritonx_register_backends" in line]
    assert len(calls) >= 2, result.stderr  # one call per plugin that implements the hook
    assert "tritonx_register_repositories" in result.stderr  # the built-in local repository


def test_plugins_all_lists_the_builtin_local_repository(site: Path) -> None:
    data = {p["name"]: p for p in json.loads(run_cli(site, "plugins", "--all").stdout)}
    local = data["tritonx.builtin.local_repository"]
    assert local["builtin"] is True
    assert local["registered"] == {"repositories": ["local"], "schemes": ["", "file"]}
    assert "tritonx.builtin.local_repository" not in names(run_cli(site, "plugins"))


def test_duplicate_backend_name_names_both_distributions(site: Path) -> None:
    write_dist(site, "tritonx-backend-gamma", "backend_gamma", PLUGIN.format(backend="alpha"))
    result = run_cli(site, "plugins", TRITONX_PLUGINS="backend_alpha,backend_gamma")
    assert result.returncode != 0
    assert "duplicate backend name 'alpha'" in result.stderr
    assert "tritonx-backend-alpha" in result.stderr and "tritonx-backend-gamma" in result.stderr


def test_server_refuses_to_start_with_duplicates(site: Path, tmp_path: Path) -> None:
    write_dist(site, "tritonx-backend-gamma", "backend_gamma", PLUGIN.format(backend="alpha"))
    (tmp_path / "empty").mkdir()
    result = run_cli(
        site,
        "serve",
        "--model-repository",
        str(tmp_path / "empty"),
        "--allow-http=false",
        "--allow-grpc=false",
        "--allow-metrics=false",
        TRITONX_PLUGINS="backend_alpha,backend_gamma",
    )
    assert result.returncode == 1
    assert (
        "error: creating server" in result.stderr
        and "duplicate backend name 'alpha'" in result.stderr
    )


def test_unknown_plugin_name_loads_nothing(site: Path) -> None:
    # (the core installed alone listing no plugins is checked in .ci/run, in a separate venv)
    result = run_cli(site, "plugins", TRITONX_PLUGINS="no_such_plugin")
    assert names(result) == []


def test_unknown_hook_fails_check_pending() -> None:
    class Typo:
        @tritonx.hookimpl
        def tritonx_register_backend(self, registry: object) -> None:  # missing "s"
            pass

    with pytest.raises(PluginError, match="tritonx_register_backend"):
        make_plugin_manager(autoload=False, extra=[Typo()])


def test_registry_rejects_non_backend_classes() -> None:
    class NotABackend:
        name = "x"

    class Bad:
        @tritonx.hookimpl
        def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
            registry.add(NotABackend)  # type: ignore[arg-type]

    pm = make_plugin_manager(autoload=False, extra=[Bad()])
    with pytest.raises(PluginError, match="not a subclass of Backend"):
        collect(pm)


def test_register_plugin_fixture_and_describe(
    plugin_manager: pluggy.PluginManager, register_plugin: object
) -> None:
    class Sink(tritonx.MetricSink):
        name = "sink"

    class P:
        @tritonx.hookimpl
        def tritonx_register_metric_sinks(self, registry: tritonx.MetricSinkRegistry) -> None:
            registry.add(Sink)

    register_plugin(P(), "p")  # type: ignore[operator]
    described = {d["name"]: d for d in describe_plugins(plugin_manager, collect(plugin_manager))}
    assert described["p"]["registered"] == {"metric_sinks": ["sink"]}


def test_first_party_entry_points_import_no_framework() -> None:
    """Importing every installed first-party plugin's entry point imports no framework."""
    import importlib.metadata

    modules = [ep.value for ep in importlib.metadata.entry_points(group="tritonx")]
    if not modules:
        pytest.skip("no tritonx plugins installed")
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps([m for m in ('torch', 'onnxruntime', 'tensorrt', 'openvino', 'onnx') if m in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
