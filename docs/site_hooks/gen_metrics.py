"""The metric families of ``docs/guides/metrics.md``, read from a real server's ``/metrics``.

:func:`families_table` starts an in-process :class:`tritonx.Server` with every setting that
adds families (latency summaries and histograms, a response cache in front of a model, loads
on demand with a memory budget, the event-loop watchdog, CPU metrics), scrapes its metrics
listener once and turns the ``# HELP`` / ``# TYPE`` lines and the series into a table.
:func:`gpu_table` lists the GPU families from
``tritonx._core.metrics.GPU_FAMILIES`` (they appear only where NVML finds a GPU).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import tritonx
from tritonx._core import metrics as core_metrics

#: the series of a family whose samples are written with a suffix
_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")
#: what makes each family appear (besides a loaded model version for the per-model ones): the
#: first pattern that matches the family's name wins
_CONDITIONS = (
    (r"^nv_cache_.*_summary_", "A model with the response cache on, and `summary_latencies=true`"),
    (r"^nv_cache_", "A model with `response_cache { enable: true }` and a `--cache-config` cache"),
    (r"_summary_us$", "`--metrics-config summary_latencies=true`"),
    (r"_histogram_", "`--metrics-config histogram_latencies=true`"),
    (r"_duration_us$", "Default (`--metrics-config counter_latencies=true`)"),
    (r"^nv_cpu_", "Default (`--allow-cpu-metrics=true`)"),
    (r"^nv_", "Always, for every loaded model version"),
    (r"^tritonx_event_loop_", "Default (`--event-loop-watchdog-secs` above 0)"),
    (r"^tritonx_model_memory_used_bytes$", "`--model-load-on-demand` with `--model-memory-budget`"),
    (r"^tritonx_", "`--model-load-on-demand=true`"),
)


@dataclass
class Family:
    """One metric family as the exposition writes it."""

    name: str
    kind: str = ""
    help: str = ""
    series: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)


def parse(text: str) -> list[Family]:
    """The families of a Prometheus text exposition, in order, with their series and labels."""
    families: dict[str, Family] = {}
    current: Family | None = None
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            _, what, name, rest = [*line.split(" ", 3), ""][:4]
            current = families.setdefault(name, Family(name))
            if what == "HELP":
                current.help = rest.replace("\\n", " ").replace("\\\\", "\\")
            else:
                current.kind = rest
        elif line and not line.startswith("#") and current is not None:
            match = re.match(r"([A-Za-z_:][\w:]*)(\{(.*)\})?", line)
            assert match is not None, line
            series = match.group(1)
            if series not in current.series:
                current.series.append(series)
            for label in re.findall(r'(\w+)="', match.group(3) or ""):
                if label not in current.labels:
                    current.labels.append(label)
    return list(families.values())


def _cached_repository(root: Path) -> Path:
    """A repository holding ``cached``: the example ``simple`` with the response cache on."""
    source = Path(tritonx.EXAMPLE_REPOSITORY) / "simple"
    target = root / "cached"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("README.md"))
    config = (source / "config.pbtxt").read_text().replace('name: "simple"', 'name: "cached"')
    (target / "config.pbtxt").write_text(config + "response_cache { enable: true }\n")
    return root


async def _scrape() -> tuple[str, dict[str, list[str]]]:
    """Start a server with every optional family on, and read its ``/metrics`` once; also
    the label names each family of its registry declares (a family with no series yet, as
    a per-model residency counter before any on-demand load, shows no labels on the wire)."""
    with tempfile.TemporaryDirectory() as tmp:
        server = tritonx.Server(
            model_repository=[tritonx.EXAMPLE_REPOSITORY, str(_cached_repository(Path(tmp)))],
            model_control_mode="explicit",
            load_model=("simple", "cached"),
            model_load_on_demand=True,
            model_memory_budget=1 << 30,
            cache_config={"local": {"size": str(1 << 20)}},
            metrics_config={"summary_latencies": "true", "histogram_latencies": "true"},
            allow_http=False,
            allow_grpc=False,
            metrics_address="127.0.0.1",
            metrics_port=0,
        )
        async with server:
            url = f"http://{server.metrics_url}/metrics"
            text = await asyncio.to_thread(
                lambda: urllib.request.urlopen(url, timeout=30).read().decode()
            )
            declared = {
                family.name: list(getattr(family, "_labelnames", ()))
                for family in server.metrics_registry.collect()
            }
            return text, declared


def _series(family: Family) -> str:
    """The family's series as a query names them, the first with its labels."""
    names = family.series or [family.name + ("_total" if family.kind == "counter" else "")]
    labels = [label for label in family.labels if label not in ("le", "quantile")]
    implied = {"histogram": ["le"], "summary": ["quantile"]}.get(family.kind, [])
    first = names[0] + ("{" + ",".join(labels + implied) + "}" if labels or implied else "")
    return "<br>".join(f"`{n}`" for n in [first, *names[1:]])


def _condition(name: str) -> str:
    return next(text for pattern, text in _CONDITIONS if re.search(pattern, name))


def _table(families: list[Family]) -> list[str]:
    """Markdown lines: one table per condition, in the order families are served."""
    groups: dict[str, list[Family]] = {}
    for family in families:
        groups.setdefault(_condition(family.name), []).append(family)
    lines: list[str] = []
    for condition, members in groups.items():
        lines += [f"*{condition}:*", "", "| Series | Type | Help text |", "| --- | --- | --- |"]
        lines += [
            f"| {_series(f)} | {f.kind} | {f.help.replace('|', chr(92) + '|')} |" for f in members
        ]
        lines.append("")
    return lines


def scraped_families() -> list[Family]:
    """Every family a server without a GPU serves, scraped from a real one."""
    text, declared = asyncio.run(_scrape())
    families = parse(text)
    for family in families:
        if not family.series:
            family.labels = declared.get(family.name, [])
    return families


def families_table() -> str:
    """Triton's ``nv_*`` families, then tritonx's ``tritonx_*`` ones, scraped from a real
    server, one table per setting that makes them appear."""
    families = scraped_families()
    triton = [f for f in families if f.name.startswith("nv_")]
    own = [f for f in families if not f.name.startswith("nv_")]
    parts = [
        f"### Triton's families ({len(triton)})",
        "",
        "Same names, types, labels and help texts as tritonserver.",
        "",
        *_table(triton),
        f"### tritonx's own families ({len(own)})",
        "",
        "Triton has none of these.",
        "",
        *_table(own),
    ]
    return "\n".join(parts)


def gpu_families() -> list[Family]:
    """The GPU families, from the table the metrics code renders them with."""
    return [
        Family(name, kind, help_text, [name], ["gpu_uuid"])
        for name, help_text, kind in core_metrics.GPU_FAMILIES.values()
    ]


def gpu_table() -> str:
    """The GPU families (read from the code, never scraped here: no GPU)."""
    return "\n".join(_table(gpu_families())).replace(
        "*Always, for every loaded model version:*",
        "*A GPU NVML finds, `pynvml`, `--allow-gpu-metrics=true` (GPU only, not verified):*",
    )
