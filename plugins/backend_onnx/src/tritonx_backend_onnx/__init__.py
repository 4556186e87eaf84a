"""tritonx plugin: Triton's ``onnxruntime`` backend (platform ``onnxruntime_onnx``).

Registered through the ``tritonx`` entry point ``backend_onnx``. Importing this module does not
import onnxruntime: that happens when the first ONNX model is auto-completed or loaded.
"""

from __future__ import annotations

import tritonx
from tritonx_backend_onnx.backend import OnnxModelInstance, OnnxRuntimeBackend

__all__ = ["OnnxModelInstance", "OnnxRuntimeBackend", "tritonx_register_backends"]
__version__ = "0.1.0"


@tritonx.hookimpl
def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
    """Register :class:`OnnxRuntimeBackend` (backend ``onnxruntime``)."""
    registry.add(OnnxRuntimeBackend)
