"""The entry point of the ``python`` backend plugin (``backend_python``): registers
:class:`~tritonx_backend_python.backend.PythonBackend`.

It is a module of its own so that importing the package (as worker processes and the
forkserver they are forked from do, for the stub) imports nothing of the server.
"""

from __future__ import annotations

import tritonx

__all__ = ["tritonx_register_backends"]


@tritonx.hookimpl
def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
    """Register the ``python`` backend."""
    from tritonx_backend_python.backend import PythonBackend

    registry.add(PythonBackend)
