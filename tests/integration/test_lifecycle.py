"""Model repository and lifecycle through the in-process server: bad configs, version
policies, control modes, load/unload, instance groups, repository agents."""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import tritonx
from tritonx import InferenceRequest, ModelState, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.errors import Code, TritonXError
from tritonx.testing import ModelRepositoryBuilder, identity, loopback_settings

NO_LISTENERS = {"allow_http": False, "allow_grpc": False, "allow_metrics": False}


class FileBackend(tritonx.Backend):
    """Needs <version>/model.bin; concurrency of loads and executes is recorded. Parameter
    ``fail_loads``: the model's first that many instance loads fail (counted in
    :attr:`attempts`)."""

    name = "filebackend"
    default_model_filename = "model.bin"
    active_loads = 0
    max_loads = 0
    attempts: ClassVar[dict[str, int]] = {}
    active_exec = 0
    max_exec = 0
    lock = threading.Lock()

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        cls = FileBackend
        with cls.lock:
            attempt = cls.attempts[ctx.model_name] = cls.attempts.get(ctx.model_name, 0) + 1
        if attempt <= int(ctx.parameters.get("fail_loads", "0")):
            raise RuntimeError(f"load attempt {attempt} fails")
        with cls.lock:
            cls.active_loads += 1
            cls.max_loads = max(cls.max_loads, cls.active_loads)
        time.sleep(float(ctx.parameters.get("load_delay_ms", "0")) / 1000)
        with cls.lock:
            cls.active_loads -= 1
        assert ctx.model_path is not None
        return FileInstance(
            ctx.model_path.read_bytes(), float(ctx.parameters.get("delay_ms", "0")) / 1000
        )


class FileInstance(tritonx.ModelInstance):
    def __init__(self, content: bytes, delay: float) -> None:
        self.content, self.delay = content, delay

    def execute(self, requests: Sequence[InferenceRequest]) -> list[tritonx.InferenceResponse]:
        cls = FileBackend
        with cls.lock:
            cls.active_exec += 1
            cls.max_exec = max(cls.max_exec, cls.active_exec)
        time.sleep(self.delay)
        with cls.lock:
            cls.active_exec -= 1
        value = np.frombuffer(self.content, np.uint8).astype(np.int32)[:1].reshape(1, 1)
        return [
            tritonx.InferenceResponse(outputs={"OUT": np.repeat(value, r.batch_size, axis=0)})
            for r in requests
        ]


class Agents:
    calls: ClassVar[list[str]] = []


class FirstAgent(tritonx.RepoAgent):
    name = "first"

    def on_load(self, ctx: tritonx.AgentContext) -> Path | None:
        Agents.calls.append(f"first.load:{ctx.parameters.get('p')}")
        return None

    def on_load_complete(self, ctx: tritonx.AgentContext) -> None:
        Agents.calls.append("first.complete")

    def on_load_fail(self, ctx: tritonx.AgentContext) -> None:
        Agents.calls.append("first.fail")

    def on_unload(self, ctx: tritonx.AgentContext) -> None:
        Agents.calls.append("first.unload")

    def on_unload_complete(self, ctx: tritonx.AgentContext) -> None:
        Agents.calls.append("first.unload_complete")


class SecondAgent(FirstAgent):
    name = "second"

    def on_load(self, ctx: tritonx.AgentContext) -> Path | None:
        Agents.calls.append("second.load")
        if ctx.parameters.get("fail"):
            raise TritonXError("second agent refuses", Code.INVALID_ARG)
        return None

    def on_load_complete(self, ctx: tritonx.AgentContext) -> None:
        Agents.calls.append("second.complete")

    def on_load_fail(self, ctx: tritonx.AgentContext) -> None:
        Agents.calls.append("second.fail")

    def on_unload(self, ctx: tritonx.AgentContext) -> None:
        Agents.calls.append("second.unload")

    def on_unload_complete(self, ctx: tritonx.AgentContext) -> None:
        Agents.calls.append("second.unload_complete")


class TestPlugin:
    events: ClassVar[list[tritonx.ModelEvent]] = []
    started: ClassVar[list[Server]] = []

    @tritonx.hookimpl
    def tritonx_server_started(self, server: Server) -> None:
        self.started.append(server)

    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(FileBackend)

    @tritonx.hookimpl
    def tritonx_register_repoagents(self, registry: tritonx.RepoAgentRegistry) -> None:
        registry.add(FirstAgent)
        registry.add(SecondAgent)

    @tritonx.hookimpl
    def tritonx_model_event(self, event: tritonx.ModelEvent) -> None:
        self.events.append(event)


