"""The sweep's outputs: ``config.pbtxt`` (the best variant, ready to use), ``results.csv``,
``results.json`` and ``report.html`` with PNG plots (matplotlib, the ``plots`` extra)."""

from __future__ import annotations

import csv
import html
import json
import math
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from tritonx_tools_analyze.space import to_pbtxt
from tritonx_tools_analyze.sweep import Row, SweepResult

PLOTS = ("pareto.png", "throughput.png", "latency.png", "resources.png")


def write_outputs(result: SweepResult, out: Path) -> dict[str, Path]:
    """Write every output into ``out``; returns them by kind."""
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    if result.best is not None:
        path = out / "config.pbtxt"
        path.write_text(to_pbtxt(result.best_config()))
        written["config"] = path
    csv_path = out / "results.csv"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[fl.name for fl in fields(Row)])
        writer.writeheader()
        for row in result.rows:
            writer.writerow(asdict(row))
    written["csv"] = csv_path
    json_path = out / "results.json"
    json_path.write_text(json.dumps(result.to_json(), indent=2))
    written["json"] = json_path
    plots = write_plots(result, out)
    report = out / "report.html"
    report.write_text(render_html(result, plots))
    written["report"] = report
    return written


# ---------------------------------------------------------------------------------- plots


def _best_rows(result: SweepResult) -> dict[str, Row]:
    """Each variant's best sweep row (highest throughput within the constraints, else the
    highest throughput)."""
    best: dict[str, Row] = {}
    for row in result.rows:
        if row.phase != "sweep":
            continue
        cur = best.get(row.variant)
        key = (row.meets_constraints, row.infer_per_s)
        if cur is None or key > (cur.meets_constraints, cur.infer_per_s):
            best[row.variant] = row
    return best


def pareto_front(rows: list[Row]) -> list[Row]:
    """Rows no other row beats on both throughput (higher) and p99 latency (lower)."""
    finite = [r for r in rows if math.isfinite(r.p99_ms) and r.requests != 0]
    front = [
        r
        for r in finite
        if not any(
            o.infer_per_s >= r.infer_per_s
            and o.p99_ms <= r.p99_ms
            and (o.infer_per_s > r.infer_per_s or o.p99_ms < r.p99_ms)
            for o in finite
        )
    ]
    return sorted(front, key=lambda r: r.p99_ms)


def write_plots(result: SweepResult, out: Path) -> list[str]:
    """The PNG plots (names relative to ``out``); none without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    best_name = result.best.name if result.best else None
    written = [_pareto_plot(plt, result, best_name, out)]
    written += _variant_bar_plots(plt, result, best_name, out)
    return written


def _pareto_plot(plt: Any, result: SweepResult, best_name: str | None, out: Path) -> str:
    """Throughput vs p99 latency, every measurement; the Pareto front joined, the default
    and the best marked. Returns the file's name."""
    sweep = [r for r in result.rows if r.phase == "sweep"]
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    _scatter_measurements(ax, sweep)
    _draw_pareto_front(ax, pareto_front(sweep))
    _mark_default_and_best(ax, sweep, best_name)
    if result.options.latency_budget_ms is not None:
        ax.axvline(
            result.options.latency_budget_ms, ls="--", c="#d64545", lw=1, label="latency budget"
        )
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("throughput (infer/s)")
    ax.set_title(f"{result.options.model}: throughput vs p99 latency")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "pareto.png")
    plt.close(fig)
    return "pareto.png"


def _scatter_measurements(ax: Any, sweep: list[Row]) -> None:
    """Every sweep measurement, those outside the constraints as red crosses."""
    ok = [r for r in sweep if r.meets_constraints]
    bad = [r for r in sweep if not r.meets_constraints]
    ax.scatter(
        [r.p99_ms for r in ok],
        [r.infer_per_s for r in ok],
        s=28,
        c="#7a8ca3",
        label="variant @ concurrency",
    )
    if bad:
        ax.scatter(
            [r.p99_ms for r in bad],
            [r.infer_per_s for r in bad],
            s=28,
            marker="x",
            c="#d64545",
            label="outside constraints",
        )


