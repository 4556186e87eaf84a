"""tritonx plugin: Triton's ``openvino`` backend (OpenVINO IR ``model.xml`` + ``model.bin``, and
ONNX or the other formats OpenVINO reads through ``default_model_filename``).

Registered through the ``tritonx`` entry point ``backend_openvino``. Importing this module does
not import openvino: that happens when the first OpenVINO model is auto-completed or loaded.
"""

from __future__ import annotations

import tritonx
from tritonx_backend_openvino.backend import OpenVINOBackend, OpenVINOModelInstance

__all__ = ["OpenVINOBackend", "OpenVINOModelInstance", "tritonx_register_backends"]
__version__ = "0.1.0"


@tritonx.hookimpl
def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
    """Register :class:`OpenVINOBackend` (backend ``openvino``)."""
    registry.add(OpenVINOBackend)
