"""Models, server settings and the engine shared by the gRPC frontend tests.

The gRPC tests run the server with only the gRPC listener (the HTTP frontend is tested on
its own) and a repository holding every model they use. Every test that starts a server runs
once per ``--grpc-engine`` (the ``grpc_engine`` fixture: ``loop`` and ``aio``), so the two
engines are held to the same answers: tests taking ``server_settings`` (and the ``server`` /
``server_thread`` fixtures built on it) get it there; tests building their own settings take
``grpc_engine`` and pass it on. A test about one engine's own framing is marked
``loop_engine_only(reason=...)`` and runs on ``loop`` alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import tritonx
from tritonx import InferenceRequest, InferenceResponse
from tritonx._transports.grpc.server import GRPC_ENGINES
from tritonx.config import ServerSettings
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

#: Every protocol datatype; the ``all_types`` model has INPUTi/OUTPUTi of DATATYPES[i].
DATATYPES = (
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
    "BF16",
)


def _dtype(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def all_types_config() -> str:
    """An identity model with one optional input/output pair per datatype, dims [-1]."""
    inputs = ",\n".join(
        f'  {{ name: "INPUT{i}", data_type: {_dtype(dt)}, dims: [ -1 ], optional: true }}'
        for i, dt in enumerate(DATATYPES)
    )
    outputs = ",\n".join(
        f'  {{ name: "OUTPUT{i}", data_type: {_dtype(dt)}, dims: [ -1 ] }}'
        for i, dt in enumerate(DATATYPES)
    )
    return (
        'name: "all_types"\nbackend: "identity"\nmax_batch_size: 0\n'
        f"input [\n{inputs}\n]\noutput [\n{outputs}\n]\n"
    )


CLASSIFY_CONFIG = """
name: "classify"
backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ], label_filename: "labels.txt" } ]
"""

DECOUPLED = "model_transaction_policy { decoupled: true }\n"


class ParamEchoBackend(tritonx.Backend):
    """Returns the request's parameters (and id) as response parameters; OUTPUT0 = INPUT0."""

    name = "paramecho"

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return ParamEchoInstance()


class ParamEchoInstance(tritonx.ModelInstance):
    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        out = []
        for r in requests:
            params = dict(r.parameters)
            params["correlation_id"] = str(r.correlation_id)
            params["flags"] = r.flags
            params["priority"] = r.priority
            out.append(
                InferenceResponse(outputs={"OUTPUT0": r.inputs["INPUT0"]}, parameters=params)
            )
        return out


@tritonx.hookimpl
def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
    registry.add(ParamEchoBackend)


class _ParamEchoPlugin:
    tritonx_register_backends = staticmethod(tritonx_register_backends)


def populate(repo: ModelRepositoryBuilder) -> None:
    """Write every model the gRPC tests use."""
    repo.add_identity("simple", max_batch_size=8, dims=[-1])
    repo.add_identity("simple_nobatch", dims=[4])
    repo.add_identity("slow", parameters={"execute_delay_ms": "300"})
    repo.add_identity("failing", datatype="INT32", parameters={"fail_value": "13"})
    repo.add_identity(
        "decoupled",
        datatype="INT32",
        dims=[1],
        parameters={"repeat_input": "INPUT0"},
        extra=DECOUPLED,
    )
    repo.add_identity(
        "decoupled_slow",
        datatype="INT32",
        dims=[1],
        parameters={"repeat_input": "INPUT0", "execute_delay_ms": "1000"},
        extra=DECOUPLED,
    )
    repo.add("all_types", config=all_types_config())
    model_dir = repo.add("classify", config=CLASSIFY_CONFIG)
    (model_dir / "labels.txt").write_text("zero\none\ntwo\nthree\n")
    repo.add(
        "paramecho",
        backend="paramecho",
        inputs=[("INPUT0", "FP32", [-1])],
        outputs=[("OUTPUT0", "FP32", [-1])],
    )


#: marks a test about the loop engine's own HTTP/2 framing (``reason``: why it does not hold
#: for grpc core): it runs on ``--grpc-engine loop`` alone
LOOP_ENGINE_ONLY = "loop_engine_only"
#: marks a test the loop engine fails because it answers otherwise than grpc core (the aio
#: engine): on ``loop`` it is ``xfail(strict=True, reason=...)``, the reason starting
#: "loop engine: " and saying how it differs
LOOP_ENGINE_DIFFERS = "loop_engine_differs"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{LOOP_ENGINE_ONLY}(reason): a gRPC test of the loop engine's own framing, "
        "not run on --grpc-engine aio",
    )
    config.addinivalue_line(
        "markers",
        f"{LOOP_ENGINE_DIFFERS}(reason): a gRPC test the loop engine fails (strict xfail on "
        "--grpc-engine loop) because it answers otherwise than grpc core",
    )


def engine_params(definition: pytest.Function) -> list[Any]:
    """The ``grpc_engine`` parameters of a test (each with its engine as its id), as its
    markers say."""
    only = definition.get_closest_marker(LOOP_ENGINE_ONLY)
    differs = definition.get_closest_marker(LOOP_ENGINE_DIFFERS)
    for marker in (only, differs):
        if marker is not None and not marker.kwargs.get("reason"):
            raise pytest.UsageError(f"{definition.nodeid}: {marker.name} needs a reason")
    if only is not None:
        return [pytest.param("loop", id="loop")]
    marks: list[pytest.MarkDecorator] = []
    if differs is not None:
        reason = str(differs.kwargs["reason"])
        if not reason.startswith("loop engine: "):
            raise pytest.UsageError(f"{definition.nodeid}: its reason must start 'loop engine: '")
        marks.append(pytest.mark.xfail(strict=True, reason=reason))
    return [
        pytest.param(engine, id=engine, marks=marks if engine == "loop" else ())
        for engine in GRPC_ENGINES
    ]


@pytest.fixture
def grpc_engine(request: pytest.FixtureRequest) -> str:
    """The ``--grpc-engine`` of the test's servers: each of :data:`GRPC_ENGINES` in turn
    (:func:`engine_params`: ``loop`` alone for a test marked ``loop_engine_only``, an
    expected failure there for one marked ``loop_engine_differs``)."""
    return str(request.param)


@pytest.fixture
def server_settings(model_repository: ModelRepositoryBuilder, grpc_engine: str) -> ServerSettings:
    """Only the gRPC listener on ``grpc_engine``, every test model in the repository."""
    populate(model_repository)
    return loopback_settings(
        model_repository.root, allow_http=False, allow_metrics=False, grpc_engine=grpc_engine
    )


@pytest.fixture(autouse=True)
def _paramecho(register_plugin) -> None:  # type: ignore[no-untyped-def]
    """Make the ``paramecho`` backend available to the test servers."""
    register_plugin(_ParamEchoPlugin(), name="paramecho-test-backend")


@pytest.fixture
def datatypes() -> tuple[str, ...]:
    """The datatype of each INPUTi/OUTPUTi of the ``all_types`` model."""
    return DATATYPES


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests taking a ``datatype`` argument run once per protocol datatype; tests using the
    ``grpc_engine`` fixture (directly or through ``server_settings``) once per engine."""
    if "datatype" in metafunc.fixturenames:
        metafunc.parametrize("datatype", DATATYPES)
    if "grpc_engine" in metafunc.fixturenames:
        metafunc.parametrize("grpc_engine", engine_params(metafunc.definition), indirect=True)
