"""No client can grow the server's memory through the trace and logging extensions (issue 29).

* Trace settings a client cannot change (``trace_mode``, the mode's own settings, unknown
  names) and negative ``trace_rate`` / ``log_frequency`` values are refused, over raw HTTP,
  ``tritonclient.http`` and ``tritonclient.grpc``, and nothing of the update is applied.
* An absurd ``log_verbose_level`` is refused rather than stored.
* Finished traces held in memory stay bounded whatever a client sets: once
  ``tritonx._dataplane.trace.MAX_HELD_BYTES`` bytes or ``MAX_HELD_TRACES`` traces are held, they are in
  the trace file before shutdown (the file is read while the server runs).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from aiohttp import ClientSession
from tritonclient.utils import InferenceServerException

from tritonx import Server
from tritonx._dataplane.trace import MAX_HELD_BYTES, MAX_HELD_TRACES
from tritonx._runtime import logs
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

#: what a client sets in the issue: every request traced with its tensors, no limit
TENSORS_EVERY_REQUEST = {"trace_level": ["TENSORS"], "trace_rate": "1", "trace_count": "-1"}


@pytest.fixture
async def traced(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: Any,
    tmp_path: Path,
    restore_logging: None,
) -> AsyncIterator[tuple[Server, Any, Any, Path]]:
    """A server started with a trace file and tracing off (the usual start-up setting), an
    identity model ``echo`` (FP32 [-1]) and both aio clients."""
    model_repository.add_identity("echo")
    file = tmp_path / "trace.json"
    server = Server(
        loopback_settings(model_repository.root, trace_file=str(file)),
        plugin_manager=plugin_manager,
    )
    await server.start()
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        yield server, http, grpc, file
    finally:
        await http.close()
        await grpc.close()
        await server.stop()


async def infer(http: Any, data: np.ndarray) -> None:
    inp = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data, binary_data=True)
    await http.infer("echo", [inp])


def written(path: Path) -> list[dict[str, Any]]:
    """The entries in a trace file so far (its JSON array is closed only at shutdown)."""
    if not path.exists():
        return []
    text = path.read_text()
    if not text:
        return []
    return list(json.loads(text if text.endswith("]") else text + "]"))


def trace_ids(entries: list[dict[str, Any]]) -> set[int]:
    """The ids of the traces in ``entries`` (a TENSORS-only trace has no header entry)."""
    return {e["id"] for e in entries}


# ---------------------------------------------------------------------------- settings

UNCHANGEABLE = [
    ({"trace_mode": "opentelemetry"}, 501, "trace mode can not be updated through network protocol"),
    ({"url": "http://evil:4318"}, 501, "trace setting 'url' can not be updated through network protocol"),
    (
        {"opentelemetry_url": "http://evil:4318"},
        400,
        "unknown trace setting 'opentelemetry_url' (the trace extension updates trace_level, "
        "trace_rate, trace_count, log_frequency)",
    ),
    ({"log_frequency": "-1"}, 400, "Unable to parse 'log_frequency', value is out of range [ 0, 4294967295 ], got: -1"),
    ({"trace_rate": "-1"}, 400, "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: -1"),
    # with a valid part: nothing of the update is applied
    ({**TENSORS_EVERY_REQUEST, "trace_mode": "triton"}, 501, "trace mode can not be updated through network protocol"),
]  # fmt: skip


@pytest.mark.parametrize(("update", "status", "message"), UNCHANGEABLE)
async def test_refused_over_raw_http(
    traced: Any, update: dict[str, Any], status: int, message: str
) -> None:
    server, _, _, _ = traced
    base = f"http://{server.http_url}"
    async with ClientSession() as session:
        for path in ("/v2/trace/setting", "/v2/models/echo/trace/setting"):
            async with session.post(base + path, json=update) as reply:
                assert reply.status == status
                assert await reply.json() == {"error": message}
            async with session.get(base + path) as reply:
                settings = await reply.json()
            assert settings["trace_level"] == ["OFF"]
            assert settings["trace_rate"] == "1000"
            assert settings["log_frequency"] == "0"
            assert settings["trace_mode"] == "triton"


@pytest.mark.parametrize(("update", "status", "message"), UNCHANGEABLE)
async def test_refused_over_tritonclient_http_and_grpc(
    traced: Any, update: dict[str, Any], status: int, message: str
) -> None:
    _, http, grpc, _ = traced
    for model in ("", "echo"):
        with pytest.raises(InferenceServerException) as info:
            await http.update_trace_settings(model_name=model, settings=update)
        assert info.value.message() == message
        with pytest.raises(InferenceServerException) as info:
            await grpc.update_trace_settings(model_name=model, settings=update)
        assert info.value.message() == message
        assert info.value.status() == (
            "StatusCode.UNIMPLEMENTED" if status == 501 else "StatusCode.INVALID_ARGUMENT"
        )
        settings = await http.get_trace_settings(model_name=model)
        assert settings["trace_level"] == ["OFF"]
        assert settings["log_frequency"] == "0"
        assert settings["trace_mode"] == "triton"


async def test_absurd_log_verbose_level_is_refused(traced: Any) -> None:
    server, http, grpc, _ = traced
    message = "Unable to parse 'log_verbose_level', value is out of range [ 0, 2147483647 ], got: "
    await http.update_log_settings({"log_verbose_level": 1})
    with pytest.raises(InferenceServerException) as info:
        await http.update_log_settings({"log_verbose_level": 2**32 + 5})
    assert info.value.message() == message + str(2**32 + 5)
    # what a client's -1 becomes in LogSettings' uint32
    with pytest.raises(InferenceServerException) as info:
        await grpc.update_log_settings({"log_verbose_level": 2**32 - 1})
    assert info.value.message() == message + str(2**32 - 1)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    async with ClientSession() as session:
        url = f"http://{server.http_url}/v2/logging"
        async with session.post(url, json={"log_verbose_level": 2**31}) as reply:
            assert reply.status == 400
            assert await reply.json() == {"error": message + str(2**31)}
        async with session.post(url, json={"log_verbose_level": -1}) as reply:
            assert reply.status == 500  # tritonserver's JSON parser refuses it
            assert await reply.json() == {
                "error": "attempt to access JSON non-unsigned-integer as unsigned-integer"
            }
    assert (await http.get_log_settings())["log_verbose_level"] == 1
    assert logs.settings()["log_verbose_level"] == 1
    highest = await http.update_log_settings({"log_verbose_level": 2**31 - 1})
    assert highest["log_verbose_level"] == 2**31 - 1


# ---------------------------------------------------------------------------- held traces


async def test_tensors_traces_are_written_once_the_byte_bound_is_reached(traced: Any) -> None:
    """The issue's client (TENSORS, rate 1, count -1, log_frequency 0): tritonserver holds
    every trace until shutdown; here the file receives them as soon as the held ones pass
    MAX_HELD_BYTES, and no trace is lost."""
    _, http, grpc, file = traced
    await grpc.update_trace_settings(settings=TENSORS_EVERY_REQUEST)
    data = np.random.default_rng(0).standard_normal(64 * 1024).astype(np.float32)  # 256 KiB
    # each trace holds the text of its input and its output: more than 2 x 64Ki characters
    bound = MAX_HELD_BYTES // (2 * data.size) + 1
    sent = 0
    while not written(file):
        await infer(http, data)
        sent += 1
        assert sent <= bound, f"{sent} traces held in memory, none written"
    first = trace_ids(written(file))
    assert 0 < len(first) <= sent
    for _ in range(bound + 1):  # held traces never exceed the bound
        await infer(http, data)
        sent += 1
        assert sent - len(trace_ids(written(file))) <= bound
    await http.update_trace_settings(settings={"trace_level": ["OFF"]})
    # turning tracing off writes what was held
    entries = written(file)
    assert len(trace_ids(entries)) == sent
    tensors = [e for e in entries if "tensor" in e]
    assert len(tensors) == 2 * sent
    assert {e["activity"] for e in tensors} == {"TENSOR_QUEUE_INPUT", "TENSOR_BACKEND_OUTPUT"}
    assert tensors[0]["tensor"]["shape"] == str(data.size)


async def test_timestamp_traces_are_written_once_the_count_bound_is_reached(traced: Any) -> None:
    """With a log frequency a client made huge, the first MAX_HELD_TRACES traces go to the
    first indexed file as soon as they are held."""
    _, http, _, file = traced
    settings = await http.update_trace_settings(
        settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "log_frequency": "2000000000"}
    )
    assert settings["log_frequency"] == "2000000000"
    data = np.zeros(4, np.float32)
    index0 = Path(f"{file}.0")
    for _ in range(MAX_HELD_TRACES - 1):
        await infer(http, data)
    assert not index0.exists()
    await infer(http, data)
    assert len(trace_ids(written(index0))) == MAX_HELD_TRACES
    await infer(http, data)
    assert not Path(f"{file}.1").exists()
