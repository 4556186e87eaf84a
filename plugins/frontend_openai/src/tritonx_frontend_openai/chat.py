"""Chat templates: OpenAI ``messages`` (and ``tools``) to the prompt text a model completes.

Rendered as Hugging Face ``transformers`` renders ``apply_chat_template``: jinja2's immutable
sandbox, ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, the
``{% generation %}`` tag, ``raise_exception(message)``, ``strftime_now(format)``, and a
``tojson`` filter that keeps non-ASCII text (``ensure_ascii=False``) and takes ``indent``,
``separators`` and ``sort_keys``. The template sees ``messages``, ``tools`` (``None`` when the
request has none), ``add_generation_prompt`` and the special tokens of the model's
``tokenizer_config.json`` (``bos_token``, ``eos_token``, ``unk_token``, ``pad_token``...).

Which template (:meth:`ChatTemplate.resolve`):

1. ``source``, when given (``--frontend-config openai,chat_template=...`` or a model config
   parameter ``chat_template``): the template text itself (it contains ``{{``, ``{%`` or a line
   break), else a file path (relative paths are relative to the model folder);
2. else the model's ``tokenizer_config.json`` ``"chat_template"`` (looked for as
   :func:`tritonx_frontend_openai.tokens.candidate_dirs` says): a string, or the list form
   ``[{"name": ..., "template": ...}]`` of named templates, of which ``"tool_use"`` is used
   when the request has tools and ``"default"`` otherwise (as ``transformers`` chooses); else
   a ``chat_template.jinja`` file there (where newer ``transformers`` saves it);
3. else :data:`DEFAULT_TEMPLATE`, a simple role-tagged format::

       <|system|>
       You are terse.
       <|end|>
       <|user|>
       Hello
       <|end|>
       <|assistant|>

   Each message is ``<|role|>``, a line break, its text and ``<|end|>`` on a line of its own;
   a list of content parts is their ``text`` parts joined; an assistant message's
   ``tool_calls`` follow its text as one line of JSON ``{"name": ..., "arguments": ...}`` each;
   a tool message's ``tool_call_id`` is shown as ``<|tool|> (call_id)``. With tools, a first
   ``<|tools|>`` block lists each tool's ``function`` object as one line of JSON. With
   ``add_generation_prompt`` the prompt ends with ``<|assistant|>`` and a line break.

Before rendering, message fields whose value is ``None`` are dropped and the JSON-text
``arguments`` of assistant ``tool_calls`` are parsed into objects (what tool-use templates
expect, as Triton's OpenAI frontend and ``transformers`` do). A template that fails, or calls
``raise_exception``, raises :class:`ValueError` with the template's message.
"""

from __future__ import annotations

import copy
import json
import pathlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tritonx_frontend_openai.tokens import candidate_dirs

__all__ = ["DEFAULT_TEMPLATE", "SPECIAL_TOKENS", "ChatTemplate"]

#: the built-in template (see the module's documentation for the format)
DEFAULT_TEMPLATE = """\
{%- if tools %}
<|tools|>
{% for tool in tools %}
{{ (tool.function if tool.function is defined else tool) | tojson }}
{% endfor %}
<|end|>
{% endif %}
{%- for message in messages %}
<|{{ message.role }}|>{% if message.tool_call_id is defined %} ({{ message.tool_call_id }}){% endif %}

{% if message.content is string %}
{{ message.content }}
{% elif message.content is defined and message.content is iterable %}
{% for part in message.content %}{% if part.text is defined %}{{ part.text }}{% endif %}{% endfor %}

{% endif %}
{% for call in message.tool_calls | default([]) %}
{{ {"name": call.function.name, "arguments": call.function.arguments} | tojson }}
{% endfor %}
<|end|>
{% endfor %}
{%- if add_generation_prompt %}
<|assistant|>
{% endif %}
"""

#: the tokenizer_config.json keys passed to templates (transformers' special tokens)
SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
    "additional_special_tokens",
)


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (transformers marks assistant text with
    it): renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


class _TemplateRaised(Exception):
    """``raise_exception(message)`` in a template."""


def _raise_exception(message: Any) -> None:
    raise _TemplateRaised(str(message))


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationTag, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _environment()


def _compile(text: str, origin: str) -> jinja2.Template:
    try:
        return _ENV.from_string(text)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(
            f"chat template {origin} is not a valid jinja2 template: {exc.message} "
            f"(line {exc.lineno})"
        ) from exc


def _plain(value: Any) -> Any:
    """``value`` as plain JSON data (what a template may see)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def _prepare_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of ``messages`` without ``None`` fields, tool call arguments as objects."""
    if not isinstance(messages, list):
        raise ValueError("messages must be a list of objects")
    prepared: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise ValueError(f"each message must be an object, got {type(message).__name__}")
        plain = {k: v for k, v in _plain(message).items() if v is not None}
        calls = plain.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                    try:
                        function["arguments"] = json.loads(function["arguments"])
                    except ValueError:
                        pass  # not JSON: the template gets the text
        prepared.append(plain)
    return prepared


