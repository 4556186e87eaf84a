"""HTTP/2 frames written and read by hand for the conformance suite (RFC 9113, RFC 7541).

Frames are built byte by byte (so a test can make any of them malformed); header blocks of
valid requests come from ``hpack``'s public :class:`hpack.Encoder` (one per connection, so
the server's decoder follows its dynamic table). :class:`H2Client` is one TCP connection
that reads the server's frames back and checks the outcome a case expects:

* :meth:`H2Client.expect_connection_error`: a GOAWAY with one of the codes, then the
  connection closed (RFC 9113 §5.4.1). h2spec's verifier also passes a connection that closes
  without GOAWAY; here that passes only where h2spec's requirement is "the endpoint MUST
  terminate the TCP connection" (``bare_close=True``), since §5.4.1 says the endpoint SHOULD
  first send GOAWAY.
* :meth:`H2Client.expect_stream_error`: RST_STREAM with one of the codes on the stream, or
  (as h2spec accepts) a connection error of one of the codes.

Nothing waits on time: after the frames under test the client sends a PING with a payload
of its own (the *sentinel*). A server handles frames in order, so its PING ACK coming before
the answer the case expects means the server read the frames and did not react: the check
fails at once, naming what came instead. Socket timeouts only bound a hung server.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import hpack
import pytest
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#: bounds a read that would otherwise wait for ever on a hung server (never a synchronisation)
READ_TIMEOUT = float(os.environ.get("TRITONX_CONFORMANCE_TIMEOUT", "20"))

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
FRAME_NAMES = {
    DATA: "DATA",
    HEADERS: "HEADERS",
    PRIORITY: "PRIORITY",
    RST_STREAM: "RST_STREAM",
    SETTINGS: "SETTINGS",
    PUSH_PROMISE: "PUSH_PROMISE",
    PING: "PING",
    GOAWAY: "GOAWAY",
    WINDOW_UPDATE: "WINDOW_UPDATE",
    CONTINUATION: "CONTINUATION",
}

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
INADEQUATE_SECURITY = 0xC
HTTP_1_1_REQUIRED = 0xD
ERROR_NAMES = {
    NO_ERROR: "NO_ERROR",
    PROTOCOL_ERROR: "PROTOCOL_ERROR",
    INTERNAL_ERROR: "INTERNAL_ERROR",
    FLOW_CONTROL_ERROR: "FLOW_CONTROL_ERROR",
    SETTINGS_TIMEOUT: "SETTINGS_TIMEOUT",
    STREAM_CLOSED: "STREAM_CLOSED",
    FRAME_SIZE_ERROR: "FRAME_SIZE_ERROR",
    REFUSED_STREAM: "REFUSED_STREAM",
    CANCEL: "CANCEL",
    COMPRESSION_ERROR: "COMPRESSION_ERROR",
    CONNECT_ERROR: "CONNECT_ERROR",
    ENHANCE_YOUR_CALM: "ENHANCE_YOUR_CALM",
    INADEQUATE_SECURITY: "INADEQUATE_SECURITY",
    HTTP_1_1_REQUIRED: "HTTP_1_1_REQUIRED",
}

# settings (RFC 9113 §6.5.2)
SETTINGS_HEADER_TABLE_SIZE = 0x1
SETTINGS_ENABLE_PUSH = 0x2
SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
SETTINGS_MAX_FRAME_SIZE = 0x5
SETTINGS_MAX_HEADER_LIST_SIZE = 0x6

DEFAULT_FRAME_SIZE = 16384
MAX_WINDOW = 2**31 - 1

#: gRPC methods every tritonx server serves, whatever its models
SERVER_LIVE = "/inference.GRPCInferenceService/ServerLive"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
#: a gRPC message: not compressed, 0 bytes (an empty ServerLiveRequest / HealthCheckRequest)
EMPTY_MESSAGE = b"\x00\x00\x00\x00\x00"


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, f"0x{code:x}")


# ---------------------------------------------------------------------------- frames out


def frame(
    kind: int, flags: int, stream: int, payload: bytes = b"", reserved: bool = False
) -> bytes:
    """One frame; ``reserved`` sets the R bit before the stream identifier."""
    sid = (stream & 0x7FFFFFFF) | (0x80000000 if reserved else 0)
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes((kind, flags))
        + struct.pack(">I", sid)
        + payload
    )


def padded(payload: bytes, pad: int | None) -> tuple[bytes, int]:
    """``payload`` with a pad length byte and ``pad`` zero octets (RFC 9113 §6.1), and the
    PADDED flag; as it is when ``pad`` is None."""
    if pad is None:
        return payload, 0
    return bytes((pad,)) + payload + bytes(pad), PADDED


def priority_fields(depends_on: int = 0, weight: int = 255, exclusive: bool = False) -> bytes:
    """The 5 octets of a priority (stream dependency, E bit, weight - 1 in the octet)."""
    return struct.pack(">IB", (depends_on & 0x7FFFFFFF) | (0x80000000 if exclusive else 0), weight)


def data(
    stream: int, payload: bytes = b"", end_stream: bool = False, pad: int | None = None
) -> bytes:
    body, flags = padded(payload, pad)
    return frame(DATA, flags | (END_STREAM if end_stream else 0), stream, body)


def headers(
    stream: int,
    block: bytes,
    end_stream: bool = False,
    end_headers: bool = True,
    pad: int | None = None,
    priority: bytes | None = None,
) -> bytes:
    """A HEADERS frame; ``priority`` (:func:`priority_fields`) sets the PRIORITY flag."""
    flags = (END_STREAM if end_stream else 0) | (END_HEADERS if end_headers else 0)
    if priority is not None:
        block = priority + block
        flags |= PRIORITY_FLAG
    body, pad_flag = padded(block, pad)
    return frame(HEADERS, flags | pad_flag, stream, body)


def continuation(stream: int, block: bytes, end_headers: bool = True) -> bytes:
    return frame(CONTINUATION, END_HEADERS if end_headers else 0, stream, block)


def priority(stream: int, depends_on: int = 0, weight: int = 255, exclusive: bool = False) -> bytes:
    return frame(PRIORITY, 0, stream, priority_fields(depends_on, weight, exclusive))


def rst_stream(stream: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream, struct.pack(">I", code))


def settings(*pairs: tuple[int, int], ack: bool = False) -> bytes:
    payload = b"".join(struct.pack(">HI", key, value) for key, value in pairs)
    return frame(SETTINGS, ACK if ack else 0, 0, payload)


def ping(payload: bytes = bytes(8), ack: bool = False) -> bytes:
    return frame(PING, ACK if ack else 0, 0, payload)


def goaway(last_stream: int = 0, code: int = NO_ERROR, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", last_stream, code) + debug)


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", increment))


def grpc_message(body: bytes = b"") -> bytes:
    """A gRPC message (5-byte prefix: not compressed, length) around ``body``."""
    return b"\x00" + struct.pack(">I", len(body)) + body


def filler_message(size: int) -> bytes:
    """A gRPC message of exactly ``size`` bytes (prefix included) whose body parses as any
    protobuf message: unknown fields (number 15), a length-delimited one of ``x`` octets and,
    where its length's own size leaves one octet over, a varint one first."""
    for lead in (b"", b"\x78\x00"):
        rest = size - 5 - len(lead)
        for n in range(max(0, rest - 4), rest):
            if 1 + len(_varint(n)) + n == rest:
                return grpc_message(lead + b"\x7a" + _varint(n) + b"x" * n)
    raise ValueError(f"no filler message of {size} bytes")


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def grpc_request(
    path: str = SERVER_LIVE, authority: str = "127.0.0.1", extra: Sequence[tuple[str, str]] = ()
) -> list[tuple[str, str]]:
    """The header list of a gRPC call (POST, http, ``path``, application/grpc, te: trailers)."""
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *extra,
    ]


