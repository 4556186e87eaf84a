"""tritonx plugin: Triton's ``pytorch`` backend (platforms ``pytorch_libtorch`` and
``torch_aoti``).

Registered through the ``tritonx`` entry point ``backend_torch``. Importing this module does not
import torch: that happens when the first PyTorch model is auto-completed or loaded.
"""

from __future__ import annotations

import tritonx
from tritonx_backend_torch.backend import TorchBackend

__all__ = ["TorchBackend", "tritonx_register_backends"]
__version__ = "0.1.0"


@tritonx.hookimpl
def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
    """Register :class:`TorchBackend` (backend ``pytorch``)."""
    registry.add(TorchBackend)
