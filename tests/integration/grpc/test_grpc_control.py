"""Health, metadata, config, statistics, repository and health-check RPCs over gRPC, plus
the listener options (keepalive, message size)."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

from tritonx import Server
from tritonx._transports.grpc.health import HealthCheckRequest, HealthCheckResponse
from tritonx._transports.grpc.server import grpc_options
from tritonx.errors import TritonXError
from tritonx.testing import ModelRepositoryBuilder, ServerThread, loopback_settings

GRPC_ONLY = {"allow_http": False, "allow_metrics": False}


def health_check(url: str) -> int:
    """Call grpc.health.v1.Health/Check with raw bytes; return the ServingStatus number."""
    with grpc.insecure_channel(url) as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda m: m,
            response_deserializer=lambda b: b,
        )
        raw = check(b"")  # empty HealthCheckRequest
    return HealthCheckResponse.FromString(raw).status


async def test_live_ready_metadata(grpc_client: aioclient.InferenceServerClient) -> None:
    assert await grpc_client.is_server_live()
    assert await grpc_client.is_server_ready()
    meta = await grpc_client.get_server_metadata()
    assert meta.name == "triton"
    assert "model_repository" in meta.extensions and "statistics" in meta.extensions
    assert await grpc_client.is_model_ready("simple")
    assert await grpc_client.is_model_ready("simple", "1")
    assert not await grpc_client.is_model_ready("simple", "2")
    assert not await grpc_client.is_model_ready("nope")  # OK / ready=false, as Triton 2.51
    with pytest.raises(InferenceServerException) as info:
        await grpc_client.is_model_ready("simple", "abc")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"


async def test_model_metadata(grpc_client: aioclient.InferenceServerClient) -> None:
    meta = await grpc_client.get_model_metadata("simple")
    assert meta.name == "simple" and list(meta.versions) == ["1"]
    assert meta.platform == "identity"
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
        ("INPUT0", "FP32", [-1, -1])
    ]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [
        ("OUTPUT0", "FP32", [-1, -1])
    ]
    meta = await grpc_client.get_model_metadata("all_types", "1")
    assert meta.inputs[12].datatype == "BYTES" and list(meta.inputs[12].shape) == [-1]
    with pytest.raises(InferenceServerException) as info:
        await grpc_client.get_model_metadata("nope")
    assert info.value.status() == "StatusCode.NOT_FOUND"
    assert "Request for unknown model: 'nope' is not found" in info.value.message()


async def test_model_config(grpc_client: aioclient.InferenceServerClient) -> None:
    response = await grpc_client.get_model_config("simple")
    config = response.config
    assert config.name == "simple" and config.max_batch_size == 8 and config.backend == "identity"
    assert config.input[0].name == "INPUT0"
    as_json = await grpc_client.get_model_config("decoupled", as_json=True)
    assert as_json["config"]["model_transaction_policy"]["decoupled"] is True
    with pytest.raises(InferenceServerException) as info:
        await grpc_client.get_model_config("nope")
    assert info.value.status() == "StatusCode.NOT_FOUND"


async def test_model_statistics(grpc_client: aioclient.InferenceServerClient) -> None:
    inp = aioclient.InferInput("INPUT0", [2, 3], "FP32")
    inp.set_data_from_numpy(np.ones((2, 3), np.float32))
    for _ in range(3):
        await grpc_client.infer("simple", [inp])
    stats = await grpc_client.get_inference_statistics("simple")
    (row,) = stats.model_stats
    assert row.name == "simple" and row.version == "1"
    assert row.inference_stats.success.count == 3
    assert row.inference_stats.success.ns > 0
    assert row.inference_count == 6 and row.execution_count == 3
    assert row.last_inference > 0
    assert [b.batch_size for b in row.batch_stats] == [2]
    counts = {
        row.inference_stats.compute_input.count,
        row.inference_stats.compute_infer.count,
        row.inference_stats.compute_output.count,
    }
    assert counts == {3}  # perf_analyzer requires these to be equal
    everything = await grpc_client.get_inference_statistics()
    assert {s.name for s in everything.model_stats} >= {"simple", "all_types", "decoupled"}
    with pytest.raises(InferenceServerException) as info:
        await grpc_client.get_inference_statistics("nope")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "requested model 'nope' is not available" in info.value.message()


async def test_repository_index(grpc_client: aioclient.InferenceServerClient) -> None:
    index = await grpc_client.get_model_repository_index()
    rows = {m.name: m for m in index.models}
    assert rows["simple"].version == "1" and rows["simple"].state == "READY"
    ready = await grpc_client.get_model_repository_index(as_json=True)
    assert all(m["state"] == "READY" for m in ready["models"])


def test_repository_name_unsupported(server_thread: ServerThread) -> None:
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    with grpc.insecure_channel(server_thread.server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(repository_name="other"))
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "'repository_name' specification is not supported" in info.value.details()
        with pytest.raises(grpc.RpcError) as info:
            stub.RepositoryModelLoad(
                service_pb2.RepositoryModelLoadRequest(model_name="simple", repository_name="x")
            )
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_load_unload_not_allowed_in_none_mode(server_thread: ServerThread) -> None:
    client = grpcclient.InferenceServerClient(server_thread.server.grpc_url)
    with pytest.raises(InferenceServerException) as info:
        client.load_model("simple")
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    client.close()


def test_health_check_serving(server_thread: ServerThread) -> None:
    assert health_check(server_thread.server.grpc_url) == 1  # SERVING
    with grpc.insecure_channel(server_thread.server.grpc_url) as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=HealthCheckRequest.SerializeToString,
            response_deserializer=HealthCheckResponse.FromString,
        )
        response = check(HealthCheckRequest(service="inference.GRPCInferenceService"))
        assert response.status == HealthCheckResponse.SERVING


# ---------------------------------------------------------------------- own servers


async def test_health_not_serving_when_not_ready(
    tmp_path: Path, plugin_manager, grpc_engine: str
) -> None:
    """With strict readiness a model that failed to load makes the server not ready."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    repo.add_identity("ok")
    repo.add_identity("broken", parameters={"fail_load": "1"})
    settings = loopback_settings(repo.root, grpc_engine=grpc_engine, **GRPC_ONLY)
    async with Server(settings, plugin_manager=plugin_manager) as server:
        client = aioclient.InferenceServerClient(server.grpc_url)
        try:
            assert await client.is_server_live()
            assert not await client.is_server_ready()
            assert not await client.is_model_ready("broken")
            async with grpc.aio.insecure_channel(server.grpc_url) as channel:
                check = channel.unary_unary(
                    "/grpc.health.v1.Health/Check",
                    request_serializer=HealthCheckRequest.SerializeToString,
                    response_deserializer=HealthCheckResponse.FromString,
                )
                response = await check(HealthCheckRequest())
                assert response.status == HealthCheckResponse.NOT_SERVING
            index = await client.get_model_repository_index(as_json=True)
            broken = next(m for m in index["models"] if m["name"] == "broken")
            assert broken["state"] == "UNAVAILABLE" and broken["reason"]
        finally:
            await client.close()


