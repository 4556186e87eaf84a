"""HTTP/2 frame types, flags, error codes and settings (RFC 9113 §6, §7), and frames written
by hand."""

from __future__ import annotations

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
SETTINGS_TIMEOUT = 0x4
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
CONNECT_ERROR = 0xA
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
MAX_FRAME_SIZE = (1 << 24) - 1
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
    """A SETTINGS frame announcing ``settings`` (identifier → value)."""
    payload = b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in settings.items())
    return frame(SETTINGS, 0, 0, payload)


def window_update(stream: int, increment: int) -> bytes:
    """A WINDOW_UPDATE frame (``stream`` 0: the connection's window)."""
    return frame(WINDOW_UPDATE, 0, stream, increment.to_bytes(4, "big"))


def rst_stream(stream: int, code: int) -> bytes:
    """A RST_STREAM frame with error ``code``."""
    return frame(RST_STREAM, 0, stream, code.to_bytes(4, "big"))


def goaway(last_stream: int, code: int, debug: bytes = b"") -> bytes:
    """A GOAWAY frame: streams above ``last_stream`` were not processed."""
    return frame(GOAWAY, 0, 0, last_stream.to_bytes(4, "big") + code.to_bytes(4, "big") + debug)
