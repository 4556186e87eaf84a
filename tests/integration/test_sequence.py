"""The sequence batcher through tritonclient (HTTP, gRPC unary, gRPC stream) against real
servers: direct and oldest strategies, control tensors, implicit state, backlog, idle timeout,
cancellation, Triton's errors and config validation.

A recording test backend (``seqrecorder``) logs every execution's rows (each request's inputs,
control tensors included) and keeps an accumulator in the implicit state
(``ACC = INPUT + (START ? 0 : ACC_IN)``, ``OUTPUT = ACC``). Executions whose INPUT holds a
*gated* value block until the test opens the gate, so batch contents are deterministic: the
test queues requests while an execution is blocked (waiting for them to show in
``nv_inference_pending_request_count``) and then releases it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

import aiohttp
import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

import tritonx
from tritonx import InferenceRequest, InferenceResponse, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, identity, loopback_settings
from tritonx.types import ModelState

# ---------------------------------------------------------------------------- test backend


class SeqRecorder(tritonx.Backend):
    """Logs (model, instance index, rows) per execution; each row maps input names to the
    row's first value. INPUT values in ``gates`` block the execution until the gate opens."""

    name = "seqrecorder"
    log: ClassVar[list[tuple[str, int, list[dict[str, Any]]]]] = []
    gates: ClassVar[dict[int, threading.Event]] = {}
    arrived: ClassVar[dict[int, threading.Event]] = {}
    lock = threading.Lock()

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return SeqRecorderInstance(ctx.model_name, ctx.instance.index, ctx.config.max_batch_size)


def _scalar(array: np.ndarray) -> Any:
    value = array.reshape(-1)[0]
    return value.decode() if isinstance(value, bytes) else value.item()


class SeqRecorderInstance(tritonx.ModelInstance):
    def __init__(self, model: str, index: int, max_batch_size: int) -> None:
        self.model, self.index, self.batching = model, index, max_batch_size > 0

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        rows = [{n: _scalar(a) for n, a in r.inputs.items()} for r in requests]
        cls = SeqRecorder
        with cls.lock:
            cls.log.append((self.model, self.index, rows))
        for row in rows:
            gate = cls.gates.get(row["INPUT"])
            if gate is not None:
                cls.arrived[row["INPUT"]].set()
                gate.wait(10)
        shape = (1, 1) if self.batching else (1,)
        responses = []
        for row in rows:
            acc = row.get("ACC_IN", 0)
            if row.get("READY", 1):
                acc = row["INPUT"] + (0 if row.get("START", 0) else acc)
            out = np.full(shape, acc, np.int32)
            responses.append(InferenceResponse(outputs={"OUTPUT": out, "ACC_OUT": out}))
        return responses


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(SeqRecorder)


@pytest.fixture(autouse=True)
def _reset_recorder() -> None:
    SeqRecorder.log.clear()
    SeqRecorder.gates.clear()
    SeqRecorder.arrived.clear()


def gate(value: int) -> threading.Event:
    """Make executions with INPUT == ``value`` wait until the returned event is set."""
    SeqRecorder.arrived[value] = threading.Event()
    event = SeqRecorder.gates[value] = threading.Event()
    return event


async def arrived(value: int) -> None:
    assert await asyncio.to_thread(SeqRecorder.arrived[value].wait, 10), f"{value} never ran"


def executions(model: str) -> list[list[dict[str, Any]]]:
    return [rows for name, _, rows in SeqRecorder.log if name == model]


# ---------------------------------------------------------------------------- models

CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: %s } ] }
  ]
  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def seq_model(
    repo: ModelRepositoryBuilder,
    name: str,
    strategy: str = "",
    *,
    max_batch_size: int = 4,
    instances: int = 1,
    corrid: str = "TYPE_UINT64",
    idle_us: int = 600_000_000,
    controls: str | None = None,
) -> None:
    """``idle_us`` defaults to 10 minutes, not Triton's 1 s: on a loaded machine a client may
    pause over a second between two requests of a sequence, and the tests that do not test
    the idle timeout must not lose their slot to it."""
    sb = f"max_sequence_idle_microseconds: {idle_us}\n"
    sb += strategy + (CONTROLS % corrid if controls is None else controls)
    repo.add(
        name,
        backend="seqrecorder",
        max_batch_size=max_batch_size,
        inputs=[("INPUT", "INT32", [1])],
        outputs=[("OUTPUT", "INT32", [1])],
        extra=(
            f"sequence_batching {{\n{sb}}}\n"
            f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n"
        ),
    )


