"""Metric sinks: plugins that add metric sources or push snapshots elsewhere.

The core serves its own metrics (Triton's ``nv_*`` names) on ``--metrics-port``; a sink never
sits on the request path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar

from prometheus_client.registry import Collector, CollectorRegistry


class MetricSink:
    """Adds collectors to the server's registry and/or exports it periodically.

    :cvar name: the sink's name.

    A complete example: ``docs/examples/metric_sink_textfile`` (metrics written to a file).
    """

    name: ClassVar[str]

    def __init__(self, config: Mapping[str, str]) -> None:
        """``config`` holds this sink's settings."""
        self.config = dict(config)

    def collectors(self) -> Iterable[Collector]:
        """Extra metric sources to serve on ``/metrics`` (e.g. device metrics)."""
        return ()

    def export(self, registry: CollectorRegistry) -> None:
        """Push a snapshot of ``registry`` somewhere; called periodically from a thread."""


__all__ = [
    "MetricSink",
]
