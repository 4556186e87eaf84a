"""tritonx backend ``python``: runs Triton python_backend ``model.py`` files unchanged.

The entry point (``backend_python``) is :mod:`tritonx_backend_python.plugin`, which registers
:class:`~tritonx_backend_python.backend.PythonBackend`. Importing this package imports nothing
else: worker processes import ``tritonx_backend_python._stub`` and ``pb_utils``, which need
nothing but numpy (and never the server, whose dependencies would meet a model's own).
"""
