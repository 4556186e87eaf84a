"""Starting the Vertex AI frontend as Triton's Vertex AI server starts: both routes must be
set, the default model is the configured one (which must be loaded) or the only one, the
routes are the environment's regular expressions, ``thread_count`` is checked; the health
route follows the server's readiness; ``--http-restricted-api`` guards the routes and the
redirects as on Triton's Vertex AI port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tritonx.errors import PluginError, TritonXError
from tritonx.testing import ModelRepositoryBuilder

REDIRECT = "X-Vertex-Ai-Triton-Redirect"
ECHO: dict[str, Any] = {
    "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}]
}


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = ModelRepositoryBuilder(tmp_path_factory.mktemp("single") / "models")
    repo.add_identity("addsub")
    return repo.root


@pytest.fixture(scope="module")
def multi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = ModelRepositoryBuilder(tmp_path_factory.mktemp("multi") / "models")
    repo.add_identity("addsub")
    repo.add_identity("subadd")
    return repo.root


def start_error(serve_vertex: Any, root: Path, **kw: Any) -> str:
    with pytest.raises(TritonXError) as failure, serve_vertex(root, **kw):
        pass
    return failure.value.message


@pytest.mark.parametrize(
    ("unset", "message"),
    [
        ("AIP_PREDICT_ROUTE", "API_PREDICT_ROUTE is not defined for Vertex AI endpoint"),
        ("AIP_HEALTH_ROUTE", "AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint"),
    ],
)
def test_a_route_not_set_stops_the_start(
    serve_vertex: Any, single: Path, unset: str, message: str
) -> None:
    assert start_error(serve_vertex, single, environ={unset: None}) == message
    assert start_error(serve_vertex, single, environ={unset: ""}) == message


def test_a_route_that_is_no_regular_expression_stops_the_start(
    serve_vertex: Any, single: Path
) -> None:
    message = start_error(serve_vertex, single, environ={"AIP_HEALTH_ROUTE": "/health("})
    assert message.startswith("AIP_HEALTH_ROUTE '/health(' is not a valid regular expression")
    # a repeat count past what re compiles (OverflowError, not re.error)
    message = start_error(serve_vertex, single, environ={"AIP_HEALTH_ROUTE": "a{4294967296}"})
    assert message.startswith("AIP_HEALTH_ROUTE 'a{4294967296}' is not a valid regular expression")


def test_the_only_model_is_the_default(serve_vertex: Any, single: Path) -> None:
    with serve_vertex(single) as vertex:
        answer = requests.post(vertex.predict, json=ECHO, timeout=30)
        assert answer.json()["model_name"] == "addsub"


def test_several_models_need_a_default(serve_vertex: Any, multi: Path) -> None:
    assert start_error(serve_vertex, multi) == (
        "Expect the model repository contains only a single model if default model is not specified"
    )
    # in explicit mode with nothing loaded there is no model at all
    assert start_error(serve_vertex, multi, model_control_mode="explicit").startswith(
        "Expect the model repository contains only a single model"
    )


def test_the_default_model_must_be_loaded(serve_vertex: Any, single: Path, multi: Path) -> None:
    config = {"default_model": "subadd"}
    assert start_error(serve_vertex, single, vertex_config=config) == (
        "Expect the default model 'subadd' is loaded"
    )
    explicit = {"model_control_mode": "explicit", "load_model": ("addsub",)}
    assert start_error(serve_vertex, multi, vertex_config=config, **explicit) == (
        "Expect the default model 'subadd' is loaded"
    )


def test_the_default_model_among_several(serve_vertex: Any, multi: Path) -> None:
    """Triton's qa: ``--vertex-ai-default-model=addsub`` over addsub and subadd."""
    with serve_vertex(multi, {"default_model": "subadd"}) as vertex:
        answer = requests.post(vertex.predict, json=ECHO, timeout=30)
        assert answer.json()["model_name"] == "subadd"
        answer = requests.post(
            vertex.predict, json=ECHO, headers={REDIRECT: "v2/models/addsub/infer"}, timeout=30
        )
        assert answer.json()["model_name"] == "addsub"


@pytest.mark.parametrize("value", ["0", "-1", "eight", ""])
def test_thread_count_must_be_a_positive_integer(
    serve_vertex: Any, single: Path, value: str
) -> None:
    with pytest.raises(
        PluginError, match=f"vertex_ai,thread_count: must be a positive integer, got '{value}'"
    ):
        with serve_vertex(single, {"thread_count": value}):
            pass


def test_thread_count_is_accepted_and_keys_it_does_not_read_are_refused(
    serve_vertex: Any, single: Path
) -> None:
    with serve_vertex(single, {"thread_count": "16"}) as vertex:
        assert requests.get(vertex.health, timeout=30).status_code == 200
    with pytest.raises(PluginError, match=r"unknown key\(s\) threads"):
        with serve_vertex(single, {"threads": "16"}):
            pass


