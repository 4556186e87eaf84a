"""RFC 9113 §6 (frame definitions: DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PING,
GOAWAY, WINDOW_UPDATE, CONTINUATION) and §7 (error codes), as h2spec's server suite checks
them (``http2/6.*``, ``http2/7``, ``generic/3.*``), over raw frames.

A request is a gRPC call (``ServerLive``: HEADERS, then DATA with an empty message and
END_STREAM); where h2spec only asks for "a response", the call's whole answer is checked
(``grpc-status: 0``). Its answer is one 7-octet DATA frame, which the flow-control cases
(§6.9) cut with small windows, as h2spec does with a server's page.
"""

from __future__ import annotations

import pytest
from h2frames import (
    ACK,
    CANCEL,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    MAX_WINDOW,
    PADDED,
    PING,
    PRIORITY,
    PROTOCOL_ERROR,
    RST_STREAM,
    SETTINGS,
    SETTINGS_ENABLE_PUSH,
    SETTINGS_HEADER_TABLE_SIZE,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    SETTINGS_MAX_FRAME_SIZE,
    SETTINGS_MAX_HEADER_LIST_SIZE,
    STREAM_CLOSED,
    WINDOW_UPDATE,
    H2Client,
    continuation,
    data,
    filler_message,
    frame,
    goaway,
    headers,
    ping,
    priority,
    priority_fields,
    rst_stream,
    settings,
    window_update,
)


def dummy_block(client: H2Client) -> bytes:
    """A header block fragment (h2spec's one dummy header of 4000 octets)."""
    return client.encode([("x-dummy0", "x" * 4000)])


def set_window(client: H2Client, *values: int) -> None:
    """SETTINGS_INITIAL_WINDOW_SIZE set to each of ``values`` in one frame; returns once the
    server ACKed it."""
    client.send(settings(*((SETTINGS_INITIAL_WINDOW_SIZE, v) for v in values)))
    client.expect_settings_ack()


# ---------------------------------------------------------------------------- §6.1 DATA


def test_data(conn: H2Client) -> None:
    """h2spec generic/3.1/1: a DATA frame is accepted (the call is answered)."""
    conn.send(conn.call(1))
    conn.expect_grpc_ok(1)


def test_multiple_data_frames(conn: H2Client) -> None:
    """h2spec generic/3.1/2: a message in two DATA frames is accepted."""
    message = filler_message(12)
    conn.send(headers(1, conn.request()), data(1, message[:4]), data(1, message[4:], True))
    conn.expect_grpc_ok(1)


def test_data_with_padding(conn: H2Client) -> None:
    """h2spec generic/3.1/3: a padded DATA frame is accepted (its padding is not data)."""
    conn.send(headers(1, conn.request()), data(1, b"\0\0\0\0\0", end_stream=True, pad=5))
    conn.expect_grpc_ok(1)


def test_data_on_stream_zero(conn: H2Client) -> None:
    """h2spec http2/6.1/1: DATA on stream 0: connection error PROTOCOL_ERROR."""
    conn.send(data(0, b"test", end_stream=True))
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_data_on_a_stream_not_open(conn: H2Client) -> None:
    """h2spec http2/6.1/2: DATA on a stream that is not "open" or "half-closed (local)"
    (HEADERS with END_STREAM, then DATA): stream error STREAM_CLOSED."""
    conn.send(headers(1, conn.request(), end_stream=True), data(1, b"test", end_stream=True))
    conn.expect_stream_error(1, STREAM_CLOSED)


def test_data_with_invalid_pad_length(conn: H2Client) -> None:
    """h2spec http2/6.1/3: a pad length not less than the payload: connection error
    PROTOCOL_ERROR."""
    conn.send(headers(1, conn.request()), frame(0x0, PADDED | END_STREAM, 1, b"\x06Test"))
    conn.expect_connection_error(PROTOCOL_ERROR)


# ---------------------------------------------------------------------------- §6.2 HEADERS


