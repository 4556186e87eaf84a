"""The one place that imports the generated protobuf modules shipped in ``tritonclient``.

Triton's wire messages (``inference.*`` from grpc_service.proto) and model configuration
(``inference.ModelConfig`` from model_config.proto) come from the ``tritonclient`` wheel, so the
server speaks exactly Triton's schema without code generation. Switching to self-generated
stubs later changes this file only.

``model_config_pb2`` is all a backend, an agent or :mod:`tritonx.config` needs, and importing
it must not load grpc: the ``tritonclient.grpc`` package's ``__init__`` imports grpc and the
whole client. So that one generated module (which imports nothing but ``google.protobuf``) is
loaded from its file under its own name, ``tritonclient.grpc.model_config_pb2``; a later import
of ``tritonclient.grpc`` finds it in ``sys.modules`` and uses the same module (one descriptor
pool entry). ``service_pb2`` and ``service_pb2_grpc`` import the package, so they load on first
use (:func:`__getattr__`), by the transports.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

MODEL_CONFIG = "tritonclient.grpc.model_config_pb2"
#: the modules resolved on first use, each importing the ``tritonclient.grpc`` package
LAZY = {
    "service_pb2": "tritonclient.grpc.service_pb2",
    "service_pb2_grpc": "tritonclient.grpc.service_pb2_grpc",
}


def _load_model_config() -> ModuleType:
    """``tritonclient.grpc.model_config_pb2`` without running ``tritonclient.grpc``'s
    ``__init__`` (the one already imported, when it is)."""
    module = sys.modules.get(MODEL_CONFIG)
    if module is not None:
        return module
    top = importlib.util.find_spec("tritonclient")
    if top is None or not top.submodule_search_locations:
        raise ImportError("tritonx needs the tritonclient wheel (pip install tritonclient)")
    path = Path(next(iter(top.submodule_search_locations)), "grpc", "model_config_pb2.py")
    spec = importlib.util.spec_from_file_location(MODEL_CONFIG, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"tritonclient has no {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODEL_CONFIG] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[MODEL_CONFIG]
        raise
    return module


if not TYPE_CHECKING:
    model_config_pb2 = _load_model_config()


def __getattr__(name: str) -> Any:
    """``service_pb2`` and ``service_pb2_grpc``, imported on first use."""
    if name not in LAZY:
        raise AttributeError(f"module 'tritonx.proto' has no attribute {name!r}")
    module = importlib.import_module(LAZY[name])
    globals()[name] = module
    return module


__all__ = ["model_config_pb2", "service_pb2", "service_pb2_grpc"]
