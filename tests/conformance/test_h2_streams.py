"""RFC 9113 §5 (streams and multiplexing): stream states (§5.1), identifiers (§5.1.1),
concurrency (§5.1.2), priority (§5.3), error handling (§5.4) and extensions (§5.5), as
h2spec's server suite checks them (``http2/5.*``, ``generic/2``), over raw frames.

A request is a gRPC call (``ServerLive``). h2spec keeps a stream half-closed (remote) by
answering nothing while its window is 0; the same works here: with SETTINGS_INITIAL_WINDOW_SIZE
0 the server sends the answer's HEADERS and keeps its DATA (and the trailers) waiting, so
once those HEADERS arrive the stream is half-closed (remote) for certain.
"""

from __future__ import annotations

import pytest
from h2frames import (
    CANCEL,
    PING,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    STREAM_CLOSED,
    H2Client,
    Outcome,
    continuation,
    data,
    frame,
    headers,
    ping,
    priority,
    priority_fields,
    rst_stream,
    window_update,
)

#: the stream limit the server announces (--grpc-max-concurrent-streams, default 100)
MAX_CONCURRENT_STREAMS = 100


def half_closed_remote(client: H2Client, stream: int = 1) -> None:
    """Handshake with a 0 stream window, then a whole call on ``stream``: its answer waits
    for window, so the stream stays half-closed (remote)."""
    client.handshake((SETTINGS_INITIAL_WINDOW_SIZE, 0))
    client.send(client.call(stream))
    client.expect_response(stream)


def closed_by_end_stream(client: H2Client, stream: int = 1) -> None:
    """A whole call on ``stream``, its whole answer read: the stream is closed."""
    client.send(client.call(stream))
    client.expect_grpc_ok(stream)


def closed_by_rst_stream(client: H2Client, stream: int = 1) -> bytes:
    """The frames that open ``stream`` (HEADERS without END_STREAM) and reset it."""
    return headers(stream, client.request()) + rst_stream(stream, CANCEL)


def dummy_block(client: H2Client) -> bytes:
    """A header block fragment (h2spec's one dummy header of 4000 octets)."""
    return client.encode([("x-dummy0", "x" * 4000)])


# ---------------------------------------------------------------------------- §5.1 idle


def test_idle_data(conn: H2Client) -> None:
    """h2spec http2/5.1/1: DATA on an idle stream (h2spec accepts PROTOCOL_ERROR, the
    §5.1 reading, or STREAM_CLOSED, the §6.1 one)."""
    conn.send(data(1, b"test", end_stream=True))
    conn.expect_stream_error(1, PROTOCOL_ERROR, STREAM_CLOSED)


def test_idle_rst_stream(conn: H2Client) -> None:
    """h2spec http2/5.1/2: RST_STREAM on an idle stream: connection error PROTOCOL_ERROR."""
    conn.send(rst_stream(1, CANCEL))
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_idle_window_update(conn: H2Client) -> None:
    """h2spec http2/5.1/3: WINDOW_UPDATE on an idle stream: connection error PROTOCOL_ERROR."""
    conn.send(window_update(1, 100))
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_idle_continuation(conn: H2Client) -> None:
    """h2spec http2/5.1/4: CONTINUATION on an idle stream: connection error PROTOCOL_ERROR."""
    conn.send(continuation(1, conn.request()))
    conn.expect_connection_error(PROTOCOL_ERROR)


@pytest.mark.parametrize(
    "kind",
    [0x0, 0x8, 0x3],
    ids=["data", "window-update", "rst-stream"],
)
def test_idle_even_stream_below_the_last_one(conn: H2Client, kind: int) -> None:
    """RFC 9113 §5.1 (not in h2spec; found by the differential test): stream 2 stays idle
    whatever the client opened (even streams are the server's); DATA, WINDOW_UPDATE or
    RST_STREAM on it: connection error PROTOCOL_ERROR."""
    conn.send(headers(3, conn.request()), frame(kind, 0, 2, b"\0\0\0\1"))
    conn.expect_connection_error(PROTOCOL_ERROR)


# ---------------------------------------------------------------------------- §5.1 half-closed


def test_half_closed_remote_data(raw: H2Client) -> None:
    """h2spec http2/5.1/5: DATA on a half-closed (remote) stream: stream error
    STREAM_CLOSED."""
    half_closed_remote(raw)
    raw.send(data(1, b"test", end_stream=True))
    raw.expect_stream_error(1, STREAM_CLOSED)


def test_half_closed_remote_headers(raw: H2Client) -> None:
    """h2spec http2/5.1/6: HEADERS on a half-closed (remote) stream: stream error
    STREAM_CLOSED."""
    half_closed_remote(raw)
    raw.send(headers(1, raw.request(), end_stream=True))
    raw.expect_stream_error(1, STREAM_CLOSED)