def make_server(repos: Path | list[Path], **overrides: Any) -> Server:
    pm = make_plugin_manager(autoload=False, extra=[identity, TestPlugin()])
    settings = loopback_settings(repos, **{**NO_LISTENERS, **overrides})
    return Server(settings, plugin_manager=pm)


def file_model(
    repo: ModelRepositoryBuilder, name: str, content: bytes = b"\x07", **kw: Any
) -> Path:
    versions = kw.pop("versions", {1: {"model.bin": content}})
    return repo.add(
        name,
        backend="filebackend",
        max_batch_size=kw.pop("max_batch_size", 4),
        inputs=[("IN", "INT32", [1])],
        outputs=[("OUT", "INT32", [1])],
        versions=versions,
        **kw,
    )


def req(name: str, version: int | None = None) -> InferenceRequest:
    return InferenceRequest(name, {"IN": np.zeros((1, 1), np.int32)}, model_version=version)


async def answer(server: Server, name: str, version: int | None = None) -> int:
    response = await server.infer(req(name, version))
    return int(response.outputs["OUT"][0, 0])


def reasons(server: Server) -> dict[str, str]:
    return {
        r.name: r.reason for r in server.repository_index() if r.state is ModelState.UNAVAILABLE
    }


# ---------------------------------------------------------------- bad configs


async def test_each_bad_config_is_unavailable_while_others_serve(
    model_repository: ModelRepositoryBuilder, tmp_path: Path
) -> None:
    repo = model_repository
    file_model(repo, "good")
    repo.add(
        "syntax",
        config='name: "syntax"\nbackend: "filebackend"\ninput [ { name: "IN" dims: [ 1 }\n',
    )
    file_model(repo, "nobackend").joinpath("config.pbtxt").write_text(
        'name: "nobackend" backend: "nosuchbackend" input [{name:"IN" data_type:TYPE_INT32 dims:[1]}]'
    )
    file_model(repo, "nofile", versions=[1])
    file_model(repo, "badname").joinpath("config.pbtxt").write_text(
        'name: "other" backend: "filebackend"'
    )
    file_model(repo, "nover", versions=[])
    file_model(
        repo, "badagent", extra='model_repository_agents { agents [ { name: "nosuchagent" } ] }'
    )
    other = ModelRepositoryBuilder(tmp_path / "other")
    file_model(repo, "dup")
    file_model(other, "dup")
    async with make_server([repo.root, other.root]) as server:
        assert await answer(server, "good") == 7
        why = reasons(server)
        assert "syntax" in why and "config.pbtxt" in why["syntax"] and "line 3:" in why["syntax"]
        assert "unable to find backend library for backend 'nosuchbackend'" in why["nobackend"]
        assert "nofile" in why and "model.bin" in why["nofile"]
        assert "unexpected directory name 'badname' for model 'other'" in why["badname"]
        assert "at least one version must be available" in why["nover"]
        assert "unable to find repository agent 'nosuchagent'" in why["badagent"]
        assert why["dup"] == "model appears in two or more repositories"
        assert not server.server_ready()  # strict readiness
        assert server.server_live()
        assert await answer(server, "good") == 7
        with pytest.raises(TritonXError) as err:
            await server.infer(req("nofile"))
        assert err.value.code is Code.NOT_FOUND
        assert "Request for unknown model: 'nofile' has no available versions" in err.value.message
        table = server.status_table()
        assert "| good " in table and "UNAVAILABLE" in table


async def test_exit_on_error_fails_startup(model_repository: ModelRepositoryBuilder) -> None:
    file_model(model_repository, "nofile", versions=[1])
    with pytest.raises(TritonXError, match="failed to load all models"):
        async with make_server(model_repository.root, exit_on_error=True):
            pass


async def test_non_strict_readiness(model_repository: ModelRepositoryBuilder) -> None:
    file_model(model_repository, "good")
    file_model(model_repository, "nofile", versions=[1])
    async with make_server(model_repository.root, strict_readiness=False) as server:
        assert server.server_ready()
    async with make_server(model_repository.root) as server:
        assert not server.server_ready()


# ---------------------------------------------------------------- versions


