"""``tritonx._transports.http.framing.parse_head``: what the listener frames itself, and what it leaves to
aiohttp's parser (None) because another parser could frame it differently."""

from __future__ import annotations

import pytest

from tritonx._transports.http.framing import parse_head

BASE = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 12"


def test_a_plain_head() -> None:
    head = parse_head(BASE + b"\r\nInference-Header-Content-Length:  5 \r\nX-A:")
    assert head is not None
    assert (head.method, head.target, head.version) == (b"POST", b"/v2/models/m/infer", b"HTTP/1.1")
    assert head.length == 12 and head.plain
    assert head.fields[b"inference-header-content-length"] == b"5"
    assert head.fields[b"x-a"] == b""


def test_no_content_length_is_an_empty_body() -> None:
    head = parse_head(b"GET /v2 HTTP/1.0\r\nHost: x")
    assert head is not None and head.length == 0 and head.version == b"HTTP/1.0"


def test_a_head_at_aiohttps_limits() -> None:
    fields = b"".join(b"\r\nX-%d: 1" % i for i in range(125))
    head = parse_head(BASE + fields + b"\r\nX-Long: " + b"a" * 8182)
    assert head is not None and len(head.fields) == 128


def test_a_repeated_field_is_not_plain() -> None:
    head = parse_head(BASE + b"\r\nX-A: 1\r\nx-a: 2")
    assert head is not None and not head.plain


@pytest.mark.parametrize(
    "raw",
    [
        BASE + b"\r\nTransfer-Encoding: chunked",
        BASE + b"\r\nUpgrade: websocket",
        BASE + b"\r\nContent-Length: 12",  # repeated
        b"POST / HTTP/1.1\r\nContent-Length: +12",
        b"POST / HTTP/1.1\r\nContent-Length: 1 2",
        b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999",
        b"CONNECT x:443 HTTP/1.1\r\nHost: x",
        b"POST / HTTP/2.0\r\nHost: x",
        b"POST /a b HTTP/1.1\r\nHost: x",
        BASE + b"\r\n folded",
        BASE + b"\r\nno colon",
        BASE + b"\r\nName : space before the colon",
        BASE + b"\r\n: no name",
        b"POST / HTTP/1.1\r\nHost: x\nContent-Length: 5",  # a bare LF
        b"POST / HTTP/1.1\r\nHost: x\rContent-Length: 5",  # a bare CR
        BASE + b"\r\nX-Long: " + b"a" * 8190,
        b"POST /" + b"a" * 8190 + b" HTTP/1.1\r\nHost: x",
        BASE + b"".join(b"\r\nX-%d: 1" % i for i in range(128)),
    ],
)
def test_heads_left_to_aiohttp(raw: bytes) -> None:
    assert parse_head(raw) is None
