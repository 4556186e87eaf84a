"""Reloading a model whose config changed only in its instance groups updates it in place, as
Triton's ``UpdateInstanceGroup``: only the difference is loaded or unloaded, the running
instances keep serving (no re-initialization), requests in flight on a removed instance
finish; any other change (a config field, a version's files) reloads the whole version.
Driven through tritonclient's load API over HTTP and gRPC, against an in-process server."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

import tritonx
from tritonx import InferenceRequest, InferenceResponse, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, loopback_settings


class Counting(tritonx.Backend):
    """Records every instance load and unload; OUT = IN, and the instance's name in the
    response parameters. An execution whose IN is in ``gates`` waits for that gate (and
    sets ``arrived``)."""

    name = "counting"
    loads: ClassVar[list[str]] = []
    unloads: ClassVar[list[str]] = []
    executions: ClassVar[list[str]] = []
    gates: ClassVar[dict[int, threading.Event]] = {}
    arrived: ClassVar[dict[int, threading.Event]] = {}
    fail_loads = False
    #: a version whose instances refuse to load
    fail_version: int | None = None
    #: when set, a load announces itself on ``loading`` and waits for ``hold`` to be set
    hold: threading.Event | None = None
    loading = threading.Event()
    lock = threading.Lock()

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        if Counting.fail_loads or ctx.version == Counting.fail_version:
            raise tritonx.TritonXError(f"instance {ctx.instance.name} refuses to load")
        if Counting.hold is not None:
            Counting.loading.set()
            Counting.hold.wait(30)
        with Counting.lock:
            Counting.loads.append(ctx.instance.name)
        if ctx.parameters.get("own_readiness"):
            return SelfCheckingInstance(ctx.instance.name)
        return CountingInstance(ctx.instance.name)


class CountingInstance(tritonx.ModelInstance):
    def __init__(self, name: str) -> None:
        self.name = name

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        with Counting.lock:
            Counting.executions.append(self.name)
        responses = []
        for request in requests:
            value = int(request["IN"].reshape(-1)[0])
            if value in Counting.gates:
                Counting.arrived[value].set()
                Counting.gates[value].wait(30)
            responses.append(
                InferenceResponse(outputs={"OUT": request["IN"]}, parameters={"by": self.name})
            )
        return responses

    def unload(self) -> None:
        with Counting.lock:
            Counting.unloads.append(self.name)


class SelfCheckingInstance(CountingInstance):
    """Overrides ``is_ready``: the scheduler asks its instances instead of knowing."""

    def is_ready(self) -> bool:
        return True


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(Counting)


@pytest.fixture(autouse=True)
def _reset() -> None:
    Counting.loads.clear()
    Counting.unloads.clear()
    Counting.executions.clear()
    Counting.gates.clear()
    Counting.arrived.clear()
    Counting.fail_loads = False
    Counting.fail_version = None
    Counting.hold = None
    Counting.loading.clear()


def write(repo: ModelRepositoryBuilder, groups: str, extra: str = "") -> None:
    repo.add(
        "m",
        backend="counting",
        inputs=[("IN", "INT32", [1])],
        outputs=[("OUT", "INT32", [1])],
        extra=f"instance_group [ {groups} ]\n{extra}",
    )


def cpu(count: int, name: str = "") -> str:
    named = f'name: "{name}" ' if name else ""
    return f"{{ {named}count: {count} kind: KIND_CPU }}"


@contextlib.asynccontextmanager
async def serve(repo: ModelRepositoryBuilder) -> AsyncIterator[Server]:
    pm = make_plugin_manager(autoload=False, extra=[Plugin()])
    settings = loopback_settings(repo.root, model_control_mode="explicit", load_model=("m",))
    async with Server(settings, plugin_manager=pm) as srv:
        yield srv


def http_input(value: int) -> list[Any]:
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return [tensor]


async def config_groups(client: httpclient.InferenceServerClient) -> list[tuple[str, int]]:
    config = await client.get_model_config("m")
    return [(g["name"], g["count"]) for g in config["instance_group"]]


async def test_changing_the_count_adds_or_removes_only_the_difference(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    write(repo, cpu(3))
    async with serve(repo) as server:
        http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            assert sorted(Counting.loads) == ["m_0_0", "m_0_1", "m_0_2"]
            await http.infer("m", http_input(1))
            write(repo, cpu(4))
            await http.load_model("m")
            assert sorted(Counting.loads) == ["m_0_0", "m_0_1", "m_0_2", "m_0_3"]  # one initialize
            assert Counting.unloads == []
            assert await config_groups(http) == [("m_0", 4)]
            write(repo, cpu(2))
            await grpc.load_model("m")
            assert len(Counting.loads) == 4 and len(Counting.unloads) == 2
            assert await config_groups(http) == [("m_0", 2)]
            # the two instances left serve (each answers), statistics went on counting
            served = {
                (await http.infer("m", http_input(v))).get_response()["parameters"]["by"]
                for v in range(8)
            }
            assert served <= set(Counting.loads) - set(Counting.unloads)
            stats = await http.get_inference_statistics("m")
            assert stats["model_stats"][0]["inference_stats"]["success"]["count"] == 9
            assert await http.is_model_ready("m")
        finally:
            await http.close()
            await grpc.close()
    assert sorted(Counting.unloads) == sorted(Counting.loads)  # the server's stop unloads them


async def test_a_request_running_on_a_removed_instance_finishes(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    write(repo, cpu(2))
    for value in (100, 200):
        Counting.gates[value] = threading.Event()
        Counting.arrived[value] = threading.Event()
    async with serve(repo) as server:
        http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        try:
            # one request holds each instance
            running = [asyncio.create_task(http.infer("m", http_input(v))) for v in (100, 200)]
            for value in (100, 200):
                assert await asyncio.to_thread(Counting.arrived[value].wait, 30)
            write(repo, cpu(1))
            update = asyncio.create_task(http.load_model("m"))
            for gate in Counting.gates.values():
                gate.set()
            answers = await asyncio.gather(*running)
            await update
            assert [a.as_numpy("OUT").tolist() for a in answers] == [[100], [200]]
            assert len(Counting.unloads) == 1 and len(Counting.loads) == 2
            (after,) = {
                (await http.infer("m", http_input(v))).get_response()["parameters"]["by"]
                for v in range(4)
            }
            assert after not in Counting.unloads
        finally:
            await http.close()


async def test_renaming_a_group_keeps_its_instances_and_other_changes_reload(
    tmp_path: Path,
) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    write(repo, cpu(2, "a"))
    async with serve(repo) as server:
        http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        try:
            # the same settings under another name: the same instances (Triton ignores the name)
            write(repo, cpu(2, "b"))
            await http.load_model("m")
            assert sorted(Counting.loads) == ["a_0", "a_1"] and Counting.unloads == []
            assert await config_groups(http) == [("b", 2)]
            # another field changed too: the whole version reloads
            write(repo, cpu(2, "b"), 'parameters { key: "p" value: { string_value: "1" } }\n')
            await http.load_model("m")
            assert sorted(Counting.loads) == ["a_0", "a_1", "b_0", "b_1"]
            assert sorted(Counting.unloads) == ["a_0", "a_1"]
            # a version's files changed: the whole version reloads
            (repo.root / "m" / "1" / "weights.bin").write_bytes(b"new")
            write(repo, cpu(3, "b"), 'parameters { key: "p" value: { string_value: "1" } }\n')
            await http.load_model("m")
            assert len(Counting.loads) == 7 and len(Counting.unloads) == 4
        finally:
            await http.close()


async def test_an_added_instance_that_fails_leaves_the_model_serving(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    write(repo, cpu(1))
    async with serve(repo) as server:
        http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        try:
            write(repo, cpu(3))
            Counting.fail_loads = True
            with pytest.raises(InferenceServerException) as err:
                await http.load_model("m")
            assert "refuses to load" in err.value.message()
            Counting.fail_loads = False
            assert await http.is_model_ready("m")
            assert await config_groups(http) == [("m_0", 1)]
            answer = await http.infer("m", http_input(7))
            assert answer.get_response()["parameters"]["by"] == "m_0_0"
            assert Counting.loads == ["m_0_0"] and Counting.unloads == []
            # the update again (the config written anew), now that instances load
            write(repo, cpu(3), "\n")
            await http.load_model("m")
            assert sorted(Counting.loads) == ["m_0_0", "m_0_1", "m_0_2"]
        finally:
            await http.close()


WARMUP = """model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value: {
  data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } } ]
