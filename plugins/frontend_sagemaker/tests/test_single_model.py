"""A single-model endpoint: ``/ping`` in both modes, ``/invocations`` in JSON and SageMaker's
binary form (Triton's L0_sagemaker cases), its malformed requests answered with Triton's
codes and messages while the server keeps serving, the bounds, and the generate modes."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from sagemaker_testing import (
    BINARY,
    DATA,
    add_identity,
    binary_body,
    infer_body,
    parse_answer,
    serve,
    url_of,
)

from tritonx import Server
from tritonx.testing import ModelRepositoryBuilder

MAX_INPUT = 64 * 1024


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("single") / "models"
    add_identity(root, "sm_model")
    return root


@pytest.fixture(scope="module")
def server(models: Path) -> Iterator[Server]:
    """``sm_model`` the default model; ``--http-max-input-size`` 64 KiB."""
    env = {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "sm_model"}
    with serve(
        models,
        env=env,
        model_control_mode="explicit",
        load_model=("sm_model",),
        http_max_input_size=MAX_INPUT,
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def url(server: Server) -> str:
    return url_of(server)


def alive(url: str) -> None:
    assert requests.get(f"{url}/ping").status_code == 200


def test_ping_is_readiness(url: str) -> None:
    answer = requests.get(f"{url}/ping")
    assert (answer.status_code, answer.content) == (200, b"")
    assert requests.post(f"{url}/ping").status_code == 405


def test_json_invocation(url: str, http: requests.Session) -> None:
    """The answer is never compressed (requests asks for gzip; Triton's SageMaker server
    answers identity bodies only)."""
    answer = http.post(f"{url}/invocations", json=infer_body(), headers={"Accept-Encoding": "gzip"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"] == "application/json"
    assert "Content-Encoding" not in answer.headers
    result = answer.json()
    assert (result["model_name"], result["model_version"]) == ("sm_model", "1")
    assert result["outputs"][0]["data"] == DATA.ravel().tolist()
    assert result["outputs"][0]["shape"] == [1, 16]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_clients_inference_header_length_is_ignored(url: str, chunked: bool) -> None:
    """SageMaker's JSON body is all JSON whatever ``Inference-Header-Content-Length`` says
    (Triton's SageMaker server reads the size from the content type only), whether the
    body's length is declared or not."""
    body = json.dumps(infer_body()).encode()
    data: bytes | Iterator[bytes] = iter([body[:10], body[10:]]) if chunked else body
    answer = requests.post(
        f"{url}/invocations", data=data, headers={"Inference-Header-Content-Length": "5"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["data"] == DATA.ravel().tolist()


def test_binary_request_json_answer(url: str, http: requests.Session) -> None:
    body, length = binary_body()
    answer = http.post(
        f"{url}/invocations", data=body, headers={"Content-Type": f"{BINARY}{length}"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"] == "application/json"
    np.testing.assert_array_equal(parse_answer(answer).as_numpy("OUTPUT0"), DATA)


def test_binary_answer_in_sagemakers_form(url: str, http: requests.Session) -> None:
    body, length = binary_body(binary_output=True)
    answer = http.post(
        f"{url}/invocations", data=body, headers={"Content-Type": f"{BINARY}{length}"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"].startswith(BINARY)
    assert "Inference-Header-Content-Length" not in answer.headers
    np.testing.assert_array_equal(parse_answer(answer).as_numpy("OUTPUT0"), DATA)


@pytest.mark.parametrize(
    ("content_type", "message"),
    [
        (f"additional-string/{BINARY}{{n}}", "expect MIME type for binary data starts with"),
        (f"{BINARY}additional-string{{n}}", "Unable to parse inference header size, got: "),
        (f"{BINARY}-123", "inference header size should be in range (0, "),
        (f"{BINARY}12345", "inference header size should be in range (0, "),
        (f"{BINARY}99999999999", "value is out of range, got: 99999999999"),
        (f"{BINARY}{'9' * 4000}", "value is out of range"),
    ],
)
def test_malformed_binary_header(url: str, content_type: str, message: str) -> None:
    body, length = binary_body()
    answer = requests.post(
        f"{url}/invocations",
        data=body,
        headers={"Content-Type": content_type.replace("{n}", str(length))},
    )
    assert answer.status_code == 400
    assert message in answer.json()["error"]
    alive(url)


def test_bad_bodies(url: str, http: requests.Session) -> None:
    # the HTTP port's code, as Triton's /invocations (its JSON parser fails INTERNAL)
    answer = http.post(f"{url}/invocations", data=b"dummy")
    assert answer.status_code == 500
    assert "failed to parse the request JSON buffer" in answer.json()["error"]
    wrong = infer_body(np.arange(8, dtype=np.int32).reshape(1, 8))
    answer = http.post(f"{url}/invocations", json=wrong)
    assert answer.status_code == 400
    assert "unexpected shape for input 'INPUT0'" in answer.json()["error"]
    answer = http.get(f"{url}/invocations")
    assert (answer.status_code, answer.json()) == (405, {"error": "Method Not Allowed"})
    answer = http.post(f"{url}/invocations", data=b"x", headers={"Content-Encoding": "br"})
    assert answer.status_code == 400
    alive(url)


def test_unknown_paths_are_400_without_a_body(url: str) -> None:
    for path in ("/", "/v2/health/ready", "/ping/x", "/invocations/x", "/models/a/b/c"):
        answer = requests.get(f"{url}{path}")
        assert (answer.status_code, answer.content) == (400, b""), path


def test_body_over_the_input_bound(url: str) -> None:
    """A declared body past ``--http-max-input-size`` is refused before it is read; an
    undeclared (chunked) one once it passes the bound."""
    big = b"[" + b"1," * MAX_INPUT + b"1]"
    answer = requests.post(f"{url}/invocations", data=big)
    assert answer.status_code == 400
    assert "exceeds the maximum allowed input size" in answer.json()["error"]
    answer = requests.post(f"{url}/invocations", data=iter([big[:40000], big[40000:]]))
    assert answer.status_code == 400
    alive(url)


def test_a_client_that_sends_half_a_body_and_hangs_up(url: str) -> None:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b'POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"inp')
    alive(url)


def test_ping_in_live_mode_and_readiness_of_a_broken_server(tmp_path: Path) -> None:
    """A model that failed to load: the server is not ready (400 in ``ready`` mode) but
    live (200 in ``live`` mode)."""
    (tmp_path / "broken" / "1").mkdir(parents=True)
    (tmp_path / "broken" / "config.pbtxt").write_text('backend: "nope"\n')
    options = {"model_control_mode": "explicit", "load_model": ("broken",)}
    with serve(tmp_path, env={"SAGEMAKER_TRITON_PING_MODE": "live"}, **options) as srv:
        assert requests.get(f"{url_of(srv)}/ping").status_code == 200
    with serve(tmp_path, env={"SAGEMAKER_TRITON_PING_MODE": None}, **options) as srv:
        assert requests.get(f"{url_of(srv)}/ping").status_code == 400


def test_unspecified_default_model(tmp_path: Path) -> None:
    """Without SAGEMAKER_TRITON_DEFAULT_MODEL_NAME, /invocations names Triton's placeholder
    model, which is not found."""
    with serve(tmp_path, env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": None}) as srv:
        answer = requests.post(f"{url_of(srv)}/invocations", data=b"dummy")
    assert answer.status_code == 404
    assert (
        "Request for unknown model: 'unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME' is not "
        "found" in answer.json()["error"]
    )


def test_generate_and_generate_stream(tmp_path: Path) -> None:
    """SAGEMAKER_TRITON_INFERENCE_TYPE=generate / generate_stream: /invocations is Triton's
    generate extension on the default model."""
    ModelRepositoryBuilder(tmp_path).add_identity("echo", datatype="INT32", dims=[-1])
    env = {
        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "echo",
        "SAGEMAKER_TRITON_INFERENCE_TYPE": "generate",
    }
    options = {"model_control_mode": "explicit", "load_model": ("echo",)}
    with serve(tmp_path, env=env, **options) as srv:
        answer = requests.post(f"{url_of(srv)}/invocations", json={"INPUT0": [1, 2, 3]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["OUTPUT0"] == [1, 2, 3]
    env["SAGEMAKER_TRITON_INFERENCE_TYPE"] = "generate_stream"
    with serve(tmp_path, env=env, **options) as srv:
        answer = requests.post(f"{url_of(srv)}/invocations", json={"INPUT0": [4, 5]})
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    assert answer.text.startswith("data: ") and '"OUTPUT0":[4,5]' in answer.text


def test_invocation_errors_are_the_http_ports(url: str) -> None:
    """/invocations answers the HTTP port's codes, as Triton's (its HandleInfer): an input
    named ``OOM`` is the 400 of an unexpected input, not 507 (only the multi-model endpoint
    answers 507 for Triton's out-of-memory substrings)."""
    answer = requests.post(f"{url}/invocations", json=infer_body(name="OOM"))
    assert answer.status_code == 400
    assert "unexpected inference input 'OOM'" in answer.json()["error"]
    assert answer.headers["Content-Type"] == "application/json"
    alive(url)