def test_half_closed_remote_continuation(raw: H2Client) -> None:
    """h2spec http2/5.1/7: CONTINUATION on a half-closed (remote) stream (h2spec accepts
    STREAM_CLOSED, or PROTOCOL_ERROR: no header block is open)."""
    half_closed_remote(raw)
    raw.send(continuation(1, raw.request()))
    raw.expect_stream_error(1, STREAM_CLOSED, PROTOCOL_ERROR)


def test_half_closed_remote_window_update_is_accepted(raw: H2Client) -> None:
    """h2spec generic/2/2: WINDOW_UPDATE on a half-closed (remote) stream is processed: the
    waiting answer's DATA comes."""
    half_closed_remote(raw)
    raw.send(window_update(1, 1))
    assert len(raw.expect_data(1).payload) == 1


def test_half_closed_remote_priority_is_accepted(raw: H2Client) -> None:
    """h2spec generic/2/3: PRIORITY on a half-closed (remote) stream is accepted."""
    half_closed_remote(raw)
    raw.send(priority(1), window_update(1, 1))
    raw.expect_data(1)


def test_half_closed_remote_rst_stream_is_accepted(raw: H2Client) -> None:
    """h2spec generic/2/4: RST_STREAM on a half-closed (remote) stream is accepted (the
    connection goes on, or closes)."""
    half_closed_remote(raw)
    raw.send(rst_stream(1, CANCEL), ping(b"h2spec\0\0"))
    raw.expect_ping_ack_or_close(b"h2spec\0\0")


# ---------------------------------------------------------------------------- §5.1 closed


def test_closed_by_rst_stream_data(conn: H2Client) -> None:
    """h2spec http2/5.1/8: DATA after the client's RST_STREAM: stream error STREAM_CLOSED
    (RFC 9113 §6.1: DATA on a stream not open or half-closed (local))."""
    conn.send(closed_by_rst_stream(conn), data(1, b"test", end_stream=True))
    conn.expect_stream_error(1, STREAM_CLOSED)


def test_closed_by_rst_stream_headers(conn: H2Client) -> None:
    """h2spec http2/5.1/9: HEADERS after the client's RST_STREAM: stream error STREAM_CLOSED
    (RFC 7540 §5.1; RFC 9113 §5.1 lets an endpoint treat it as a connection error)."""
    conn.send(closed_by_rst_stream(conn), headers(1, conn.request(), end_stream=True))
    conn.expect_stream_error(1, STREAM_CLOSED)


def test_closed_by_rst_stream_continuation(conn: H2Client) -> None:
    """h2spec http2/5.1/10: CONTINUATION after the client's RST_STREAM (STREAM_CLOSED, or
    PROTOCOL_ERROR: no header block is open)."""
    conn.send(closed_by_rst_stream(conn), continuation(1, dummy_block(conn)))
    conn.expect_stream_error(1, STREAM_CLOSED, PROTOCOL_ERROR)


def test_closed_data(conn: H2Client) -> None:
    """h2spec http2/5.1/11: DATA on a closed stream (both sides sent END_STREAM): stream
    error STREAM_CLOSED (RFC 9113 §6.1)."""
    closed_by_end_stream(conn)
    conn.send(data(1, b"test", end_stream=True))
    conn.expect_stream_error(1, STREAM_CLOSED)


def test_closed_headers(conn: H2Client) -> None:
    """h2spec http2/5.1/12: HEADERS on a closed stream: connection error STREAM_CLOSED
    (RFC 7540 §5.1; RFC 9113 §5.1 keeps it as what an endpoint MAY do)."""
    closed_by_end_stream(conn)
    conn.send(headers(1, conn.request(), end_stream=True))
    conn.expect_connection_error(STREAM_CLOSED)


def test_closed_continuation(conn: H2Client) -> None:
    """h2spec http2/5.1/13: CONTINUATION on a closed stream: connection error STREAM_CLOSED
    or PROTOCOL_ERROR."""
    closed_by_end_stream(conn)
    conn.send(continuation(1, dummy_block(conn)))
    conn.expect_connection_error(STREAM_CLOSED, PROTOCOL_ERROR)


def test_closed_priority_is_accepted(conn: H2Client) -> None:
    """h2spec generic/2/5: PRIORITY on a closed stream is accepted."""
    closed_by_end_stream(conn)
    conn.send(priority(1), ping(bytes(8)))
    conn.expect_ping_ack(bytes(8))


def test_idle_priority_is_accepted(conn: H2Client) -> None:
    """h2spec generic/2/1: PRIORITY on an idle stream is accepted."""
    conn.send(priority(1), ping(bytes(8)))
    conn.expect_ping_ack(bytes(8))


