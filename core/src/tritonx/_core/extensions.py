"""Plugins the server instantiates from its settings: the response cache
(``--cache-config``), metric sinks (``--metric-sink``), with the sinks' export thread, and
frontends (``--frontend-config``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from tritonx._runtime.plugins import Registries
from tritonx.cache import ResponseCache
from tritonx.config import ServerSettings
from tritonx.errors import PluginError
from tritonx.frontend import COMMON_KEYS, Frontend
from tritonx.handle import ServerHandle
from tritonx.metrics import MetricSink
from tritonx.registry import Registry, T

log = logging.getLogger("tritonx.extensions")


def build_cache(
    registries: Registries, cache_config: Mapping[str, Mapping[str, str]]
) -> ResponseCache | None:
    """The cache ``--cache-config <name>,<key>=<value>`` names (None when none is given)."""
    names = [n for n in cache_config if n]
    if "" in cache_config:
        raise PluginError("--cache-config needs a cache name: --cache-config <cache>,<key>=<value>")
    if not names:
        return None
    if len(names) > 1:
        raise PluginError(  # tritonserver's text
            "found multiple cache configurations, but only a single cache is currently supported"
        )
    name = names[0]
    return _registered(registries.caches, name, "cache", "--cache-config")(cache_config[name])


def build_metric_sinks(
    registries: Registries, sink_config: Mapping[str, Mapping[str, str]]
) -> list[MetricSink]:
    """The sinks ``--metric-sink <name>[,<key>=<value>]`` names, in name order."""
    return [
        _registered(registries.metric_sinks, name, "metric sink", "--metric-sink")(
            sink_config[name]
        )
        for name in sorted(sink_config)
    ]


@dataclass(frozen=True)
class PlacedFrontend:
    """A frontend to start, and where."""

    frontend: Frontend
    address: str
    port: int


def build_frontends(
    registries: Registries, settings: ServerSettings, server: ServerHandle
) -> list[PlacedFrontend]:
    """Every frontend ``--frontend-config <name>,...`` names (installed frontends start only
    when named: two servers on one host would otherwise collide on their default ports),
    unless ``allow=false``, in name order, with its address and port; a name that is not
    installed, a key the frontend does not read or a bad value raises :class:`PluginError`."""
    config = settings.frontend_config
    if "" in config:
        raise PluginError("--frontend-config needs a frontend name: <frontend>,<key>=<value>")
    for name in config:
        _registered(registries.frontends, name, "frontend", "--frontend-config")
    out: list[PlacedFrontend] = []
    for name, cls in sorted(registries.frontends.items()):
        if name not in config:
            continue
        own = dict(config[name])
        unknown = sorted(set(own) - set(COMMON_KEYS) - set(cls.config_keys))
        if unknown:
            known = ", ".join(sorted({*COMMON_KEYS, *cls.config_keys}))
            raise PluginError(
                f"--frontend-config {name}: unknown key(s) {', '.join(unknown)} (the keys "
                f"it reads: {known})"
            )
        allow = own.pop("allow", "true").strip().lower()
        if allow not in ("true", "false", "1", "0", "on", "off", "yes", "no"):
            raise PluginError(
                f"--frontend-config {name}: allow must be true or false, got '{allow}'"
            )
        address = own.pop("address", settings.http_address)
        port_text = own.pop("port", str(cls.default_port))
        try:
            port = int(port_text)
        except ValueError:
            port = -1
        if not 0 <= port <= 65535:
            raise PluginError(
                f"--frontend-config {name}: port must be 0 to 65535, got '{port_text}'"
            )
        if allow in ("false", "0", "off", "no"):
            continue
        out.append(PlacedFrontend(cls(server, settings, own), address, port))
    return out


def _registered(registry: Registry[T], name: str, what: str, flag: str) -> type[T]:
    """The class registered as ``name``; PluginError naming what is installed otherwise."""
    cls = registry.get(name)
    if cls is None:
        known = ", ".join(registry) or "none installed"
        raise PluginError(
            f"unknown {what} '{name}' in {flag} (available: {known}); install a tritonx "
            "plugin that provides it"
        )
    return cls


class SinkExporter:
    """Calls every sink's ``export(registry)`` every ``interval_s`` from one daemon thread,
    and once more at :meth:`stop`."""

    def __init__(
        self, sinks: Sequence[MetricSink], registry: CollectorRegistry, interval_s: float
    ) -> None:
        self.sinks = list(sinks)
        self.registry = registry
        self.interval_s = max(interval_s, 0.01)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self.sinks:
            return
        self._thread = threading.Thread(target=self._run, name="tritonx-metric-sinks", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.export_once()

    def export_once(self) -> None:
        for sink in self.sinks:
            try:
                sink.export(self.registry)
            except Exception:
                log.exception("metric sink '%s' failed to export", sink.name)

    def stop(self) -> None:
        """Stop the thread after a last export."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5)
        self._thread = None
        self.export_once()
