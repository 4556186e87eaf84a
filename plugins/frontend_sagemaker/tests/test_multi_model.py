"""The multi-model endpoint: load, list, get, invoke and unload models from folders laid out
as SageMaker lays them out (``<root>/<hash>/model``), Triton's status codes (409 already
loaded, 404 unknown, 507 no room, 400 bad requests), ``X-Amzn-SageMaker-Target-Model``, the
bounds on what a client sends, and ``--http-restricted-api``."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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

TARGET = "X-Amzn-SageMaker-Target-Model"

#: a python model whose every answer is an out-of-memory error
OUT_OF_MEMORY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        error = pb_utils.TritonError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return [pb_utils.InferenceResponse(error=error) for _ in requests]
"""


def write_models(root: Path) -> None:
    """SageMaker's folders: ``hash1/model`` is a model's own folder (config.pbtxt in it),
    ``hash2/model`` holds one model folder, ``ens/model`` an ensemble and the model it
    calls, ``empty/model`` nothing."""
    add_identity(root / "hash1", "model")
    add_identity(root / "hash2" / "model", "inner")
    ensemble = ModelRepositoryBuilder(root / "ens" / "model")
    ensemble.add_identity("step", datatype="INT32", dims=[1, 16])
    ensemble.add(
        "pipe",
        platform="ensemble",
        inputs=[("IN", "INT32", [1, 16])],
        outputs=[("OUT", "INT32", [1, 16])],
        extra=(
            'ensemble_scheduling { step [ { model_name: "step" model_version: -1 '
            'input_map { key: "INPUT0" value: "IN" } '
            'output_map { key: "OUTPUT0" value: "OUT" } } ] }\n'
        ),
    )
    ModelRepositoryBuilder(root / "oom").add(
        "model",
        backend="python",
        inputs=[("INPUT0", "INT32", [1, 16])],
        outputs=[("OUTPUT0", "INT32", [1, 16])],
        versions={1: {"model.py": OUT_OF_MEMORY}},
    )
    (root / "empty" / "model").mkdir(parents=True)
    (root / "proc" / "model").parent.mkdir(parents=True)
    os.symlink("/proc/self", root / "proc" / "model")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder SageMaker's model folders are in (``/opt/ml/models`` in SageMaker)."""
    path = tmp_path_factory.mktemp("mme") / "models"
    write_models(path)
    return path


