"""HTTP/2 pieces of the event-loop gRPC engine (:mod:`tritonx.grpc.connection`): frame types,
flags and error codes (RFC 9113), frames written by hand, HPACK decoding (RFC 7541) and the
header blocks of answers.

Decoding: a connection's :class:`HeaderDecoder` keeps the client's dynamic table. gRPC clients
index every header they repeat, so from the second call on a request's block is a few bytes of
indexed fields (``0x83 0x86 0xc4 ...``); such a block changes no table, and the same bytes
decode to the same headers until the table changes: the last one is kept decoded. Huffman
strings are decoded by ``hpack``'s table decoder (``hpack`` ships with ``h2``).

Encoding: answers carry a handful of headers; they are written as literals without indexing
(no encoder state; the peer's table is never touched), with ``:status: 200`` from the static
table, so the blocks of common answers are built once (:data:`RESPONSE_HEADERS`,
:data:`OK_TRAILERS`).
"""

from __future__ import annotations

import base64
from collections import deque

from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# frame types (RFC 9113 §6)
DATA = 0x0
HEADERS = 0x1
PRIORITY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PUSH_PROMISE = 0x5
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9

# flags
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# error codes (RFC 9113 §7)
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
ENHANCE_YOUR_CALM = 0xB

# settings (RFC 9113 §6.5.2)
SETTINGS_HEADER_TABLE_SIZE = 0x1
SETTINGS_ENABLE_PUSH = 0x2
SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
SETTINGS_MAX_FRAME_SIZE = 0x5
SETTINGS_MAX_HEADER_LIST_SIZE = 0x6

DEFAULT_WINDOW = 65535
DEFAULT_FRAME_SIZE = 16384
MAX_WINDOW = 2**31 - 1


class ConnectionError_(Exception):
    """A connection error (RFC 9113 §5.4.1): GOAWAY with ``code``, then the connection
    closes."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def frame_header(kind: int, flags: int, stream: int, length: int) -> bytes:
    """The 9-byte header of a frame of ``length`` payload bytes."""
    return (
        length.to_bytes(3, "big") + bytes((kind, flags)) + (stream & 0x7FFFFFFF).to_bytes(4, "big")
    )


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One whole frame."""
    return frame_header(kind, flags, stream, len(payload)) + payload


def settings_frame(settings: dict[int, int]) -> bytes:
    payload = b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in settings.items())
    return frame(SETTINGS, 0, 0, payload)


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, increment.to_bytes(4, "big"))


def rst_stream(stream: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream, code.to_bytes(4, "big"))


def goaway(last_stream: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, last_stream.to_bytes(4, "big") + code.to_bytes(4, "big") + debug)


# ---------------------------------------------------------------------------- HPACK decoding

_STATIC = HeaderTable.STATIC_TABLE  # 1-based in HPACK: entry i is _STATIC[i - 1]
_STATIC_LEN = len(_STATIC)
#: Huffman strings up to this size are kept decoded (user-agent and the like repeat)
MAX_CACHED_STRING = 256
#: size an entry takes in the dynamic table beyond its name and value (RFC 7541 §4.1)
ENTRY_OVERHEAD = 32


class HeaderDecoder:
    """HPACK decoder of one connection's request header blocks.

    :param max_table_size: the ``SETTINGS_HEADER_TABLE_SIZE`` this side announced (the
        largest dynamic table the client's encoder may use).
    :raises ConnectionError_: COMPRESSION_ERROR for a block that does not decode (the
        connection cannot continue: the tables of both sides may differ).
    """

    __slots__ = ("_cached", "_cached_block", "_huffman", "_limit", "_max", "_size", "_table")

    def __init__(self, max_table_size: int = 4096) -> None:
        self._table: deque[tuple[bytes, bytes]] = deque()
        self._size = 0
        self._limit = max_table_size  # what SETTINGS allow
        self._max = max_table_size  # what the encoder chose (≤ _limit)
        self._cached_block = b""
        self._cached: list[tuple[bytes, bytes]] = []
        #: Huffman-coded strings seen, decoded (values such as user-agent repeat)
        self._huffman: dict[bytes, bytes] = {}

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """The (name, value) pairs of ``block``, in order."""
        if block == self._cached_block:
            return self._cached
        try:
            headers, indexed_only = self._decode(block)
        except ConnectionError_:
            raise
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
            return raw, end
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
        return decoded, end

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if index <= 0:
            raise ValueError("index 0")
        if index <= _STATIC_LEN:
            return _STATIC[index - 1]
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

    def _decode(self, data: bytes) -> tuple[list[tuple[bytes, bytes]], bool]:
        headers: list[tuple[bytes, bytes]] = []
        indexed_only = True
        pos = 0
        end = len(data)
        started = False
        while pos < end:
            byte = data[pos]
            if byte & 0x80:  # indexed field
                index, pos = self._integer(data, pos, 7)
                headers.append(self._entry(index))
                started = True
                continue
            indexed_only = False
            if byte & 0x40:  # literal with incremental indexing
                index, pos = self._integer(data, pos, 6)
                name = self._entry(index)[0] if index else None
                if name is None:
                    name, pos = self._string(data, pos)
                value, pos = self._string(data, pos)
                self._add(name, value)
                self._cached_block = b""  # the table changed: indices move
            elif byte & 0x20:  # dynamic table size update, only before the first field
                if started:
                    raise ValueError("table size update after a header field")
                size, pos = self._integer(data, pos, 5)
                self._resize(size)
                self._cached_block = b""
                continue
            else:  # literal without indexing (0000) or never indexed (0001)
                index, pos = self._integer(data, pos, 4)
                name = self._entry(index)[0] if index else None
                if name is None:
                    name, pos = self._string(data, pos)
                value, pos = self._string(data, pos)
            headers.append((name, value))
            started = True
        return headers, indexed_only


# ---------------------------------------------------------------------------- HPACK encoding


def _int(value: int, prefix: int, first: int = 0) -> bytes:
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
    return b"\x00" + _int(len(name), 7) + name + _int(len(value), 7) + value


#: ``:status: 200`` (static entry 8) and ``content-type: application/grpc``
RESPONSE_HEADERS = b"\x88" + literal(b"content-type", b"application/grpc")
#: the trailers of a call that succeeded
OK_TRAILERS = literal(b"grpc-status", b"0")

#: bytes sent as they are in ``grpc-message``; the others become ``%XX`` (gRPC's spec)
_PLAIN = frozenset(range(0x20, 0x7F)) - {0x25}


def percent_encode(message: str) -> bytes:
    data = message.encode("utf-8", "replace")
    if all(b in _PLAIN for b in data):
        return data
    return b"".join(bytes((b,)) if b in _PLAIN else b"%%%02X" % b for b in data)


def metadata_block(
    pairs: list[tuple[str, str | bytes]] | tuple[tuple[str, str | bytes], ...],
) -> bytes:
    """Custom metadata as literals (``-bin`` values base64-encoded, unpadded as gRPC sends
    them)."""
    out = []
    for key, value in pairs:
        name = key.lower().encode("ascii")
        if name.endswith(b"-bin"):
            raw = value if isinstance(value, bytes) else value.encode("utf-8")
            encoded = base64.b64encode(raw).rstrip(b"=")
        else:
            encoded = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        out.append(literal(name, encoded))
    return b"".join(out)


def status_block(code: int, message: str) -> bytes:
    """``grpc-status`` and, when not empty, ``grpc-message``."""
    block = literal(b"grpc-status", str(code).encode("ascii"))
    if message:
        block += literal(b"grpc-message", percent_encode(message))
    return block
