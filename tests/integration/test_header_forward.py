"""Header forwarding (``--http-header-forward-pattern``, ``--grpc-header-forward-pattern``) and
the gRPC connection age (``--grpc-max-connection-age[-grace]``), with the real tritonclient
(HTTP, gRPC unary and streaming) and a Triton ``model.py`` that answers the JSON of its
request's ``request.parameters()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from aiohttp import ClientSession
from tritonclient.utils import InferenceServerException

from tritonx import Server
from tritonx._dataplane.header_forward import HeaderForward
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.errors import Code, TritonXError
from tritonx.proto import service_pb2, service_pb2_grpc
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

pytest.importorskip("tritonx_backend_python")

PARAMETERS_MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("PARAMS", np.array([r.parameters().encode()], dtype=object))]
            )
            for r in requests
        ]
"""

X = np.array([1.0], np.float32)


@contextlib.asynccontextmanager
async def serve(repo: ModelRepositoryBuilder, **settings: Any) -> AsyncIterator[Server]:
    repo.add(
        "params",
        backend="python",
        max_batch_size=0,
        inputs=[("INPUT0", "FP32", [1])],
        outputs=[("PARAMS", "BYTES", [1])],
        versions={1: {"model.py": PARAMETERS_MODEL}},
    )
    pm = make_plugin_manager(autoload=True, only=("backend_python",))
    async with Server(loopback_settings(repo.root, **settings), plugin_manager=pm) as srv:
        yield srv


def http_inputs() -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(X)
    return [tensor]


def grpc_inputs() -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(X)
    return [tensor]


def seen(result: Any) -> dict[str, Any]:
    """The parameters the model saw."""
    return dict(json.loads(result.as_numpy("PARAMS")[0]))


def raw_infer(url: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """A JSON ``/infer`` with exactly these header names (http.client keeps their case)."""
    host, port = url.rsplit(":", 1)
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    )
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", "/v2/models/params/infer", body, headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