def test_data_on_a_stream_closed_by_a_higher_one(conn: H2Client) -> None:
    """RFC 9113 §5.1.1, §6.1 (not in h2spec; found by the differential test): opening
    stream 3 closes idle stream 1; DATA on it: stream error STREAM_CLOSED (§6.1), or
    PROTOCOL_ERROR as h2spec accepts for DATA on a stream never opened."""
    conn.send(headers(3, conn.request()), data(1, b"test", end_stream=True))
    conn.expect_stream_error(1, STREAM_CLOSED, PROTOCOL_ERROR)


# ---------------------------------------------------------------------------- §5.1.1 ids


def test_even_stream_identifier(conn: H2Client) -> None:
    """h2spec http2/5.1.1/1: a client's HEADERS on an even stream: connection error
    PROTOCOL_ERROR."""
    conn.send(headers(2, conn.request(), end_stream=True))
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_stream_identifier_lower_than_previous(conn: H2Client) -> None:
    """h2spec http2/5.1.1/2: a new stream numbered below one the client opened before:
    connection error PROTOCOL_ERROR."""
    conn.send(conn.call(5), headers(3, conn.request(), end_stream=True))
    conn.expect_connection_error(PROTOCOL_ERROR)


# ---------------------------------------------------------------------------- §5.1.2


def test_max_concurrent_streams_is_announced(conn: H2Client) -> None:
    """The server announces its stream limit (SETTINGS_MAX_CONCURRENT_STREAMS, §5.1.2);
    h2spec skips http2/5.1.2/1 without it."""
    announced = conn.server_settings.get(SETTINGS_MAX_CONCURRENT_STREAMS)
    if announced != MAX_CONCURRENT_STREAMS:
        raise Outcome(
            f"SETTINGS_MAX_CONCURRENT_STREAMS: {announced}, expected {MAX_CONCURRENT_STREAMS}"
        )


def test_streams_over_the_concurrent_limit(raw: H2Client) -> None:
    """h2spec http2/5.1.2/1: HEADERS that take the client past the announced limit: stream
    error PROTOCOL_ERROR or REFUSED_STREAM (the answers wait for window, so every stream
    stays open)."""
    raw.handshake((SETTINGS_INITIAL_WINDOW_SIZE, 0))
    limit = raw.server_settings.get(SETTINGS_MAX_CONCURRENT_STREAMS, MAX_CONCURRENT_STREAMS)
    last = 1 + 2 * limit
    raw.send(*(raw.call(stream) for stream in range(1, last + 1, 2)))
    raw.expect_stream_error(last, PROTOCOL_ERROR, REFUSED_STREAM)


# ---------------------------------------------------------------------------- §5.3


def test_headers_depending_on_itself(conn: H2Client) -> None:
    """h2spec http2/5.3.1/1: a HEADERS frame whose priority depends on its own stream:
    stream error PROTOCOL_ERROR (RFC 9113 §5.3.1)."""
    conn.send(
        headers(1, conn.request(), priority=priority_fields(depends_on=1)),
        data(1, b"\0\0\0\0\0", end_stream=True),
    )
    conn.expect_stream_error(1, PROTOCOL_ERROR)


def test_priority_depending_on_itself(conn: H2Client) -> None:
    """h2spec http2/5.3.1/2: a PRIORITY frame depending on its own stream: stream error
    PROTOCOL_ERROR (RFC 9113 §5.3.1)."""
    conn.send(priority(1, depends_on=1))
    conn.expect_stream_error(1, PROTOCOL_ERROR)


# ---------------------------------------------------------------------------- §5.4.1


def test_connection_error_closes_the_connection(conn: H2Client) -> None:
    """h2spec http2/5.4.1/1: after a connection error (a PING on stream 3) the TCP
    connection is closed."""
    conn.send(frame(PING, 0, 3, bytes(8)))
    conn.expect_connection_error(PROTOCOL_ERROR, bare_close=True)


def test_connection_error_sends_goaway(conn: H2Client) -> None:
    """h2spec http2/5.4.1/2 (strict): the endpoint first sends GOAWAY (PROTOCOL_ERROR)."""
    conn.send(frame(PING, 0, 3, bytes(8)))
    conn.expect_connection_error(PROTOCOL_ERROR)


# ---------------------------------------------------------------------------- §5.5


def test_unknown_extension_frame_inside_a_header_block(conn: H2Client) -> None:
    """h2spec http2/5.5/2: an unknown frame inside a header block: connection error
    PROTOCOL_ERROR."""
    conn.send(headers(1, conn.request(), end_stream=True, end_headers=False))
    conn.send(frame(0x16, 0, 0, bytes(8)))
    conn.expect_connection_error(PROTOCOL_ERROR)