async def test_repository_load_unload_explicit(
    tmp_path: Path, plugin_manager, grpc_engine: str
) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    repo.add_identity("m1", max_batch_size=4)
    settings = loopback_settings(
        repo.root, model_control_mode="explicit", grpc_engine=grpc_engine, **GRPC_ONLY
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        client = aioclient.InferenceServerClient(server.grpc_url)
        try:
            assert not await client.is_model_ready("m1")
            index = await client.get_model_repository_index(as_json=True)
            assert {"name": "m1"} in index["models"]
            await client.load_model("m1")
            assert await client.is_model_ready("m1")
            # config override (JSON string) and a file override
            override = json.dumps(
                {
                    "name": "m1",
                    "backend": "identity",
                    "max_batch_size": 2,
                    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
                    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
                }
            )
            await client.load_model("m1", config=override)
            assert (await client.get_model_config("m1")).config.max_batch_size == 2
            await client.load_model("m1", config=override, files={"file:1/extra.bin": b"\x00\x01"})
            assert await client.is_model_ready("m1")
            with pytest.raises(InferenceServerException) as info:
                await client.load_model("nope")
            assert "failed to load" in info.value.message() or "nope" in info.value.message()
            await client.unload_model("m1", unload_dependents=True)
            assert not await client.is_model_ready("m1")
            await client.unload_model("never-loaded")  # OK, as Triton
        finally:
            await client.close()


def test_bad_load_parameters(tmp_path: Path, plugin_manager, grpc_engine: str) -> None:
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    repo = ModelRepositoryBuilder(tmp_path / "models")
    repo.add_identity("m1")
    settings = loopback_settings(
        repo.root, model_control_mode="explicit", grpc_engine=grpc_engine, **GRPC_ONLY
    )
    with ServerThread(Server(settings, plugin_manager=plugin_manager)) as server:
        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            load = service_pb2.RepositoryModelLoadRequest(model_name="m1")
            load.parameters["config"].int64_param = 1
            with pytest.raises(grpc.RpcError) as info:
                stub.RepositoryModelLoad(load)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "expected string_param" in info.value.details()
            load = service_pb2.RepositoryModelLoadRequest(model_name="m1")
            load.parameters["what"].string_param = "x"
            with pytest.raises(grpc.RpcError) as info:
                stub.RepositoryModelLoad(load)
            assert "unrecognized load parameter 'what'" in info.value.details()
            unload = service_pb2.RepositoryModelUnloadRequest(model_name="m1")
            unload.parameters["unload_dependents"].string_param = "yes"
            with pytest.raises(grpc.RpcError) as info:
                stub.RepositoryModelUnload(unload)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_keepalive_settings_and_options(tmp_path: Path, plugin_manager, grpc_engine: str) -> None:
    """--grpc-keepalive-* settings reach the channel arguments and a keepalive client works."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    repo.add_identity("m1", max_batch_size=4)
    settings = loopback_settings(
        repo.root,
        grpc_keepalive_time=1000,
        grpc_keepalive_timeout=500,
        grpc_keepalive_permit_without_calls=True,
        grpc_http2_max_pings_without_data=0,
        grpc_http2_min_recv_ping_interval_without_data=100,
        grpc_http2_max_ping_strikes=0,
        grpc_infer_allocation_pool_size=2,
        grpc_engine=grpc_engine,
        **GRPC_ONLY,
    )
    options = dict(grpc_options(settings))
    assert options["grpc.keepalive_time_ms"] == 1000
    assert options["grpc.keepalive_timeout_ms"] == 500
    assert options["grpc.http2.ping_timeout_ms"] == 500  # grpc core's wait for the ping's ACK
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.http2.max_pings_without_data"] == 0
    assert options["grpc.http2.min_ping_interval_without_data_ms"] == 100
    assert options["grpc.http2.max_ping_strikes"] == 0
    assert options["grpc.max_receive_message_length"] == 2**31 - 1
    with ServerThread(Server(settings, plugin_manager=plugin_manager)) as server:
        keepalive = grpcclient.KeepAliveOptions(
            keepalive_time_ms=200,
            keepalive_timeout_ms=500,
            keepalive_permit_without_calls=True,
            http2_max_pings_without_data=0,
        )
        client = grpcclient.InferenceServerClient(server.grpc_url, keepalive_options=keepalive)
        try:
            import time

            time.sleep(0.7)  # a few pings, not rejected as abusive
            inp = grpcclient.InferInput("INPUT0", [1, 2], "FP32")
            inp.set_data_from_numpy(np.ones((1, 2), np.float32))
            assert client.infer("m1", [inp]).as_numpy("OUTPUT0").shape == (1, 2)
        finally:
            client.close()


async def test_grpc_address_and_port(tmp_path: Path, plugin_manager, grpc_engine: str) -> None:
    import socket

    repo = ModelRepositoryBuilder(tmp_path / "models")
    repo.add_identity("m1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = loopback_settings(repo.root, grpc_port=port, grpc_engine=grpc_engine, **GRPC_ONLY)
    async with Server(settings, plugin_manager=plugin_manager) as server:
        assert server.grpc_port == port and server.grpc_url == f"127.0.0.1:{port}"
        client = aioclient.InferenceServerClient(f"localhost:{port}")
        try:
            assert await client.is_server_live()
        finally:
            await client.close()
        # a second server on the same port fails instead of sharing it (no SO_REUSEPORT),
        # before loading anything, with tritonserver's words and the flag
        with pytest.raises(TritonXError, match=rf"Socket '127.0.0.1:{port}' already in use"):
            async with Server(settings, plugin_manager=plugin_manager):
                pass
