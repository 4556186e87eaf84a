"""The start-up table (and ``tritonx check``'s) in Triton's ``TablePrinter`` layout: a
multi-line or long reason stays inside its column, whose width is a fair share of the
terminal's, instead of widening every line of the table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tritonx.server import format_table

HEADER = ("Model", "Version", "Status")


def test_short_cells_keep_their_natural_widths() -> None:
    assert format_table(HEADER, [("echo", "1", "READY")], width=200) == (
        "+-------+---------+--------+\n"
        "| Model | Version | Status |\n"
        "+-------+---------+--------+\n"
        "| echo  | 1       | READY  |\n"
        "+-------+---------+--------+\n"
    )


def test_a_long_multi_line_reason_is_wrapped_inside_its_column() -> None:
    reason = "UNAVAILABLE: " + "x" * 300 + "\nsecond line\nthird line"
    table = format_table(HEADER, [("bad", "1", reason), ("echo", "1", "READY")], width=100)
    lines = table.splitlines()
    assert all(len(line) <= 100 for line in lines)
    assert len({len(line) for line in lines}) == 1  # one width: the table stays a table
    # every character of the reason is there, in order, one column's share at a time
    status = "".join(line.split("|")[3].strip() for line in lines[3:-1] if "echo" not in line)
    assert status == reason.replace("\n", "")
    assert "| echo  | 1       | READY" in table


def test_check_fits_its_table_to_the_terminal(tmp_path: Path) -> None:
    model = tmp_path / "llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('name: "llm"\nbackend: "vllm"\n')
    done = subprocess.run(
        [sys.executable, "-m", "tritonx", "check", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "90"},
    )
    lines = done.stdout.splitlines()
    assert lines and all(len(line) <= 90 for line in lines), done.stdout
    body = lines[lines.index(lines[0], 1) + 1 : -1]  # between the header's divider and the last
    status = "".join(line.split("|")[3] for line in body).replace(" ", "")
    assert status.startswith("ERROR:unabletofindbackendlibraryforbackend'vllm'"), done.stdout