@contextlib.asynccontextmanager
async def serve(repo: ModelRepositoryBuilder, **overrides: Any) -> AsyncIterator[Server]:
    pm = make_plugin_manager(autoload=False, extra=[Plugin()])
    async with Server(loopback_settings(repo.root, **overrides), plugin_manager=pm) as srv:
        yield srv


# ---------------------------------------------------------------------------- clients


def _inputs(module: Any, value: int, batch: int = 1) -> list[Any]:
    """INPUT holding ``value``: shape [batch, 1], or [1] with ``batch=0`` (no batching)."""
    shape = [batch, 1] if batch else [1]
    tensor = module.InferInput("INPUT", shape, "INT32")
    tensor.set_data_from_numpy(np.full(shape, value, np.int32))
    return [tensor]


class Stream:
    """One gRPC ModelStreamInfer call; responses come back in request order."""

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.requests: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.waiting: list[asyncio.Future[Any]] = []
        self.task = asyncio.create_task(self._read())

    async def _iterate(self) -> AsyncIterator[dict[str, Any]]:
        while (item := await self.requests.get()) is not None:
            yield item

    async def _read(self) -> None:
        async for result, error in self.client.stream_infer(self._iterate()):
            future = self.waiting.pop(0)
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

    def send(self, model: str, value: int, **kw: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        self.requests.put_nowait({"model_name": model, "inputs": _inputs(grpcclient, value), **kw})
        return future

    async def close(self) -> None:
        self.requests.put_nowait(None)
        await self.task
        await self.client.close()


class Client:
    """Sends one request at a time over HTTP, gRPC or a gRPC stream; returns OUTPUT."""

    def __init__(self, protocol: str, srv: Server, batch: int = 1) -> None:
        self.protocol = protocol
        self.batch = batch
        if protocol == "http":
            self.client: Any = httpclient.InferenceServerClient(srv.http_url)
        elif protocol == "grpc":
            self.client = grpcclient.InferenceServerClient(srv.grpc_url)
        else:
            self.stream = Stream(srv.grpc_url)

    async def send(self, model: str, value: int, **kw: Any) -> int:
        if self.protocol == "stream":
            result = await self.stream.send(model, value, **kw)
        else:
            module = httpclient if self.protocol == "http" else grpcclient
            result = await self.client.infer(model, _inputs(module, value, self.batch), **kw)
        return int(result.as_numpy("OUTPUT").reshape(-1)[0])

    async def close(self) -> None:
        if self.protocol == "stream":
            await self.stream.close()
        else:
            await self.client.close()


async def run_sequence(
    client: Client, model: str, cid: int | str, values: Sequence[int]
) -> list[int]:
    outputs = []
    for i, value in enumerate(values):
        outputs.append(
            await client.send(
                model,
                value,
                sequence_id=cid,
                sequence_start=i == 0,
                sequence_end=i == len(values) - 1,
            )
        )
    return outputs


async def pending(srv: Server, model: str) -> float:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{srv.metrics_url}/metrics") as resp:
            text = await resp.text()
    for family in text_string_to_metric_families(text):
        if family.name == "nv_inference_pending_request_count":
            for sample in family.samples:
                if sample.labels.get("model") == model:
                    return float(sample.value)
    return 0.0


async def wait_pending(srv: Server, model: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while (got := await pending(srv, model)) != count:
        assert time.monotonic() < deadline, f"{got} pending, expected {count}"
        await asyncio.sleep(0.01)


PROTOCOLS = ["http", "grpc", "stream"]


# ---------------------------------------------------------------------------- strategies


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "strategy",
    ["", "oldest { max_candidate_sequences: 3 max_queue_delay_microseconds: 2000 }\n"],
    ids=["direct", "oldest"],
)
async def test_interleaved_sequences_from_many_clients(
    model_repository: ModelRepositoryBuilder, protocol: str, strategy: str
) -> None:
    """12 concurrent sequences (more than the 6 slots of 2 instances: some wait in the
    backlog), one client each; every sequence's accumulated values are exact."""
    seq_model(model_repository, "acc", strategy, max_batch_size=3, instances=2)
    async with serve(model_repository) as srv:
        clients = [Client(protocol, srv) for _ in range(12)]
        sequences = {1000 + i: [i * 100 + k for k in range(1, 2 + i % 5)] for i in range(12)}
        try:
            results = await asyncio.gather(
                *(
                    run_sequence(c, "acc", cid, values)
                    for c, (cid, values) in zip(clients, sequences.items(), strict=True)
                )
            )
        finally:
            for c in clients:
                await c.close()
    for (cid, values), outputs in zip(sequences.items(), results, strict=True):
        assert outputs == list(np.cumsum(values)), cid
    rows_by_cid: dict[int, set[tuple[int, int]]] = {}
    for _, instance, rows in SeqRecorder.log:
        real = [row for row in rows if row["READY"]]
        cids = [row["CORRID"] for row in real]
        assert len(cids) == len(set(cids)), "two requests of one sequence in one batch"
        assert len(rows) <= 3
        for position, row in enumerate(rows):
            if row["READY"]:
                rows_by_cid.setdefault(row["CORRID"], set()).add((instance, position))
    assert sorted(rows_by_cid) == sorted(sequences)
    if not strategy:  # direct: a sequence keeps its instance and batch slot
        assert all(len(places) == 1 for places in rows_by_cid.values()), rows_by_cid


async def test_direct_control_tensors_and_fillers(model_repository: ModelRepositoryBuilder) -> None:
    """What the model sees, slot by slot: START/END/READY/CORRID/state per row, fillers
    (READY 0, zeros) below the highest busy slot, and the statistics of those batches."""
    seq_model(model_repository, "ctl", max_batch_size=4)
    async with serve(model_repository) as srv:
        stream = Stream(srv.grpc_url)
        a_gate, b_gate = gate(-1), gate(-2)
        try:
            send = stream.send
            a1 = send("ctl", -1, sequence_id=11, sequence_start=True)
            await arrived(-1)  # batch 1 runs A's start alone and waits at the gate
            b1 = send("ctl", -2, sequence_id=22, sequence_start=True)
            c1 = send("ctl", 5, sequence_id=33, sequence_start=True)
            a2 = send("ctl", 3, sequence_id=11)
            await wait_pending(srv, "ctl", 3)
            a_gate.set()
            await arrived(-2)  # batch 2: A, B, C in slots 0, 1, 2
            a3 = send("ctl", 4, sequence_id=11, sequence_end=True)
            c2 = send("ctl", 6, sequence_id=33)
            await wait_pending(srv, "ctl", 2)
            b_gate.set()
            outputs = [int((await f).as_numpy("OUTPUT")[0, 0]) for f in (a1, b1, c1, a2, a3, c2)]
            assert outputs == [-1, -2, 5, 2, 6, 11]
            await send("ctl", 7, sequence_id=22, sequence_end=True)
            await send("ctl", 8, sequence_id=33, sequence_end=True)
            d = await send("ctl", 9, sequence_id=44, sequence_start=True, sequence_end=True)
            assert d.as_numpy("OUTPUT").tolist() == [[9]]
        finally:
            await stream.close()

        def row(cid: int, value: int, start: int, end: int, acc: int) -> dict[str, Any]:
            return {
                "INPUT": value, "START": start, "END": end, "READY": 1, "CORRID": cid,
                "ACC_IN": acc,
            }  # fmt: skip

        filler = {"INPUT": 0, "START": 0, "END": 0, "READY": 0, "CORRID": 0, "ACC_IN": 0}
        assert executions("ctl") == [
            [row(11, -1, 1, 0, 0)],
            [row(11, 3, 0, 0, -1), row(22, -2, 1, 0, 0), row(33, 5, 1, 0, 0)],
            [row(11, 4, 0, 1, 2), filler, row(33, 6, 0, 0, 5)],
            [filler, row(22, 7, 0, 1, -2)],
            [filler, filler, row(33, 8, 0, 1, 11)],
            [row(44, 9, 1, 1, 0)],  # START and END on one request; slot 0 is free again
        ]
        client = httpclient.InferenceServerClient(srv.http_url)
        try:
            stats = (await client.get_inference_statistics("ctl"))["model_stats"][0]
        finally:
            await client.close()
    assert stats["inference_count"] == 9  # fillers are not inferences
    assert stats["execution_count"] == 6
    assert stats["inference_stats"]["success"]["count"] == 9
    assert sorted(int(b["batch_size"]) for b in stats["batch_stats"]) == [1, 2, 3]
    # an execution's batch size counts its fillers (rows a backend runs: Triton's backends'
    # total_batch_size), its inferences do not: sizes 1, 3, 3, 2, 3, 1 above
    runs = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}
    assert runs == {1: 2, 2: 1, 3: 3}


