"""The ``config_override`` example agent: the model loads with the fields the agent's
parameters set (from the config the server read), its own folder is left as it was, the copy
is removed after the unload, and a value the config cannot take fails the load."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pluggy
import pytest

import tritonx
from tritonx.testing import ModelRepositoryBuilder, model_status, serve_repository

NO_LISTENERS: dict[str, Any] = {"allow_http": False, "allow_grpc": False, "allow_metrics": False}


def agent(**fields: str) -> str:
    """The config.pbtxt text naming the agent with these parameters."""
    params = ", ".join(f'{{ key: "{k}" value: "{v}" }}' for k, v in fields.items())
    return f'model_repository_agents {{ agents [ {{ name: "config_override", parameters [ {params} ] }} ] }}'


@pytest.fixture
def copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder the agent's copies go to (the process's temporary folder, for the test)."""
    folder = tmp_path / "copies"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def served(
    example: ModuleType,
    register_plugin: Callable[[object], None],
    plugin_manager: pluggy.PluginManager,
    model_repository: ModelRepositoryBuilder,
) -> Callable[..., Any]:
    """``served(**settings)``: the repository served with the agent registered."""
    register_plugin(example)
    return lambda **settings: serve_repository(
        model_repository, plugin_manager, **NO_LISTENERS, **settings
    )


async def test_model_loads_with_the_fields_set(
    served: Callable[..., Any], model_repository: ModelRepositoryBuilder, copies: Path
) -> None:
    extra = agent(max_batch_size="8", dynamic_batching="{ max_queue_delay_microseconds: 100 }")
    model_dir = model_repository.add_identity("echo", datatype="INT32", dims=[1], extra=extra)
    original = (model_dir / "config.pbtxt").read_text()
    async with served() as server:
        config = server.model_config("echo").raw
        assert config.max_batch_size == 8
        assert config.dynamic_batching.max_queue_delay_microseconds == 100
        x = np.array([[1], [2]], np.int32)  # a batch of two: batching is on
        response = await server.infer(tritonx.InferenceRequest("echo", {"INPUT0": x}))
        assert response.outputs["OUTPUT0"].tolist() == [[1], [2]]
        assert len(list(copies.iterdir())) == 1
    assert (model_dir / "config.pbtxt").read_text() == original
    assert list(copies.iterdir()) == []


async def test_repeated_and_message_fields_are_replaced(
    served: Callable[..., Any], model_repository: ModelRepositoryBuilder, copies: Path
) -> None:
    extra = (
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        "dynamic_batching { preferred_batch_size: [ 4 ] }\n"
        + agent(
            instance_group="[ { count: 2 kind: KIND_CPU } ]",
            dynamic_batching="{ preferred_batch_size: [ 8 ] }",
        )
    )
    model_repository.add_identity("echo", dims=[1], max_batch_size=8, extra=extra)
    async with served() as server:
        config = server.model_config("echo").raw
        assert [g.count for g in config.instance_group] == [2]
        assert list(config.dynamic_batching.preferred_batch_size) == [8]


async def test_fields_are_set_on_the_config_the_server_read(
    served: Callable[..., Any], model_repository: ModelRepositoryBuilder, copies: Path
) -> None:
    model_dir = model_repository.add_identity("echo", datatype="INT32", dims=[1])
    (model_dir / "configs").mkdir()
    (model_dir / "configs" / "batched.pbtxt").write_text(
        (model_dir / "config.pbtxt").read_text().replace("max_batch_size: 0", "max_batch_size: 4")
        + agent(dynamic_batching="{ }")
    )
    async with served(model_config_name="batched") as server:
        config = server.model_config("echo").raw
        assert (config.max_batch_size, config.HasField("dynamic_batching")) == (4, True)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"max_batch_size": "eight"}, "config_override: cannot set max_batch_size to eight"),
        ({"max_batch_sise": "8"}, "config_override: the model config has no field max_batch_sise"),
    ],
)
async def test_a_value_the_config_cannot_take_fails_the_load(
    served: Callable[..., Any],
    model_repository: ModelRepositoryBuilder,
    fields: dict[str, str],
    reason: str,
) -> None:
    model_repository.add_identity("echo", extra=agent(**fields))
    async with served() as server:
        state, why = model_status(server, "echo")
        assert state == tritonx.ModelState.UNAVAILABLE
        assert reason in why


async def test_a_config_the_server_refuses_removes_the_copy(
    served: Callable[..., Any], model_repository: ModelRepositoryBuilder, copies: Path
) -> None:
    """The copy exists when the set config fails the server's validation: LOAD_FAIL
    removes it."""
    model_repository.add_identity("echo", extra=agent(max_batch_size="-1"))
    async with served() as server:
        state, why = model_status(server, "echo")
        assert state == tritonx.ModelState.UNAVAILABLE, why
    assert list(copies.iterdir()) == []
