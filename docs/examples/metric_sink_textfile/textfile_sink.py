"""``textfile``: a metric sink that writes every metric the server serves to a file, for
node_exporter's textfile collector (``--collector.textfile.directory``), and adds the
``process_*`` metrics (CPU seconds, resident memory, open files) to ``/metrics``.

``tritonx serve --metric-sink textfile,path=/var/lib/node_exporter/tritonx.prom`` replaces the
file (atomically) every ``--metrics-interval-ms`` and once more at shutdown. A
:class:`tritonx.MetricSink` example.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import ProcessCollector, write_to_textfile
from prometheus_client.registry import Collector, CollectorRegistry

import tritonx
from tritonx.errors import invalid_arg


@tritonx.hookimpl
def tritonx_register_metric_sinks(registry: tritonx.MetricSinkRegistry) -> None:
    """Register the ``textfile`` sink."""
    registry.add(TextfileSink)


class TextfileSink(tritonx.MetricSink):
    name = "textfile"

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.path = self.config.get("path", "")
        if not self.path.endswith(".prom"):
            raise invalid_arg(
                "--metric-sink textfile needs path=<file>.prom (the textfile collector reads "
                f"only *.prom files), got '{self.path}'"
            )

    def collectors(self) -> Iterable[Collector]:
        return [ProcessCollector(registry=None)]

    def export(self, registry: CollectorRegistry) -> None:
        """Called from the sinks' thread; the file is replaced whole (write, then rename)."""
        write_to_textfile(self.path, registry)
