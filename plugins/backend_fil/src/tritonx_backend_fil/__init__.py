"""tritonx plugin: Triton's ``fil`` backend (XGBoost, LightGBM and Treelite tree models).

Registered through the ``tritonx`` entry point ``backend_fil``. Importing this module does not
import xgboost, lightgbm or treelite: that happens when the first FIL model is loaded.
"""

from __future__ import annotations

import tritonx
from tritonx_backend_fil.backend import FILBackend, FILModelInstance

__all__ = ["FILBackend", "FILModelInstance", "tritonx_register_backends"]
__version__ = "0.1.0"


@tritonx.hookimpl
def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
    """Register :class:`FILBackend` (backend ``fil``)."""
    registry.add(FILBackend)
