"""Triton's generate extension: ``/generate`` and ``/generate_stream`` (Server-Sent Events).

Python ``model.py`` models written here (an ordinary text model and a decoupled model that
streams one response per word) run in the python backend; the shared identity models of
``conftest.py`` cover datatypes, shapes and version paths. Events are read by aiohttp's client.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, ClassVar

import aiohttp
import orjson
import pytest

import tritonx
from tritonx import InferenceRequest, InferenceResponse
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.config import ServerSettings
from tritonx.server import Server
from tritonx.testing import ServerThread, identity, loopback_settings
from tritonx.testing.repository import ModelRepositoryBuilder

SSE = "text/event-stream; charset=utf-8"

# An ordinary model: TEXT upper-cased (repeated ``repeat`` times), the shape it received,
# and the request parameters it saw; a response parameter ``echo`` when asked; "fail" in the
# text makes it answer an error.
UPPER_CONFIG = """
name: "upper"
backend: "python"
max_batch_size: 8
input [
  { name: "text_input", data_type: TYPE_STRING, dims: [ -1 ] },
  { name: "repeat", data_type: TYPE_INT32, dims: [ 1 ], optional: true }
]
output [
  { name: "text_output", data_type: TYPE_STRING, dims: [ 1 ] },
  { name: "input_shape", data_type: TYPE_INT64, dims: [ -1 ] },
  { name: "request_parameters", data_type: TYPE_STRING, dims: [ 1 ] }
]
"""

UPPER_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            repeat = pb_utils.get_input_tensor_by_name(request, "repeat")
            times = int(repeat.as_numpy().reshape(-1)[0]) if repeat is not None else 1
            words = [w.decode() for w in text.reshape(-1)]
            if "fail" in words:
                error = pb_utils.TritonError("upper refuses the word 'fail'")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            params = json.loads(request.parameters())
            out = pb_utils.Tensor(
                "text_output", np.array([[" ".join(words).upper() * times]], dtype=object)
            )
            shape = pb_utils.Tensor("input_shape", np.array([text.shape], dtype=np.int64))
            seen = pb_utils.Tensor(
                "request_parameters", np.array([[request.parameters()]], dtype=object)
            )
            extra = {"echo": params["echo"]} if "echo" in params else None
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[out, shape, seen], parameters=extra)
            )
        return responses
"""

# A decoupled model: one response per word of TEXT (text_output, index), sent from a thread,
# then the final flag alone. Parameters: ``fail_at`` (that word is an error response instead),
# ``delay_ms`` (before each word).
TOKENS_CONFIG = """
name: "tokens"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input", data_type: TYPE_STRING, dims: [ 1 ] } ]
output [
  { name: "text_output", data_type: TYPE_STRING, dims: [ 1 ] },
  { name: "index", data_type: TYPE_INT32, dims: [ 1 ] }
]
"""

TOKENS_PY = """
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            params = json.loads(request.parameters())
            thread = threading.Thread(
                target=self.stream,
                args=(request.get_response_sender(), text.reshape(-1)[0].decode(), params),
            )
            thread.start()
            self.threads.append(thread)
        return None

    def stream(self, sender, text, params):
        fail_at = params.get("fail_at", -1)
        delay = params.get("delay_ms", 0) / 1000
        for index, word in enumerate(text.split()):
            if delay:
                time.sleep(delay)
            if index == fail_at:
                error = pb_utils.TritonError(f"tokens failed at word {index}")
                sender.send(pb_utils.InferenceResponse(error=error))
                continue
            outputs = [
                pb_utils.Tensor("text_output", np.array([word], dtype=object)),
                pb_utils.Tensor("index", np.array([index], dtype=np.int32)),
            ]
            sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
"""


