"""The OpenAI frontend's settings (``--frontend-config openai,<key>=<value>``): API keys from a
file and the environment, per-API key protection and Triton's restricted APIs, the request
size limit, which model backs which id, settings refused at start; the plugin as installed
(``tritonx plugins``, ``tritonx serve``) and the server without it."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from tritonx import PluginError, Server
from tritonx.testing import listed_plugins, loopback_settings
from tritonx_frontend_openai.auth import BAD_KEY, NO_KEY
from tritonx_frontend_openai.examples import copy_mock_llm
from tritonx_frontend_openai.frontend import OpenAIFrontend

PLUGIN_ROOT = Path(__file__).resolve().parents[1]


def client(server: Server, api_key: str = "unused") -> openai.OpenAI:
    url = server.frontend_urls["openai"]
    return openai.OpenAI(base_url=url, api_key=api_key, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def mock_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled mock LLM (twice) and a toy embedding model."""
    root = tmp_path_factory.mktemp("settings") / "models"
    root.mkdir()
    copy_mock_llm(root)
    copy_mock_llm(root, "mock_two")
    return root


HELLO: list[Any] = [{"role": "user", "content": "[[reply:hello]]"}]


# ---------------------------------------------------------------------- API keys


@pytest.fixture(scope="module")
def keyed(
    mock_repository: Path, tmp_path_factory: pytest.TempPathFactory, serve_openai: Any
) -> Iterator[Server]:
    """Keys from a file and from TRITONX_OPENAI_API_KEYS."""
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text("# team keys\nsk-file-1\n\n  sk-file-2  \n")
    with contextlib.ExitStack() as stack:
        with pytest.MonkeyPatch.context() as env:  # read once, at start
            env.setenv("TRITONX_OPENAI_API_KEYS", "sk-env-1, sk-env-2")
            server = stack.enter_context(
                serve_openai(mock_repository, {"api_keys_file": str(keys)})
            )
        yield server


def test_api_keys(keyed: Server) -> None:
    for key in ("sk-file-1", "sk-file-2", "sk-env-1", "sk-env-2"):
        with client(keyed, key) as c:
            answer = c.chat.completions.create(model="mock_llm", messages=HELLO)
            assert answer.choices[0].message.content == "hello"
            assert [m.id for m in c.models.list()] == ["mock_llm", "mock_two"]
    with client(keyed, "sk-wrong") as c:
        for call in (
            lambda: c.chat.completions.create(model="mock_llm", messages=HELLO),
            lambda: c.models.list(),
            lambda: c.models.retrieve("mock_llm"),
            lambda: c.embeddings.create(model="mock_llm", input="x"),
        ):
            with pytest.raises(openai.AuthenticationError) as caught:
                call()
            assert caught.value.status_code == 401
            assert caught.value.code == "invalid_api_key"
            body = caught.value.body
            assert isinstance(body, dict) and body["type"] == "invalid_request_error"
            assert "sk-wrong" not in str(caught.value)


