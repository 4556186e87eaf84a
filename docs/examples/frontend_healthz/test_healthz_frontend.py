"""The ``healthz`` example frontend: started with the server on its own port, it answers 200
while the models it checks are ready and 503 naming the one that is not, lists the
repository index as text, and a key it does not read stops the start."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import aiohttp
import pluggy
import pytest

from tritonx.errors import PluginError
from tritonx.testing import ModelRepositoryBuilder, serve_repository

NO_LISTENERS: dict[str, Any] = {"allow_http": False, "allow_grpc": False, "allow_metrics": False}


@pytest.fixture
def repository(model_repository: ModelRepositoryBuilder) -> ModelRepositoryBuilder:
    """``echo``, which loads, and ``broken``, whose backend is not installed."""
    model_repository.add_identity("echo", datatype="INT32", dims=[1])
    (model_repository.root / "broken" / "1").mkdir(parents=True)
    (model_repository.root / "broken" / "config.pbtxt").write_text('backend: "nope"\n')
    return model_repository


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def test_healthz_names_the_model_that_is_not_ready(
    example: ModuleType,
    register_plugin: Callable[[object], None],
    plugin_manager: pluggy.PluginManager,
    repository: ModelRepositoryBuilder,
) -> None:
    register_plugin(example)
    config = {"healthz": {"allow": "true", "port": "0"}}
    async with serve_repository(
        repository, plugin_manager, frontend_config=config, **NO_LISTENERS
    ) as server:
        url = server.frontend_urls["healthz"]
        status, text = await get(f"{url}/healthz")
        assert status == 503
        lines = text.splitlines()
        assert lines[0].startswith("broken NOT READY ") and "nope" in lines[0]
        assert lines[1:] == ["echo READY"]
        assert await get(f"{url}/models") == (200, "broken 1 UNAVAILABLE\necho 1 READY\n")


async def test_healthz_checks_only_the_models_named(
    example: ModuleType,
    register_plugin: Callable[[object], None],
    plugin_manager: pluggy.PluginManager,
    repository: ModelRepositoryBuilder,
) -> None:
    register_plugin(example)
    config = {"healthz": {"models": "echo", "port": "0"}}
    async with serve_repository(
        repository, plugin_manager, frontend_config=config, **NO_LISTENERS
    ) as server:
        assert await get(f"{server.frontend_urls['healthz']}/healthz") == (200, "echo READY\n")


async def test_a_key_it_does_not_read_stops_the_start(
    example: ModuleType,
    register_plugin: Callable[[object], None],
    plugin_manager: pluggy.PluginManager,
    repository: ModelRepositoryBuilder,
) -> None:
    register_plugin(example)
    config = {"healthz": {"model": "echo", "port": "0"}}
    with pytest.raises(PluginError, match=r"--frontend-config healthz: unknown key\(s\) model"):
        async with serve_repository(
            repository, plugin_manager, frontend_config=config, **NO_LISTENERS
        ):
            pass
