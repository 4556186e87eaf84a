"""Building the plugin manager, and the typed facade the core calls hooks through."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

import pluggy

import tritonx.hookspecs as hookspecs
from tritonx.errors import PluginError
from tritonx.registry import (
    BackendRegistry,
    CacheRegistry,
    FrontendRegistry,
    MetricSinkRegistry,
    Registry,
    RepoAgentRegistry,
    RepositoryRegistry,
)

ENTRY_POINT_GROUP = "tritonx"
#: Core features written as plugins, registered like third-party ones.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "tritonx.builtin.local_repository",
    "tritonx.builtin.local_cache",
)

#: The backends this repository's plugin distributions provide: backend name →
#: (distribution, its folder in a checkout of tritonx). What a model naming one that is not
#: installed is told to install (``tests/unit/test_first_party_backends.py`` checks it
#: against ``plugins/*``).
FIRST_PARTY_BACKENDS: dict[str, tuple[str, str]] = {
    "dali": ("tritonx-backend-dali", "plugins/backend_dali"),
    "fil": ("tritonx-backend-fil", "plugins/backend_fil"),
    "onnxruntime": ("tritonx-backend-onnx", "plugins/backend_onnx"),
    "openvino": ("tritonx-backend-openvino", "plugins/backend_openvino"),
    "python": ("tritonx-backend-python", "plugins/backend_python"),
    "pytorch": ("tritonx-backend-torch", "plugins/backend_torch"),
    "tensorflow": ("tritonx-backend-tensorflow", "plugins/backend_tensorflow"),
    "tensorrt": ("tritonx-backend-tensorrt", "plugins/backend_tensorrt"),
}


def missing_backend_advice(backend: str) -> str:
    """What to do about a model whose backend no installed plugin provides: the first-party
    distribution to install, or that none exists."""
    found = FIRST_PARTY_BACKENDS.get(backend)
    if found is None:
        return (
            f"tritonx has no plugin for backend '{backend}': install a third-party plugin "
            "that provides it (`tritonx plugins` lists what is installed) or write one "
            "(docs/examples/backend_linear)"
        )
    distribution, folder = found
    return (
        f"install {distribution} (nothing is published to a package index yet: from a "
        f"checkout of tritonx, pip install ./core ./{folder})"
    )


ENV_ONLY = "TRITONX_PLUGINS"
ENV_BLOCKED = "TRITONX_DISABLE_PLUGINS"
ENV_NO_AUTOLOAD = "TRITONX_DISABLE_PLUGIN_AUTOLOAD"
ENV_TRACE = "TRITONX_TRACE_PLUGINS"


def _env_list(name: str) -> set[str]:
    return {p.strip() for p in os.environ.get(name, "").split(",") if p.strip()}


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def make_plugin_manager(
    *,
    autoload: bool | None = None,
    only: Collection[str] | None = None,
    blocked: Collection[str] = (),
    extra: Iterable[object] = (),
) -> pluggy.PluginManager:
    """A plugin manager with the hookspecs, installed plugins and built-ins registered.

    :param autoload: load the ``tritonx`` entry points (default: unless
        ``$TRITONX_DISABLE_PLUGIN_AUTOLOAD`` is set).
    :param only: load only these entry-point names (also ``$TRITONX_PLUGINS``, comma separated).
    :param blocked: never load these (also ``$TRITONX_DISABLE_PLUGINS``).
    :param extra: plugin objects (modules, instances) to register as well.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    distributions: dict[str, importlib.metadata.Distribution] = {}
    pm.tritonx_distributions = distributions  # type: ignore[attr-defined]
    for name in set(blocked) | _env_list(ENV_BLOCKED):
        pm.set_blocked(name)
    if autoload is None:
        autoload = not _env_flag(ENV_NO_AUTOLOAD)
    wanted = set(only or ()) | _env_list(ENV_ONLY)
    if autoload:
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if wanted and ep.name not in wanted:
                continue
            if pm.is_blocked(ep.name) or pm.has_plugin(ep.name):
                continue
            try:
                plugin = ep.load()
            except Exception as exc:
                raise PluginError(
                    f"plugin '{ep.name}' ({ep.value}) failed to import: {exc}"
                ) from exc
            pm.register(plugin, name=ep.name)
            if ep.dist is not None:
                distributions[ep.name] = ep.dist
    for modname in BUILTIN_PLUGINS:
        if not pm.is_blocked(modname):
            __import__(modname)
            pm.register(sys.modules[modname], name=modname)
    for obj in extra:
        pm.register(obj)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(str(exc)) from exc
    if _env_flag(ENV_TRACE):
        pm.trace.root.setwriter(lambda s: sys.stderr.write(s))
        pm.enable_tracing()
    return pm