def _draw_pareto_front(ax: Any, front: list[Row]) -> None:
    """The Pareto front as a line, each point labelled with its variant and concurrency."""
    ax.plot(
        [r.p99_ms for r in front],
        [r.infer_per_s for r in front],
        "-",
        c="#2f6fde",
        lw=1.8,
        label="Pareto front",
    )
    for r in front:
        ax.annotate(
            f"{r.variant} c{r.concurrency}",
            (r.p99_ms, r.infer_per_s),
            fontsize=7,
            xytext=(4, 4),
            textcoords="offset points",
        )


def _mark_default_and_best(ax: Any, sweep: list[Row], best_name: str | None) -> None:
    """The default's measurements (orange squares) and the best's (green stars)."""
    marks = [("default", "#d98a00", "s", "default (model's config)")]
    if best_name is not None:
        label = "best = default" if best_name == "default" else f"best ({best_name})"
        marks.append((best_name, "#1f9d55", "*", label))
    for name, color, marker, label in marks:
        pts = [r for r in sweep if r.variant == name]
        if pts:
            ax.scatter(
                [r.p99_ms for r in pts],
                [r.infer_per_s for r in pts],
                s=110,
                c=color,
                marker=marker,
                label=label,
                zorder=3,
            )


def _variant_bar_plots(
    plt: Any, result: SweepResult, best_name: str | None, out: Path
) -> list[str]:
    """Bar charts of each variant at its best concurrency: throughput, latency, resources.
    Returns the files' names."""
    best_rows = _best_rows(result)
    names = [v.name for v in result.variants if v.name in best_rows]
    colors = [
        "#1f9d55" if n == best_name else "#d98a00" if n == "default" else "#2f6fde" for n in names
    ]
    rows = [best_rows[n] for n in names]
    charts: list[tuple[str, str, list[tuple[str, list[float]]]]] = [
        (
            "throughput.png",
            "Best throughput per variant (its best concurrency)",
            [("infer/s", [r.infer_per_s for r in rows])],
        ),
        (
            "latency.png",
            "Latency at that point",
            [("p50 (ms)", [r.p50_ms for r in rows]), ("p99 (ms)", [r.p99_ms for r in rows])],
        ),
        (
            "resources.png",
            "Server resources at that point",
            [
                ("CPU (%)", [r.cpu_percent for r in rows]),
                ("peak RSS (MiB)", [r.rss_mb for r in rows]),
            ],
        ),
    ]
    for filename, title, series in charts:
        _bars(plt, out / filename, title, names, colors, series)
    return [filename for filename, _, _ in charts]


