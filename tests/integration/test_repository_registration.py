"""Model repositories registered while the server runs (Triton's
``TRITONSERVER_ServerRegisterModelRepository`` / ``...UnregisterModelRepository``), through
the in-process API (``tritonx.Server`` and the ``ServerHandle`` a backend gets)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pluggy
import pytest

import tritonx
from tritonx import InferenceRequest, ModelState, Server
from tritonx.errors import Code, TritonXError
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

NO_LISTENERS = {"allow_http": False, "allow_grpc": False, "allow_metrics": False}


def repo(root: Path, *names: str) -> ModelRepositoryBuilder:
    """A repository of identity models named ``names`` (each folder and config name)."""
    builder = ModelRepositoryBuilder(root)
    for name in names:
        builder.add_identity(name, datatype="INT32", dims=[1])
    return builder


@pytest.fixture
async def explicit(tmp_path: Path, plugin_manager: pluggy.PluginManager) -> AsyncIterator[Server]:
    """An explicit-mode server over a repository holding ``base``, nothing loaded."""
    start = repo(tmp_path / "start", "base")
    settings = loopback_settings(start.root, model_control_mode="explicit", **NO_LISTENERS)
    async with Server(settings, plugin_manager=plugin_manager) as server:
        yield server


async def echo(server: Server, name: str, value: int = 7) -> int:
    request = InferenceRequest(name, {"INPUT0": np.full((1,), value, np.int32)})
    response = await server.infer(request)
    return int(response.outputs["OUTPUT0"][0])


def index(server: Server) -> dict[str, list[tuple[int | None, ModelState | None]]]:
    rows: dict[str, list[tuple[int | None, ModelState | None]]] = {}
    for row in server.repository_index():
        rows.setdefault(row.name, []).append((row.version, row.state))
    return rows


async def refused(coro: Any, code: Code, message: str) -> None:
    with pytest.raises(TritonXError) as info:
        await coro
    assert info.value.code is code, info.value
    assert info.value.message == message


async def test_register_load_unregister(explicit: Server, tmp_path: Path) -> None:
    extra = repo(tmp_path / "extra", "alpha", "beta")
    assert "alpha" not in index(explicit)
    await refused(
        explicit.load_model("alpha"),
        Code.INTERNAL,
        "failed to load 'alpha', failed to poll from model repository",
    )

    await explicit.register_model_repository(str(extra.root))
    rows = index(explicit)
    assert rows["alpha"] == [(None, None)] and rows["beta"] == [(None, None)]
    assert "base" in rows  # the start-up repository is still read
    await explicit.load_model("alpha")
    assert explicit.model_ready("alpha")
    assert await echo(explicit, "alpha", 11) == 11

    # Triton leaves the loaded models of an unregistered repository loaded
    await explicit.unregister_model_repository(str(extra.root))
    assert explicit.model_ready("alpha")
    assert await echo(explicit, "alpha", 12) == 12
    assert "beta" not in index(explicit)
    await refused(
        explicit.load_model("beta"),
        Code.INTERNAL,
        "failed to load 'beta', failed to poll from model repository",
    )
    await explicit.unload_model("alpha")
    assert not explicit.model_ready("alpha")

    # registered again (the path is free once unregistered)
    await explicit.register_model_repository(extra.root)  # type: ignore[arg-type]
    await explicit.load_model("beta")
    assert await echo(explicit, "beta", 3) == 3


async def test_mapping_serves_a_subfolder_under_its_name(explicit: Server, tmp_path: Path) -> None:
    extra = repo(tmp_path / "extra", "model", "other")
    await explicit.register_model_repository(str(extra.root), {"model": "served"})
    rows = index(explicit)
    assert "served" in rows and "other" in rows
    assert "model" not in rows  # the subfolder's own name is not served from it
    await refused(
        explicit.load_model("model"),
        Code.INTERNAL,
        "failed to load 'model', failed to poll from model repository",
    )
    # the config names the folder ("model"): Triton gives a mapped model the mapped name
    await explicit.load_model("served")
    assert explicit.model_config("served").name == "served"
    assert await echo(explicit, "served", 5) == 5
    assert [r.state for r in explicit.repository_index() if r.name == "served"] == [
        ModelState.READY
    ]


async def test_mapped_name_wins_over_a_folder_of_that_name(
    explicit: Server, tmp_path: Path
) -> None:
    # "base" is a folder of the start-up repository; the mapping wins, as Triton's load
    # looks the mappings up first
    extra = ModelRepositoryBuilder(tmp_path / "extra")
    extra.add_identity("sub", datatype="INT32", dims=[2])
    await explicit.register_model_repository(str(extra.root), {"sub": "base"})
    await explicit.load_model("base")
    assert list(explicit.model_config("base").inputs[0].dims) == [2]
    await explicit.unload_model("base")
    await explicit.unregister_model_repository(str(extra.root))
    await explicit.load_model("base")
    assert list(explicit.model_config("base").inputs[0].dims) == [1]


async def test_already_registered(explicit: Server, tmp_path: Path) -> None:
    first = repo(tmp_path / "first", "m1")
    second = repo(tmp_path / "second", "m2")
    start = str(tmp_path / "start")
    await refused(
        explicit.register_model_repository(start),
        Code.ALREADY_EXISTS,
        f"model repository '{start}' has already been registered",
    )
    await explicit.register_model_repository(str(first.root), {"m1": "one"})
    await refused(
        explicit.register_model_repository(str(first.root)),
        Code.ALREADY_EXISTS,
        f"model repository '{first.root}' has already been registered",
    )
    await refused(
        explicit.register_model_repository(str(second.root), {"m2": "one"}),
        Code.ALREADY_EXISTS,
        "failed to register 'one', there is a conflicting mapping for 'one'",
    )
    # the refused registration changed nothing
    assert "m2" not in index(explicit)
    await explicit.register_model_repository(str(second.root), {"m2": "two"})
    assert {"one", "two"} <= set(index(explicit))
    # once the repository that maps it is gone, the name is free
    await explicit.unregister_model_repository(str(first.root))
    third = repo(tmp_path / "third", "m3")
    await explicit.register_model_repository(str(third.root), {"m3": "one"})
    await explicit.load_model("one")
    assert await echo(explicit, "one") == 7


async def test_bad_arguments(explicit: Server, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    await refused(
        explicit.register_model_repository(missing),
        Code.INVALID_ARG,
        f"failed to register '{missing}', repository not found",
    )
    a_file = tmp_path / "file"
    a_file.write_text("not a folder")
    await refused(
        explicit.register_model_repository(str(a_file)),
        Code.INVALID_ARG,
        f"failed to register '{a_file}', repository not found",
    )
    extra = repo(tmp_path / "extra", "a", "b")
    await refused(
        explicit.register_model_repository(str(extra.root), {"a": "same", "b": "same"}),
        Code.INVALID_ARG,
        f"failed to register '{extra.root}', there is a conflicting mapping for 'same'",
    )
    for subdir, name in (("../start", "x"), ("a/1", "x"), ("a", "../x"), ("a", "")):
        with pytest.raises(TritonXError) as info:
            await explicit.register_model_repository(str(extra.root), {subdir: name})
        assert info.value.code is Code.INVALID_ARG
    await refused(
        explicit.unregister_model_repository(missing),
        Code.INVALID_ARG,
        f"failed to unregister '{missing}', repository not found",
    )
    # nothing above registered anything
    await explicit.register_model_repository(str(extra.root))
    assert {"a", "b"} <= set(index(explicit))


async def test_start_up_repository_can_be_unregistered(explicit: Server, tmp_path: Path) -> None:
    start = str(tmp_path / "start")
    await explicit.load_model("base")
    await explicit.unregister_model_repository(start)
    assert await echo(explicit, "base") == 7
    await explicit.unload_model("base")
    assert index(explicit) == {"base": [(1, ModelState.UNAVAILABLE)]}  # (unloaded)
    await explicit.register_model_repository(start)
    assert "base" in index(explicit)


@pytest.mark.parametrize("mode", ["none", "poll"])
async def test_refused_outside_explicit_mode(
    mode: str, tmp_path: Path, plugin_manager: pluggy.PluginManager
) -> None:
    start = repo(tmp_path / "start", "base")
    extra = repo(tmp_path / "extra", "alpha")
    settings = loopback_settings(start.root, model_control_mode=mode, **NO_LISTENERS)
    async with Server(settings, plugin_manager=plugin_manager) as server:
        await refused(
            server.register_model_repository(str(extra.root)),
            Code.UNSUPPORTED,
            "repository registration is not allowed if model control mode is not EXPLICIT",
        )
        await refused(
            server.unregister_model_repository(str(start.root)),
            Code.UNSUPPORTED,
            "repository unregistration is not allowed if model control mode is not EXPLICIT",
        )
        assert "alpha" not in index(server)
        assert server.model_ready("base")


class HandleBackend(tritonx.Backend):
    """Keeps the :class:`tritonx.ServerHandle` its models get (``LoadContext.server``)."""

    name = "handlekeeper"
    handles: ClassVar[list[tritonx.ServerHandle]] = []

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        assert ctx.server is not None
        HandleBackend.handles.append(ctx.server)
        return HandleInstance()


class HandleInstance(tritonx.ModelInstance):
    def execute(self, requests: Any) -> list[tritonx.InferenceResponse]:
        return [tritonx.InferenceResponse(outputs={}) for _ in requests]


class HandlePlugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(HandleBackend)


async def test_server_handle(tmp_path: Path, plugin_manager: pluggy.PluginManager) -> None:
    start = ModelRepositoryBuilder(tmp_path / "start")
    start.add("keeper", backend="handlekeeper", max_batch_size=0)
    extra = repo(tmp_path / "extra", "sub")
    plugin_manager.register(HandlePlugin())
    settings = loopback_settings(
        start.root, model_control_mode="explicit", load_model=("keeper",), **NO_LISTENERS
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        handle = HandleBackend.handles[-1]
        await handle.register_model_repository(str(extra.root), {"sub": "via_handle"})
        await refused(
            handle.register_model_repository(str(extra.root)),
            Code.ALREADY_EXISTS,
            f"model repository '{extra.root}' has already been registered",
        )
        await handle.load_model("via_handle")
        assert await echo(server, "via_handle", 9) == 9
        await handle.unregister_model_repository(str(extra.root))
        await refused(
            handle.unregister_model_repository(str(extra.root)),
            Code.INVALID_ARG,
            f"failed to unregister '{extra.root}', repository not found",
        )


async def test_load_on_demand_reads_a_registered_repository(
    tmp_path: Path, plugin_manager: pluggy.PluginManager
) -> None:
    # --model-load-on-demand answers "is it in a repository?" from the last read of the
    # repositories: a registration makes the next lookup read them again
    start = repo(tmp_path / "start", "base")
    extra = repo(tmp_path / "extra", "sub")
    settings = loopback_settings(
        start.root,
        model_control_mode="explicit",
        model_load_on_demand=True,
        unknown_model_rescan_secs=3600.0,
        **NO_LISTENERS,
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        with pytest.raises(TritonXError) as info:
            await echo(server, "demand")
        assert info.value.code is Code.NOT_FOUND
        await server.register_model_repository(str(extra.root), {"sub": "demand"})
        assert await echo(server, "demand", 4) == 4
        assert server.model_ready("demand")
        await server.unregister_model_repository(str(extra.root))
        assert await echo(server, "demand", 5) == 5  # still loaded