# ---------------------------------------------------------------------------- HPACK by hand


def hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 §5.1) with ``first``'s high bits in its first octet."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    return bytes((first | limit,)) + _varint(value - limit)


def hpack_string(value: bytes, huffman: bool = False) -> bytes:
    """A string literal (RFC 7541 §5.2), Huffman-coded when ``huffman``."""
    if huffman:
        value = huffman_encode(value)
    return hpack_int(len(value), 7, 0x80 if huffman else 0) + value


def huffman_encode(value: bytes, padding: str | None = None, eos: bool = False) -> bytes:
    """``value`` in HPACK's Huffman code (RFC 7541 Appendix B). The last octet is padded
    with 1 bits (the EOS prefix) unless ``padding`` gives the padding bits as ``"0"``/``"1"``
    characters (possibly longer than an octet); ``eos`` writes the EOS symbol (256) after
    ``value``."""
    bits = "".join(format(REQUEST_CODES[b], f"0{REQUEST_CODES_LENGTH[b]}b") for b in value)
    if eos:
        bits += format(REQUEST_CODES[256], f"0{REQUEST_CODES_LENGTH[256]}b")
    if padding is None:
        padding = "1" * (-len(bits) % 8)
    bits += padding
    if len(bits) % 8:
        raise ValueError("padding must end the string on an octet boundary")
    return int(bits, 2).to_bytes(len(bits) // 8, "big") if bits else b""


def literal(
    name: bytes | int, value: bytes, indexing: str = "without", huffman: bool = False
) -> bytes:
    """A literal field (RFC 7541 §6.2): ``indexing`` is ``incremental``, ``without`` or
    ``never``; ``name`` an index (static or dynamic) or a new name."""
    first, prefix = {"incremental": (0x40, 6), "without": (0x00, 4), "never": (0x10, 4)}[indexing]
    if isinstance(name, int):
        out = hpack_int(name, prefix, first)
    else:
        out = bytes((first,)) + hpack_string(name, huffman)
    return out + hpack_string(value, huffman)


def indexed(index: int) -> bytes:
    """An indexed field (RFC 7541 §6.1)."""
    return hpack_int(index, 7, 0x80)


def table_size_update(size: int) -> bytes:
    """A dynamic table size update (RFC 7541 §6.3)."""
    return hpack_int(size, 5, 0x20)


# ---------------------------------------------------------------------------- frames in


@dataclass(frozen=True)
class Frame:
    """A frame the server sent."""

    type: int
    flags: int
    stream: int
    payload: bytes

    @property
    def error_code(self) -> int:
        """The error code of a RST_STREAM or GOAWAY frame."""
        if self.type == RST_STREAM:
            return int(struct.unpack_from(">I", self.payload)[0])
        if self.type == GOAWAY:
            return int(struct.unpack_from(">I", self.payload, 4)[0])
        raise ValueError(f"{self} carries no error code")

    def to_bytes(self) -> bytes:
        """The frame as it goes on the wire."""
        return frame(self.type, self.flags, self.stream, self.payload)

    def __str__(self) -> str:
        name = FRAME_NAMES.get(self.type, f"type 0x{self.type:x}")
        if self.type in (RST_STREAM, GOAWAY) and len(self.payload) >= (
            4 if self.type == RST_STREAM else 8
        ):
            detail = error_name(self.error_code)
            if self.type == GOAWAY:
                last = struct.unpack_from(">I", self.payload)[0] & 0x7FFFFFFF
                detail += f", last stream {last}, {self.payload[8:72]!r}"
            return f"{name}({detail}) on stream {self.stream}"
        return (
            f"{name}(flags 0x{self.flags:02x}, {len(self.payload)} octets) on stream {self.stream}"
        )


def parse_frames(data: bytes) -> tuple[list[Frame], bytes]:
    """The complete frames in ``data`` and what is left of it."""
    frames = []
    pos = 0
    while pos + 9 <= len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        if pos + 9 + length > len(data):
            break
        kind, flags = data[pos + 3], data[pos + 4]
        stream = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        frames.append(Frame(kind, flags, stream, bytes(data[pos + 9 : pos + 9 + length])))
        pos += 9 + length
    return frames, bytes(data[pos:])


class Outcome(AssertionError):
    """The server did not answer as the case expects."""


class Hung(AssertionError):
    """The server sent nothing for :data:`READ_TIMEOUT` seconds (never an expected outcome:
    an xfail case that hangs still fails)."""


def engine_xfail(reason: str) -> pytest.MarkDecorator:
    """A case the current engine fails: ``reason`` says what it does instead (strict: the
    mark goes once the engine is fixed)."""
    return pytest.mark.xfail(strict=True, raises=Outcome, reason=f"engine: {reason}")


class H2Client:
    """One TCP connection to the server under test, written and read by hand."""

    _sentinels = itertools.count(1)

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT)
        self.sock.settimeout(READ_TIMEOUT)
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.buffer = b""
        self.eof = False
        #: every frame read so far (for the failure messages)
        self.received: list[Frame] = []
        #: the server's SETTINGS as the handshake read them
        self.server_settings: dict[int, int] = {}
        self._header_block: tuple[int, bytearray] | None = None
        #: the header lists the server sent, per stream, decoded
        self.header_lists: dict[int, list[list[tuple[str, str]]]] = {}

    def close(self) -> None:
        self.sock.close()

    # -------------------------------------------------------------- sending

    def send(self, *chunks: bytes) -> None:
        """Write ``chunks`` in one write. A server that closed first (a connection error seen
        on an earlier frame) makes this a no-op: what it sent before decides the case."""
        try:
            self.sock.sendall(b"".join(chunks))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def encode(self, header_list: Iterable[tuple[str, str]]) -> bytes:
        """A header block from the connection's HPACK encoder (send every block encoded: the
        server's decoder follows the encoder's dynamic table)."""
        return self.encoder.encode(list(header_list))

    def request(self, path: str = SERVER_LIVE, extra: Sequence[tuple[str, str]] = ()) -> bytes:
        """The header block of a gRPC call on this connection."""
        return self.encode(grpc_request(path, f"127.0.0.1:{self.port}", extra))

    def call(
        self,
        stream: int,
        path: str = SERVER_LIVE,
        extra: Sequence[tuple[str, str]] = (),
        message: bytes = EMPTY_MESSAGE,
    ) -> bytes:
        """The frames of a whole gRPC call: HEADERS, then DATA with the message and END_STREAM."""
        return headers(stream, self.request(path, extra)) + data(stream, message, end_stream=True)

    def handshake(self, *pairs: tuple[int, int]) -> None:
        """Preface and SETTINGS (``pairs``); returns once the server's SETTINGS (ACKed) and
        its ACK of ours were read."""
        self.send(PREFACE, settings(*pairs))
        got_settings = got_ack = False
        while not (got_settings and got_ack):
            f = self.read_frame()
            if f is None:
                raise Outcome(f"connection closed during the handshake; read {self._seen()}")
            if f.type != SETTINGS:
                continue
            if f.flags & ACK:
                got_ack = True
            else:
                for at in range(0, len(f.payload) - 5, 6):
                    key, value = struct.unpack_from(">HI", f.payload, at)
                    self.server_settings[key] = value
                self.send(settings(ack=True))
                got_settings = True

    def sentinel(self) -> bytes:
        """Send a PING whose ACK proves the server handled every frame sent before it."""
        payload = struct.pack(">Q", next(self._sentinels) | 0x5E47 << 48)
        self.send(ping(payload))
        return payload

    # -------------------------------------------------------------- reading

    def read_frame(self) -> Frame | None:
        """The next frame, or None once the server closed the connection."""
        while True:
            if len(self.buffer) >= 9:
                end = 9 + int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) >= end:
                    first = parse_frames(self.buffer[:end])[0][0]
                    self.buffer = self.buffer[end:]
                    self.received.append(first)
                    self._track_headers(first)
                    return first
            if self.eof:
                return None
            try:
                chunk = self.sock.recv(1 << 16)
            except ConnectionResetError:
                chunk = b""
            except TimeoutError:
                raise Hung(
                    f"the server sent nothing for {READ_TIMEOUT} s (hung?); read {self._seen()}"
                ) from None
            if not chunk:
                self.eof = True
            self.buffer += chunk

    def frames(self) -> Iterator[Frame]:
        """Frames until the server closes the connection."""
        while (f := self.read_frame()) is not None:
            yield f

    def _track_headers(self, f: Frame) -> None:
        """Decode the server's header blocks (HEADERS, CONTINUATION) as they come, so its HPACK
        state stays followed; the decoded lists land in :attr:`header_lists`."""
        if f.type == HEADERS:
            body = f.payload
            if f.flags & PADDED:
                body = body[1 : len(body) - body[0]]
            if f.flags & PRIORITY_FLAG:
                body = body[5:]
            self._header_block = (f.stream, bytearray(body))
        elif f.type == CONTINUATION and self._header_block is not None:
            self._header_block[1].extend(f.payload)
        else:
            return
        if f.flags & END_HEADERS and self._header_block is not None:
            stream, block = self._header_block
            self._header_block = None
            decoded = [(str(k), str(v)) for k, v in self.decoder.decode(bytes(block))]
            self.header_lists.setdefault(stream, []).append(decoded)

    def _seen(self) -> str:
        shown = ", ".join(str(f) for f in self.received[-12:]) or "nothing"
        return shown + (", then the connection closed" if self.eof else "")

    # -------------------------------------------------------------- outcomes

    def expect_connection_error(self, *codes: int, bare_close: bool = False) -> None:
        """A connection error of one of ``codes``: GOAWAY, then the connection closed."""
        sentinel = self.sentinel()
        names = " or ".join(error_name(c) for c in codes)
        for f in self.frames():
            if f.type == GOAWAY:
                if f.error_code not in codes:
                    raise Outcome(f"expected GOAWAY({names}); got {f}; read {self._seen()}")
                self.expect_closed()
                return
            if f.type == PING and f.flags & ACK and f.payload == sentinel:
                raise Outcome(
                    f"expected a connection error {names}; the server went on (answered the "
                    f"PING sent after the frames); read {self._seen()}"
                )
        if not bare_close:
            raise Outcome(f"expected GOAWAY({names}) before the close; read {self._seen()}")

    def expect_closed(self) -> None:
        """The server closes the connection (whatever it sends before)."""
        for _ in self.frames():
            pass

    def expect_stream_error(self, stream: int, *codes: int, goaway_ok: bool = True) -> None:
        """A stream error of one of ``codes`` on ``stream`` (RST_STREAM), or a connection error
        of one of them (GOAWAY, as h2spec accepts unless ``goaway_ok`` is False)."""
        sentinel = self.sentinel()
        names = " or ".join(error_name(c) for c in codes)
        for f in self.frames():
            if f.type == RST_STREAM and f.stream == stream:
                if f.error_code not in codes:
                    raise Outcome(f"expected RST_STREAM({names}); got {f}; read {self._seen()}")
                return
            if f.type == GOAWAY:
                if f.error_code not in codes or not goaway_ok:
                    raise Outcome(
                        f"expected RST_STREAM({names}) on stream {stream}; got {f}; "
                        f"read {self._seen()}"
                    )
                self.expect_closed()
                return
            if f.type == PING and f.flags & ACK and f.payload == sentinel:
                raise Outcome(
                    f"expected RST_STREAM({names}) on stream {stream}; the server went on "
                    f"(answered the PING sent after the frames); read {self._seen()}"
                )
        raise Outcome(f"expected RST_STREAM({names}) on stream {stream}; read {self._seen()}")

    def expect(self, what: str, match: Callable[[Frame], bool]) -> Frame:
        """The first frame ``match`` accepts; a GOAWAY, a RST_STREAM with an error code or the
        connection's close before it fails the case."""
        for f in self.frames():
            if match(f):
                return f
            if f.type == GOAWAY or (f.type == RST_STREAM and f.error_code not in (NO_ERROR,)):
                raise Outcome(f"expected {what}; got {f}; read {self._seen()}")
        raise Outcome(f"expected {what}; read {self._seen()}")

    def expect_ping_ack(self, payload: bytes) -> None:
        """The ACK of a PING with ``payload`` (and no ACK of any other PING before it)."""

        def is_ack(f: Frame) -> bool:
            if f.type == PING and f.flags & ACK:
                if f.payload != payload:
                    raise Outcome(f"PING ACK of {f.payload!r}, expected {payload!r}")
                return True
            return False

        self.expect(f"PING ACK of {payload!r}", is_ack)

    def expect_ping_ack_or_close(self, payload: bytes) -> None:
        """h2spec's "PING ACK or the connection closed" (GOAWAY allowed before the close)."""
        for f in self.frames():
            if f.type == PING and f.flags & ACK and f.payload == payload:
                return
            if f.type == RST_STREAM and f.error_code != NO_ERROR:
                raise Outcome(f"expected the PING's ACK; got {f}; read {self._seen()}")

    def expect_settings_ack(self) -> None:
        self.expect("SETTINGS ACK", lambda f: f.type == SETTINGS and bool(f.flags & ACK))

    def expect_response(self, stream: int) -> tuple[Frame, list[tuple[str, str]]]:
        """The first HEADERS frame the server sends on ``stream`` and its header list (after
        its CONTINUATION frames, if any)."""
        f = self.expect(
            f"HEADERS on stream {stream}", lambda f: f.type == HEADERS and f.stream == stream
        )
        while stream not in self.header_lists:
            if self.read_frame() is None:
                raise Outcome(f"connection closed inside a header block; read {self._seen()}")
        return f, self.header_lists[stream][0]

    def expect_data(self, stream: int) -> Frame:
        return self.expect(
            f"DATA on stream {stream}", lambda f: f.type == DATA and f.stream == stream
        )

    def expect_stream_end(self, stream: int) -> None:
        """h2spec's "stream closed": END_STREAM from the server, or RST_STREAM(NO_ERROR)."""
        self.expect(
            f"the end of stream {stream}",
            lambda f: (
                f.stream == stream
                and (
                    (f.type in (DATA, HEADERS) and bool(f.flags & END_STREAM))
                    or (f.type == RST_STREAM and f.error_code == NO_ERROR)
                )
            ),
        )

    def expect_grpc_ok(self, stream: int) -> bytes:
        """A whole gRPC answer on ``stream``: ``:status: 200``, its messages, trailers with
        ``grpc-status: 0``. Returns the DATA bytes."""
        f, response = self.expect_response(stream)
        assert dict(response).get(":status") == "200", response
        body = bytearray()
        trailers = dict(response)  # a trailers-only answer
        while not f.flags & END_STREAM:
            f = self.expect(
                f"DATA or trailers on stream {stream}",
                lambda f: f.stream == stream and f.type in (DATA, HEADERS),
            )
            if f.type == DATA:
                body += f.payload
            elif f.flags & END_HEADERS:
                trailers = dict(self.header_lists[stream][-1])
        assert trailers.get("grpc-status") == "0", trailers
        return bytes(body)
