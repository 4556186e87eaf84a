"""The trace extension through the real tritonclient and ``tritonx serve``: settings (global,
per model, cleared with null) with Triton's validation messages over HTTP and gRPC, the Triton
JSON trace file (timestamps in order for HTTP, gRPC and streams, ensembles and BLS children
with ``parent_id``, TENSORS, rate/count sampling, log-frequency files), the CLI flags, the
restricted ``trace`` category, and OpenTelemetry spans received by an OTLP/HTTP collector
stand-in."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from aiohttp import ClientSession, web
from tritonclient.utils import InferenceServerException

import tritonx
from tritonx import InferenceRequest, InferenceResponse, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import (
    ModelRepositoryBuilder,
    echo_plugin_env,
    identity,
    listening,
    loopback_settings,
)

pytest.importorskip("onnxruntime")
from tritonx_backend_onnx.models import add_sub

HTTP_ORDER = [
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
    "INFER_RESPONSE_COMPLETE",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
]
GRPC_ORDER = [
    "GRPC_WAITREAD_START",
    "GRPC_WAITREAD_END",
    *HTTP_ORDER[2:9],
    "INFER_RESPONSE_COMPLETE",
    "GRPC_SEND_START",
    "GRPC_SEND_END",
]
#: what a request inside the server (ensemble step, BLS call) records
INNER_ORDER = HTTP_ORDER[2:9]


# ---------------------------------------------------------------------------- helpers


class BlsBackend(tritonx.Backend):
    """``bls``: calls model ``addsub`` for each request through ``ServerHandle.infer`` with
    ``parent=`` (what python_backend's ``trace=request.trace()`` maps to) and returns its
    OUTPUT0 as OUTPUT0."""

    name = "bls"

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return BlsInstance(ctx)


class BlsInstance(tritonx.ModelInstance):
    def __init__(self, ctx: tritonx.LoadContext) -> None:
        assert ctx.server is not None
        self.server = ctx.server

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        out = []
        for request in requests:
            child = InferenceRequest(
                "addsub", {"INPUT0": request["INPUT0"], "INPUT1": request["INPUT0"]}
            )
            answer = self.server.run_threadsafe(self.server.infer(child, parent=request))
            out.append(InferenceResponse({"OUTPUT0": answer.result(30).outputs["OUTPUT0"]}))
        return out


class BlsPlugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(BlsBackend)


def add_models(repo: ModelRepositoryBuilder) -> None:
    """``addsub`` (ONNX, OUTPUT0 = a + b, OUTPUT1 = a - b), an ensemble ``pipe`` of two
    addsub steps, and ``bls`` (a model calling addsub)."""
    io4 = [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])]
    out4 = [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])]
    repo.add(
        "addsub",
        backend="onnxruntime",
        max_batch_size=8,
        inputs=io4,
        outputs=out4,
        versions={1: {"model.onnx": add_sub()}},
    )
    repo.add(
        "pipe",
        platform="ensemble",
        max_batch_size=8,
        inputs=[("IN", "FP32", [4])],
        outputs=[("OUT", "FP32", [4])],
        extra="""
ensemble_scheduling { step [
  { model_name: "addsub" model_version: -1
    input_map { key: "INPUT0" value: "IN" } input_map { key: "INPUT1" value: "IN" }
    output_map { key: "OUTPUT0" value: "twice" } },
  { model_name: "addsub" model_version: -1
    input_map { key: "INPUT0" value: "twice" } input_map { key: "INPUT1" value: "IN" }
    output_map { key: "OUTPUT0" value: "OUT" } }
] }
""",
    )
    repo.add(
        "bls",
        backend="bls",
        max_batch_size=8,
        inputs=[("INPUT0", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4])],
    )


def plugin_manager() -> Any:
    return make_plugin_manager(autoload=True, only=["backend_onnx"], extra=[identity, BlsPlugin()])


def http_inputs(name0: str = "INPUT0", pair: bool = True) -> list[Any]:
    first = httpclient.InferInput(name0, [1, 4], "FP32")
    first.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4))
    if not pair:
        return [first]
    second = httpclient.InferInput("INPUT1", [1, 4], "FP32")
    second.set_data_from_numpy(np.ones((1, 4), np.float32))
    return [first, second]


def grpc_inputs() -> list[Any]:
    first = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    first.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4))
    second = grpcclient.InferInput("INPUT1", [1, 4], "FP32")
    second.set_data_from_numpy(np.ones((1, 4), np.float32))
    return [first, second]


def read_traces(path: Path) -> dict[int, dict[str, Any]]:
    """The trace file as {id: {"header": {...}, "names": [...], "ns": [...], "tensors": []}}."""
    entries = json.loads(path.read_text())
    traces: dict[int, dict[str, Any]] = defaultdict(
        lambda: {"header": None, "names": [], "ns": [], "tensors": []}
    )
    for entry in entries:
        trace = traces[entry["id"]]
        if "timestamps" in entry:
            for stamp in entry["timestamps"]:
                trace["names"].append(stamp["name"])
                trace["ns"].append(stamp["ns"])
        elif "activity" in entry:
            trace["tensors"].append(entry)
        else:
            assert trace["header"] is None
            trace["header"] = entry
    return dict(traces)


def assert_in_order(trace: dict[str, Any], names: list[str]) -> None:
    assert trace["names"] == names
    assert trace["ns"] == sorted(trace["ns"]), list(zip(trace["names"], trace["ns"], strict=True))


@pytest.fixture
def repo(model_repository: ModelRepositoryBuilder) -> ModelRepositoryBuilder:
    add_models(model_repository)
    return model_repository


async def serve(repo: ModelRepositoryBuilder, **settings: Any) -> Server:
    server = Server(loopback_settings(repo.root, **settings), plugin_manager=plugin_manager())
    await server.start()
    return server


@pytest.fixture
async def clients(repo: ModelRepositoryBuilder, tmp_path: Path) -> AsyncIterator[Any]:
    """A server with tracing configured but off, and both aio clients."""
    server = await serve(repo, trace_file=str(tmp_path / "trace.json"))
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        yield server, http, grpc
    finally:
        await http.close()
        await grpc.close()
        await server.stop()


# ---------------------------------------------------------------------------- settings


async def test_settings_global_and_per_model_over_http(clients: Any, tmp_path: Path) -> None:
    _, http, _ = clients
    file = str(tmp_path / "trace.json")
    assert await http.get_trace_settings() == {
        "trace_level": ["OFF"],
        "trace_rate": "1000",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_file": file,
        "trace_mode": "triton",
    }
    updated = await http.update_trace_settings(
        settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "5", "trace_count": "7"}
    )
    assert updated["trace_level"] == ["TIMESTAMPS"]
    assert (updated["trace_rate"], updated["trace_count"]) == ("5", "7")
    # a model without its own settings follows the global ones
    assert await http.get_trace_settings(model_name="addsub") == updated
    model = await http.update_trace_settings(
        model_name="addsub", settings={"trace_level": ["TIMESTAMPS", "TENSORS"]}
    )
    assert model["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    assert model["trace_rate"] == "5"  # copied from the global setting
    # unspecified model fields follow later global updates; its own level stays
    await http.update_trace_settings(settings={"trace_rate": "9"})
    model = await http.get_trace_settings(model_name="addsub")
    assert (model["trace_level"], model["trace_rate"]) == (["TIMESTAMPS", "TENSORS"], "9")
    assert (await http.get_trace_settings())["trace_level"] == ["TIMESTAMPS"]
    # null clears a model value: back to the global one
    model = await http.update_trace_settings(model_name="addsub", settings={"trace_level": None})
    assert model["trace_level"] == ["TIMESTAMPS"]
    # null on the global setting goes back to the start-up value
    restored = await http.update_trace_settings(
        settings={"trace_level": None, "trace_rate": None, "trace_count": None}
    )
    assert (restored["trace_level"], restored["trace_rate"], restored["trace_count"]) == (
        ["OFF"],
        "1000",
        "-1",
    )
    off = await http.update_trace_settings(settings={"trace_level": ["OFF"]})
    assert off["trace_level"] == ["OFF"]


@pytest.mark.parametrize(
    ("model", "settings", "status", "message"),
    [
        ("", {"trace_file": "x.json"}, 501, "trace file location can not be updated through network protocol"),
        ("nope", {}, 400, "Request for unknown model : nope"),
        ("", {"trace_level": ["OFF", "TIMESTAMPS"]}, 400, "Expect only one trace level 'OFF' is specified"),
        ("", {"trace_rate": "abc"}, 400, "Unable to parse 'trace_rate', got: abc"),
        ("", {"trace_rate": "99999999999"}, 400, "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: 99999999999"),
        ("", {"trace_count": "-2"}, 400, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
        ("", {"log_frequency": "x"}, 400, "Unable to parse 'log_frequency', got: x"),
        ("", {"trace_level": ["TIMESTAMPS"], "trace_rate": "0"}, 400, "Attempting to set invalid trace setting :sample rate must be non-zero"),
        ("", {"trace_level": ["TIMESTAMPS"], "trace_count": "0"}, 400, "Attempting to set invalid trace setting :"),
        ("", {"trace_rate": 5}, 500, "attempt to access JSON non-string as string"),
        ("", {"trace_level": "TIMESTAMPS"}, 500, "attempt to access JSON non-array as array"),
    ],
)  # fmt: skip
async def test_settings_errors_over_http(
    clients: Any, model: str, settings: dict[str, Any], status: int, message: str
) -> None:
    server, _, _ = clients
    path = f"/v2/models/{model}/trace/setting" if model else "/v2/trace/setting"
    async with ClientSession() as session:
        async with session.post(f"http://{server.http_url}{path}", json=settings) as reply:
            assert reply.status == status
            assert await reply.json() == {"error": message}
        # nothing changed
        async with session.get(f"http://{server.http_url}/v2/trace/setting") as reply:
            assert (await reply.json())["trace_level"] == ["OFF"]


async def test_settings_routes(clients: Any) -> None:
    server, _, _ = clients
    base = f"http://{server.http_url}"
    async with ClientSession() as session:
        async with session.get(f"{base}/v2/models/addsub/versions/1/trace/setting") as reply:
            assert reply.status == 404  # no versioned trace setting, as Triton
        async with session.delete(f"{base}/v2/trace/setting") as reply:
            assert reply.status == 405
        async with session.get(f"{base}/v2") as reply:
            assert {"trace", "logging"} <= set((await reply.json())["extensions"])


async def test_settings_over_grpc(clients: Any, tmp_path: Path) -> None:
    _, _, grpc = clients
    settings = await grpc.get_trace_settings(as_json=True)
    assert settings["settings"]["trace_file"]["value"] == [str(tmp_path / "trace.json")]
    assert settings["settings"]["trace_level"]["value"] == ["OFF"]
    updated = await grpc.update_trace_settings(
        model_name="addsub",
        settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "3"},
        as_json=True,
    )
    assert updated["settings"]["trace_level"]["value"] == ["TIMESTAMPS"]
    assert updated["settings"]["trace_rate"]["value"] == ["3"]
    cleared = await grpc.update_trace_settings(
        model_name="addsub", settings={"trace_rate": None}, as_json=True
    )
    assert cleared["settings"]["trace_rate"]["value"] == ["1000"]
    assert cleared["settings"]["trace_level"]["value"] == ["TIMESTAMPS"]
    glob = await grpc.get_trace_settings(as_json=True)
    assert glob["settings"]["trace_level"]["value"] == ["OFF"]
    for model, update, message in [
        (
            "",
            {"trace_file": "f"},
            "trace file location can not be updated through network protocol",
        ),
        ("nope", {"trace_rate": "1"}, "Request for unknown model : nope"),
        ("", {"trace_rate": ["1", "2"]}, "expect only 1 value for 'trace_rate'"),
        (
            "",
            {"trace_count": "-5"},
            "Unable to parse 'trace_count'. Expecting value >= -1, got: -5",
        ),
    ]:
        with pytest.raises(InferenceServerException) as info:
            await grpc.update_trace_settings(model_name=model, settings=update)
        assert message in info.value.message()


def test_sync_clients(repo: ModelRepositoryBuilder, tmp_path: Path) -> None:
    """The synchronous tritonclient calls (what most scripts use)."""
    import tritonclient.grpc as grpc_sync
    import tritonclient.http as http_sync

    from tritonx.testing import ServerThread

    thread = ServerThread(
        Server(
            loopback_settings(repo.root, trace_file=str(tmp_path / "t.json")),
            plugin_manager=plugin_manager(),
        )
    )
    thread.start()
    try:
        server = thread.server
        http = http_sync.InferenceServerClient(server.http_url)
        assert http.update_trace_settings(settings={"trace_rate": "2"})["trace_rate"] == "2"
        assert http.get_trace_settings(model_name="addsub")["trace_rate"] == "2"
        grpc = grpc_sync.InferenceServerClient(server.grpc_url)
        got = grpc.get_trace_settings(model_name="addsub")
        assert list(got.settings["trace_rate"].value) == ["2"]
        got = grpc.update_trace_settings(settings={"trace_rate": None})
        assert list(got.settings["trace_rate"].value) == ["1000"]
    finally:
        thread.stop()


# ---------------------------------------------------------------------------- trace files


async def test_trace_file_http_grpc_and_stream(
    repo: ModelRepositoryBuilder, tmp_path: Path
) -> None:
    file = tmp_path / "trace.json"
    server = await serve(repo, trace_level=("TIMESTAMPS",), trace_rate=1, trace_file=str(file))
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        result = await http.infer("addsub", http_inputs(), request_id="from-http")
        assert result.as_numpy("OUTPUT0").tolist() == [[1, 2, 3, 4]]
        await grpc.infer("addsub", grpc_inputs(), request_id="from-grpc")

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": "addsub", "inputs": grpc_inputs(), "request_id": "from-stream"}

        async for answer, error in grpc.stream_infer(requests()):
            assert error is None and answer is not None
        await http.close()
        await grpc.close()
    finally:
        await server.stop()
    traces = read_traces(file)
    by_request = {t["header"]["request_id"]: t for t in traces.values()}
    assert set(by_request) == {"from-http", "from-grpc", "from-stream"}
    for rid, order in [
        ("from-http", HTTP_ORDER),
        ("from-grpc", GRPC_ORDER),
        ("from-stream", GRPC_ORDER),
    ]:
        trace = by_request[rid]
        assert trace["header"]["model_name"] == "addsub"
        assert trace["header"]["model_version"] == 1
        assert "parent_id" not in trace["header"]
        assert_in_order(trace, order)
    # the onnx backend marks its phases: input preparation and output extraction take time
    names, ns = by_request["from-http"]["names"], by_request["from-http"]["ns"]
    stamp = dict(zip(names, ns, strict=True))
    assert stamp["COMPUTE_INPUT_END"] > stamp["COMPUTE_START"]
    assert stamp["COMPUTE_END"] > stamp["COMPUTE_OUTPUT_START"]


async def test_generate_requests_are_traced(repo: ModelRepositoryBuilder, tmp_path: Path) -> None:
    """``/generate`` and ``/generate_stream`` are traced as Triton traces them: the HTTP
    receive stamps, the core's, INFER_RESPONSE_COMPLETE per response and HTTP_SEND_START/END
    around each write."""
    file = tmp_path / "trace.json"
    server = await serve(repo, trace_level=("TIMESTAMPS",), trace_rate=1, trace_file=str(file))
    body = {"id": "", "INPUT0": [0, 1, 2, 3], "INPUT1": [1, 1, 1, 1]}
    try:
        async with ClientSession() as session:
            for action in ("generate", "generate_stream"):
                body["id"] = action
                url = f"http://{server.http_url}/v2/models/addsub/{action}"
                async with session.post(url, json=body) as answer:
                    assert answer.status == 200, await answer.text()
                    text = await answer.text()
                assert "OUTPUT0" in text
    finally:
        await server.stop()
    by_request = {t["header"]["request_id"]: t for t in read_traces(file).values()}
    assert set(by_request) == {"generate", "generate_stream"}
    for trace in by_request.values():
        assert trace["header"]["model_name"] == "addsub"
        assert_in_order(trace, HTTP_ORDER)


async def test_decoupled_stream_trace(repo: ModelRepositoryBuilder, tmp_path: Path) -> None:
    """A decoupled model's responses each get GRPC_SEND_START/END; the trace is written once
    the last one is sent."""
    repo.add_identity(
        "rep",
        dims=[4],
        parameters={"repeat": "3"},
        extra="model_transaction_policy { decoupled: true }\n",
    )
    file = tmp_path / "trace.json"
    server = await serve(repo, trace_level=("TIMESTAMPS",), trace_rate=1, trace_file=str(file))
    try:
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(np.ones(4, np.float32))

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": "rep", "inputs": [tensor], "request_id": "dec"}

        answers = [a async for a, e in grpc.stream_infer(requests()) if e is None]
        assert len(answers) == 3
        await grpc.close()
    finally:
        await server.stop()
    (trace,) = read_traces(file).values()
    assert trace["header"]["model_name"] == "rep" and trace["header"]["request_id"] == "dec"
    names = trace["names"]
    assert names[:4] == ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "REQUEST_START", "QUEUE_START"]
    assert names.count("GRPC_SEND_START") == 3 and names.count("GRPC_SEND_END") == 3
    assert names.count("REQUEST_END") == 1 and names.count("INFER_RESPONSE_COMPLETE") == 1


async def test_ensemble_and_bls_children_have_parent_ids(
    repo: ModelRepositoryBuilder, tmp_path: Path
) -> None:
    file = tmp_path / "trace.json"
    server = await serve(repo, trace_level=("TIMESTAMPS",), trace_rate=1, trace_file=str(file))
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        result = await http.infer("pipe", http_inputs("IN", pair=False), request_id="e1")
        assert result.as_numpy("OUT").tolist() == [[0, 3, 6, 9]]  # (x + x) + x
        result = await http.infer("bls", http_inputs(pair=False), request_id="b1")
        assert result.as_numpy("OUTPUT0").tolist() == [[0, 2, 4, 6]]
        await http.close()
    finally:
        await server.stop()
    traces = read_traces(file)
    ensemble = next(t for t in traces.values() if t["header"]["model_name"] == "pipe")
    ensemble_id = ensemble["header"]["id"]
    assert_in_order(ensemble, ["HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START", "REQUEST_END", "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"])  # fmt: skip
    steps = [t for t in traces.values() if t["header"].get("parent_id") == ensemble_id]
    assert len(steps) == 2
    for step in steps:
        assert step["header"]["model_name"] == "addsub"
        assert step["header"]["request_id"] == "e1"
        assert_in_order(step, INNER_ORDER)
        # the steps run inside the ensemble request
        assert ensemble["ns"][2] <= step["ns"][0] and step["ns"][-1] <= ensemble["ns"][4]
    first, second = sorted(steps, key=lambda t: t["ns"][0])
    assert first["ns"][-1] <= second["ns"][0]  # the second step reads the first's output

    bls = next(t for t in traces.values() if t["header"]["model_name"] == "bls")
    assert_in_order(bls, HTTP_ORDER)
    children = [t for t in traces.values() if t["header"].get("parent_id") == bls["header"]["id"]]
    assert len(children) == 1
    child = children[0]
    assert child["header"]["model_name"] == "addsub"
    assert_in_order(child, INNER_ORDER)
    stamp = dict(zip(bls["names"], bls["ns"], strict=True))
    # the call was made during the parent's execution
    assert stamp["COMPUTE_START"] <= child["ns"][0] and child["ns"][-1] <= stamp["COMPUTE_END"]


async def test_tensors_level(repo: ModelRepositoryBuilder, tmp_path: Path) -> None:
    file = tmp_path / "trace.json"
    server = await serve(repo, trace_level=("TENSORS",), trace_rate=1, trace_file=str(file))
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        await http.infer("addsub", http_inputs())
        await http.close()
    finally:
        await server.stop()
    (trace,) = read_traces(file).values()
    assert trace["names"] == [] and trace["header"] is None  # TENSORS alone: no timestamps
    tensors = {(t["activity"], t["tensor"]["name"]): t["tensor"] for t in trace["tensors"]}
    assert tensors[("TENSOR_QUEUE_INPUT", "INPUT0")] == {
        "name": "INPUT0",
        "data": "0,1,2,3",
        "shape": "1,4",
        "dtype": "FP32",
    }
    assert tensors[("TENSOR_QUEUE_INPUT", "INPUT1")]["data"] == "1,1,1,1"
    assert tensors[("TENSOR_BACKEND_OUTPUT", "OUTPUT0")]["data"] == "1,2,3,4"
    assert tensors[("TENSOR_BACKEND_OUTPUT", "OUTPUT1")]["data"] == "-1,0,1,2"


async def test_rate_and_count_sampling(repo: ModelRepositoryBuilder, tmp_path: Path) -> None:
    """rate 3 traces every third request; count 2 stops after two and writes them to
    ``<file>.0`` at once (Triton writes an indexed file when the count is used up)."""
    file = tmp_path / "trace.json"
    server = await serve(
        repo, trace_level=("TIMESTAMPS",), trace_rate=3, trace_count=2, trace_file=str(file)
    )
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        for i in range(10):
            await http.infer("addsub", http_inputs(), request_id=f"r{i}")
        settings = await http.get_trace_settings()
        assert settings["trace_count"] == "0"
        indexed = Path(f"{file}.0")
        assert indexed.exists()  # written when the count ran out, before shutdown
        traced = sorted(t["header"]["request_id"] for t in read_traces(indexed).values())
        assert traced == ["r2", "r5"]
        # raising the count again samples again: every third request from here
        await http.update_trace_settings(settings={"trace_count": "1", "trace_rate": "1"})
        await http.infer("addsub", http_inputs(), request_id="again")
        await http.close()
    finally:
        await server.stop()
    again = read_traces(Path(f"{file}.1"))
    assert [t["header"]["request_id"] for t in again.values()] == ["again"]


async def test_log_frequency_rotates_files(repo: ModelRepositoryBuilder, tmp_path: Path) -> None:
    file = tmp_path / "trace.json"
    server = await serve(
        repo, trace_level=("TIMESTAMPS",), trace_rate=1, trace_log_frequency=2, trace_file=str(file)
    )
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        for i in range(5):
            await http.infer("addsub", http_inputs(), request_id=f"r{i}")
        assert len(read_traces(Path(f"{file}.0"))) == 2
        assert len(read_traces(Path(f"{file}.1"))) == 2
        assert not Path(f"{file}.2").exists()
        await http.close()
    finally:
        await server.stop()
    # the last trace is written at shutdown, to the next indexed file
    rest = read_traces(Path(f"{file}.2"))
    assert [t["header"]["request_id"] for t in rest.values()] == ["r4"]
    assert not file.exists()


async def test_model_setting_samples_only_that_model(
    repo: ModelRepositoryBuilder, tmp_path: Path
) -> None:
    file = tmp_path / "trace.json"
    server = await serve(repo, trace_file=str(file))
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        await http.update_trace_settings(
            model_name="bls", settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}
        )
        await http.infer("addsub", http_inputs(), request_id="plain")
        await http.infer("bls", http_inputs(pair=False), request_id="traced")
        await http.close()
    finally:
        await server.stop()
    traces = read_traces(file)
    assert sorted(t["header"]["model_name"] for t in traces.values()) == ["addsub", "bls"]
    assert all(t["header"].get("request_id") != "plain" for t in traces.values())


async def test_restricted_trace_category(repo: ModelRepositoryBuilder) -> None:
    server = await serve(
        repo,
        http_restricted_api={"trace": ("trace-key", "s3cret")},
        grpc_restricted_protocol={"trace": ("trace-key", "s3cret")},
    )
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        with pytest.raises(InferenceServerException, match="This API is restricted"):
            await http.get_trace_settings()
        with pytest.raises(InferenceServerException, match="This API is restricted"):
            await http.update_trace_settings(model_name="addsub", settings={"trace_rate": "1"})
        ok = await http.get_trace_settings(headers={"trace-key": "s3cret"})
        assert ok["trace_rate"] == "1000"
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        with pytest.raises(InferenceServerException, match="This protocol is restricted"):
            await grpc.get_trace_settings()
        ok = await grpc.get_trace_settings(headers={"triton-grpc-protocol-trace-key": "s3cret"})
        assert list(ok.settings["trace_rate"].value) == ["1000"]
        await http.close()
        await grpc.close()
    finally:
        await server.stop()


# ---------------------------------------------------------------------------- CLI


def _env(tmp_path: Path) -> dict[str, str]:
    """An environment where the identity test backend is an installed plugin."""
    return echo_plugin_env(tmp_path / "site")


def _serve_cli(tmp_path: Path, repo: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tritonx", "serve", "--model-repository", str(repo),
         "--allow-http=false", "--allow-grpc=false", "--allow-metrics=false", *flags],
        env=_env(tmp_path), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--trace-config", ",level=TIMESTAMPS"], "No trace mode specified"),
        (["--trace-config", "level"], "--trace-config option format is '<trace mode>,<setting>=<value>'. Got level"),
        (["--trace-config", "jaeger,url=x"], 'invalid value for trace mode option: jaeger. Available options are "triton" and "opentelemetry"'),
        (["--trace-config", "level=LOUD"], 'Bad option: "--trace-config level".\ninvalid value for trace level option: loud'),
        (["--trace-config", "rate=abc"], 'Bad option: "--trace-config rate".\nInvalid option value. Got abc'),
        (["--trace-config", "triton,log-frequency=x"], 'Bad option: "--trace-config triton,log-frequency".\nInvalid option value. Got x'),
        (["--trace-config", "opentelemetry,bsp_max_queue_size=-1", "--trace-config", "mode=opentelemetry"], 'Bad option: "--trace-config opentelemetry,bsp_max_queue_size"'),
        (["--trace-config", "colour=red"], "unknown global trace setting 'colour'"),
        (["--trace-level", "LOUD"], 'Bad option: "--trace-level".\ninvalid value for trace level option: loud'),
    ],
)  # fmt: skip
def test_cli_refuses_bad_trace_config(
    tmp_path: Path, model_repository: ModelRepositoryBuilder, flags: list[str], message: str
) -> None:
    result = _serve_cli(tmp_path, model_repository.root, *flags)
    assert result.returncode != 0
    assert message in result.stderr


def test_cli_trace_flags_configure_a_running_server(
    tmp_path: Path, model_repository: ModelRepositoryBuilder
) -> None:
    """``tritonx serve`` with --trace-config (and a deprecated flag, which warns) traces
    requests to the file it names; the file is complete after SIGTERM."""
    import urllib.request

    model_repository.add_identity("echo", dims=[4], max_batch_size=4)
    file = tmp_path / "trace.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tritonx", "serve", "--model-repository", str(model_repository.root),
         "--allow-grpc=false", "--allow-metrics=false", "--http-address", "127.0.0.1",
         "--http-port", "0", "--trace-config", f"triton,file={file}", "--trace-config",
         "level=TIMESTAMPS", "--trace-config", "rate=1", "--trace-count", "5"],
        env=_env(tmp_path), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    addresses, lines = listening(proc, ("HTTPService",))
    url = "http://" + addresses["HTTPService"]
    try:
        with urllib.request.urlopen(f"{url}/v2/trace/setting") as reply:
            settings = json.loads(reply.read())
        assert settings == {
            "trace_level": ["TIMESTAMPS"],
            "trace_rate": "1",
            "trace_count": "5",
            "log_frequency": "0",
            "trace_file": str(file),
            "trace_mode": "triton",
        }
        body = json.dumps(
            {"id": "cli", "inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
        ).encode()  # fmt: skip
        request = urllib.request.Request(f"{url}/v2/models/echo/infer", data=body, method="POST")
        with urllib.request.urlopen(request) as reply:
            assert json.loads(reply.read())["outputs"][0]["data"] == [1, 2, 3, 4]
    finally:
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(30) == 0
    log = "".join(lines) + rest
    assert "Warning: '--trace-count' has been deprecated" in log
    (trace,) = read_traces(file).values()
    assert trace["header"]["model_name"] == "echo" and trace["header"]["request_id"] == "cli"
    assert_in_order(trace, HTTP_ORDER)


# ---------------------------------------------------------------------------- OpenTelemetry


class Collector:
    """An OTLP/HTTP receiver: decodes each ExportTraceServiceRequest into its spans."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.resources: list[dict[str, Any]] = []
        self.received = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        assert request.headers["Content-Type"] == "application/x-protobuf"
        message = trace_service_pb2.ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        for resource_spans in message.resource_spans:
            self.resources.append(
                {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            )
            for scope in resource_spans.scope_spans:
                assert scope.scope.name == "triton-server"
                self.spans.extend(scope.spans)
        self.received.set()
        return web.Response(
            body=trace_service_pb2.ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )


@pytest.fixture
async def collector() -> AsyncIterator[tuple[Collector, str]]:
    pytest.importorskip("opentelemetry.sdk")
    pytest.importorskip("opentelemetry.proto")
    receiver = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield receiver, f"http://127.0.0.1:{port}/v1/traces"
    finally:
        await runner.cleanup()


def _attributes(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        out[attribute.key] = getattr(value, value.WhichOneof("value"))
    return out


async def test_opentelemetry_spans_reach_the_collector(
    repo: ModelRepositoryBuilder, collector: tuple[Collector, str]
) -> None:
    receiver, url = collector
    server = await serve(
        repo,
        trace_mode="opentelemetry",
        trace_level=("TIMESTAMPS",),
        trace_rate=1,
        trace_opentelemetry=(
            ("url", url),
            ("resource", "service.name=tritonx-test"),
            ("resource", "deployment=ci"),
            ("bsp_schedule_delay", "50"),
        ),
    )
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        settings = await http.get_trace_settings()
        assert settings["trace_mode"] == "opentelemetry" and "trace_file" not in settings
        assert settings["url"] == url
        await http.infer("pipe", http_inputs("IN", pair=False), request_id="otel-1")
        # a client context: the request is traced under it (Triton's context propagation)
        parent_trace, parent_span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
        await http.infer(
            "addsub",
            http_inputs(),
            headers={"traceparent": f"00-{parent_trace}-{parent_span}-01"},
        )
        await http.close()
    finally:
        await server.stop()  # exports what is still queued
    assert receiver.resources and receiver.resources[0]["service.name"] == "tritonx-test"
    assert receiver.resources[0]["deployment"] == "ci"
    spans = receiver.spans
    by_id = {s.span_id: s for s in spans}
    roots = [s for s in spans if s.name == "InferRequest"]
    assert len(roots) == 2
    ensemble_root = next(r for r in roots if r.trace_id.hex() != parent_trace)
    ensemble = next(s for s in spans if s.name == "pipe")
    assert ensemble.parent_span_id == ensemble_root.span_id
    assert ensemble.trace_id == ensemble_root.trace_id
    attrs = _attributes(ensemble)
    assert attrs["triton.model_name"] == "pipe" and attrs["triton.model_version"] == 1
    assert attrs["triton.request_id"] == "otel-1" and attrs["triton.trace_parent_id"] == 0
    assert [e.name for e in ensemble.events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert {e.name for e in ensemble_root.events} >= {"HTTP_RECV_START", "HTTP_SEND_END"}
    steps = [s for s in spans if s.name == "addsub" and s.parent_span_id == ensemble.span_id]
    assert len(steps) == 2
    for step in steps:
        assert _attributes(step)["triton.trace_parent_id"] == attrs["triton.trace_id"]
        (compute,) = [s for s in spans if s.parent_span_id == step.span_id]
        assert compute.name == "compute"
        assert [e.name for e in compute.events] == [
            "COMPUTE_START",
            "COMPUTE_INPUT_END",
            "COMPUTE_OUTPUT_START",
            "COMPUTE_END",
        ]
        assert step.start_time_unix_nano <= compute.start_time_unix_nano
        assert compute.end_time_unix_nano <= step.end_time_unix_nano
    propagated = next(r for r in roots if r.trace_id.hex() == parent_trace)
    assert propagated.parent_span_id.hex() == parent_span
    model = next(s for s in spans if s.parent_span_id == propagated.span_id)
    assert model.name == "addsub" and by_id[model.parent_span_id] is propagated


def test_opentelemetry_mode_needs_its_packages(
    tmp_path: Path, model_repository: ModelRepositoryBuilder
) -> None:
    """Without the opentelemetry packages the mode is refused with a clear message."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "opentelemetry").mkdir()
    (blocker / "opentelemetry" / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = _env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(blocker), env["PYTHONPATH"]])
    result = subprocess.run(
        [sys.executable, "-m", "tritonx", "serve", "--model-repository", str(model_repository.root),
         "--allow-http=false", "--allow-grpc=false", "--allow-metrics=false",
         "--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "pip install 'tritonx[otel]'" in result.stderr
