"""Ensembles (``platform: "ensemble"``) through tritonclient and the in-process server: the
data flow over composing models, parallel branches, validation with Triton's messages, step
failures and cancellation, decoupled ensembles over ModelStreamInfer, statistics, batching in
the composing models, and the lifecycle (composing models first, readiness, unload_dependents,
reloads under traffic)."""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import tritonclient.grpc as syncgrpc
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

import tritonx
from tritonx import InferenceRequest, InferenceResponse, ModelState, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.errors import Code, TritonXError
from tritonx.testing import ModelRepositoryBuilder, identity, loopback_settings

NO_LISTENERS = {"allow_http": False, "allow_grpc": False, "allow_metrics": False}

# ---------------------------------------------------------------- a recording test backend


class ArithBackend(tritonx.Backend):
    """``OUT = sum(inputs) + value`` (op ``add``) or ``first input * value`` (op ``mul``).

    Parameters: ``op``, ``value``, ``delay_ms`` (sleep in every execute), ``load_delay_ms``,
    ``fail_value`` (a request whose first element equals it fails). Every execution is recorded as
    ``(model, start, end, batch size)`` in :attr:`spans`.
    """

    name = "arith"
    spans: ClassVar[list[tuple[str, float, float, int]]] = []
    lock = threading.Lock()

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        time.sleep(float(ctx.parameters.get("load_delay_ms", "0")) / 1000)
        return ArithInstance(ctx)

    @classmethod
    def of(cls, model: str) -> list[tuple[float, float, int]]:
        with cls.lock:
            return [(s, e, b) for m, s, e, b in cls.spans if m == model]


class ArithInstance(tritonx.ModelInstance):
    def __init__(self, ctx: tritonx.LoadContext) -> None:
        p = ctx.parameters
        self.model = ctx.model_name
        self.op = p.get("op", "add")
        self.value = float(p.get("value", "0"))
        self.delay = float(p.get("delay_ms", "0")) / 1000
        self.fail_value = p.get("fail_value")
        self.inputs = [t.name for t in ctx.config.inputs]
        self.output = ctx.config.outputs[0]

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        start = time.monotonic()
        time.sleep(self.delay)
        out: list[InferenceResponse] = []
        for r in requests:
            arrays = [r.inputs[n] for n in self.inputs if n in r.inputs]
            first = arrays[0].reshape(-1)
            if self.fail_value is not None and first.size and first[0] == float(self.fail_value):
                out.append(
                    InferenceResponse.failed(
                        TritonXError(f"{self.model} refuses {self.fail_value}", Code.INVALID_ARG)
                    )
                )
                continue
            if self.op == "mul":
                y = arrays[0] * self.value
            else:
                y = sum(arrays[1:], arrays[0]) + self.value
            out.append(InferenceResponse(outputs={self.output.name: y.astype(arrays[0].dtype)}))
        with ArithBackend.lock:
            batch = sum(r.batch_size for r in requests)
            ArithBackend.spans.append((self.model, start, time.monotonic(), batch))
        return out


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(ArithBackend)


@pytest.fixture(autouse=True)
def _clear_records() -> None:
    ArithBackend.spans.clear()
    identity.IdentityBackend.batches.clear()


def make_server(root: Path, **overrides: Any) -> Server:
    pm = make_plugin_manager(autoload=False, extra=[identity, Plugin()])
    return Server(loopback_settings(root, **overrides), plugin_manager=pm)


# ---------------------------------------------------------------- repository helpers

Tensor = tuple[str, str, Sequence[int]]


def arith(
    repo: ModelRepositoryBuilder,
    name: str,
    op: str = "add",
    value: float = 0,
    *,
    inputs: Iterable[str] = ("IN",),
    dims: Sequence[int] = (4,),
    dtype: str = "FP32",
    max_batch_size: int = 8,
    extra: str = "",
    params: Mapping[str, str] | None = None,
) -> None:
    repo.add(
        name,
        backend="arith",
        max_batch_size=max_batch_size,
        inputs=[(n, dtype, dims) for n in inputs],
        outputs=[("OUT", dtype, dims)],
        parameters={"op": op, "value": str(value), **(params or {})},
        extra=extra,
    )


def step(
    model: str, inputs: Mapping[str, str], outputs: Mapping[str, str], version: int = -1
) -> str:
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version} {ins} {outs} }}'


def ensemble(
    repo: ModelRepositoryBuilder,
    name: str,
    steps: Sequence[str],
    *,
    inputs: Sequence[Tensor] = (("IN", "FP32", [4]),),
    outputs: Sequence[Tensor] = (("OUT", "FP32", [4]),),
    max_batch_size: int = 8,
    extra: str = "",
    scheduling_extra: str = "",
) -> None:
    repo.add(
        name,
        platform="ensemble",
        max_batch_size=max_batch_size,
        inputs=inputs,
        outputs=outputs,
        extra=f"ensemble_scheduling {{ step [ {', '.join(steps)} ] {scheduling_extra} }}\n" + extra,
    )