async def test_no_key_is_openais_401(keyed: Server) -> None:
    url = keyed.frontend_urls["openai"]
    async with aiohttp.ClientSession() as session:
        for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer "}):
            async with session.get(f"{url}/models", headers=headers) as resp:
                assert resp.status == 401
                body = await resp.json()
            assert body == {
                "error": {
                    "message": "You didn't provide an API key. You need to provide your API key "
                    "in an Authorization header using Bearer auth (i.e. Authorization: Bearer "
                    "YOUR_KEY).",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            }
        # a path that is no API is not protected: 404
        async with session.get(f"{url}/nothing") as resp:
            assert resp.status == 404


def _keyless_requests(server: Server) -> list[tuple[str, str]]:
    """(method, path) of every route of the frontend's app, as its router table has them
    (``make_app``, with the server's own settings), each with every method it answers
    (``HEAD`` where aiohttp adds it to a ``GET`` route, every method for a ``*`` route) and
    ``OPTIONS``; a variable part of a path is filled in."""
    frontend = OpenAIFrontend(
        server.dataplane.handle, server.settings, server.settings.frontend_config["openai"]
    )
    app = frontend.make_app()
    every = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
    out: list[tuple[str, str]] = []
    for resource in app.router.resources():
        path = re.sub(r"\{[^}]*\}", "some-model", resource.canonical)
        # a route the keys cannot protect would be open to anyone: none may be added
        assert frontend.auth.group(path) is not None, f"{path} is in no API group"
        methods = {route.method for route in resource}
        methods = set(every) if "*" in methods else methods | {"OPTIONS"}
        out += [(method, path) for method in sorted(methods)]
    return out


async def test_every_route_and_method_asks_for_a_key(keyed: Server) -> None:
    """HEAD (aiohttp answers it on GET routes), OPTIONS and methods a route does not serve
    get 401 like the route's own: a keyless client learns nothing, not even whether a model
    exists (``HEAD /v1/models/<id>`` answered 200 or 404)."""
    requests = _keyless_requests(keyed)
    assert ("HEAD", "/v1/models/some-model") in requests and ("OPTIONS", "/v1/models") in requests
    base = keyed.frontend_urls["openai"].removesuffix("/v1")
    async with aiohttp.ClientSession() as session:
        for model in ("mock_llm", "no-such-model"):
            async with session.head(f"{base}/v1/models/{model}") as resp:
                assert resp.status == 401, model
        for method, path in requests:
            for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
                async with session.request(method, base + path, headers=headers) as resp:
                    assert resp.status == 401, (method, path, headers)
                    if method != "HEAD":
                        assert (await resp.json())["error"]["message"] in (NO_KEY, BAD_KEY)
            headers = {"Authorization": "Bearer sk-env-1"}
            async with session.request(method, base + path, headers=headers) as resp:
                assert resp.status != 401, (method, path)  # a key opens them


def test_keys_protect_only_the_apis_named(
    mock_repository: Path, tmp_path: Path, serve_openai: Any
) -> None:
    keys = tmp_path / "keys"
    keys.write_text("sk-1\n")
    config = {"api_keys_file": str(keys), "auth_apis": "inference"}
    with serve_openai(mock_repository, config) as server, client(server, "sk-other") as c:
        assert "mock_llm" in [m.id for m in c.models.list()]  # model-repository: open
        with pytest.raises(openai.AuthenticationError):
            c.completions.create(model="mock_llm", prompt="x")


def test_restricted_api(mock_repository: Path, serve_openai: Any) -> None:
    config = {"restricted_api": "inference:infer-key=secret;model-repository:admin-key=root"}
    with serve_openai(mock_repository, config) as server:
        with client(server) as c:
            with pytest.raises(openai.AuthenticationError) as caught:
                c.chat.completions.create(model="mock_llm", messages=HELLO)
            body = caught.value.body
            assert isinstance(body, dict)
            assert body["type"] == "authentication_error"
            assert body["code"] == "invalid_auth"
            assert body["message"] == (
                "This API is restricted, expecting header 'infer-key' with valid value"
            )
            with pytest.raises(openai.AuthenticationError):
                c.models.list()
        headers = {"infer-key": "secret", "admin-key": "root"}
        url = server.frontend_urls["openai"]
        with openai.OpenAI(base_url=url, api_key="x", max_retries=0, default_headers=headers) as c:
            assert c.chat.completions.create(model="mock_llm", messages=HELLO).choices
            assert c.models.list().data


# ---------------------------------------------------------------------- limits, mapping


async def test_request_size_limit(mock_repository: Path, serve_openai: Any) -> None:
    with serve_openai(mock_repository, {"max_request_size": "2000"}) as server:
        url = server.frontend_urls["openai"] + "/chat/completions"
        small = {"model": "mock_llm", "messages": HELLO}
        large = {"model": "mock_llm", "messages": [{"role": "user", "content": "x" * 5000}]}

        async def chunks() -> Any:  # no Content-Length: counted as it arrives
            yield json.dumps(large).encode()

        async with aiohttp.ClientSession() as session:
            async with session.post(url, json=small) as resp:
                assert resp.status == 200
            for data in (json.dumps(large).encode(), chunks()):
                async with session.post(url, data=data) as resp:
                    assert resp.status == 413
                    error = (await resp.json())["error"]
                    assert error["code"] == "content_too_large"
                    assert error["type"] == "invalid_request_error"
                    assert "2000 bytes" in error["message"]


def test_models_setting_maps_ids_to_models(mock_repository: Path, serve_openai: Any) -> None:
    config = {"models": "gpt-test:mock_llm,mock_two"}
    with serve_openai(mock_repository, config) as server, client(server) as c:
        assert [m.id for m in c.models.list()] == ["gpt-test", "mock_two"]
        answer = c.chat.completions.create(model="gpt-test", messages=HELLO)
        assert answer.model == "gpt-test" and answer.choices[0].message.content == "hello"
        assert c.completions.create(model="mock_two", prompt="[[reply:x]]").choices[0].text == "x"
        with pytest.raises(openai.NotFoundError):
            c.chat.completions.create(model="mock_llm", messages=HELLO)  # not listed
        with pytest.raises(openai.NotFoundError):
            c.models.retrieve("mock_llm")


def test_a_mapped_model_loads_on_demand(mock_repository: Path, serve_openai: Any) -> None:
    settings: dict[str, Any] = {
        "model_control_mode": "explicit",
        "model_load_on_demand": True,
    }
    with serve_openai(mock_repository, {"models": "gpt-test:mock_two"}, **settings) as server:
        assert not server.dataplane.model_ready("mock_two")
        with client(server) as c:
            answer = c.chat.completions.create(model="gpt-test", messages=HELLO)
        assert answer.choices[0].message.content == "hello"
        assert server.dataplane.model_ready("mock_two")


# ---------------------------------------------------------------------- start-up


BAD_SETTINGS = [
    ({"colour": "blue"}, r"unknown key\(s\) colour"),
    ({"request_format": "json"}, "request_format: must be auto, vllm or tensorrtllm"),
    ({"default_max_tokens": "0"}, "default_max_tokens: must be a positive integer"),
    ({"max_request_size": "big"}, "max_request_size: must be a positive integer"),
    ({"models": "a:b:c"}, "models: each entry must be <id>:<model> or <model>"),
    ({"models": "a:m1,a:m2"}, "models: a model id is given twice"),
    ({"tool_call_parser": "hermes"}, "unknown tool call parser 'hermes'"),
    ({"api_keys_file": "/nonexistent/keys"}, "api_keys_file: cannot be read"),
    ({"auth_apis": "metrics"}, "auth_apis: unknown API 'metrics'"),
    ({"restricted_api": "inference"}, "restricted_api: each group must be"),
    ({"restricted_api": "inference:a=1;inference:b=2"}, "can not be in more than one group"),
    ({"tokenizer": "/nonexistent"}, "tokenizer: is not a folder"),
    ({"chat_template": "/nonexistent.jinja"}, "chat_template: is neither a template nor a file"),
]


@pytest.mark.parametrize(("config", "message"), BAD_SETTINGS)
async def test_bad_settings_stop_the_start(
    mock_repository: Path, config: dict[str, str], message: str
) -> None:
    from tritonx._runtime.plugins import make_plugin_manager

    pm = make_plugin_manager(autoload=True, only=("frontend_openai",))
    settings = loopback_settings(
        mock_repository, frontend_config={"openai": {"port": "0", **config}}
    )
    with pytest.raises(PluginError, match=message):
        await Server(settings, plugin_manager=pm).start()


def test_start_up_log_names_the_url(
    mock_repository: Path, serve_openai: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tritonx.server")
    with serve_openai(mock_repository) as server:
        url = server.frontend_urls["openai"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        assert f"OpenAI frontend at {url}" in caplog.text


async def test_without_the_plugin_no_v1_route_exists(mock_repository: Path) -> None:
    from tritonx._runtime.plugins import make_plugin_manager

    pm = make_plugin_manager(autoload=True, only=("backend_python",))
    async with Server(loopback_settings(mock_repository), plugin_manager=pm) as server:
        assert server.frontend_urls == {}
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{server.http_port}/v1/models") as resp:
                assert resp.status == 404


def test_tritonx_plugins_lists_the_frontend(tmp_path: Path) -> None:
    listed = listed_plugins(PLUGIN_ROOT, tmp_path)
    assert listed["frontend_openai"]["registered"] == {"frontends": ["openai"]}
    assert listed["frontend_openai"]["distribution"] == "tritonx-frontend-openai"


def test_tritonx_serve_with_the_bundled_mock(mock_repository: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
    env["TRITONX_PLUGINS"] = "backend_python,frontend_openai"
    command = [
        sys.executable, "-m", "tritonx", "serve",
        "--model-repository", str(mock_repository),
        "--http-port", "0", "--grpc-port", "0", "--allow-metrics", "false",
        "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
        "--frontend-config", "openai,port=0",
    ]  # fmt: skip
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            found = re.search(r"OpenAI frontend at (http://[^\s\"']+)", line)
            if found:
                url = found.group(1)
                break
        else:
            pytest.fail("tritonx serve did not start:\n" + "".join(lines)[-3000:])
        with openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=60) as c:
            assert "mock_llm" in [m.id for m in c.models.list()]
            chunks = c.chat.completions.create(
                model="mock_llm",
                messages=[{"role": "user", "content": "[[count:3]]"}],
                stream=True,
            )
            assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == "1 2 3"
    finally:
        proc.terminate()
        proc.wait(60)
        if proc.stderr is not None:
            proc.stderr.close()


# ---------------------------------------------------------------------- templates, tokenizer


def logged_prompts(log: Path) -> list[str]:
    """The prompts the mock LLM logged (a line per request, written before its last
    response: complete once the client has the answer)."""
    return [json.loads(line)["prompt"] for line in log.read_text().splitlines()]


def test_chat_template_sources(tmp_path: Path, serve_openai: Any) -> None:
    root = tmp_path / "models"
    root.mkdir()
    log = tmp_path / "requests.jsonl"
    copy_mock_llm(root, "plain", parameters={"request_log": str(log)})
    tok = copy_mock_llm(root, "tok", parameters={"request_log": str(log)})
    (tok / "tokenizer_config.json").write_text(
        json.dumps(
            {"chat_template": "TOK{{ bos_token }}:{{ messages[0]['content'] }}", "bos_token": "<s>"}
        )
    )
    parameter = {"request_log": str(log), "chat_template": "PARAM:{{ messages[0]['content'] }}"}
    copy_mock_llm(root, "param", parameters=parameter)
    template = tmp_path / "chat.jinja"
    template.write_text("FILE:{{ messages[0]['content'] }}")
    question: list[Any] = [{"role": "user", "content": "[[reply:ok]]"}]
    with serve_openai(root) as server, client(server) as c:
        for model in ("plain", "tok", "param"):
            assert c.chat.completions.create(model=model, messages=question).choices
    default, from_tokenizer, from_parameter = logged_prompts(log)
    assert default == "<|user|>\n[[reply:ok]]\n<|end|>\n<|assistant|>\n"
    assert from_tokenizer == "TOK<s>:[[reply:ok]]"
    assert from_parameter == "PARAM:[[reply:ok]]"
    log.unlink()
    # --frontend-config openai,chat_template=<file>: instead of the tokenizer's, not of the
    # model config's own parameter
    with serve_openai(root, {"chat_template": str(template)}) as server, client(server) as c:
        for model in ("plain", "tok", "param"):
            assert c.chat.completions.create(model=model, messages=question).choices
    assert logged_prompts(log) == ["FILE:[[reply:ok]]", "FILE:[[reply:ok]]", "PARAM:[[reply:ok]]"]


def test_a_broken_chat_template_is_a_server_error(tmp_path: Path, serve_openai: Any) -> None:
    root = tmp_path / "models"
    root.mkdir()
    copy_mock_llm(root, "broken", parameters={"chat_template": "{% for %}"})
    with serve_openai(root) as server, client(server) as c:
        with pytest.raises(openai.InternalServerError) as caught:
            c.chat.completions.create(model="broken", messages=HELLO)
        assert "chat template" in str(caught.value)


def test_a_config_chat_template_stays_in_the_model_folder(
    tmp_path: Path, serve_openai: Any
) -> None:
    """A model config's chat_template names a file in the model's folder; one outside it
    (absolute, or climbing out) is never read."""
    root = tmp_path / "models"
    root.mkdir()
    secret = tmp_path / "secret.jinja"
    secret.write_text("SECRET")
    log = tmp_path / "requests.jsonl"
    copy_mock_llm(root, "inside", parameters={"chat_template": "t.jinja", "request_log": str(log)})
    (root / "inside" / "t.jinja").write_text("IN:{{ messages[0]['content'] }}")
    for name, path in (("absolute", str(secret)), ("climbing", "../../secret.jinja")):
        copy_mock_llm(root, name, parameters={"chat_template": path})
    with serve_openai(root) as server, client(server) as c:
        c.chat.completions.create(model="inside", messages=HELLO)
        assert logged_prompts(log) == ["IN:" + HELLO[0]["content"]]
        for name in ("absolute", "climbing"):
            with pytest.raises(openai.InternalServerError, match="is not a file in the model"):
                c.chat.completions.create(model=name, messages=HELLO)


STRICT = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('system first') }}{% endif %}"


def test_a_template_refusing_the_conversation_is_a_400(tmp_path: Path, serve_openai: Any) -> None:
    root = tmp_path / "models"
    root.mkdir()
    copy_mock_llm(root, "strict", parameters={"chat_template": STRICT})
    with serve_openai(root) as server, client(server) as c:
        with pytest.raises(openai.BadRequestError) as caught:
            c.chat.completions.create(model="strict", messages=HELLO)
        assert "system first" in str(caught.value)
        assert caught.value.param == "messages"


def test_tokenizer_setting_counts_usage(
    tmp_path: Path, serve_openai: Any, add_test_models: Any
) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    from tritonx.testing import ModelRepositoryBuilder

    folder = tmp_path / "tokenizer"
    folder.mkdir()
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    repo = ModelRepositoryBuilder(tmp_path / "models")
    add_test_models(repo)
    with serve_openai(repo.root, {"tokenizer": str(folder)}) as server, client(server) as c:
        # trtllm_echo returns no token counts: the tokenizer counts "a,b" as a , b
        answer = c.completions.create(model="trtllm_echo", prompt="a,b", max_tokens=500)
        assert answer.usage is not None and answer.usage.prompt_tokens == 3
    with serve_openai(repo.root) as server, client(server) as c:
        answer = c.completions.create(model="trtllm_echo", prompt="a,b", max_tokens=500)
        assert answer.usage is not None and answer.usage.prompt_tokens == 1  # whitespace


def test_files_of_a_model_loaded_with_overrides_are_its_own(
    tmp_path: Path, serve_openai: Any
) -> None:
    """A model loaded through the load API with a config and files (no folder of that name in
    the repository) reads its chat template from the files it was loaded with, and a model
    whose repository folder is overridden reads the override's, not the repository's."""
    import tritonclient.http as httpclient
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    root = tmp_path / "models"
    root.mkdir()
    log = tmp_path / "requests.jsonl"
    source = copy_mock_llm(tmp_path / "source", "source")
    copy_mock_llm(root, "replaced", parameters={"chat_template": "t.jinja"})
    (root / "replaced" / "t.jinja").write_text("REPOSITORY:{{ messages[0]['content'] }}")
    files = {
        "file:1/model.py": (source / "1" / "model.py").read_bytes(),
        "file:t.jinja": b"OVERRIDE:{{ messages[0]['content'] }}",
    }

    def config(name: str) -> str:
        parsed = text_format.Parse(
            (source / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()
        )
        parsed.name = name
        parsed.parameters["chat_template"].string_value = "t.jinja"
        parsed.parameters["request_log"].string_value = str(log)
        return json_format.MessageToJson(parsed, preserving_proto_field_name=True)

    with serve_openai(root, model_control_mode="explicit") as server:
        triton = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        for name in ("loaded", "replaced"):
            triton.load_model(name, config=config(name), files=files)
        with client(server) as c:
            for name in ("loaded", "replaced"):
                c.chat.completions.create(model=name, messages=HELLO)
        triton.close()
    assert logged_prompts(log) == ["OVERRIDE:" + HELLO[0]["content"]] * 2
