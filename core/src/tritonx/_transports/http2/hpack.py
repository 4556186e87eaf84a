"""HPACK (RFC 7541): the bounded decoder of request header blocks, and the literal encoding of
answers.

Decoding: a connection's :class:`HeaderDecoder` keeps the client's dynamic table. gRPC clients
index every header they repeat, so from the second call on a request's block is a few bytes of
indexed fields (``0x83 0x86 0xc4 ...``); such a block changes no table, and the same bytes
decode to the same headers until the table changes: the last one is kept decoded (the same
list object is returned, so a caller may cache what it derives from it by identity).

Bounds: the decoded header list is counted as it grows (RFC 9113 §6.5.2's size: name, value
and 32 per field, and at least :data:`FIELD_COST` a field); past ``max_list_size`` decoding stops and the block is refused as a
compression bomb (:class:`~tritonx._transports.http2.frames.ConnectionError_` ENHANCE_YOUR_CALM: the
connection cannot continue, its table is no longer the client's). A Huffman string is decoded
only after its input is charged to the budget (decoding costs per input byte); a block may
update the table size twice at most.
Huffman strings are decoded by ``hpack``'s table decoder (``hpack`` ships with ``h2``; the
one name used below its public API is guarded by ``tests/unit/http2/test_hpack_guard.py``).

Encoding: answers carry a handful of headers; they are written as literals without indexing
(no encoder state; the peer's table is never touched).
"""

from __future__ import annotations

from collections import deque

from hpack.huffman_table import decode_huffman

from tritonx._transports.http2.frames import COMPRESSION_ERROR, ENHANCE_YOUR_CALM, ConnectionError_

#: RFC 7541 Appendix A (entry i is STATIC_TABLE[i - 1])
STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = (
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
)
_STATIC_LEN = len(STATIC_TABLE)
#: Huffman strings up to this size are kept decoded (user-agent and the like repeat)
MAX_CACHED_STRING = 256
#: size an entry takes in the dynamic table, and a field in a header list, beyond its name and
#: value (RFC 7541 §4.1, RFC 9113 §6.5.2)
ENTRY_OVERHEAD = 32
#: what a field costs the decoding budget at least: the work per field does not shrink with its
#: size, so a block of one-byte fields reaches the budget at a few hundred fields
FIELD_COST = 128

Headers = list[tuple[bytes, bytes]]


class _TooLarge(Exception):
    pass


