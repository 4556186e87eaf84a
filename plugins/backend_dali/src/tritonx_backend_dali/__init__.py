"""tritonx plugin: Triton's ``dali`` backend (a serialized NVIDIA DALI pipeline,
``<version>/model.dali``, or a ``dali.py`` pipeline definition that is autoserialized).

Registered through the ``tritonx`` entry point ``backend_dali``. Importing this module does not
import DALI: that happens when the first DALI model is loaded (auto-complete reads the serialized
pipeline without DALI).
"""

from __future__ import annotations

import tritonx
from tritonx_backend_dali.backend import DaliBackend, DaliModelInstance

__all__ = ["DaliBackend", "DaliModelInstance", "tritonx_register_backends"]
__version__ = "0.1.0"


@tritonx.hookimpl
def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
    """Register :class:`DaliBackend` (backend ``dali``)."""
    registry.add(DaliBackend)
