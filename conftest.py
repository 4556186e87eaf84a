"""Opt-in flags for tests that need a GPU or take long (datasette's --playwright pattern)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-gpu", action="store_true", help="run tests marked gpu (needs CUDA)")
    parser.addoption("--run-slow", action="store_true", help="run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tritonx._core.devices import gpu_count

    run_gpu = config.getoption("--run-gpu") and gpu_count() > 0
    run_slow = config.getoption("--run-slow")
    for item in items:
        if "gpu" in item.keywords and not run_gpu:
            item.add_marker(pytest.mark.skip(reason="needs a GPU and --run-gpu"))
        if "slow" in item.keywords and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow: pass --run-slow"))
