"""The frontend's own settings: ``--frontend-config openai,<key>=<value>``, read once at
start; a bad value stops the server's start (:class:`tritonx.PluginError`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tritonx import PluginError
from tritonx_frontend_openai.chat import looks_like_template

#: The environment variable holding API keys (comma or whitespace separated).
API_KEYS_ENV = "TRITONX_OPENAI_API_KEYS"

#: Triton's default for ``--http-max-input-size`` of its OpenAI frontend (64 MiB).
DEFAULT_MAX_REQUEST_SIZE = 1 << 26

#: The API groups of Triton's ``--openai-restricted-api`` this frontend serves, and the
#: paths in each (prefixes below the base path; a request to one is checked whatever its
#: method).
API_GROUPS: Mapping[str, tuple[str, ...]] = {
    "inference": ("/chat/completions", "/completions", "/embeddings"),
    "model-repository": ("/models",),
}

#: ``--frontend-config openai,<key>=<value>`` keys, with their help.
CONFIG_KEYS: Mapping[str, str] = {
    "models": (
        "which models the API serves, as a comma-separated list of <id>:<model> (the OpenAI "
        "model id clients send, the tritonx model behind it) or <model> (served under its own "
        "name); default: every ready model that follows a convention, under its own name"
    ),
    "request_format": (
        "how generation requests are written for the models: auto (default: vllm for models "
        "with a sampling_parameters input or backend vllm, tensorrtllm otherwise), vllm or "
        "tensorrtllm"
    ),
    "default_max_tokens": "max_tokens of a request that sets none (default 16, as Triton)",
    "chat_template": (
        "the chat template (a Jinja file path, or the template text) for models whose config "
        "has no chat_template parameter; default: the model folder's tokenizer_config.json, "
        "else a built-in template"
    ),
    "tokenizer": (
        "a folder with tokenizer.json / tokenizer_config.json used for every model (token "
        "counts, chat template), instead of each model's own folder"
    ),
    "tool_call_parser": (
        "the parser of tool calls in the generated text (llama3, mistral...) for models whose "
        "config has no tool_call_parser parameter; without one, requests with tools are refused"
    ),
    "api_keys_file": (
        f"a file of API keys (one a line, # comments); with it, or keys in ${API_KEYS_ENV}, "
        "requests need 'Authorization: Bearer <key>'"
    ),
    "auth_apis": (
        "the API groups the API keys protect: comma-separated inference, model-repository "
        "(default: both)"
    ),
    "restricted_api": (
        "Triton's --openai-restricted-api: <api>[,<api>...]:<header>=<value>, groups separated "
        "by ';' (api: inference, model-repository); requests to a restricted API need that "
        "header with that value"
    ),
    "max_request_size": (
        f"largest request body in bytes (default {DEFAULT_MAX_REQUEST_SIZE}, Triton's "
        "--http-max-input-size); larger ones get 413"
    ),
}

_MODEL_ENTRY = re.compile(r"^(?:(?P<id>[^:\s]+):)?(?P<model>[^:\s]+)$")


@dataclass(frozen=True)
class Options:
    """The parsed settings (see :data:`CONFIG_KEYS`)."""

    #: OpenAI model id -> tritonx model; None: every model that follows a convention
    models: Mapping[str, str] | None = None
    request_format: str = "auto"
    default_max_tokens: int = 16
    chat_template: str | None = None
    tokenizer: Path | None = None
    tool_call_parser: str | None = None
    api_keys: frozenset[str] = frozenset()
    auth_apis: frozenset[str] = frozenset(API_GROUPS)
    #: API group -> (header name, lower-case; value)
    restricted: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    max_request_size: int = DEFAULT_MAX_REQUEST_SIZE

    @classmethod
    def parse(cls, config: Mapping[str, str], environ: Mapping[str, str] | None = None) -> Options:
        """Read ``config`` (the frontend's ``--frontend-config`` keys) and the API keys of
        the environment; raise :class:`PluginError` naming the key at fault."""
        env = os.environ if environ is None else environ
        models = _models(config["models"]) if "models" in config else None
        request_format = config.get("request_format", "auto").strip().lower()
        if request_format not in ("auto", "vllm", "tensorrtllm"):
            raise _bad("request_format", "must be auto, vllm or tensorrtllm", request_format)
        default_max_tokens = _positive("default_max_tokens", config.get("default_max_tokens"), 16)
        max_request_size = _positive(
            "max_request_size", config.get("max_request_size"), DEFAULT_MAX_REQUEST_SIZE
        )
        tokenizer = None
        if config.get("tokenizer"):
            tokenizer = Path(config["tokenizer"]).expanduser()
            if not tokenizer.is_dir():
                raise _bad("tokenizer", "is not a folder", config["tokenizer"])
        chat_template = config.get("chat_template") or None
        if chat_template is not None and not looks_like_template(chat_template):
            path = Path(chat_template).expanduser().resolve()  # (relative: to the working dir)
            if not path.is_file():
                raise _bad("chat_template", "is neither a template nor a file", chat_template)
            chat_template = str(path)
        parser = config.get("tool_call_parser") or None
        if parser is not None:
            check_tool_parser(parser, "--frontend-config openai,tool_call_parser")
        keys = set(_split_keys(env.get(API_KEYS_ENV, "")))
        if config.get("api_keys_file"):
            keys |= _read_keys(config["api_keys_file"])
        auth_apis = frozenset(API_GROUPS)
        if "auth_apis" in config:
            auth_apis = frozenset(_groups("auth_apis", config["auth_apis"]))
        restricted = _restricted(config["restricted_api"]) if "restricted_api" in config else {}
        return cls(
            models=models,
            request_format=request_format,
            default_max_tokens=default_max_tokens,
            chat_template=chat_template,
            tokenizer=tokenizer,
            tool_call_parser=parser,
            api_keys=frozenset(keys),
            auth_apis=auth_apis,
            restricted=restricted,
            max_request_size=max_request_size,
        )


def check_tool_parser(name: str, where: str) -> None:
    """Raise :class:`PluginError` unless ``name`` is a parser of :mod:`.tools`."""
    from tritonx_frontend_openai.tools import TOOL_PARSERS

    if name not in TOOL_PARSERS:
        raise PluginError(
            f"{where}: unknown tool call parser '{name}' (available: "
            f"{', '.join(sorted(TOOL_PARSERS))})"
        )


def _bad(key: str, what: str, value: str) -> PluginError:
    return PluginError(f"--frontend-config openai,{key}: {what}, got '{value}'")


def _positive(key: str, text: str | None, default: int) -> int:
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise _bad(key, "must be a positive integer", text)
    return value


def _models(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        match = _MODEL_ENTRY.match(item)
        if match is None:
            raise _bad("models", "each entry must be <id>:<model> or <model>", item)
        model_id = match.group("id") or match.group("model")
        if model_id in out:
            raise _bad("models", "a model id is given twice", model_id)
        out[model_id] = match.group("model")
    if not out:
        raise _bad("models", "names no model", text)
    return out


def _split_keys(text: str) -> list[str]:
    return [k for k in re.split(r"[\s,]+", text) if k]


def _read_keys(path_text: str) -> set[str]:
    path = Path(path_text).expanduser()
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise _bad("api_keys_file", f"cannot be read ({exc.strerror})", path_text) from None
    keys = {line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")}
    if not keys:
        raise _bad("api_keys_file", "holds no key", path_text)
    return keys


def _groups(key: str, text: str) -> list[str]:
    groups = [g.strip() for g in text.split(",") if g.strip()]
    for group in groups:
        if group not in API_GROUPS:
            raise _bad(key, f"unknown API '{group}' (APIs: {', '.join(API_GROUPS)})", text)
    return groups


def _restricted(text: str) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        apis, sep, header = part.partition(":")
        name, eq, value = header.partition("=")
        if not sep or not eq or not name.strip() or not value:
            raise _bad(
                "restricted_api", "each group must be <api>[,<api>...]:<header>=<value>", part
            )
        for group in _groups("restricted_api", apis):
            if group in out:
                raise _bad(
                    "restricted_api", f"API '{group}' can not be in more than one group", text
                )
            out[group] = (name.strip().lower(), value)
    return out


__all__ = ["API_GROUPS", "API_KEYS_ENV", "CONFIG_KEYS", "Options", "check_tool_parser"]