def _token_text(value: Any) -> Any:
    """A special token of tokenizer_config.json: a string or ``{"content": ...}``."""
    if isinstance(value, Mapping):
        return value.get("content")
    if isinstance(value, list):
        return [_token_text(v) for v in value]
    return value


def _read_json(path: pathlib.Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


def looks_like_template(source: str) -> bool:
    """Whether ``source`` is template text (else a file path)."""
    return "{{" in source or "{%" in source or "\n" in source


class ChatTemplate:
    """A compiled chat template (one, or several named ones) and the special tokens it sees.

    ``origin`` says where it came from (a path, ``"text"``, ``"default"``...)."""

    def __init__(
        self,
        templates: Mapping[str, str] | str,
        *,
        special_tokens: Mapping[str, Any] | None = None,
        origin: str = "text",
    ) -> None:
        named = {"default": templates} if isinstance(templates, str) else dict(templates)
        if not named:
            raise ValueError(f"chat template {origin} is empty")
        self.origin = origin
        self.texts: dict[str, str] = named
        self.special_tokens: dict[str, Any] = dict(special_tokens or {})
        self._compiled = {
            name: _compile(text, origin if name == "default" else f"{origin} ({name!r})")
            for name, text in named.items()
        }

    # ------------------------------------------------------------------ resolve

    @classmethod
    def resolve(cls, *, source: str | None, model_dir: pathlib.Path | None) -> ChatTemplate:
        """The template of a model (see the module's documentation for the order);
        :class:`ValueError` when ``source`` names no readable file, a tokenizer_config.json is
        broken, or the template is not valid jinja2."""
        folders = candidate_dirs(model_dir)
        config_path = next(
            (
                f / "tokenizer_config.json"
                for f in folders
                if (f / "tokenizer_config.json").is_file()
            ),
            None,
        )
        config = _read_json(config_path) if config_path is not None else {}
        special = {
            key: _token_text(config[key]) for key in SPECIAL_TOKENS if config.get(key) is not None
        }
        if source is not None:
            if not isinstance(source, str) or not source.strip():
                raise ValueError("chat_template is empty")
            if looks_like_template(source):
                return cls(source, special_tokens=special, origin="text")
            path = pathlib.Path(source).expanduser()
            if not path.is_absolute() and model_dir is not None:
                path = pathlib.Path(model_dir) / path
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"cannot read the chat template file {path}: {exc}") from exc
            return cls(text, special_tokens=special, origin=str(path))
        if config_path is not None and config.get("chat_template") is not None:
            return cls(
                _named_templates(config["chat_template"], config_path),
                special_tokens=special,
                origin=str(config_path),
            )
        for folder in folders:
            path = folder / "chat_template.jinja"
            if path.is_file():
                try:
                    text = path.read_text(encoding="utf-8")
                except OSError as exc:
                    raise ValueError(f"cannot read the chat template file {path}: {exc}") from exc
                return cls(text, special_tokens=special, origin=str(path))
        return cls(DEFAULT_TEMPLATE, special_tokens=special, origin="default")

    # ------------------------------------------------------------------ render

    def template_name(self, tools: list[dict[str, Any]] | None) -> str:
        """Which named template renders a request (``"tool_use"`` with tools when there is
        one, else ``"default"``)."""
        if tools is not None and "tool_use" in self._compiled:
            return "tool_use"
        if "default" in self._compiled:
            return "default"
        raise ValueError(
            f"chat template {self.origin} has several named templates and none is named "
            f"'default' (names: {sorted(self._compiled)})"
        )

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """The prompt for ``messages`` (OpenAI message objects) and ``tools`` (OpenAI tool
        objects, ``None`` for none); :class:`ValueError` with the template's message when it
        fails."""
        template = self._compiled[self.template_name(tools)]
        context = {
            **copy.deepcopy(self.special_tokens),
            "messages": _prepare_messages(messages),
            "tools": _plain(tools) if tools is not None else None,
            "add_generation_prompt": bool(add_generation_prompt),
        }
        try:
            return template.render(**context)
        except _TemplateRaised as exc:
            raise ValueError(f"chat template error: {exc}") from exc
        except jinja2.TemplateError as exc:
            raise ValueError(f"chat template error: {exc.message or exc}") from exc
        except Exception as exc:  # a template is code: anything can go wrong in it
            raise ValueError(f"chat template error: {type(exc).__name__}: {exc}") from exc

    def __repr__(self) -> str:
        return f"ChatTemplate(origin={self.origin!r}, names={sorted(self._compiled)})"


def _named_templates(value: Any, path: pathlib.Path) -> dict[str, str] | str:
    """tokenizer_config.json's ``chat_template``: a string or a list of named templates."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named: dict[str, str] = {}
        for entry in value:
            if (
                not isinstance(entry, Mapping)
                or not isinstance(entry.get("name"), str)
                or not isinstance(entry.get("template"), str)
            ):
                raise ValueError(
                    f"{path}: each entry of the chat_template list needs a 'name' and a "
                    "'template' string"
                )
            named[entry["name"]] = entry["template"]
        return named
    if isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values()):
        return {str(k): v for k, v in value.items()}
    raise ValueError(f"{path}: chat_template must be a string or a list of named templates")
