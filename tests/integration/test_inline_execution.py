"""Inline execution (``--inline-execution-us``, ``tritonx._core.execution``): short batches of
instances that allow it run on the event loop instead of an instance thread, batched as the
queue would batch them, and everything else keeps to the instance threads.

A ``probe`` test backend records, for every execution, the thread it ran on and the values
it got; ``inline: "true"`` sets ``ModelInstance.inline_execution``, ``delay_us`` makes every
execution that long. The add_sub ONNX model over HTTP and gRPC shows the onnxruntime backend
takes the path with the real clients.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import tritonx
from tritonx import InferenceRequest, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.errors import Code, TritonXError
from tritonx.testing import ModelRepositoryBuilder, loopback_settings
from tritonx.types import SEQUENCE_END, SEQUENCE_START

NO_LISTENERS = {"allow_http": False, "allow_grpc": False, "allow_metrics": False}
#: executions the scheduler measures on the instance threads before it may run inline
WARMUP = 8


class Probe(tritonx.Backend):
    """Input VALUE [1] INT32 echoed as OUT; each execution is logged as
    (model, thread name, values)."""

    name = "probe"
    log: ClassVar[list[tuple[str, str, list[int]]]] = []
    lock = threading.Lock()

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        instance = ProbeInstance(ctx.model_name, float(ctx.parameters.get("delay_us", "0")))
        instance.bad_value = int(ctx.parameters.get("bad_value", "-1"))
        instance.inline_execution = ctx.parameters.get("inline") == "true"
        return instance


class ProbeInstance(tritonx.ModelInstance):
    bad_value = -1

    def __init__(self, model: str, delay_us: float) -> None:
        self.model, self.delay_s = model, delay_us / 1e6

    def execute(self, requests: Sequence[InferenceRequest]) -> list[tritonx.InferenceResponse]:
        values = [int(v) for r in requests for v in r.inputs["VALUE"].reshape(-1)]
        with Probe.lock:
            Probe.log.append((self.model, threading.current_thread().name, values))
        if self.delay_s:
            end = time.perf_counter() + self.delay_s
            while time.perf_counter() < end:  # busy: a sleep would be much longer
                pass
        if self.bad_value in values:  # a broken backend: not responses
            return values  # type: ignore[return-value]
        return tritonx.split_outputs(requests, {"OUT": tritonx.concat_inputs(requests)["VALUE"]})


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(Probe)


@pytest.fixture(autouse=True)
def clear_log() -> None:
    Probe.log.clear()


def model(repo: ModelRepositoryBuilder, name: str, extra: str = "", **params: str) -> Path:
    return repo.add(
        name,
        backend="probe",
        max_batch_size=8,
        inputs=[("VALUE", "INT32", [1])],
        outputs=[("OUT", "INT32", [1])],
        parameters={"inline": "true", **params},
        extra=extra,
    )


#: a limit no probe execution's average reaches, even on a loaded machine where one warm-up
#: execution was preempted for a tenth of a second (tests of the limit set theirs)
GENEROUS = {"inline_execution_us": 10_000_000}


def server(repo: ModelRepositoryBuilder, **overrides: Any) -> Server:
    pm = make_plugin_manager(autoload=False, extra=[Plugin()])
    settings = loopback_settings(repo.root, **{**NO_LISTENERS, **GENEROUS, **overrides})
    return Server(settings, plugin_manager=pm)


def infer(srv: Server, name: str, value: int) -> Any:
    return srv.infer(InferenceRequest(name, {"VALUE": np.array([[value]], np.int32)}))


def executions(name: str) -> list[tuple[bool, list[int]]]:
    """(ran on the loop, values) of each execution of ``name``, in order."""
    loop_thread = threading.main_thread().name
    return [(thread == loop_thread, values) for m, thread, values in Probe.log if m == name]


async def one_by_one(srv: Server, name: str, values: range) -> None:
    for value in values:
        response = await infer(srv, name, value)
        assert int(response.outputs["OUT"][0, 0]) == value


async def test_short_executions_move_to_the_loop_after_the_warmup(
    model_repository: ModelRepositoryBuilder,
) -> None:
    model(model_repository, "direct")
    model(model_repository, "batched", "dynamic_batching { }")
    async with server(model_repository) as srv:
        for name in ("direct", "batched"):
            await one_by_one(srv, name, range(WARMUP + 4))
            stats = srv.model_statistics(name)[0][2]
            assert stats.inference_count == stats.execution_count == WARMUP + 4
    for name in ("direct", "batched"):
        ran = executions(name)
        assert [inline for inline, _ in ran] == [False] * WARMUP + [True] * 4
        assert [values for _, values in ran] == [[v] for v in range(WARMUP + 4)]


async def test_requests_arriving_together_run_as_the_queue_would_batch_them(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """After the warm-up, 20 requests submitted in one loop round: with dynamic batching,
    batches of up to max_batch_size (8, 8, 4) on the loop; without, one execution each."""
    model(model_repository, "batched", "dynamic_batching { }")
    model(model_repository, "direct")
    async with server(model_repository) as srv:
        for name in ("batched", "direct"):
            await one_by_one(srv, name, range(WARMUP))
            responses = await asyncio.gather(*(infer(srv, name, 100 + i) for i in range(20)))
            assert [int(r.outputs["OUT"][0, 0]) for r in responses] == list(range(100, 120))
    batched = executions("batched")[WARMUP:]
    assert batched == [(True, list(range(start, min(start + 8, 120)))) for start in (100, 108, 116)]
    assert executions("direct")[WARMUP:] == [(True, [100 + i]) for i in range(20)]


@pytest.mark.parametrize(
    ("extra", "params", "overrides"),
    [
        ("", {"delay_us": "400"}, {"inline_execution_us": 100}),  # over the limit
        ("", {"inline": "false"}, {}),  # the instance does not allow it
        ("", {}, {"inline_execution_us": 0}),  # turned off
        ("dynamic_batching { max_queue_delay_microseconds: 100 }", {}, {}),
        ("dynamic_batching { priority_levels: 2 default_priority_level: 1 }", {}, {}),
        (
            "dynamic_batching { default_queue_policy { max_queue_size: 4 } }",
            {},
            {},
        ),
        ("", {}, {"rate_limit": "execution_count"}),
        ("sequence_batching { }", {}, {}),
    ],
    ids=[
        "over the limit",
        "not allowed",
        "off",
        "queue delay",
        "priorities",
        "queue policy",
        "rate limiter",
        "sequence batcher",
    ],
)
async def test_what_keeps_to_the_instance_threads(
    model_repository: ModelRepositoryBuilder,
    extra: str,
    params: dict[str, str],
    overrides: dict[str, Any],
) -> None:
    model(model_repository, "m", extra, **params)
    async with server(model_repository, **overrides) as srv:
        if extra.startswith("sequence"):
            for i in range(WARMUP + 4):
                flags = (SEQUENCE_START if i == 0 else 0) | (SEQUENCE_END if i == WARMUP + 3 else 0)
                request = InferenceRequest(
                    "m", {"VALUE": np.array([[i]], np.int32)}, correlation_id=7, flags=flags
                )
                await srv.infer(request)
        else:
            await one_by_one(srv, "m", range(WARMUP + 4))
    ran = executions("m")
    assert len(ran) == WARMUP + 4
    assert not any(inline for inline, _ in ran)


async def test_the_limit_is_on_the_average_execution_time(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """Executions of ~30 us: on the loop under a 50 ms limit, never under a 20 us one. (The
    warm-up runs on the instance thread, where one execution may also wait for the GIL for a
    switch interval, 5 ms: the generous limit and the longer run keep such an outlier from
    deciding the average.)"""
    model(model_repository, "m", delay_us="30")
    async with server(model_repository, inline_execution_us=50_000) as srv:
        await one_by_one(srv, "m", range(4 * WARMUP))
    assert [inline for inline, _ in executions("m")][-4:] == [True] * 4
    Probe.log.clear()
    async with server(model_repository, inline_execution_us=20) as srv:
        await one_by_one(srv, "m", range(3 * WARMUP))
    assert not any(inline for inline, _ in executions("m"))


async def test_a_request_cancelled_before_the_round_ends_is_not_executed(
    model_repository: ModelRepositoryBuilder,
) -> None:
    model(model_repository, "m", "dynamic_batching { }")
    async with server(model_repository) as srv:
        await one_by_one(srv, "m", range(WARMUP))
        requests = [InferenceRequest("m", {"VALUE": np.array([[v]], np.int32)}) for v in (1, 2)]
        keep, gone = (asyncio.ensure_future(srv.infer(r)) for r in requests)
        await asyncio.sleep(0)  # both are submitted and held for the end of the round
        requests[1].cancel()  # the client went away
        assert int((await keep).outputs["OUT"][0, 0]) == 1
        with pytest.raises(TritonXError) as failed:
            await gone
        assert failed.value.code is Code.CANCELLED
        stats = srv.model_statistics("m")[0][2]
    assert executions("m")[WARMUP:] == [(True, [1])]
    assert stats.fail.count == 1


async def test_a_request_held_at_shutdown_is_answered(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """A request held for the end of the round when the server stops is answered, by its
    execution (the drain waits for it) or with Triton's "Server exiting"; it never hangs."""
    model(model_repository, "m")
    srv = server(model_repository, exit_timeout_secs=5)
    await srv.start()
    try:
        await one_by_one(srv, "m", range(WARMUP))
        held = asyncio.ensure_future(infer(srv, "m", 1))
        await asyncio.sleep(0)  # submitted, held for the end of this round
    finally:
        await srv.stop()
    try:
        response = await held
    except TritonXError as exc:  # it was held when the scheduler stopped
        assert exc.code is Code.UNAVAILABLE and "exiting" in exc.message
    else:  # or it ran before the stop reached the scheduler
        assert int(response.outputs["OUT"][0, 0]) == 1


