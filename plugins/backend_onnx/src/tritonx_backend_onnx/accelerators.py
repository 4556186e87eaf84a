"""Execution providers from a model config, as Triton's onnxruntime backend chooses them:
``optimization { execution_accelerators { gpu_execution_accelerator [...] cpu_execution_accelerator
[...] } }``, the (deprecated) CUDA ``parameters``, and the instance's kind and device.

Works on the config protobuf and plain strings: nothing here imports onnxruntime, so the rules
are tested on machines without the GPU build.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from tritonx.errors import Code, TritonXError, invalid_arg

log = logging.getLogger("tritonx.backend.onnxruntime")

#: ``execution_accelerators`` names → ONNX Runtime execution providers.
GPU_ACCELERATORS = {"tensorrt": "TensorrtExecutionProvider", "cuda": "CUDAExecutionProvider"}
CPU_ACCELERATORS = {"openvino": "OpenVINOExecutionProvider"}

#: ``precision_mode`` of the TensorRT accelerator → the TensorRT EP flag it sets.
TRT_PRECISION_MODES = {
    "FP32": None,
    "FP16": "trt_fp16_enable",
    "BF16": "trt_bf16_enable",
    "INT8": "trt_int8_enable",
}

#: Triton's TensorRT accelerator parameters → (TensorRT EP option, value kind).
TRT_PARAMETERS: dict[str, tuple[str, str]] = {
    "max_workspace_size_bytes": ("trt_max_workspace_size", "uint"),
    "trt_max_partition_iterations": ("trt_max_partition_iterations", "int"),
    "trt_min_subgraph_size": ("trt_min_subgraph_size", "int"),
    "int8_calibration_table_name": ("trt_int8_calibration_table_name", "str"),
    "int8_use_native_calibration_table": ("trt_int8_use_native_calibration_table", "bool"),
    "trt_dla_enable": ("trt_dla_enable", "bool"),
    "trt_dla_core": ("trt_dla_core", "int"),
    "trt_engine_cache_enable": ("trt_engine_cache_enable", "bool"),
    "trt_engine_cache_path": ("trt_engine_cache_path", "str"),
    "trt_engine_cache_prefix": ("trt_engine_cache_prefix", "str"),
    "trt_dump_subgraphs": ("trt_dump_subgraphs", "bool"),
    "trt_force_sequential_engine_build": ("trt_force_sequential_engine_build", "bool"),
    "trt_context_memory_sharing_enable": ("trt_context_memory_sharing_enable", "bool"),
    "trt_layer_norm_fp32_fallback": ("trt_layer_norm_fp32_fallback", "bool"),
    "trt_timing_cache_enable": ("trt_timing_cache_enable", "bool"),
    "trt_timing_cache_path": ("trt_timing_cache_path", "str"),
    "trt_force_timing_cache": ("trt_force_timing_cache", "bool"),
    "trt_detailed_build_log": ("trt_detailed_build_log", "bool"),
    "trt_build_heuristics_enable": ("trt_build_heuristics_enable", "bool"),
    "trt_sparsity_enable": ("trt_sparsity_enable", "bool"),
    "trt_builder_optimization_level": ("trt_builder_optimization_level", "int"),
    "trt_auxiliary_streams": ("trt_auxiliary_streams", "int"),
    "trt_tactic_sources": ("trt_tactic_sources", "str"),
    "trt_extra_plugin_lib_paths": ("trt_extra_plugin_lib_paths", "str"),
    "trt_profile_min_shapes": ("trt_profile_min_shapes", "str"),
    "trt_profile_max_shapes": ("trt_profile_max_shapes", "str"),
    "trt_profile_opt_shapes": ("trt_profile_opt_shapes", "str"),
    "trt_cuda_graph_enable": ("trt_cuda_graph_enable", "bool"),
    "trt_dump_ep_context_model": ("trt_dump_ep_context_model", "bool"),
    "trt_ep_context_file_path": ("trt_ep_context_file_path", "str"),
    "trt_ep_context_embed_mode": ("trt_ep_context_embed_mode", "int"),
}

#: ``cuda`` accelerator parameters Triton checks as booleans (others go to the CUDA EP as
#: given, and ONNX Runtime refuses the options it does not know).
CUDA_BOOL_PARAMETERS = ("do_copy_in_default_stream", "use_ep_level_unified_stream")

#: Triton's deprecated model ``parameters`` for the CUDA EP: integer codes → option values.
_CONV_ALGO_SEARCH = {0: "EXHAUSTIVE", 1: "HEURISTIC", 2: "DEFAULT"}
_ARENA_EXTEND = {0: "kNextPowerOfTwo", 1: "kSameAsRequested"}
#: model ``parameters`` passed to the CUDA EP as they are (the first two as Triton does;
#: ``cudnn_conv_use_max_workspace`` beyond Triton).
_CUDA_PASS_THROUGH = ("gpu_mem_limit", "do_copy_in_default_stream", "cudnn_conv_use_max_workspace")

Providers = list[tuple[str, dict[str, str]]]

_TRUE = ("1", "true", "on", "yes")
_FALSE = ("0", "false", "off", "no")


def _bool(value: str) -> str:
    """Triton's ``ParseBoolValue``, as the "1"/"0" ONNX Runtime's option parser takes."""
    v = value.strip().lower()
    if v in _TRUE:
        return "1"
    if v in _FALSE:
        return "0"
    raise invalid_arg(f"failed to convert '{value}' to boolean")


def _int(value: str, unsigned: bool = False) -> str:
    v = value.strip()
    try:
        number = int(v)
    except ValueError:
        kind = "unsigned long long integral number" if unsigned else "integral number"
        raise invalid_arg(f"failed to convert '{value}' to {kind}") from None
    if unsigned and number < 0:
        raise invalid_arg(f"failed to convert '{value}' to unsigned long long integral number")
    return str(number)


def tensorrt_options(parameters: Mapping[str, str], device_id: int) -> dict[str, str]:
    """The TensorRT EP options for a ``tensorrt`` accelerator's ``parameters`` (Triton's
    names and checks; unknown names are INVALID_ARG)."""
    options: dict[str, str] = {}
    for key, value in parameters.items():
        if key == "precision_mode":
            if value not in TRT_PRECISION_MODES:
                raise invalid_arg(f"unsupported precision mode '{value}' is requested")
            flag = TRT_PRECISION_MODES[value]
            if flag is not None:
                options[flag] = "1"
            continue
        known = TRT_PARAMETERS.get(key)
        if known is None:
            raise invalid_arg(
                f"unknown parameter '{key}' is provided for TensorRT Execution Accelerator"
            )
        option, kind = known
        if kind == "bool":
            value = _bool(value)
        elif kind in ("int", "uint"):
            value = _int(value, unsigned=kind == "uint")
        if value:
            options[option] = value
    options["device_id"] = str(device_id)
    return options


def cuda_options(
    accelerator_parameters: Mapping[str, str], parameters: Mapping[str, str], device_id: int
) -> dict[str, str]:
    """The CUDA EP options: a ``cuda`` accelerator's ``parameters``, then the deprecated model
    ``parameters`` (``cudnn_conv_algo_search`` 0/1/2, ``arena_extend_strategy`` 0/1,
    ``gpu_mem_limit``, ``do_copy_in_default_stream``), then the instance's ``device_id``."""
    options: dict[str, str] = {}
    for key, value in accelerator_parameters.items():
        if key in CUDA_BOOL_PARAMETERS:
            value = _bool(value)
        if value:
            options[key] = value
    if "cudnn_conv_algo_search" in parameters:
        code = int(_int(parameters["cudnn_conv_algo_search"]))
        if code not in _CONV_ALGO_SEARCH:
            raise invalid_arg(f"unsupported cudnn_conv_algo_search value '{code}' is requested")
        options["cudnn_conv_algo_search"] = _CONV_ALGO_SEARCH[code]
    if "arena_extend_strategy" in parameters:
        code = int(_int(parameters["arena_extend_strategy"]))
        if code not in _ARENA_EXTEND:
            raise invalid_arg(f"unsupported arena_extend_strategy value '{code}' is requested")
        options["arena_extend_strategy"] = _ARENA_EXTEND[code]
    for key in _CUDA_PASS_THROUGH:
        if key in parameters:
            options[key] = parameters[key]
    options["device_id"] = str(device_id)
    return options