def test_headers(conn: H2Client) -> None:
    """h2spec generic/3.2/1: a HEADERS frame is accepted."""
    conn.send(conn.call(1))
    conn.expect_grpc_ok(1)


def test_headers_with_padding(conn: H2Client) -> None:
    """h2spec generic/3.2/2: a padded HEADERS frame is accepted."""
    conn.send(headers(1, conn.request(), pad=8), data(1, b"\0\0\0\0\0", end_stream=True))
    conn.expect_grpc_ok(1)


def test_headers_with_priority(conn: H2Client) -> None:
    """h2spec generic/3.2/3: a HEADERS frame with priority fields is accepted."""
    block = conn.request()
    conn.send(headers(1, block, priority=priority_fields()), data(1, b"\0" * 5, end_stream=True))
    conn.expect_grpc_ok(1)


def test_headers_then_priority_inside_the_block(conn: H2Client) -> None:
    """h2spec http2/6.2/1: HEADERS without END_HEADERS, then PRIORITY: connection error
    PROTOCOL_ERROR."""
    conn.send(headers(1, conn.request(), end_headers=False), priority(1))
    conn.send(continuation(1, dummy_block(conn)))
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_headers_of_another_stream_inside_the_block(conn: H2Client) -> None:
    """h2spec http2/6.2/2: HEADERS on stream 3 while stream 1's block is open: connection
    error PROTOCOL_ERROR."""
    conn.send(
        headers(1, conn.request(), end_headers=False),
        headers(3, conn.request(), end_stream=True),
        continuation(1, dummy_block(conn)),
    )
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_headers_on_stream_zero(conn: H2Client) -> None:
    """h2spec http2/6.2/3: HEADERS on stream 0: connection error PROTOCOL_ERROR."""
    conn.send(headers(0, conn.request(), end_stream=True))
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_headers_with_invalid_pad_length(conn: H2Client) -> None:
    """h2spec http2/6.2/4: a pad length longer than the payload: PROTOCOL_ERROR (h2spec
    accepts the stream or the connection error; RFC 9113 §6.2 says connection error)."""
    block = conn.request()
    flags = END_STREAM | END_HEADERS | PADDED
    conn.send(frame(HEADERS, flags, 1, bytes((len(block) + 2,)) + block))
    conn.expect_stream_error(1, PROTOCOL_ERROR)


# ---------------------------------------------------------------------------- §6.3 PRIORITY


@pytest.mark.parametrize(
    ("weight", "depends_on", "exclusive", "on"),
    [(0, 0, False, 1), (255, 0, False, 1), (0, 1, False, 3), (0, 0, True, 1), (255, 0, False, 3)],
    ids=["weight-1", "weight-256", "dependency", "exclusive", "idle-stream-then-lower-id"],
)
def test_priority_is_accepted(
    conn: H2Client, weight: int, depends_on: int, exclusive: bool, on: int
) -> None:
    """h2spec generic/3.3/1-5: PRIORITY frames of weight 1 and 256, with a dependency, an
    exclusive one, one on idle stream 3 before a request on stream 1: the request is
    answered."""
    conn.send(priority(on, depends_on, weight, exclusive), conn.call(1))
    conn.expect_grpc_ok(1)


def test_priority_on_stream_zero(conn: H2Client) -> None:
    """h2spec http2/6.3/1: PRIORITY on stream 0: connection error PROTOCOL_ERROR."""
    conn.send(priority(0))
    conn.expect_connection_error(PROTOCOL_ERROR)


@pytest.mark.parametrize("state", ["closed", "open", "idle"])
def test_priority_of_bad_length(conn: H2Client, state: str) -> None:
    """h2spec http2/6.3/2: a PRIORITY frame of 4 octets: stream error FRAME_SIZE_ERROR (or
    the connection error), after HEADERS with END_STREAM as h2spec sends it, on an open
    stream and (found by the differential test) on an idle one."""
    if state != "idle":
        conn.send(headers(1, conn.request(), end_stream=state == "closed"))
    conn.send(frame(PRIORITY, 0, 1, b"\x80\x00\x00\x01"))
    conn.expect_stream_error(1, FRAME_SIZE_ERROR)


