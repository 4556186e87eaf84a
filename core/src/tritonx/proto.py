"""The one place that imports the generated protobuf modules shipped in ``tritonclient``.

Triton's wire messages (``inference.*`` from grpc_service.proto) and model configuration
(``inference.ModelConfig`` from model_config.proto) come from the ``tritonclient`` wheel, so the
server speaks exactly Triton's schema without code generation. Switching to self-generated
stubs later changes this file only.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

__all__ = ["model_config_pb2", "service_pb2", "service_pb2_grpc"]
