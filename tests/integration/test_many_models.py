"""Many models, little memory (``tritonx._core.residency``): a request loads its model on
demand, concurrent requests share the load, budgets evict the least recently used idle
models, pinned and busy models stay, idle models unload, a failed load backs off; through
tritonclient (HTTP, its aiohttp and fast paths, gRPC unary and stream), ``/generate``,
``/metrics`` and the settings checks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mmap
import shutil
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import numpy as np
import pluggy
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

import tritonx
from tritonx import InferenceRequest, InferenceResponse, LoadContext, ModelInstance, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.cli import cli
from tritonx.errors import Code, TritonXError
from tritonx.testing import ModelRepositoryBuilder, identity, loopback_settings

ON_DEMAND: dict[str, Any] = {"model_control_mode": "explicit", "model_load_on_demand": True}
#: the budgets' least-recently-used order alone: a model just loaded may make room
#: (``--model-min-residency-secs 0``; the minimum has tests of its own)
LRU: dict[str, Any] = {"model_min_residency_secs": 0}
DATA = np.arange(4, dtype=np.float32)


class Gates:
    """What the ``gate`` backend's models do, by model name: block their load or execute
    until released, and an ordered record of what happened (threads set the events)."""

    load_gates: ClassVar[dict[str, threading.Event]] = {}
    exec_gates: ClassVar[dict[str, threading.Event]] = {}
    load_started: ClassVar[dict[str, threading.Event]] = {}
    exec_started: ClassVar[dict[str, threading.Event]] = {}
    loads: ClassVar[dict[str, int]] = {}
    record: ClassVar[list[tuple[str, str]]] = []
    lock = threading.Lock()

    @classmethod
    def reset(cls) -> None:
        for table in (cls.load_gates, cls.exec_gates, cls.load_started, cls.exec_started):
            table.clear()
        cls.loads.clear()
        cls.record.clear()

    @classmethod
    def note(cls, what: str, model: str) -> None:
        with cls.lock:
            cls.record.append((what, model))


class GateBackend(tritonx.Backend):
    """OUTPUT0 = INPUT0 + the model's ``add`` parameter; loads and executes wait at the
    model's gates (:class:`Gates`) when it has one."""

    name = "gate"

    def load(self, ctx: LoadContext) -> ModelInstance:
        name = ctx.model_name
        Gates.load_started.setdefault(name, threading.Event()).set()
        gate = Gates.load_gates.get(name)
        if gate is not None:
            assert gate.wait(60)
        with Gates.lock:
            Gates.loads[name] = Gates.loads.get(name, 0) + 1
        Gates.note("load", name)
        instance = GateInstance(name, float(ctx.parameters.get("add", "0")))
        size = int(float(ctx.parameters.get("ballast_mb", "0")) * 2**20)
        if size:  # memory the instance holds: fresh pages (not the heap's), all touched
            instance.ballast = mmap.mmap(-1, size)
            instance.ballast.write(b"\1" * size)
        return instance


class GateInstance(ModelInstance):
    def __init__(self, name: str, add: float) -> None:
        self.name = name
        self.add = add
        self.ballast: mmap.mmap | None = None

    def unload(self) -> None:
        if self.ballast is not None:
            self.ballast.close()

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        Gates.exec_started.setdefault(self.name, threading.Event()).set()
        gate = Gates.exec_gates.get(self.name)
        if gate is not None:
            assert gate.wait(60)
        Gates.note("executed", self.name)
        return [
            InferenceResponse(outputs={"OUTPUT0": r.inputs["INPUT0"] + np.float32(self.add)})
            for r in requests
        ]


class GatePlugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(GateBackend)


@pytest.fixture(autouse=True)
def _reset_gates() -> Iterator[None]:
    Gates.reset()
    yield
    for gate in (*Gates.load_gates.values(), *Gates.exec_gates.values()):
        gate.set()  # never leave a thread waiting
    Gates.reset()


def gate_model(repo: ModelRepositoryBuilder, name: str, add: float = 0, **params: str) -> None:
    """A ``gate`` model: OUTPUT0 = INPUT0 + ``add`` (``params``: more config parameters)."""
    repo.add(
        name,
        backend="gate",
        inputs=[("INPUT0", "FP32", [-1])],
        outputs=[("OUTPUT0", "FP32", [-1])],
        parameters={"add": str(add), **params},
    )


def plugins() -> pluggy.PluginManager:
    return make_plugin_manager(autoload=False, extra=[identity, GatePlugin()])


@pytest.fixture
def repo(tmp_path: Path) -> ModelRepositoryBuilder:
    return ModelRepositoryBuilder(tmp_path / "models")