# ---------------------------------------------------------------------------- §6.4 RST_STREAM


def test_rst_stream_is_accepted(conn: H2Client) -> None:
    """h2spec generic/3.4/1: RST_STREAM on an open stream is accepted."""
    conn.send(headers(1, conn.request()), rst_stream(1, CANCEL), ping(bytes(8)))
    conn.expect_ping_ack_or_close(bytes(8))


def test_rst_stream_on_stream_zero(conn: H2Client) -> None:
    """h2spec http2/6.4/1: RST_STREAM on stream 0: connection error PROTOCOL_ERROR."""
    conn.send(rst_stream(0, CANCEL))
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_rst_stream_on_idle_stream(conn: H2Client) -> None:
    """h2spec http2/6.4/2: RST_STREAM on an idle stream: connection error PROTOCOL_ERROR."""
    conn.send(rst_stream(1, CANCEL))
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_rst_stream_of_bad_length(conn: H2Client) -> None:
    """h2spec http2/6.4/3: RST_STREAM of 3 octets: connection error FRAME_SIZE_ERROR."""
    conn.send(headers(1, conn.request(), end_stream=True), frame(RST_STREAM, 0, 1, bytes(3)))
    conn.expect_stream_error(1, FRAME_SIZE_ERROR)


# ---------------------------------------------------------------------------- §6.5 SETTINGS


def test_settings_is_accepted(conn: H2Client) -> None:
    """h2spec generic/3.5/1: SETTINGS with every defined parameter is ACKed."""
    conn.send(
        settings(
            (SETTINGS_HEADER_TABLE_SIZE, 4096),
            (SETTINGS_ENABLE_PUSH, 1),
            (SETTINGS_MAX_CONCURRENT_STREAMS, 100),
            (SETTINGS_INITIAL_WINDOW_SIZE, 65535),
            (SETTINGS_MAX_FRAME_SIZE, 16384),
            (SETTINGS_MAX_HEADER_LIST_SIZE, 100),
        )
    )
    conn.expect_settings_ack()


def test_settings_ack_with_payload(conn: H2Client) -> None:
    """h2spec http2/6.5/1: SETTINGS with ACK and a payload: connection error
    FRAME_SIZE_ERROR."""
    conn.send(frame(SETTINGS, ACK, 0, b"\0"))
    conn.expect_connection_error(FRAME_SIZE_ERROR)


def test_settings_on_a_stream(conn: H2Client) -> None:
    """h2spec http2/6.5/2: SETTINGS on stream 1: connection error PROTOCOL_ERROR."""
    conn.send(frame(SETTINGS, 0, 1, b"\x00\x03\x00\x00\x00\x64"))
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_settings_of_bad_length(conn: H2Client) -> None:
    """h2spec http2/6.5/3: SETTINGS of 3 octets: FRAME_SIZE_ERROR (h2spec also accepts
    PROTOCOL_ERROR)."""
    conn.send(frame(SETTINGS, 0, 0, b"\x00\x03\x00"))
    conn.expect_connection_error(PROTOCOL_ERROR, FRAME_SIZE_ERROR)


@pytest.mark.parametrize(
    ("setting", "value", "code"),
    [
        (SETTINGS_ENABLE_PUSH, 2, PROTOCOL_ERROR),
        (SETTINGS_INITIAL_WINDOW_SIZE, 2**31, FLOW_CONTROL_ERROR),
        (SETTINGS_MAX_FRAME_SIZE, 16383, PROTOCOL_ERROR),
        (SETTINGS_MAX_FRAME_SIZE, 2**24, PROTOCOL_ERROR),
    ],
    ids=["enable-push-2", "initial-window-2^31", "max-frame-16383", "max-frame-2^24"],
)
def test_invalid_setting_value(conn: H2Client, setting: int, value: int, code: int) -> None:
    """h2spec http2/6.5.2/1-4 (and http2/6.9.2/3): values out of a setting's range are
    connection errors (PROTOCOL_ERROR; FLOW_CONTROL_ERROR for the window)."""
    conn.send(settings((setting, value)))
    conn.expect_connection_error(code)


