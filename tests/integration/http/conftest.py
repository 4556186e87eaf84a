"""One shared server (own loop thread) for the HTTP frontend tests, with a model per datatype.

Sync ``tritonclient.http`` and ``tritonclient.http.aio`` both talk to it over TCP, so every
test reuses the same listener; tests that need other flags start their own server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tritonx._runtime.plugins import make_plugin_manager
from tritonx.server import Server
from tritonx.testing import ServerThread, identity, loopback_settings
from tritonx.testing.repository import ModelRepositoryBuilder

DATATYPES = (
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BYTES", "BF16",
)  # fmt: skip

LABELS = ["cat", "dog", "", "fish"]

CLASSIFIER_CONFIG = """
name: "classifier"
backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ], label_filename: "labels.txt" } ]
"""


def build_repository(root: Path) -> ModelRepositoryBuilder:
    """The shared test repository (identity models only)."""
    repo = ModelRepositoryBuilder(root)
    for dt in DATATYPES:
        repo.add_identity(f"id_{dt.lower()}", dt, dims=[-1])
    repo.add(
        "multi",
        backend="identity",
        inputs=[("INPUT0", "INT32", [-1]), ("INPUT1", "BYTES", [-1])],
        outputs=[("OUTPUT0", "INT32", [-1]), ("OUTPUT1", "BYTES", [-1])],
    )
    repo.add(
        "batched",
        backend="identity",
        max_batch_size=8,
        inputs=[("INPUT0", "FP32", [2, 3])],
        outputs=[("OUTPUT0", "FP32", [2, 3])],
    )
    model_dir = repo.add("classifier", config=CLASSIFIER_CONFIG)
    (model_dir / "labels.txt").write_text("\n".join(LABELS) + "\n")
    repo.add_identity(
        "decoupled", "INT32", dims=[-1], extra="model_transaction_policy { decoupled: true }\n"
    )
    repo.add_identity("failing", "INT32", dims=[-1], parameters={"fail_value": "13"})
    repo.add_identity(
        "versions", "INT32", dims=[-1], versions=[1, 2], extra="version_policy { all { } }\n"
    )
    return repo


@pytest.fixture(scope="session")
def shared_repository(tmp_path_factory: pytest.TempPathFactory) -> ModelRepositoryBuilder:
    """The repository served by ``triton``."""
    return build_repository(tmp_path_factory.mktemp("http") / "models")


@pytest.fixture(scope="session")
def triton(shared_repository: ModelRepositoryBuilder) -> Iterator[Server]:
    """A started server shared by the whole HTTP test session (explicit model control)."""
    settings = loopback_settings(
        shared_repository.root,
        model_control_mode="explicit",
        load_model=("*",),
        allow_grpc=False,
        allow_metrics=False,
    )
    pm = make_plugin_manager(autoload=False, extra=[identity])
    thread = ServerThread(Server(settings, plugin_manager=pm))
    thread.start()
    try:
        yield thread.server
    finally:
        thread.stop()


@pytest.fixture(scope="session")
def url(triton: Server) -> str:
    """``host:port`` of the shared server."""
    return triton.http_url


@pytest.fixture
def client(url: str) -> Iterator[object]:
    """A synchronous ``tritonclient.http`` client of the shared server."""
    import tritonclient.http as httpclient

    c = httpclient.InferenceServerClient(url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
async def aclient(url: str):  # type: ignore[no-untyped-def]
    """A ``tritonclient.http.aio`` client of the shared server."""
    import tritonclient.http.aio as aiohttpclient

    c = aiohttpclient.InferenceServerClient(url)
    try:
        yield c
    finally:
        await c.close()