class HeaderDecoder:
    """HPACK decoder of one connection's request header blocks.

    :param max_table_size: the ``SETTINGS_HEADER_TABLE_SIZE`` this side announced (the
        largest dynamic table the client's encoder may use).
    :param max_list_size: the largest header list decoded; a block that decodes to more is a
        compression bomb (decoding stops there).
    :raises ConnectionError_: COMPRESSION_ERROR for a block that does not decode,
        ENHANCE_YOUR_CALM for one past ``max_list_size`` (either way the connection cannot
        continue: the tables of both sides may differ).
    """

    __slots__ = (
        "_budget",
        "_cached",
        "_cached_block",
        "_huffman",
        "_limit",
        "_max",
        "_max_list",
        "_size",
        "_table",
    )

    def __init__(self, max_table_size: int = 4096, max_list_size: int = 64 << 10) -> None:
        self._table: deque[tuple[bytes, bytes]] = deque()
        self._size = 0
        self._limit = max_table_size  # what SETTINGS allow
        self._max = max_table_size  # what the encoder chose (≤ _limit)
        self._max_list = max_list_size
        self._budget = 0
        self._cached_block = b""
        self._cached: Headers = []
        #: Huffman-coded strings seen, decoded (values such as user-agent repeat)
        self._huffman: dict[bytes, bytes] = {}

    @property
    def table_size(self) -> int:
        """The dynamic table's size (RFC 7541 §4.1)."""
        return self._size

    @property
    def table(self) -> tuple[tuple[bytes, bytes], ...]:
        """The dynamic table's entries, newest first (index 62 is the first)."""
        return tuple(self._table)

    def decode(self, block: bytes) -> Headers:
        """The (name, value) pairs of ``block``, in order."""
        if block == self._cached_block:
            return self._cached
        try:
            headers, indexed_only = self._decode(block)
        except _TooLarge:
            raise ConnectionError_(
                ENHANCE_YOUR_CALM, f"header list larger than {self._max_list} bytes"
            ) from None
        except (IndexError, ValueError) as exc:
            raise ConnectionError_(COMPRESSION_ERROR, f"invalid header block: {exc}") from None
        if indexed_only:
            self._cached_block, self._cached = block, headers
        return headers

    def _integer(self, data: bytes, pos: int, prefix: int) -> tuple[int, int]:
        mask = (1 << prefix) - 1
        value = data[pos] & mask
        pos += 1
        if value < mask:
            return value, pos
        shift = 0
        while True:
            byte = data[pos]
            pos += 1
            value += (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7
            if shift > 28:
                raise ValueError("integer too large")

    def _string(self, data: bytes, pos: int) -> tuple[bytes, int]:
        huffman = data[pos] & 0x80
        length, pos = self._integer(data, pos, 7)
        end = pos + length
        if end > len(data):
            raise ValueError("string past the end of the block")
        raw = data[pos:end]
        if not huffman:
            self._spend(length)
            return raw, end
        # charged for its input (decoding costs per input byte) before it is decoded
        self._spend(length)
        cacheable = length <= MAX_CACHED_STRING
        decoded = self._huffman.get(raw) if cacheable else None
        if decoded is None:
            try:
                decoded = decode_huffman(raw)
            except Exception as exc:  # hpack's HPACKDecodingError
                raise ValueError(f"invalid Huffman string: {exc}") from None
            if cacheable:
                if len(self._huffman) >= 256:
                    self._huffman.clear()
                self._huffman[raw] = decoded
        self._spend(max(0, len(decoded) - length))
        return decoded, end

    def _spend(self, size: int) -> None:
        self._budget -= size
        if self._budget < 0:
            raise _TooLarge

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if index <= 0:
            raise ValueError("index 0")
        if index <= _STATIC_LEN:
            return STATIC_TABLE[index - 1]
        return self._table[index - _STATIC_LEN - 1]  # IndexError past the table

    def _add(self, name: bytes, value: bytes) -> None:
        size = len(name) + len(value) + ENTRY_OVERHEAD
        table = self._table
        while table and self._size + size > self._max:
            old_name, old_value = table.pop()
            self._size -= len(old_name) + len(old_value) + ENTRY_OVERHEAD
        if size <= self._max:
            table.appendleft((name, value))
            self._size += size

    def _resize(self, size: int) -> None:
        if size > self._limit:
            raise ValueError(f"table size {size} above the announced {self._limit}")
        self._max = size
        table = self._table
        while table and self._size > size:
            old_name, old_value = table.pop()
            self._size -= len(old_name) + len(old_value) + ENTRY_OVERHEAD

    def _literal(self, data: bytes, pos: int, prefix: int) -> tuple[bytes, bytes, int]:
        """A literal field (its name indexed with a ``prefix``-bit index, or a string), charged
        to the budget; its name, value and the position after it."""
        index, pos = self._integer(data, pos, prefix)
        if index:
            name = self._entry(index)[0]
            self._spend(len(name))
        else:
            name, pos = self._string(data, pos)
        value, pos = self._string(data, pos)
        self._spend(max(ENTRY_OVERHEAD, FIELD_COST - len(name) - len(value)))
        return name, value, pos

    def _decode(self, data: bytes) -> tuple[Headers, bool]:
        headers: Headers = []
        indexed_only = True
        pos = 0
        end = len(data)
        started = False
        updates = 0
        self._budget = self._max_list
        while pos < end:
            byte = data[pos]
            if byte & 0x80:  # indexed field
                index, pos = self._integer(data, pos, 7)
                entry = self._entry(index)
                self._spend(max(FIELD_COST, len(entry[0]) + len(entry[1]) + ENTRY_OVERHEAD))
                headers.append(entry)
                started = True
                continue
            indexed_only = False
            if byte & 0x40:  # literal with incremental indexing
                name, value, pos = self._literal(data, pos, 6)
                self._add(name, value)
                self._cached_block = b""  # the table changed: indices move
            elif byte & 0x20:  # dynamic table size update, only before the first field
                if started:
                    raise ValueError("table size update after a header field")
                updates += 1
                if updates > 2:  # RFC 7541 §4.2: at most two, at the start of a block
                    raise ValueError("more than two table size updates")
                size, pos = self._integer(data, pos, 5)
                self._resize(size)
                self._cached_block = b""
                continue
            else:  # literal without indexing (0000) or never indexed (0001)
                name, value, pos = self._literal(data, pos, 4)
            headers.append((name, value))
            started = True
        return headers, indexed_only


# ---------------------------------------------------------------------------- encoding


def encode_integer(value: int, prefix: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 §5.1) with a ``prefix``-bit prefix, ``first`` holding the
    bits above it."""
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: bytes, value: bytes) -> bytes:
    """A header as a literal without indexing, its name and value as they are."""
    return b"\x00" + encode_integer(len(name), 7) + name + encode_integer(len(value), 7) + value