@pytest.fixture(scope="module")
def python_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with the two python models (HTTP only)."""
    pytest.importorskip("tritonx_backend_python")
    repo = ModelRepositoryBuilder(tmp_path_factory.mktemp("generate") / "models")
    repo.add("upper", config=UPPER_CONFIG, versions={1: {"model.py": UPPER_PY}})
    repo.add("tokens", config=TOKENS_CONFIG, versions={1: {"model.py": TOKENS_PY}})
    settings = loopback_settings(repo.root, allow_grpc=False, allow_metrics=False)
    pm = make_plugin_manager(autoload=True, only=("backend_python",))
    thread = ServerThread(Server(settings, plugin_manager=pm))
    thread.start()
    try:
        yield thread.server
    finally:
        thread.stop()


@pytest.fixture
async def py(python_server: Server) -> AsyncIterator[aiohttp.ClientSession]:
    """An aiohttp session on the python-model server."""
    async with aiohttp.ClientSession(f"http://{python_server.http_url}") as session:
        yield session


@pytest.fixture
async def ident(url: str) -> AsyncIterator[aiohttp.ClientSession]:
    """An aiohttp session on the shared identity-model server of ``conftest.py``."""
    async with aiohttp.ClientSession(f"http://{url}") as session:
        yield session


async def post(
    session: aiohttp.ClientSession, path: str, body: Any, **kw: Any
) -> tuple[int, Any, str]:
    """POST ``body`` (JSON-encoded unless bytes): status, parsed JSON body, content type."""
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    async with session.post(path, data=data, **kw) as resp:
        raw = await resp.read()
        return resp.status, orjson.loads(raw) if raw else None, resp.headers["Content-Type"]


async def read_events(resp: aiohttp.ClientResponse) -> list[Any]:
    """Parse a Server-Sent Events body: the JSON of each event's ``data`` field."""
    events: list[Any] = []
    data: list[str] = []
    async for raw in resp.content:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                events.append(orjson.loads("\n".join(data)))
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        else:
            raise AssertionError(f"unexpected SSE line {line!r}")
    assert not data, "the stream ended inside an event"
    return events


async def stream(
    session: aiohttp.ClientSession, path: str, body: Any
) -> tuple[int, list[Any], str]:
    """POST to a ``generate_stream`` path: status, events, content type."""
    async with session.post(path, data=orjson.dumps(body)) as resp:
        return resp.status, await read_events(resp), resp.headers["Content-Type"]


# ---------------------------------------------------------------------------------- generate


async def test_generate_ordinary_model(py: aiohttp.ClientSession) -> None:
    status, body, ctype = await post(
        py, "/v2/models/upper/generate", {"id": "42", "text_input": "hello world"}
    )
    assert (status, ctype) == (200, "application/json")
    assert body == {
        "id": "42",
        "model_name": "upper",
        "model_version": "1",
        "text_output": "HELLO WORLD",  # one element: a scalar
        "input_shape": [1, 1],  # batch dim 1, the variable dim takes the one element
        "request_parameters": '{"id": "42"}',  # as Triton: id is also a parameter
    }
    assert list(body) == sorted(body)  # keys in Triton's (sorted) order


async def test_generate_list_input_fills_the_variable_dim(py: aiohttp.ClientSession) -> None:
    status, body, _ = await post(
        py, "/v2/models/upper/generate", {"text_input": ["a", "b", "c"], "repeat": 2}
    )
    assert status == 200
    assert body["text_output"] == "A B CA B C"
    assert body["input_shape"] == [1, 3]
    assert "id" not in body


async def test_parameters_reach_the_model(py: aiohttp.ClientSession) -> None:
    """Top-level non-input keys and the ``parameters`` object are request parameters (whose
    keys may also name inputs); response parameters come back as top-level keys."""
    request = {
        "text_input": "hi",
        "temperature": 0.5,
        "stream": False,
        "max_tokens": 7,
        "parameters": {"echo": "ping", "repeat": 3, "top_p": 1},
    }
    status, body, _ = await post(py, "/v2/models/upper/generate", request)
    assert status == 200
    assert body["echo"] == "ping"  # a response parameter
    assert body["text_output"] == "HIHIHI"  # "repeat" inside "parameters" named an input
    assert json.loads(body["request_parameters"]) == {
        "temperature": 0.5,
        "stream": False,
        "max_tokens": 7,
        "echo": "ping",
        "top_p": 1,
    }


async def test_generate_decoupled_model_one_response(py: aiohttp.ClientSession) -> None:
    status, body, _ = await post(py, "/v2/models/tokens/generate", {"text_input": "single"})
    assert status == 200
    assert body == {
        "model_name": "tokens",
        "model_version": "1",
        "text_output": "single",
        "index": 0,
    }