async def test_control_datatypes_and_non_batching_model(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """fp32 and bool controls, an INT32 CORRID (the ID's low 32 bits), max_batch_size 0
    (controls of shape [1], one slot)."""
    controls = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 2.5 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT32 } ] }
  ]
"""
    seq_model(model_repository, "typed", max_batch_size=0, controls=controls)
    async with serve(model_repository, allow_grpc=False) as srv:
        client = Client("http", srv, batch=0)
        try:
            cid = (1 << 32) + 7
            await run_sequence(client, "typed", cid, [1, 2])
        finally:
            await client.close()
    rows = [r for rows in executions("typed") for r in rows]
    assert rows == [
        {"INPUT": 1, "START": 2.5, "END": False, "CORRID": 7},
        {"INPUT": 2, "START": 0.0, "END": True, "CORRID": 7},
    ]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_string_and_uint64_ids(
    model_repository: ModelRepositoryBuilder, protocol: str
) -> None:
    seq_model(model_repository, "by_number")
    seq_model(model_repository, "by_string", corrid="TYPE_STRING")
    big = (1 << 64) - 1 if protocol == "http" else (1 << 63) - 1  # gRPC clients send int64
    async with serve(model_repository) as srv:
        client = Client(protocol, srv)
        try:
            assert await run_sequence(client, "by_number", big, [1, 2, 3]) == [1, 3, 6]
            assert await run_sequence(client, "by_string", "user-42", [4, 5]) == [4, 9]
            # a number and its decimal string are different sequences
            await client.send("by_string", 1, sequence_id="7", sequence_start=True)
            with pytest.raises(InferenceServerException) as exc:
                await client.send("by_number", 1, sequence_id="7")
        finally:
            await client.close()
    assert {r["CORRID"] for rows in executions("by_number") for r in rows} == {big}
    assert {r["CORRID"] for rows in executions("by_string") for r in rows} == {"user-42", "7"}
    assert exc.value.message() == (
        "[request id: <id_unknown>] sequence batching control 'CORRID' data-type is 'BYTES', "
        "but model 'by_number' expects 'UINT64'"
    )


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_triton_errors(model_repository: ModelRepositoryBuilder, protocol: str) -> None:
    seq_model(model_repository, "errs")
    seq_model(model_repository, "named", corrid="TYPE_STRING")
    async with serve(model_repository) as srv:
        module = httpclient if protocol == "http" else grpcclient
        client = (
            httpclient.InferenceServerClient(srv.http_url)
            if protocol == "http"
            else grpcclient.InferenceServerClient(srv.grpc_url)
        )

        async def error(model: str, batch: int = 1, **kw: Any) -> InferenceServerException:
            with pytest.raises(InferenceServerException) as exc:
                await client.infer(model, _inputs(module, 1, batch), **kw)
            return exc.value

        try:
            unknown = await error("errs", sequence_id=5)
            no_id = await error("errs", sequence_start=True)
            batched = await error("errs", batch=2, sequence_id=5, sequence_start=True)
            wrong_type = await error("named", sequence_id=5, sequence_start=True, request_id="r1")
            await client.infer("errs", _inputs(module, 1), sequence_id=6, sequence_start=True)
            await client.infer("errs", _inputs(module, 1), sequence_id=6, sequence_end=True)
            ended = await error("errs", sequence_id=6)
        finally:
            await client.close()
    start = "must specify the START flag on the first request of the sequence"
    assert unknown.message() == f"inference request for sequence 5 to model 'errs' {start}"
    assert ended.message() == f"inference request for sequence 6 to model 'errs' {start}"
    assert no_id.message() == (
        "inference request to model 'errs' must specify a non-zero or non-empty correlation ID"
    )
    assert batched.message() == (
        "inference request to model 'errs' must specify batch-size 1 due to requirements of "
        "sequence batcher"
    )
    assert wrong_type.message() == (
        "[request id: r1] sequence batching control 'CORRID' data-type is 'UINT64', but model "
        "'named' expects 'BYTES'"
    )
    expected_status = "400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"
    assert str(unknown.status()) == expected_status


CONFIG_ERRORS = {
    "two_types": (
        'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START '
        "int32_false_true: [ 0, 1 ] fp32_false_true: [ 0, 1 ] } ] } ]",
        "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' "
        "and 'bool_false_true' for CONTROL_SEQUENCE_START for two_types",
    ),
    "no_values": (
        'control_input [ { name: "R" control [ { kind: CONTROL_SEQUENCE_READY } ] } ]',
        "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
        "'bool_false_true' for CONTROL_SEQUENCE_READY for no_values",
    ),
    "three_values": (
        'control_input [ { name: "E" control [ { kind: CONTROL_SEQUENCE_END '
        "int32_false_true: [ 0, 1, 2 ] } ] } ]",
        "sequence batching control 'int32_false_true' must have exactly 2 entries for "
        "CONTROL_SEQUENCE_END for three_values",
    ),
    "same_tensor": (
        'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START '
        'int32_false_true: [ 0, 1 ] } ] }, { name: "S" control [ { kind: '
        "CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] } ]",
        "sequence batching control tensor 'S' is specified for multiple control kinds for "
        "same_tensor",
    ),
    "corrid_fp32": (
        'control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID '
        "data_type: TYPE_FP32 } ] } ]",
        "unexpected data type for control CONTROL_SEQUENCE_CORRID for corrid_fp32. Allowed "
        "data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
    ),
    "corrid_values": (
        'control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID '
        "data_type: TYPE_UINT64 int32_false_true: [ 0, 1 ] } ] } ]",
        "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or "
        "'bool_false_true' for CONTROL_SEQUENCE_CORRID for corrid_values",
    ),
    "preferred": (
        "oldest { preferred_batch_size: [ 8 ] }",
        "sequence batching preferred batch size must be <= max batch size for preferred",
    ),
    "utilization": (
        "direct { minimum_slot_utilization: 1.5 }",
        "sequence batching minimum slot utilization must be in range (0.0, 1.0] for utilization",
    ),
    "state_dims": (
        'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ 2 ] '
        'initial_state { data_type: TYPE_INT32 dims: [ 3 ] zero_data: true name: "z" } } ]',
        "'initial_state' dim for input name 'I' doesn't match 'state' dim description. 3 != 2",
    ),
    "state_type": (
        'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ 2 ] '
        'initial_state { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true name: "z" } } ]',
        "The data type used for 'initial_state' field of state 'I' does not match the state "
        "data type.",
    ),
    "state_rank": (
        'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ 2 ] '
        'initial_state { data_type: TYPE_INT32 dims: [ 1, 2 ] zero_data: true name: "z" } } ]',
        "Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions "
        "for state input 'I'. 2 != 1",
    ),
    "state_no_name": (
        'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ 2 ] '
        "initial_state { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } } ]",
        "Field 'name' must be set when using initial_state for state input 'I'.",
    ),
}


async def test_config_validation_messages(model_repository: ModelRepositoryBuilder) -> None:
    for name, (body, _) in CONFIG_ERRORS.items():
        seq_model(model_repository, name, max_batch_size=4, controls=body)
    seq_model(model_repository, "cached")
    (model_repository.root / "cached" / "config.pbtxt").open("a").write(
        "response_cache { enable: true }\n"
    )
    async with serve(model_repository, allow_http=False, allow_grpc=False) as srv:
        reasons = {
            r.name: r.reason for r in srv.repository_index() if r.state is ModelState.UNAVAILABLE
        }
    for name, (_, message) in CONFIG_ERRORS.items():
        assert message in reasons.get(name, ""), (name, reasons.get(name))
    assert (
        "Response Cache does not currently support model cached with sequence batching "
        "scheduler. Please disable the response cache." in reasons["cached"]
    )


# ---------------------------------------------------------------------------- slots


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_backlog_waits_for_a_free_slot(
    model_repository: ModelRepositoryBuilder, protocol: str
) -> None:
    """Two slots: a third sequence waits in the backlog until one ends, then takes its slot."""
    seq_model(model_repository, "two_slots", max_batch_size=2)
    async with serve(model_repository) as srv:
        a, b, c = (Client(protocol, srv) for _ in range(3))
        try:
            await a.send("two_slots", 1, sequence_id=1, sequence_start=True)
            await b.send("two_slots", 10, sequence_id=2, sequence_start=True)
            waiting = asyncio.create_task(
                c.send("two_slots", 100, sequence_id=3, sequence_start=True)
            )
            await wait_pending(srv, "two_slots", 1)
            assert await b.send("two_slots", 20, sequence_id=2) == 30  # B still runs
            assert not waiting.done()
            assert await a.send("two_slots", 2, sequence_id=1, sequence_end=True) == 3
            assert await waiting == 100
            assert await c.send("two_slots", 5, sequence_id=3, sequence_end=True) == 105
            await b.send("two_slots", 0, sequence_id=2, sequence_end=True)
        finally:
            for client in (a, b, c):
                await client.close()
    slot_of_c = {
        position
        for rows in executions("two_slots")
        for position, row in enumerate(rows)
        if row["CORRID"] == 3 and row["READY"]
    }
    assert slot_of_c == {0}  # A's slot


async def test_backlog_timeout(model_repository: ModelRepositoryBuilder) -> None:
    seq_model(model_repository, "one_slot", max_batch_size=1)
    async with serve(model_repository, allow_grpc=False) as srv:
        a, b = Client("http", srv), Client("http", srv)
        try:
            await a.send("one_slot", 1, sequence_id=1, sequence_start=True)
            with pytest.raises(InferenceServerException) as exc:
                await b.send("one_slot", 2, sequence_id=2, sequence_start=True, timeout=100_000)
            await a.send("one_slot", 1, sequence_id=1, sequence_end=True)
        finally:
            await a.close()
            await b.close()
    assert exc.value.message() == "timeout of the corresponding sequence has been expired"
    assert str(exc.value.status()) == "503"
    assert all(r["CORRID"] == 1 for rows in executions("one_slot") for r in rows)


@pytest.mark.parametrize("strategy", ["", "oldest { }\n"], ids=["direct", "oldest"])
async def test_idle_timeout_releases_the_slot(
    model_repository: ModelRepositoryBuilder, strategy: str
) -> None:
    """A sequence idle longer than max_sequence_idle_microseconds loses its slot (the one
    backlogged sequence gets it) and its next request fails with the START message."""
    seq_model(model_repository, "idle", strategy, max_batch_size=1, idle_us=300_000)
    async with serve(model_repository, allow_grpc=False) as srv:
        a, b = Client("http", srv), Client("http", srv)
        try:
            started = time.monotonic()
            await a.send("idle", 1, sequence_id=1, sequence_start=True)
            assert await b.send("idle", 7, sequence_id=2, sequence_start=True) == 7
            assert time.monotonic() - started >= 0.25  # B waited for A's slot
            with pytest.raises(InferenceServerException) as exc:
                await a.send("idle", 2, sequence_id=1)
        finally:
            await a.close()
            await b.close()
    assert exc.value.message() == (
        "inference request for sequence 1 to model 'idle' must specify the START flag on the "
        "first request of the sequence"
    )


async def test_cancellation_releases_the_slot(model_repository: ModelRepositoryBuilder) -> None:
    """A cancelled gRPC request ends its sequence: its queued requests fail, its slot goes to
    the backlog, and it needs a new START."""
    seq_model(model_repository, "cancel", max_batch_size=1)
    async with serve(model_repository, allow_http=False) as srv:
        opened = gate(-1)
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        other = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            first = asyncio.create_task(
                client.infer("cancel", _inputs(grpcclient, -1), sequence_id=1, sequence_start=True)
            )
            await arrived(-1)
            queued = asyncio.create_task(
                client.infer("cancel", _inputs(grpcclient, 5), sequence_id=1)
            )
            backlogged = asyncio.create_task(
                other.infer("cancel", _inputs(grpcclient, 9), sequence_id=2, sequence_start=True)
            )
            await wait_pending(srv, "cancel", 2)
            queued.cancel()
            await wait_pending(srv, "cancel", 1)
            opened.set()
            await first
            assert (await backlogged).as_numpy("OUTPUT").tolist() == [[9]]
            with pytest.raises(InferenceServerException) as exc:
                await client.infer("cancel", _inputs(grpcclient, 6), sequence_id=1)
        finally:
            opened.set()
            await client.close()
            await other.close()
    assert "must specify the START flag" in exc.value.message()
    assert [r["INPUT"] for rows in executions("cancel") for r in rows] == [-1, 9]


# ---------------------------------------------------------------------------- oldest


async def test_oldest_batches_across_sequences(
    model_repository: ModelRepositoryBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Oldest: the next request of each sequence joins one dynamic batch (never two of one
    sequence); preferred batch size 3 cuts a batch of 4 heads into 3 + 1."""
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "4")
    seq_model(
        model_repository,
        "oldest",
        "oldest { max_candidate_sequences: 8 preferred_batch_size: [ 3 ] "
        "max_queue_delay_microseconds: 100000 }\n",
        max_batch_size=4,
    )
    async with serve(model_repository) as srv:
        stream = Stream(srv.grpc_url)
        try:
            futures = [
                stream.send("oldest", cid * 10 + step, sequence_id=cid, sequence_start=step == 0,
                            sequence_end=step == 1)
                for step in range(2)
                for cid in (1, 2, 3, 4)
            ]  # fmt: skip
            outputs = [int((await f).as_numpy("OUTPUT")[0, 0]) for f in futures]
        finally:
            await stream.close()
    assert outputs == [10, 20, 30, 40, 21, 41, 61, 81]
    batches = [[r["CORRID"] for r in rows] for rows in executions("oldest")]
    assert batches[0] == [1, 2, 3]  # the preferred size, while the fourth head waits
    for cids in batches:
        assert len(cids) == len(set(cids))
    assert sorted(c for cids in batches for c in cids) == [1, 1, 2, 2, 3, 3, 4, 4]


