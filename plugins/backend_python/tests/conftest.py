"""Fixtures of the python backend tests: a repository of python models (sources in
``models/``), served in worker processes or in-process (the ``mode`` fixture)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tritonx.config import ServerSettings
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

MODELS = Path(__file__).parent / "models"

AddModel = Callable[..., Path]


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    """Load the installed python backend plugin."""
    return ("backend_python",)


@pytest.fixture
def mode() -> str:
    """Where instances run (tests parametrize this with "in_process" too)."""
    return "process"


@pytest.fixture
def add_model(model_repository: ModelRepositoryBuilder, mode: str) -> AddModel:
    """``add_model(name, source, ...)``: a python model whose model.py is models/<source>.py."""

    def add(name: str, source: str, **kw: object) -> Path:
        params = dict(kw.pop("parameters", None) or {})  # type: ignore[call-overload]
        if mode != "process":
            params["TRITONX_EXECUTION_MODE"] = mode
        code = (MODELS / f"{source}.py").read_text()
        return model_repository.add(
            name,
            backend="python",
            parameters=params or None,
            versions={1: {"model.py": code}},
            **kw,  # type: ignore[arg-type]
        )

    return add


def add_standard_models(add: AddModel) -> None:
    """The models most tests use."""
    add(
        "add_sub",
        "add_sub",
        inputs=[("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
    )
    add(
        "repeat",
        "repeat",
        inputs=[("IN", "INT32", [-1])],
        outputs=[("OUT", "INT32", [1]), ("IDX", "UINT32", [1])],
        extra="model_transaction_policy { decoupled: true }\n",
    )
    add(
        "bls",
        "bls",
        inputs=[("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [-1]), ("MESSAGE", "BYTES", [1])],
    )
    add(
        "faulty",
        "faulty",
        max_batch_size=8,
        inputs=[("INPUT0", "BYTES", [1])],
        outputs=[("OUTPUT0", "BYTES", [1])],
    )
    add(
        "init_args",
        "init_args",
        inputs=[("DATA", "FP32", [-1])],
        outputs=[("INFO", "BYTES", [1]), ("DATA_OUT", "FP32", [-1])],
    )


@pytest.fixture
def standard_models(model_repository: ModelRepositoryBuilder, add_model: AddModel) -> Path:
    """The repository with the standard models written into it."""
    add_standard_models(add_model)
    return model_repository.root


@pytest.fixture
def server_settings(
    model_repository: ModelRepositoryBuilder, standard_models: Path
) -> ServerSettings:
    """The standard models, explicit model control (so tests can reload), no listeners."""
    return loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("*",),
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )
