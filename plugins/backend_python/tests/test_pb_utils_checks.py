"""pb_utils refuses what Triton's pybind layer refuses (python_backend ``src/pb_stub.cc``):
arguments of a type pybind cannot convert raise ``TypeError``; the constructors' own checks
raise ``TritonModelException`` with Triton's texts (``src/pb_tensor.cc``, ``src/pb_stub.cc``).

The cases are the calls a ``model.py`` makes (Triton's qa ``python_models/bls`` checks
``InferenceRequest``'s required arguments the same way)."""

from __future__ import annotations

import numpy as np
import pytest

from tritonx_backend_python import pb_utils

ARRAY = np.array([1.0, 2.0], dtype=np.float32)
TENSOR = pb_utils.Tensor("INPUT0", ARRAY)


def request(**overrides: object) -> pb_utils.InferenceRequest:
    kwargs: dict[str, object] = {
        "model_name": "add_sub",
        "inputs": [TENSOR],
        "requested_output_names": ["OUTPUT0"],
    }
    kwargs.update(overrides)
    return pb_utils.InferenceRequest(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args",
    [(None, ARRAY), (1, ARRAY), ("X", None), ("X", [1.0, 2.0]), ("X", 3.0)],
    ids=["name-none", "name-int", "data-none", "data-list", "data-scalar"],
)
def test_tensor_refuses_what_pybind_cannot_convert(args: tuple[object, object]) -> None:
    with pytest.raises(TypeError, match="incompatible constructor arguments"):
        pb_utils.Tensor(*args)  # type: ignore[arg-type]


def test_tensor_checks_its_name() -> None:
    with pytest.raises(pb_utils.TritonModelException, match=r"^Tensor name cannot be an empty"):
        pb_utils.Tensor("", ARRAY)
    assert pb_utils.Tensor(b"X", ARRAY).name() == "X"  # pybind takes bytes for a str


def test_from_dlpack_checks() -> None:
    with pytest.raises(TypeError):
        pb_utils.Tensor.from_dlpack(None, ARRAY)  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match=r"^Tensor name cannot be an empty"):
        pb_utils.Tensor.from_dlpack("", ARRAY)
    with pytest.raises(pb_utils.TritonModelException) as err:
        pb_utils.Tensor.from_dlpack("X", [1, 2])
    assert str(err.value).startswith("Provided tensor is not supported. Tensor must be a DLPack")
    assert pb_utils.Tensor.from_dlpack("X", ARRAY).as_numpy().tolist() == [1.0, 2.0]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"output_tensors": TENSOR},
        {"output_tensors": None},
        {"output_tensors": "OUTPUT0"},
        {"output_tensors": [ARRAY]},
        {"output_tensors": [], "error": "failed"},
        {"output_tensors": [], "error": 3},
    ],
    ids=["tensor", "none", "str", "array-item", "error-str", "error-int"],
)
def test_inference_response_refuses_what_pybind_cannot_convert(kwargs: dict[str, object]) -> None:
    with pytest.raises(TypeError, match="incompatible constructor arguments"):
        pb_utils.InferenceResponse(**kwargs)  # type: ignore[arg-type]


def test_inference_response_accepts_triton_forms() -> None:
    assert pb_utils.InferenceResponse().output_tensors() == []
    assert pb_utils.InferenceResponse((TENSOR,)).output_tensors() == [TENSOR]
    error = pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG)
    assert pb_utils.InferenceResponse(output_tensors=[], error=error).error() is error
    with pytest.raises(pb_utils.TritonModelException, match=r"^Expect N8pybind114dictE"):
        pb_utils.InferenceResponse([], parameters=[1])


@pytest.mark.parametrize("missing", ["model_name", "inputs", "requested_output_names"])
def test_inference_request_required_arguments(missing: str) -> None:
    kwargs = {"model_name": "add_sub", "inputs": [], "requested_output_names": ["OUTPUT0"]}
    del kwargs[missing]
    with pytest.raises(TypeError, match="incompatible constructor arguments"):
        pb_utils.InferenceRequest(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "overrides",
    [
        {"model_name": None},
        {"model_name": 7},
        {"request_id": None},
        {"inputs": None},
        {"inputs": [ARRAY]},
        {"inputs": TENSOR},
        {"requested_output_names": "OUTPUT0"},
        {"requested_output_names": [1]},
        {"model_version": "1"},
        {"model_version": 1.5},
        {"flags": -1},
        {"flags": "1"},
        {"timeout": -1},
        {"correlation_id": None},
        {"preferred_memory": "cpu"},
        {"trace": 1},
    ],
    ids=lambda o: "-".join(f"{k}={v!r}" for k, v in o.items()),
)
def test_inference_request_refuses_what_pybind_cannot_convert(
    overrides: dict[str, object],
) -> None:
    with pytest.raises(TypeError, match="incompatible constructor arguments"):
        request(**overrides)


@pytest.mark.parametrize(
    ("overrides", "text"),
    [
        ({"correlation_id": 1.5}, "Correlation ID must be integer or string"),
        ({"parameters": [1]}, "Expect N8pybind114dictE, got <class 'list'>"),
        ({"parameters": {1: 1}}, "Expect parameters keys to have type str, found type"),
        ({"parameters": {"k": 1.5}}, "Expect parameters values to have type bool/int/str"),
    ],
)
def test_inference_request_validation(overrides: dict[str, object], text: str) -> None:
    with pytest.raises(pb_utils.TritonModelException) as err:
        request(**overrides)
    assert str(err.value).startswith(text)


def test_inference_request_accepts_triton_forms() -> None:
    built = request(
        request_id=b"r1",
        correlation_id="seq",
        requested_output_names=("OUTPUT0",),
        model_version=np.int64(2),
        flags=1,
        timeout=5,
        parameters={"k": True},
    )
    assert (built.request_id(), built.correlation_id(), built.model_version()) == ("r1", "seq", 2)
    assert built.requested_output_names() == ["OUTPUT0"]


@pytest.mark.parametrize("args", [(None,), (1,), ("x", "bad")], ids=["none", "int", "code-str"])
def test_triton_error_refuses_what_pybind_cannot_convert(args: tuple[object, ...]) -> None:
    with pytest.raises(TypeError, match="incompatible constructor arguments"):
        pb_utils.TritonError(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["log", "log_info", "log_warn", "log_error", "log_verbose"])
def test_logger_refuses_what_pybind_cannot_convert(name: str) -> None:
    with pytest.raises(TypeError, match="incompatible function arguments"):
        getattr(pb_utils.Logger, name)(None)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        getattr(pb_utils.Logger, name)(42)


def test_logger_level_must_be_a_level() -> None:
    with pytest.raises(TypeError, match="incompatible function arguments"):
        pb_utils.Logger.log("x", "INFO")  # type: ignore[arg-type]
    pb_utils.Logger.log("fine", pb_utils.Logger.WARNING)


def test_metric_family_refuses_what_pybind_cannot_convert() -> None:
    for args in ((None, "d", 0), ("n", None, 0), ("n", "d", "counter"), ("n", "d", None)):
        with pytest.raises(TypeError, match="incompatible constructor arguments"):
            pb_utils.MetricFamily(*args)  # type: ignore[arg-type]
