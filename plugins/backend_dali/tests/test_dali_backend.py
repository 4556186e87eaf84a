"""The DALI backend served by an in-process tritonx server.

Every pipeline is built here with DALI's Python API (CPU operators, ``device_id=None``) and
serialized into the repository; results are compared with the same serialized pipeline run
in-process (``tritonx_backend_dali.pipelines.run``).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

dali = pytest.importorskip("nvidia.dali")
Image = pytest.importorskip("PIL.Image")

import tritonclient.grpc.aio as grpcclient  # noqa: E402
import tritonclient.http.aio as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

import tritonx_backend_dali  # noqa: E402
from tritonx import InferenceRequest, InstanceSpec, LoadContext, Server  # noqa: E402
from tritonx._runtime.plugins import make_plugin_manager  # noqa: E402
from tritonx.config import ModelConfig  # noqa: E402
from tritonx.errors import Code, TritonXError  # noqa: E402
from tritonx.testing import BackendContract, ModelRepositoryBuilder, identity  # noqa: E402
from tritonx.testing import model_status as status  # noqa: E402
from tritonx.testing import serve_repository as serve  # noqa: E402
from tritonx.types import ModelState  # noqa: E402
from tritonx_backend_dali import pipelines  # noqa: E402
from tritonx_backend_dali.backend import DaliBackend, cuda_device_count  # noqa: E402
from tritonx_backend_dali.pipeline_info import DALI_TO_TRITON, parse_pipeline  # noqa: E402

ONE_CPU = "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
ARITH_IO = {
    "inputs": [("INPUT0", "FP32", [4])],
    "outputs": [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
}
IMAGE_IO = {
    "inputs": [("IMAGE", "BYTES", [1])],
    "outputs": [("RESIZED", "UINT8", [16, 16, 3])],
}


@pytest.fixture
def plugin_manager() -> Any:
    """The identity test backend plus this plugin, registered from its module."""
    return make_plugin_manager(autoload=False, extra=[identity, tritonx_backend_dali])


def jpeg(seed: int, height: int = 24, width: int = 40) -> bytes:
    """A JPEG image (smooth gradients, so that it compresses like a photo) made with Pillow."""
    yy, xx = np.mgrid[0:height, 0:width]
    rgb = np.stack(
        [(xx * 5 + seed * 20) % 256, (yy * 7 + seed * 3) % 256, ((xx + yy) * 3) % 256], axis=-1
    ).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="JPEG", quality=92)
    return buffer.getvalue()


def bytes_tensor(items: list[bytes]) -> np.ndarray:
    return np.array(items, dtype=object).reshape(len(items), 1)


def reference_images(serialized: bytes, images: list[bytes]) -> np.ndarray:
    """DALI in-process on ``images``: the first output's samples, stacked."""
    samples = pipelines.run(serialized, {"IMAGE": [np.frombuffer(b, np.uint8) for b in images]})
    return np.stack(samples[0])


async def infer_both(server: Server, model: str, name: str, array: np.ndarray) -> list[Any]:
    """``model``'s result for one input through tritonclient HTTP and gRPC."""
    datatype = (
        "BYTES"
        if array.dtype == object
        else {np.float32: "FP32", np.uint8: "UINT8"}[array.dtype.type]
    )
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        results = []
        for module, client in ((httpclient, http), (grpcclient, grpc)):
            tensor = module.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            results.append(await client.infer(model, [tensor]))
        return results
    finally:
        await http.close()
        await grpc.close()


def load_instance(model_dir: Path, config: ModelConfig, kind: str = "KIND_CPU") -> Any:
    """One instance loaded the way the server loads it."""
    ctx = LoadContext(
        model_name=model_dir.name,
        version=1,
        model_dir=model_dir,
        version_path=model_dir / "1",
        model_path=model_dir / "1" / "model.dali",
        config=config,
        instance=InstanceSpec(name=f"{model_dir.name}_0", group_name=model_dir.name, kind=kind),
    )
    return DaliBackend({}).load(ctx)


