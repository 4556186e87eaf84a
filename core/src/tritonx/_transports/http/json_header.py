"""The JSON header of an ``/infer`` body (or a control body), parsed with orjson and Triton's
errors (:func:`parse_json_header`).

JSON nested deeper than orjson parses (1024 levels) is read as Triton reads it (rapidjson,
no depth limit) with everything below :data:`KEPT_JSON_DEPTH` levels left out: deep ``data``
still fails Triton's nesting check, other deep values fail their type checks
(:func:`_shallow_json`), as long as it holds at most :data:`MAX_SHALLOW_BRACKETS` brackets
(the rescan is Python, CPU per bracket); more is refused.

A worker thread (where the route decodes a heavy body) still holds the GIL for the whole of one
C call, so a JSON header over :data:`PIECEWISE_JSON_BYTES` is parsed in pieces
(:func:`_loads_piecewise`: each long flat ``data`` array a megabyte at a time): the event
loop waits for one piece at most, not for the whole body (0.4 s for 62 MB of numbers).
"""

from __future__ import annotations

import os
import re
from typing import Any

import orjson

from tritonx._transports.http.binary import Body
from tritonx._transports.http.errors import internal
from tritonx._transports.http.json_tensor import MAX_JSON_DEPTH
from tritonx.errors import invalid_arg

#: Nesting kept when a body is too deep for orjson (above Triton's data limit of 100).
KEPT_JSON_DEPTH = 2 * MAX_JSON_DEPTH

#: JSON headers larger than this are parsed piecewise (:func:`_loads_piecewise`), with their
#: flat ``data`` arrays longer than :data:`JSON_PIECE_BYTES` parsed a piece of that size at
#: a time.
PIECEWISE_JSON_BYTES = 4 << 20
JSON_PIECE_BYTES = 1 << 20

#: JSON too deep for orjson is rescanned in Python (:func:`_shallow_json`, ~0.6 us per
#: bracket) only when it holds at most this many brackets; a body with more is refused (a
#: client must not buy seconds of CPU with a few kilobytes of gzip)
MAX_SHALLOW_BRACKETS = 1 << 16

_DEPTH_ERROR = "depth limit exceeded"
_JSON_SPACE = b" \t\r\n"
#: A JSON string (skipped whole) or a bracket.
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)


def parse_json_header(body: Body, header_length: int, max_input_size: int) -> Any:
    """Parse the first ``header_length`` bytes of ``body`` as JSON, with Triton's errors."""
    if header_length > max_input_size:
        raise invalid_arg(
            f"request JSON size of {header_length} bytes exceeds the maximum allowed input "
            f"size of {max_input_size} bytes. Use --http-max-input-size to increase the limit."
        )
    if header_length > len(body):
        raise invalid_arg(
            f"unexpected size for request JSON, expecting {header_length - len(body)} more bytes"
        )
    view: Body = body
    if header_length != len(body) or isinstance(body, memoryview):
        view = memoryview(body)[:header_length]
    if header_length > PIECEWISE_JSON_BYTES:
        doc = _loads_piecewise(bytes(view))
        if doc is not None:
            return doc
    try:
        return orjson.loads(view)
    except orjson.JSONDecodeError as exc:
        message = str(exc)
    if message.startswith(_DEPTH_ERROR):
        text = bytes(view)
        brackets = text.count(b"[") + text.count(b"{")  # (C speed: bounds the rescan below)
        if brackets > MAX_SHALLOW_BRACKETS:
            raise internal(
                "failed to parse the request JSON buffer: nested deeper than 1024 levels, "
                f"with {brackets} brackets (at most {MAX_SHALLOW_BRACKETS} are read past "
                "that depth)"
            )
        try:
            return orjson.loads(_shallow_json(text))
        except orjson.JSONDecodeError as exc:
            message = str(exc)
    raise internal(f"failed to parse the request JSON buffer: {message}")


def _loads_piecewise(text: bytes) -> Any:
    """``orjson.loads(text)`` with each flat ``"data"`` array (numbers, no nesting) longer
    than :data:`JSON_PIECE_BYTES` parsed separately, that many bytes at a time (split at
    commas), so that no single parse holds the GIL for long.

    Returns None when there is no such array, or when anything does not parse this way: the
    caller then parses the whole text (and reports Triton's error for it).
    """
    size = len(text)
    spans: list[tuple[int, int]] = []
    pos = 0
    while (key := text.find(b'"data"', pos)) >= 0:
        pos = i = key + 6
        while i < size and text[i] in _JSON_SPACE:
            i += 1
        if i >= size or text[i] != 0x3A:  # :
            continue
        i += 1
        while i < size and text[i] in _JSON_SPACE:
            i += 1
        if i >= size or text[i] != 0x5B:  # [
            continue
        end = text.find(b"]", i)
        if end < 0:
            return None
        if end - i > JSON_PIECE_BYTES and all(text.find(c, i, end) < 0 for c in b'"{'):
            if text.find(b"[", i + 1, end) < 0:
                spans.append((i, end))
                pos = end + 1
    if not spans:
        return None
    token = os.urandom(8).hex()
    arrays: dict[str, list[Any]] = {}
    parts: list[bytes] = []
    last = 0
    try:
        for number, (start, end) in enumerate(spans):
            tail = end - 1
            while text[tail] in _JSON_SPACE:
                tail -= 1
            if text[tail] == 0x2C:  # a trailing comma: not JSON
                return None
            placeholder = f"\x00tritonx-data:{token}:{number}"
            parts.append(text[last:start])
            parts.append(orjson.dumps(placeholder))
            last = end + 1
            values: list[Any] = []
            piece = start + 1
            while piece < end:
                stop = min(end, piece + JSON_PIECE_BYTES)
                if stop < end:
                    comma = text.find(b",", stop, end)
                    stop = end if comma < 0 else comma
                values.extend(orjson.loads(b"[" + text[piece:stop] + b"]"))
                piece = stop + 1
            arrays[placeholder] = values
        parts.append(text[last:])
        doc = orjson.loads(b"".join(parts))
    except orjson.JSONDecodeError:
        return None
    _put_back(doc, arrays)
    return None if arrays else doc


def _put_back(node: Any, arrays: dict[str, list[Any]]) -> None:
    """Replace the placeholders of :func:`_loads_piecewise` under ``"data"`` keys."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "data" and type(value) is str and value in arrays:
                node[key] = arrays.pop(value)
            elif isinstance(value, (dict, list)):
                _put_back(value, arrays)
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, (dict, list)):
                _put_back(item, arrays)


def _shallow_json(text: bytes, keep: int = KEPT_JSON_DEPTH) -> bytes:
    """``text`` with the contents of every array/object nested deeper than ``keep`` levels
    removed (``[...]`` → ``[]``, ``{...}`` → ``{}``); strings are skipped whole."""
    parts: list[bytes] = []
    depth = 0
    last = 0  # text[last:] is still to be copied
    cut = -1  # where the removed contents start
    for match in _JSON_TOKEN.finditer(text):
        start = match.start()
        char = text[start]
        if char == 0x22:  # a string
            continue
        if char in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth == keep + 1:
                cut = start + 1
        else:
            if depth == keep + 1 and cut >= 0:
                parts.append(text[last:cut])
                last, cut = start, -1
            depth -= 1
    parts.append(text[last:] if cut < 0 else text[last:cut])
    return b"".join(parts)
