"""The sweep: every variant on a fresh explicit-mode server, measured at each concurrency
level; the best one under the constraints, confirmed against the model's own config."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tritonclient.http as httpclient

from tritonx_tools_analyze.load import (
    BuiltinLoad,
    InputSpec,
    Measurement,
    PerfAnalyzerLoad,
    find_perf_analyzer,
    input_specs,
)
from tritonx_tools_analyze.server import ResourceSampler, ServerError, ServerProcess
from tritonx_tools_analyze.space import Variant, apply, read_config, variants

QUICK_CONCURRENCY = (1, 4)
EXHAUSTIVE_CONCURRENCY = (1, 2, 4, 8, 16)


@dataclass
class SweepOptions:
    """What ``tritonx analyze`` was asked to do."""

    model: str
    repository: Path
    exhaustive: bool = False
    concurrency: tuple[int, ...] = ()
    warmup_s: float = 0.5
    seconds: float = 2.0
    latency_budget_ms: float | None = None
    max_memory_bytes: int | None = None
    batch_size: int = 1
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: "auto" (perf_analyzer when found), "builtin" or "perf_analyzer"
    load_generator: str = "auto"
    perf_analyzer: str | None = None
    max_variants: int | None = None
    #: turns of the default and the best measured again, at the best's concurrency
    confirm_rounds: int = 3
    server_args: tuple[str, ...] = ()

    def levels(self) -> tuple[int, ...]:
        if self.concurrency:
            return self.concurrency
        return EXHAUSTIVE_CONCURRENCY if self.exhaustive else QUICK_CONCURRENCY


@dataclass
class Row:
    """One measurement: a variant at one concurrency level, with the server's resources."""

    variant: str
    phase: str  # "sweep" or "confirm"
    concurrency: int
    infer_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    requests: int
    errors: int
    cpu_percent: float
    rss_mb: float
    #: CPU used meanwhile by other processes of the machine (noise), in % of one core
    others_cpu_percent: float = 0.0
    meets_constraints: bool = True
    violations: str = ""


@dataclass
class SweepResult:
    """Everything the report and the written files need."""

    options: SweepOptions
    load_generator: str
    base_config: dict[str, Any]
    normalized_config: dict[str, Any]
    variants: list[Variant]
    rows: list[Row]
    failures: dict[str, str]
    best: Variant | None = None
    best_concurrency: int = 0
    #: "confirm" rows of the default and the best variant, at ``best_concurrency``
    confirmed: dict[str, Row] = field(default_factory=dict)
    #: the sweep's best when the confirmation kept the default instead
    kept_default: str = ""

    def headline(self) -> tuple[Row, Row, Row | None] | None:
        """(the default's row, the written config's row, the sweep best the confirmation
        turned down or None), at the best's concurrency: confirmed medians when there was a
        confirmation, else the sweep's row of the default. None when nothing qualified."""
        if self.best is None:
            return None
        if "default" in self.confirmed:
            base = self.confirmed["default"]
            written = self.confirmed[self.best.name]
            rejected = self.confirmed.get(self.kept_default) if self.kept_default else None
            return base, written, rejected
        for row in self.rows:
            if row.variant == "default" and row.concurrency == self.best_concurrency:
                return row, row, None
        return None

    def best_config(self) -> dict[str, Any]:
        assert self.best is not None
        return variant_config(self.base_config, self.options.model, self.best)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.options.model,
            "mode": "exhaustive" if self.options.exhaustive else "quick",
            "load_generator": self.load_generator,
            "constraints": {
                "latency_budget_ms": self.options.latency_budget_ms,
                "max_memory_bytes": self.options.max_memory_bytes,
            },
            "variants": [{"name": v.name, **v.describe()} for v in self.variants],
            "failures": self.failures,
            "rows": [_finite(asdict(r)) for r in self.rows],
            "best": self.best.name if self.best else None,
            "best_concurrency": self.best_concurrency,
            "confirmed": {k: _finite(asdict(r)) for k, r in self.confirmed.items()},
            "sweep_best_not_confirmed": self.kept_default or None,
        }


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()
    }


def variant_config(base: dict[str, Any], model: str, variant: Variant) -> dict[str, Any]:
    """The full config of ``variant``: the model's own config with its changes."""
    config = apply(base, variant)
    config.setdefault("name", model)
    return config


