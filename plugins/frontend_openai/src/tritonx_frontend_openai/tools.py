"""Tool calls in a model's output text, by named parser (``--frontend-config
openai,tool_call_parser=...``), as Triton's OpenAI frontend (and vLLM) parse them.

``llama3``
    One or more JSON objects ``{"name": ..., "parameters": {...}}`` (or ``"arguments"``),
    optionally after ``<|python_tag|>``, separated by ``;`` (Llama 3.1/3.2 JSON tool calling)::

        <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": ...}

``mistral``
    ``[TOOL_CALLS]`` followed by a JSON list of ``{"name": ..., "arguments": {...}}`` (a single
    object is accepted too); text before ``[TOOL_CALLS]`` is the message's content. Output that
    starts with ``[`` without the token is tried as such a list (TensorRT-LLM drops the token).
    When the text after the token is not JSON as a whole, the first ``[{...}]`` in it is used,
    as Triton's parser does.

Leading whitespace is ignored. Output that is not a tool call, or a tool call whose JSON is
malformed or lacks a ``name``, is returned unchanged as ``content`` with no tool calls (as
Triton's parsers do). A parsed call's ``arguments`` is JSON text (non-ASCII kept), its ``id``
OpenAI's form ``call_<24 letters and digits>`` for ``llama3`` and 9 letters and digits for
``mistral`` (Mistral's chat templates reject other ids when the call is sent back).

:func:`content_prefix_length` says how much of the output streamed so far is content for sure,
so that a streaming frontend forwards plain text as it comes and holds back only what may
become a tool call (then parses the whole text at the end).
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "TOOL_PARSERS",
    "ParsedOutput",
    "ToolCall",
    "content_prefix_length",
    "parse_llama3",
    "parse_mistral",
]

_ALPHANUMERIC = string.ascii_letters + string.digits

LLAMA3_TOKEN = "<|python_tag|>"
MISTRAL_TOKEN = "[TOOL_CALLS]"


def _random_id(length: int) -> str:
    return "".join(secrets.choice(_ALPHANUMERIC) for _ in range(length))


def openai_call_id() -> str:
    """An id in OpenAI's form: ``call_`` and 24 letters and digits."""
    return "call_" + _random_id(24)


def mistral_call_id() -> str:
    """An id as Mistral's templates require: 9 letters and digits."""
    return _random_id(9)


@dataclass
class ToolCall:
    """One function call: ``arguments`` is JSON text, as OpenAI's API returns it."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        """The ``tool_calls`` entry of an OpenAI chat completion message."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class ParsedOutput:
    """A model's output split into text and tool calls (``content`` is ``None`` when the
    output is tool calls only)."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)


class _NotAToolCall(ValueError):
    pass


def _call(raw: Any, make_id: Callable[[], str]) -> ToolCall:
    """A :class:`ToolCall` from a decoded ``{"name", "arguments"|"parameters"}`` object."""
    if not isinstance(raw, dict):
        raise _NotAToolCall("a tool call is not a JSON object")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise _NotAToolCall("a tool call has no name")
    if "arguments" in raw:
        arguments = raw["arguments"]
    else:
        arguments = raw.get("parameters", {})
    if isinstance(arguments, str):
        text = arguments  # already JSON text (some models quote their arguments)
    else:
        text = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(id=make_id(), name=name, arguments=text)


def parse_llama3(text: str) -> ParsedOutput:
    """Llama 3 JSON tool calls (see the module's documentation)."""
    body = text.lstrip()
    if body.startswith(LLAMA3_TOKEN):
        body = body[len(LLAMA3_TOKEN) :].lstrip()
    elif not body.startswith("{"):
        return ParsedOutput(content=text)
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    position = 0
    try:
        while True:
            raw, end = decoder.raw_decode(body, position)
            calls.append(_call(raw, openai_call_id))
            position = end
            # between calls: ';' and whitespace; after the last one: whitespace only
            rest = body[position:]
            stripped = rest.lstrip()
            if not stripped:
                break
            if not stripped.startswith(";"):
                raise _NotAToolCall("text after a tool call")
            position = len(body) - len(stripped) + 1
            while position < len(body) and body[position].isspace():
                position += 1
            if position == len(body):
                break  # a trailing ';'
    except (ValueError, _NotAToolCall):
        return ParsedOutput(content=text)
    return ParsedOutput(content=None, tool_calls=calls)


_MISTRAL_LIST = re.compile(r"\[\s*\{.*\}\s*\]", re.DOTALL)


def parse_mistral(text: str) -> ParsedOutput:
    """Mistral ``[TOOL_CALLS]`` tool calls (see the module's documentation)."""
    if MISTRAL_TOKEN in text:
        before, _, after = text.partition(MISTRAL_TOKEN)
        content: str | None = before.strip() or None
        # later [TOOL_CALLS] tokens (a model calling again) are separators, as in Triton's
        body = after.replace(MISTRAL_TOKEN, "").strip()
    elif text.lstrip().startswith("["):
        content = None
        body = text.strip()
    else:
        return ParsedOutput(content=text)
    try:
        try:
            raw = json.loads(body)
        except ValueError:
            match = _MISTRAL_LIST.search(body)
            if match is None:
                raise
            raw = json.loads(match.group(0))
        items = raw if isinstance(raw, list) else [raw]
        if not items:
            raise _NotAToolCall("an empty list of tool calls")
        calls = [_call(item, mistral_call_id) for item in items]
    except (ValueError, _NotAToolCall):
        return ParsedOutput(content=text)
    return ParsedOutput(content=content, tool_calls=calls)


#: the tool call parsers by name
TOOL_PARSERS: Mapping[str, Callable[[str], ParsedOutput]] = {
    "llama3": parse_llama3,
    "mistral": parse_mistral,
}


def content_prefix_length(parser: str, text: str) -> int:
    """How many leading characters of ``text``, the output streamed so far, are message
    content whatever the model generates next: a streaming frontend may send those as content
    and hold back the rest until the output ends (then parse the whole text).

    ``llama3``: 0 while the output (leading whitespace aside) is empty or may be a tool call
    (starts with ``{`` or ``<|python_tag|>``, or a start of that token), else all of it.
    ``mistral``: 0 while it is empty or starts with ``[``; else the text before
    ``[TOOL_CALLS]``, or before what may be the start of that token at its end."""
    body = text.lstrip()
    if parser == "llama3":
        if not body or body.startswith(("{", LLAMA3_TOKEN)) or LLAMA3_TOKEN.startswith(body):
            return 0
        return len(text)
    if parser == "mistral":
        if not body or body.startswith("["):
            return 0
        found = text.find(MISTRAL_TOKEN)
        if found >= 0:
            return found
        for n in range(len(MISTRAL_TOKEN) - 1, 0, -1):
            if text.endswith(MISTRAL_TOKEN[:n]):
                return len(text) - n
        return len(text)
    raise KeyError(f"unknown tool call parser {parser!r} (known: {sorted(TOOL_PARSERS)})")