async def test_version_policies_and_version_selection(
    model_repository: ModelRepositoryBuilder,
) -> None:
    files = {v: {"model.bin": bytes([v])} for v in (1, 2, 3)}
    file_model(model_repository, "latest", versions=files)
    file_model(
        model_repository,
        "two",
        versions=files,
        extra="version_policy { latest { num_versions: 2 } }",
    )
    file_model(model_repository, "all", versions=files, extra="version_policy { all { } }")
    file_model(
        model_repository,
        "spec",
        versions=files,
        extra="version_policy { specific { versions: [1, 3] } }",
    )
    async with make_server(model_repository.root) as server:
        ready = {(r.name, r.version) for r in server.repository_index(ready_only=True)}
        assert {v for n, v in ready if n == "latest"} == {3}
        assert {v for n, v in ready if n == "two"} == {2, 3}
        assert {v for n, v in ready if n == "all"} == {1, 2, 3}
        assert {v for n, v in ready if n == "spec"} == {1, 3}
        assert await answer(server, "all") == 3
        assert await answer(server, "all", 1) == 1
        assert server.model_metadata("spec").versions == ("1", "3")
        with pytest.raises(TritonXError, match="'spec' version 2 is not found"):
            await server.infer(req("spec", 2))
        assert not server.model_ready("spec", 2) and server.model_ready("spec", 3)


# ---------------------------------------------------------------- control modes


async def test_none_mode_refuses_load_api(model_repository: ModelRepositoryBuilder) -> None:
    file_model(model_repository, "m")
    async with make_server(model_repository.root) as server:
        with pytest.raises(TritonXError) as err:
            await server.load_model("m")
        assert err.value.code is Code.UNAVAILABLE
        assert (
            "explicit model load / unload is not allowed if polling is enabled" in err.value.message
        )