async def test_decoupled_sequence_model_streams_in_order(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """A decoupled model under the sequence batcher (the identity backend sends INPUT0
    responses per request); each sequence's responses come back in order."""
    model_repository.add_identity(
        "dec_seq",
        datatype="INT32",
        dims=[1],
        max_batch_size=2,
        parameters={"repeat": "2"},
        extra=(
            "model_transaction_policy { decoupled: true }\n"
            'sequence_batching { control_input [ { name: "START" control [ { kind: '
            "CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] }\n"
        ),
    )
    pm = make_plugin_manager(autoload=False, extra=[identity])
    settings = loopback_settings(model_repository.root, allow_http=False)
    async with Server(settings, plugin_manager=pm) as srv:
        client = grpcclient.InferenceServerClient(srv.grpc_url)

        async def requests() -> AsyncIterator[dict[str, Any]]:
            for step in range(3):
                for cid in (1, 2):
                    tensor = grpcclient.InferInput("INPUT0", [1, 1], "INT32")
                    tensor.set_data_from_numpy(np.array([[cid * 100 + step]], np.int32))
                    yield {
                        "model_name": "dec_seq",
                        "inputs": [tensor],
                        "sequence_id": cid,
                        "sequence_start": step == 0,
                        "sequence_end": step == 2,
                    }

        got: dict[int, list[int]] = {1: [], 2: []}
        try:
            async for result, error in client.stream_infer(requests()):
                assert error is None, error
                value = int(result.as_numpy("OUTPUT0")[0, 0])
                got[value // 100].append(value % 100)
                if sum(len(v) for v in got.values()) == 12:
                    break
        finally:
            await client.close()
    assert got == {1: [0, 0, 1, 1, 2, 2], 2: [0, 0, 1, 1, 2, 2]}


PY_ACCUMULATOR = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            state = pb_utils.get_input_tensor_by_name(request, "ACC_IN").as_numpy()
            total = value + state * (1 - start)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("ACC_OUT", total)]))
        return responses