def test_routes_are_regular_expressions_matched_whole(serve_vertex: Any, single: Path) -> None:
    """Vertex AI's own routes (``/v1/endpoints/<id>/deployedModels/<id>:predict``)."""
    environ = {
        "AIP_PREDICT_ROUTE": "/v1/endpoints/[0-9]+/deployedModels/[0-9]+:predict",
        "AIP_HEALTH_ROUTE": "/v1/endpoints/123/deployedModels/456",
    }
    with serve_vertex(single, environ=environ) as vertex:
        predict = f"{vertex.base}/v1/endpoints/123/deployedModels/456:predict"
        answer = requests.post(predict, json=ECHO, timeout=30)
        assert answer.json()["model_name"] == "addsub"
        health = f"{vertex.base}/v1/endpoints/123/deployedModels/456"
        assert requests.get(health, timeout=30).status_code == 200
        for path in ("/v1/endpoints/123/deployedModels/456:predictx", "/predict"):
            answer = requests.post(vertex.base + path, json=ECHO, timeout=30)
            assert (answer.status_code, answer.content) == (400, b"")


def test_health_route_is_400_while_the_server_is_not_ready(
    serve_vertex: Any, tmp_path: Path
) -> None:
    """A model that failed to load keeps the server not ready (strict readiness), as
    ``/v2/health/ready`` answers; the default model still serves."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    repo.add_identity("addsub")
    (repo.root / "broken" / "1").mkdir(parents=True)
    (repo.root / "broken" / "config.pbtxt").write_text('backend: "nope"\n')
    with serve_vertex(repo.root) as vertex:
        answer = requests.get(vertex.health, timeout=30)
        assert (answer.status_code, answer.content) == (400, b"")
        answer = requests.post(vertex.predict, json=ECHO, timeout=30)
        assert answer.json()["model_name"] == "addsub"


# ----------------------------------------------------------------------------- restricted

KEY = {"X-Vertex-Restricted": "secret"}
RESTRICTED = ("metadata", "model-config", "model-repository", "statistics", "shared-memory")


@pytest.fixture(scope="module")
def restricted(single: Path, serve_vertex: Any) -> Iterator[Any]:
    """Triton's qa: ``--http-restricted-api=metadata,model-config,model-repository,
    statistics,shared-memory:X-Vertex-Restricted=secret``."""
    rules = dict.fromkeys(RESTRICTED, ("X-Vertex-Restricted", "secret"))
    with serve_vertex(single, http_restricted_api=rules, allow_http=False) as vertex:
        yield vertex


READ_ONLY = [
    "v2",
    "v2/models/addsub",
    "v2/models/addsub/config",
    "v2/models/addsub/stats",
    "v2/models/stats",
    "v2/repository/index",
    "v2/systemsharedmemory/status",
    "v2/cudasharedmemory/status",
]


def test_restricted_redirects_need_the_header(restricted: Any) -> None:
    for value in READ_ONLY:
        for headers in ({}, {"X-Vertex-Restricted": "invalid"}):
            answer = requests.post(
                restricted.predict, headers={REDIRECT: value, **headers}, timeout=30
            )
            assert answer.status_code == 403, value
            assert answer.json() == {
                "error": "This API is restricted, expecting header 'X-Vertex-Restricted'"
            }
        answer = requests.post(restricted.predict, headers={REDIRECT: value, **KEY}, timeout=30)
        assert answer.status_code == 200, value


def test_unrestricted_endpoints_need_no_header(restricted: Any) -> None:
    assert requests.get(restricted.health, timeout=30).status_code == 200
    assert requests.post(restricted.predict, json=ECHO, timeout=30).status_code == 200
    for value in ("v2/health/live", "v2/models/addsub/ready", "v2/models/addsub/infer"):
        answer = requests.post(restricted.predict, headers={REDIRECT: value}, json=ECHO, timeout=30)
        assert answer.status_code == 200, value


def test_changes_stay_refused_with_the_header(restricted: Any) -> None:
    for value in (
        "v2/repository/models/addsub/load",
        "v2/repository/models/addsub/unload",
        "v2/systemsharedmemory/region/test/register",
    ):
        for headers in ({}, KEY, {"X-Vertex-Restricted": "invalid"}):
            answer = requests.post(
                restricted.predict,
                headers={REDIRECT: value, **headers},
                json={"key": "test_shm", "byte_size": 1024},
                timeout=30,
            )
            assert (answer.status_code, answer.content) == (403, b""), value
    assert restricted.server.model_ready("addsub")


def test_inference_and_health_can_be_restricted(serve_vertex: Any, single: Path) -> None:
    rules = dict.fromkeys(("inference", "health"), ("X-Key", "k"))
    with serve_vertex(single, http_restricted_api=rules, allow_http=False) as vertex:
        refused = {"error": "This API is restricted, expecting header 'X-Key'"}
        answer = requests.get(vertex.health, timeout=30)
        assert (answer.status_code, answer.json()) == (403, refused)
        answer = requests.post(vertex.predict, json=ECHO, timeout=30)
        assert (answer.status_code, answer.json()) == (403, refused)
        assert requests.get(vertex.health, headers={"X-Key": "k"}, timeout=30).status_code == 200
        answer = requests.post(vertex.predict, json=ECHO, headers={"X-Key": "k"}, timeout=30)
        assert answer.status_code == 200
        # metrics are not a restricted category
        answer = requests.post(vertex.predict, headers={REDIRECT: "metrics"}, timeout=30)
        assert answer.status_code == 200