def chain(repo: ModelRepositoryBuilder, name: str = "chain", **step_params: str) -> None:
    """IN → add1 → mul3 → add5 → OUT, i.e. OUT = (IN + 1) * 3 + 5."""
    arith(repo, "add1", "add", 1, params=step_params)
    arith(repo, "mul3", "mul", 3)
    arith(repo, "add5", "add", 5)
    ensemble(
        repo,
        name,
        [
            step("add1", {"IN": "IN"}, {"OUT": "a"}),
            step("mul3", {"IN": "a"}, {"OUT": "b"}),
            step("add5", {"IN": "b"}, {"OUT": "OUT"}),
        ],
    )


def diamond(repo: ModelRepositoryBuilder, delay_ms: int = 0) -> None:
    """IN → left (+1) and right (*2) in parallel → both (a + b) → OUT = 3 * IN + 1; a second
    output ``LEFT`` returns the left branch."""
    arith(repo, "left", "add", 1, params={"delay_ms": str(delay_ms)})
    arith(repo, "right", "mul", 2, params={"delay_ms": str(delay_ms)})
    arith(repo, "both", "add", 0, inputs=("A", "B"))
    ensemble(
        repo,
        "diamond",
        [
            step("left", {"IN": "IN"}, {"OUT": "LEFT"}),
            step("right", {"IN": "IN"}, {"OUT": "b"}),
            step("both", {"A": "LEFT", "B": "b"}, {"OUT": "OUT"}),
        ],
        outputs=(("OUT", "FP32", [4]), ("LEFT", "FP32", [4])),
    )


def http_input(array: np.ndarray, name: str = "IN") -> Any:
    tensor = httpclient.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return tensor


def grpc_input(array: np.ndarray, name: str = "IN", datatype: str = "FP32") -> Any:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def stats_of(stats: dict[str, Any], model: str) -> dict[str, Any]:
    (entry,) = [s for s in stats["model_stats"] if s["name"] == model]
    return entry


X = np.arange(8, dtype=np.float32).reshape(2, 4)


# ---------------------------------------------------------------- composition


async def test_three_step_chain_returns_the_composed_result_over_http_and_grpc(
    tmp_path: Path,
) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    chain(repo)
    async with make_server(repo.root) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            meta = await http.get_model_metadata("chain")
            assert meta["platform"] == "ensemble"
            result = await http.infer("chain", [http_input(X)], request_id="r1")
            np.testing.assert_array_equal(result.as_numpy("OUT"), (X + 1) * 3 + 5)
            assert result.get_response()["id"] == "r1"
            assert [o["name"] for o in result.get_response()["outputs"]] == ["OUT"]
            result = await grpc.infer("chain", [grpc_input(X)])
            np.testing.assert_array_equal(result.as_numpy("OUT"), (X + 1) * 3 + 5)
            assert result.get_response().model_name == "chain"
        finally:
            await http.close()
            await grpc.close()