async def test_explicit_mode_load_unload_and_overrides(
    model_repository: ModelRepositoryBuilder,
) -> None:
    file_model(model_repository, "a", b"\x01")
    file_model(model_repository, "b", b"\x02")
    async with make_server(
        model_repository.root, model_control_mode="explicit", load_model=("a",)
    ) as server:
        assert server.model_ready("a") and not server.model_ready("b")
        assert {"name": "b"} in [
            {"name": r.name} for r in server.repository_index() if r.state is None
        ]
        await server.load_model("b")
        assert await answer(server, "b") == 2
        # config override: the JSON replaces config.pbtxt for this load
        await server.load_model(
            "b",
            {
                "config": '{"backend":"filebackend","max_batch_size":"2",'
                '"input":[{"name":"IN","data_type":"TYPE_INT32","dims":[1]}],'
                '"output":[{"name":"OUT","data_type":"TYPE_INT32","dims":[1]}]}'
            },
        )
        assert server.model_config("b").max_batch_size == 2
        # file override: a temporary model directory
        await server.load_model(
            "b",
            {
                "config": '{"backend":"filebackend","input":[{"name":"IN","data_type":"TYPE_INT32","dims":[1]}],'
                '"output":[{"name":"OUT","data_type":"TYPE_INT32","dims":[1]}]}',
                "file:1/model.bin": b"\x09",
            },
        )
        response = await server.infer(InferenceRequest("b", {"IN": np.zeros((1,), np.int32)}))
        assert int(response.outputs["OUT"].reshape(-1)[0]) == 9
        # each override folder is removed (with its temporary parent) once replaced
        before = set(Path(tempfile.gettempdir()).glob("tritonx-override-*"))
        for content in (b"\x0a", b"\x0b"):
            await server.load_model(
                "b",
                {
                    "config": '{"backend":"filebackend","input":[{"name":"IN","data_type":"TYPE_INT32","dims":[1]}],'
                    '"output":[{"name":"OUT","data_type":"TYPE_INT32","dims":[1]}]}',
                    "file:1/model.bin": content,
                },
            )
        after = set(Path(tempfile.gettempdir()).glob("tritonx-override-*"))
        assert len(after - before) <= 1 and len(after) <= len(before)
        with pytest.raises(TritonXError, match="must stay within model directory"):
            await server.load_model("b", {"config": "{}", "file:../../escape": b"x"})
        with pytest.raises(
            TritonXError, match="failed to load 'b', failed to poll from model repository"
        ):
            await server.load_model("b", {"file:1/model.bin": b"x"})
        with pytest.raises(
            TritonXError, match="failed to load 'b', failed to poll from model repository"
        ):
            await server.load_model("b", {"bogus": "1"})
        with pytest.raises(
            TritonXError, match="failed to load 'b', failed to poll from model repository"
        ):
            await server.load_model("b", {"config": "{not json"})
        with pytest.raises(
            TritonXError, match="failed to load 'nope', failed to poll from model repository"
        ):
            await server.load_model("nope")
        with pytest.raises(TritonXError, match="path traversal"):
            await server.load_model("../a")
        await server.unload_model("b")
        assert not server.model_ready("b")
        assert [r.reason for r in server.repository_index() if r.name == "b"] == ["unloaded"]
        await server.unload_model("never-loaded")  # succeeds, as in Triton


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("label_filename", "../../../../../../etc/passwd"),
        ("label_filename", "/etc/passwd"),
        ("default_model_filename", "../../a/1/model.bin"),
    ],
)
async def test_config_file_names_cannot_leave_the_model_folder(
    model_repository: ModelRepositoryBuilder, tmp_path: Path, field: str, value: str
) -> None:
    """A config override naming a file outside the model's folder is refused at load."""
    file_model(model_repository, "b")
    output = {"name": "OUT", "data_type": "TYPE_INT32", "dims": [1]}
    config: dict[str, Any] = {
        "backend": "filebackend",
        "max_batch_size": 4,
        "input": [{"name": "IN", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [output],
    }
    if field == "label_filename":
        output[field] = value
    else:
        config[field] = value
    async with make_server(model_repository.root, model_control_mode="explicit") as server:
        with pytest.raises(TritonXError, match="must name a file inside the model directory"):
            await server.load_model("b", {"config": json.dumps(config)})
        assert not server.model_ready("b")


async def test_explicit_star_loads_everything(model_repository: ModelRepositoryBuilder) -> None:
    file_model(model_repository, "a")
    file_model(model_repository, "b")
    async with make_server(
        model_repository.root, model_control_mode="explicit", load_model=("*",)
    ) as server:
        assert server.model_ready("a") and server.model_ready("b")


async def test_failed_reload_keeps_old_version_serving(
    model_repository: ModelRepositoryBuilder,
) -> None:
    model = file_model(model_repository, "m", b"\x05")
    async with make_server(
        model_repository.root, model_control_mode="explicit", load_model=("m",)
    ) as server:
        (model / "1" / "model.bin").unlink()
        (model / "config.pbtxt").write_text((model / "config.pbtxt").read_text() + "\n# changed\n")
        with pytest.raises(TritonXError, match=r"load failed for model 'm'"):
            await server.load_model("m")
        assert await answer(server, "m") == 5
        (model / "config.pbtxt").write_text("this is not a config")
        with pytest.raises(TritonXError):
            await server.load_model("m")
        assert await answer(server, "m") == 5
        (model / "1" / "model.bin").write_bytes(b"\x06")
        file_model(model_repository, "m", b"\x06")
        await server.load_model("m")
        assert await answer(server, "m") == 6


async def test_unload_waits_for_inflight_requests(model_repository: ModelRepositoryBuilder) -> None:
    file_model(model_repository, "slow", parameters={"delay_ms": "300"})
    async with make_server(
        model_repository.root, model_control_mode="explicit", load_model=("slow",)
    ) as server:
        inflight = asyncio.create_task(answer(server, "slow"))
        await asyncio.sleep(0.05)
        await server.unload_model("slow")
        assert inflight.done() and await inflight == 7
        with pytest.raises(TritonXError, match="has no available versions"):
            await server.infer(req("slow"))


async def test_poll_mode_picks_up_changes(model_repository: ModelRepositoryBuilder) -> None:
    file_model(model_repository, "a", b"\x01")
    async with make_server(
        model_repository.root, model_control_mode="poll", repository_poll_secs=3600
    ) as server:
        file_model(model_repository, "b", b"\x02")
        await server.poll_repository()
        assert await answer(server, "b") == 2
        import shutil

        shutil.rmtree(model_repository.root / "a")
        await server.poll_repository()
        assert not server.model_ready("a")


# ---------------------------------------------------------------- instances and loading


async def test_instances_run_in_parallel(model_repository: ModelRepositoryBuilder) -> None:
    file_model(
        model_repository,
        "two",
        parameters={"delay_ms": "200"},
        extra="instance_group [ { count: 2, kind: KIND_CPU } ]",
    )
    FileBackend.max_exec = 0
    async with make_server(model_repository.root) as server:
        assert [g.count for g in server.model_config("two").raw.instance_group] == [2]
        await asyncio.gather(*(answer(server, "two") for _ in range(4)))
        assert FileBackend.max_exec == 2


@pytest.mark.parametrize(("threads", "expect_parallel"), [(1, False), (4, True)])
async def test_model_load_thread_count(
    model_repository: ModelRepositoryBuilder, threads: int, expect_parallel: bool
) -> None:
    for i in range(3):
        file_model(model_repository, f"m{i}", parameters={"load_delay_ms": "150"})
    FileBackend.max_loads = 0
    async with make_server(model_repository.root, model_load_thread_count=threads):
        assert (FileBackend.max_loads > 1) is expect_parallel


@pytest.mark.parametrize("retries", [0, 1, 2, 3])
async def test_model_load_retry_count(
    model_repository: ModelRepositoryBuilder, retries: int
) -> None:
    """--model-load-retry-count: a version whose instances failed to load is created again
    (Triton's CreateModel retries); the model whose first two loads fail serves from the
    third attempt on, and the last attempt's error is the load's."""
    file_model(model_repository, "flaky", parameters={"fail_loads": "2"})
    file_model(model_repository, "steady")
    FileBackend.attempts.clear()
    async with make_server(model_repository.root, model_load_retry_count=retries) as server:
        if retries >= 2:
            assert reasons(server) == {}
            assert await answer(server, "flaky") == 7
        else:
            assert reasons(server) == {"flaky": f"Internal: load attempt {retries + 1} fails"}
    assert FileBackend.attempts == {"flaky": min(retries + 1, 3), "steady": 1}


async def test_a_negative_model_load_retry_count_stops_the_start(
    model_repository: ModelRepositoryBuilder,
) -> None:
    with pytest.raises(TritonXError) as err:
        async with make_server(model_repository.root, model_load_retry_count=-1):
            pass
    assert err.value.code is Code.INVALID_ARG
    assert err.value.message == "--model-load-retry-count must be 0 or more, got -1"


async def test_model_config_name_picks_a_config_from_the_configs_folder(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """--model-config-name=small: a model with configs/small.pbtxt is configured by it, one
    without by its config.pbtxt (Triton's GetModelConfigFullPath); the files are read again
    on a reload."""
    for name in ("custom", "plain"):
        file_model(model_repository, name, max_batch_size=4)
    folder = model_repository.root / "custom"
    (folder / "configs").mkdir()
    small = (folder / "config.pbtxt").read_text().replace("max_batch_size: 4", "max_batch_size: 1")
    assert small != (folder / "config.pbtxt").read_text()
    (folder / "configs" / "small.pbtxt").write_text(small)
    (folder / "configs" / "other.pbtxt").write_text("not a config")
    async with make_server(model_repository.root) as server:
        assert server.model_config("custom").max_batch_size == 4
    async with make_server(
        model_repository.root,
        model_config_name="small",
        model_control_mode="explicit",
        load_model=("*",),
    ) as server:
        assert server.model_config("custom").max_batch_size == 1
        assert server.model_config("plain").max_batch_size == 4
        assert await answer(server, "custom") == 7
        (folder / "configs" / "small.pbtxt").write_text(
            small.replace("max_batch_size: 1", "max_batch_size: 2")
        )
        await server.load_model("custom")
        assert server.model_config("custom").max_batch_size == 2
    for bad in ("../small", "a/b", ".."):
        with pytest.raises(TritonXError) as err:
            async with make_server(model_repository.root, model_config_name=bad):
                pass
        assert err.value.code is Code.INVALID_ARG
        assert err.value.message == (
            f"--model-config-name: '{bad}' must be a file name (without '.pbtxt'), read from "
            "each model's 'configs' folder"
        )


async def test_gpu_instances_on_a_machine_without_gpu(
    model_repository: ModelRepositoryBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tritonx._core.devices import gpu_count

    monkeypatch.setenv("TRITONX_GPU_COUNT", "0")
    gpu_count.cache_clear()
    try:
        file_model(model_repository, "gpu", extra="instance_group [ { kind: KIND_GPU } ]")
        file_model(
            model_repository, "kmodel", extra="instance_group [ { count: 2, kind: KIND_MODEL } ]"
        )
        async with make_server(model_repository.root) as server:
            assert "has kind KIND_GPU but no GPUs are available" in reasons(server)["gpu"]
            assert await answer(server, "kmodel") == 7
    finally:
        gpu_count.cache_clear()


# ---------------------------------------------------------------- requests


async def test_validation_errors_reach_the_caller(model_repository: ModelRepositoryBuilder) -> None:
    file_model(model_repository, "m")
    async with make_server(model_repository.root) as server:
        bad = [
            InferenceRequest("m", {"IN": np.zeros((1, 1), np.float32)}),
            InferenceRequest("m", {"IN": np.zeros((9, 1), np.int32)}),
            InferenceRequest("m", {"IN": np.zeros((1, 2), np.int32)}),
            InferenceRequest("m", {}),
            InferenceRequest(
                "m", {"IN": np.zeros((1, 1), np.int32), "X": np.zeros((1, 1), np.int32)}
            ),
            InferenceRequest("m", {"IN": np.zeros((1, 1), np.int32)}, requested_outputs=("NOPE",)),
        ]
        for request in bad:
            with pytest.raises(TritonXError) as err:
                await server.infer(request)
            assert err.value.code is Code.INVALID_ARG
        assert await answer(server, "m") == 7
        with pytest.raises(TritonXError, match="Request for unknown model: 'zzz' is not found"):
            await server.infer(req("zzz"))


async def test_decoupled_model_streams(model_repository: ModelRepositoryBuilder) -> None:
    model_repository.add_identity(
        "rep",
        datatype="INT32",
        dims=[1],
        parameters={"repeat": "3"},
        extra="model_transaction_policy { decoupled: true }",
    )
    async with make_server(model_repository.root) as server:
        request = InferenceRequest("rep", {"INPUT0": np.array([4], np.int32)})
        responses = [r async for r in server.infer_stream(request)]
        assert [r.empty for r in responses] == [False, False, False, True]
        assert all(int(r.outputs["OUTPUT0"][0]) == 4 for r in responses[:3])
        with pytest.raises(TritonXError) as err:
            await server.infer(InferenceRequest("rep", {"INPUT0": np.array([4], np.int32)}))
        assert err.value.code is Code.UNSUPPORTED


async def test_backend_errors_are_per_request(model_repository: ModelRepositoryBuilder) -> None:
    model_repository.add_identity("id", datatype="INT32", dims=[1], parameters={"fail_value": "13"})
    async with make_server(model_repository.root) as server:
        good = server.infer(InferenceRequest("id", {"INPUT0": np.array([1], np.int32)}))
        bad = server.infer(InferenceRequest("id", {"INPUT0": np.array([13], np.int32)}))
        results = await asyncio.gather(good, bad, return_exceptions=True)
        assert int(results[0].outputs["OUTPUT0"][0]) == 1  # type: ignore[union-attr]
        assert isinstance(results[1], TritonXError) and "fail_value 13" in results[1].message


# ---------------------------------------------------------------- agents and events


async def test_repository_agents_run_in_tritons_order(
    model_repository: ModelRepositoryBuilder,
) -> None:
    agents = (
        'model_repository_agents { agents [ { name: "first", parameters { key: "p" value: "v" } }, '
        '{ name: "second" } ] }'
    )
    file_model(model_repository, "ok", extra=agents)
    Agents.calls.clear()
    async with make_server(
        model_repository.root, model_control_mode="explicit", load_model=("ok",)
    ) as server:
        assert Agents.calls == ["first.load:v", "second.load", "second.complete", "first.complete"]
        Agents.calls.clear()
        await server.unload_model("ok")
        assert Agents.calls == [
            "first.unload",
            "second.unload",
            "second.unload_complete",
            "first.unload_complete",
        ]
        Agents.calls.clear()
        file_model(
            model_repository,
            "ok",
            extra=agents.replace(
                '{ name: "second" }', '{ name: "second", parameters { key: "fail" value: "1" } }'
            ),
        )
        with pytest.raises(TritonXError, match="second agent refuses"):
            await server.load_model("ok")
        assert Agents.calls == ["first.load:v", "second.load", "second.fail", "first.fail"]


async def test_model_events_are_reported(model_repository: ModelRepositoryBuilder) -> None:
    file_model(model_repository, "ev")
    TestPlugin.events.clear()
    TestPlugin.started.clear()
    async with make_server(model_repository.root) as server:
        assert TestPlugin.started == [server]
    states = [(e.model_name, e.state) for e in TestPlugin.events]
    assert ("ev", ModelState.LOADING) in states and ("ev", ModelState.READY) in states
    assert states[-1] == ("ev", ModelState.UNAVAILABLE)


async def test_stop_drains_inflight_requests(model_repository: ModelRepositoryBuilder) -> None:
    file_model(model_repository, "slow", parameters={"delay_ms": "300"})
    server = make_server(model_repository.root)
    await server.start()
    inflight = asyncio.create_task(answer(server, "slow"))
    await asyncio.sleep(0.05)
    await server.stop(timeout=10)
    assert await inflight == 7
    assert not server.server_live()
