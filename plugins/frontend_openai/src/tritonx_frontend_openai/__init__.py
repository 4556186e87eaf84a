"""tritonx plugin: an OpenAI-compatible API (``/v1/models``, ``/v1/completions``,
``/v1/chat/completions``, ``/v1/embeddings``) served by the tritonx process itself.

Registered through the ``tritonx`` entry point ``frontend_openai``: the server starts the
frontend ``openai`` on its own listener (default port 9000, ``--frontend-config
openai,port=...``). See this distribution's README for the model conventions and settings.
"""

from __future__ import annotations

import tritonx
from tritonx_frontend_openai.frontend import OpenAIFrontend

__all__ = ["OpenAIFrontend", "tritonx_register_frontends"]
__version__ = "0.1.0"


@tritonx.hookimpl
def tritonx_register_frontends(registry: tritonx.FrontendRegistry) -> None:
    """Register :class:`OpenAIFrontend` (frontend ``openai``)."""
    registry.add(OpenAIFrontend)