async def test_requested_outputs_only_are_returned(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    diamond(repo)
    async with make_server(repo.root) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            both = await client.infer("diamond", [grpc_input(X)])
            np.testing.assert_array_equal(both.as_numpy("OUT"), 3 * X + 1)
            np.testing.assert_array_equal(both.as_numpy("LEFT"), X + 1)
            left = await client.infer(
                "diamond", [grpc_input(X)], outputs=[grpcclient.InferRequestedOutput("LEFT")]
            )
            assert [o.name for o in left.get_response().outputs] == ["LEFT"]
            np.testing.assert_array_equal(left.as_numpy("LEFT"), X + 1)
        finally:
            await client.close()


async def test_parallel_branches_run_concurrently(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    diamond(repo, delay_ms=400)
    async with make_server(repo.root, allow_http=False, allow_metrics=False) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            result = await client.infer("diamond", [grpc_input(X)])
        finally:
            await client.close()
    np.testing.assert_array_equal(result.as_numpy("OUT"), 3 * X + 1)
    ((l_start, l_end, _),) = ArithBackend.of("left")
    ((r_start, r_end, _),) = ArithBackend.of("right")
    ((b_start, _, _),) = ArithBackend.of("both")
    assert max(l_start, r_start) < min(l_end, r_end), "the two branches did not overlap"
    assert b_start >= max(l_end, r_end), "the join ran before its inputs existed"


async def test_batching_and_non_batching_steps_exchange_tensors(tmp_path: Path) -> None:
    """A non-batching ensemble feeding a batching model and back (Triton's
    ``ReshapeTensorDims``: a batch dimension of 1 is added, then removed)."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    arith(repo, "batched", "add", 1)
    arith(repo, "flat", "mul", 2, max_batch_size=0)
    ensemble(
        repo,
        "mixed",
        [
            step("batched", {"IN": "IN"}, {"OUT": "t"}),
            step("flat", {"IN": "t"}, {"OUT": "OUT"}),
        ],
        max_batch_size=0,
    )
    async with make_server(repo.root, **NO_LISTENERS) as server:
        x = np.arange(4, dtype=np.float32)
        response = await server.infer(InferenceRequest("mixed", {"IN": x}))
    np.testing.assert_array_equal(response.outputs["OUT"], (x + 1) * 2)
    assert response.outputs["OUT"].shape == (4,)
    assert ArithBackend.of("batched")[0][2] == 1


async def test_nested_ensembles_and_their_errors(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    chain(repo, "inner", fail_value="13")
    ensemble(
        repo,
        "outer",
        [
            step("inner", {"IN": "IN"}, {"OUT": "t"}),
            step("add5", {"IN": "t"}, {"OUT": "OUT"}),
        ],
    )
    async with make_server(repo.root, **NO_LISTENERS) as server:
        response = await server.infer(InferenceRequest("outer", {"IN": X}))
        np.testing.assert_array_equal(response.outputs["OUT"], (X + 1) * 3 + 10)
        with pytest.raises(TritonXError) as err:
            await server.infer(InferenceRequest("outer", {"IN": np.full((1, 4), 13, np.float32)}))
        stats = {m: server.model_statistics(m)[0][2] for m in ("outer", "inner", "add1", "mul3")}
        stats["add5"] = server.model_statistics("add5")[0][2]  # a step of both ensembles
    assert err.value.message == "in ensemble 'outer', in ensemble 'inner', add1 refuses 13"
    assert err.value.code is Code.INVALID_ARG
    # the inner ensemble's compute times reach the outer one's (Triton's secondary stats):
    # outer = inner + its own add5 step = add1 + mul3 + both add5 executions
    outer, inner = stats["outer"], stats["inner"]
    assert outer.compute_infer.count == inner.compute_infer.count == 1
    assert outer.compute_infer.ns == sum(
        stats[m].compute_infer.ns for m in ("add1", "mul3", "add5")
    )
    assert outer.compute_infer.ns > inner.compute_infer.ns > 0


# ---------------------------------------------------------------- failures and cancellation


async def test_a_failing_step_fails_the_request_with_the_ensemble_named(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    chain(repo, fail_value="13")
    async with make_server(repo.root) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        bad = np.full((1, 4), 13, np.float32)
        try:
            with pytest.raises(InferenceServerException) as err:
                await http.infer("chain", [http_input(bad)])
            assert err.value.message() == "in ensemble 'chain', add1 refuses 13"
            assert err.value.status() == "400"
            with pytest.raises(InferenceServerException) as err:
                await grpc.infer("chain", [grpc_input(bad)])
            assert err.value.message() == "in ensemble 'chain', add1 refuses 13"
            assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
            # a composing model's own request validation, named the same way
            with pytest.raises(InferenceServerException) as err:
                await grpc.infer("chain", [grpc_input(np.zeros((9, 4), np.float32))])
            assert err.value.message() == (
                "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'chain'"
            )
        finally:
            await http.close()
            await grpc.close()
    assert ArithBackend.of("mul3") == [], "steps after the failed one must not run"


async def test_cancelling_a_request_stops_the_steps_not_started(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    chain(repo, delay_ms="600")
    async with make_server(repo.root) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            call = asyncio.create_task(client.infer("chain", [grpc_input(X)]))
            await asyncio.sleep(0.3)  # the first step runs (600 ms)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await asyncio.sleep(1.0)  # the first step finishes; nothing may follow it
            (_, _, ens), *_ = server.model_statistics("chain")
        finally:
            await client.close()
    assert len(ArithBackend.of("add1")) == 1
    assert ArithBackend.of("mul3") == [] and ArithBackend.of("add5") == []
    assert ens.success.count == 0 and ens.fail.count == 1 and ens.fail_reasons["OTHER"] == 1


# ---------------------------------------------------------------- decoupled ensembles


def decoupled_ensemble(repo: ModelRepositoryBuilder) -> None:
    """IN → ``fanout`` (decoupled, three responses) → add1 → OUT."""
    repo.add_identity(
        "fanout",
        dims=[4],
        max_batch_size=8,
        parameters={"repeat": "3"},
        extra="model_transaction_policy { decoupled: true }\n",
    )
    arith(repo, "add1", "add", 1)
    ensemble(
        repo,
        "stream",
        [
            step("fanout", {"INPUT0": "IN"}, {"OUTPUT0": "t"}),
            step("add1", {"IN": "t"}, {"OUT": "OUT"}),
        ],
    )


async def test_a_decoupled_step_makes_a_decoupled_ensemble_streaming_over_grpc(
    tmp_path: Path,
) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    decoupled_ensemble(repo)
    async with make_server(repo.root) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            config = await client.get_model_config("stream", as_json=True)
            assert config["config"]["model_transaction_policy"]["decoupled"] is True
            with pytest.raises(InferenceServerException) as err:
                await client.infer("stream", [grpc_input(X)])
            assert err.value.message() == (
                "ModelInfer RPC doesn't support models with decoupled transaction policy"
            )
        finally:
            await client.close()
        # tritonclient.grpc.aio's stream_infer cannot ask for the empty final response (it
        # drops the key): the synchronous client's async_stream_infer sends the parameter.
        # The final flag comes with the last answer when the fan-out's final response comes
        # before the last add1 answer, else as an empty response; both are Triton's.
        got: queue.Queue[tuple[Any, Any]] = queue.Queue()
        sync = syncgrpc.InferenceServerClient(server.grpc_url)
        sync.start_stream(callback=lambda result, error: got.put((result, error)))
        items: list[tuple[Any, Any]] = []
        try:
            tensor = syncgrpc.InferInput("IN", list(X.shape), "FP32")
            tensor.set_data_from_numpy(X)
            sync.async_stream_infer(
                "stream", [tensor], request_id="s1", enable_empty_final_response=True
            )
            while not items or (items[-1][1] is None and not _final(items[-1][0])):
                items.append(await asyncio.to_thread(got.get, timeout=30))
        finally:
            await asyncio.to_thread(sync.stop_stream)
            sync.close()
    assert all(error is None for _, error in items)
    assert all(result.get_response().id == "s1" for result, _ in items)
    finals = [_final(result) for result, _ in items]
    assert finals[-1] and not any(finals[:-1])
    outputs = [result.as_numpy("OUT") for result, _ in items if result.get_response().outputs]
    assert len(items) - len(outputs) in (0, 1)  # the empty final, if the flag came alone
    assert len(outputs) == 3
    for out in outputs:
        np.testing.assert_array_equal(out, X + 1)


def _final(result: Any) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


async def test_decoupled_ensemble_in_process_and_its_statistics(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    decoupled_ensemble(repo)
    async with make_server(repo.root, **NO_LISTENERS) as server:
        responses = [r async for r in server.infer_stream(InferenceRequest("stream", {"IN": X}))]
        (_, _, ens), *_ = server.model_statistics("stream")
        (_, _, add1), *_ = server.model_statistics("add1")
        (_, _, fanout), *_ = server.model_statistics("fanout")
        # the decoupled step's model records its execution when execute returns, which may
        # be after the ensemble answered: its compute time is added to the ensemble's then
        deadline = time.monotonic() + 5
        while ens.compute_infer.ns != fanout.compute_infer.ns + add1.compute_infer.ns:
            assert time.monotonic() < deadline, (ens, fanout, add1)
            await asyncio.sleep(0.01)
    with_outputs = [r for r in responses if r.outputs]
    assert len(with_outputs) == 3 and responses[-1].final
    assert ens.success.count == 1 and ens.execution_count == 1 and ens.inference_count == 2
    assert add1.success.count == 3
    assert ens.compute_infer.count == 1 and ens.compute_infer.ns > 0


# ---------------------------------------------------------------- statistics and batching


async def test_statistics_of_the_ensemble_and_its_composing_models(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    chain(repo, fail_value="13")
    async with make_server(repo.root) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            for _ in range(5):
                await client.infer("chain", [http_input(X)])  # batch of 2
            with pytest.raises(InferenceServerException):
                await client.infer("chain", [http_input(np.full((1, 4), 13, np.float32))])
            stats = await client.get_inference_statistics()
            metrics = await asyncio.to_thread(_metrics, server.metrics_url)
        finally:
            await client.close()
    ens = stats_of(stats, "chain")
    assert ens["inference_stats"]["success"]["count"] == 5
    assert ens["inference_stats"]["fail"]["count"] == 1
    assert ens["execution_count"] == 5 and ens["inference_count"] == 10
    assert [b["batch_size"] for b in ens["batch_stats"]] == [2]
    assert ens["inference_stats"]["compute_infer"]["ns"] > 0
    assert int(ens["last_inference"]) > 0
    # Triton: the ensemble's compute times are the sums of those its composing models
    # recorded for its steps; a failed request has none (in the ensemble and in add1)
    for phase in ("compute_input", "compute_infer", "compute_output"):
        assert ens["inference_stats"][phase]["count"] == 5
        assert int(ens["inference_stats"][phase]["ns"]) == sum(
            int(stats_of(stats, m)["inference_stats"][phase]["ns"])
            for m in ("add1", "mul3", "add5")
        )
    add1 = stats_of(stats, "add1")
    assert add1["inference_stats"]["success"]["count"] == 5
    assert add1["inference_stats"]["fail"]["count"] == 1
    assert add1["inference_stats"]["compute_infer"]["count"] == 5
    assert add1["inference_stats"]["queue"]["count"] == 5
    for model in ("mul3", "add5"):
        composing = stats_of(stats, model)
        assert composing["inference_stats"]["success"]["count"] == 5
        assert composing["inference_stats"]["fail"]["count"] == 0
        assert composing["inference_count"] == 10
    for line in (
        'nv_inference_request_success{model="chain",version="1"} 5',
        'nv_inference_request_failure{model="chain",reason="OTHER",version="1"} 1',
        'nv_inference_request_success{model="mul3",version="1"} 5',
        'nv_inference_request_failure{model="add1",reason="BACKEND",version="1"} 1',
        'nv_inference_exec_count{model="chain",version="1"} 5',
    ):
        assert line in metrics.splitlines(), line


def _metrics(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://{url}/metrics", timeout=10) as response:
        return str(response.read().decode())


async def test_steps_of_different_requests_batch_together(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    arith(
        repo,
        "gather",
        "add",
        1,
        extra="dynamic_batching { max_queue_delay_microseconds: 300000 }\n",
    )
    ensemble(repo, "single", [step("gather", {"IN": "IN"}, {"OUT": "OUT"})])
    async with make_server(repo.root, **NO_LISTENERS) as server:
        one = np.ones((1, 4), np.float32)
        responses = await asyncio.gather(
            *(server.infer(InferenceRequest("single", {"IN": one * i})) for i in range(4))
        )
    for i, response in enumerate(responses):
        np.testing.assert_array_equal(response.outputs["OUT"], one * i + 1)
    assert [b for _, _, b in ArithBackend.of("gather")] == [4]


async def test_max_inflight_requests_limits_each_step(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    arith(
        repo,
        "slow",
        "add",
        1,
        params={"delay_ms": "150"},
        extra="instance_group [ { count: 3 } ]\n",
    )
    ensemble(
        repo,
        "limited",
        [step("slow", {"IN": "IN"}, {"OUT": "OUT"})],
        scheduling_extra="max_inflight_requests: 1",
    )
    async with make_server(repo.root, **NO_LISTENERS) as server:
        one = np.ones((1, 4), np.float32)
        await asyncio.gather(
            *(server.infer(InferenceRequest("limited", {"IN": one})) for _ in range(3))
        )
    spans = sorted(ArithBackend.of("slow"))
    assert len(spans) == 3
    assert all(b[0] >= a[1] for a, b in itertools.pairwise(spans)), spans


# ---------------------------------------------------------------- validation (Triton's messages)


def _unknown_model(repo: ModelRepositoryBuilder) -> None:
    ensemble(repo, "bad", [step("nope", {"IN": "IN"}, {"OUT": "OUT"})])


def _self_cycle(repo: ModelRepositoryBuilder) -> None:
    ensemble(repo, "bad", [step("bad", {"IN": "IN"}, {"OUT": "OUT"})])


def _cycle(repo: ModelRepositoryBuilder) -> None:
    ensemble(repo, "bad", [step("other", {"IN": "IN"}, {"OUT": "OUT"})])
    ensemble(repo, "other", [step("bad", {"IN": "IN"}, {"OUT": "OUT"})])


def _produced_twice(repo: ModelRepositoryBuilder) -> None:
    arith(repo, "a")
    ensemble(
        repo,
        "bad",
        [step("a", {"IN": "IN"}, {"OUT": "OUT"}), step("a", {"IN": "IN"}, {"OUT": "OUT"})],
    )


def _input_not_consumed(repo: ModelRepositoryBuilder) -> None:
    arith(repo, "a")
    ensemble(
        repo,
        "bad",
        [step("a", {"IN": "IN"}, {"OUT": "OUT"})],
        inputs=(("IN", "FP32", [4]), ("UNUSED", "FP32", [4])),
    )


def _output_not_produced(repo: ModelRepositoryBuilder) -> None:
    arith(repo, "a")
    ensemble(
        repo,
        "bad",
        [step("a", {"IN": "IN"}, {"OUT": "OUT"})],
        outputs=(("OUT", "FP32", [4]), ("OUT2", "FP32", [4])),
    )


def _output_not_written(repo: ModelRepositoryBuilder) -> None:
    arith(repo, "a")
    arith(repo, "b")
    ensemble(
        repo,
        "bad",
        [step("a", {"IN": "IN"}, {"OUT": "t"}), step("b", {"IN": "ghost"}, {"OUT": "OUT"})],
    )


def _unused_tensor(repo: ModelRepositoryBuilder) -> None:
    arith(repo, "a")
    ensemble(
        repo,
        "bad",
        [step("a", {"IN": "IN"}, {"OUT": "t"}), step("a", {"IN": "IN"}, {"OUT": "OUT"})],
    )


def _dims_mismatch(repo: ModelRepositoryBuilder) -> None:
    arith(repo, "a")
    ensemble(
        repo,
        "bad",
        [step("a", {"IN": "IN"}, {"OUT": "OUT"})],
        inputs=(("IN", "FP32", [8]),),
    )


def _datatype_mismatch(repo: ModelRepositoryBuilder) -> None:
    arith(repo, "a")
    ensemble(
        repo,
        "bad",
        [step("a", {"IN": "IN"}, {"OUT": "OUT"})],
        inputs=(("IN", "INT32", [4]),),
    )


def _not_an_ensemble_platform(repo: ModelRepositoryBuilder) -> None:
    repo.add_identity(
        "bad",
        dims=[4],
        extra=f"ensemble_scheduling {{ step [ {step('x', {'IN': 'IN'}, {'OUT': 'OUT'})} ] }}\n",
    )


def _no_scheduling(repo: ModelRepositoryBuilder) -> None:
    repo.add(
        "bad",
        platform="ensemble",
        inputs=[("IN", "FP32", [4])],
        outputs=[("OUT", "FP32", [4])],
    )


def _instance_group(repo: ModelRepositoryBuilder) -> None:
    arith(repo, "a")
    ensemble(
        repo,
        "bad",
        [step("a", {"IN": "IN"}, {"OUT": "OUT"})],
        extra="instance_group [ { count: 1 } ]\n",
    )


def _no_step(repo: ModelRepositoryBuilder) -> None:
    repo.add(
        "bad",
        platform="ensemble",
        inputs=[("IN", "FP32", [4])],
        outputs=[("OUT", "FP32", [4])],
        extra="ensemble_scheduling { }\n",
    )


def _no_input_map(repo: ModelRepositoryBuilder) -> None:
    arith(repo, "a")
    ensemble(
        repo,
        "bad",
        [step("a", {"IN": "IN"}, {"OUT": "t"}), step("a", {}, {"OUT": "OUT"})],
    )


def _non_existing_input(repo: ModelRepositoryBuilder) -> None:
    arith(repo, "a")
    ensemble(repo, "bad", [step("a", {"IN": "IN", "NOPE": "IN"}, {"OUT": "OUT"})])


def _unmapped_input(repo: ModelRepositoryBuilder) -> None:
    arith(repo, "sum", inputs=("A", "B"))
    ensemble(repo, "bad", [step("sum", {"A": "IN"}, {"OUT": "OUT"})])


def _batch_size(repo: ModelRepositoryBuilder) -> None:
    arith(repo, "a")
    ensemble(repo, "bad", [step("a", {"IN": "IN"}, {"OUT": "OUT"})], max_batch_size=16)


def _required_version(repo: ModelRepositoryBuilder) -> None:
    arith(repo, "a")
    ensemble(repo, "bad", [step("a", {"IN": "IN"}, {"OUT": "OUT"}, version=2)])


def _composing_failed(repo: ModelRepositoryBuilder) -> None:
    repo.add_identity("broken", dims=[4], max_batch_size=8, parameters={"fail_load": "1"})
    ensemble(repo, "bad", [step("broken", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"})])


def _decoupled_branches_merge(repo: ModelRepositoryBuilder) -> None:
    for name in ("d1", "d2"):
        repo.add_identity(
            name, dims=[4], max_batch_size=8, extra="model_transaction_policy { decoupled: true }\n"
        )
    arith(repo, "sum", inputs=("A", "B"))
    arith(repo, "a")
    ensemble(
        repo,
        "bad",
        [
            step("d1", {"INPUT0": "IN"}, {"OUTPUT0": "a"}),
            step("d2", {"INPUT0": "IN"}, {"OUTPUT0": "b"}),
            step("sum", {"A": "a", "B": "b"}, {"OUT": "s"}),
            step("a", {"IN": "s"}, {"OUT": "OUT"}),
        ],
    )


def _invalid_inner_ensemble(repo: ModelRepositoryBuilder) -> None:
    ensemble(repo, "inner", [step("nope", {"IN": "IN"}, {"OUT": "OUT"})])
    ensemble(repo, "bad", [step("inner", {"IN": "IN"}, {"OUT": "OUT"})])


VALIDATION = [
    (_unknown_model, "ensemble bad contains models that are not available or ambiguous: nope"),
    (_self_cycle, "circular dependency between ensembles: bad -> ... -> bad -> bad"),
    (_cycle, "circular dependency between ensembles: bad -> ... -> other -> bad"),
    (
        _produced_twice,
        "ensemble tensor 'OUT' can appear in an output map only once for ensemble 'bad' step 1",
    ),
    (_input_not_consumed, "ensemble input 'UNUSED' for ensemble bad' is not used"),
    (_output_not_produced, "ensemble output 'OUT2' for ensemble bad' is not used"),
    (
        _output_not_written,
        "output 'OUT' for ensemble 'bad' is not written: at least one of its depending "
        "tensors, 'ghost', is not connected",
    ),
    (_unused_tensor, "ensemble tensor 't' is unused in ensemble 'bad'"),
    (
        _dims_mismatch,
        "in ensemble bad, ensemble tensor IN: inconsistent shape: [-1,8] is inferred from model "
        "bad while [-1,4] is inferred from model a",
    ),
    (
        _datatype_mismatch,
        "in ensemble bad, ensemble tensor IN: inconsistent data type: TYPE_INT32 is inferred "
        "from model bad while TYPE_FP32 is inferred from model a",
    ),
    (
        _not_an_ensemble_platform,
        "ensemble scheduling cannot be set for model 'bad' whose platform is not ensemble",
    ),
    (_no_scheduling, "ensemble scheduling must be set for ensemble bad whose platform is ensemble"),
    (_instance_group, "instance group should not be specified for ensemble 'bad'"),
    (_no_step, "must specify 'step' for ensemble 'bad'"),
    (_no_input_map, "must specify 'input_map' in step 1 of ensemble 'bad'"),
    (
        _non_existing_input,
        "in ensemble bad, ensemble tensor IN is mapping to non-existing input NOPE in model a",
    ),
    (
        _unmapped_input,
        "in ensemble bad, input B in model sum is not mapped to any ensemble tensors",
    ),
    (
        _batch_size,
        "ensemble bad allows maximum batch size 16, but it contains model a which only allows "
        "maximum batch size to be 8",
    ),
    (_required_version, "ensemble 'bad' depends on 'a' whose required version 2 is not loaded."),
    (
        _composing_failed,
        "ensemble 'bad' depends on 'broken' which has no loaded version. Model 'broken' loading "
        "failed with error: version 1 is at UNAVAILABLE state: Invalid argument: identity model "
        "'broken' asked to fail its load;",
    ),
    (
        _decoupled_branches_merge,
        "in ensemble bad, step of model 'sum' receives inputs originated from different "
        "decoupled models",
    ),
    (
        _invalid_inner_ensemble,
        "ensemble 'bad' depends on 'inner' which is not valid. Model 'inner' failed with error: "
        "ensemble inner contains models that are not available or ambiguous: nope",
    ),
]


#: the cases Triton's ValidateModelConfig refuses while it polls the repository: the load
#: API answers "failed to poll from model repository" (tritonx appends the reason)
AT_POLL = {
    _produced_twice,
    _input_not_consumed,
    _output_not_produced,
    _output_not_written,
    _unused_tensor,
    _not_an_ensemble_platform,
    _no_scheduling,
    _instance_group,
    _no_step,
    _no_input_map,
}


@pytest.mark.parametrize(
    ("build", "message"), VALIDATION, ids=[b.__name__.strip("_") for b, _ in VALIDATION]
)
async def test_invalid_ensembles_fail_to_load_with_tritons_message(
    tmp_path: Path, build: Any, message: str
) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    build(repo)
    async with make_server(
        repo.root, model_control_mode="explicit", allow_grpc=False, allow_metrics=False
    ) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            with pytest.raises(InferenceServerException) as err:
                await client.load_model("bad")
            index = {m["name"]: m for m in await client.get_model_repository_index()}
        finally:
            await client.close()
    if build in AT_POLL:
        expected = f"failed to load 'bad', failed to poll from model repository: {message}"
    else:
        expected = f"load failed for model 'bad': {message}\n"
    assert err.value.message() == expected
    assert index["bad"]["state"] == "UNAVAILABLE" and index["bad"]["reason"] == message


# ---------------------------------------------------------------- lifecycle


class Events:
    seen: ClassVar[list[tuple[str, ModelState]]] = []

    @tritonx.hookimpl
    def tritonx_model_event(self, event: tritonx.ModelEvent) -> None:
        Events.seen.append((event.model_name, event.state))


async def test_composing_models_load_before_the_ensemble_and_gate_its_readiness(
    tmp_path: Path,
) -> None:
    Events.seen.clear()
    repo = ModelRepositoryBuilder(tmp_path / "models")
    chain(repo, load_delay_ms="300")
    arith(repo, "unrelated")
    pm = make_plugin_manager(autoload=False, extra=[identity, Plugin(), Events()])
    settings = loopback_settings(
        repo.root, model_control_mode="explicit", load_model=("chain",), **NO_LISTENERS
    )
    async with Server(settings, plugin_manager=pm) as server:
        ready = [name for name, state in Events.seen if state is ModelState.READY]
        assert ready[-1] == "chain" and set(ready) == {"add1", "mul3", "add5", "chain"}
        first_chain = Events.seen.index(("chain", ModelState.LOADING))
        assert all(
            Events.seen.index((m, ModelState.READY)) < first_chain for m in ("add1", "mul3", "add5")
        )
        assert not server.model_ready("unrelated")

        await server.unload_model("mul3")
        assert not server.model_ready("chain")
        rows = {(r.name, r.version): r for r in server.repository_index()}
        assert rows["chain", 1].state is ModelState.UNAVAILABLE
        assert (
            rows["chain", 1].reason
            == "ensemble 'chain' depends on 'mul3' which has no loaded version."
        )
        with pytest.raises(TritonXError, match="Request for unknown model: 'chain'"):
            await server.infer(InferenceRequest("chain", {"IN": X}))
        assert server.server_ready()  # as in Triton, where the ensemble is unloaded meanwhile

        await server.load_model("mul3")
        assert server.model_ready("chain")
        response = await server.infer(InferenceRequest("chain", {"IN": X}))
        np.testing.assert_array_equal(response.outputs["OUT"], (X + 1) * 3 + 5)


async def test_unload_dependents_unloads_composing_models_loaded_for_the_ensemble(
    tmp_path: Path,
) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    chain(repo)
    ensemble(repo, "other", [step("add5", {"IN": "IN"}, {"OUT": "OUT"})])
    settings = {"model_control_mode": "explicit", **NO_LISTENERS}
    async with make_server(repo.root, **settings) as server:
        await server.load_model("chain")
        await server.load_model("mul3")  # also asked for by name: stays
        await server.load_model("other")  # shares add5: stays
        await server.unload_model("chain", unload_dependents=True)
        assert [m for m in ("chain", "add1", "mul3", "add5", "other") if server.model_ready(m)] == [
            "mul3",
            "add5",
            "other",
        ]
        await server.unload_model("other", unload_dependents=True)
        assert not server.model_ready("add5") and server.model_ready("mul3")
        # without unload_dependents the composing models stay
        await server.load_model("chain")
        await server.unload_model("chain")
        assert all(server.model_ready(m) for m in ("add1", "mul3", "add5"))


async def test_reloading_a_composing_model_keeps_inflight_ensemble_requests(
    tmp_path: Path,
) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    # the first step takes 1 s: the reload below must finish while the requests are in it,
    # even on a loaded machine
    chain(repo, delay_ms="1000")
    settings = {"model_control_mode": "explicit", "load_model": ("chain",), **NO_LISTENERS}
    async with make_server(repo.root, **settings) as server:
        calls = [
            asyncio.create_task(server.infer(InferenceRequest("chain", {"IN": X * i})))
            for i in range(4)
        ]
        await asyncio.sleep(0.1)
        # a changed mul3 (x4 instead of x3) while the requests are in their first step
        arith(repo, "mul3", "mul", 4)
        await server.load_model("mul3")
        await server.load_model("add5")  # unchanged: a no-op
        responses = await asyncio.gather(*calls)
        assert server.model_ready("chain")
        after = await server.infer(InferenceRequest("chain", {"IN": X}))
    for i, response in enumerate(responses):
        np.testing.assert_array_equal(response.outputs["OUT"], (X * i + 1) * 4 + 5)
    np.testing.assert_array_equal(after.outputs["OUT"], (X + 1) * 4 + 5)


async def test_poll_mode_reloads_the_ensemble_when_a_composing_model_changes(
    tmp_path: Path,
) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    chain(repo)
    settings = {"model_control_mode": "poll", "repository_poll_secs": 0, **NO_LISTENERS}
    async with make_server(repo.root, **settings) as server:
        before = await server.infer(InferenceRequest("chain", {"IN": X}))
        arith(repo, "mul3", "mul", 10)
        await server.poll_repository()
        after = await server.infer(InferenceRequest("chain", {"IN": X}))
        # a composing model that no longer fits the ensemble: the ensemble is unloaded, with
        # the reason, as Triton's dependency graph does
        arith(repo, "mul3", "mul", 10, dims=(8,))
        await server.poll_repository()
        assert server.model_ready("mul3") and not server.model_ready("chain")
        rows = {(r.name, r.version): r for r in server.repository_index()}
    np.testing.assert_array_equal(before.outputs["OUT"], (X + 1) * 3 + 5)
    np.testing.assert_array_equal(after.outputs["OUT"], (X + 1) * 10 + 5)
    assert rows["chain", None].state is ModelState.UNAVAILABLE
    assert rows["chain", None].reason == (
        "in ensemble chain, ensemble tensor a: inconsistent shape: [-1,4] is inferred from "
        "model add1 while [-1,8] is inferred from model mul3"
    )