# ----------------------------------------------------------------------------- the contract


class TestDaliContract(BackendContract):
    """The inherited contract suite on a batching FP32 pipeline with a full config."""

    backend_module = "tritonx_backend_dali"
    framework_modules = ("nvidia.dali",)

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder) -> Path:
        return model_repository.add(
            "arith",
            backend="dali",
            max_batch_size=8,
            extra="dynamic_batching { }\n" + ONE_CPU,
            versions={1: {"model.dali": pipelines.arithmetic()}},
            **ARITH_IO,  # type: ignore[arg-type]
        )


class TestDaliAutoCompletedContract(BackendContract):
    """The contract suite on a pipeline that declares its interface, with no config.pbtxt."""

    backend_module = "tritonx_backend_dali"
    framework_modules = ("nvidia.dali",)

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder) -> Path:
        return model_repository.add(
            "auto", write_config=False, versions={1: {"model.dali": pipelines.arithmetic(6)}}
        )


# ----------------------------------------------------------------------------- pipeline info


def test_pipeline_info_reads_the_serialized_interface() -> None:
    """The protobuf reader finds external sources, declared types, outputs, the batch size
    and GPU operators; its type table matches DALI's enum."""
    types = pytest.importorskip("nvidia.dali.types")
    names = {"FP16": "FLOAT16", "FP32": "FLOAT", "FP64": "FLOAT64"}
    for value, triton in DALI_TO_TRITON.items():
        name = triton.removeprefix("TYPE_")
        assert int(getattr(types.DALIDataType, names.get(name, name))) == value
    info = parse_pipeline(pipelines.arithmetic(5))
    assert info.max_batch_size == 5
    assert [(i.name, i.triton_type, i.ndim) for i in info.inputs] == [("INPUT0", "TYPE_FP32", 1)]
    assert [(o.triton_type, o.ndim) for o in info.outputs] == [("TYPE_FP32", 1)] * 2
    assert info.gpu_operators == ()
    bare = parse_pipeline(pipelines.arithmetic(declare=False))
    assert bare.inputs[0].triton_type is None and bare.inputs[0].ndim is None
    assert parse_pipeline(pipelines.on_gpu()).gpu_operators


# ----------------------------------------------------------------------------- auto-complete