def providers_for(
    config: Any,
    parameters: Mapping[str, str],
    kind: str,
    device_id: int,
    available: Sequence[str],
) -> Providers:
    """The execution providers, in priority order, for one instance.

    ``KIND_GPU``: TensorRT when a ``tensorrt`` accelerator is listed, then CUDA on
    ``device_id`` (with a ``cuda`` accelerator's options). Every kind: OpenVINO when a
    ``openvino`` CPU accelerator is listed, then CPU. GPU accelerators on a CPU instance are
    logged as not applied (Triton skips them without a word). Unknown accelerator names are
    INVALID_ARG; a provider that ``available`` lacks is UNAVAILABLE.
    """
    accel = config.optimization.execution_accelerators
    providers: Providers = []
    cuda_parameters: dict[str, str] = {}
    for acc in accel.gpu_execution_accelerator:
        if acc.name not in GPU_ACCELERATORS:
            raise invalid_arg(f"unknown Execution Accelerator '{acc.name}' is requested")
        if kind != "KIND_GPU":
            log.warning(
                "model '%s': gpu_execution_accelerator '%s' is not applied to %s instances",
                config.name,
                acc.name,
                kind,
            )
            continue
        if acc.name == "tensorrt":
            providers.append(
                ("TensorrtExecutionProvider", tensorrt_options(acc.parameters, device_id))
            )
        else:
            cuda_parameters.update(acc.parameters)
    if kind == "KIND_GPU":
        providers.append(
            ("CUDAExecutionProvider", cuda_options(cuda_parameters, parameters, device_id))
        )
    for acc in accel.cpu_execution_accelerator:
        ep = CPU_ACCELERATORS.get(acc.name)
        if ep is None:
            raise invalid_arg(f"unknown Execution Accelerator '{acc.name}' is requested")
        providers.append((ep, {"device_type": "CPU", **dict(acc.parameters)}))
    providers.append(("CPUExecutionProvider", {}))
    missing = [ep for ep, _ in providers if ep not in available]
    if missing:
        builds = (
            "GPU instances need the onnxruntime-gpu build instead of onnxruntime, with the "
            "CUDA and cuDNN (and, for TensorRT, TensorRT) libraries it loads"
            if any(ep != "OpenVINOExecutionProvider" for ep in missing)
            else "the openvino accelerator needs the onnxruntime-openvino build instead of "
            "onnxruntime"
        )
        raise TritonXError(
            f"model '{config.name}': ONNX Runtime has no {', '.join(missing)} here "
            f"(available: {', '.join(available)}); {builds}",
            Code.UNAVAILABLE,
        )
    return providers