class Sweep:
    """Runs the sweep; ``progress(label, steps)`` is called before each measurement step
    (label: the variant and concurrency) and ``advance(steps)`` after."""

    def __init__(
        self,
        options: SweepOptions,
        on_plan: Callable[[int], None] = lambda total: None,
        on_step: Callable[[str], None] = lambda label: None,
        on_done: Callable[[int], None] = lambda steps: None,
        on_extra: Callable[[int], None] = lambda steps: None,
    ) -> None:
        self.options = options
        self.on_plan = on_plan
        self.on_step = on_step
        self.on_done = on_done
        self.on_extra = on_extra
        self.model_dir = options.repository / options.model
        if not self.model_dir.is_dir():
            raise ValueError(
                f"model '{options.model}' is not in the repository {options.repository}"
            )
        self.base_config = read_config(self.model_dir)
        self.generator_name = "builtin"
        self._perf: str | None = None
        if options.load_generator in ("auto", "perf_analyzer"):
            self._perf = find_perf_analyzer(options.perf_analyzer)
            if self._perf is None and options.load_generator == "perf_analyzer":
                raise ValueError(
                    "--load-generator perf_analyzer: perf_analyzer is not on PATH "
                    "(give it with --perf-analyzer, e.g. tools/perf_analyzer/run.sh)"
                )
            if self._perf is not None:
                self.generator_name = "perf_analyzer"

    # ------------------------------------------------------------------ pieces

    def _loader(self, server: ServerProcess, inputs: list[InputSpec], batched: bool) -> BuiltinLoad:
        opts = self.options
        if self._perf is not None:
            return PerfAnalyzerLoad(
                self._perf, server.url, opts.model, inputs, opts.batch_size, batched
            )
        return BuiltinLoad(server.url, opts.model, inputs, opts.batch_size, batched)

    def _constraints(self, row: Row) -> None:
        opts = self.options
        problems = []
        if row.requests == 0 or row.errors:
            problems.append(f"{row.errors} failed requests" if row.errors else "no requests")
        if opts.latency_budget_ms is not None and not row.p99_ms <= opts.latency_budget_ms:
            problems.append(f"p99 {row.p99_ms:.1f} ms > {opts.latency_budget_ms:g} ms")
        if opts.max_memory_bytes is not None and row.rss_mb * 2**20 > opts.max_memory_bytes:
            problems.append(f"RSS {row.rss_mb:.0f} MiB > {opts.max_memory_bytes / 2**20:.0f} MiB")
        row.meets_constraints = not problems
        row.violations = "; ".join(problems)

    def _measure(
        self, server: ServerProcess, loader: BuiltinLoad, variant: Variant, level: int, phase: str
    ) -> Row:
        self.on_step(f"{variant.name} @ concurrency {level}")
        sampler = ResourceSampler(server.pid)
        sampler.start()
        try:
            m: Measurement = loader.measure(level, self.options.warmup_s, self.options.seconds)
        finally:
            sampler.stop()
        row = Row(
            variant=variant.name,
            phase=phase,
            concurrency=level,
            infer_per_s=m.infer_per_s,
            p50_ms=m.p50_ms,
            p95_ms=m.p95_ms,
            p99_ms=m.p99_ms,
            mean_ms=m.mean_ms,
            requests=m.requests,
            errors=m.errors,
            cpu_percent=sampler.cpu_percent,
            rss_mb=sampler.peak_rss / 2**20,
            others_cpu_percent=sampler.others_percent,
        )
        self._constraints(row)
        self.on_done(1)
        return row

    def _serve(self, variant: Variant) -> tuple[ServerProcess, dict[str, Any]]:
        """A fresh server with ``variant`` loaded, and the config the server reports."""
        server = ServerProcess(self.options.repository, self.options.server_args)
        try:
            server.start()
            override = (
                None
                if variant.is_default
                else variant_config(self.base_config, self.options.model, variant)
            )
            return server, server.load(self.options.model, override)
        except BaseException:
            server.stop()
            raise

    # ------------------------------------------------------------------ the sweep

    def run(self) -> SweepResult:
        """Measure every variant; pick and confirm the best.

        :raises ServerError: when the model's own config does not load or serve.
        """
        opts = self.options
        levels = opts.levels()
        default = Variant("default")
        server, normalized = self._serve(default)
        try:
            metadata = _metadata(server, opts.model)
            mbs = int(normalized.get("max_batch_size", 0) or 0)
            if opts.batch_size > 1 and mbs == 0:
                raise ValueError(f"--batch-size {opts.batch_size}: the model does not batch")
            inputs = input_specs(metadata, mbs, opts.batch_size, opts.shapes)
            loader = self._loader(server, inputs, mbs > 0)
            try:
                loader.check()
            except RuntimeError as exc:
                raise ServerError(str(exc)) from None
            plan = variants(normalized, exhaustive=opts.exhaustive)
            if opts.max_variants is not None:
                plan = plan[: max(1, opts.max_variants)]
            self.on_plan(len(plan) * len(levels) + 2 * opts.confirm_rounds)
            result = SweepResult(
                options=opts,
                load_generator=self.generator_name,
                base_config=self.base_config,
                normalized_config=normalized,
                variants=plan,
                rows=[],
                failures={},
            )
            for level in levels:
                result.rows.append(self._measure(server, loader, default, level, "sweep"))
        finally:
            server.stop()
        for variant in plan[1:]:
            try:
                server, _ = self._serve(variant)
            except ServerError as exc:
                result.failures[variant.name] = str(exc)
                self.on_done(len(levels))
                continue
            done = 0
            try:
                loader = self._loader(server, inputs, mbs > 0)
                for level in levels:
                    result.rows.append(self._measure(server, loader, variant, level, "sweep"))
                    done += 1
            except RuntimeError as exc:  # the load generator failed on this variant
                result.failures[variant.name] = str(exc)
                self.on_done(len(levels) - done)
            finally:
                server.stop()
        self._choose(result)
        self._confirm(result, inputs, mbs > 0)
        return result

    def _choose(self, result: SweepResult) -> None:
        best: tuple[float, Row] | None = None
        for row in result.rows:
            if row.phase == "sweep" and row.meets_constraints:
                if best is None or row.infer_per_s > best[0]:
                    best = (row.infer_per_s, row)
        if best is None:
            return
        by_name = {v.name: v for v in result.variants}
        result.best = by_name[best[1].variant]
        result.best_concurrency = best[1].concurrency

    def _confirm(self, result: SweepResult, inputs: list[InputSpec], batched: bool) -> None:
        """Measure the default and the best again at the best's concurrency: both served at
        once (fresh servers), measured in turns (``confirm_rounds`` each at least, so drift
        of a shared machine hits both alike; more while either has fewer quiet turns), the
        median turn of each compared (of the quiet turns when both have some); if the
        default then does better, the default is the answer."""
        rounds = self.options.confirm_rounds
        if result.best is None or result.best.is_default:
            self.on_done(2 * rounds)
            return
        level = result.best_concurrency
        pair = [Variant("default"), result.best]
        servers: list[ServerProcess] = []
        try:
            for variant in pair:
                server, _ = self._serve(variant)
                servers.append(server)
            loaders = [self._loader(server, inputs, batched) for server in servers]
            measured: dict[str, list[Row]] = {v.name: [] for v in pair}
            turns = 0
            # turns go on (up to three times as many) until each side has ``rounds`` quiet
            # ones: other work on the machine skews a turn more than any config change
            while turns < rounds or (
                turns < 3 * rounds and min(len(_quiet(rows)) for rows in measured.values()) < rounds
            ):
                turns += 1
                if turns > rounds:
                    self.on_extra(2)
                for variant, server, loader in zip(pair, servers, loaders, strict=True):
                    measured[variant.name].append(
                        self._measure(server, loader, variant, level, "confirm")
                    )
        finally:
            for server in servers:
                server.stop()
        use_quiet = all(_quiet(rows) for rows in measured.values())
        for name, rows in measured.items():
            chosen = sorted(_quiet(rows) if use_quiet else rows, key=lambda r: r.infer_per_s)
            result.confirmed[name] = chosen[len(chosen) // 2]
            result.rows.extend(rows)
        best = result.confirmed[result.best.name]
        base = result.confirmed["default"]
        if not best.meets_constraints or (
            base.meets_constraints and base.infer_per_s > best.infer_per_s
        ):
            result.kept_default = result.best.name
            result.best = Variant("default")


#: a point measured while other processes used at most this much CPU (% of a core) is quiet
QUIET_OTHERS_PERCENT = 25.0


def _quiet(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.others_cpu_percent <= QUIET_OTHERS_PERCENT]


def _metadata(server: ServerProcess, model: str) -> dict[str, Any]:
    with httpclient.InferenceServerClient(server.url) as client:
        return dict(client.get_model_metadata(model))