"""


async def test_implicit_state_on_a_python_model(model_repository: ModelRepositoryBuilder) -> None:
    """A Triton ``model.py`` reads the state and controls as inputs and returns the state
    output as an output tensor (what Triton's stateful backends see); clients see neither."""
    pytest.importorskip("tritonx_backend_python")
    model_repository.add(
        "py_acc",
        backend="python",
        max_batch_size=4,
        inputs=[("INPUT", "INT32", [1])],
        outputs=[("OUTPUT", "INT32", [1])],
        versions={1: {"model.py": PY_ACCUMULATOR}},
        extra=(
            "sequence_batching {\n"
            '  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START '
            "int32_false_true: [ 0, 1 ] } ] } ]\n"
            '  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 '
            "dims: [ 1 ] } ]\n}\n"
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        ),
    )
    pm = make_plugin_manager(autoload=True, only=("backend_python",))
    settings = loopback_settings(model_repository.root, allow_grpc=False, allow_metrics=False)
    async with Server(settings, plugin_manager=pm) as srv:
        clients = [Client("http", srv) for _ in range(3)]
        try:
            results = await asyncio.gather(
                *(run_sequence(c, "py_acc", 70 + i, [i + 1] * 4) for i, c in enumerate(clients))
            )
            result = await clients[0].client.infer(
                "py_acc", _inputs(httpclient, 5), sequence_id=1, sequence_start=True
            )
        finally:
            for c in clients:
                await c.close()
    assert results == [[1, 2, 3, 4], [2, 4, 6, 8], [3, 6, 9, 12]]
    assert result.get_output("ACC_OUT") is None


async def test_cancel_after_idle_timeout_releases_once(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """A sequence reaped while its request waits, then cancelled: its slot is released once,
    so the backlogged sequence that takes it keeps it (a third sequence still waits)."""
    seq_model(model_repository, "reaped", max_batch_size=1, idle_us=1_000_000)
    async with serve(model_repository, allow_http=False) as srv:
        opened = gate(-1)
        a, b, c = (grpcclient.InferenceServerClient(srv.grpc_url) for _ in range(3))
        try:
            first = asyncio.create_task(
                a.infer("reaped", _inputs(grpcclient, -1), sequence_id=1, sequence_start=True)
            )
            await arrived(-1)
            queued = asyncio.create_task(a.infer("reaped", _inputs(grpcclient, 2), sequence_id=1))
            await wait_pending(srv, "reaped", 1)
            await asyncio.sleep(1.2)  # sequence 1 is reaped, its request still queued
            waiting = asyncio.create_task(
                b.infer("reaped", _inputs(grpcclient, 10), sequence_id=2, sequence_start=True)
            )
            await wait_pending(srv, "reaped", 2)
            queued.cancel()
            await wait_pending(srv, "reaped", 1)
            opened.set()
            await first
            assert (await waiting).as_numpy("OUTPUT").tolist() == [[10]]
            third = asyncio.create_task(
                c.infer("reaped", _inputs(grpcclient, 7), sequence_id=3, sequence_start=True)
            )
            await wait_pending(srv, "reaped", 1)  # the one slot is sequence 2's
            second = await b.infer(
                "reaped", _inputs(grpcclient, 5), sequence_id=2, sequence_end=True
            )
            assert second.as_numpy("OUTPUT").tolist() == [[15]]
            assert (await third).as_numpy("OUTPUT").tolist() == [[7]]
        finally:
            opened.set()
            await a.close()
            await b.close()
            await c.close()
    assert [r["CORRID"] for rows in executions("reaped") for r in rows] == [1, 2, 2, 3]