def test_add_sub_onnx_over_http_and_grpc_with_inline_execution(tmp_path: Path) -> None:
    """The real clients against a server with the onnxruntime backend, whose CPU instances
    allow inline execution (asserted in its plugin tests): the answers are right and the
    statistics count every request; which executions ran on the loop is not observable
    here (the benchmark, ``benchmarks/run.py --rows add_sub``, shows the gain)."""
    pytest.importorskip("tritonx_backend_onnx")
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from onnx import TensorProto

    from tritonx.testing import ServerThread
    from tritonx_backend_onnx.models import add_sub

    repo = ModelRepositoryBuilder(tmp_path / "models")
    folder = repo.root / "add_sub"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.onnx").write_bytes(add_sub(TensorProto.INT32, ("batch", 16)))
    (folder / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: 8\ndynamic_batching { }\n'
        "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
    )
    settings = loopback_settings(repo.root, allow_metrics=False)
    with ServerThread(Server(settings)) as srv:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        b = np.full((1, 16), 3, dtype=np.int32)
        for module, url in ((httpclient, srv.http_url), (grpcclient, srv.grpc_url)):
            client = module.InferenceServerClient(url)
            try:
                for _ in range(3 * WARMUP):
                    inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
                    inputs[0].set_data_from_numpy(a)
                    inputs[1].set_data_from_numpy(b)
                    result = client.infer("add_sub", inputs)
                    assert (result.as_numpy("OUTPUT0") == a + b).all()
                    assert (result.as_numpy("OUTPUT1") == a - b).all()
            finally:
                client.close()
        stats = srv.model_statistics("add_sub")[0][2]
    assert stats.inference_count == 6 * WARMUP


@pytest.mark.parametrize("limit", [50_000, 0], ids=["inline", "threads"])
async def test_a_backend_returning_no_responses_fails_its_batch_and_serving_goes_on(
    model_repository: ModelRepositoryBuilder, limit: float
) -> None:
    """``execute`` returning something other than responses: the batch's requests fail
    with INTERNAL (a backend failure) on the loop and on the instance threads alike, and the
    instance serves the next requests."""
    model(model_repository, "m", bad_value="13")
    async with server(model_repository, inline_execution_us=limit) as srv:
        await one_by_one(srv, "m", range(WARMUP))
        for _ in range(2):
            with pytest.raises(TritonXError) as failed:
                await infer(srv, "m", 13)
            assert failed.value.code is Code.INTERNAL
            await one_by_one(srv, "m", range(20, 22))
        stats = srv.model_statistics("m")[0][2]
    assert stats.fail.count == 2
    assert [inline for inline, _ in executions("m")][WARMUP:] == [bool(limit)] * 6
