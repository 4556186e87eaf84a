"""RFC 7541 Appendix C: the header-block examples fed to tritonx's HPACK decoder.

C.2 (one representation each, a new decoder each), C.3 and C.4 (three requests on one
connection, without and with Huffman coding, a 4096-octet table), C.5 and C.6 (three
responses, a 256-octet table, so entries are evicted): the decoded header lists and the
dynamic table after each block, as the RFC lists them.

The table is checked through the decoder's one public method, :meth:`decode`: every entry the
RFC lists resolves at its index (62 on) and the index after the last one does not
(COMPRESSION_ERROR); its size, by replaying the blocks and adding one entry that exactly fills
the rest of the table (nothing is evicted) or one octet more (the oldest entry goes). Where
the decoder also shows its table (``table`` / ``table_size``), those are compared too.
"""

from __future__ import annotations

from typing import Any

import pytest
from h2frames import indexed, literal

try:
    from tritonx._transports.http2.hpack import HeaderDecoder
except ImportError:  # before the HTTP/2 layer moved out of tritonx._transports.grpc
    from tritonx._transports.grpc.http2 import HeaderDecoder  # type: ignore[assignment,no-redef,unused-ignore]

COMPRESSION_ERROR = 0x9
#: size an entry takes beyond its name and value (RFC 7541 §4.1)
ENTRY_OVERHEAD = 32
STATIC_ENTRIES = 61

Fields = list[tuple[str, str]]


