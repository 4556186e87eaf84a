from __future__ import annotations

import re

import pytest

from tritonx.errors import Code, TritonXError
from tritonx.wire import dims_str, parse_version, request_prefix


def test_parse_version() -> None:
    assert parse_version("") is None and parse_version(None) is None
    assert parse_version("0") == 0 and parse_version("12") == 12


@pytest.mark.parametrize("text", ["-1", "1_0", " 1", "+1", "1.0", "one", "\u0661"])
def test_parse_version_refuses_anything_but_digits(text: str) -> None:
    with pytest.raises(
        TritonXError, match=re.escape(f"failed to parse model version '{text}'")
    ) as err:
        parse_version(text)
    assert err.value.code is Code.INVALID_ARG


def test_wire_strings() -> None:
    assert dims_str([-1, 16]) == "[-1,16]"
    assert request_prefix("") == "[request id: <id_unknown>] "
    assert request_prefix("7") == "[request id: 7] "
