"""Framing of HTTP/1.x requests for the listener's ``/infer`` fast path.

:class:`~tritonx._transports.http.aiohttp_internals.Connection` splits the byte stream into requests itself, so
that it can serve plain ``/infer`` requests without aiohttp (:mod:`tritonx._transports.http.fast_infer`)
and still hand every other request to aiohttp's parser whole and in order. It frames only
what ``Content-Length`` frames; anything else (:func:`parse_head` returns None) leaves the
connection to aiohttp for good.
"""

from __future__ import annotations

from dataclasses import dataclass

#: A request head longer than this (no blank line yet) is left to aiohttp, which refuses
#: heads past its own limits.
MAX_HEAD = 64 * 1024
#: aiohttp's limits on a request line or header line, and on the number of header fields
#: (``RequestHandler`` defaults): a head past them is left to aiohttp, which refuses it.
MAX_LINE = 8190
MAX_FIELDS = 128
#: RFC 9110 ``tchar``: the bytes of a field name (llhttp refuses any other with 400)
_TCHAR = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
#: every byte but the controls no head may hold (HTAB, CR and LF are checked where they
#: matter): what ``translate`` deletes to find one
_NOT_CTL = bytes(b for b in range(256) if b in b"\t\r\n" or 0x20 <= b != 0x7F)


@dataclass(slots=True)
class Head:
    """The request line and header fields of one HTTP/1.x request, as framed by
    :func:`parse_head` (field names lower-cased; ``length``: the body's size)."""

    method: bytes
    target: bytes
    version: bytes
    fields: dict[bytes, bytes]
    length: int
    #: no field was repeated (a request with repeated fields is left to aiohttp)
    plain: bool


def parse_head(raw: bytes) -> Head | None:
    """Frame one request head (``raw``: up to, without, its blank line).

    None when the stream cannot be framed by ``Content-Length`` alone: a ``Transfer-Encoding``
    or ``Upgrade`` field, a repeated or malformed ``Content-Length``, a ``CONNECT``, a line
    folded or without a colon, a bare CR or LF, a version other than HTTP/1.0 or 1.1, a head
    past aiohttp's limits (:data:`MAX_LINE`, :data:`MAX_FIELDS`); and a head aiohttp's parser
    (llhttp) refuses: a control byte, a field name that is not a token, an HTTP/1.1 request
    without ``Host``. aiohttp then answers it (400 and the connection closed).
    """
    lines = raw.split(b"\r\n")
    if raw.count(b"\n") >= len(lines) or raw.count(b"\r") >= len(lines):
        return None  # a bare CR or LF: another parser might split lines there
    if raw.translate(None, _NOT_CTL):
        return None  # a control byte
    if len(lines) > MAX_FIELDS + 1 or (
        len(raw) > MAX_LINE and max(len(line) for line in lines) > MAX_LINE
    ):
        return None
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0") or parts[0] == b"CONNECT":
        return None
    fields: dict[bytes, bytes] = {}
    plain = True
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if (
            not colon
            or not name
            or (not name.replace(b"-", b"").isalnum() and name.translate(None, _TCHAR))
        ):
            return None  # (a space before the colon or a folded line: not a token)
        key = name.lower()
        if key in fields:
            if key == b"content-length":
                return None
            plain = False
        fields[key] = value.strip(b" \t")
    if b"transfer-encoding" in fields or b"upgrade" in fields:
        return None
    if b"host" not in fields and parts[2] == b"HTTP/1.1":
        return None  # RFC 9112 3.2: 400 (aiohttp's answer)
    declared = fields.get(b"content-length")
    if declared is None:
        length = 0
    elif declared.isdigit() and len(declared) < 19:
        length = int(declared)
    else:
        return None
    return Head(parts[0], parts[1], parts[2], fields, length, plain)


_HEX = b"0123456789abcdefABCDEF"


def chunked_with_length(raw: bytes) -> tuple[bytes, int] | None:
    """A head with both ``Content-Length`` and ``Transfer-Encoding: chunked`` (which llhttp,
    and so aiohttp, refuses with 400 while Triton's HTTP server de-chunks the body): the head
    without those two fields and the declared length; None for any other head, or one that
    would not be framable without them (a repeated field among the two, another coding)."""
    lines = raw.split(b"\r\n")
    kept = [lines[0]]
    coding: bytes | None = None
    declared: bytes | None = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        key = name.lower()
        if key == b"transfer-encoding":
            if coding is not None:
                return None
            coding = value.strip(b" \t").lower()
        elif key == b"content-length":
            if declared is not None:
                return None
            declared = value.strip(b" \t")
        else:
            kept.append(line)
    if coding != b"chunked" or declared is None or not declared.isdigit() or len(declared) > 18:
        return None
    head = b"\r\n".join(kept)
    if parse_head(head) is None:
        return None
    return head, int(declared)


def dechunk(body: bytes) -> bytes | None:
    """The data of a whole chunked body (chunk extensions and trailer fields dropped); None
    when it is malformed or does not end exactly where ``body`` ends."""
    out = bytearray()
    pos = 0
    size = len(body)
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            return None
        text = body[pos:eol].split(b";", 1)[0].strip(b" \t")
        if not text or len(text) > 16 or text.translate(None, _HEX):
            return None
        length = int(text, 16)
        pos = eol + 2
        if length == 0:
            break
        end = pos + length
        if body[end : end + 2] != b"\r\n":
            return None
        out += body[pos:end]
        pos = end + 2
    while True:  # trailer fields up to the blank line
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            return None
        if eol == pos:
            return bytes(out) if eol + 2 == size else None
        pos = eol + 2
