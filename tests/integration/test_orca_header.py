"""ORCA load reports: ``endpoint-load-metrics-format`` on generate requests (Triton's
``src/orca_http.cc``, ``qa/L0_orca``).

A decoupled Python model reports the ``nv_trt_llm_kv_cache_block_metrics`` gauges (as
TensorRT-LLM's backend does) with ``pb_utils.MetricFamily``, from the request's parameters,
before it answers; the answer's ``endpoint-load-metrics`` header is read with aiohttp. A second
server, with no such family, covers the missing-metrics case.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from tritonx._runtime.plugins import make_plugin_manager
from tritonx.server import Server
from tritonx.testing import ServerThread, identity, loopback_settings
from tritonx.testing.repository import ModelRepositoryBuilder

FORMAT = "endpoint-load-metrics-format"
REPORT = "endpoint-load-metrics"
FAMILY = "nv_trt_llm_kv_cache_block_metrics"

# Sets the gauges named by the parameters ``tokens_per``, ``used`` and ``max`` (each a number,
# as given), then answers one response per word of text_input; ``fail`` makes the first
# response an error.
LLM_CONFIG = """
name: "llm"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input", data_type: TYPE_STRING, dims: [ 1 ] } ]
output [ { name: "text_output", data_type: TYPE_STRING, dims: [ 1 ] } ]
"""

LLM_PY = f"""
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily(
            name="{FAMILY}",
            description="Number of KV cache blocks",
            kind=pb_utils.MetricFamily.GAUGE,
        )
        self.gauges = {{
            kind: self.family.Metric(
                labels={{"kv_cache_block_type": kind, "model": "llm", "version": "1"}}
            )
            for kind in ("tokens_per", "used", "max")
        }}

    def execute(self, requests):
        for request in requests:
            params = json.loads(request.parameters())
            for kind, gauge in self.gauges.items():
                if kind in params:
                    gauge.set(float(params[kind]))
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            for word in text.reshape(-1)[0].decode().split():
                if params.get("fail"):
                    error = pb_utils.TritonError("llm was asked to fail")
                    sender.send(pb_utils.InferenceResponse(error=error))
                    continue
                out = pb_utils.Tensor("text_output", np.array([word], dtype=object))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

LLM_GENERATE = "/v2/models/llm/generate"
LLM_STREAM = "/v2/models/llm/generate_stream"
# 80 blocks of 16 tokens, 40 used
BLOCKS = {"tokens_per": 16, "used": 40, "max": 80}


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with the reporting Python model (HTTP only)."""
    pytest.importorskip("tritonx_backend_python")
    repo = ModelRepositoryBuilder(tmp_path_factory.mktemp("orca") / "models")
    repo.add("llm", config=LLM_CONFIG, versions={1: {"model.py": LLM_PY}})
    settings = loopback_settings(repo.root, allow_grpc=False, allow_metrics=False)
    pm = make_plugin_manager(autoload=True, only=("backend_python",))
    with ServerThread(Server(settings, plugin_manager=pm)) as server:
        yield server


@pytest.fixture(scope="module")
def bare_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose models report no kv-cache family (one identity model)."""
    repo = ModelRepositoryBuilder(tmp_path_factory.mktemp("orca_bare") / "models")
    repo.add_identity("plain", "INT32", dims=[-1])
    settings = loopback_settings(repo.root, allow_grpc=False, allow_metrics=False)
    pm = make_plugin_manager(autoload=False, extra=[identity])
    with ServerThread(Server(settings, plugin_manager=pm)) as server:
        yield server


@pytest.fixture
async def llm(llm_server: Server) -> AsyncIterator[aiohttp.ClientSession]:
    """An aiohttp session on the reporting server."""
    async with aiohttp.ClientSession(f"http://{llm_server.http_url}") as session:
        yield session


async def post(
    session: aiohttp.ClientSession, path: str, body: dict[str, Any], fmt: str | None
) -> tuple[int, str | None, bytes]:
    """POST a generate request, asking for a load report in ``fmt`` (None: not asking):
    the status, the ``endpoint-load-metrics`` header and the body."""
    headers = {} if fmt is None else {FORMAT: fmt}
    async with session.post(path, data=orjson.dumps(body), headers=headers) as resp:
        raw = await resp.read()
        assert len(resp.headers.getall(REPORT, [])) <= 1
        return resp.status, resp.headers.get(REPORT), raw


def generate_body(blocks: dict[str, float], text: str = "hello") -> dict[str, Any]:
    return {"text_input": text, **blocks}


