"""pb_utils' namespace, gathered from its ``_pb_*`` parts, is the one model files always saw."""

from __future__ import annotations

import inspect

import numpy as np

from tritonx_backend_python import pb_utils

#: every public name of pb_utils (Triton's API, ``Runtime``, and the modules and typing names
#: the module held before its parts moved out)
NAMES = {
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
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
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
}


def test_the_public_names_are_unchanged() -> None:
    public = {name for name in dir(pb_utils) if not name.startswith("_")}
    assert public == NAMES
    assert set(pb_utils.__all__) == NAMES  # ``from triton_python_backend_utils import *``


def test_the_api_says_it_is_pb_utils() -> None:
    """Triton's error texts name types (``found type '<class '...pb_utils.Tensor'>'``)."""
    for name in NAMES:
        value = getattr(pb_utils, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            if value.__module__.startswith("tritonx_backend_python"):
                assert value.__module__ == "tritonx_backend_python.pb_utils", name
    assert str(type(pb_utils.Tensor("x", np.zeros(1)))) == (
        "<class 'tritonx_backend_python.pb_utils.Tensor'>"
    )


def test_what_the_backend_adds_is_named_backend() -> None:
    """The names the backend's runner and worker use on the API's objects never clash with
    Triton's: they all start with ``backend_``."""
    tensor = pb_utils.Tensor("x", np.zeros(2, np.float32))
    assert (tensor.backend_name, tensor.backend_datatype) == ("x", "FP32")
    assert tensor.backend_array is tensor.as_numpy()
    request = pb_utils.InferenceRequest(
        model_name="m", inputs=[], requested_output_names=[], trace=pb_utils.InferenceTrace(7)
    )
    assert request.backend_release_flags == pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
    assert request.backend_sender is None and request.backend_cancelled is None
    assert request.trace().backend_parent == 7
    triton = {
        pb_utils.Tensor: {"as_numpy", "from_dlpack", "is_cpu", "name", "shape", "to_dlpack"},
        pb_utils.InferenceResponseSender: {"closed", "is_cancelled", "send"},
        pb_utils.ResponseIterator: {"cancel"},
    }
    for cls, names in triton.items():
        own = {n for n in vars(cls) if not n.startswith("_")}
        assert {n for n in own - names if not n.startswith("backend_")} <= {"triton_dtype"}
