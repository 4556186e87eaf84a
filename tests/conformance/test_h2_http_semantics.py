"""RFC 9113 §8 (HTTP semantics): message exchanges (§8.1), malformed messages (§8.1.1),
field validity (§8.2), connection-specific fields (§8.2.2), request pseudo-headers (§8.3),
server push (§8.4), as h2spec's server suite checks them (``http2/8.*``, ``generic/4``), over
raw frames.

Every request is a gRPC call (``ServerLive``) with one thing wrong; a malformed request MUST
be a stream error PROTOCOL_ERROR (§8.1.1: RST_STREAM, possibly after an answer; h2spec also
accepts GOAWAY PROTOCOL_ERROR). The cases of h2spec's generic section that want a request
*served* whatever its method (GET, HEAD) only ask for a response here: a gRPC server answers
them with an HTTP error.

Beyond h2spec: RFC 9113 §8.2.1's field validity (characters a name or value must not hold)
and the rest of §8.2.2's connection-specific fields.
"""

from __future__ import annotations

import pytest
from h2frames import (
    END_HEADERS,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    SERVER_LIVE,
    H2Client,
    data,
    filler_message,
    frame,
    grpc_request,
    headers,
)

MESSAGE = b"\0\0\0\0\0"

Fields = list[tuple[str, str]]


def request(client: H2Client) -> Fields:
    """The header list of a valid gRPC call on ``client``'s connection."""
    return grpc_request(SERVER_LIVE, f"127.0.0.1:{client.port}")


def without(fields: Fields, name: str) -> Fields:
    return [(n, v) for n, v in fields if n != name]


def replaced(fields: Fields, name: str, value: str) -> Fields:
    return [(n, value if n == name else v) for n, v in fields]


def send_call(client: H2Client, fields: Fields, stream: int = 1) -> None:
    """HEADERS with ``fields``, then DATA with the message and END_STREAM."""
    client.send(headers(stream, client.encode(fields)), data(stream, MESSAGE, end_stream=True))


def malformed(client: H2Client, fields: Fields) -> None:
    """A call with ``fields`` is a stream error PROTOCOL_ERROR."""
    send_call(client, fields)
    client.expect_stream_error(1, PROTOCOL_ERROR)


# ---------------------------------------------------------------------------- §8.1 exchanges


def test_get_request_is_answered(conn: H2Client) -> None:
    """h2spec generic/4/1: a GET request gets a response (its status is not checked: a gRPC
    server refuses GET)."""
    conn.send(headers(1, conn.encode(replaced(request(conn), ":method", "GET")), end_stream=True))
    conn.expect_response(1)


def test_head_request_is_answered(conn: H2Client) -> None:
    """h2spec generic/4/2: a HEAD request gets a response."""
    conn.send(headers(1, conn.encode(replaced(request(conn), ":method", "HEAD")), end_stream=True))
    conn.expect_response(1)


def test_post_request_is_answered(conn: H2Client) -> None:
    """h2spec generic/4/3: a POST request with a body is answered (the whole gRPC call)."""
    send_call(conn, request(conn))
    conn.expect_grpc_ok(1)


def test_post_request_with_trailers_is_answered(conn: H2Client) -> None:
    """h2spec generic/4/4: a POST request whose body is followed by trailers is answered."""
    conn.send(
        headers(1, conn.encode([*request(conn), ("trailer", "x-test")])),
        data(1, MESSAGE),
        headers(1, conn.encode([("x-test", "ok")]), end_stream=True),
    )
    conn.expect_grpc_ok(1)


def test_second_headers_without_end_stream(conn: H2Client) -> None:
    """h2spec http2/8.1/1: a second HEADERS frame (trailers) without END_STREAM: stream
    error PROTOCOL_ERROR."""
    conn.send(
        headers(1, conn.encode(request(conn))),
        data(1, MESSAGE),
        headers(1, conn.encode([("x-test", "ok")])),
    )
    conn.expect_stream_error(1, PROTOCOL_ERROR)


# ---------------------------------------------------------------------------- §8.2 fields


def test_uppercase_field_name(conn: H2Client) -> None:
    """h2spec http2/8.1.2/1: a field name with upper-case letters is malformed."""
    malformed(conn, [*request(conn), ("X-TEST", "ok")])


FIELD_VALIDITY = [
    ("name-with-space", ("x test", "ok")),
    ("name-with-nul", ("x\0test", "ok")),
    ("name-with-colon", ("x:test", "ok")),
    ("name-with-del", ("x\x7ftest", "ok")),
    ("empty-name", ("", "ok")),
    ("value-with-cr", ("x-test", "o\rk")),
    ("value-with-lf", ("x-test", "o\nk")),
    ("value-with-nul", ("x-test", "o\0k")),
    ("value-with-leading-space", ("x-test", " ok")),
    ("value-with-trailing-tab", ("x-test", "ok\t")),
]