# ---------------------------------------------------------------------------------- formats


async def test_json_report(llm: aiohttp.ClientSession) -> None:
    status, report, raw = await post(llm, LLM_GENERATE, generate_body(BLOCKS), "json")
    assert status == 200
    assert orjson.loads(raw)["text_output"] == "hello"
    # Triton's bytes: RapidJSON's compact writer, the utilization a double, the capacity an int
    assert report == 'JSON {"named_metrics":{"kv_cache_utilization":0.5,"max_token_capacity":1280}}'
    assert json.loads(report.removeprefix("JSON "))["named_metrics"] == {
        "kv_cache_utilization": 0.5,
        "max_token_capacity": 1280,
    }


async def test_text_report(llm: aiohttp.ClientSession) -> None:
    status, report, _ = await post(llm, LLM_GENERATE, generate_body(BLOCKS), "text")
    assert status == 200
    assert report == (
        "TEXT named_metrics.kv_cache_utilization=0.500000, named_metrics.max_token_capacity=1280"
    )


@pytest.mark.parametrize(
    ("blocks", "json_value", "text_value", "capacity"),
    [
        ({"tokens_per": 64, "used": 1, "max": 3}, "0.3333333333333333", "0.333333", 192),
        ({"tokens_per": 8, "used": 0, "max": 0}, "0.0", "0.000000", 0),  # no blocks: 0
        ({"tokens_per": 32, "used": 8, "max": 8}, "1.0", "1.000000", 256),
        ({"tokens_per": 1, "used": 1, "max": 1e7}, "1e-7", "0.000000", 10_000_000),
        ({"tokens_per": 2.5, "used": 3, "max": 2.5}, "1.2", "1.200000", 6),  # truncated
        ({"tokens_per": 16, "used": 1.5, "max": 1e6}, "0.0000015", "0.000002", 16_000_000),
    ],
)
async def test_number_formats(
    llm: aiohttp.ClientSession,
    blocks: dict[str, float],
    json_value: str,
    text_value: str,
    capacity: int,
) -> None:
    """RapidJSON's shortest doubles (``1.0``, ``1e-7``) and ``std::to_string``'s six
    decimals, as Triton writes them; the capacity is cast to an unsigned integer."""
    _, as_json, _ = await post(llm, LLM_GENERATE, generate_body(blocks), "json")
    _, as_text, _ = await post(llm, LLM_GENERATE, generate_body(blocks), "text")
    assert as_json == (
        f'JSON {{"named_metrics":{{"kv_cache_utilization":{json_value},'
        f'"max_token_capacity":{capacity}}}}}'
    )
    assert as_text == (
        f"TEXT named_metrics.kv_cache_utilization={text_value}, "
        f"named_metrics.max_token_capacity={capacity}"
    )


# ---------------------------------------------------------------------------------- when


async def test_no_request_header_no_report(llm: aiohttp.ClientSession) -> None:
    status, report, _ = await post(llm, LLM_GENERATE, generate_body(BLOCKS), None)
    assert (status, report) == (200, None)


async def test_stream_carries_the_report(llm: aiohttp.ClientSession) -> None:
    """``generate_stream`` answers with the report (Triton writes it when the first response
    starts the chunked answer); the events are unchanged."""
    body = orjson.dumps(generate_body({"tokens_per": 4, "used": 3, "max": 4}, "a b c"))
    async with llm.post(LLM_STREAM, data=body, headers={FORMAT: "text"}) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        assert resp.headers[REPORT] == (
            "TEXT named_metrics.kv_cache_utilization=0.750000, named_metrics.max_token_capacity=16"
        )
        raw = await resp.read()
    events = [orjson.loads(line[6:]) for line in raw.decode().split("\n\n") if line]
    assert [e["text_output"] for e in events] == ["a", "b", "c"]


async def test_error_response_carries_the_report(llm: aiohttp.ClientSession) -> None:
    """The model's error response still starts Triton's answer: the report is written."""
    body = generate_body({**BLOCKS, "fail": True})
    status, report, raw = await post(llm, LLM_GENERATE, body, "json")
    assert status != 200
    assert orjson.loads(raw) == {"error": "llm was asked to fail"}
    assert report is not None and report.startswith('JSON {"named_metrics":')


async def test_error_before_inference_has_no_report(llm: aiohttp.ClientSession) -> None:
    """Errors answered before the model runs (unknown model, bad body) carry no report."""
    status, report, _ = await post(llm, "/v2/models/nope/generate", BLOCKS, "json")
    assert status >= 400 and report is None
    status, report, _ = await post(llm, LLM_GENERATE, {"missing": 1}, "json")
    assert status == 400 and report is None


