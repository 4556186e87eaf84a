"""Amazon SageMaker's serving contract for tritonx, as Triton's SageMaker server serves it:
the ``sagemaker`` frontend (``/ping``, ``/invocations`` and the multi-model endpoint API on
port 8080) and ``tritonx-sagemaker-serve``, which starts the server as Triton's
``docker/sagemaker/serve`` starts tritonserver (see the distribution's README)."""

from __future__ import annotations

import tritonx
from tritonx_frontend_sagemaker.frontend import SageMakerFrontend


@tritonx.hookimpl
def tritonx_register_frontends(registry: tritonx.FrontendRegistry) -> None:
    """Register the ``sagemaker`` frontend."""
    registry.add(SageMakerFrontend)


__all__ = ["SageMakerFrontend", "tritonx_register_frontends"]
