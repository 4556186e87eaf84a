"""Reading a request body as OpenAI does: every field checked for its type and range, with
OpenAI's messages, ``param`` and ``code`` (a 400 ``invalid_request_error`` each)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from tritonx_frontend_openai.errors import invalid

#: OpenAI's answer to a body that is not JSON.
NOT_JSON = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
    "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was "
    "sent was not valid JSON.)"
)

#: int64, OpenAI's range for ``seed``
INT64 = (-(1 << 63), (1 << 63) - 1)
#: int32: the largest ``max_tokens`` (TensorRT-LLM's max_tokens is INT32)
INT32_MAX = (1 << 31) - 1

_TYPE_NAMES = {
    bool: "a boolean",
    int: "an integer",
    float: "a decimal",
    str: "a string",
    list: "an array",
    dict: "an object",
    type(None): "null",
}


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of a request body."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise invalid(NOT_JSON) from None
    if not isinstance(body, dict):
        raise invalid(
            f"Invalid type for request body: expected an object, but got {kind(body)} instead.",
            code="invalid_type",
        )
    return body


def kind(value: Any) -> str:
    """How OpenAI names a JSON value's type in its messages."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def check_fields(body: Mapping[str, Any], known: Iterable[str]) -> None:
    """Refuse a field the endpoint does not know (OpenAI's ``unknown_parameter``)."""
    allowed = set(known)
    for name in body:
        if name not in allowed:
            raise invalid(
                f"Unrecognized request argument supplied: {name}",
                param=name,
                code="unknown_parameter",
            )


def unsupported(param: str, why: str = "") -> Exception:
    """A field OpenAI knows that this server does not implement."""
    return invalid(
        f"'{param}' is not supported by this server{': ' + why if why else ''}.",
        param=param,
        code="unsupported_parameter",
    )


def wrong_type(param: str, expected: str, value: Any) -> Exception:
    return invalid(
        f"Invalid type for '{param}': expected {expected}, but got {kind(value)} instead.",
        param=param,
        code="invalid_type",
    )


def missing(param: str) -> Exception:
    return invalid(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def required_str(body: Mapping[str, Any], name: str, *, nonempty: bool = True) -> str:
    if name not in body or body[name] is None:
        raise missing(name)
    value = body[name]
    if not isinstance(value, str):
        raise wrong_type(name, "a string", value)
    if nonempty and not value:
        raise invalid(
            f"Invalid '{name}': empty string. Expected a string with minimum length 1, but got "
            "an empty string instead.",
            param=name,
            code="empty_string",
        )
    return value


def opt_str(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise wrong_type(name, "a string", value)
    return value


def opt_bool(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise wrong_type(name, "a boolean", value)
    return value


def opt_int(
    body: Mapping[str, Any], name: str, low: int | None = None, high: int | None = None
) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise wrong_type(name, "an integer", value)
    _in_range(name, value, value, low, high, "integer")
    return value


def opt_float(
    body: Mapping[str, Any], name: str, low: float | None = None, high: float | None = None
) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise wrong_type(name, "a decimal", value)
    number = float(value)
    _in_range(name, number, value, low, high, "decimal")
    return number


def _in_range(
    name: str, number: float, shown: Any, low: float | None, high: float | None, word: str
) -> None:
    """OpenAI's error for a number outside ``[low, high]`` (``word``: integer / decimal)."""
    if low is not None and number < low:
        raise invalid(
            f"Invalid '{name}': {word} below minimum value. Expected a value >= {low}, but got "
            f"{shown} instead.",
            param=name,
            code=f"{word}_below_min_value",
        )
    if high is not None and number > high:
        raise invalid(
            f"Invalid '{name}': {word} above maximum value. Expected a value <= {high}, but got "
            f"{shown} instead.",
            param=name,
            code=f"{word}_above_max_value",
        )


def array_length(name: str, items: list[Any], low: int = 0, high: int | None = None) -> None:
    """OpenAI's errors for an array shorter than ``low`` (only 1 is used: "empty array") or
    longer than ``high``."""
    if low and not items:
        raise invalid(
            f"Invalid '{name}': empty array. Expected an array with minimum length 1, but got "
            "an empty array instead.",
            param=name,
            code="empty_array",
        )
    if high is not None and len(items) > high:
        raise invalid(
            f"Invalid '{name}': array too long. Expected an array with maximum length {high}, "
            f"but got an array with length {len(items)} instead.",
            param=name,
            code="array_above_max_length",
        )


def opt_object(body: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    value = body.get(name)
    if value is not None and not isinstance(value, dict):
        raise wrong_type(name, "an object", value)
    return value


def stop_sequences(body: Mapping[str, Any], limit: int = 4) -> tuple[str, ...]:
    """``stop``: a string or up to ``limit`` strings (OpenAI's limit is 4)."""
    value = body.get("stop")
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise wrong_type("stop", "a string or an array of strings", value)
    array_length("stop", items, high=limit)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise wrong_type(f"stop[{i}]", "a string", item)
    return tuple(s for s in items if s)


def stream_options(body: Mapping[str, Any], stream: bool) -> bool:
    """Whether the stream ends with a usage chunk (``stream_options.include_usage``)."""
    options = opt_object(body, "stream_options")
    if options is None:
        return False
    if not stream:
        raise invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
        )
    for key in options:
        if key not in ("include_usage", "include_obfuscation"):
            raise invalid(
                f"Unrecognized request argument supplied: stream_options.{key}",
                param=f"stream_options.{key}",
                code="unknown_parameter",
            )
    return opt_bool(options, "include_usage")


__all__ = [
    "INT32_MAX",
    "INT64",
    "NOT_JSON",
    "check_fields",
    "kind",
    "missing",
    "opt_bool",
    "opt_float",
    "opt_int",
    "opt_object",
    "opt_str",
    "parse_body",
    "required_str",
    "stop_sequences",
    "stream_options",
    "unsupported",
    "wrong_type",
]
