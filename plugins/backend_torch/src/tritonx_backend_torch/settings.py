"""The config.pbtxt ``parameters`` Triton's PyTorch backend reads, parsed and checked.

Nothing here imports torch; :mod:`tritonx_backend_torch.backend` applies the settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.parameters import parse_bool, parse_int

TORCHSCRIPT = "pytorch_libtorch"
EXPORTED = "torch_aoti"


#: Parameters that only mean something to the TorchScript (JIT) runtime.
JIT_ONLY = (
    "DISABLE_OPTIMIZED_EXECUTION",
    "ENABLE_TENSOR_FUSER",
    "ENABLE_JIT_PROFILING",
    "ENABLE_JIT_EXECUTOR",
)

#: Parameters of Triton's Python-based PyTorch runtime (``model.py``), which tritonx does not
#: have: refused, naming what to use instead.
UNSUPPORTED = {
    "NUM_THREADS": "use INTRA_OP_THREAD_COUNT",
    "NUM_INTEROP_THREADS": "use INTER_OP_THREAD_COUNT",
    "TORCH_COMPILE_OPTIONAL_PARAMETERS": "torch.compile is not run by tritonx; export the "
    "model with torch.export (model.pt2) instead",
}


@dataclass(frozen=True)
class TorchSettings:
    """One model's settings (Triton's defaults when a parameter is absent).

    ``None`` for the JIT switches means "leave torch's own setting alone", as Triton does.
    """

    optimized_execution: bool = True
    inference_mode: bool = True
    cudnn: bool = True
    cache_cleaning: bool = False
    weight_sharing: bool = False
    tensor_fuser: bool | None = None
    jit_profiling: bool | None = None
    jit_executor: bool | None = None
    intra_op_threads: int = 0
    inter_op_threads: int = 0


def read_settings(model: str, platform: str, parameters: Mapping[str, str]) -> TorchSettings:
    """The settings of ``parameters``; bad values and parameters that cannot apply raise."""
    for key, hint in UNSUPPORTED.items():
        if key in parameters:
            raise TritonXError(
                f"model '{model}': parameter '{key}' belongs to Triton's Python-based PyTorch "
                f"runtime, which tritonx does not provide ({hint})",
                Code.UNSUPPORTED,
            )
    if platform != TORCHSCRIPT:
        for key in JIT_ONLY:
            if key in parameters:
                raise invalid_arg(
                    f"model '{model}': parameter '{key}' applies to TorchScript models "
                    f"(platform '{TORCHSCRIPT}') only, not to platform '{platform}'"
                )

    def flag(key: str) -> bool | None:
        return parse_bool(key, parameters[key]) if key in parameters else None

    def count(key: str) -> int:
        if key not in parameters:
            return 0
        value = parse_int(key, parameters[key])
        return value if value > 0 else 0

    disable_opt = flag("DISABLE_OPTIMIZED_EXECUTION")
    inference = flag("INFERENCE_MODE")
    disable_cudnn = flag("DISABLE_CUDNN")
    return TorchSettings(
        optimized_execution=not disable_opt if disable_opt is not None else True,
        inference_mode=inference if inference is not None else True,
        cudnn=not disable_cudnn if disable_cudnn is not None else True,
        cache_cleaning=bool(flag("ENABLE_CACHE_CLEANING")),
        weight_sharing=bool(flag("ENABLE_WEIGHT_SHARING")),
        tensor_fuser=flag("ENABLE_TENSOR_FUSER"),
        jit_profiling=flag("ENABLE_JIT_PROFILING"),
        jit_executor=flag("ENABLE_JIT_EXECUTOR"),
        intra_op_threads=count("INTRA_OP_THREAD_COUNT"),
        inter_op_threads=count("INTER_OP_THREAD_COUNT"),
    )
