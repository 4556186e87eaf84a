"""RFC 9113 §3.4 (the connection preface) and §4 (HTTP frames: format, size, header
compression), as h2spec's server suite checks them (``http2/3.5``, ``http2/4.*``,
``generic/1``), over raw frames against tritonx's gRPC listener.
"""

from __future__ import annotations

from h2frames import (
    ACK,
    COMPRESSION_ERROR,
    DEFAULT_FRAME_SIZE,
    END_HEADERS,
    END_STREAM,
    FRAME_SIZE_ERROR,
    HEADERS,
    PING,
    PREFACE,
    PROTOCOL_ERROR,
    SETTINGS,
    SETTINGS_INITIAL_WINDOW_SIZE,
    H2Client,
    continuation,
    data,
    filler_message,
    frame,
    headers,
    ping,
    priority,
    settings,
)

# ---------------------------------------------------------------------------- §3.4 preface


def test_server_preface_is_a_settings_frame(raw: H2Client) -> None:
    """h2spec http2/3.5/1, generic/1/1: the server's first frame is SETTINGS (not an ACK)."""
    raw.send(PREFACE, settings((SETTINGS_INITIAL_WINDOW_SIZE, 65535)))
    first = raw.read_frame()
    assert first is not None, "connection closed instead of the server preface"
    assert first.type == SETTINGS and not first.flags & ACK, str(first)


def test_invalid_preface_closes_the_connection(raw: H2Client) -> None:
    """h2spec http2/3.5/2: an invalid preface is a connection error PROTOCOL_ERROR; the
    GOAWAY may be omitted (RFC 9113 §3.4), the TCP connection MUST be closed."""
    raw.send(b"INVALID CONNECTION PREFACE\r\n\r\n")
    raw.expect_connection_error(PROTOCOL_ERROR, bare_close=True)


# ---------------------------------------------------------------------------- §4.1 format


def test_unknown_frame_type_is_ignored(conn: H2Client) -> None:
    """h2spec http2/4.1/1 (and http2/5.5/1): a frame of an unknown type is discarded."""
    conn.send(frame(0x16, 0, 0, bytes(8)), ping(b"h2spec\0\0"))
    conn.expect_ping_ack(b"h2spec\0\0")


def test_undefined_flags_are_ignored(conn: H2Client) -> None:
    """h2spec http2/4.1/2: flags a frame type does not define are ignored (a PING with
    flags 0x16, ACK not among them, is answered)."""
    conn.send(frame(PING, 0x16, 0, b"flags\0\0\0"))
    conn.expect_ping_ack(b"flags\0\0\0")


def test_reserved_bit_is_ignored(conn: H2Client) -> None:
    """h2spec http2/4.1/3: the R bit before the stream identifier is ignored on receipt."""
    conn.send(frame(PING, 0x16, 0, b"reserved", reserved=True))
    conn.expect_ping_ack(b"reserved")


# ---------------------------------------------------------------------------- §4.2 size


def test_data_frame_of_max_frame_size_is_accepted(conn: H2Client) -> None:
    """h2spec http2/4.2/1: a DATA frame of 2^14 octets is processed (a gRPC message that
    fills it; the call is answered)."""
    message = filler_message(DEFAULT_FRAME_SIZE)
    assert len(message) == DEFAULT_FRAME_SIZE
    conn.send(headers(1, conn.request()), data(1, message, end_stream=True))
    conn.expect_grpc_ok(1)


def test_data_frame_over_max_frame_size(conn: H2Client) -> None:
    """h2spec http2/4.2/2: a DATA frame over SETTINGS_MAX_FRAME_SIZE is FRAME_SIZE_ERROR
    (h2spec accepts the stream or the connection error)."""
    conn.send(headers(1, conn.request()), data(1, filler_message(DEFAULT_FRAME_SIZE + 1), True))
    conn.expect_stream_error(1, FRAME_SIZE_ERROR)


def test_headers_frame_over_max_frame_size(conn: H2Client) -> None:
    """h2spec http2/4.2/3: a frame carrying a header block over the maximum frame size is a
    connection error FRAME_SIZE_ERROR (5 headers of 4000 octets, as h2spec sends)."""
    dummies = [(f"x-dummy{i}", "x" * 4000) for i in range(5)]
    block = conn.request(extra=dummies)
    assert len(block) > DEFAULT_FRAME_SIZE
    conn.send(headers(1, block, end_stream=True))
    conn.expect_connection_error(FRAME_SIZE_ERROR)


# ---------------------------------------------------------------------------- §4.3 HPACK


def test_invalid_header_block_fragment(conn: H2Client) -> None:
    """h2spec http2/4.3/1: a block that does not decode (a literal with incremental indexing
    and no name or value) is a connection error COMPRESSION_ERROR."""
    conn.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, b"\x40"))
    conn.expect_connection_error(COMPRESSION_ERROR)


def test_priority_frame_inside_a_header_block(conn: H2Client) -> None:
    """h2spec http2/4.3/2: a header block is contiguous; a PRIORITY frame inside it is a
    connection error PROTOCOL_ERROR."""
    conn.send(
        headers(1, conn.request(), end_headers=False),
        priority(1),
        continuation(1, conn.encode([("x-dummy0", "x" * 4000)])),
    )
    conn.expect_connection_error(PROTOCOL_ERROR)


def test_headers_of_another_stream_inside_a_header_block(conn: H2Client) -> None:
    """h2spec http2/4.3/3: HEADERS on another stream inside a header block is a connection
    error PROTOCOL_ERROR."""
    conn.send(
        headers(1, conn.request(), end_headers=False),
        headers(3, conn.request(), end_stream=True),
        continuation(1, conn.encode([("x-dummy0", "x" * 4000)])),
    )
    conn.expect_connection_error(PROTOCOL_ERROR)
