"""tritonx backend ``python``: runs Triton python_backend ``model.py`` files unchanged.

The entry point (``backend_python``) only registers :class:`PythonBackend`; worker processes
import ``tritonx_backend_python._stub`` and ``pb_utils``, which need nothing but numpy.
"""

from __future__ import annotations

try:
    import tritonx
except ImportError:  # a worker running in a model's own environment (EXECUTION_ENV_PATH)
    tritonx = None  # type: ignore[assignment]

__all__ = ["tritonx_register_backends"]

if tritonx is not None:

    @tritonx.hookimpl
    def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
        """Register the ``python`` backend."""
        from tritonx_backend_python.backend import PythonBackend

        registry.add(PythonBackend)
