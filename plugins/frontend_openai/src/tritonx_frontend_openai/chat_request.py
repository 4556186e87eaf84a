"""Reading a chat completion request: the conversation (:func:`read_messages`), the tools
and how they shape the answer (:func:`read_tool_mode`, :class:`ToolMode`), and the OpenAI
chat fields this server accepts only in the form it honours (:func:`check_extras`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

import tritonx_frontend_openai.validation as v
from tritonx_frontend_openai.errors import invalid
from tritonx_frontend_openai.textgen import GENERATION_FIELDS

#: chat fields this server refuses when set (OpenAI features it has no model for)
UNSUPPORTED = (
    "functions",
    "function_call",
    "audio",
    "prediction",
    "reasoning_effort",
    "web_search_options",
    "verbosity",
)
CHAT_FIELDS = frozenset(
    {
        *GENERATION_FIELDS,
        "messages",
        "max_completion_tokens",
        "top_logprobs",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "store",
        "metadata",
        "service_tier",
        "modalities",
        *UNSUPPORTED,
        "prompt_cache_key",
        "safety_identifier",
    }
)

_ROLES = {"system", "developer", "user", "assistant", "tool"}
#: OpenAI's limit on a request's tools
MAX_TOOLS = 128


@dataclass
class ToolMode:
    """How a chat request's tools shape its answer.

    :ivar mode: ``none`` (plain text), ``auto`` (the text parsed for tool calls), ``named``
        (the text is the arguments of the function ``name``) or ``required`` (parsed; the
        first tool's arguments when the parser found no call).
    """

    mode: str = "none"
    name: str | None = None
    tools: list[dict[str, Any]] | None = None


def _text_content(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise v.wrong_type(where, "a string or an array of content parts", value)
    parts = []
    for k, part in enumerate(value):
        if not isinstance(part, dict):
            raise v.wrong_type(f"{where}[{k}]", "an object", part)
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise v.wrong_type(f"{where}[{k}].text", "a string", text)
            parts.append(text)
        elif kind in ("image_url", "input_audio", "file", "refusal"):
            raise v.unsupported(f"{where}[{k}]", f"content parts of type '{kind}' (only text)")
        else:
            raise invalid(
                f"Invalid value for '{where}[{k}].type': expected 'text'.",
                param=f"{where}[{k}].type",
                code="invalid_value",
            )
    return "\n".join(parts)


def read_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The conversation for the chat template: roles checked, content as text (parts
    joined), tool calls' arguments as objects; ``developer`` becomes ``system``."""
    if "messages" not in body or body["messages"] is None:
        raise v.missing("messages")
    raw = body["messages"]
    if not isinstance(raw, list):
        raise v.wrong_type("messages", "an array", raw)
    v.array_length("messages", raw, low=1)
    out = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise v.wrong_type(where, "an object", message)
        role = message.get("role")
        if role is None:
            raise v.missing(f"{where}.role")
        if not isinstance(role, str):
            raise v.wrong_type(f"{where}.role", "a string", role)
        if role not in _ROLES:
            raise invalid(
                f"Invalid value: '{role}'. Supported values are: 'system', 'developer', "
                "'user', 'assistant' and 'tool'.",
                param=f"{where}.role",
                code="invalid_value",
            )
        item: dict[str, Any] = {"role": "system" if role == "developer" else role}
        content = message.get("content")
        calls = message.get("tool_calls") if role == "assistant" else None
        if content is None:
            if not calls:
                raise v.missing(f"{where}.content")
            item["content"] = None
        else:
            item["content"] = _text_content(content, f"{where}.content")
        name = message.get("name")
        if name is not None:
            if not isinstance(name, str):
                raise v.wrong_type(f"{where}.name", "a string", name)
            item["name"] = name
        if calls:
            item["tool_calls"] = _message_tool_calls(calls, f"{where}.tool_calls")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                if call_id is None:
                    raise v.missing(f"{where}.tool_call_id")
                raise v.wrong_type(f"{where}.tool_call_id", "a string", call_id)
            item["tool_call_id"] = call_id
        out.append(item)
    return out


def _message_tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise v.wrong_type(where, "an array", calls)
    out = []
    for k, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            raise v.wrong_type(f"{where}[{k}]", "a function tool call object", call)
        function = call["function"]
        name = function.get("name")
        if not isinstance(name, str):
            raise v.wrong_type(f"{where}[{k}].function.name", "a string", name)
        arguments = function.get("arguments", "{}")
        parsed: Any = arguments
        if isinstance(arguments, str):  # templates expect objects (transformers' convention)
            try:
                parsed = orjson.loads(arguments) if arguments else {}
            except orjson.JSONDecodeError:
                parsed = arguments
        out.append(
            {
                "id": call.get("id"),
                "type": "function",
                "function": {"name": name, "arguments": parsed},
            }
        )
    return out


def read_tool_mode(body: Mapping[str, Any]) -> ToolMode:
    tools = body.get("tools")
    choice_ = body.get("tool_choice")
    v.opt_bool(body, "parallel_tool_calls", True)
    if tools is None:
        if choice_ is not None and choice_ != "none":
            raise invalid(
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
                "are specified.",
                param="tool_choice",
            )
        return ToolMode()
    if not isinstance(tools, list):
        raise v.wrong_type("tools", "an array", tools)
    v.array_length("tools", tools, high=MAX_TOOLS)
    names = []
    for k, tool in enumerate(tools):
        where = f"tools[{k}]"
        if not isinstance(tool, dict):
            raise v.wrong_type(where, "an object", tool)
        if tool.get("type") != "function":
            raise invalid(
                f"Invalid value for '{where}.type': only 'function' tools are supported.",
                param=f"{where}.type",
                code="invalid_value",
            )
        function = tool.get("function")
        if not isinstance(function, dict):
            raise v.missing(f"{where}.function")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise v.missing(f"{where}.function.name")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise v.wrong_type(f"{where}.function.parameters", "an object", parameters)
        names.append(name)
    if not tools:
        return ToolMode()
    if choice_ is None or choice_ == "auto":
        return ToolMode("auto", tools=tools)
    if choice_ == "none":
        return ToolMode("none", tools=tools)
    if choice_ == "required":
        return ToolMode("required", names[0], tools=tools)
    if isinstance(choice_, dict):
        function = choice_.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if choice_.get("type") != "function" or not isinstance(name, str):
            raise invalid(
                "Invalid value for 'tool_choice': expected 'none', 'auto', 'required' or "
                "{'type': 'function', 'function': {'name': ...}}.",
                param="tool_choice",
                code="invalid_value",
            )
        if name not in names:
            raise invalid(
                f"Invalid value for 'tool_choice': tool '{name}' is not in 'tools'.",
                param="tool_choice",
                code="invalid_value",
            )
        return ToolMode("named", name, tools=tools)
    raise invalid(
        f"Invalid value for 'tool_choice': {orjson.dumps(choice_).decode()}.",
        param="tool_choice",
        code="invalid_value",
    )


def check_extras(body: Mapping[str, Any]) -> None:
    """The chat fields that are accepted only in the form this server honours."""
    response_format = v.opt_object(body, "response_format")
    if response_format is not None and response_format.get("type", "text") != "text":
        raise v.unsupported("response_format", "only {'type': 'text'}")
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise v.unsupported("modalities", "only ['text']")
    if v.opt_bool(body, "store"):
        raise v.unsupported("store", "completions are not stored")
    v.opt_object(body, "metadata")
    for name in ("service_tier", "prompt_cache_key", "safety_identifier"):
        v.opt_str(body, name)


__all__ = [
    "CHAT_FIELDS",
    "MAX_TOOLS",
    "UNSUPPORTED",
    "ToolMode",
    "check_extras",
    "read_messages",
    "read_tool_mode",
]
