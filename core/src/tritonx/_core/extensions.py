"""Plugins the server instantiates from its settings: the response cache
(``--cache-config``) and metric sinks (``--metric-sink``), with the sinks' export thread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry

from tritonx.cache import ResponseCache
from tritonx.errors import PluginError
from tritonx.metrics import MetricSink
from tritonx.plugins import Registries
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
        raise PluginError(
            f"--cache-config names {len(names)} caches ({', '.join(sorted(names))}); "
            "only one response cache can be used"
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
