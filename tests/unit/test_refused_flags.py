"""tritonserver's flags that tritonx does not implement are refused, each with its reason: the
usage error (exit status 2) names the flag and says why, before any server starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tritonx._runtime.cli_options import NOT_IMPLEMENTED_FLAGS
from tritonx.cli import cli


@pytest.mark.parametrize("flag", sorted(NOT_IMPLEMENTED_FLAGS))
def test_each_refused_flag_exits_2_with_its_reason(tmp_path: Path, flag: str) -> None:
    result = CliRunner().invoke(cli, ["serve", "--model-repository", str(tmp_path), flag])
    assert result.exit_code == 2, result.output
    reason = NOT_IMPLEMENTED_FLAGS[flag]
    assert (
        f"tritonserver's {flag} is not implemented by tritonx yet: {reason}; remove it"
        in " ".join(result.output.split())
    )


def test_a_refused_flag_with_a_value_is_refused_too(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["serve", "--model-repository", str(tmp_path), "--allow-model-control=true"]
    )
    assert result.exit_code == 2
    assert "use --model-control-mode=explicit" in result.output


def test_every_reason_is_a_short_clause() -> None:
    for flag, reason in NOT_IMPLEMENTED_FLAGS.items():
        assert flag.startswith("--"), flag
        assert reason and not reason.endswith((".", ";")), flag
        assert len(reason) <= 140, flag
