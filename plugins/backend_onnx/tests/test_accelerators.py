"""Execution accelerators (Triton's ``optimization.execution_accelerators``) and the CUDA
``parameters``: which ONNX Runtime providers, with which options, each instance asks for; the
refusals on this CPU build of onnxruntime; and, marked ``gpu``, the real CUDA and TensorRT
providers where onnxruntime-gpu and a GPU are present."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from tritonx import InferenceRequest, Server  # noqa: E402
from tritonx.errors import Code, TritonXError  # noqa: E402
from tritonx.proto import model_config_pb2  # noqa: E402
from tritonx.testing import ModelRepositoryBuilder, loopback_settings  # noqa: E402
from tritonx.types import ModelState  # noqa: E402
from tritonx_backend_onnx.accelerators import providers_for  # noqa: E402
from tritonx_backend_onnx.models import add_sub  # noqa: E402

ALL = [
    "TensorrtExecutionProvider",
    "CUDAExecutionProvider",
    "OpenVINOExecutionProvider",
    "CPUExecutionProvider",
]
ADD_IO = {
    "inputs": [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
    "outputs": [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
}


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    return ("backend_onnx",)


def config_with(
    gpu: list[tuple[str, dict[str, str]]] = (),  # type: ignore[assignment]
    cpu: list[tuple[str, dict[str, str]]] = (),  # type: ignore[assignment]
) -> Any:
    config = model_config_pb2.ModelConfig(name="m")
    accel = config.optimization.execution_accelerators
    for name, params in gpu:
        accel.gpu_execution_accelerator.add(name=name).parameters.update(params)
    for name, params in cpu:
        accel.cpu_execution_accelerator.add(name=name).parameters.update(params)
    return config


# ----------------------------------------------------------------------------- provider choice


def test_tensorrt_parameters_map_to_provider_options() -> None:
    config = config_with(
        gpu=[
            (
                "tensorrt",
                {
                    "precision_mode": "FP16",
                    "max_workspace_size_bytes": "1073741824",
                    "trt_engine_cache_enable": "true",
                    "trt_engine_cache_path": "/tmp/cache",
                    "trt_max_partition_iterations": "10",
                    "trt_min_subgraph_size": "3",
                    "int8_calibration_table_name": "table",
                    "int8_use_native_calibration_table": "off",
                    "trt_builder_optimization_level": "5",
                },
            )
        ]
    )
    providers = providers_for(config, {}, "KIND_GPU", 1, ALL)
    assert [p for p, _ in providers] == [
        "TensorrtExecutionProvider",
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    ]
    assert providers[0][1] == {
        "trt_fp16_enable": "1",
        "trt_max_workspace_size": "1073741824",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/tmp/cache",
        "trt_max_partition_iterations": "10",
        "trt_min_subgraph_size": "3",
        "trt_int8_calibration_table_name": "table",
        "trt_int8_use_native_calibration_table": "0",
        "trt_builder_optimization_level": "5",
        "device_id": "1",
    }
    assert providers[1] == ("CUDAExecutionProvider", {"device_id": "1"})
    for mode, flag in (("BF16", "trt_bf16_enable"), ("INT8", "trt_int8_enable")):
        config = config_with(gpu=[("tensorrt", {"precision_mode": mode})])
        assert providers_for(config, {}, "KIND_GPU", 0, ALL)[0][1] == {flag: "1", "device_id": "0"}
    config = config_with(gpu=[("tensorrt", {"precision_mode": "FP32"})])
    assert providers_for(config, {}, "KIND_GPU", 0, ALL)[0][1] == {"device_id": "0"}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"precision_mode": "fp16"}, "unsupported precision mode 'fp16' is requested"),
        (
            {"max_workspace_size_bytes": "lots"},
            "failed to convert 'lots' to unsigned long long integral number",
        ),
        ({"trt_min_subgraph_size": "x"}, "failed to convert 'x' to integral number"),
        ({"trt_engine_cache_enable": "maybe"}, "failed to convert 'maybe' to boolean"),
        (
            {"trt_fancy": "1"},
            "unknown parameter 'trt_fancy' is provided for TensorRT Execution Accelerator",
        ),
        (
            {"max_partition_iterations": "1"},
            "unknown parameter 'max_partition_iterations' is provided",
        ),
    ],
)
def test_bad_tensorrt_parameters_are_refused(params: dict[str, str], message: str) -> None:
    config = config_with(gpu=[("tensorrt", params)])
    with pytest.raises(TritonXError) as err:
        providers_for(config, {}, "KIND_GPU", 0, ALL)
    assert err.value.code is Code.INVALID_ARG
    assert message in err.value.message


def test_cuda_accelerator_and_deprecated_parameters() -> None:
    config = config_with(
        gpu=[
            (
                "cuda",
                {
                    "cudnn_conv_use_max_workspace": "1",
                    "use_ep_level_unified_stream": "yes",
                    "enable_cuda_graph": "1",
                },
            )
        ]
    )
    params = {
        "cudnn_conv_algo_search": "1",
        "arena_extend_strategy": "1",
        "gpu_mem_limit": "1000",
        "do_copy_in_default_stream": "0",
    }
    providers = providers_for(config, params, "KIND_GPU", 2, ALL)
    assert providers == [
        (
            "CUDAExecutionProvider",
            {
                "cudnn_conv_use_max_workspace": "1",
                "use_ep_level_unified_stream": "1",
                "enable_cuda_graph": "1",
                "cudnn_conv_algo_search": "HEURISTIC",
                "arena_extend_strategy": "kSameAsRequested",
                "gpu_mem_limit": "1000",
                "do_copy_in_default_stream": "0",
                "device_id": "2",
            },
        ),
        ("CPUExecutionProvider", {}),
    ]
    with pytest.raises(TritonXError, match="unsupported cudnn_conv_algo_search value '7'"):
        providers_for(config, {"cudnn_conv_algo_search": "7"}, "KIND_GPU", 0, ALL)
    with pytest.raises(TritonXError, match="unsupported arena_extend_strategy value '2'"):
        providers_for(config, {"arena_extend_strategy": "2"}, "KIND_GPU", 0, ALL)
    bad = config_with(gpu=[("cuda", {"do_copy_in_default_stream": "sometimes"})])
    with pytest.raises(TritonXError, match="failed to convert 'sometimes' to boolean"):
        providers_for(bad, {}, "KIND_GPU", 0, ALL)


def test_openvino_cpu_accelerator_and_order() -> None:
    config = config_with(gpu=[("tensorrt", {})], cpu=[("openvino", {"num_of_threads": "2"})])
    assert providers_for(config, {}, "KIND_GPU", 0, ALL) == [
        ("TensorrtExecutionProvider", {"device_id": "0"}),
        ("CUDAExecutionProvider", {"device_id": "0"}),
        ("OpenVINOExecutionProvider", {"device_type": "CPU", "num_of_threads": "2"}),
        ("CPUExecutionProvider", {}),
    ]
    assert providers_for(config, {}, "KIND_CPU", 0, ALL) == [
        ("OpenVINOExecutionProvider", {"device_type": "CPU", "num_of_threads": "2"}),
        ("CPUExecutionProvider", {}),
    ]
    assert providers_for(config_with(), {}, "KIND_CPU", 0, ["CPUExecutionProvider"]) == [
        ("CPUExecutionProvider", {})
    ]


def test_unknown_accelerators_are_refused() -> None:
    for config in (config_with(gpu=[("warp", {})]), config_with(cpu=[("warp", {})])):
        for kind in ("KIND_CPU", "KIND_GPU"):
            with pytest.raises(TritonXError) as err:
                providers_for(config, {}, kind, 0, ALL)
            assert err.value.code is Code.INVALID_ARG
            assert "unknown Execution Accelerator 'warp' is requested" in err.value.message


def test_missing_providers_are_unavailable() -> None:
    cpu_only = ["AzureExecutionProvider", "CPUExecutionProvider"]
    cases = [
        (config_with(), "KIND_GPU", "CUDAExecutionProvider", "onnxruntime-gpu"),
        (
            config_with(gpu=[("tensorrt", {})]),
            "KIND_GPU",
            "TensorrtExecutionProvider, CUDAExecutionProvider",
            "onnxruntime-gpu",
        ),
        (
            config_with(cpu=[("openvino", {})]),
            "KIND_CPU",
            "OpenVINOExecutionProvider",
            "onnxruntime-openvino",
        ),
    ]
    for config, kind, missing, build in cases:
        with pytest.raises(TritonXError) as err:
            providers_for(config, {}, kind, 0, cpu_only)
        assert err.value.code is Code.UNAVAILABLE
        assert f"ONNX Runtime has no {missing} here" in err.value.message
        assert build in err.value.message


# ----------------------------------------------------------------------------- through the server


async def test_accelerators_on_this_cpu_build(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """On the CPU build: the openvino accelerator is refused (UNAVAILABLE, the model does not
    load); GPU accelerators on a CPU instance are not applied, and the log says so."""
    files = {1: {"model.onnx": add_sub()}}
    cpu = "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
    model_repository.add(
        "openvino_ep",
        backend="onnxruntime",
        max_batch_size=4,
        extra=cpu
        + 'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }\n',
        versions=files,
        **ADD_IO,  # type: ignore[arg-type]
    )
    model_repository.add(
        "trt_on_cpu",
        backend="onnxruntime",
        max_batch_size=4,
        extra=cpu
        + 'optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" } ] } }\n',
        versions=files,
        **ADD_IO,  # type: ignore[arg-type]
    )
    caplog.set_level(logging.WARNING, logger="tritonx.backend.onnxruntime")
    async with Server(
        loopback_settings(model_repository.root), plugin_manager=plugin_manager
    ) as server:
        rows = {r.name: r for r in server.repository_index()}
        if "OpenVINOExecutionProvider" in ort.get_available_providers():
            assert rows["openvino_ep"].state is ModelState.READY
        else:
            assert rows["openvino_ep"].state is ModelState.UNAVAILABLE
            assert (
                "ONNX Runtime has no OpenVINOExecutionProvider here" in rows["openvino_ep"].reason
            )
        assert rows["trt_on_cpu"].state is ModelState.READY
        x = np.ones((1, 4), np.float32)
        out = await server.infer(InferenceRequest("trt_on_cpu", {"INPUT0": x, "INPUT1": x}))
        np.testing.assert_array_equal(out.raise_for_error().outputs["OUTPUT0"], 2 * x)
    assert "gpu_execution_accelerator 'tensorrt' is not applied to KIND_CPU instances" in (
        caplog.text
    )


# ----------------------------------------------------------------------------- real GPU providers


def _has_cuda_ep() -> bool:
    from tritonx._core.devices import gpu_count

    return gpu_count() > 0 and "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda_ep(), reason="needs a GPU and onnxruntime-gpu")
@pytest.mark.parametrize("accelerator", ["cuda", "tensorrt"])
async def test_gpu_accelerator_with_parameters(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: Any,
    accelerator: str,
    tmp_path: Path,
) -> None:
    """A KIND_GPU instance with the accelerator and its parameters loads on that provider and
    computes the same results; TensorRT writes its engine cache where it is told."""
    if (
        accelerator == "tensorrt"
        and "TensorrtExecutionProvider" not in ort.get_available_providers()
    ):
        pytest.skip("onnxruntime has no TensorRT execution provider")
    cache = tmp_path / "trt_cache"
    if accelerator == "tensorrt":
        params = (
            'parameters { key: "precision_mode" value: "FP16" } '
            'parameters { key: "trt_engine_cache_enable" value: "1" } '
            f'parameters {{ key: "trt_engine_cache_path" value: "{cache}" }}'
        )
    else:
        params = 'parameters { key: "cudnn_conv_use_max_workspace" value: "1" }'
    model_repository.add(
        "gpu",
        backend="onnxruntime",
        max_batch_size=8,
        extra="instance_group [ { count: 1, kind: KIND_GPU } ]\n"
        "optimization { execution_accelerators { gpu_execution_accelerator [ "
        f'{{ name: "{accelerator}" {params} }} ] }} }}\n',
        versions={1: {"model.onnx": add_sub()}},
        **ADD_IO,  # type: ignore[arg-type]
    )
    async with Server(
        loopback_settings(model_repository.root), plugin_manager=plugin_manager
    ) as server:
        assert server.model_ready("gpu"), server.status_table()
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        out = await server.infer(InferenceRequest("gpu", {"INPUT0": x, "INPUT1": x}))
        np.testing.assert_array_equal(out.raise_for_error().outputs["OUTPUT0"], 2 * x)
    if accelerator == "tensorrt":
        assert cache.is_dir() and any(cache.iterdir()), "no TensorRT engine was cached"
