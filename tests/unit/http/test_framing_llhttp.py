"""``tritonx._transports.http.framing.parse_head`` against aiohttp's own parser (llhttp), head by head.

The listener frames requests itself for the ``/infer`` fast path and hands everything else to
aiohttp. If it framed a head that llhttp refuses, or read one differently (another length,
another field value), a client could get an answer aiohttp would never give, or smuggle a
request past one parser. So: whenever ``parse_head`` frames a head, llhttp must parse the
same bytes into one whole request with the same method, target, version, fields and body
length; when it does not (None), aiohttp answers alone. Heads are generated from parts known
to split parsers (control bytes, non-token names, folded lines, bare CR/LF, signed or listed
lengths, ``Transfer-Encoding``...).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from unittest import mock

import pytest
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import HttpRequestParser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tritonx._transports.http.framing import Head, parse_head

METHODS = [b"POST", b"GET", b"PUT", b"post", b"PO(T", b"CONNECT", b""]
TARGETS = [
    b"/v2/models/m/infer",
    b"/v2/models/m/infer?a=1&b=%20",
    b"*",
    b"http://x/v2",
    b"/a\x01",
    b"/a\x7f",
    b"/\xc3\xa9",
    b"",
    b"/a b",
]
VERSIONS = [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"http/1.1", b"HTTP/1.1 ", b"HTTP/1"]
NAMES = [
    b"Host",
    b"Content-Length",
    b"content-length",
    b"Transfer-Encoding",
    b"Connection",
    b"Upgrade",
    b"Expect",
    b"X-A",
    b"X A",
    b"X@A",
    b"X\x01A",
    b"X-\xc3\xa9",
    b" X-A",
    b"X-A ",
    b"",
    b"!#$%&'*+-.^_`|~",
]
VALUES = [
    b"x",
    b"5",
    b"0",
    b"+5",
    b"-1",
    b" 5 ",
    b"\t5",
    b"5, 5",
    b"0x5",
    b"05",
    b"9" * 20,
    b"chunked",
    b"identity",
    b"keep-alive",
    b"close",
    b"100-continue",
    b"a\x00b",
    b"a\x7fb",
    b"a\x0bb",
    b"\x80\xff",
    b"a\tb",
    b"a b",
    b"",
]
ENDS = [b"\r\n"] * 8 + [b"\n", b"\r", b"\r\n "]


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    line = draw(st.sampled_from(METHODS))
    line += draw(st.sampled_from([b" ", b" ", b"  ", b"\t"])) + draw(st.sampled_from(TARGETS))
    line += b" " + draw(st.sampled_from(VERSIONS))
    head = [line]
    if draw(st.booleans()):
        head.append(b"Host: x")
    for _ in range(draw(st.integers(0, 5))):
        name = draw(st.sampled_from(NAMES))
        colon = draw(st.sampled_from([b":", b": ", b":  ", b" :", b""]))
        head.append(name + colon + draw(st.sampled_from(VALUES)))
    ends = [draw(st.sampled_from(ENDS)) for _ in head[1:]]
    raw = head[0]
    for end, field in zip(ends, head[1:], strict=True):
        raw += end + field
    return raw


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def llhttp(loop: asyncio.AbstractEventLoop, data: bytes) -> object:
    """The one request llhttp reads from ``data`` (aiohttp's limits); None if it refuses it,
    a string if it reads something else than one whole request."""
    parser = HttpRequestParser(mock.Mock(), loop, 1 << 16)
    try:
        messages, upgraded, tail = parser.feed_data(data)
    except HttpProcessingError:
        return None
    if len(messages) != 1 or upgraded or tail:
        return f"{len(messages)} messages, upgraded {upgraded}, tail {tail!r}"
    message, payload = messages[0]
    if not payload.is_eof():
        return "the body is not whole"
    return message


def agree(loop: asyncio.AbstractEventLoop, raw: bytes, head: Head) -> None:
    data = raw + b"\r\n\r\n" + b"b" * head.length
    message = llhttp(loop, data)
    assert message is not None, f"framed, but aiohttp refuses {data!r}"
    assert not isinstance(message, str), (message, data)
    assert message.method == head.method.decode()  # type: ignore[attr-defined]
    assert message.path == head.target.decode("utf-8", "surrogateescape")  # type: ignore[attr-defined]
    assert f"HTTP/{'.'.join(map(str, message.version))}" == head.version.decode()  # type: ignore[attr-defined]
    headers = message.headers  # type: ignore[attr-defined]
    for name, value in head.fields.items():
        values = headers.getall(name.decode(), [])
        assert value.decode("utf-8", "surrogateescape") in values, (name, value, values)
    assert len(headers) == len(raw.split(b"\r\n")) - 1


@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(raw=heads())
def test_what_the_listener_frames_aiohttp_frames_alike(
    loop: asyncio.AbstractEventLoop, raw: bytes
) -> None:
    head = parse_head(raw)
    if head is not None:
        agree(loop, raw, head)


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nX A: b",
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nX@A: b",
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nX-\xc3\xa9: b",
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nX-A: a\x00b",
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nX-A: a\x7fb",
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: a\x01b",
        b"POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: 0",
    ],
    ids=[
        "space in a name",
        "@ in a name",
        "UTF-8 name",
        "NUL",
        "DEL",
        "control in Host",
        "no Host",
    ],
)
def test_heads_aiohttp_refuses_are_left_to_it(loop: asyncio.AbstractEventLoop, raw: bytes) -> None:
    """Found by the test above: the fast path answered these, aiohttp answers 400."""
    assert llhttp(loop, raw + b"\r\n\r\n") is None
    assert parse_head(raw) is None


def test_a_plain_head_is_read_alike(loop: asyncio.AbstractEventLoop) -> None:
    raw = (
        b"POST /v2/models/m/infer?x=1 HTTP/1.1\r\nHost: x\r\nContent-Length:  \t12 \r\n"
        b"X-A: \ta b\x80\r\nx-a: 2\r\nInference-Header-Content-Length: 5"
    )
    head = parse_head(raw)
    assert head is not None and head.length == 12 and not head.plain
    agree(loop, raw, head)