async def test_http_headers_the_pattern_matches_become_parameters(tmp_path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    async with serve(repo, http_header_forward_pattern="^x-fwd-") as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        try:
            result = await client.infer(
                "params",
                http_inputs(),
                headers={"x-fwd-user": "alice", "x-fwd-tenant": "t7", "x-other": "no"},
                parameters={"mine": "1"},
            )
        finally:
            await client.close()
        params = seen(result)
        assert params["x-fwd-user"] == "alice" and params["x-fwd-tenant"] == "t7"
        assert params["mine"] == "1" and "x-other" not in params
        # the name as the client sent it; the pattern matches it whatever its case
        status, body = await asyncio.to_thread(
            raw_infer, srv.http_url, {"X-Fwd-Trace": "abc", "Content-Type": "application/json"}
        )
        assert status == 200, body
        assert json.loads(body["outputs"][0]["data"][0]) == {"X-Fwd-Trace": "abc"}


async def test_http_headers_are_not_forwarded_without_a_pattern(tmp_path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    async with serve(repo) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        try:
            result = await client.infer("params", http_inputs(), headers={"x-fwd-user": "a"})
        finally:
            await client.close()
    assert seen(result) == {}


async def test_generate_requests_forward_no_headers(tmp_path) -> None:
    """As Triton's HandleGenerate (it calls no ForwardHeaders): the pattern applies to
    ``/infer`` only; a generate request's parameters are its body's."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    async with serve(repo, http_header_forward_pattern="^x-fwd-") as srv:
        async with ClientSession() as session:
            async with session.post(
                f"http://{srv.http_url}/v2/models/params/generate",
                json={"INPUT0": [1.0], "mine": "1"},
                headers={"x-fwd-user": "alice"},
            ) as answer:
                assert answer.status == 200, await answer.text()
                doc = await answer.json()
    assert json.loads(doc["PARAMS"]) == {"mine": "1"}


@pytest.mark.parametrize("name", ["triton_id", "priority", "sequence_id"])
async def test_a_reserved_header_the_pattern_matches_fails_the_request(tmp_path, name) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    message = f"Header '{name}' is reserved for Triton usage and cannot be forwarded."
    async with serve(
        repo, http_header_forward_pattern=".*", grpc_header_forward_pattern=".*"
    ) as srv:
        status, body = await asyncio.to_thread(
            raw_infer, srv.http_url, {name: "1", "Content-Type": "application/json"}
        )
        assert (status, body) == (400, {"error": message})
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            with pytest.raises(InferenceServerException) as err:
                await client.infer("params", grpc_inputs(), headers={name: "1"})
            assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
            assert err.value.message() == message
            # the server goes on serving
            assert "user-agent" in seen(await client.infer("params", grpc_inputs()))
        finally:
            await client.close()


async def test_grpc_metadata_the_pattern_matches_become_parameters(tmp_path) -> None:
    """ModelInfer and every request of a ModelStreamInfer call (the call's metadata)."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    async with serve(repo, grpc_header_forward_pattern="^X-FWD") as srv:
        client = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            result = await client.infer(
                "params", grpc_inputs(), headers={"x-fwd-user": "bob", "x-other": "no"}
            )
            assert seen(result) == {"x-fwd-user": "bob"}

            async def requests() -> AsyncIterator[dict[str, Any]]:
                for i in range(2):
                    yield {"model_name": "params", "inputs": grpc_inputs(), "request_id": str(i)}

            answers = [
                seen(result)
                async for result, error in client.stream_infer(
                    requests(), headers={"x-fwd-user": "carol"}
                )
                if error is None
            ]
            assert answers == [{"x-fwd-user": "carol"}] * 2
        finally:
            await client.close()


def test_the_pattern_is_case_insensitive_unless_it_starts_with_the_flag_off() -> None:
    sent = [("x-low", "1"), ("X-Up", "2"), ("other", "3")]
    for pattern, forwarded in (("^x-", {"x-low": "1", "X-Up": "2"}), ("(?-i)^X-", {"X-Up": "2"})):
        parameters: dict[str, Any] = {}
        HeaderForward(pattern, "--http-header-forward-pattern").apply(sent, parameters)
        assert parameters == forwarded


async def test_an_invalid_pattern_stops_the_start(tmp_path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    for field, flag in (
        ("http_header_forward_pattern", "--http-header-forward-pattern"),
        ("grpc_header_forward_pattern", "--grpc-header-forward-pattern"),
    ):
        with pytest.raises(TritonXError) as err:
            async with serve(repo, **{field: "x-(unclosed"}):
                pass
        assert err.value.code is Code.INVALID_ARG
        assert err.value.message.startswith(
            f"{flag}: 'x-(unclosed' is not a valid regular expression: "
        )


async def test_a_grpc_connection_past_its_max_age_is_ended(tmp_path) -> None:
    """With --grpc-max-connection-age the server ends an idle connection once it is that old
    (GOAWAY: the client's channel goes back to IDLE); without it the connection stays."""

    async def state_after_a_call(srv: Server) -> grpc.ChannelConnectivity:
        async with grpc.aio.insecure_channel(srv.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert (await stub.ServerLive(service_pb2.ServerLiveRequest())).live
            assert channel.get_state() is grpc.ChannelConnectivity.READY
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                if channel.get_state() is not grpc.ChannelConnectivity.READY:
                    break
            return channel.get_state()

    repo = ModelRepositoryBuilder(tmp_path / "models")
    async with serve(repo, grpc_max_connection_age=300, grpc_max_connection_age_grace=100) as srv:
        assert await state_after_a_call(srv) is grpc.ChannelConnectivity.IDLE
    async with serve(repo) as srv:
        assert await state_after_a_call(srv) is grpc.ChannelConnectivity.READY


async def test_a_negative_connection_age_stops_the_start(tmp_path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    with pytest.raises(TritonXError) as err:
        async with serve(repo, grpc_max_connection_age_grace=-1):
            pass
    assert err.value.code is Code.INVALID_ARG
    assert err.value.message == (
        "--grpc-max-connection-age-grace must be 0 or more milliseconds, got -1"
    )
