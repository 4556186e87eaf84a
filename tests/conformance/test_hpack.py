"""RFC 7541 (HPACK) as a server's decoder meets it on the wire: h2spec's ``hpack`` section
(decoding errors: COMPRESSION_ERROR connection errors, RFC 9113 §4.3) and its ``generic/5``
cases (every field representation accepted), over raw frames.

A request block is written by hand here, every field a literal without indexing (so the
server's dynamic table stays empty and the first index past it is 62), with the
representation under test appended (or, for a table size update, prepended).
"""

from __future__ import annotations

import pytest
from h2frames import (
    COMPRESSION_ERROR,
    REQUEST_CODES_LENGTH,
    SETTINGS_HEADER_TABLE_SIZE,
    H2Client,
    data,
    grpc_request,
    headers,
    hpack_int,
    hpack_string,
    huffman_encode,
    indexed,
    literal,
    table_size_update,
)

#: the static table's entry for ``user-agent`` (RFC 7541 Appendix A)
USER_AGENT = 58
#: the first index past the static table, with nothing in the dynamic table
FIRST_DYNAMIC = 62


def plain_block(client: H2Client) -> bytes:
    """A gRPC call's headers as literals without indexing, new names, no Huffman."""
    fields = grpc_request(authority=f"127.0.0.1:{client.port}")
    return b"".join(literal(n.encode(), v.encode()) for n, v in fields)


def send_request(client: H2Client, block: bytes, end_stream: bool = False) -> None:
    """HEADERS with ``block`` and, unless it ends the stream, a DATA frame with the message."""
    client.send(headers(1, block, end_stream=end_stream))
    if not end_stream:
        client.send(data(1, b"\0\0\0\0\0", end_stream=True))


# ---------------------------------------------------------------------------- accepted


REPRESENTATIONS = {
    "indexed": indexed(USER_AGENT),
    "incremental-indexed-name": literal(USER_AGENT, b"h2spec", "incremental"),
    "incremental-indexed-name-huffman": literal(USER_AGENT, b"h2spec", "incremental", True),
    "incremental-new-name": literal(b"x-test", b"h2spec", "incremental"),
    "incremental-new-name-huffman": literal(b"x-test", b"h2spec", "incremental", True),
    "without-indexed-name": literal(USER_AGENT, b"h2spec", "without"),
    "without-indexed-name-huffman": literal(USER_AGENT, b"h2spec", "without", True),
    "without-new-name": literal(b"x-test", b"h2spec", "without"),
    "without-new-name-huffman": literal(b"x-test", b"h2spec", "without", True),
    "never-indexed-name": literal(USER_AGENT, b"h2spec", "never"),
    "never-indexed-name-huffman": literal(USER_AGENT, b"h2spec", "never", True),
    "never-new-name": literal(b"x-test", b"h2spec", "never"),
    "never-new-name-huffman": literal(b"x-test", b"h2spec", "never", True),
}


@pytest.mark.parametrize("representation", REPRESENTATIONS.values(), ids=REPRESENTATIONS.keys())
def test_field_representation_is_accepted(conn: H2Client, representation: bytes) -> None:
    """h2spec generic/5/1-13: an indexed field, literals with incremental indexing, without
    indexing and never indexed, each with an indexed or a new name, with and without Huffman
    coding: the request is served."""
    send_request(conn, plain_block(conn) + representation)
    conn.expect_grpc_ok(1)


def test_indexed_entry_of_the_dynamic_table(conn: H2Client) -> None:
    """A field added with incremental indexing is the dynamic table's index 62 in the next
    block (RFC 7541 §2.3.3), on the same connection."""
    send_request(conn, plain_block(conn) + literal(b"x-test", b"h2spec", "incremental"))
    conn.expect_grpc_ok(1)
    conn.send(headers(3, plain_block(conn) + indexed(FIRST_DYNAMIC)))
    conn.send(data(3, b"\0\0\0\0\0", end_stream=True))
    conn.expect_grpc_ok(3)


