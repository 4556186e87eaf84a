"""The official ``tritonclient.http`` (sync) and ``tritonclient.http.aio`` against tritonx."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException

NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
    "BF16": ml_dtypes.bfloat16,
}


def sample(datatype: str, n: int = 5) -> np.ndarray:
    """A small tensor of ``datatype`` with edge values where the type has them."""
    if datatype == "BOOL":
        return np.array([True, False, True, True, False][:n])
    if datatype == "BYTES":
        return np.array([b"a", b"", "\u00e9t\u00e9".encode(), b"xyz", b"0"][:n], dtype=np.object_)
    dtype = np.dtype(NUMPY[datatype])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array([info.min, 0, 1, 7, info.max][:n], dtype=dtype)
    return np.array([-1.5, 0.0, 0.25, 2.0, 1024.0][:n], dtype=dtype)


def infer_input(name: str, array: np.ndarray, datatype: str, binary: bool = True) -> Any:
    inp = httpclient.InferInput(name, list(array.shape), datatype)
    inp.set_data_from_numpy(array, binary_data=binary)
    return inp


# ---------------------------------------------------------------------------------- server


def test_health_and_server_metadata(client: Any) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    md = client.get_server_metadata()
    assert md["name"] == "triton"
    assert md["version"]
    # tritonserver's list (core src/server.cc), in its order: every extension tritonx serves
    assert md["extensions"] == [
        "classification",
        "sequence",
        "model_repository",
        "model_repository(unload_dependents)",
        "schedule_policy",
        "model_configuration",
        "system_shared_memory",
        "cuda_shared_memory",
        "binary_tensor_data",
        "parameters",
        "statistics",
        "trace",
        "logging",
    ]


def test_model_metadata_config_ready(client: Any) -> None:
    assert client.is_model_ready("batched")
    assert client.is_model_ready("versions", "2")
    assert not client.is_model_ready("nope")
    assert not client.is_model_ready("batched", "7")
    md = client.get_model_metadata("batched")
    assert md == {
        "name": "batched",
        "versions": ["1"],
        "platform": "identity",
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 2, 3]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 2, 3]}],
    }
    assert client.get_model_metadata("versions", "1")["versions"] == ["1"]
    assert client.get_model_metadata("versions")["versions"] == ["1", "2"]
    config = client.get_model_config("batched")
    assert config["max_batch_size"] == 8
    assert config["input"][0]["dims"] == [2, 3]  # 64-bit fields as numbers
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert client.get_model_config("id_bytes")["input"][0]["data_type"] == "TYPE_STRING"


def test_metadata_unknown_model(client: Any) -> None:
    with pytest.raises(InferenceServerException) as err:
        client.get_model_metadata("nope")
    assert err.value.status() == "404"
    assert "Request for unknown model" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        client.get_model_config("batched", "9")
    assert err.value.status() == "404"


def test_statistics(client: Any) -> None:
    client.infer("id_int32", [infer_input("INPUT0", sample("INT32"), "INT32")])
    stats = client.get_inference_statistics("id_int32")["model_stats"]
    assert len(stats) == 1
    s = stats[0]
    assert s["name"] == "id_int32" and s["version"] == "1"
    assert s["inference_stats"]["success"]["count"] >= 1
    assert s["inference_count"] >= 1 and s["execution_count"] >= 1
    everything = client.get_inference_statistics()["model_stats"]
    assert {m["name"] for m in everything} >= {"id_int32", "batched", "versions"}
    assert len(client.get_inference_statistics("versions", "2")["model_stats"]) == 1
    with pytest.raises(InferenceServerException) as err:
        client.get_inference_statistics("nope")
    assert err.value.status() == "400"
    assert "requested model 'nope' is not available" in err.value.message()


def test_repository_index(client: Any) -> None:
    index = client.get_model_repository_index()
    rows = {(r["name"], r.get("version")): r for r in index}
    assert rows[("batched", "1")]["state"] == "READY"
    assert rows[("versions", "2")]["state"] == "READY"


# ---------------------------------------------------------------------------------- infer


@pytest.mark.parametrize("datatype", list(NUMPY))
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_every_datatype(client: Any, datatype: str, binary: bool) -> None:
    data = sample(datatype)
    if datatype == "BF16":
        data = data.astype(ml_dtypes.bfloat16)
    model = f"id_{datatype.lower()}"
    json_only_unsupported = datatype in ("FP16", "BF16") and not binary
    inp = httpclient.InferInput("INPUT0", list(data.shape), datatype)
    if json_only_unsupported and datatype == "BF16":
        # the client itself refuses BF16 as JSON; send binary, ask for a JSON output
        inp.set_data_from_numpy(data, binary_data=True)
    else:
        inp.set_data_from_numpy(data, binary_data=binary)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    if json_only_unsupported:
        with pytest.raises(InferenceServerException) as err:
            client.infer(model, [inp], outputs=outputs)
        assert err.value.status() == "400"
        assert f"{datatype} data via JSON is not supported" in err.value.message()
        return
    result = client.infer(model, [inp], outputs=outputs, request_id=f"r-{datatype}")
    out = result.as_numpy("OUTPUT0")
    response = result.get_response()
    assert response["id"] == f"r-{datatype}"
    assert response["model_name"] == model and response["model_version"] == "1"
    assert response["outputs"][0]["datatype"] == datatype
    assert out.shape == data.shape
    if datatype == "BYTES":
        # JSON BYTES come back as str from tritonclient, binary ones as bytes
        expected = list(data) if binary else [b.decode() for b in data]
        assert list(out) == expected
    elif datatype == "BF16":
        np.testing.assert_array_equal(out.astype(np.float32), data.astype(np.float32))
    else:
        np.testing.assert_array_equal(out, data)


def test_infer_default_outputs_are_binary(client: Any) -> None:
    data = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    result = client.infer("batched", [infer_input("INPUT0", data, "FP32", binary=False)])
    response = result.get_response()
    assert response["outputs"][0]["parameters"]["binary_data_size"] == 48
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_requested_outputs_and_mixed_encodings(client: Any) -> None:
    ints = np.array([1, 2, 3], dtype=np.int32)
    strs = np.array([b"x", b"yy"], dtype=np.object_)
    inputs = [infer_input("INPUT0", ints, "INT32"), infer_input("INPUT1", strs, "BYTES", False)]
    only1 = [httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)]
    result = client.infer("multi", inputs, outputs=only1)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    assert list(result.as_numpy("OUTPUT1")) == [b"x", b"yy"]
    both = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=False),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=True),
    ]
    result = client.infer("multi", inputs, outputs=both)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ints)
    assert "data" in result.get_output("OUTPUT0")
    assert list(result.as_numpy("OUTPUT1")) == [b"x", b"yy"]


def test_empty_tensor(client: Any) -> None:
    data = np.zeros((0,), dtype=np.int32)
    result = client.infer("id_int32", [infer_input("INPUT0", data, "INT32")])
    assert result.as_numpy("OUTPUT0").shape == (0,)
    assert result.get_output("OUTPUT0")["parameters"]["binary_data_size"] == 0


def test_request_parameters_and_versions(client: Any) -> None:
    data = sample("INT32")
    params = {"temperature": 0.5, "mode": "fast", "n": 3, "flag": True}
    for version in ("1", "2"):
        result = client.infer(
            "versions",
            [infer_input("INPUT0", data, "INT32")],
            model_version=version,
            parameters=params,
        )
        assert result.get_response()["model_version"] == version
    with pytest.raises(InferenceServerException) as err:
        client.infer("versions", [infer_input("INPUT0", data, "INT32")], model_version="3")
    assert err.value.status() == "404"


@pytest.mark.parametrize("request_alg", [None, "gzip", "deflate"])
@pytest.mark.parametrize("response_alg", [None, "gzip", "deflate"])
def test_compression(client: Any, request_alg: str | None, response_alg: str | None) -> None:
    data = np.arange(64, dtype=np.float32).reshape(2, 2, 16)[:, :, :3].copy()
    result = client.infer(
        "batched",
        [infer_input("INPUT0", data, "FP32")],
        request_compression_algorithm=request_alg,
        response_compression_algorithm=response_alg,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_classification(client: Any) -> None:
    data = np.array([[0.1, 0.7, 0.05, 0.15], [4, 3, 2, 1]], dtype=np.float32)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", class_count=3)]
    result = client.infer("classifier", [infer_input("INPUT0", data, "FP32")], outputs=outputs)
    out = result.as_numpy("OUTPUT0")
    assert result.get_output("OUTPUT0")["datatype"] == "BYTES"
    assert out.shape == (2, 3)
    assert list(out[0]) == [b"0.700000:1:dog", b"0.150000:3:fish", b"0.100000:0:cat"]
    assert list(out[1]) == [b"4.000000:0:cat", b"3.000000:1:dog", b"2.000000:2"]
    # k larger than the classes, JSON output
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=False, class_count=10)]
    result = client.infer("classifier", [infer_input("INPUT0", data[:1], "FP32")], outputs=outputs)
    assert result.get_output("OUTPUT0")["shape"] == [1, 4]
    assert result.get_output("OUTPUT0")["data"][0] == "0.700000:1:dog"
    # integers, no labels, non-batching model
    ints = np.array([3, 9, -2], dtype=np.int64)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", class_count=2)]
    result = client.infer("id_int64", [infer_input("INPUT0", ints, "INT64")], outputs=outputs)
    assert list(result.as_numpy("OUTPUT0")) == [b"9:1", b"3:0"]
    # unsupported datatype
    with pytest.raises(InferenceServerException) as err:
        client.infer("id_bytes", [infer_input("INPUT0", sample("BYTES"), "BYTES")], outputs=outputs)
    assert err.value.status() == "400"
    assert (
        "class result not available for output due to unsupported type 'BYTES'"
        in err.value.message()
    )


def test_infer_errors(client: Any) -> None:
    data = sample("INT32")
    with pytest.raises(InferenceServerException) as err:
        client.infer("nope", [infer_input("INPUT0", data, "INT32")])
    assert err.value.status() == "404"
    assert "Request for unknown model: 'nope' is not found" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        client.infer("decoupled", [infer_input("INPUT0", data, "INT32")])
    assert err.value.status() == "501"
    assert "doesn't support models with decoupled transaction policy" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        client.infer(
            "id_int32",
            [infer_input("INPUT0", data, "INT32")],
            outputs=[httpclient.InferRequestedOutput("NOPE")],
        )
    assert err.value.status() == "400"
    assert "unexpected inference output 'NOPE' for model 'id_int32'" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        client.infer("id_int32", [infer_input("INPUT0", data.astype(np.int64), "INT64")])
    assert err.value.status() == "400"
    assert "data-type is 'INT64', but model 'id_int32' expects 'INT32'" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        client.infer("failing", [infer_input("INPUT0", np.array([13], np.int32), "INT32")])
    assert err.value.status() == "400"
    assert "fail_value 13" in err.value.message()
    # the server keeps serving
    ok = client.infer("failing", [infer_input("INPUT0", np.array([12], np.int32), "INT32")])
    assert ok.as_numpy("OUTPUT0").tolist() == [12]


# ---------------------------------------------------------------------------------- aio


async def test_aio_client(aclient: Any) -> None:
    assert await aclient.is_server_live()
    assert await aclient.is_server_ready()
    assert (await aclient.get_server_metadata())["name"] == "triton"
    assert await aclient.is_model_ready("batched")
    assert (await aclient.get_model_metadata("batched"))["name"] == "batched"
    assert (await aclient.get_model_config("batched"))["max_batch_size"] == 8
    assert (await aclient.get_inference_statistics("batched"))["model_stats"]
    assert await aclient.get_model_repository_index()
    data = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    for binary in (True, False):
        inp = aiohttpclient.InferInput("INPUT0", [1, 2, 3], "FP32")
        inp.set_data_from_numpy(data, binary_data=binary)
        outs = [aiohttpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
        result = await aclient.infer("batched", [inp], outputs=outs, request_id="aio")
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
        assert result.get_response()["id"] == "aio"
    for alg in ("gzip", "deflate"):
        result = await aclient.infer(
            "batched",
            [inp],
            request_compression_algorithm=alg,
            response_compression_algorithm=alg,
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


async def test_aio_errors(aclient: Any) -> None:
    inp = aiohttpclient.InferInput("INPUT0", [2], "INT32")
    inp.set_data_from_numpy(np.array([1, 2], np.int32))
    with pytest.raises(InferenceServerException) as err:
        await aclient.infer("nope", [inp])
    assert err.value.status() == "404"
    with pytest.raises(InferenceServerException) as err:
        await aclient.infer("decoupled", [inp])
    assert err.value.status() == "501"
    assert not await aclient.is_model_ready("nope")
    result = await aclient.infer("id_int32", [inp])
    assert result.as_numpy("OUTPUT0").tolist() == [1, 2]