@pytest.mark.parametrize("text", ["two words", ""])
async def test_generate_needs_exactly_one_response(py: aiohttp.ClientSession, text: str) -> None:
    """A decoupled model that sends several responses, or none, fails ``/generate``."""
    status, body, ctype = await post(py, "/v2/models/tokens/generate", {"text_input": text})
    assert (status, ctype) == (500, "application/json")
    assert body == {
        "error": "generate expects model to produce exactly 1 response, use generate stream "
        "for model that generates various number of responses"
    }


async def test_generate_model_error(py: aiohttp.ClientSession) -> None:
    status, body, _ = await post(py, "/v2/models/upper/generate", {"text_input": "fail"})
    assert status == 500  # pb_utils.TritonError's default code is INTERNAL
    assert body == {"error": "upper refuses the word 'fail'"}


# ---------------------------------------------------------------------------------- stream


async def test_stream_ordinary_model_is_one_event(py: aiohttp.ClientSession) -> None:
    status, events, ctype = await stream(
        py, "/v2/models/upper/generate_stream", {"text_input": "abc", "id": "s1"}
    )
    assert (status, ctype) == (200, SSE)
    assert len(events) == 1
    assert events[0]["text_output"] == "ABC"
    assert events[0]["id"] == "s1"


async def test_stream_decoupled_model_one_event_per_response(py: aiohttp.ClientSession) -> None:
    text = "the quick brown fox jumps"
    status, events, ctype = await stream(
        py, "/v2/models/tokens/generate_stream", {"text_input": text, "id": "t"}
    )
    assert (status, ctype) == (200, SSE)
    assert events == [
        {"id": "t", "index": i, "model_name": "tokens", "model_version": "1", "text_output": w}
        for i, w in enumerate(text.split())
    ]


async def test_stream_raw_framing(py: aiohttp.ClientSession) -> None:
    """Exactly ``data: <json>\\n\\n`` per response, and the body ends after the final flag."""
    async with py.post(
        "/v2/models/tokens/generate_stream", data=orjson.dumps({"text_input": "a b"})
    ) as resp:
        raw = await resp.read()
    assert raw == (
        b'data: {"index":0,"model_name":"tokens","model_version":"1","text_output":"a"}\n\n'
        b'data: {"index":1,"model_name":"tokens","model_version":"1","text_output":"b"}\n\n'
    )


async def test_stream_with_no_response_is_empty(py: aiohttp.ClientSession) -> None:
    status, events, ctype = await stream(
        py, "/v2/models/tokens/generate_stream", {"text_input": ""}
    )
    assert (status, events, ctype) == (200, [], SSE)


async def test_stream_mid_stream_error_is_an_event(py: aiohttp.ClientSession) -> None:
    """An error response after the first becomes an ``{"error": ...}`` event (status already
    200); the stream goes on until the model's final flag."""
    status, events, _ = await stream(
        py,
        "/v2/models/tokens/generate_stream",
        {"text_input": "one two three four", "parameters": {"fail_at": 2}},
    )
    assert status == 200
    assert [e.get("text_output") for e in events] == ["one", "two", None, "four"]
    assert events[2] == {"error": "tokens failed at word 2"}


async def test_stream_first_response_error_sets_the_status(py: aiohttp.ClientSession) -> None:
    status, events, ctype = await stream(
        py, "/v2/models/upper/generate_stream", {"text_input": "fail"}
    )
    assert (status, ctype) == (500, SSE)
    assert events == [{"error": "upper refuses the word 'fail'"}]


async def test_stream_error_before_inference_is_plain_json(py: aiohttp.ClientSession) -> None:
    status, body, ctype = await post(py, "/v2/models/tokens/generate_stream", {"nothing": 1})
    assert (status, ctype) == (400, "application/json")
    assert "missing required input(s) ['text_input']" in body["error"]


