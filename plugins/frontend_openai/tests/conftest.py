"""Fixtures of the OpenAI frontend's tests: a repository of models following the frontend's
conventions (the bundled mock LLM, and small python models from ``models/``), and servers
started in a thread of their own (``tritonx.testing.ServerThread``) with the installed
``backend_python`` and ``frontend_openai`` plugins, driven by the official ``openai`` client."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")
pytest.importorskip("tritonx_backend_python")

from tritonx import Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, ServerThread, identity, loopback_settings
from tritonx_frontend_openai.examples import copy_mock_llm

MODELS = Path(__file__).parent / "models"

#: a chat template given as a model config parameter: the user's words only
BARE_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"

VLLM_IO = {
    "inputs": [
        ("text_input", "BYTES", [1]),
        ("stream", "BOOL", [1]),
        ("sampling_parameters", "BYTES", [1]),
        ("exclude_input_in_output", "BOOL", [1]),
    ],
    "outputs": [("text_output", "BYTES", [-1])],
}


def optional(config: str, names: tuple[str, ...]) -> str:
    """``config`` with the inputs ``names`` marked optional."""
    for name in names:
        config = config.replace(f'name: "{name}"', f'name: "{name}"\n  optional: true')
    return config


def add_python(repo: ModelRepositoryBuilder, name: str, source: str, **kw: Any) -> Path:
    """A python model whose model.py is models/<source>.py."""
    return repo.add(
        name,
        backend="python",
        versions={1: {"model.py": (MODELS / f"{source}.py").read_text()}},
        **kw,
    )


def write_models(repo: ModelRepositoryBuilder) -> None:
    """The models the API tests use."""
    copy_mock_llm(repo.root)  # vLLM's format, decoupled
    copy_mock_llm(repo.root, "mock_bare", parameters={"chat_template": BARE_TEMPLATE})
    lab = add_python(
        repo, "lab", "lab", extra="model_transaction_policy { decoupled: true }\n", **VLLM_IO
    )
    config = lab / "config.pbtxt"
    config.write_text(
        optional(config.read_text(), ("stream", "sampling_parameters", "exclude_input_in_output"))
    )
    echo = add_python(
        repo,
        "trtllm_echo",
        "trtllm_echo",
        inputs=[
            ("text_input", "BYTES", [-1]),
            ("max_tokens", "INT32", [1]),
            ("stream", "BOOL", [1]),
            ("stop_words", "BYTES", [-1]),
            ("bad_words", "BYTES", [-1]),
            ("temperature", "FP32", [1]),
            ("top_p", "FP32", [1]),
            ("seed", "UINT64", [1]),
        ],
        outputs=[("text_output", "BYTES", [-1])],
    )
    config = echo / "config.pbtxt"
    config.write_text(
        optional(config.read_text(), ("stream", "stop_words", "temperature", "top_p", "seed"))
    )
    add_python(
        repo,
        "toy_embed",
        "toy_embed",
        max_batch_size=2,
        inputs=[("TEXT", "BYTES", [1])],
        outputs=[("EMBEDDING", "FP32", [3])],
    )
    repo.add_identity("plain")  # follows no convention: not served


def plugin_manager(*plugins: str) -> Any:
    """Installed plugins by entry-point name (and the identity test backend)."""
    return make_plugin_manager(autoload=True, only=plugins, extra=[identity])


@contextlib.contextmanager
def serve(
    root: Path,
    openai_config: Mapping[str, str] | None = None,
    plugins: tuple[str, ...] = ("backend_python", "frontend_openai"),
    **overrides: Any,
) -> Iterator[Server]:
    """A started server over ``root`` with the OpenAI frontend on a free loopback port."""
    config = {"port": "0", "address": "127.0.0.1", **(openai_config or {})}
    settings = loopback_settings(root, frontend_config={"openai": config}, **overrides)
    with ServerThread(Server(settings, plugin_manager=plugin_manager(*plugins))) as server:
        yield server


@pytest.fixture(scope="session")
def serve_openai() -> Any:
    """:func:`serve`, for tests that start servers of their own."""
    return serve


@pytest.fixture(scope="session")
def add_test_models() -> Any:
    """:func:`write_models`, for tests that write repositories of their own."""
    return write_models


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = ModelRepositoryBuilder(tmp_path_factory.mktemp("openai") / "models")
    write_models(repo)
    return repo.root


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[Server]:
    """The models of :func:`write_models`, served with the llama3 tool call parser."""
    with serve(repository, {"tool_call_parser": "llama3"}) as srv:
        yield srv
