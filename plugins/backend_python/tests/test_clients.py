"""The python backend through the official tritonclient over HTTP and gRPC, the metrics
endpoint, and the bundled ``simple_identity`` example."""

from __future__ import annotations

import asyncio

import aiohttp
import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

from tritonx import Server
from tritonx.config import EXAMPLE_REPOSITORY
from tritonx.testing import loopback_settings


@pytest.fixture
def server_settings(model_repository, standard_models, add_model):
    """The standard models plus the custom-metrics model, with every listener."""
    add_model(
        "custom_metrics",
        "custom_metrics",
        inputs=[("INPUT0", "FP32", [-1])],
        outputs=[("OUTPUT0", "FP32", [1])],
    )
    return loopback_settings(
        model_repository.root, model_control_mode="explicit", load_model=("*",)
    )


def http_inputs(client_module, values0, values1):
    inputs = []
    for name, values in (("INPUT0", values0), ("INPUT1", values1)):
        tensor = client_module.InferInput(name, list(values.shape), "FP32")
        tensor.set_data_from_numpy(values)
        inputs.append(tensor)
    return inputs


A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([10, 20, 30, 40], dtype=np.float32)


async def test_add_sub_http(http_client) -> None:
    result = await http_client.infer("add_sub", http_inputs(httpclient, A, B))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    meta = await http_client.get_model_metadata("add_sub")
    assert meta["platform"] == "python"
    assert [i["datatype"] for i in meta["inputs"]] == ["FP32", "FP32"]


async def test_add_sub_grpc(grpc_client) -> None:
    result = await grpc_client.infer("add_sub", http_inputs(grpcclient, A, B))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


async def test_wrong_datatype_http(http_client) -> None:
    tensor = httpclient.InferInput("INPUT0", [4], "INT32")
    tensor.set_data_from_numpy(np.ones(4, np.int32))
    other = http_inputs(httpclient, A, B)[1]
    with pytest.raises(InferenceServerException) as err:
        await http_client.infer("add_sub", [tensor, other])
    assert "data-type is 'INT32', but model 'add_sub' expects 'FP32'" in err.value.message()


@pytest.mark.parametrize("bls_mode", ["sync", "async", "decoupled"])
async def test_bls_http(http_client, bls_mode: str) -> None:
    result = await http_client.infer(
        "bls", http_inputs(httpclient, A, B), parameters={"mode": bls_mode}
    )
    assert result.as_numpy("MESSAGE")[0].decode().startswith(bls_mode)


async def test_decoupled_repeat_grpc_stream(grpc_client) -> None:
    values = np.array([5, 6, 7, 8, 9], dtype=np.int32)

    async def requests():
        tensor = grpcclient.InferInput("IN", [len(values)], "INT32")
        tensor.set_data_from_numpy(values)
        yield {"model_name": "repeat", "inputs": [tensor], "request_id": "r"}

    got = []
    async for result, error in grpc_client.stream_infer(requests()):
        assert error is None
        got.append(int(result.as_numpy("OUT")[0]))
        if len(got) == len(values):
            break
    assert got == values.tolist()


async def test_decoupled_rejected_over_http(http_client) -> None:
    tensor = httpclient.InferInput("IN", [2], "INT32")
    tensor.set_data_from_numpy(np.ones(2, np.int32))
    with pytest.raises(InferenceServerException) as err:
        await http_client.infer("repeat", [tensor])
    assert "decoupled" in err.value.message()


async def test_exception_and_crash_over_grpc(grpc_client, http_client) -> None:
    def text(value: str):
        tensor = grpcclient.InferInput("INPUT0", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[value.encode()]], dtype=object))
        return [tensor]

    with pytest.raises(InferenceServerException) as err:
        await grpc_client.infer("faulty", text("raise"))
    assert "ValueError: asked to raise" in err.value.message()
    assert await grpc_client.is_model_ready("faulty")
    with pytest.raises(InferenceServerException) as err:
        await grpc_client.infer("faulty", text("segv"))
    assert err.value.message() == "Stub process 'faulty_0' is not healthy."
    assert err.value.status() == "StatusCode.INTERNAL"
    # the server keeps serving; as in Triton the dead stub stays dead until a load
    result = await grpc_client.infer("add_sub", http_inputs(grpcclient, A, B))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    assert not await grpc_client.is_model_ready("faulty")
    await grpc_client.load_model("faulty")
    assert await grpc_client.is_model_ready("faulty")
    result = await grpc_client.infer("faulty", text("again"))
    assert result.as_numpy("OUTPUT0")[0][0] == b"again"
    index = await http_client.get_model_repository_index()
    row = next(r for r in index if r["name"] == "faulty")
    assert row["state"] == "READY"


async def test_custom_metrics_on_metrics_endpoint(server: Server, http_client) -> None:
    for value in (3.0, 7.0):
        tensor = httpclient.InferInput("INPUT0", [5], "FP32")
        tensor.set_data_from_numpy(np.full(5, value, np.float32))
        result = await http_client.infer("custom_metrics", [tensor])
    assert result.as_numpy("OUTPUT0")[0] == 2  # the model reads its counter back
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{server.metrics_url}/metrics") as response:
            body = await response.text()
    labels = '{model="custom_metrics",version="1"}'
    assert f"requests_count_custom{labels} 2\n" in body
    assert f"last_value_custom{labels} 7\n" in body
    assert 'input_size_custom_bucket{model="custom_metrics",version="1",le="10"} 2\n' in body
    assert f"input_size_custom_count{labels} 2\n" in body
    assert "# TYPE last_value_custom gauge" in body
    # Triton's names: no _total suffix on counters, in HELP/TYPE lines or samples
    assert (
        "# TYPE requests_count_custom counter" in body and "requests_count_custom_total" not in body
    )


@pytest.fixture
def example_server_settings(tmp_path):
    return loopback_settings(
        EXAMPLE_REPOSITORY, model_control_mode="explicit", load_model=("simple_identity",)
    )


async def test_simple_identity_example(example_server_settings, plugin_manager) -> None:
    async with Server(example_server_settings, plugin_manager=plugin_manager) as server:
        assert server.model_config("simple_identity").max_batch_size == 8
        data = np.array([[b"hello", b"world", b""], [b"\x00\x01", b"x" * 1000, b"!"]], dtype=object)
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            for module, client in ((httpclient, http), (grpcclient, grpc)):
                tensor = module.InferInput("INPUT0", list(data.shape), "BYTES")
                tensor.set_data_from_numpy(data)
                result = await client.infer("simple_identity", [tensor])
                assert result.as_numpy("OUTPUT0").tolist() == data.tolist()
        finally:
            await asyncio.gather(http.close(), grpc.close())