def octets(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def encoded(fields: Fields) -> list[tuple[bytes, bytes]]:
    return [(n.encode(), v.encode()) for n, v in fields]


def size_of(entries: Fields) -> int:
    return sum(len(n) + len(v) + ENTRY_OVERHEAD for n, v in entries)


# ---------------------------------------------------------------------------- the vectors

#: C.2.1-C.2.4: (block, decoded list, dynamic table after it, table size)
C2 = {
    "C.2.1": (
        "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
        [("custom-key", "custom-header")],
        [("custom-key", "custom-header")],
        55,
    ),
    "C.2.2": ("040c 2f73 616d 706c 652f 7061 7468", [(":path", "/sample/path")], [], 0),
    "C.2.3": ("1008 7061 7373 776f 7264 0673 6563 7265 74", [("password", "secret")], [], 0),
    "C.2.4": ("82", [(":method", "GET")], [], 0),
}

REQUESTS: list[Fields] = [
    [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")],
    [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
        ("cache-control", "no-cache"),
    ],
    [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ],
]
REQUEST_TABLES: list[tuple[Fields, int]] = [
    ([(":authority", "www.example.com")], 57),
    ([("cache-control", "no-cache"), (":authority", "www.example.com")], 110),
    (
        [
            ("custom-key", "custom-value"),
            ("cache-control", "no-cache"),
            (":authority", "www.example.com"),
        ],
        164,
    ),
]
#: C.3.1-C.3.3: requests, no Huffman coding
C3 = [
    "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
    "8286 84be 5808 6e6f 2d63 6163 6865",
    "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
]
#: C.4.1-C.4.3: the same requests, Huffman-coded
C4 = [
    "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
    "8286 84be 5886 a8eb 1064 9cbf",
    "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
]

DATE_1 = "Mon, 21 Oct 2013 20:13:21 GMT"
DATE_2 = "Mon, 21 Oct 2013 20:13:22 GMT"
LOCATION = "https://www.example.com"
COOKIE = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
RESPONSES: list[Fields] = [
    [(":status", "302"), ("cache-control", "private"), ("date", DATE_1), ("location", LOCATION)],
    [(":status", "307"), ("cache-control", "private"), ("date", DATE_1), ("location", LOCATION)],
    [
        (":status", "200"),
        ("cache-control", "private"),
        ("date", DATE_2),
        ("location", LOCATION),
        ("content-encoding", "gzip"),
        ("set-cookie", COOKIE),
    ],
]
RESPONSE_TABLES: list[tuple[Fields, int]] = [
    (
        [
            ("location", LOCATION),
            ("date", DATE_1),
            ("cache-control", "private"),
            (":status", "302"),
        ],
        222,
    ),
    (
        [
            (":status", "307"),
            ("location", LOCATION),
            ("date", DATE_1),
            ("cache-control", "private"),
        ],
        222,
    ),
    ([("set-cookie", COOKIE), ("content-encoding", "gzip"), ("date", DATE_2)], 215),
]
#: C.5.1-C.5.3: responses, no Huffman coding, a 256-octet table
C5 = [
    "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 "
    "303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 "
    "6f6d",
    "4803 3330 37c1 c0bf",
    "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 "
    "5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 "
    "5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
]
#: C.6.1-C.6.3: the same responses, Huffman-coded
C6 = [
    "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b "
    "ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
    "4883 640e ffc1 c0bf",
    "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad "
    "94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 "
    "65c0 03ed 4ee5 b106 3d50 07",
]

#: (id, table size, blocks, decoded lists, tables after each block)
SEQUENCES = [
    ("C.3", 4096, C3, REQUESTS, REQUEST_TABLES),
    ("C.4", 4096, C4, REQUESTS, REQUEST_TABLES),
    ("C.5", 256, C5, RESPONSES, RESPONSE_TABLES),
    ("C.6", 256, C6, RESPONSES, RESPONSE_TABLES),
]


# ---------------------------------------------------------------------------- checks


def refused(decoder: Any, block: bytes) -> int | None:
    """The error code the decoder raises for ``block`` (None: it decoded)."""
    try:
        decoder.decode(block)
    except Exception as exc:
        return int(getattr(exc, "code", -1))
    return None


def check_table(decoder: Any, table: Fields, size: int) -> None:
    """Each entry of ``table`` resolves at its index; the index after the last does not."""
    assert size_of(table) == size  # (the RFC's sizes agree with its entries)
    for position, entry in enumerate(table, start=STATIC_ENTRIES + 1):
        assert list(decoder.decode(indexed(position))) == encoded([entry]), position
    past = STATIC_ENTRIES + len(table) + 1
    assert refused(decoder, indexed(past)) == COMPRESSION_ERROR, f"index {past} resolved"
    if hasattr(decoder, "table"):
        assert list(decoder.table) == encoded(table)
    if hasattr(decoder, "table_size"):
        assert decoder.table_size == size


def check_size(blocks: list[bytes], max_size: int, table: Fields, size: int) -> None:
    """The table after ``blocks`` holds ``size`` octets: an entry of ``max_size - size``
    octets fits beside the others, one octet more evicts the oldest (when there is one)."""
    for extra in (0, 1) if table else (0,):
        decoder = HeaderDecoder(max_size)
        for block in blocks:
            decoder.decode(block)
        value = b"v" * (max_size - size + extra - ENTRY_OVERHEAD - 1)
        filler = literal(b"x", value, "incremental")
        assert list(decoder.decode(filler)) == [(b"x", value)]
        kept = table if extra == 0 else table[:-1]
        expected = [(b"x", value), *encoded(kept)]
        for position, entry in enumerate(expected, start=STATIC_ENTRIES + 1):
            assert list(decoder.decode(indexed(position))) == [entry], (extra, position)
        past = STATIC_ENTRIES + len(expected) + 1
        assert refused(decoder, indexed(past)) == COMPRESSION_ERROR, (extra, past)


# ---------------------------------------------------------------------------- tests


@pytest.mark.parametrize("vector", C2.values(), ids=C2.keys())
def test_single_representation(vector: tuple[str, Fields, Fields, int]) -> None:
    """C.2.1-C.2.4: a literal with indexing, without indexing, never indexed, an indexed
    field; each on a new decoder."""
    block, fields, table, size = vector
    decoder = HeaderDecoder(4096)
    assert list(decoder.decode(octets(block))) == encoded(fields)
    check_table(decoder, table, size)
    check_size([octets(block)], 4096, table, size)


@pytest.mark.parametrize(
    ("max_size", "blocks", "lists", "tables"),
    [sequence[1:] for sequence in SEQUENCES],
    ids=[sequence[0] for sequence in SEQUENCES],
)
def test_sequence_of_blocks(
    max_size: int, blocks: list[str], lists: list[Fields], tables: list[tuple[Fields, int]]
) -> None:
    """C.3-C.6: three blocks on one decoder: each decodes to the RFC's list and leaves the
    RFC's table (the 256-octet tables of C.5/C.6 evict)."""
    decoder = HeaderDecoder(max_size)
    sent: list[bytes] = []
    for step, (block, fields, (table, size)) in enumerate(zip(blocks, lists, tables, strict=True)):
        sent.append(octets(block))
        assert list(decoder.decode(octets(block))) == encoded(fields), step
        check_table(decoder, table, size)
        check_size(sent, max_size, table, size)