async def test_client_disconnect_mid_stream(
    py: aiohttp.ClientSession, python_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that leaves mid-stream breaks nothing: the rest of the model's responses are
    dropped without an error logged, and the server goes on serving."""
    caplog.set_level(logging.WARNING)
    watched = [logging.getLogger(name) for name in ("tritonx", "aiohttp")]
    for logger in watched:  # also when tritonx's logging setup stopped propagation
        logger.addHandler(caplog.handler)
    try:
        await _leave_mid_stream(py, python_server)
    finally:
        for logger in watched:
            logger.removeHandler(caplog.handler)
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert problems == []


async def _leave_mid_stream(py: aiohttp.ClientSession, python_server: Server) -> None:
    words = " ".join(f"w{i}" for i in range(40))
    async with aiohttp.ClientSession(f"http://{python_server.http_url}") as leaving:
        resp = await leaving.post(
            "/v2/models/tokens/generate_stream",
            data=orjson.dumps({"text_input": words, "delay_ms": 10}),
        )
        assert resp.status == 200
        first = await resp.content.readuntil(b"\n\n")
        assert orjson.loads(first.removeprefix(b"data: "))["text_output"] == "w0"
        resp.close()  # drop the connection with the stream half read
    await asyncio.sleep(0.8)  # the model sends its remaining responses into the void
    status, events, _ = await stream(py, "/v2/models/tokens/generate_stream", {"text_input": "x y"})
    assert status == 200 and [e["text_output"] for e in events] == ["x", "y"]
    status, body, _ = await post(py, "/v2/models/upper/generate", {"text_input": "ok"})
    assert status == 200 and body["text_output"] == "OK"


class CancelAwareBackend(tritonx.Backend):
    """Decoupled: sends INPUT0 every 10 ms until 200 responses or the request is cancelled;
    records, per request id, how many it sent and whether it saw the cancellation."""

    name = "cancelaware"
    outcome: ClassVar[dict[str, tuple[int, bool]]] = {}
    recorded: ClassVar[dict[str, threading.Event]] = collections.defaultdict(threading.Event)

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return CancelAwareInstance()


class CancelAwareInstance(tritonx.ModelInstance):
    def execute(self, requests: Sequence[InferenceRequest]) -> None:
        for request in requests:
            threading.Thread(target=self._send, args=(request,)).start()

    def _send(self, request: InferenceRequest) -> None:
        sender = request.get_response_sender()
        sent = 0
        while sent < 200 and not request.is_cancelled():
            sender.send(InferenceResponse(outputs={"OUTPUT0": request.inputs["INPUT0"]}))
            sent += 1
            time.sleep(0.01)
        # recorded before the final flag goes out: a client that saw the stream end finds it
        CancelAwareBackend.outcome[request.id] = (sent, request.is_cancelled())
        CancelAwareBackend.recorded[request.id].set()
        sender.send(final=True)


class _CancelAwarePlugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(CancelAwareBackend)


@pytest.fixture
def server_settings(
    model_repository: ModelRepositoryBuilder, register_plugin: Any
) -> ServerSettings:
    """The ``server`` fixture's repository: one ``cancelaware`` model."""
    register_plugin(_CancelAwarePlugin(), name="generate-cancel-aware")
    model_repository.add(
        "cancel_aware",
        backend="cancelaware",
        inputs=[("INPUT0", "INT32", [1])],
        outputs=[("OUTPUT0", "INT32", [1])],
        extra="model_transaction_policy { decoupled: true }\n",
    )
    return loopback_settings(model_repository.root, allow_grpc=False, allow_metrics=False)


async def test_disconnect_cancels_the_request(server: Server) -> None:
    """The request of a client that left is cancelled: the backend sees ``is_cancelled()``."""
    async with aiohttp.ClientSession(f"http://{server.http_url}") as session:
        resp = await session.post(
            "/v2/models/cancel_aware/generate_stream",
            data=orjson.dumps({"id": "left", "INPUT0": 3}),
        )
        assert resp.status == 200
        assert orjson.loads((await resp.content.readuntil(b"\n\n"))[6:])["OUTPUT0"] == 3
        resp.close()
        assert await asyncio.to_thread(CancelAwareBackend.recorded["left"].wait, 30)
        sent, cancelled = CancelAwareBackend.outcome["left"]
        assert cancelled and sent < 200
        status, events, _ = await stream(
            session, "/v2/models/cancel_aware/generate_stream", {"id": "stays", "INPUT0": 4}
        )
        # not cancelled: all 200 responses arrive, then the stream ends
        assert status == 200 and [e["OUTPUT0"] for e in events] == [4] * 200
    assert CancelAwareBackend.outcome["stays"] == (200, False)


# ---------------------------------------------------------------------------------- errors


async def test_unknown_model(ident: aiohttp.ClientSession) -> None:
    for path in ("/v2/models/nope/generate", "/v2/models/nope/generate_stream"):
        status, body, _ = await post(ident, path, {"INPUT0": [1]})
        assert status == 404
        assert body == {"error": "Request for unknown model: 'nope' is not found"}


@pytest.mark.parametrize("action", ["generate", "generate_stream"])
async def test_bad_json(ident: aiohttp.ClientSession, action: str) -> None:
    status, body, ctype = await post(ident, f"/v2/models/id_int32/{action}", b"{not json")
    assert (status, ctype) == (500, "application/json")
    assert body["error"].startswith("failed to parse the request JSON buffer: ")
    status, body, _ = await post(ident, f"/v2/models/id_int32/{action}", [1, 2])
    assert (status, body) == (500, {"error": "attempt to get members for non-object"})


async def test_missing_input(ident: aiohttp.ClientSession) -> None:
    status, body, _ = await post(ident, "/v2/models/multi/generate", {"INPUT0": [1, 2]})
    assert status == 400
    assert "expected 2 inputs but got 1 inputs for model 'multi'" in body["error"]
    assert "missing required input(s) ['INPUT1']" in body["error"]


@pytest.mark.parametrize(
    ("model", "value", "status", "message"),
    [
        ("id_int32", "seven", 500, "attempt to access JSON non-signed-integer as signed-integer"),
        ("id_int32", [1, 2.5], 500, "attempt to access JSON non-signed-integer as signed-integer"),
        ("id_uint8", -1, 500, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ("id_fp32", True, 500, "attempt to access JSON non-number as double"),
        ("id_bool", 1, 500, "attempt to access JSON non-boolean as boolean"),
        ("id_bytes", 5, 500, "Unable to parse JSON bytes array: attempt to access JSON non-string as string"),
        ("id_int32", [[1, 2]], 500, "Shape does not match true shape of 'data' field"),
        ("id_fp16", [1.0], 400, "receiving FP16 data via JSON is not supported. Please use the binary data format for input INPUT0"),
        ("batched", [1, 2, 3, 4, 5], 400, "The schema can not convert input 'INPUT0' to tensor with proper shape"),
    ],
)  # fmt: skip
async def test_wrong_value_for_an_input(
    ident: aiohttp.ClientSession, model: str, value: Any, status: int, message: str
) -> None:
    got_status, body, _ = await post(ident, f"/v2/models/{model}/generate", {"INPUT0": value})
    assert (got_status, body) == (status, {"error": message})


@pytest.mark.parametrize(
    ("request_body", "status", "message"),
    [
        ({"INPUT0": [1], "p": [1]}, 400, "parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'."),
        ({"INPUT0": [1], "p": None}, 400, "parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'."),
        ({"INPUT0": [1], "parameters": 3}, 500, "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object"),
        ({"INPUT0": [1], "parameters": {"q": {}}}, 400, "Converting keyword: 'parameters': parameter 'q' has invalid type. It should be either 'int', 'bool', or 'string'."),
        ({"INPUT0": [1], "id": 5}, 500, "Unable to parse 'id': attempt to access JSON non-string as string"),
    ],
)  # fmt: skip
async def test_bad_parameters(
    ident: aiohttp.ClientSession, request_body: Any, status: int, message: str
) -> None:
    got_status, body, _ = await post(ident, "/v2/models/id_int32/generate", request_body)
    assert (got_status, body) == (status, {"error": message})


async def test_method_and_encoding(ident: aiohttp.ClientSession) -> None:
    async with ident.get("/v2/models/id_int32/generate") as resp:
        assert resp.status == 405
        assert await resp.json() == {"error": "Method Not Allowed"}
    status, body, _ = await post(
        ident,
        "/v2/models/id_int32/generate",
        {"INPUT0": [1]},
        headers={"Content-Encoding": "gzip"},
    )
    assert (status, body) == (
        400,
        {"error": "Unsupported content-encoding, only 'identity' is supported."},
    )


# ---------------------------------------------------------------------------------- datatypes


@pytest.mark.parametrize(
    ("model", "value", "expected"),
    [
        ("id_int32", [1, 2, 3], [1, 2, 3]),
        ("id_int32", 7, 7),  # a scalar input; a one-element output is a scalar
        ("id_int8", [300, -1], [44, -1]),  # cast as Triton casts (wrapping)
        ("id_uint64", [2**64 - 1], 2**64 - 1),
        ("id_bool", [True, False], [True, False]),
        ("id_fp64", [0.5, 2], [0.5, 2.0]),
        ("id_bytes", ["a", "é"], ["a", "é"]),
        ("id_bytes", "one", "one"),
        ("id_int32", [], []),
    ],
)
async def test_datatypes(
    ident: aiohttp.ClientSession, model: str, value: Any, expected: Any
) -> None:
    status, body, _ = await post(ident, f"/v2/models/{model}/generate", {"INPUT0": value})
    assert status == 200, body
    assert body["OUTPUT0"] == expected
    assert body["instance"].startswith(model)  # the identity model's response parameter


async def test_fixed_dims_and_batch_dim(ident: aiohttp.ClientSession) -> None:
    """``batched`` takes [-1, 2, 3]: six numbers become one batch of [2, 3]."""
    status, body, _ = await post(ident, "/v2/models/batched/generate", {"INPUT0": list(range(6))})
    assert status == 200
    assert body["OUTPUT0"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


async def test_stream_first_response_error_status_from_its_code(
    ident: aiohttp.ClientSession,
) -> None:
    """``failing`` answers INVALID_ARG for 13: 400, and the error as the only event."""
    status, events, ctype = await stream(
        ident, "/v2/models/failing/generate_stream", {"INPUT0": 13}
    )
    assert (status, ctype, events) == (400, SSE, [{"error": "fail_value 13 seen"}])
    status, body, ctype = await post(ident, "/v2/models/failing/generate", {"INPUT0": 13})
    assert (status, ctype, body) == (400, "application/json", {"error": "fail_value 13 seen"})


async def test_version_paths(ident: aiohttp.ClientSession) -> None:
    for version in ("1", "2"):
        status, body, _ = await post(
            ident, f"/v2/models/versions/versions/{version}/generate", {"INPUT0": [5]}
        )
        assert (status, body["model_version"], body["OUTPUT0"]) == (200, version, 5)
        status, events, _ = await stream(
            ident, f"/v2/models/versions/versions/{version}/generate_stream", {"INPUT0": [6]}
        )
        assert status == 200 and events[0]["model_version"] == version
    status, body, _ = await post(ident, "/v2/models/versions/generate", {"INPUT0": [5]})
    assert (status, body["model_version"]) == (200, "2")  # latest
    status, body, _ = await post(ident, "/v2/models/versions/versions/9/generate", {"INPUT0": [5]})
    assert status == 404 and "versions" in body["error"]
    async with ident.post("/v2/models/versions/versions/x/generate", data=b"{}") as resp:
        assert resp.status == 404  # a non-numeric version matches no route


# ---------------------------------------------------------------------------------- restricted


@pytest.fixture(scope="module")
def restricted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """An identity model behind ``--http-restricted-api=inference:infer-key=secret``."""
    repo = ModelRepositoryBuilder(tmp_path_factory.mktemp("generate-restricted") / "models")
    repo.add_identity("simple", "INT32")
    settings = loopback_settings(
        repo.root,
        allow_grpc=False,
        allow_metrics=False,
        http_restricted_api={"inference": ("infer-key", "secret")},
    )
    thread = ServerThread(
        Server(settings, plugin_manager=make_plugin_manager(autoload=False, extra=[identity]))
    )
    thread.start()
    try:
        yield thread.server
    finally:
        thread.stop()


@pytest.mark.parametrize("action", ["generate", "generate_stream"])
async def test_restricted_inference_category(restricted: Server, action: str) -> None:
    async with aiohttp.ClientSession(f"http://{restricted.http_url}") as session:
        path = f"/v2/models/simple/{action}"
        for headers in ({}, {"infer-key": "wrong"}):
            status, body, _ = await post(session, path, {"INPUT0": [1]}, headers=headers)
            assert (status, body) == (
                403,
                {"error": "This API is restricted, expecting header 'infer-key'"},
            )
        headers = {"infer-key": "secret"}
        if action == "generate":
            status, body, _ = await post(session, path, {"INPUT0": [1]}, headers=headers)
            assert (status, body["OUTPUT0"]) == (200, 1)
        else:
            async with session.post(
                path, data=orjson.dumps({"INPUT0": [1]}), headers=headers
            ) as resp:
                assert resp.status == 200
                assert [e["OUTPUT0"] for e in await read_events(resp)] == [1]