@contextlib.asynccontextmanager
async def serving(repo: ModelRepositoryBuilder, **overrides: Any) -> AsyncIterator[Server]:
    """A started server over ``repo`` loading models on demand (``overrides``: settings)."""
    settings = loopback_settings(repo.root, **{**ON_DEMAND, **overrides})
    async with Server(settings, plugin_manager=plugins()) as server:
        yield server


@contextlib.contextmanager
def logged(text: str) -> Iterator[threading.Event]:
    """An event set when ``tritonx.residency`` logs a line containing ``text``."""
    handler = LogEvent(text)
    logger = logging.getLogger("tritonx.residency")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler.seen
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture
async def clients() -> AsyncIterator[list[Any]]:
    """Closes the clients a test opens (``clients.append(...)``)."""
    opened: list[Any] = []
    yield opened
    for client in opened:
        await client.close()


def http(server: Server, opened: list[Any]) -> Any:
    client = httpclient.InferenceServerClient(server.http_url)
    opened.append(client)
    return client


def grpc(server: Server, opened: list[Any]) -> Any:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    opened.append(client)
    return client


async def http_infer(client: Any, model: str, **kw: Any) -> np.ndarray:
    inp = httpclient.InferInput("INPUT0", [4], "FP32")
    inp.set_data_from_numpy(DATA)
    result = await client.infer(model, [inp], **kw)
    return np.asarray(result.as_numpy("OUTPUT0"))


async def grpc_infer(client: Any, model: str) -> np.ndarray:
    inp = grpcclient.InferInput("INPUT0", [4], "FP32")
    inp.set_data_from_numpy(DATA)
    result = await client.infer(model, [inp])
    return np.asarray(result.as_numpy("OUTPUT0"))


async def scrape(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every tritonx_* sample of ``/metrics``: (sample name, sorted labels) → value."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{server.metrics_url}/metrics") as resp:
            text = await resp.text()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("tritonx_"):
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def ready(server: Server) -> list[str]:
    return sorted(r.name for r in server.repository_index() if r.state is tritonx.ModelState.READY)


async def until(condition: Any, what: str, timeout: float = 30.0) -> None:
    """Wait (bounded) for ``condition()`` to hold, looking again as the loop turns."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


class LogEvent(logging.Handler):
    """Sets an event when a record of logger ``name`` contains ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


# ---------------------------------------------------------------------------------- loading


async def test_every_transport_loads_its_model_on_demand(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    names = ["fast", "slow", "unary", "stream", "meta", "config", "gen", "bls"]
    for i, name in enumerate(names):
        gate_model(repo, name, add=i)
    async with serving(repo) as server:
        assert ready(server) == []  # nothing loads at start-up
        assert [r.state for r in server.repository_index()] == [None] * len(names)
        h, g = http(server, clients), grpc(server, clients)
        # readiness is no request for the model: it says the model is not loaded
        assert not await h.is_model_ready("fast") and not await g.is_model_ready("fast")
        # HTTP /infer: the fast path, and aiohttp's (a compressed body goes there)
        np.testing.assert_array_equal(await http_infer(h, "fast"), DATA + 0)
        np.testing.assert_array_equal(
            await http_infer(h, "slow", request_compression_algorithm="gzip"), DATA + 1
        )
        np.testing.assert_array_equal(await grpc_infer(g, "unary"), DATA + 2)

        async def requests() -> AsyncIterator[dict[str, Any]]:
            inp = grpcclient.InferInput("INPUT0", [4], "FP32")
            inp.set_data_from_numpy(DATA)
            yield {"model_name": "stream", "inputs": [inp]}

        async for result, error in g.stream_infer(requests()):
            assert error is None
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA + 3)
        assert (await h.get_model_metadata("meta"))["name"] == "meta"
        assert (await g.get_model_config("config", as_json=True))["config"]["name"] == "config"
        async with aiohttp.ClientSession() as session:
            url = f"http://{server.http_url}/v2/models/gen/generate"
            async with session.post(url, json={"INPUT0": DATA.tolist()}) as resp:
                assert resp.status == 200, await resp.text()
                assert (await resp.json())["OUTPUT0"] == (DATA + 6).tolist()
        # in-process (what a BLS call or an ensemble step goes through)
        response = await server.infer(InferenceRequest("bls", {"INPUT0": DATA}))
        np.testing.assert_array_equal(response.outputs["OUTPUT0"], DATA + 7)
        assert ready(server) == sorted(names)
        assert await h.is_model_ready("fast") and await g.is_model_ready("fast")
        samples = await scrape(server)
        for name in names:
            assert value(samples, "tritonx_model_on_demand_loads_total", model=name) == 1
            assert value(samples, "tritonx_model_load_waits_total", model=name) == 1
        assert value(samples, "tritonx_loaded_models") == len(names)
        # the index says what each model added to the server's memory
        index = await h.get_model_repository_index()
        assert all(isinstance(row["memory_bytes"], int) for row in index), index
        assert Gates.loads == dict.fromkeys(names, 1)