def test_unknown_setting_is_ignored(conn: H2Client) -> None:
    """h2spec http2/6.5.2/5: an unknown setting identifier is ignored."""
    conn.send(settings((0xFF, 1)), ping(bytes(8)))
    conn.expect_ping_ack(bytes(8))


def test_settings_values_apply_in_order(conn: H2Client) -> None:
    """h2spec http2/6.5.3/1: SETTINGS_INITIAL_WINDOW_SIZE 100 then 1 in one frame: the last
    applies (the answer's first DATA frame is 1 octet)."""
    set_window(conn, 100, 1)
    conn.send(conn.call(1))
    assert len(conn.expect_data(1).payload) == 1


def test_settings_is_acknowledged(conn: H2Client) -> None:
    """h2spec http2/6.5.3/2: a SETTINGS frame without ACK is answered with SETTINGS ACK."""
    conn.send(settings((SETTINGS_ENABLE_PUSH, 0)))
    conn.expect_settings_ack()


# ---------------------------------------------------------------------------- §6.7 PING


def test_ping(conn: H2Client) -> None:
    """h2spec http2/6.7/1, generic/3.7/1: a PING is answered with an identical payload."""
    conn.send(ping(b"h2spec\0\0"))
    conn.expect_ping_ack(b"h2spec\0\0")


def test_ping_ack_is_not_answered(conn: H2Client) -> None:
    """h2spec http2/6.7/2: a PING with ACK is not answered (the next ACK is the second
    PING's)."""
    conn.send(ping(b"invalid\0", ack=True), ping(b"h2spec\0\0"))
    conn.expect_ping_ack(b"h2spec\0\0")


def test_ping_on_a_stream(conn: H2Client) -> None:
    """h2spec http2/6.7/3: PING on stream 1: connection error PROTOCOL_ERROR."""
    conn.send(frame(PING, 0, 1, bytes(8)))
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_ping_of_bad_length(conn: H2Client) -> None:
    """h2spec http2/6.7/4: PING of 6 octets: connection error FRAME_SIZE_ERROR."""
    conn.send(frame(PING, 0, 0, bytes(6)))
    conn.expect_connection_error(FRAME_SIZE_ERROR)


# ---------------------------------------------------------------------------- §6.8 GOAWAY


def test_goaway_is_accepted(conn: H2Client) -> None:
    """h2spec generic/3.8/1: a client's GOAWAY is accepted (the server answers a PING or
    closes the connection)."""
    conn.send(goaway(0, 0, b"h2spec"), ping(b"h2spec\0\0"))
    conn.expect_ping_ack_or_close(b"h2spec\0\0")


def test_goaway_on_a_stream(conn: H2Client) -> None:
    """h2spec http2/6.8/1: GOAWAY on stream 1: connection error PROTOCOL_ERROR."""
    conn.send(frame(GOAWAY, 0, 1, bytes(8)))
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_goaway_of_bad_length(conn: H2Client) -> None:
    """RFC 9113 §4.2, §6.8 (not in h2spec; found by the differential test): a GOAWAY too
    short for its last stream and error code: connection error FRAME_SIZE_ERROR."""
    conn.send(frame(GOAWAY, 0, 0, bytes(7)))
    conn.expect_connection_error(FRAME_SIZE_ERROR)


# ---------------------------------------------------------------------------- §6.9 WINDOW_UPDATE


def test_window_update_on_the_connection_is_accepted(conn: H2Client) -> None:
    """h2spec generic/3.9/1: WINDOW_UPDATE on stream 0 is accepted."""
    conn.send(window_update(0, 1), ping(bytes(8)))
    conn.expect_ping_ack(bytes(8))