@pytest.fixture(scope="module")
def server(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A multi-model endpoint as tritonx-sagemaker-serve starts one (explicit model control,
    ``/ping`` liveness), whose repository holds the operator's model ``victim``, loaded."""
    operator = tmp_path_factory.mktemp("sagemaker")
    add_identity(operator, "victim")
    with serve(
        operator,
        {"models_root": str(root)},
        env={"SAGEMAKER_TRITON_PING_MODE": "live"},
        plugins=("backend_python",),
        model_control_mode="explicit",
        load_model=("victim",),
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def url(server: Server) -> str:
    return url_of(server)


def load(url: str, name: str, folder: str, **headers: str) -> requests.Response:
    return requests.post(f"{url}/models", json={"model_name": name, "url": folder}, headers=headers)


def test_load_list_get_invoke_unload(url: str, root: Path) -> None:
    one, two = str(root / "hash1" / "model"), str(root / "hash2" / "model")
    assert requests.get(f"{url}/ping").status_code == 200
    answer = requests.get(f"{url}/models")
    assert (answer.content, answer.headers["Content-Type"]) == (
        b'{"models":[]}',
        "application/json",
    )

    answer = load(url, "m1", one)
    assert (answer.status_code, answer.content) == (200, b"")
    answer = load(url, "m1", one)
    assert answer.status_code == 409 and "already" in answer.json()["error"]
    assert load(url, "m2", two).status_code == 200

    listed = requests.get(f"{url}/models").json()["models"]
    assert sorted(listed, key=lambda m: m["modelName"]) == [
        {"modelName": "m1", "modelUrl": str(root / "hash1")},
        {"modelName": "m2", "modelUrl": two},
    ]
    assert requests.get(f"{url}/models/m1").json() == {
        "modelName": "m1",
        "modelUrl": str(root / "hash1"),
    }

    answer = requests.post(f"{url}/models/m1/invoke", json=infer_body())
    assert answer.status_code == 200, answer.text
    assert answer.json()["model_name"] == "m1"
    assert answer.json()["outputs"][0]["data"] == DATA.ravel().tolist()
    body, length = binary_body(binary_output=True)
    answer = requests.post(
        f"{url}/models/m2/invoke", data=body, headers={"Content-Type": f"{BINARY}{length}"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"].startswith(BINARY)
    np.testing.assert_array_equal(parse_answer(answer).as_numpy("OUTPUT0"), DATA)

    assert requests.delete(f"{url}/models/m1").status_code == 200
    assert [m["modelName"] for m in requests.get(f"{url}/models").json()["models"]] == ["m2"]
    for method, path in (
        ("DELETE", "/models/m1"),
        ("GET", "/models/m1"),
        ("POST", "/models/m1/invoke"),
        ("DELETE", "/models/never_loaded"),
    ):
        answer = requests.request(method, f"{url}{path}", json=infer_body())
        assert (answer.status_code, answer.content) == (404, b""), (method, path)
    # unloaded and unregistered: it loads again from the same folder
    assert load(url, "m1", one).status_code == 200
    assert requests.delete(f"{url}/models/m1").status_code == 200
    assert requests.delete(f"{url}/models/m2").status_code == 200


def test_an_ensemble_served_under_the_target_model(url: str, root: Path) -> None:
    """The folder's ensemble is the model served, under X-Amzn-SageMaker-Target-Model."""
    folder = str(root / "ens" / "model")
    assert load(url, "ens", folder, **{TARGET: "pipeline.tar.gz"}).status_code == 200
    answer = requests.post(f"{url}/models/ens/invoke", json=infer_body(name="IN"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["model_name"] == "pipeline.tar.gz"
    assert answer.json()["outputs"][0]["data"] == DATA.ravel().tolist()
    assert requests.delete(f"{url}/models/ens", headers={TARGET: "pipeline.tar.gz"}).ok


def test_inference_errors_are_400(url: str, root: Path) -> None:
    assert load(url, "e1", str(root / "hash1" / "model")).status_code == 200
    try:
        answer = requests.post(f"{url}/models/e1/invoke", data=b"dummy")
        assert answer.status_code == 400
        assert "failed to parse the request JSON buffer" in answer.json()["error"]
        answer = requests.post(
            f"{url}/models/e1/invoke", json=infer_body(np.zeros((1, 3), np.int32))
        )
        assert answer.status_code == 400
        assert "unexpected shape" in answer.json()["error"]
        # Triton's rule: any message holding an out-of-memory substring is 507, whatever
        # it quotes (here the client's input name)
        answer = requests.post(f"{url}/models/e1/invoke", json=infer_body(name="OOM"))
        assert answer.status_code == 507
        assert "unexpected inference input 'OOM'" in answer.json()["error"]
    finally:
        assert requests.delete(f"{url}/models/e1").status_code == 200


def test_an_out_of_memory_inference_is_507(url: str, root: Path) -> None:
    assert load(url, "oom", str(root / "oom" / "model")).status_code == 200
    try:
        answer = requests.post(f"{url}/models/oom/invoke", json=infer_body())
        assert answer.status_code == 507
        assert "CUDA out of memory" in answer.json()["error"]
    finally:
        assert requests.delete(f"{url}/models/oom").status_code == 200


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "failed to parse the request JSON buffer"),
        (b"[1, 2]", "must be a JSON object"),
        ({"url": "{root}/hash1/model"}, '"model_name" must be a non-empty string'),
        ({"model_name": 7, "url": "{root}/hash1/model"}, '"model_name" must be a non-empty'),
        ({"model_name": "a/b", "url": "{root}/hash1/model"}, "invalid model_name 'a/b'"),
        ({"model_name": "..", "url": "{root}/hash1/model"}, "invalid model_name '..'"),
        ({"model_name": "a\nb", "url": "{root}/hash1/model"}, "control characters"),
        ({"model_name": "\udcff", "url": "{root}/hash1/model"}, "unprintable characters"),
        (b"[" * 60000, "failed to parse the request JSON buffer: nested too deeply"),
        ({"model_name": "x" * 1025, "url": "{root}/hash1/model"}, "longer than 1024"),
        ({"model_name": "m"}, '"url" must be a non-empty string'),
        ({"model_name": "m", "url": "/etc"}, "expected a path of the form {root}/<hash>/model"),
        ({"model_name": "m", "url": "{root}/hash1/model/../../../x/model"}, "expected a path"),
        ({"model_name": "m", "url": "relative/model"}, "expected a path of the form"),
        ({"model_name": "m", "url": "/proc/self/model"}, "cannot start with /dev/, /proc/"),
        ({"model_name": "m", "url": "{root}/proc/model"}, "a symbolic link leads it outside"),
        ({"model_name": "m", "url": "{root}/nothing/model"}, "repository not found"),
        ({"model_name": "m", "url": "{root}/empty/model"}, "no model found in"),
        ({"model_name": "m", "url": "{root}/x/model/" + "y" * 5000}, "longer than 4096"),
        ({"model_name": "m", "url": "{root}/x/model\u0000"}, "holding a NUL"),
    ],
)
def test_bad_loads(url: str, root: Path, body: Any, message: str) -> None:
    if isinstance(body, dict):
        body = {
            k: v.replace("{root}", str(root)) if isinstance(v, str) else v for k, v in body.items()
        }
        answer = requests.post(f"{url}/models", json=body)
    else:
        answer = requests.post(f"{url}/models", data=body)
    assert answer.status_code == 400
    assert message.replace("{root}", str(root)) in answer.json()["error"]
    assert requests.get(f"{url}/models").json() == {"models": []}


def test_a_hostile_target_model_header(url: str, root: Path) -> None:
    folder = str(root / "hash1" / "model")
    answer = load(url, "m", folder, **{TARGET: "t" * 5000})
    assert answer.status_code == 400 and "longer than 1024" in answer.json()["error"]
    answer = load(url, "m", folder, **{TARGET: "../../etc"})
    assert answer.status_code == 400


def test_a_load_body_past_its_bound(url: str) -> None:
    """POST /models reads at most 64 KiB: a larger declared body is refused unread, a larger
    chunked one once it passes the bound; the connection is closed, the server serves on."""
    big = b'{"model_name": "' + b"x" * (64 * 1024) + b'"}'
    answer = requests.post(f"{url}/models", data=big)
    assert answer.status_code == 400
    assert "exceeds the maximum allowed input size of 65536 bytes" in answer.json()["error"]
    assert answer.headers.get("Connection") == "close"
    answer = requests.post(f"{url}/models", data=iter([big[:1000], big[1000:], big]))
    assert answer.status_code == 400
    assert requests.get(f"{url}/ping").status_code == 200


def test_a_load_body_that_stalls(url: str) -> None:
    """A client that declares a body and sends half of it, then hangs up."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b'POST /models HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"mo')
    assert requests.get(f"{url}/models").status_code == 200


def test_other_methods(url: str) -> None:
    for method in ("PUT", "PATCH"):
        answer = requests.request(method, f"{url}/models")
        assert (answer.status_code, answer.content) == (400, b"")


@pytest.fixture(scope="module")
def budgeted(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An endpoint that holds one model at a time (``--max-loaded-models 1``), whose model
    management needs the header ``X-SM-Auth: secret``, and that waits 0.5 s at most for each
    piece of a body (``--http-body-timeout-secs``)."""
    pinned = root / "pinned" / "model"
    add_identity(pinned.parent, "model", parameters={"tritonx_pinned": "true"})
    with serve(
        tmp_path_factory.mktemp("budgeted"),
        {"models_root": str(root)},
        model_control_mode="explicit",
        max_loaded_models=1,
        model_load_on_demand=True,
        http_restricted_api={"model-repository": ("X-SM-Auth", "secret")},
        http_body_timeout_secs=0.5,
    ) as srv:
        yield url_of(srv)


def test_no_room_is_507(budgeted: str, root: Path) -> None:
    auth = {"X-SM-Auth": "secret"}
    assert load(budgeted, "p", str(root / "pinned" / "model"), **auth).status_code == 200
    answer = load(budgeted, "q", str(root / "hash1" / "model"), **auth)
    assert answer.status_code == 507
    assert "--max-loaded-models 1 reached" in answer.json()["error"]
    # the refused model's repository is unregistered: it loads once there is room
    assert requests.delete(f"{budgeted}/models/p", headers=auth).status_code == 200
    assert load(budgeted, "q", str(root / "hash1" / "model"), **auth).status_code == 200
    assert requests.delete(f"{budgeted}/models/q", headers=auth).status_code == 200


def test_restricted_model_management(budgeted: str, root: Path) -> None:
    """--http-restricted-api model-repository covers list, get, load and unload; /ping and
    inference stay open (Triton's L0_sagemaker)."""
    expected = "This API is restricted, expecting header 'X-SM-Auth'"
    for method, path in (
        ("GET", "/models"),
        ("GET", "/models/p"),
        ("POST", "/models"),
        ("DELETE", "/models/p"),
    ):
        for headers in ({}, {"X-SM-Auth": "wrong"}):
            answer = requests.request(method, f"{budgeted}{path}", headers=headers, json={})
            assert answer.status_code == 403, (method, path)
            assert answer.json() == {"error": expected}
    assert requests.get(f"{budgeted}/models", headers={"X-SM-Auth": "secret"}).status_code == 200
    assert requests.get(f"{budgeted}/ping").status_code == 200


def test_other_methods_are_400_before_the_restriction(budgeted: str) -> None:
    answer = requests.put(f"{budgeted}/models")
    assert (answer.status_code, answer.content) == (400, b"")


def test_a_load_body_that_stalls_past_the_body_timeout(budgeted: str) -> None:
    """A client that sends half its declared body and waits: answered 400 once
    --http-body-timeout-secs passes without a byte, the connection closed."""
    host, port = budgeted.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /models HTTP/1.1\r\nHost: x\r\nX-SM-Auth: secret\r\n"
            b'Content-Length: 500\r\n\r\n{"mo'
        )
        answer = b""
        while chunk := sock.recv(4096):  # (until the server closes the connection)
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400")
    assert b"timed out reading the request body" in answer
    assert requests.get(f"{budgeted}/ping").status_code == 200


def test_a_folder_with_too_many_entries(url: str, root: Path) -> None:
    """The model folder is looked through for at most 4096 entries."""
    crowded = root / "crowded" / "model"
    crowded.mkdir(parents=True)
    for i in range(4097):
        (crowded / f"m{i}").mkdir()
    answer = load(url, "crowded", str(crowded))
    assert answer.status_code == 400
    assert "holds more than 4096 entries" in answer.json()["error"]


def test_concurrent_loads_of_one_name(url: str, root: Path) -> None:
    """Eight loads of one name at once: one loads it, the others are 409."""
    from concurrent.futures import ThreadPoolExecutor

    folder = str(root / "hash1" / "model")
    with ThreadPoolExecutor(8) as pool:
        codes = sorted(pool.map(lambda _: load(url, "same", folder).status_code, range(8)))
    assert codes == [200] + [409] * 7
    assert requests.delete(f"{url}/models/same").status_code == 200


def chunked_load(url: str, chunks: int) -> bytes:
    """POST /models with a body of ``chunks`` one-byte HTTP chunks (Triton's
    sagemaker_request_many_chunks); the answer as sent."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(
            b"POST /models HTTP/1.1\r\nHost: x\r\nX-Amzn-SageMaker-Target-Model: ZZZZZZZ\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(OSError):  # (refused: the server may close first)
            sock.sendall(b"1\r\nA\r\n" * chunks + b"0\r\n\r\n")
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(4096):
                answer += chunk
    return answer


def test_chunked_load_bodies(url: str) -> None:
    """At most 65536 non-empty chunks (Triton's limit and message); the server serves on."""
    answer = chunked_load(url, 65536)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"failed to parse the request JSON buffer" in answer
    answer = chunked_load(url, 65537)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert (
        b"Chunked request body exceeds maximum of 65536 non-empty chunks. Send fewer or larger "
        b"HTTP chunks." in answer
    )
    assert requests.get(f"{url}/ping").status_code == 200


# ------------------------------------------------------------------ hostile loads: names


def test_a_load_may_not_take_the_name_of_a_served_model(
    url: str, root: Path, server: Server
) -> None:
    """X-Amzn-SageMaker-Target-Model naming the operator's model, or another load's, is 409:
    nothing is registered, the model serves on, DELETE and invoke reach only what the
    endpoint loaded."""
    folder = str(root / "hash1" / "model")
    answer = load(url, "x", folder, **{TARGET: "victim"})
    assert answer.status_code == 409
    assert "model 'victim' is already served by this server" in answer.json()["error"]
    assert requests.delete(f"{url}/models/x").status_code == 404
    assert requests.post(f"{url}/models/x/invoke", json=infer_body()).status_code == 404
    assert server.model_ready("victim")

    assert load(url, "first", folder).status_code == 200
    answer = load(url, "second", folder, **{TARGET: "first"})
    assert answer.status_code == 409
    assert "model 'first' is already served by another load" in answer.json()["error"]
    answer = requests.post(f"{url}/models/first/invoke", json=infer_body())
    assert (answer.status_code, answer.json()["model_name"]) == (200, "first")
    assert requests.delete(f"{url}/models/first").status_code == 200
    # the endpoint's own name, once free, is the endpoint's to use again
    assert load(url, "second", folder, **{TARGET: "first"}).status_code == 200
    assert requests.delete(f"{url}/models/second").status_code == 200
    assert server.model_ready("victim")


def test_a_folder_whose_other_model_has_a_served_name(url: str, root: Path, server: Server) -> None:
    """A folder-form load brings its other model folders as names too: one named as the
    operator's model is 409."""
    add_identity(root / "clash" / "model", "a")
    add_identity(root / "clash" / "model", "victim")
    answer = load(url, "clash", str(root / "clash" / "model"))
    assert answer.status_code == 409
    assert "model 'victim' is already served by this server" in answer.json()["error"]
    assert server.model_ready("victim")


def test_a_folder_whose_link_aliases_a_served_name(url: str, root: Path, server: Server) -> None:
    """A link inside the folder to one of its models is a model name too (the repository
    lists it): named as the operator's model it is 409, like a real folder."""
    add_identity(root / "alias" / "model", "a")
    (root / "alias" / "model" / "victim").symlink_to("a")
    answer = load(url, "alias", str(root / "alias" / "model"))
    assert answer.status_code == 409
    assert "model 'victim' is already served by this server" in answer.json()["error"]
    assert server.model_ready("victim")


def test_a_subfolder_load_serves_only_its_model(url: str, root: Path, server: Server) -> None:
    """``<root>/<hash>/model/<sub>`` with a config.pbtxt: only that model is served (its
    sibling folders are not model names); modelUrl is Triton's."""
    add_identity(root / "sib" / "model", "a")
    add_identity(root / "sib" / "model", "extra")
    assert load(url, "s", str(root / "sib" / "model" / "a")).status_code == 200
    try:
        names = {row.name for row in server.repository_index()}
        assert "s" in names and not names & {"a", "extra"}
        assert requests.get(f"{url}/models/s").json()["modelUrl"] == str(root / "sib" / "model")
        assert requests.post(f"{url}/models/s/invoke", json=infer_body()).status_code == 200
    finally:
        assert requests.delete(f"{url}/models/s").status_code == 200


def test_a_failed_load_leaves_nothing_behind(url: str, root: Path, server: Server) -> None:
    """A model that fails to load: its repository is unregistered (the same folder loads
    again, 400 not 409), no name stays claimed."""
    ModelRepositoryBuilder(root / "bad" / "model").add(
        "x", backend="not_installed", inputs=[("IN", "INT32", [1])], outputs=[("OUT", "INT32", [1])]
    )
    for name in ("f1", "f1", "f2"):
        answer = load(url, name, str(root / "bad" / "model"))
        assert answer.status_code == 400, answer.text
    assert requests.get(f"{url}/models").json() == {"models": []}
    assert "x" not in {row.name for row in server.repository_index()}
    assert load(url, "f3", str(root / "hash1" / "model"), **{TARGET: "f1"}).status_code == 200
    assert requests.delete(f"{url}/models/f3").status_code == 200


def test_undecodable_target_model_bytes(url: str, root: Path) -> None:
    """X-Amzn-SageMaker-Target-Model: \\xff is 400 (never a 500)."""
    body = json.dumps({"model_name": "u", "url": str(root / "hash1" / "model")}).encode()
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"X-Amzn-SageMaker-Target-Model: \xff\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"unprintable characters" in answer
    assert requests.get(f"{url}/models").json() == {"models": []}


# ------------------------------------------------------------------ hostile loads: folders


def test_a_url_that_links_outside_of_its_hash(url: str, root: Path, tmp_path: Path) -> None:
    """A url resolving outside ``<root>/<hash>`` (another repository, ``/``, another
    load's folder) is 400."""
    add_identity(tmp_path / "outside", "stolen")
    (root / "esc1").mkdir()
    os.symlink(tmp_path / "outside", root / "esc1" / "model")
    (root / "esc2" / "model").mkdir(parents=True)
    os.symlink("/", root / "esc2" / "model" / "sub")
    (root / "esc3").mkdir()
    os.symlink(root / "hash1" / "model", root / "esc3" / "model")
    for folder in ("esc1/model", "esc2/model/sub", "esc3/model"):
        answer = load(url, "esc", str(root / folder))
        assert answer.status_code == 400, folder
        assert "a symbolic link leads it outside of" in answer.json()["error"]
        assert str(tmp_path) not in answer.text
    assert requests.get(f"{url}/models").json() == {"models": []}


def test_model_files_that_are_not_regular_or_lead_outside(
    url: str, root: Path, tmp_path: Path
) -> None:
    """A config.pbtxt (or any file, at any depth) that is a FIFO, or a link out of the
    url's folder (to a secret, to /dev/zero, a folder elsewhere) is 400 at once, its
    contents never read nor quoted."""
    secret = tmp_path / "secret.txt"
    secret.write_text("sk_live_SECRET\n")
    cases = {
        "fifo": ("m/config.pbtxt", None),
        "leak": ("m/config.pbtxt", secret),
        "zero": ("m/config.pbtxt", Path("/dev/zero")),
        "deep": ("m/1/model.py", secret),
        "dir": ("m/1", tmp_path),
    }
    for case, (inside, target) in cases.items():
        add_identity(root / case / "model", "m")
        path = root / case / "model" / inside
        if path.is_dir():
            path.rmdir()
        else:
            path.unlink(missing_ok=True)
        if target is None:
            os.mkfifo(path)
        else:
            os.symlink(target, path)
        answer = load(url, case, str(root / case / "model"))
        assert answer.status_code == 400, case
        message = answer.json()["error"]
        expected = "is not a regular file" if target is None else "leads outside of"
        assert expected in message and inside in message, case
        assert "SECRET" not in message
    assert requests.get(f"{url}/models").json() == {"models": []}


def test_a_link_inside_the_folder_is_followed(url: str, root: Path) -> None:
    own = root / "inlink" / "model"
    add_identity(own.parent, "model")
    (own / "config.pbtxt").rename(own / "real.pbtxt")
    os.symlink("real.pbtxt", own / "config.pbtxt")
    assert load(url, "inlink", str(own)).status_code == 200
    assert requests.post(f"{url}/models/inlink/invoke", json=infer_body()).status_code == 200
    assert requests.delete(f"{url}/models/inlink").status_code == 200


def test_the_configurations_read_are_bounded(url: str, root: Path) -> None:
    """Looking for the ensemble reads at most 1 MiB of each config.pbtxt and 4 MiB in all:
    five crafted 1 MB configurations, or one of 1 MiB + 1, are 400."""
    crafted = ("platform: " + " " * 1000 + "\n") * 1000  # (1,011,000 bytes)
    for i in range(5):
        (root / "big" / "model" / f"m{i}").mkdir(parents=True)
        (root / "big" / "model" / f"m{i}" / "config.pbtxt").write_text(crafted)
    answer = load(url, "big", str(root / "big" / "model"))
    assert answer.status_code == 400
    assert "are larger than 4194304 bytes in all" in answer.json()["error"]
    (root / "huge" / "model" / "m").mkdir(parents=True)
    (root / "huge" / "model" / "m" / "config.pbtxt").write_bytes(b" " * ((1 << 20) + 1))
    answer = load(url, "huge", str(root / "huge" / "model"))
    assert answer.status_code == 400
    assert "config.pbtxt' is larger than 1048576 bytes" in answer.json()["error"]


# ------------------------------------------------------------------ bounds


@pytest.fixture(scope="module")
def bounded(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An endpoint that holds two models at once, makes three model names at most and looks
    through 100 entries of a model's folder at most."""
    with serve(
        tmp_path_factory.mktemp("bounded"),
        {
            "models_root": str(root),
            "max_models": "2",
            "max_model_names": "3",
            "max_model_files": "100",
        },
        model_control_mode="explicit",
    ) as srv:
        yield url_of(srv)


def test_the_endpoints_bounds_are_507(bounded: str, root: Path) -> None:
    folder = str(root / "hash1" / "model")
    assert load(bounded, "a", folder).status_code == 200
    assert load(bounded, "b", folder).status_code == 200
    answer = load(bounded, "c", folder)
    assert answer.status_code == 507
    assert "holds its most models (max_models=2)" in answer.json()["error"]
    assert requests.delete(f"{bounded}/models/b").status_code == 200
    assert load(bounded, "c", folder).status_code == 200
    assert requests.delete(f"{bounded}/models/c").status_code == 200
    answer = load(bounded, "d", folder)
    assert answer.status_code == 507
    assert "made its most model names (max_model_names=3)" in answer.json()["error"]
    # refused before its folder is looked through
    assert load(bounded, "e", str(root / "nothing" / "model")).status_code == 507
    # a name the endpoint made is its to use again
    assert load(bounded, "d", folder, **{TARGET: "b"}).status_code == 200
    for name in ("a", "d"):
        assert requests.delete(f"{bounded}/models/{name}").status_code == 200


def test_a_model_folder_with_too_many_files(bounded: str, root: Path) -> None:
    """A model's folder is walked for at most max_model_files entries (at any depth)."""
    many = root / "many" / "model" / "m" / "1"
    many.mkdir(parents=True)
    for i in range(100):
        (many / f"f{i}").touch()
    # (served as "a", a name test_the_endpoints_bounds_are_507 makes: in either order the
    # load is not refused for its name first)
    answer = load(bounded, "many", str(root / "many" / "model"), **{TARGET: "a"})
    assert answer.status_code == 400
    assert "holds more than 100 files and folders" in answer.json()["error"]
    assert requests.get(f"{bounded}/models").json() == {"models": []}
