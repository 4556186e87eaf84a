"""gRPC's headers on HTTP/2 (the event-loop engine): the header blocks of answers and
trailers, and call metadata as handlers get it.

Answers carry a handful of headers; they are written as HPACK literals without indexing (no
encoder state; the client's table is never touched), with ``:status: 200`` from the static
table, so the blocks of common answers are built once (:data:`RESPONSE_HEADERS`,
:data:`OK_TRAILERS`).
"""

from __future__ import annotations

import base64

from tritonx._transports.http2.hpack import literal

#: ``:status: 200`` (static entry 8) and ``content-type: application/grpc``
RESPONSE_HEADERS = b"\x88" + literal(b"content-type", b"application/grpc")
#: the trailers of a call that succeeded
OK_TRAILERS = literal(b"grpc-status", b"0")
#: ``:status: 415`` (name from static entry 8, no value index): not a gRPC request
STATUS_415 = b"\x08\x03415"

#: bytes sent as they are in ``grpc-message``; the others become ``%XX`` (gRPC's spec)
_PLAIN = frozenset(range(0x20, 0x7F)) - {0x25}

Metadata = tuple[tuple[str, str | bytes], ...]


def percent_encode(message: str) -> bytes:
    """``grpc-message``'s encoding of ``message``."""
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


def decode_metadata(pairs: tuple[tuple[bytes, bytes], ...]) -> Metadata:
    """Metadata as grpc hands it to handlers: names as text, ``-bin`` values base64-decoded
    to bytes (a value that does not decode is left out), others as text."""
    out: list[tuple[str, str | bytes]] = []
    for name, value in pairs:
        key = name.decode("latin-1")
        if key.endswith("-bin"):
            try:
                out.append((key, base64.b64decode(value + b"=" * (-len(value) % 4))))
            except ValueError:
                continue
        else:
            out.append((key, value.decode("utf-8", "replace")))
    return tuple(out)