async def test_concurrent_requests_share_one_load(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    gate_model(repo, "m", add=5)
    Gates.load_gates["m"] = gate = threading.Event()
    Gates.load_started["m"] = started = threading.Event()
    async with serving(repo) as server:
        h, g = http(server, clients), grpc(server, clients)
        calls = [asyncio.ensure_future(http_infer(h, "m")) for _ in range(3)]
        calls += [asyncio.ensure_future(grpc_infer(g, "m")) for _ in range(3)]
        assert await asyncio.to_thread(started.wait, 30)
        # every request has reached the server and waits for the one load
        await until(lambda: len(server.repository_index()) == 1, "the index")
        gate.set()
        for result in await asyncio.gather(*calls):
            np.testing.assert_array_equal(result, DATA + 5)
        assert Gates.loads == {"m": 1}
        samples = await scrape(server)
        assert value(samples, "tritonx_model_on_demand_loads_total", model="m") == 1
        assert value(samples, "tritonx_model_load_waits_total", model="m") == 6
        assert value(samples, "tritonx_model_load_wait_seconds_total", model="m") > 0


async def test_unknown_model_is_refused_without_a_load(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    gate_model(repo, "m")
    async with serving(repo) as server:
        h, g = http(server, clients), grpc(server, clients)
        with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope'"):
            await http_infer(h, "nope")
        with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope'"):
            await grpc_infer(g, "nope")
        samples = await scrape(server)
        assert not [key for key in samples if ("model", "nope") in key[1]]  # no series for it
        assert Gates.loads == {}


async def test_a_failed_load_fails_its_waiters_then_backs_off(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    repo.add_identity("bad", parameters={"fail_load": "1"})
    async with serving(repo) as server:
        h = http(server, clients)
        expected = "failed to load model 'bad' on demand: .*asked to fail its load"
        results = await asyncio.gather(
            *(http_infer(h, "bad") for _ in range(4)), return_exceptions=True
        )
        for result in results:
            assert isinstance(result, InferenceServerException), result
            assert result.status() == "503"
            assert "asked to fail its load" in str(result)
        # the model is not ready and says why; the server still serves the others
        assert not await h.is_model_ready("bad")
        assert "asked to fail its load" in str(await h.get_model_repository_index())
        assert await h.is_server_ready()
        # the requests right after it get the same error: no load storm
        for _ in range(20):
            with pytest.raises(InferenceServerException, match=expected):
                await http_infer(h, "bad")
        failures = value(
            await scrape(server), "tritonx_model_on_demand_load_failures_total", model="bad"
        )
        # one attempt, then one per back-off (1 s, 2 s, 4 s...): 20 quick requests are no
        # storm (a 5th attempt would need 15 s of them; no timing asserted closer than that)
        assert 1 <= failures <= 4, failures
        repo.add_identity("bad")  # mended: a later request (after the back-off) loads it

        async def answers() -> bool:
            try:
                await http_infer(h, "bad")
            except InferenceServerException:
                return False
            return True

        deadline = time.monotonic() + 30
        while not await answers():
            assert time.monotonic() < deadline, "the mended model never loaded"
            await asyncio.sleep(0.05)
        assert ready(server) == ["bad"]


async def test_a_request_that_waits_too_long_is_refused(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    gate_model(repo, "m")
    Gates.load_gates["m"] = gate = threading.Event()
    async with serving(repo, model_load_on_demand_timeout_secs=0.2) as server:
        h = http(server, clients)
        with pytest.raises(InferenceServerException, match=r"is not loaded after waiting 0\.2 s"):
            await http_infer(h, "m")
        gate.set()  # the load went on: the next request finds the model loaded
        await until(lambda: ready(server) == ["m"], "the load")
        np.testing.assert_array_equal(await http_infer(h, "m"), DATA)


# ---------------------------------------------------------------------------------- budgets


async def test_the_least_recently_used_model_is_unloaded(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    for i, name in enumerate("abcd"):
        gate_model(repo, name, add=i)
    async with serving(repo, max_loaded_models=2, **LRU) as server:
        h, g = http(server, clients), grpc(server, clients)
        for name, loaded in (
            ("a", ["a"]),
            ("b", ["a", "b"]),
            ("a", ["a", "b"]),
            ("c", ["a", "c"]),  # b was the least recently used
            ("d", ["c", "d"]),
        ):
            np.testing.assert_array_equal(await http_infer(h, name), DATA + "abcd".index(name))
            assert ready(server) == loaded, name
        await g.get_model_metadata("c")  # a lookup counts as a use
        np.testing.assert_array_equal(await grpc_infer(g, "a"), DATA)
        assert ready(server) == ["a", "c"]
        samples = await scrape(server)
        evicted = {
            model: value(samples, "tritonx_model_evictions_total", model=model, reason="budget")
            for model in "abcd"
        }
        assert evicted == {"a": 1, "b": 1, "c": 0, "d": 1}
        assert value(samples, "tritonx_model_on_demand_loads_total", model="a") == 2


async def test_a_busy_model_is_not_unloaded_until_its_request_ends(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    gate_model(repo, "busy", add=1)
    gate_model(repo, "next", add=2)
    Gates.exec_gates["busy"] = gate = threading.Event()
    Gates.exec_started["busy"] = executing = threading.Event()
    with logged("waiting for a loaded model to go idle to load 'next'") as waiting:
        async with serving(repo, max_loaded_models=1, **LRU) as server:
            h = http(server, clients)
            busy = asyncio.ensure_future(http_infer(h, "busy"))
            assert await asyncio.to_thread(executing.wait, 30)
            following = asyncio.ensure_future(http_infer(h, "next"))
            assert await asyncio.to_thread(waiting.wait, 30)
            assert ready(server) == ["busy"]
            gate.set()
            np.testing.assert_array_equal(await busy, DATA + 1)  # not cut by an unload
            np.testing.assert_array_equal(await following, DATA + 2)
            record = Gates.record
            assert record.index(("executed", "busy")) < record.index(("load", "next"))
            assert ready(server) == ["next"]


async def test_pinned_models_stay_and_a_full_budget_is_refused(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    gate_model(repo, "pinned")
    gate_model(repo, "other", add=1)
    gate_model(repo, "marked", add=2, tritonx_pinned="true")
    async with serving(repo, load_model=("pinned",), max_loaded_models=1) as server:
        h = http(server, clients)
        assert ready(server) == ["pinned"]  # loaded at start-up
        message = "--max-loaded-models 1 reached and no loaded model can be unloaded"
        with pytest.raises(InferenceServerException, match=message) as refused:
            await http_infer(h, "other")
        assert refused.value.status() == "503"
        assert ready(server) == ["pinned"]
        np.testing.assert_array_equal(await http_infer(h, "pinned"), DATA)
    # a model whose config pins it
    async with serving(repo, max_loaded_models=1) as server:
        h = http(server, clients)
        np.testing.assert_array_equal(await http_infer(h, "marked"), DATA + 2)
        with pytest.raises(InferenceServerException, match=message):
            await http_infer(h, "other")
        assert ready(server) == ["marked"]


async def test_idle_models_are_unloaded(repo: ModelRepositoryBuilder, clients: list[Any]) -> None:
    gate_model(repo, "idle", add=1)
    gate_model(repo, "pinned", add=2)
    async with serving(repo, load_model=("pinned",), model_idle_unload_secs=0.2) as server:
        h = http(server, clients)
        np.testing.assert_array_equal(await http_infer(h, "idle"), DATA + 1)
        await until(lambda: ready(server) == ["pinned"], "the idle unload")
        samples = await scrape(server)
        assert value(samples, "tritonx_model_evictions_total", model="idle", reason="idle") == 1
        assert value(samples, "tritonx_model_evictions_total", model="pinned", reason="idle") == 0
        np.testing.assert_array_equal(await http_infer(h, "idle"), DATA + 1)  # loads again


def _ensemble(repo: ModelRepositoryBuilder) -> None:
    gate_model(repo, "inner", add=3)
    gate_model(repo, "x", add=1)
    step = '{ model_name: "inner" model_version: -1 input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } }'
    repo.add(
        "ens",
        platform="ensemble",
        inputs=[("INPUT0", "FP32", [-1])],
        outputs=[("OUTPUT0", "FP32", [-1])],
        extra="ensemble_scheduling { step [ "
        + step.replace('value: "IN"', 'value: "INPUT0"').replace('value: "OUT"', 'value: "OUTPUT0"')
        + " ] }\n",
    )


async def test_an_ensemble_loads_its_composing_models_and_keeps_them(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    _ensemble(repo)
    async with serving(repo, max_loaded_models=2, **LRU) as server:
        h = http(server, clients)
        np.testing.assert_array_equal(await http_infer(h, "ens"), DATA + 3)
        assert ready(server) == ["ens", "inner"]
        # room for x: the ensemble may go, its composing model not while it is loaded
        np.testing.assert_array_equal(await http_infer(h, "x"), DATA + 1)
        assert ready(server) == ["inner", "x"]
        np.testing.assert_array_equal(await http_infer(h, "ens"), DATA + 3)
        assert ready(server) == ["ens", "inner"]


async def test_explicit_unload_and_load_keep_their_meaning(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    for i, name in enumerate("abc"):
        gate_model(repo, name, add=i)
    async with serving(repo, max_loaded_models=2) as server:
        h = http(server, clients)
        await h.load_model("a")
        await h.load_model("b")
        assert ready(server) == ["a", "b"]
        await h.load_model("c")  # the load API makes room too
        assert ready(server) == ["b", "c"]
        await h.unload_model("b")
        assert ready(server) == ["c"]
        np.testing.assert_array_equal(await http_infer(h, "b"), DATA + 1)  # loads again
        assert ready(server) == ["b", "c"]


async def test_poll_mode_loads_nothing_at_start(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    gate_model(repo, "a", add=1)
    gate_model(repo, "b", add=2)
    async with serving(repo, model_control_mode="poll", repository_poll_secs=0) as server:
        assert ready(server) == []
        h = http(server, clients)
        np.testing.assert_array_equal(await http_infer(h, "a"), DATA + 1)
        await server.poll_repository()  # a poll reloads what is loaded, loads nothing new
        assert ready(server) == ["a"]
        gate_model(repo, "a", add=10)
        (repo.root / "a" / "config.pbtxt").touch()
        await server.poll_repository()
        np.testing.assert_array_equal(await http_infer(h, "a"), DATA + 10)
        assert ready(server) == ["a"]
        shutil.rmtree(repo.root / "a")  # a poll unloads a removed model
        await server.poll_repository()
        assert ready(server) == []
        np.testing.assert_array_equal(await http_infer(h, "b"), DATA + 2)


# ---------------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"model_load_on_demand": True},
            "--model-load-on-demand requires --model-control-mode=explicit or poll",
        ),
        (
            {"model_control_mode": "explicit", "max_loaded_models": 2},
            "--max-loaded-models requires --model-load-on-demand=true",
        ),
        (
            {"model_control_mode": "explicit", "model_memory_budget": 1 << 30},
            "--model-memory-budget requires --model-load-on-demand=true",
        ),
        (
            {"model_control_mode": "explicit", "model_idle_unload_secs": 5.0},
            "--model-idle-unload-secs requires --model-load-on-demand=true",
        ),
        (
            {**ON_DEMAND, "max_loaded_models": 1, "load_model": ("a", "b")},
            "--max-loaded-models 1 cannot hold the 2 models listed with --load-model",
        ),
        ({**ON_DEMAND, "max_loaded_models": -1}, "--max-loaded-models must be 0 or more, got -1"),
        (
            {**ON_DEMAND, "model_min_residency_secs": -1.0},
            "--model-min-residency-secs must be 0 or more, got -1",
        ),
        (
            {**ON_DEMAND, "unknown_model_rescan_secs": -1.0},
            "--unknown-model-rescan-secs must be 0 or more, got -1",
        ),
    ],
)
async def test_settings_are_checked(
    repo: ModelRepositoryBuilder, overrides: dict[str, Any], message: str
) -> None:
    server = Server(loopback_settings(repo.root, **overrides), plugin_manager=plugins())
    with pytest.raises(TritonXError, match=message) as refused:
        await server.start()
    assert refused.value.code is Code.INVALID_ARG


def test_the_cli_refuses_a_budget_without_loading_on_demand(repo: ModelRepositoryBuilder) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "serve",
            "--model-repository",
            str(repo.root),
            "--model-control-mode=explicit",
            "--max-loaded-models=3",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "--max-loaded-models requires --model-load-on-demand=true" in result.output


async def test_pinned_models_that_do_not_fit_the_memory_budget_stop_the_start(
    repo: ModelRepositoryBuilder,
) -> None:
    gate_model(repo, "a", ballast_mb="32")
    gate_model(repo, "b", ballast_mb="32")
    server = Server(
        loopback_settings(
            repo.root, **ON_DEMAND, load_model=("a", "b"), model_memory_budget=48 << 20
        ),
        plugin_manager=plugins(),
    )
    # each pinned model holds 32 MB: the second one does not fit
    with pytest.raises(
        TritonXError, match=r"--model-memory-budget 50331648 bytes \(\d+ bytes in use\) reached"
    ):
        await server.start()


async def test_the_status_page_shows_memory_and_budgets(repo: ModelRepositoryBuilder) -> None:
    gate_model(repo, "a", ballast_mb="8")
    gate_model(repo, "b")
    async with serving(repo, max_loaded_models=4, model_memory_budget=1 << 30) as server:
        await server.infer(InferenceRequest("a", {"INPUT0": DATA}))
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://{server.http_url}/status/data") as resp:
                data = await resp.json()
        models = {m["name"]: m for m in data["models"]}
        assert models["a"]["memory_bytes"] >= 8 << 20  # its 8 MB ballast, measured
        assert models["b"]["memory_bytes"] is None  # not loaded
        residency = data["residency"]
        assert residency["loaded_models"] == 1 and residency["max_loaded_models"] == 4
        assert residency["memory_budget_bytes"] == 1 << 30
        assert residency["memory_used_bytes"] >= 8 << 20
        assert (residency["on_demand_loads"], residency["evictions"]) == (1, 0)


async def test_a_live_sequence_keeps_its_model(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    repo.add(
        "seq",
        backend="gate",
        max_batch_size=4,
        inputs=[("INPUT0", "FP32", [-1])],
        outputs=[("OUTPUT0", "FP32", [-1])],
        parameters={"add": "1"},
        extra="sequence_batching { max_sequence_idle_microseconds: 600000000 }\n",
    )
    gate_model(repo, "other", add=2)
    with logged("waiting for a loaded model to go idle to load 'other'") as waiting:
        async with serving(repo, max_loaded_models=1, **LRU) as server:
            h = http(server, clients)

            async def step(**sequence: Any) -> np.ndarray:
                inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
                inp.set_data_from_numpy(DATA.reshape(1, 4))
                result = await h.infer("seq", [inp], sequence_id=7, **sequence)
                return np.asarray(result.as_numpy("OUTPUT0"))

            first = await step(sequence_start=True)
            np.testing.assert_array_equal(first, DATA.reshape(1, 4) + 1)
            following = asyncio.ensure_future(http_infer(h, "other"))
            # no request in flight, but the sequence is live: the load waits for its end
            assert await asyncio.to_thread(waiting.wait, 30)
            assert ready(server) == ["seq"]
            last = await step(sequence_end=True)
            np.testing.assert_array_equal(last, DATA.reshape(1, 4) + 1)
            np.testing.assert_array_equal(await following, DATA + 2)
            assert ready(server) == ["other"]


async def test_a_client_leaving_while_its_model_loads(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    """The fast path's request goes away during the load: the load completes, the server
    goes on serving."""
    gate_model(repo, "m", add=1)
    Gates.load_gates["m"] = gate = threading.Event()
    Gates.load_started["m"] = started = threading.Event()
    async with serving(repo) as server:
        host, port = server.http_url.rsplit(":", 1)
        body = b'{"inputs":[{"name":"INPUT0","shape":[4],"datatype":"FP32","data":[0,1,2,3]}]}'
        _reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        await writer.drain()
        assert await asyncio.to_thread(started.wait, 30)
        writer.close()
        await writer.wait_closed()
        gate.set()
        await until(lambda: ready(server) == ["m"], "the load")
        np.testing.assert_array_equal(await http_infer(http(server, clients), "m"), DATA + 1)


async def test_a_stream_loads_decoupled_and_ordinary_models(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    """ModelStreamInfer: a decoupled model loaded on demand streams its responses as they
    come; an ordinary one sent after it answers in the stream too."""
    repo.add_identity(
        "dec",
        dims=[4],
        parameters={"repeat": "3"},
        extra="model_transaction_policy { decoupled: true }\n",
    )
    gate_model(repo, "plain", add=1)
    async with serving(repo) as server:
        g = grpc(server, clients)

        async def requests() -> AsyncIterator[dict[str, Any]]:
            for model in ("dec", "plain"):
                inp = grpcclient.InferInput("INPUT0", [4], "FP32")
                inp.set_data_from_numpy(DATA)
                yield {"model_name": model, "inputs": [inp], "request_id": model}

        answers: dict[str, list[np.ndarray]] = {"dec": [], "plain": []}
        async for result, error in g.stream_infer(requests()):
            assert error is None, error
            if result.as_numpy("OUTPUT0") is not None:
                response = result.get_response()
                answers[response.id].append(result.as_numpy("OUTPUT0"))
        assert [a.tolist() for a in answers["dec"]] == [DATA.tolist()] * 3
        assert [a.tolist() for a in answers["plain"]] == [(DATA + 1).tolist()]
        assert ready(server) == ["dec", "plain"]


async def test_a_model_larger_than_the_memory_budget_is_refused(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    gate_model(repo, "big", ballast_mb="32")
    gate_model(repo, "small", add=1)
    async with serving(repo, model_memory_budget=16 << 20, **LRU) as server:
        h = http(server, clients)
        message = (
            r"cannot load model 'big': --model-memory-budget 16777216 bytes \(\d+ bytes in use\) "
            "reached and no loaded model can be unloaded"
        )
        with pytest.raises(InferenceServerException, match=message) as refused:
            await http_infer(h, "big")
        assert refused.value.status() == "503"
        assert ready(server) == []  # loaded, measured, unloaded again
        np.testing.assert_array_equal(await http_infer(h, "small"), DATA + 1)
        with pytest.raises(InferenceServerException, match="cannot load model 'big'"):
            await http_infer(h, "big")  # (no back-off: the budget's doing, not the model's)
        assert Gates.loads["big"] == 2


async def test_cached_models_load_on_demand_and_are_evicted(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    """With the response cache: a cached model loads on demand, its hits count as uses, and
    a model evicted and loaded again answers from a fresh load (its cached answers went with
    its unload)."""
    for name, add in (("c1", 1), ("c2", 2)):
        repo.add(
            name,
            backend="gate",
            inputs=[("INPUT0", "FP32", [-1])],
            outputs=[("OUTPUT0", "FP32", [-1])],
            parameters={"add": str(add)},
            extra="response_cache { enable: true }\n",
        )
    async with serving(
        repo, max_loaded_models=1, cache_config={"local": {"size": "1048576"}}, **LRU
    ) as server:
        h = http(server, clients)
        for _ in range(2):  # a miss, then a hit
            np.testing.assert_array_equal(await http_infer(h, "c1"), DATA + 1)
        assert [r for r in Gates.record if r[0] == "executed"] == [("executed", "c1")]
        np.testing.assert_array_equal(await http_infer(h, "c2"), DATA + 2)
        assert ready(server) == ["c2"]
        gate_model(repo, "c1", add=10)  # c1's files change while it is not loaded
        (repo.root / "c1" / "config.pbtxt").write_text(
            (repo.root / "c1" / "config.pbtxt").read_text() + "response_cache { enable: true }\n"
        )
        np.testing.assert_array_equal(await http_infer(h, "c1"), DATA + 10)
        assert ready(server) == ["c1"]
        assert Gates.loads == {"c1": 2, "c2": 1}


# ---------------------------------------------------------------------------------- refusals


def scans(samples: dict[Any, float]) -> float:
    """Reads of every repository so far (the series must be there)."""
    key = ("tritonx_model_repository_scans_total", ())
    assert key in samples, "no tritonx_model_repository_scans_total"
    return samples[key]


async def refused_as_unknown(h: Any, g: Any, name: str) -> None:
    """``name`` gets Triton's unknown-model answer over HTTP (404) and gRPC (NOT_FOUND)."""
    message = f"Request for unknown model: '{name}' is not found"
    with pytest.raises(InferenceServerException) as http_refusal:
        await http_infer(h, name)
    assert (http_refusal.value.status(), http_refusal.value.message()) == ("404", message)
    with pytest.raises(InferenceServerException) as grpc_refusal:
        await grpc_infer(g, name)
    assert grpc_refusal.value.status() == "StatusCode.NOT_FOUND"
    assert grpc_refusal.value.message() == message


async def test_unknown_names_are_refused_without_reading_the_repositories(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    gate_model(repo, "m")
    async with serving(repo, unknown_model_rescan_secs=3600) as server:
        h, g = http(server, clients), grpc(server, clients)
        before = scans(await scrape(server))
        assert before >= 1  # the start-up's read
        for i in range(100):
            await refused_as_unknown(h, g, f"nope-{i}")
        with pytest.raises(InferenceServerException, match="Request for unknown model: 'x'"):
            await h.get_model_metadata("x")
        samples = await scrape(server)
        assert scans(samples) == before  # answered from the last read
        assert not [key for key in samples if any(v.startswith("nope") for _, v in key[1])]
        assert [r.name for r in server.repository_index()] == ["m"]  # (this reads them)
        # a folder added since the last read is not seen by a request for it...
        gate_model(repo, "late", add=4)
        await refused_as_unknown(h, g, "late")
        read = scans(await scrape(server))
        # ... until something reads the repositories again: here the index API
        assert [row["name"] for row in await h.get_model_repository_index()] == ["late", "m"]
        assert scans(await scrape(server)) == read + 1
        np.testing.assert_array_equal(await grpc_infer(g, "late"), DATA + 4)
        assert Gates.loads == {"late": 1}


async def test_the_load_and_unload_apis_read_the_repositories_again(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    gate_model(repo, "a")
    async with serving(repo, unknown_model_rescan_secs=3600) as server:
        h, g = http(server, clients), grpc(server, clients)
        gate_model(repo, "b", add=1)
        await refused_as_unknown(h, g, "b")
        await g.load_model("a")  # a load of any model reads the repositories
        np.testing.assert_array_equal(await http_infer(h, "b"), DATA + 1)
        gate_model(repo, "c", add=2)
        await refused_as_unknown(h, g, "c")
        await h.unload_model("nothing-of-that-name")  # (succeeds, as in Triton)
        np.testing.assert_array_equal(await grpc_infer(g, "c"), DATA + 2)
        shutil.rmtree(repo.root / "c")
        await h.unload_model("c")
        await refused_as_unknown(h, g, "c")  # a removed model is unknown again


async def test_a_poll_reads_the_repositories_again(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    gate_model(repo, "a")
    settings = {"model_control_mode": "poll", "unknown_model_rescan_secs": 3600}
    async with serving(repo, repository_poll_secs=0, **settings) as server:
        h, g = http(server, clients), grpc(server, clients)
        gate_model(repo, "b", add=1)
        await refused_as_unknown(h, g, "b")
        await server.poll_repository()
        np.testing.assert_array_equal(await http_infer(h, "b"), DATA + 1)
    # --repository-poll-secs: the server's own polls
    async with serving(repo, repository_poll_secs=0.05, **settings) as server:
        h, g = http(server, clients), grpc(server, clients)
        gate_model(repo, "c", add=2)
        read = scans(await scrape(server))
        sampled: list[float] = []

        async def polled() -> bool:
            sampled.append(scans(await scrape(server)))
            return sampled[-1] > read + 1  # a poll that began after "c" was written

        deadline = time.monotonic() + 30
        while not await polled():
            assert time.monotonic() < deadline, "no repository poll"
            await asyncio.sleep(0.01)
        np.testing.assert_array_equal(await grpc_infer(g, "c"), DATA + 2)


async def test_unknown_model_rescan_secs_bounds_how_old_the_last_read_may_be(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    gate_model(repo, "m")
    async with serving(repo, unknown_model_rescan_secs=0) as server:
        h, g = http(server, clients), grpc(server, clients)
        before = scans(await scrape(server))
        for i in range(5):
            await refused_as_unknown(h, g, f"nope-{i}")
        assert scans(await scrape(server)) == before + 10  # one read for each
        gate_model(repo, "late", add=3)
        np.testing.assert_array_equal(await http_infer(h, "late"), DATA + 3)


async def test_a_model_loaded_less_than_the_minimum_residency_is_not_unloaded_for_another(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    for i, name in enumerate("abc"):
        gate_model(repo, name, add=i)
    async with serving(repo, max_loaded_models=1, model_min_residency_secs=3600) as server:
        h, g = http(server, clients), grpc(server, clients)
        np.testing.assert_array_equal(await http_infer(h, "a"), DATA)
        read = scans(await scrape(server))
        message = (
            r"cannot load model 'b': --max-loaded-models 1 reached and every loaded model that "
            r"could be unloaded was loaded less than 3600 s ago \(--model-min-residency-secs\); "
            r"the first may be unloaded in \d+\.\d\d s"
        )
        for _ in range(3):
            with pytest.raises(InferenceServerException, match=message) as refused:
                await http_infer(h, "b")
            assert refused.value.status() == "503"
            with pytest.raises(InferenceServerException, match=message) as refused:
                await grpc_infer(g, "b")
            assert refused.value.status() == "StatusCode.UNAVAILABLE"
        np.testing.assert_array_equal(await grpc_infer(g, "a"), DATA)
        samples = await scrape(server)
        assert value(samples, "tritonx_model_min_residency_refusals_total", model="b") == 6
        assert value(samples, "tritonx_model_min_residency_seconds") == 3600
        assert value(samples, "tritonx_model_evictions_total", model="a", reason="budget") == 0
        assert scans(samples) == read  # refused before any read of the repositories
        assert Gates.loads == {"a": 1}  # and before any load
        assert ready(server) == ["a"]
        # an unknown name is still unknown (not refused for want of room)
        await refused_as_unknown(h, g, "nope")
        # the load API is not held back: an operator's load makes room
        await h.load_model("b")
        assert ready(server) == ["b"]
        with pytest.raises(InferenceServerException, match="cannot load model 'c'"):
            await http_infer(h, "c")


async def test_a_model_may_make_room_once_its_minimum_residency_has_passed(
    repo: ModelRepositoryBuilder, clients: list[Any]
) -> None:
    gate_model(repo, "a")
    gate_model(repo, "b", add=1)
    async with serving(repo, max_loaded_models=1, model_min_residency_secs=0.2) as server:
        h = http(server, clients)
        np.testing.assert_array_equal(await http_infer(h, "a"), DATA)
        deadline = time.monotonic() + 30
        while True:  # refused while "a" is younger than 0.2 s, then served
            try:
                np.testing.assert_array_equal(await http_infer(h, "b"), DATA + 1)
                break
            except InferenceServerException as exc:
                assert "--model-min-residency-secs" in str(exc), exc
                assert time.monotonic() < deadline, "b never loaded"
        assert ready(server) == ["b"]
        samples = await scrape(server)
        assert value(samples, "tritonx_model_evictions_total", model="a", reason="budget") == 1