async def test_infer_has_no_report(llm: aiohttp.ClientSession) -> None:
    """Only generate answers carry it (Triton's ``GenerateRequestClass``): not ``/infer``,
    not readiness."""
    await post(llm, LLM_GENERATE, generate_body(BLOCKS), None)  # the family has values
    async with llm.get("/v2/health/ready", headers={FORMAT: "json"}) as resp:
        assert resp.status == 200
        assert REPORT not in resp.headers
    async with llm.get("/v2/models/llm", headers={FORMAT: "json"}) as resp:
        assert resp.status == 200
        assert REPORT not in resp.headers


# ---------------------------------------------------------------------------------- refusals


def _watch(caplog: pytest.LogCaptureFixture) -> logging.Logger:
    caplog.set_level(logging.ERROR)
    logger = logging.getLogger("tritonx")  # also when tritonx's logging stopped propagation
    logger.addHandler(caplog.handler)
    return logger


def _lines(caplog: pytest.LogCaptureFixture, word: str) -> list[str]:
    """The messages of the records naming ``word`` (each once: a record may reach the
    handler both directly and through the root logger)."""
    records = {id(r): r for r in caplog.records}.values()
    return [r.getMessage() for r in records if word in r.getMessage()]


@pytest.mark.parametrize("fmt", ["JSON", "Text", "xml", "", "jsonx", "text,json", "x" * 4000])
async def test_bad_format_writes_no_report(llm: aiohttp.ClientSession, fmt: str) -> None:
    """Any value but ``text``/``json`` (case counts, as in Triton): no header, the
    answer is otherwise the same."""
    status, report, raw = await post(llm, LLM_GENERATE, generate_body(BLOCKS), fmt)
    assert (status, report) == (200, None)
    assert orjson.loads(raw)["text_output"] == "hello"


async def test_bad_formats_flood_one_log_line(
    bare_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """A client sending bad formats in a loop gets one error line logged (a line per minute
    at most, per server: this module's other bad formats go to another server), whose quote
    of the value is bounded; the server goes on serving."""
    logger = _watch(caplog)
    try:
        async with aiohttp.ClientSession(f"http://{bare_server.http_url}") as session:
            for i in range(30):
                fmt = f"bogus-{i}-" + "y" * 4000
                status, report, _ = await post(
                    session, "/v2/models/plain/generate", {"INPUT0": [1, 2]}, fmt
                )
                assert (status, report) == (200, None)
    finally:
        logger.removeHandler(caplog.handler)
    lines = _lines(caplog, FORMAT)
    assert len(lines) == 1
    assert len(lines[0]) < 400 and "bogus-0-" in lines[0]


@pytest.mark.parametrize("kind", ["tokens_per", "used", "max"])
async def test_negative_gauge_counts_as_missing(llm: aiohttp.ClientSession, kind: str) -> None:
    """A block count that is negative is not read (Triton's parser reads unsigned decimals
    only): one missing count means no report."""
    status, report, _ = await post(llm, LLM_GENERATE, generate_body({**BLOCKS, kind: -1}), "json")
    assert (status, report) == (200, None)
    status, report, _ = await post(llm, LLM_GENERATE, generate_body(BLOCKS), "json")
    assert status == 200 and report is not None


async def test_missing_family_writes_no_report(
    bare_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """A server with no kv-cache family: generate answers as usual, without the header,
    in either format (an error is logged, rate-limited)."""
    logger = _watch(caplog)
    try:
        async with aiohttp.ClientSession(f"http://{bare_server.http_url}") as session:
            for fmt in ("json", "text", "json"):
                status, report, raw = await post(
                    session, "/v2/models/plain/generate", {"INPUT0": [1, 2]}, fmt
                )
                assert (status, report) == (200, None)
                assert orjson.loads(raw)["OUTPUT0"] == [1, 2]
    finally:
        logger.removeHandler(caplog.handler)
    lines = _lines(caplog, FAMILY)
    assert len(lines) == 1  # (this server's first missing family: its own throttle)


def test_python_family_is_found_by_name(llm_server: Server) -> None:
    """The python backend registers each custom family in the server's registry under its
    name, so the report's lookup by name reads that family alone (not every metric)."""
    found = llm_server.metrics_registry.restricted_registry([FAMILY]).collect()
    assert [metric.name for metric in found] == [FAMILY]
