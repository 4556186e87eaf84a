"""The extension points third parties build on, each exercised through the in-process server:
backends found by platform, repository agents that replace the model folder, response caches,
repository plugins chosen by URL scheme, and the ServerHandle for calls between models (the
ensemble scheduler is built on it: ``test_ensemble.py``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import tritonx
from tritonx import InferenceRequest, InferenceResponse, ModelState, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.errors import Code, PluginError, TritonXError
from tritonx.testing import ModelRepositoryBuilder, identity, loopback_settings

NO_LISTENERS = {"allow_http": False, "allow_grpc": False, "allow_metrics": False}

# ---------------------------------------------------------------- a third-party backend


class AcmeBackend(tritonx.Backend):
    """Serves ``platform: "acme_plan"``; the model file holds one byte, the answer."""

    name = "acme"
    platforms = ("acme_plan",)
    default_model_filename = "model.acme"
    default_cpu_instance_count = 3
    #: folders auto-complete was called on
    completed_in: ClassVar[list[Path]] = []
    executions = 0

    def auto_complete_config(self, ctx: tritonx.AutoCompleteContext) -> None:
        AcmeBackend.completed_in.append(ctx.model_dir)
        assert ctx.model_path is not None and ctx.model_path.is_file(), ctx.model_path
        if ctx.config.input_count == 0:
            ctx.config.add_input("IN", "INT32", [1])
        if ctx.config.output_count == 0:
            ctx.config.add_output("OUT", "INT32", [1])

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        assert ctx.model_path is not None
        return AcmeInstance(ctx.model_path.read_bytes()[0])


class AcmeInstance(tritonx.ModelInstance):
    def __init__(self, value: int) -> None:
        self.value = value

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        AcmeBackend.executions += 1
        return [
            InferenceResponse(outputs={"OUT": r["IN"] + np.int32(self.value)}) for r in requests
        ]


def acme_model(repo: ModelRepositoryBuilder, name: str, value: int = 5, extra: str = "") -> Path:
    """A model naming only its platform; inputs and outputs come from auto-complete."""
    return repo.add(
        name,
        platform="acme_plan",
        extra=extra,
        versions={1: {"model.acme": bytes([value])}},
    )


# ---------------------------------------------------------------- a folder-replacing agent


class RenamingAgent(tritonx.RepoAgent):
    """Copies the model folder, renames ``<v>/model.sealed`` to ``<v>/model.acme`` and, with
    ``max_batch_size`` set, rewrites the config: the load must use the copy."""

    name = "rename"
    calls: ClassVar[list[str]] = []
    copies: ClassVar[list[Path]] = []

    def on_load(self, ctx: tritonx.AgentContext) -> Path | None:
        RenamingAgent.calls.append("load")
        if ctx.parameters.get("fail"):
            raise TritonXError("the seal is broken")
        copy = Path(tempfile.mkdtemp(prefix="rename-agent-")) / ctx.model_name
        shutil.copytree(ctx.model_dir, copy)
        for sealed in copy.glob("*/model.sealed"):
            sealed.rename(sealed.with_name("model.acme"))
        if "max_batch_size" in ctx.parameters:
            config = copy / "config.pbtxt"
            config.write_text(
                config.read_text() + f"\nmax_batch_size: {ctx.parameters['max_batch_size']}\n"
            )
        RenamingAgent.copies.append(copy)
        return copy

    def on_load_complete(self, ctx: tritonx.AgentContext) -> None:
        RenamingAgent.calls.append("complete")

    def on_load_fail(self, ctx: tritonx.AgentContext) -> None:
        RenamingAgent.calls.append("fail")
        for copy in RenamingAgent.copies:  # agents remove what they made themselves
            shutil.rmtree(copy.parent, ignore_errors=True)

    def on_unload(self, ctx: tritonx.AgentContext) -> None:
        RenamingAgent.calls.append("unload")

    def on_unload_complete(self, ctx: tritonx.AgentContext) -> None:
        RenamingAgent.calls.append("unload_complete")
        assert ctx.model_dir not in RenamingAgent.copies  # agents see the folder they got
        for copy in RenamingAgent.copies:  # and remove what they made themselves
            shutil.rmtree(copy.parent, ignore_errors=True)


# ---------------------------------------------------------------- a response cache


class RecordingCache(tritonx.ResponseCache):
    name = "recording"
    instances: ClassVar[list[RecordingCache]] = []

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.store: dict[bytes, InferenceResponse] = {}
        self.gets: list[bytes] = []
        self.puts: list[bytes] = []
        self.closed = False
        RecordingCache.instances.append(self)

    async def get(self, key: bytes) -> InferenceResponse | None:
        self.gets.append(key)
        return self.store.get(key)

    async def put(self, key: bytes, response: InferenceResponse) -> None:
        self.puts.append(key)
        self.store[key] = response

    async def close(self) -> None:
        self.closed = True


# ---------------------------------------------------------------- a repository plugin


class MemoryRepository(tritonx.Repository):
    """``mem://<bank>``: models kept in :attr:`banks` (name -> answer byte), localized into
    temporary folders."""

    name = "memory"
    schemes = ("mem",)
    banks: ClassVar[dict[str, dict[str, int]]] = {}
    released: ClassVar[list[str]] = []

    def _bank(self) -> dict[str, int]:
        return self.banks[self.url.removeprefix("mem://")]

    def list_models(self) -> list[str]:
        return sorted(self._bank())

    def stamp(self, name: str) -> Hashable:
        return self._bank().get(name)

    def localize(self, name: str) -> Path:
        folder = Path(tempfile.mkdtemp(prefix="mem-repo-")) / name
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(f'name: "{name}"\nplatform: "acme_plan"\n')
        (folder / "1" / "model.acme").write_bytes(bytes([self._bank()[name]]))
        return folder

    def release(self, name: str, path: Path) -> None:
        MemoryRepository.released.append(name)
        shutil.rmtree(path.parent, ignore_errors=True)


# ---------------------------------------------------------------- a backend calling others


class ChainBackend(tritonx.Backend):
    """Answers by asking the model named in its ``target`` parameter, through ServerHandle."""

    name = "chain"

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        assert ctx.server is not None
        return ChainInstance(ctx.server, ctx.parameters["target"])


class ChainInstance(tritonx.ModelInstance):
    def __init__(self, server: tritonx.ServerHandle, target: str) -> None:
        self.server, self.target = server, target

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        out = []
        for r in requests:
            if not self.server.model_ready(self.target):
                out.append(InferenceResponse.failed(TritonXError(f"{self.target} not ready")))
                continue
            inner = InferenceRequest(self.target, {"IN": r["IN"]})
            response = self.server.run_threadsafe(self.server.infer(inner)).result(10)
            out.append(InferenceResponse(outputs={"OUT": response.outputs["OUT"] * 10}))
        return out


class TunedBackend(tritonx.Backend):
    """Declares the one ``--backend-config`` key it reads (no model uses it)."""

    name = "tuned"
    config_keys = frozenset({"speed"})

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        raise AssertionError("no model uses this backend")


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(AcmeBackend)
        registry.add(ChainBackend)
        registry.add(TunedBackend)

    @tritonx.hookimpl
    def tritonx_register_repoagents(self, registry: tritonx.RepoAgentRegistry) -> None:
        registry.add(RenamingAgent)

    @tritonx.hookimpl
    def tritonx_register_caches(self, registry: tritonx.CacheRegistry) -> None:
        registry.add(RecordingCache)

    @tritonx.hookimpl
    def tritonx_register_repositories(self, registry: tritonx.RepositoryRegistry) -> None:
        registry.add(MemoryRepository)


def make_server(repos: Any, **overrides: Any) -> Server:
    pm = make_plugin_manager(autoload=False, extra=[identity, Plugin()])
    settings = loopback_settings(repos, **{**NO_LISTENERS, **overrides})
    return Server(settings, plugin_manager=pm)


async def answer(server: Server, name: str, value: int = 1) -> int:
    request = InferenceRequest(name, {"IN": np.array([value], np.int32)})
    return int((await server.infer(request)).outputs["OUT"][0])


def index(server: Server) -> dict[str, tuple[ModelState | None, str]]:
    return {r.name: (r.state, r.reason) for r in server.repository_index()}


# ---------------------------------------------------------------- tests


async def test_backend_found_by_platform_with_its_default_instance_count(
    model_repository: ModelRepositoryBuilder,
) -> None:
    acme_model(model_repository, "plain", value=5)
    acme_model(model_repository, "two", extra="instance_group [ { kind: KIND_CPU count: 2 } ]")
    async with make_server(model_repository.root) as server:
        assert await answer(server, "plain", 1) == 6
        config = server.model_config("plain").to_json_dict()
        assert (config["backend"], config["platform"]) == ("acme", "acme_plan")
        assert [g["count"] for g in config["instance_group"]] == [3]
        # a count given in the config wins over the backend's default
        two = server.model_config("two").to_json_dict()
        assert [g["count"] for g in two["instance_group"]] == [2]


async def test_agent_replacing_the_folder_feeds_auto_complete(
    model_repository: ModelRepositoryBuilder,
) -> None:
    agent = (
        'model_repository_agents { agents [ { name: "rename" parameters { key: "max_batch_size" '
        'value: "4" } } ] }'
    )
    model_repository.add(
        "sealed",
        platform="acme_plan",
        extra=agent,
        versions={1: {"model.sealed": bytes([9])}},
    )
    RenamingAgent.calls.clear()
    RenamingAgent.copies.clear()
    AcmeBackend.completed_in.clear()
    async with make_server(
        model_repository.root, model_control_mode="explicit", load_model=("sealed",)
    ) as server:
        # the original folder has no model.acme: only the agent's copy can load
        (copy,) = RenamingAgent.copies
        assert AcmeBackend.completed_in == [copy]
        assert RenamingAgent.calls == ["load", "complete"]
        request = InferenceRequest("sealed", {"IN": np.array([[1]], np.int32)})
        assert int((await server.infer(request)).outputs["OUT"][0, 0]) == 10
        # the config was read again from the agent's folder (it added max_batch_size)
        assert server.model_config("sealed").max_batch_size == 4
        await server.unload_model("sealed")
        assert RenamingAgent.calls == ["load", "complete", "unload", "unload_complete"]
        assert not copy.exists()
        # a failing LOAD fails the load and gets LOAD_FAIL; auto-complete never runs
        model_repository.add(
            "sealed",
            platform="acme_plan",
            extra=agent.replace('key: "max_batch_size" value: "4"', 'key: "fail" value: "1"'),
            versions={1: {"model.sealed": bytes([9])}},
        )
        RenamingAgent.calls.clear()
        AcmeBackend.completed_in.clear()
        with pytest.raises(TritonXError, match="the seal is broken"):
            await server.load_model("sealed")
        assert RenamingAgent.calls == ["load", "fail"]
        assert AcmeBackend.completed_in == []


async def test_agent_load_fail_when_auto_complete_fails(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """The agents' LOAD succeeded but the completed config is invalid: LOAD_FAIL runs."""
    model_repository.add(
        "bad",
        platform="acme_plan",
        extra='model_repository_agents { agents [ { name: "rename" } ] }\nmax_batch_size: -1',
        versions={1: {"model.sealed": bytes([1])}},
    )
    RenamingAgent.calls.clear()
    async with make_server(model_repository.root) as server:
        state, reason = index(server)["bad"]
        assert state is ModelState.UNAVAILABLE and "max_batch_size" in reason
    assert RenamingAgent.calls == ["load", "fail"]


