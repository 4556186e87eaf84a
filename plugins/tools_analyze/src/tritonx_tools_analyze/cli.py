"""``tritonx analyze MODEL --model-repository PATH``."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, cast

import click

from tritonx_tools_analyze.report import write_outputs
from tritonx_tools_analyze.server import ServerError
from tritonx_tools_analyze.sweep import Sweep, SweepOptions

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "kib": 2**10,
    "m": 10**6,
    "mb": 10**6,
    "mib": 2**20,
    "g": 10**9,
    "gb": 10**9,
    "gib": 2**30,
}


def parse_size(text: str) -> int:
    """``500MB``, ``2GiB``, ``1048576`` -> bytes.

    :raises click.BadParameter: for anything else.
    """
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise click.BadParameter(f"'{text}' is not a size (e.g. 512MiB, 2GB, 1048576)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"'{text}' is not a comma-separated list of integers") from None
    if not levels or min(levels) < 1:
        raise click.BadParameter("concurrency levels must be integers >= 1")
    return levels


def parse_shapes(values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    out = {}
    for value in values:
        name, sep, dims = value.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or min(shape) < 1:
            raise click.BadParameter(f"'{value}' is not <input>:<dim>[,<dim>...]")
        out[name] = shape
    return out


class _Progress:
    """click's progress bar: the variant and concurrency running, time left."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.bar: Any = None
        self.label = "starting"

    def plan(self, total: int) -> None:
        if self.quiet:
            return
        self.bar = cast(Any, click.progressbar)(
            length=total,
            label="analyzing",
            show_eta=True,
            show_pos=True,
            item_show_func=self._label,
            file=sys.stderr,
        )
        self.bar.__enter__()

    def _label(self, _: object) -> str:
        return self.label

    def step(self, label: str) -> None:
        self.label = label
        if self.bar is not None:
            self.bar.update(0)
            self.bar.render_progress()

    def extra(self, steps: int) -> None:
        """More steps than planned (extra confirmation turns)."""
        if self.bar is not None:
            self.bar.length += steps

    def done(self, steps: int) -> None:
        if self.bar is not None:
            self.bar.update(steps)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


@click.command()
@click.argument("model")
@click.option(
    "--model-repository",
    "repository",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The model repository (a local folder) that holds MODEL.",
)
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where config.pbtxt, results.csv/json and report.html go [default: ./analyze-<MODEL>].",
)
@click.option(
    "--exhaustive",
    is_flag=True,
    help="Sweep the whole space (instances 1-4, batch limits, queue delays, preferred sizes, "
    "thread counts; concurrency 1-16) instead of the quick subset.",
)
@click.option(
    "--concurrency",
    "concurrency",
    default=None,
    metavar="N[,N...]",
    help="Concurrency levels [default: 1,4 quick; 1,2,4,8,16 exhaustive].",
)
@click.option(
    "--measurement-seconds",
    type=click.FloatRange(min=0.05),
    default=None,
    help="Seconds measured per point [default: 2 quick, 5 exhaustive].",
)
@click.option(
    "--warmup-seconds",
    type=click.FloatRange(min=0),
    default=0.5,
    show_default=True,
    help="Seconds of load before each measurement.",
)
@click.option(
    "--latency-budget-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Only points with p99 latency at most this count.",
)
@click.option(
    "--max-memory",
    default=None,
    metavar="SIZE",
    help="Only points whose server resident memory (with its worker processes) stays at most "
    "this (e.g. 2GiB, 500MB) count.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Batch size of each request (batching models).",
)
@click.option(
    "--shape",
    "shapes",
    multiple=True,
    metavar="INPUT:D1[,D2...]",
    help="Shape of a variable-size input, without the batch dimension (repeatable).",
)
@click.option(
    "--load-generator",
    type=click.Choice(["auto", "builtin", "perf_analyzer"]),
    default="auto",
    show_default=True,
    help="auto: perf_analyzer when found, else the built-in tritonclient one.",
)
@click.option(
    "--perf-analyzer",
    default=None,
    metavar="PATH",
    help="perf_analyzer executable [default: perf_analyzer on PATH, else "
    "./tools/perf_analyzer/run.sh when tools/perf_analyzer/setup.sh installed it].",
)
@click.option(
    "--max-variants",
    type=click.IntRange(min=1),
    default=None,
    help="Measure only the first N variants (the model's own config is the first).",
)
@click.option(
    "--server-arg",
    "server_args",
    multiple=True,
    metavar="ARG",
    help="Extra `tritonx serve` argument for the servers the sweep starts (repeatable), "
    "e.g. --server-arg=--backend-config=python,shm-default-byte-size=1048576.",
)
@click.option(
    "--confirm-rounds",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Turns each of the default and the best config are measured again (medians compared).",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def analyze(
    model: str,
    repository: Path,
    output_dir: Path | None,
    exhaustive: bool,
    concurrency: str | None,
    measurement_seconds: float | None,
    warmup_seconds: float,
    latency_budget_ms: float | None,
    max_memory: str | None,
    batch_size: int,
    shapes: tuple[str, ...],
    load_generator: str,
    perf_analyzer: str | None,
    max_variants: int | None,
    server_args: tuple[str, ...],
    confirm_rounds: int,
    quiet: bool,
) -> None:
    """Find the best config of MODEL: sweep instance counts, max_batch_size, dynamic batching
    (on/off, queue delays, preferred sizes) and backend thread settings, each loaded into a
    fresh explicit-mode server through the load API and driven over concurrency levels;
    write the best config.pbtxt, results.csv/json and report.html (plots with matplotlib).
    """
    options = SweepOptions(
        model=model,
        repository=repository.resolve(),
        exhaustive=exhaustive,
        concurrency=parse_levels(concurrency) if concurrency else (),
        warmup_s=warmup_seconds,
        seconds=measurement_seconds or (5.0 if exhaustive else 2.0),
        latency_budget_ms=latency_budget_ms,
        max_memory_bytes=parse_size(max_memory) if max_memory else None,
        batch_size=batch_size,
        shapes=parse_shapes(shapes),
        load_generator=load_generator,
        perf_analyzer=perf_analyzer,
        max_variants=max_variants,
        server_args=server_args,
        confirm_rounds=confirm_rounds,
    )
    out = output_dir or Path(f"analyze-{model}")
    progress = _Progress(quiet)
    try:
        sweep = Sweep(options, progress.plan, progress.step, progress.done, progress.extra)
        result = sweep.run()
    except (ValueError, ServerError) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        progress.close()
    written = write_outputs(result, out)
    head = result.headline()
    if result.best is None or head is None:
        click.echo("no variant meets the constraints; see the report", err=True)
    else:
        base, best, rejected = head
        click.echo(
            f"best: {result.best.name} at concurrency {result.best_concurrency}: "
            f"{best.infer_per_s:.1f} infer/s (default config: {base.infer_per_s:.1f} infer/s)"
        )
        if rejected is not None:
            click.echo(
                f"(the sweep's best, {rejected.variant}, measured {rejected.infer_per_s:.1f} "
                "infer/s when confirmed: not better, the default config is kept)"
            )
    for kind, path in written.items():
        click.echo(f"{kind}: {path}")
    if result.best is None:
        raise SystemExit(1)