async def test_auto_complete_fills_the_config_from_the_pipeline(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """No config.pbtxt: inputs from the external sources (allow_ragged_batch), outputs in
    the pipeline's order, max_batch_size from the pipeline, dynamic batching. A partial config
    renames an output and lowers max_batch_size; a config that contradicts the pipeline's
    declared types fails that model's load with Triton's message."""
    model_repository.add(
        "auto", write_config=False, versions={1: {"model.dali": pipelines.arithmetic(6)}}
    )
    model_repository.add(
        "partial",
        config='backend: "dali"\nmax_batch_size: 3\n'
        'output [ { name: "DOUBLED" }, { name: "PLUS_ONE", dims: [ 4 ] } ]\n',
        versions={1: {"model.dali": pipelines.arithmetic(6)}},
    )
    model_repository.add(
        "mismatch",
        backend="dali",
        max_batch_size=4,
        inputs=[("INPUT0", "INT32", [4])],
        versions={1: {"model.dali": pipelines.arithmetic()}},
    )
    async with serve(model_repository, plugin_manager) as server:
        auto = server.model_config("auto")
        assert auto.max_batch_size == 6
        assert [(i.name, i.datatype.value, i.dims) for i in auto.inputs] == [
            ("INPUT0", "FP32", (-1,))
        ]
        assert auto.inputs[0].allow_ragged_batch
        assert [(o.datatype.value, o.dims) for o in auto.outputs] == [("FP32", (-1,))] * 2
        assert auto.raw.HasField("dynamic_batching")
        partial = server.model_config("partial")
        assert partial.max_batch_size == 3
        assert [(o.name, o.dims) for o in partial.outputs] == [
            ("DOUBLED", (-1,)),
            ("PLUS_ONE", (4,)),
        ]
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        response = await server.infer(InferenceRequest("partial", {"INPUT0": x}))
        np.testing.assert_array_equal(response.outputs["DOUBLED"], x * 2)
        np.testing.assert_array_equal(response.outputs["PLUS_ONE"], x + 1)
        state, reason = status(server, "mismatch")
        assert state is ModelState.UNAVAILABLE
        assert 'Mismatch of data_type config for "INPUT0"' in reason, reason


# ----------------------------------------------------------------------------- JPEG bytes


async def test_jpeg_bytes_over_http_and_grpc_match_dali_in_process(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """Encoded JPEGs of different sizes, one BYTES element per sample, decoded and resized by
    the served pipeline over HTTP and gRPC: equal to the same pipeline run in-process."""
    serialized = pipelines.decode_resize(16)
    model_repository.add(
        "resize",
        backend="dali",
        max_batch_size=8,
        extra=ONE_CPU,
        versions={1: {"model.dali": serialized}},
        **IMAGE_IO,  # type: ignore[arg-type]
    )
    images = [jpeg(1), jpeg(2, 50, 30), jpeg(3, 17, 17)]
    expected = reference_images(serialized, images)
    assert expected.shape == (3, 16, 16, 3)
    async with serve(model_repository, plugin_manager) as server:
        for result in await infer_both(server, "resize", "IMAGE", bytes_tensor(images)):
            got = result.as_numpy("RESIZED")
            assert got.dtype == np.uint8
            np.testing.assert_array_equal(got, expected)


async def test_uint8_input_padded_with_zeros_as_in_triton(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """Triton's way to send encoded images: a UINT8 [-1] input, each row zero-padded to the
    longest image; the decoder ignores the padding."""
    serialized = pipelines.decode_resize(16)
    model_repository.add(
        "resize",
        backend="dali",
        max_batch_size=8,
        inputs=[("IMAGE", "UINT8", [-1])],
        outputs=[("RESIZED", "UINT8", [16, 16, 3])],
        versions={1: {"model.dali": serialized}},
    )
    images = [jpeg(4), jpeg(5, 40, 60)]
    width = max(len(b) for b in images)
    padded = np.zeros((2, width), np.uint8)
    for row, data in enumerate(images):
        padded[row, : len(data)] = np.frombuffer(data, np.uint8)
    expected = reference_images(serialized, images)
    async with serve(model_repository, plugin_manager) as server:
        for result in await infer_both(server, "resize", "IMAGE", padded):
            np.testing.assert_array_equal(result.as_numpy("RESIZED"), expected)


# ----------------------------------------------------------------------------- faults


async def test_corrupt_pipeline_fails_its_load_and_others_keep_serving(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """A model.dali that is not a serialized pipeline, and a version with neither model.dali
    nor dali.py, fail their model's load with a clear message; a good model beside them
    serves."""
    model_repository.add(
        "corrupt",
        backend="dali",
        max_batch_size=8,
        versions={1: {"model.dali": b"\x00not a pipeline\xff" * 8}},
        **ARITH_IO,  # type: ignore[arg-type]
    )
    model_repository.add(
        "missing",
        backend="dali",
        max_batch_size=8,
        versions={1: {"other.txt": "no pipeline here"}},
        **ARITH_IO,  # type: ignore[arg-type]
    )
    model_repository.add(
        "good",
        backend="dali",
        max_batch_size=8,
        versions={1: {"model.dali": pipelines.arithmetic()}},
        **ARITH_IO,  # type: ignore[arg-type]
    )
    string_out = {
        "inputs": [("IMAGE", "UINT8", [-1])],
        "outputs": [("RESIZED", "BYTES", [16, 16, 3])],
    }
    model_repository.add(
        "string_output",
        backend="dali",
        max_batch_size=8,
        versions={1: {"model.dali": pipelines.decode_resize(size=16)}},
        **string_out,  # type: ignore[arg-type]
    )
    async with serve(model_repository, plugin_manager) as server:
        state, reason = status(server, "string_output")  # a UINT8 output declared BYTES
        assert state is ModelState.UNAVAILABLE
        assert "produces numeric tensors, not TYPE_STRING" in reason, reason
        state, reason = status(server, "missing")
        assert state is ModelState.UNAVAILABLE
        assert "model.dali does not exist" in reason and "dali.py" in reason, reason
        state, reason = status(server, "corrupt")
        assert state is ModelState.UNAVAILABLE
        assert "is not a serialized DALI pipeline" in reason, reason
        assert "Failed to load model file" in reason
        x = np.ones((1, 4), np.float32)
        response = await server.infer(InferenceRequest("good", {"INPUT0": x}))
        np.testing.assert_array_equal(response.outputs["OUTPUT0"], x * 2)


async def test_bytes_that_are_not_an_image_fail_that_request_only(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """Over HTTP and gRPC, a sample that DALI cannot decode fails the request with DALI's
    message (Triton's DALI backend answers UNKNOWN: HTTP 400, gRPC UNKNOWN); the pipeline is
    rebuilt and the next request is answered. In one batch with good requests, only the bad
    one fails."""
    serialized = pipelines.decode_resize(16)
    path = model_repository.add(
        "resize",
        backend="dali",
        max_batch_size=8,
        versions={1: {"model.dali": serialized}},
        **IMAGE_IO,  # type: ignore[arg-type]
    )
    bad = bytes_tensor([b"this is not an image"])
    good = bytes_tensor([jpeg(7)])
    async with serve(model_repository, plugin_manager) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            for module, client, code in (
                (httpclient, http, "400"),
                (grpcclient, grpc, "StatusCode.UNKNOWN"),
            ):
                tensor = module.InferInput("IMAGE", [1, 1], "BYTES")
                tensor.set_data_from_numpy(bad)
                with pytest.raises(InferenceServerException) as info:
                    await client.infer("resize", [tensor])
                assert "DALI error" in str(info.value), str(info.value)
                assert "decoders.image" in str(info.value)
                assert str(info.value.status()) == code
                tensor.set_data_from_numpy(good)
                result = await client.infer("resize", [tensor])
                assert result.as_numpy("RESIZED").shape == (1, 16, 16, 3)
        finally:
            await http.close()
            await grpc.close()
        config = server.model_config("resize")
    instance = await asyncio.to_thread(load_instance, path, config)
    try:
        requests = [
            InferenceRequest("resize", {"IMAGE": good}),
            InferenceRequest("resize", {"IMAGE": bad}),
            InferenceRequest("resize", {"IMAGE": bytes_tensor([jpeg(8)])}),
        ]
        responses = await asyncio.to_thread(instance.execute, requests)
    finally:
        instance.unload()
    assert responses[0].error is None and responses[2].error is None
    assert responses[1].error is not None and responses[1].error.code is Code.UNKNOWN
    expected = reference_images(serialized, [jpeg(7), jpeg(8)])
    np.testing.assert_array_equal(responses[0].outputs["RESIZED"][0], expected[0])
    np.testing.assert_array_equal(responses[2].outputs["RESIZED"][0], expected[1])


async def test_wrong_datatype_and_shape_get_tritons_invalid_argument(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """The core's validation answers before DALI runs: HTTP 400 and gRPC INVALID_ARGUMENT
    with Triton's text."""
    model_repository.add(
        "arith",
        backend="dali",
        max_batch_size=8,
        versions={1: {"model.dali": pipelines.arithmetic()}},
        **ARITH_IO,  # type: ignore[arg-type]
    )
    async with serve(model_repository, plugin_manager) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            for module, client, code in (
                (httpclient, http, "400"),
                (grpcclient, grpc, "StatusCode.INVALID_ARGUMENT"),
            ):
                wrong_type = module.InferInput("INPUT0", [1, 4], "FP64")
                wrong_type.set_data_from_numpy(np.zeros((1, 4), np.float64))
                with pytest.raises(InferenceServerException) as info:
                    await client.infer("arith", [wrong_type])
                assert (
                    "input 'INPUT0' data-type is 'FP64', but model 'arith' expects 'FP32'"
                    in str(info.value)
                )
                assert str(info.value.status()) == code
                wrong_shape = module.InferInput("INPUT0", [1, 5], "FP32")
                wrong_shape.set_data_from_numpy(np.zeros((1, 5), np.float32))
                with pytest.raises(InferenceServerException) as info:
                    await client.infer("arith", [wrong_shape])
                assert "unexpected shape for input 'INPUT0'" in str(info.value)
                assert str(info.value.status()) == code
        finally:
            await http.close()
            await grpc.close()


# ----------------------------------------------------------------------------- devices


async def test_gpu_pipelines_and_gpu_instances_are_refused_without_a_gpu(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """On a machine without a GPU: a pipeline with GPU operators on a KIND_CPU instance, and
    a KIND_GPU instance of a CPU pipeline, fail their loads with a clear message."""
    if cuda_device_count() > 0:
        pytest.skip("this machine has a GPU")
    model_repository.add(
        "gpu_ops",
        backend="dali",
        max_batch_size=4,
        inputs=[("INPUT0", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4])],
        extra=ONE_CPU,
        versions={1: {"model.dali": pipelines.on_gpu()}},
    )
    model_repository.add(
        "gpu_kind",
        backend="dali",
        max_batch_size=8,
        extra="instance_group [ { count: 1, kind: KIND_GPU } ]\n",
        versions={1: {"model.dali": pipelines.arithmetic()}},
        **ARITH_IO,  # type: ignore[arg-type]
    )
    async with serve(model_repository, plugin_manager) as server:
        state, reason = status(server, "gpu_ops")
        assert state is ModelState.UNAVAILABLE
        assert "uses GPU operators" in reason and "KIND_GPU" in reason, reason
        state, reason = status(server, "gpu_kind")
        assert state is ModelState.UNAVAILABLE
        assert "GPU" in reason, reason


@pytest.mark.gpu
async def test_gpu_pipeline_on_a_gpu_instance(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """With a GPU: a pipeline with GPU operators on a KIND_GPU instance answers like DALI
    in-process on the same GPU."""
    serialized = pipelines.on_gpu()
    model_repository.add(
        "gpu",
        backend="dali",
        max_batch_size=4,
        inputs=[("INPUT0", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4])],
        extra="instance_group [ { count: 1, kind: KIND_GPU, gpus: [ 0 ] } ]\n",
        versions={1: {"model.dali": serialized}},
    )
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    expected = np.stack(pipelines.run(serialized, {"INPUT0": list(x)}, device_id=0)[0])
    async with serve(model_repository, plugin_manager) as server:
        for result in await infer_both(server, "gpu", "INPUT0", x):
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)


# ----------------------------------------------------------------------------- batching


async def test_concurrent_requests_run_as_one_dali_iteration(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """Three concurrent requests (2 + 1 + 1 samples) form one batch of 4 (the dynamic batcher
    waits for its preferred size, so no timing is involved): one execution, one DALI
    iteration, every request answered with its own rows; statistics show compute times."""
    model_repository.add(
        "arith",
        backend="dali",
        max_batch_size=8,
        extra="dynamic_batching { preferred_batch_size: [ 4 ] "
        "max_queue_delay_microseconds: 60000000 }\n" + ONE_CPU,
        versions={1: {"model.dali": pipelines.arithmetic()}},
        **ARITH_IO,  # type: ignore[arg-type]
    )
    inputs = [
        np.arange(8, dtype=np.float32).reshape(2, 4),
        np.full((1, 4), 10, np.float32),
        np.full((1, 4), -3, np.float32),
    ]
    async with serve(model_repository, plugin_manager) as server:
        responses = await asyncio.gather(
            *(server.infer(InferenceRequest("arith", {"INPUT0": x})) for x in inputs)
        )
        for x, response in zip(inputs, responses, strict=True):
            assert response.error is None
            np.testing.assert_array_equal(response.outputs["OUTPUT0"], x * 2)
            np.testing.assert_array_equal(response.outputs["OUTPUT1"], x + 1)
        http = httpclient.InferenceServerClient(server.http_url)
        try:
            stats = (await http.get_inference_statistics("arith"))["model_stats"][0]
        finally:
            await http.close()
    assert stats["execution_count"] == 1
    assert stats["inference_count"] == 4
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]] == [
        (4, 1)
    ]
    inference = stats["inference_stats"]
    assert inference["success"]["count"] == 3
    for phase in ("compute_input", "compute_infer", "compute_output"):
        assert inference[phase]["count"] == 3, phase
    assert inference["compute_infer"]["ns"] > 0


async def test_unbatched_model_takes_samples_on_the_first_dimension(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """max_batch_size 0: the first dimension of an input is the samples of one iteration (as
    in Triton's DALI backend); more samples than the pipeline's batch size is an error."""
    model_repository.add(
        "flat",
        backend="dali",
        max_batch_size=0,
        inputs=[("INPUT0", "FP32", [-1, 4])],
        outputs=[("OUTPUT0", "FP32", [-1, 4]), ("OUTPUT1", "FP32", [-1, 4])],
        versions={1: {"model.dali": pipelines.arithmetic(batch_size=3)}},
    )
    async with serve(model_repository, plugin_manager) as server:
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        for result in await infer_both(server, "flat", "INPUT0", x):
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x * 2)
        too_many = np.zeros((4, 4), np.float32)
        with pytest.raises(TritonXError, match="exceed the DALI pipeline's batch size 3"):
            await server.infer(InferenceRequest("flat", {"INPUT0": too_many}))
        # no sample: that request fails alone, beside one that has samples
        empty = InferenceRequest("flat", {"INPUT0": np.zeros((0, 4), np.float32)})
        fine = InferenceRequest("flat", {"INPUT0": x[:1]})
        failed, answered = await asyncio.gather(
            server.infer(empty), server.infer(fine), return_exceptions=True
        )
        assert isinstance(failed, TritonXError) and "at least one sample" in failed.message
        assert not isinstance(answered, BaseException)
        np.testing.assert_array_equal(answered.outputs["OUTPUT0"], x[:1] * 2)


# ----------------------------------------------------------------------------- more Triton


async def test_autoserialized_dali_py_and_parameters(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """A ``dali.py`` pipeline definition decorated with ``@autoserialize`` is serialized at
    load (Triton's fallback); ``num_threads`` is read; ``split_along_outer_axis`` joins each
    request's samples along their outer axis; decoupled models are refused."""
    source = (
        "import nvidia.dali as dali\n"
        "import nvidia.dali.types as types\n"
        "from nvidia.dali.plugin.triton import autoserialize\n\n"
        "@autoserialize\n"
        "@dali.pipeline_def(batch_size=4, num_threads=1, device_id=None,\n"
        "                   output_dtype=[types.FLOAT], output_ndim=[2])\n"
        "def pipe():\n"
        '    x = dali.fn.external_source(device="cpu", name="X", dtype=types.FLOAT, ndim=2)\n'
        "    return x * 3\n"
    )
    model_repository.add(
        "py",
        backend="dali",
        max_batch_size=4,
        inputs=[("X", "FP32", [2, 3])],
        outputs=[("Y", "FP32", [3])],
        parameters={"num_threads": "2", "split_along_outer_axis": "Y"},
        versions={1: {"dali.py": source}},
    )
    model_repository.add(
        "decoupled",
        backend="dali",
        max_batch_size=8,
        extra="model_transaction_policy { decoupled: true }\n",
        versions={1: {"model.dali": pipelines.arithmetic()}},
        **ARITH_IO,  # type: ignore[arg-type]
    )
    async with serve(model_repository, plugin_manager) as server:
        x = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
        response = await server.infer(InferenceRequest("py", {"X": x}))
        assert response.error is None, response.error
        np.testing.assert_array_equal(response.outputs["Y"], (x * 3).reshape(4, 3))
        state, reason = status(server, "decoupled")
        assert state is ModelState.UNAVAILABLE
        assert "decoupled" in reason, reason


def test_tritonx_check_reads_dali_models(model_repository: ModelRepositoryBuilder) -> None:
    """``tritonx check`` reads each pipeline without loading it: a good one is OK with its
    batch size and device, a corrupt one and one whose config contradicts it are errors."""
    model_repository.add(
        "good",
        backend="dali",
        max_batch_size=8,
        versions={1: {"model.dali": pipelines.arithmetic()}},
        **ARITH_IO,  # type: ignore[arg-type]
    )
    model_repository.add(
        "corrupt",
        backend="dali",
        max_batch_size=8,
        versions={1: {"model.dali": b"garbage"}},
        **ARITH_IO,  # type: ignore[arg-type]
    )
    model_repository.add(
        "too_many_outputs",
        backend="dali",
        max_batch_size=8,
        inputs=ARITH_IO["inputs"],
        outputs=[*ARITH_IO["outputs"], ("OUTPUT2", "FP32", [4])],
        versions={1: {"model.dali": pipelines.arithmetic()}},
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
    env["TRITONX_PLUGINS"] = "backend_dali"
    src = str(Path(tritonx_backend_dali.__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "tritonx", "check", "--json", str(model_repository.root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    models = {m["name"]: m for m in json.loads(result.stdout)}
    assert models["good"]["status"] == "OK", models["good"]
    assert models["good"]["notes"] == {"pipeline batch size": "8", "device": "cpu"}
    assert models["corrupt"]["status"] == "ERROR"
    assert "is not a serialized DALI pipeline" in models["corrupt"]["error"]
    assert models["too_many_outputs"]["status"] == "ERROR"
    assert "do not match" in models["too_many_outputs"]["error"]


async def test_backend_config_release_after_unload_and_plugin_libs(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """``release_after_unload=true``: a model serves, unloads (DALI's unused memory is
    released) and loads again; a ``plugin_libs`` library that cannot be loaded fails the load
    with its name; a value that is not a boolean is refused."""
    model_repository.add(
        "arith",
        backend="dali",
        max_batch_size=8,
        versions={1: {"model.dali": pipelines.arithmetic()}},
        **ARITH_IO,  # type: ignore[arg-type]
    )
    x = np.ones((1, 4), np.float32)
    config = {"dali": {"release_after_unload": "true"}}
    explicit = {"model_control_mode": "explicit", "load_model": ("*",)}
    async with serve(model_repository, plugin_manager, backend_config=config, **explicit) as server:
        await server.infer(InferenceRequest("arith", {"INPUT0": x}))
        await server.unload_model("arith")
        await server.load_model("arith")
        response = await server.infer(InferenceRequest("arith", {"INPUT0": x}))
        np.testing.assert_array_equal(response.outputs["OUTPUT1"], x + 1)
    missing = str(model_repository.root / "no_such_plugin.so")
    config = {"dali": {"plugin_libs": missing}}
    async with serve(model_repository, plugin_manager, backend_config=config) as server:
        state, reason = status(server, "arith")
        assert state is ModelState.UNAVAILABLE
        assert f"failed to load DALI plugin library '{missing}'" in reason, reason
    assert DaliBackend({"release_after_unload": "true"}).release_after_unload
    with pytest.raises(TritonXError, match="release_after_unload"):
        DaliBackend({"release_after_unload": "maybe"})
