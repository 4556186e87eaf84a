"""tritonx plugin: Triton's ``tensorflow`` backend (platforms ``tensorflow_savedmodel``, folder
``model.savedmodel``, and ``tensorflow_graphdef``, file ``model.graphdef``).

Registered through the ``tritonx`` entry point ``backend_tensorflow``. Importing this module does
not import tensorflow: that happens when the first TensorFlow model is auto-completed or loaded.
"""

from __future__ import annotations

import tritonx
from tritonx_backend_tensorflow.backend import TensorFlowBackend, TensorFlowModelInstance

__all__ = ["TensorFlowBackend", "TensorFlowModelInstance", "tritonx_register_backends"]
__version__ = "0.1.0"


@tritonx.hookimpl
def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
    """Register :class:`TensorFlowBackend` (backend ``tensorflow``)."""
    registry.add(TensorFlowBackend)