def test_dynamic_table_size_update(conn: H2Client) -> None:
    """h2spec generic/5/14: a block that starts with a dynamic table size update (128) is
    accepted."""
    send_request(conn, table_size_update(128) + plain_block(conn))
    conn.expect_grpc_ok(1)


def test_two_dynamic_table_size_updates(conn: H2Client) -> None:
    """h2spec generic/5/15: two size updates at the start of a block (128, then 4096: the
    smallest and the final size, RFC 7541 §4.2) are accepted."""
    send_request(conn, table_size_update(128) + table_size_update(4096) + plain_block(conn))
    conn.expect_grpc_ok(1)


# ---------------------------------------------------------------------------- decoding errors


def test_indexed_field_past_the_tables(conn: H2Client) -> None:
    """h2spec hpack/2.3.3/1: an indexed field past the static and the dynamic table is a
    decoding error (here index 62, the dynamic table being empty)."""
    send_request(conn, plain_block(conn) + indexed(FIRST_DYNAMIC), end_stream=True)
    conn.expect_connection_error(COMPRESSION_ERROR)


def test_literal_with_a_name_index_past_the_tables(conn: H2Client) -> None:
    """h2spec hpack/2.3.3/2: a literal whose name index is past both tables is a decoding
    error."""
    rep = literal(FIRST_DYNAMIC, b"", "incremental")
    send_request(conn, plain_block(conn) + rep, end_stream=True)
    conn.expect_connection_error(COMPRESSION_ERROR)


def test_table_size_update_after_a_field(conn: H2Client) -> None:
    """h2spec hpack/4.2/1: a dynamic table size update at the end of a block is a decoding
    error (RFC 7541 §4.2: updates come first)."""
    send_request(conn, plain_block(conn) + table_size_update(1), end_stream=True)
    conn.expect_connection_error(COMPRESSION_ERROR)


def _padding(value: bytes) -> int:
    return -sum(REQUEST_CODES_LENGTH[b] for b in value) % 8


HUFFMAN_ERRORS = {
    # the EOS prefix as padding, one octet too long
    "padding-longer-than-7-bits": huffman_encode(b"test", padding="1" * (_padding(b"test") + 8)),
    # padding that is not the EOS prefix
    "padded-by-zero": huffman_encode(b"test", padding="0" * _padding(b"test")),
    # the EOS symbol inside the string
    "eos-symbol": huffman_encode(b"te", eos=True),
}


@pytest.mark.parametrize("value", HUFFMAN_ERRORS.values(), ids=HUFFMAN_ERRORS.keys())
def test_invalid_huffman_string(conn: H2Client, value: bytes) -> None:
    """h2spec hpack/5.2/1-3: a Huffman string padded by more than 7 bits, padded with
    zeros, or holding EOS is a decoding error (RFC 7541 §5.2)."""
    rep = b"\x00" + hpack_string(b"x-test", huffman=True) + hpack_int(len(value), 7, 0x80) + value
    send_request(conn, plain_block(conn) + rep, end_stream=True)
    conn.expect_connection_error(COMPRESSION_ERROR)


def test_indexed_field_zero(conn: H2Client) -> None:
    """h2spec hpack/6.1/1: index 0 is a decoding error (RFC 7541 §6.1)."""
    send_request(conn, plain_block(conn) + indexed(0), end_stream=True)
    conn.expect_connection_error(COMPRESSION_ERROR)


def test_table_size_update_over_the_setting(conn: H2Client) -> None:
    """h2spec hpack/6.3/1: a dynamic table size update over the server's
    SETTINGS_HEADER_TABLE_SIZE (4096 unless announced) is a decoding error."""
    limit = conn.server_settings.get(SETTINGS_HEADER_TABLE_SIZE, 4096)
    send_request(conn, table_size_update(limit + 1) + plain_block(conn), end_stream=True)
    conn.expect_connection_error(COMPRESSION_ERROR)
