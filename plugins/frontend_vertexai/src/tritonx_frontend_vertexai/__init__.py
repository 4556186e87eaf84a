"""tritonx plugin: Triton's Google Vertex AI serving contract.

Registered through the ``tritonx`` entry point ``frontend_vertexai``: the server starts the
frontend ``vertex_ai`` on its own listener (default port 8080) when ``--frontend-config
vertex_ai,allow=true`` (Triton's ``--allow-vertex-ai=true``) names it. It serves
``AIP_HEALTH_ROUTE`` and ``AIP_PREDICT_ROUTE`` as Triton's Vertex AI server does; see this
distribution's README.
"""

from __future__ import annotations

import tritonx
from tritonx_frontend_vertexai.frontend import VertexAIFrontend

__all__ = ["VertexAIFrontend", "tritonx_register_frontends"]
__version__ = "0.1.0"


@tritonx.hookimpl
def tritonx_register_frontends(registry: tritonx.FrontendRegistry) -> None:
    """Register :class:`VertexAIFrontend` (frontend ``vertex_ai``)."""
    registry.add(VertexAIFrontend)