async def test_response_cache_is_consulted_only_for_enabled_models(
    model_repository: ModelRepositoryBuilder,
) -> None:
    acme_model(model_repository, "cached", extra="response_cache { enable: true }")
    acme_model(model_repository, "uncached")
    RecordingCache.instances.clear()
    async with make_server(
        model_repository.root, cache_config={"recording": {"size": "1048576"}}
    ) as server:
        (cache,) = RecordingCache.instances
        assert cache.config == {"size": "1048576"}
        AcmeBackend.executions = 0
        assert await answer(server, "uncached", 1) == 6
        assert (cache.gets, cache.puts) == ([], [])
        assert await answer(server, "cached", 1) == 6
        assert len(cache.gets) == 1 and cache.puts == cache.gets
        executions = AcmeBackend.executions
        assert await answer(server, "cached", 1) == 6  # a hit: the model does not run
        assert AcmeBackend.executions == executions
        assert await answer(server, "cached", 2) == 7  # other input data: a miss
        assert len(cache.gets) == 3 and len(cache.puts) == 2
        ((_, _, stats),) = server.model_statistics("cached")
        assert (stats.cache_hit.count, stats.cache_miss.count) == (1, 2)
        assert stats.success.count == 3
        ((_, _, plain),) = server.model_statistics("uncached")
        assert (plain.cache_hit.count, plain.cache_miss.count) == (0, 0)
    assert cache.closed


