"""tritonx plugin: Triton's ``tensorrt`` backend (platform ``tensorrt_plan``).

Registered through the ``tritonx`` entry point ``backend_tensorrt``. Importing this module does
not import tensorrt or the CUDA bindings: that happens when a TensorRT model is loaded.
"""

from __future__ import annotations

import tritonx
from tritonx_backend_tensorrt.backend import TensorRTBackend

__all__ = ["TensorRTBackend", "tritonx_register_backends"]
__version__ = "0.1.0"


@tritonx.hookimpl
def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
    """Register :class:`TensorRTBackend` (backend ``tensorrt``)."""
    registry.add(TensorRTBackend)