@dataclass
class Registries:
    """What the plugins registered, filled once at start-up by :func:`collect`."""

    backends: BackendRegistry = field(default_factory=BackendRegistry)
    repoagents: RepoAgentRegistry = field(default_factory=RepoAgentRegistry)
    caches: CacheRegistry = field(default_factory=CacheRegistry)
    metric_sinks: MetricSinkRegistry = field(default_factory=MetricSinkRegistry)
    repositories: RepositoryRegistry = field(default_factory=RepositoryRegistry)
    frontends: FrontendRegistry = field(default_factory=FrontendRegistry)


_REGISTRATION_HOOKS = {
    "tritonx_register_backends": "backends",
    "tritonx_register_repoagents": "repoagents",
    "tritonx_register_caches": "caches",
    "tritonx_register_metric_sinks": "metric_sinks",
    "tritonx_register_repositories": "repositories",
    "tritonx_register_frontends": "frontends",
}


def collect(pm: pluggy.PluginManager) -> Registries:
    """Call every registration hook once and return the filled registries.

    Each plugin's implementation is called through pluggy on its own (a hook caller limited
    to that plugin, so ``TRITONX_TRACE_PLUGINS`` shows every call) and the registries record
    which plugin added what (for duplicate errors and ``tritonx plugins``).
    """
    regs = Registries()
    plugins = pm.get_plugins()
    for hook_name, attr in _REGISTRATION_HOOKS.items():
        registry: Registry[Any] = getattr(regs, attr)
        caller = getattr(pm.hook, hook_name)
        for impl in reversed(caller.get_hookimpls()):  # registration order
            others = [p for p in plugins if p is not impl.plugin]
            registry._current_plugin = pm.get_name(impl.plugin)
            try:
                pm.subset_hook_caller(hook_name, remove_plugins=others)(registry=registry)
            finally:
                registry._current_plugin = None
    return regs


def describe_plugins(pm: pluggy.PluginManager, regs: Registries) -> list[dict[str, Any]]:
    """One dict per plugin: name, distribution, version, hooks, and what it registered."""
    dists: dict[str, importlib.metadata.Distribution] = getattr(pm, "tritonx_distributions", {})
    out: list[dict[str, Any]] = []
    for plugin in pm.get_plugins():
        name = pm.get_name(plugin)
        if name is None:
            continue
        hooks = sorted(h.name for h in (pm.get_hookcallers(plugin) or []))
        entry: dict[str, Any] = {"name": name, "hooks": hooks}
        if name in BUILTIN_PLUGINS:
            entry["builtin"] = True
        dist = dists.get(name)
        if dist is not None:
            entry["distribution"] = dist.metadata["Name"]
            entry["version"] = dist.version
        registered: dict[str, list[str]] = {}
        for attr in _REGISTRATION_HOOKS.values():
            registry: Registry[Any] = getattr(regs, attr)
            names = sorted(n for n, owner in registry.owners.items() if owner == name)
            if names:
                registered[attr] = names
        platforms = sorted(
            p for b in registered.get("backends", ()) for p in regs.backends.platforms_of(b)
        )
        if platforms:
            registered["platforms"] = platforms
        schemes = sorted(
            s for r in registered.get("repositories", ()) for s in regs.repositories.schemes_of(r)
        )
        if schemes:
            registered["schemes"] = schemes
        entry["registered"] = registered
        out.append(entry)
    return sorted(out, key=lambda e: e["name"])
