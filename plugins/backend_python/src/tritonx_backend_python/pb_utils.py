"""``triton_python_backend_utils`` for tritonx: the API Triton ``model.py`` files import.

``import triton_python_backend_utils as pb_utils`` resolves to this module inside a python
model (the worker process, or the server process for in-process models, registers it under
that name). Names, signatures, constants and error messages follow Triton's python_backend;
what depends on where the model runs (BLS, response delivery, logging, metrics) goes through a
:class:`Runtime` installed by the worker or the in-process instance.

This module only gathers the API; its parts live in private modules:

* :mod:`~tritonx_backend_python._pb_base`: the ``TRITONSERVER_*`` constants,
  :class:`TritonModelException` and :class:`TritonError`;
* :mod:`~tritonx_backend_python._pb_tensor`: :class:`Tensor`, the BYTES encoding, type
  conversions and the ``get_*_by_name`` lookups;
* :mod:`~tritonx_backend_python._pb_request`: :class:`InferenceRequest`,
  :class:`InferenceResponse`, :class:`InferenceResponseSender`, :class:`ResponseIterator`,
  :class:`InferenceTrace`, :class:`PreferredMemory`;
* :mod:`~tritonx_backend_python._pb_runtime`: :class:`Runtime` and what goes through it
  (:class:`Logger`, custom metrics, model control, :func:`get_model_dir`);
* :mod:`~tritonx_backend_python._pb_config`: :class:`ModelConfig` (``auto_complete_config``).

Only the standard library and numpy are needed here.
"""

from __future__ import annotations

# The modules and typing names this module held before its parts moved out (a model may
# use ``pb_utils.np``, or ``from triton_python_backend_utils import *``): kept in its
# namespace (and ``__all__``), which is thus unchanged.
import asyncio
import contextvars
import functools
import json
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tritonx_backend_python._pb_base import (
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_GPU,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    TritonError,
    TritonModelException,
)
from tritonx_backend_python._pb_config import ModelConfig
from tritonx_backend_python._pb_request import (
    InferenceRequest,
    InferenceResponse,
    InferenceResponseSender,
    InferenceTrace,
    PreferredMemory,
    ResponseIterator,
)
from tritonx_backend_python._pb_runtime import (
    Logger,
    LogLevel,
    Metric,
    MetricFamily,
    Runtime,
    get_model_dir,
    is_model_ready,
    load_model,
    unload_model,
)
from tritonx_backend_python._pb_tensor import (
    TRITON_STRING_TO_NUMPY,
    Tensor,
    deserialize_bytes_tensor,
    get_input_config_by_name,
    get_input_tensor_by_name,
    get_output_config_by_name,
    get_output_tensor_by_name,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
    using_decoupled_model_transaction_policy,
)

__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "Any",
    "Callable",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "Iterator",
    "LogLevel",
    "Logger",
    "Metric",
    "MetricFamily",
    "ModelConfig",
    "PreferredMemory",
    "ResponseIterator",
    "Runtime",
    "Sequence",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "annotations",
    "asyncio",
    "contextvars",
    "deserialize_bytes_tensor",
    "functools",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "json",
    "load_model",
    "logging",
    "np",
    "numpy_to_triton_type",
    "queue",
    "serialize_byte_tensor",
    "threading",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]

# The API's classes and functions say they are this module's, as before the split: Triton's
# error texts name a type by it ("found type '<class '...pb_utils.Tensor'>'"), tracebacks
# print an exception's module, and pickle finds them here.
for _name in __all__:
    _value = globals()[_name]
    if getattr(_value, "__module__", "").startswith("tritonx_backend_python._pb_"):
        _value.__module__ = __name__
del _name, _value