def _bars(
    plt: Any,
    path: Path,
    title: str,
    names: list[str],
    colors: list[str],
    series: list[tuple[str, list[float]]],
) -> None:
    """One horizontal bar chart per ``(label, values)`` of ``series``, side by side."""
    fig, axes = plt.subplots(
        1,
        len(series),
        figsize=(5 * len(series), 0.35 * len(names) + 1.6),
        dpi=110,
        squeeze=False,
    )
    for ax, (label, values) in zip(axes[0], series, strict=True):
        ax.barh(names, values, color=colors)
        ax.set_xlabel(label)
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------------------- html

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;background:#f4f6f9;color:#1d2733}
header{background:#1d2733;color:#fff;padding:14px 28px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#c5d0dc}main{padding:18px 28px;max-width:1300px}
h2{font-size:15px;text-transform:uppercase;letter-spacing:.5px;color:#6b7785;margin:26px 0 10px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(200px,1fr));gap:12px}
.card{background:#fff;border:1px solid #e3e8ee;border-radius:8px;padding:12px 14px}
.card .l{color:#6b7785;font-size:12px;text-transform:uppercase}.card .v{font-size:22px;font-weight:600;overflow-wrap:anywhere}
.card .s{font-size:12px;font-weight:400;color:#6b7785}.good{color:#1f9d55}.bad{color:#d64545}
table{border-collapse:collapse;background:#fff;border:1px solid #e3e8ee;width:100%}
th,td{padding:6px 10px;border-bottom:1px solid #e3e8ee;text-align:right;font-variant-numeric:tabular-nums}
th{background:#eef2f6;font-size:12px;color:#6b7785}td:first-child,th:first-child{text-align:left}
tr.best td{background:#e3f5ea}tr.default td{background:#fff6e3}
img{max-width:100%;background:#fff;border:1px solid #e3e8ee;border-radius:8px;margin:6px 0}
pre{background:#fff;border:1px solid #e3e8ee;border-radius:8px;padding:12px;overflow:auto}
"""


def _f(x: float, digits: int = 1) -> str:
    return "-" if not math.isfinite(x) else f"{x:,.{digits}f}"


def render_html(result: SweepResult, plots: list[str]) -> str:
    """The summary report (Model Analyzer's summary report is the model for it)."""
    parts = _html_header(result)
    parts += _result_cards(result)
    parts += _busy_machine_note(result)
    parts += _method_note(result)
    parts += _plot_images(plots)
    parts += _variants_table(result)
    if result.best is not None:
        best_config = html.escape(to_pbtxt(result.best_config()))
        parts.append(f"<h2>Best config.pbtxt</h2><pre>{best_config}</pre>")
    parts.append(
        "<p>All measurements: <a href='results.csv'>results.csv</a>, "
        "<a href='results.json'>results.json</a>.</p></main></body></html>"
    )
    return "".join(parts)


def _html_header(result: SweepResult) -> list[str]:
    """The document's head and the page header: the model and how the sweep ran."""
    opts = result.options
    e = html.escape
    return [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>tritonx analyze: {e(opts.model)}</title><style>{_CSS}</style></head><body>",
        f"<header><h1>tritonx analyze — {e(opts.model)}</h1><p>"
        f"{'exhaustive' if opts.exhaustive else 'quick'} sweep · {len(result.variants)} "
        f"variants · concurrency {', '.join(map(str, opts.levels()))} · "
        f"{opts.seconds:g} s per point · load generator {e(result.load_generator)}"
        "</p></header><main>",
    ]


def _result_cards(result: SweepResult) -> list[str]:
    """The "Result" cards: the written config against the default (or that no variant
    meets the constraints)."""
    e = html.escape
    best = result.best
    head = result.headline()
    parts = ["<h2>Result</h2><div class='cards'>"]
    if best is None:
        parts.append(
            "<div class='card'><div class='l'>best</div><div class='v bad'>no variant "
            "meets the constraints</div></div>"
        )
    elif head is not None:
        base_r, written_r, rejected_r = head
        pct = (
            100 * (written_r.infer_per_s / base_r.infer_per_s - 1)
            if base_r.infer_per_s > 0
            else float("nan")
        )
        cards = [
            ("written config", e(best.name)),
            ("at concurrency", str(result.best_concurrency)),
            ("default config", f"{_f(base_r.infer_per_s)} infer/s"),
            ("written config", f"{_f(written_r.infer_per_s)} infer/s"),
            (
                "vs default",
                f"<span class='good'>{pct:+.1f}%</span>" if pct >= 0 else f"{pct:+.1f}%",
            ),
            ("p99 latency (written)", f"{_f(written_r.p99_ms, 2)} ms"),
        ]
        if rejected_r is not None:
            cards.append(
                (
                    f"sweep best {e(rejected_r.variant)}",
                    f"{_f(rejected_r.infer_per_s)} infer/s "
                    "<div class='s'>not confirmed: the default is kept</div>",
                )
            )
        for label, value in cards:
            parts.append(
                f"<div class='card'><div class='l'>{label}</div><div class='v'>{value}</div></div>"
            )
    parts.append("</div>")
    return parts


def _busy_machine_note(result: SweepResult) -> list[str]:
    """A warning when other processes used much CPU during the sweep (noisy numbers)."""
    others = sorted(r.others_cpu_percent for r in result.rows)
    if others and others[len(others) // 2] > 25:
        return [
            "<p class='bad'>The machine was busy with other work during the sweep (median "
            f"{others[len(others) // 2]:.0f}% of a core used by other processes, up to "
            f"{others[-1]:.0f}%): the numbers are noisy; the confirmation in turns is what "
            "decides. Run again on a quiet machine for sharper results.</p>"
        ]
    return []


def _method_note(result: SweepResult) -> list[str]:
    """The constraints, and how the written config was chosen."""
    opts = result.options
    constraints = []
    if opts.latency_budget_ms is not None:
        constraints.append(f"p99 ≤ {opts.latency_budget_ms:g} ms")
    if opts.max_memory_bytes is not None:
        constraints.append(f"RSS ≤ {opts.max_memory_bytes / 2**20:,.0f} MiB")
    return [
        f"<p>Constraints: {html.escape(', '.join(constraints) or 'none')}. The default and the "
        "sweep's best were measured again at the best's concurrency, "
        f"{opts.confirm_rounds} turn{'' if opts.confirm_rounds == 1 else 's'} each at least "
        "on two fresh servers, more (up to "
        f"{3 * opts.confirm_rounds}) while either had fewer quiet turns (other processes "
        "under 25% of a core); medians shown, of the quiet turns when both had some. The written "
        "<code>config.pbtxt</code> is the best config, or the model's own when that "
        "measured faster.</p>"
    ]


def _plot_images(plots: list[str]) -> list[str]:
    """The plots as images, or how to get them."""
    e = html.escape
    parts = [f"<img src='{e(name)}' alt='{e(name)}'>" for name in plots]
    if not plots:
        parts.append(
            "<p class='bad'>No plots: install matplotlib "
            "(<code>pip install tritonx-tools-analyze[plots]</code>).</p>"
        )
    return parts


def _variants_table(result: SweepResult) -> list[str]:
    """The table of variants, each at its best concurrency (or why it was not measured)."""
    e = html.escape
    best = result.best
    parts = [
        "<h2>Variants (each at its best concurrency)</h2><table><tr><th>variant</th>"
        "<th>changes</th><th>concurrency</th><th>infer/s</th><th>p50 ms</th>"
        "<th>p95 ms</th><th>p99 ms</th><th>CPU %</th><th>RSS MiB</th><th>others' CPU %</th>"
        "<th>constraints"
        "</th></tr>"
    ]
    rows = _best_rows(result)
    for v in result.variants:
        row = rows.get(v.name)
        cls = "best" if best and v.name == best.name else "default" if v.is_default else ""
        changes = ", ".join(
            f"{k}={val}" for k, val in v.describe().items() if val not in (None, [], {})
        )
        if row is None:
            parts.append(
                f"<tr class='{cls}'><td>{e(v.name)}</td><td>{e(changes)}</td>"
                f"<td colspan='9' class='bad'>{e(result.failures.get(v.name, 'not measured'))}"
                "</td></tr>"
            )
            continue
        ok = "ok" if row.meets_constraints else f"<span class='bad'>{e(row.violations)}</span>"
        parts.append(
            f"<tr class='{cls}'><td>{e(v.name)}</td><td>{e(changes or 'model config')}</td>"
            f"<td>{row.concurrency}</td><td>{_f(row.infer_per_s)}</td><td>{_f(row.p50_ms, 2)}</td>"
            f"<td>{_f(row.p95_ms, 2)}</td><td>{_f(row.p99_ms, 2)}</td><td>{_f(row.cpu_percent, 0)}"
            f"</td><td>{_f(row.rss_mb, 0)}</td><td>{_f(row.others_cpu_percent, 0)}</td>"
            f"<td>{ok}</td></tr>"
        )
    parts.append("</table>")
    return parts