@pytest.mark.parametrize(
    "field", [field for _, field in FIELD_VALIDITY], ids=[name for name, _ in FIELD_VALIDITY]
)
def test_invalid_field(conn: H2Client, field: tuple[str, str]) -> None:
    """RFC 9113 §8.2.1: a name with a character out of the token set (or a colon, or none),
    a value with NUL, CR or LF or with white space at either end, is malformed."""
    malformed(conn, [*request(conn), field])


# ---------------------------------------------------------------------------- §8.3 pseudo


def test_unknown_pseudo_header(conn: H2Client) -> None:
    """h2spec http2/8.1.2.1/1: an unknown pseudo-header field is malformed."""
    malformed(conn, [*request(conn)[:4], (":test", "ok"), *request(conn)[4:]])


def test_response_pseudo_header_in_a_request(conn: H2Client) -> None:
    """h2spec http2/8.1.2.1/2: a response pseudo-header (:status) in a request is malformed."""
    malformed(conn, [*request(conn)[:4], (":status", "200"), *request(conn)[4:]])


@pytest.mark.parametrize("end_stream", [False, True], ids=["as-h2spec", "with-end-stream"])
def test_pseudo_header_in_trailers(conn: H2Client, end_stream: bool) -> None:
    """h2spec http2/8.1.2.1/3: trailers holding a pseudo-header are malformed. h2spec sends
    them without END_STREAM, which is itself malformed (§8.1); with END_STREAM only the
    pseudo-header is wrong."""
    conn.send(
        headers(1, conn.encode(request(conn))),
        data(1, MESSAGE),
        headers(1, conn.encode([(":method", "POST")]), end_stream=end_stream),
    )
    conn.expect_stream_error(1, PROTOCOL_ERROR)


def test_pseudo_header_after_a_regular_field(conn: H2Client) -> None:
    """h2spec http2/8.1.2.1/4: a pseudo-header after a regular field is malformed."""
    malformed(conn, [("x-test", "ok"), *request(conn)])


@pytest.mark.parametrize(
    "field",
    [
        ("connection", "keep-alive"),
        ("proxy-connection", "keep-alive"),
        ("keep-alive", "timeout=5"),
        ("transfer-encoding", "chunked"),
        ("upgrade", "h2c"),
    ],
    ids=lambda field: field[0],
)
def test_connection_specific_field(conn: H2Client, field: tuple[str, str]) -> None:
    """h2spec http2/8.1.2.2/1 (connection), RFC 9113 §8.2.2 (the others): connection-specific
    fields are malformed in HTTP/2."""
    malformed(conn, [*request(conn), field])


def test_te_other_than_trailers(conn: H2Client) -> None:
    """h2spec http2/8.1.2.2/2: a TE field with a value other than "trailers" is malformed."""
    malformed(conn, [*replaced(request(conn), "te", "trailers, deflate"), ("trailers", "test")])


PSEUDO_HEADER_CASES = [
    "empty-path",
    "no-method",
    "no-scheme",
    "no-path",
    "two-methods",
    "two-schemes",
    "two-paths",
]


def pseudo_header_case(case: str, fields: Fields) -> Fields:
    if case == "empty-path":
        return replaced(fields, ":path", "")
    if case.startswith("no-"):
        return without(fields, ":" + case[3:])
    name = ":" + case[4:-1]
    return [*fields[:4], (name, dict(fields)[name]), *fields[4:]]


@pytest.mark.parametrize("case", PSEUDO_HEADER_CASES)
def test_request_pseudo_headers(conn: H2Client, case: str) -> None:
    """h2spec http2/8.1.2.3/1-7: an empty :path, a missing :method, :scheme or :path, a
    duplicated :method, :scheme or :path: the request is malformed."""
    malformed(conn, pseudo_header_case(case, request(conn)))


# ---------------------------------------------------------------------------- §8.1.1 length


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param((MESSAGE,), id="one-data-frame"),
        pytest.param((filler_message(8)[:4], filler_message(8)[4:]), id="two-data-frames"),
    ],
)
def test_content_length_mismatch(conn: H2Client, frames: tuple[bytes, ...]) -> None:
    """h2spec http2/8.1.2.6/1-2: a content-length that is not the sum of the DATA payloads
    makes the request malformed."""
    block = conn.encode([*request(conn), ("content-length", "1")])
    *first, last = frames
    conn.send(headers(1, block), *(data(1, piece) for piece in first), data(1, last, True))
    conn.expect_stream_error(1, PROTOCOL_ERROR)


# ---------------------------------------------------------------------------- §8.4 push


def test_push_promise_from_a_client(conn: H2Client) -> None:
    """h2spec http2/8.2/1: a client's PUSH_PROMISE: connection error PROTOCOL_ERROR."""
    block = conn.encode(request(conn))
    conn.send(frame(PUSH_PROMISE, END_HEADERS, 1, b"\x00\x00\x00\x03" + block))
    conn.expect_connection_error(PROTOCOL_ERROR)