async def test_unknown_cache_fails_start_up(model_repository: ModelRepositoryBuilder) -> None:
    with pytest.raises(PluginError, match="unknown cache 'nosuch' in --cache-config"):
        async with make_server(model_repository.root, cache_config={"nosuch": {"size": "1"}}):
            pass


async def test_backend_config_keys_a_backend_does_not_read_fail_start_up(
    model_repository: ModelRepositoryBuilder,
) -> None:
    with pytest.raises(
        TritonXError,
        match=r"--backend-config=tuned,sped: backend 'tuned' has no setting 'sped' "
        r"\(its settings: default-max-batch-size, speed\)",
    ) as caught:
        async with make_server(
            model_repository.root, backend_config={"tuned": {"speed": "2", "sped": "1"}}
        ):
            pass
    assert caught.value.code is Code.INVALID_ARG
    # its own keys and the global ones; any key of a backend that declares none, of one that
    # is not installed, and in the global section
    async with make_server(
        model_repository.root,
        backend_config={
            "tuned": {"speed": "2", "default-max-batch-size": "4"},
            "chain": {"anything": "1"},
            "notinstalled": {"x": "1"},
            "": {"whatever": "1"},
        },
    ):
        pass


class OnlyTuned:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(TunedBackend)


async def test_global_backend_config_keys_no_backend_reads_fail_start_up(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """A global key goes to every backend: refused when every installed backend declares
    its keys and none reads it (with a backend that declares none, any key may be read)."""

    def only_tuned(**global_keys: str) -> Server:
        pm = make_plugin_manager(autoload=False, extra=[OnlyTuned()])
        settings = loopback_settings(
            model_repository.root, **NO_LISTENERS, backend_config={"": global_keys}
        )
        return Server(settings, plugin_manager=pm)

    with pytest.raises(
        TritonXError,
        match=r"--backend-config=sped: no installed backend has a setting 'sped' \(the "
        r"settings they read: default-max-batch-size, speed; a backend's own: "
        r"--backend-config=<backend>,<key>=<value>\)",
    ) as caught:
        async with only_tuned(**{"speed": "2", "sped": "1"}):
            pass
    assert caught.value.code is Code.INVALID_ARG
    async with only_tuned(**{"speed": "2", "default-max-batch-size": "4"}):
        pass


async def test_repository_plugin_by_url_scheme(model_repository: ModelRepositoryBuilder) -> None:
    MemoryRepository.banks["bank"] = {"m1": 3}
    MemoryRepository.released.clear()
    async with make_server(
        ["mem://bank", str(model_repository.root)],
        model_control_mode="poll",
        repository_poll_secs=3600,
    ) as server:
        assert await answer(server, "m1", 1) == 4
        MemoryRepository.banks["bank"] = {"m1": 7, "m2": 1}
        await server.poll_repository()
        assert await answer(server, "m1", 1) == 8  # changed stamp: reloaded
        assert await answer(server, "m2", 1) == 2
        assert MemoryRepository.released == ["m1"]  # the first copy was given back
        del MemoryRepository.banks["bank"]["m2"]
        await server.poll_repository()
        assert not server.model_ready("m2")
        assert "m2" in MemoryRepository.released


async def test_a_repository_plugin_failing_to_localize_fails_that_model_only(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """A plugin's localize raising something else than a TritonXError (a bug: here
    ``bytes([300])``) fails that model's load with the error as its reason; the others
    serve."""
    MemoryRepository.banks["bank"] = {"ok": 3, "broken": 300}
    async with make_server(["mem://bank"], model_control_mode="poll") as server:
        assert await answer(server, "ok", 1) == 4
        (row,) = [r for r in server.repository_index() if r.name == "broken"]
        assert row.state is ModelState.UNAVAILABLE
        assert "failed to localize model 'broken'" in row.reason
        assert "bytes must be in range(0, 256)" in row.reason


async def test_unknown_repository_scheme_fails_start_up(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="no repository plugin serves 's3://bucket/models'"):
        async with make_server(["s3://bucket/models"]):
            pass


async def test_missing_local_repository_fails_start_up(tmp_path: Path) -> None:
    with pytest.raises(TritonXError, match="failed to stat file"):
        async with make_server([str(tmp_path / "nope")]):
            pass


async def test_backend_calls_another_model_through_the_server_handle(
    model_repository: ModelRepositoryBuilder,
) -> None:
    acme_model(model_repository, "inner", value=2)
    model_repository.add(
        "outer",
        backend="chain",
        inputs=[("IN", "INT32", [1])],
        outputs=[("OUT", "INT32", [1])],
        parameters={"target": "inner"},
    )
    async with make_server(model_repository.root) as server:
        assert await answer(server, "outer", 1) == 30
