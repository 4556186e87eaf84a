"""Reading a model's ``parameters`` values the way Triton's backends read them.

Backends get ``config.pbtxt`` ``parameters { key: ... value: { string_value: ... } }`` as
strings; these helpers turn them into typed values or refuse them with INVALID_ARG naming the
key, so every backend plugin accepts the same spellings.
"""

from __future__ import annotations

from tritonx.errors import invalid_arg

#: Triton's ``ParseBoolValue`` spellings (any case).
TRUE_VALUES = ("1", "true", "on", "yes")
FALSE_VALUES = ("0", "false", "off", "no")


def parse_bool(key: str, value: str) -> bool:
    """Triton's ``ParseBoolValue``: 1/true/on/yes and 0/false/off/no, any case.

    :raises TritonXError: INVALID_ARG "failed to convert '<key>' value '<value>' to boolean".
    """
    v = value.strip().lower()
    if v in TRUE_VALUES:
        return True
    if v in FALSE_VALUES:
        return False
    raise invalid_arg(f"failed to convert '{key}' value '{value}' to boolean")


def parse_int(key: str, value: str) -> int:
    """An integer parameter.

    :raises TritonXError: INVALID_ARG "failed to convert '<key>' value '<value>' to an
        integer".
    """
    try:
        return int(value.strip())
    except ValueError:
        raise invalid_arg(f"failed to convert '{key}' value '{value}' to an integer") from None


__all__ = [
    "FALSE_VALUES",
    "TRUE_VALUES",
    "parse_bool",
    "parse_int",
]