"""


async def test_added_instances_are_warmed_up(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    write(repo, cpu(1), WARMUP)
    async with serve(repo) as server:
        http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        try:
            assert Counting.executions == ["m_0_0"]
            write(repo, cpu(2), WARMUP)
            await http.load_model("m")
            assert Counting.executions == ["m_0_0", "m_0_1"]  # the new one only
        finally:
            await http.close()


async def test_the_model_serves_while_an_added_instance_loads(tmp_path: Path) -> None:
    """While the update loads a new instance, the model stays ready and its running instance
    answers; the new one takes requests only once loaded (and warmed up)."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    own = 'parameters { key: "own_readiness" value: { string_value: "1" } }\n'
    write(repo, cpu(1), own)
    async with serve(repo) as server:
        http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        try:
            write(repo, cpu(2), own)
            Counting.hold = threading.Event()
            update = asyncio.create_task(http.load_model("m"))
            assert await asyncio.to_thread(Counting.loading.wait, 30)
            assert await http.is_model_ready("m") and await http.is_server_ready()
            for value in range(4):
                answer = await http.infer("m", http_input(value))
                assert answer.get_response()["parameters"]["by"] == "m_0_0"
            Counting.hold.set()
            await update
            assert sorted(Counting.loads) == ["m_0_0", "m_0_1"]
            assert await http.is_model_ready("m")
        finally:
            await http.close()


async def test_a_failed_load_beside_an_update_leaves_the_serving_version(tmp_path: Path) -> None:
    """A reload that updates version 1 in place (its instance groups) and fails to load a new
    version 2 is aborted as a whole: version 1 keeps serving (Triton's all-or-nothing)."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    write(repo, cpu(1))
    async with serve(repo) as server:
        http = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        try:
            write(repo, cpu(2), "version_policy { all { } }\n")
            (repo.root / "m" / "2").mkdir()
            Counting.fail_version = 2  # version 1's added instance loads, version 2 fails
            with pytest.raises(InferenceServerException):
                await http.load_model("m")
            assert await http.is_model_ready("m", "1")
            answer = await http.infer("m", http_input(3), model_version="1")
            assert answer.as_numpy("OUT").tolist() == [3]
            assert "m_0_0" not in Counting.unloads
        finally:
            await http.close()