def test_window_update_on_a_stream_is_accepted(conn: H2Client) -> None:
    """h2spec generic/3.9/2: WINDOW_UPDATE on a request's stream is accepted."""
    conn.send(conn.call(1), window_update(1, 1))
    conn.expect_grpc_ok(1)


def test_window_update_of_zero(conn: H2Client) -> None:
    """h2spec http2/6.9/1: WINDOW_UPDATE of 0 on the connection: connection error
    PROTOCOL_ERROR."""
    conn.send(window_update(0, 0))
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_window_update_of_zero_on_a_stream(conn: H2Client) -> None:
    """h2spec http2/6.9/2: WINDOW_UPDATE of 0 on an open stream: stream error
    PROTOCOL_ERROR."""
    conn.send(headers(1, conn.request()), window_update(1, 0))
    conn.expect_stream_error(1, PROTOCOL_ERROR)


def test_window_update_of_bad_length(conn: H2Client) -> None:
    """h2spec http2/6.9/3: WINDOW_UPDATE of 3 octets: connection error FRAME_SIZE_ERROR."""
    conn.send(frame(WINDOW_UPDATE, 0, 0, b"\x00\x00\x01"))
    conn.expect_connection_error(FRAME_SIZE_ERROR)


def test_initial_window_of_one_octet(conn: H2Client) -> None:
    """h2spec http2/6.9.1/1: with SETTINGS_INITIAL_WINDOW_SIZE 1 the answer's DATA comes in
    frames of 1 octet."""
    set_window(conn, 1)
    conn.send(conn.call(1))
    assert len(conn.expect_data(1).payload) == 1


def test_connection_window_overflow(conn: H2Client) -> None:
    """h2spec http2/6.9.1/2: WINDOW_UPDATEs taking the connection window past 2^31-1:
    GOAWAY FLOW_CONTROL_ERROR."""
    conn.send(window_update(0, MAX_WINDOW), window_update(0, MAX_WINDOW))
    conn.expect_connection_error(FLOW_CONTROL_ERROR)


def test_stream_window_overflow(conn: H2Client) -> None:
    """h2spec http2/6.9.1/3: WINDOW_UPDATEs taking a stream window past 2^31-1: RST_STREAM
    FLOW_CONTROL_ERROR (h2spec waits for the RST_STREAM itself)."""
    conn.send(headers(1, conn.request()))
    conn.send(window_update(1, MAX_WINDOW), window_update(1, MAX_WINDOW))
    conn.expect_stream_error(1, FLOW_CONTROL_ERROR, goaway_ok=False)


def test_initial_window_change_applies_to_open_streams(conn: H2Client) -> None:
    """h2spec http2/6.9.2/1: SETTINGS_INITIAL_WINDOW_SIZE 0, a request, then 1: the open
    stream's window grows by 1 (a DATA frame of 1 octet)."""
    set_window(conn, 0)
    conn.send(conn.call(1))
    conn.expect_response(1)  # the answer's DATA waits for window
    conn.send(settings((SETTINGS_INITIAL_WINDOW_SIZE, 1)))
    assert len(conn.expect_data(1).payload) == 1


def test_negative_window(conn: H2Client) -> None:
    """h2spec http2/6.9.2/2: a window made negative by SETTINGS is tracked: window 3, 3
    octets sent, window set to 2 (-1 left), WINDOW_UPDATE 2: one octet may go."""
    set_window(conn, 3)
    conn.send(conn.call(1))
    assert len(conn.expect_data(1).payload) == 3
    set_window(conn, 2)
    conn.send(window_update(1, 2))
    assert len(conn.expect_data(1).payload) == 1


def test_initial_window_over_the_maximum(conn: H2Client) -> None:
    """h2spec http2/6.9.2/3: SETTINGS_INITIAL_WINDOW_SIZE 2^31: connection error
    FLOW_CONTROL_ERROR."""
    conn.send(frame(SETTINGS, 0, 0, b"\x00\x04\x80\x00\x00\x00"))
    conn.expect_connection_error(FLOW_CONTROL_ERROR)


# ---------------------------------------------------------------------------- §6.10 CONTINUATION


