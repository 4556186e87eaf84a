"""The checks of a request's header list (RFC 9113 §8.2-8.3): pseudo-headers, field names and
values, connection-specific fields and ``content-length``."""

from __future__ import annotations

import re

from tritonx._transports.http2.hpack import Headers

#: request pseudo-headers (RFC 9113 §8.3.1)
_REQUEST_PSEUDO = frozenset((b":method", b":scheme", b":authority", b":path"))
_REQUIRED_PSEUDO = frozenset((b":method", b":scheme", b":path"))
#: connection-specific fields (RFC 9113 §8.2.2)
_CONNECTION_FIELDS = frozenset(
    (b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade")
)
#: a field name holds lower-case token characters only; a value no NUL, CR or LF and no
#: leading or trailing space or tab (RFC 9113 §8.2.1)
_BAD_NAME = re.compile(rb"[^a-z0-9!#$%&'*+\-.^_`|~]")
_BAD_VALUE = re.compile(rb"[\x00\r\n]|^[ \t]|[ \t]$")


def check_request(headers: Headers) -> int:
    """Check a request's header list (RFC 9113 §8.2-8.3): -2 when malformed, else its
    ``content-length`` (-1: none)."""
    seen: set[bytes] = set()
    regular = False
    length = -1
    for name, value in headers:
        if name[:1] == b":":
            if regular or name not in _REQUEST_PSEUDO or name in seen:
                return -2
            seen.add(name)
            if name == b":path" and not value:
                return -2
            continue
        regular = True
        if _BAD_NAME.search(name) is not None or not name:
            return -2
        if name in _CONNECTION_FIELDS or (name == b"te" and value != b"trailers"):
            return -2
        if _BAD_VALUE.search(value) is not None:
            return -2
        if name == b"content-length":
            if not value.isdigit() or (length >= 0 and int(value) != length):
                return -2
            length = int(value)
    if not _REQUIRED_PSEUDO <= seen:  # (no CONNECT here)
        return -2
    return length
