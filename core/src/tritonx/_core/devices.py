"""Which accelerators this machine has (CUDA GPUs through NVML or nvidia-smi, if any)."""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache


@lru_cache(maxsize=1)
def gpu_count() -> int:
    """The number of CUDA GPUs visible to this process (0 on a CPU-only machine).

    ``TRITONX_GPU_COUNT`` overrides the probe (``0`` forces CPU-only behaviour).
    """
    forced = os.environ.get("TRITONX_GPU_COUNT")
    if forced is not None:
        return max(0, int(forced))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