@pytest.mark.parametrize("cuts", [(5,), (5, 10)], ids=["one", "two"])
def test_continuation_is_accepted(conn: H2Client, cuts: tuple[int, ...]) -> None:
    """h2spec generic/3.10/1-2: a request's block cut into HEADERS and one or two
    CONTINUATION frames."""
    block = conn.request()
    pieces = [block[a:b] for a, b in zip((0, *cuts), (*cuts, len(block)), strict=True)]
    frames = [headers(1, pieces[0], end_headers=False)]
    frames += [
        continuation(1, p, end_headers=i == len(pieces) - 2) for i, p in enumerate(pieces[1:])
    ]
    conn.send(*frames, data(1, b"\0" * 5, end_stream=True))
    conn.expect_grpc_ok(1)


def test_multiple_continuation_frames(conn: H2Client) -> None:
    """h2spec http2/6.10/1: HEADERS then two CONTINUATION frames of 4000-octet headers."""
    conn.send(
        headers(1, conn.request(), end_headers=False),
        continuation(1, dummy_block(conn), end_headers=False),
        continuation(1, conn.encode([("x-dummy1", "x" * 4000)])),
        data(1, b"\0" * 5, end_stream=True),
    )
    conn.expect_grpc_ok(1)


def test_continuation_followed_by_data(conn: H2Client) -> None:
    """h2spec http2/6.10/2: a CONTINUATION without END_HEADERS followed by DATA: connection
    error PROTOCOL_ERROR."""
    conn.send(
        headers(1, conn.request(), end_headers=False),
        continuation(1, dummy_block(conn), end_headers=False),
        data(1, b"test", end_stream=True),
    )
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_continuation_on_stream_zero(conn: H2Client) -> None:
    """h2spec http2/6.10/3: CONTINUATION on stream 0: connection error PROTOCOL_ERROR."""
    conn.send(
        headers(1, conn.request(), end_stream=True, end_headers=False),
        continuation(0, dummy_block(conn)),
    )
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_continuation_after_end_headers(conn: H2Client) -> None:
    """h2spec http2/6.10/4: CONTINUATION after a HEADERS frame with END_HEADERS: connection
    error PROTOCOL_ERROR."""
    conn.send(headers(1, conn.request(), end_stream=True), continuation(1, dummy_block(conn)))
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_continuation_after_a_continuation_with_end_headers(conn: H2Client) -> None:
    """h2spec http2/6.10/5: CONTINUATION after a CONTINUATION with END_HEADERS: connection
    error PROTOCOL_ERROR."""
    conn.send(
        headers(1, conn.request(), end_stream=True, end_headers=False),
        continuation(1, dummy_block(conn)),
        continuation(1, conn.encode([("x-dummy0", "x" * 4000)])),
    )
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_continuation_after_data(conn: H2Client) -> None:
    """h2spec http2/6.10/6: HEADERS without END_HEADERS, DATA, then CONTINUATION frames:
    connection error PROTOCOL_ERROR."""
    conn.send(
        headers(1, conn.request(), end_headers=False),
        data(1, b"test", end_stream=True),
        continuation(1, dummy_block(conn), end_headers=False),
        continuation(0, dummy_block(conn)),
    )
    conn.expect_connection_error(PROTOCOL_ERROR)


# ---------------------------------------------------------------------------- §7 error codes


def test_goaway_with_unknown_error_code(conn: H2Client) -> None:
    """h2spec http2/7/1: an unknown error code in GOAWAY triggers nothing special."""
    conn.send(goaway(0, 0xFF), ping(b"h2spec\0\0"))
    conn.expect_ping_ack_or_close(b"h2spec\0\0")


def test_rst_stream_with_unknown_error_code(conn: H2Client) -> None:
    """h2spec http2/7/2: an unknown error code in RST_STREAM triggers nothing special."""
    conn.send(headers(1, conn.request()), rst_stream(1, 0xFF), ping(bytes(8)))
    conn.expect_ping_ack_or_close(bytes(8))
