"""Fixtures of the documentation tests: ``page_runner`` runs a page's blocks as printed
(``blocks.py`` beside this file says how)."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _blocks_module() -> ModuleType:
    """``tests/docs/blocks.py``, imported once (the tests use ``--import-mode=importlib``, so
    the module beside them is not importable by name)."""
    name = "tritonx_doc_blocks"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("blocks.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def blocks() -> ModuleType:
    """The block runner's module (``parse``, ``PageRunner``, ``BlockFailed``, ...)."""
    return _blocks_module()


@pytest.fixture
def page_runner(blocks: ModuleType, tmp_path: Path) -> Iterator[object]:
    """A ``PageRunner`` on this checkout in a fresh scratch folder; its servers are stopped
    (SIGINT, then waited for) when the test ends, passed or failed."""
    with blocks.PageRunner(ROOT, tmp_path) as runner:
        yield runner


@dataclass
class PageRun:
    """What running one page gave: its blocks' results, or the failure that stopped it."""

    results: list[Any] = field(default_factory=list)
    error: BaseException | None = None

    def check(self) -> list[Any]:
        """The results; the page's failure raised again (with its block and output)."""
        if self.error is not None:
            raise self.error
        return self.results


#: pages run at once by ``pages_run``: most of a page's time is servers starting and clients
#: waiting, so three share two cores well
CONCURRENT_PAGES = 3
#: ports the page runner does not rewrite (the frontends' defaults: SageMaker and Vertex AI
#: 8080, OpenAI 9000): pages that name one run one after another, never beside each other
FIXED_PORTS = re.compile(r"\b(8080|9000)\b|allow-sagemaker|allow-vertex-ai|openai,allow")


@pytest.fixture(scope="module")
def pages_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, PageRun]:
    """Every page the module's selected tests ask for (their ``page`` parameter; the module's
    ``page_path(page)`` names its file and ``missing(page)`` what it lacks, if anything), run
    as printed, several at once, each in its own scratch folder with its servers stopped at
    its end: page -> :class:`PageRun`."""
    blocks = _blocks_module()
    module = request.module
    pages = sorted(
        {
            item.callspec.params["page"]
            for item in request.session.items
            if item.module is module
            and hasattr(item, "callspec")
            and "page" in item.callspec.params
        }
    )
    runnable = [page for page in pages if module.missing(page) is None]
    root = tmp_path_factory.mktemp("pages")

    def run(index: int, page: str) -> PageRun:
        folder = root / f"{index}"
        folder.mkdir()
        try:
            with blocks.PageRunner(ROOT, folder) as runner:
                return PageRun(runner.run(module.page_path(page)))
        except BaseException as error:  # the page's own test raises it again
            return PageRun(error=error)

    fixed = [p for p in runnable if FIXED_PORTS.search(module.page_path(p).read_text())]
    free = [p for p in runnable if p not in fixed]
    index = {page: i for i, page in enumerate(runnable)}

    def run_in_turn(pages: list[str]) -> list[PageRun]:
        return [run(index[page], page) for page in pages]

    with ThreadPoolExecutor(CONCURRENT_PAGES) as pool:
        in_turn = pool.submit(run_in_turn, fixed)  # one lane for the fixed-port pages
        beside = list(pool.map(lambda page: run(index[page], page), free))
        done = dict(zip(fixed, in_turn.result(), strict=True))
    done.update(zip(free, beside, strict=True))
    return {page: done[page] for page in runnable}
