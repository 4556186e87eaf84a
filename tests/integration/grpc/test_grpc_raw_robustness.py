"""The gRPC listener against raw, hostile HTTP/2: malformed frames, oversized headers, streams
opened and abandoned, a preface then garbage, a HEADERS frame then nothing (slowloris),
flood patterns. After each case the server still answers ``ServerLive`` from
``tritonclient.grpc`` (its servicer runs on the server's event loop, so the loop is not
stuck either), with the hostile connections still open where the case holds them.

Frames are written with the ``h2`` library where it can write them, as raw bytes where they
must be malformed. Nothing here sleeps: reads wait for the server's answer (or its closing
the connection) with a socket timeout that only bounds a hang.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable

import h2.config
import h2.connection
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritonx.testing import ServerThread

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#: frame types (RFC 9113 §6)
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0x0,
    0x1,
    0x3,
    0x4,
    0x6,
    0x7,
    0x8,
    0x9,
)
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
#: bounds a read that would otherwise wait for ever on a hung server
READ_TIMEOUT = 20.0
INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"

Case = Callable[[int], list[socket.socket]]


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame, written by hand (so it may be malformed)."""
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream & 0x7FFFFFFF)
        + payload
    )


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT)
    sock.settimeout(READ_TIMEOUT)
    return sock


def drain(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = bytearray()
    while True:
        try:
            data = sock.recv(1 << 16)
        except ConnectionResetError:
            break
        if not data:
            break
        received += data
    sock.close()
    return bytes(received)


def frames_of(data: bytes) -> list[tuple[int, int, int]]:
    """(type, flags, stream) of the complete frames in ``data``."""
    frames = []
    pos = 0
    while pos + 9 <= len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        stream = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        frames.append((data[pos + 3], data[pos + 4], stream))
        pos += 9 + length
    return frames


def stream_refused(sock: socket.socket, stream: int = 1) -> None:
    """Read until the server ends ``stream`` (RST_STREAM, or HEADERS with END_STREAM: a
    status), goes away (GOAWAY) or closes the connection."""
    received = bytearray()
    while True:
        try:
            data = sock.recv(1 << 16)
        except ConnectionResetError:
            break
        if not data:
            break
        received += data
        for kind, flags, on in frames_of(bytes(received)):
            if kind == GOAWAY or (on == stream and kind == RST_STREAM):
                return
            if on == stream and kind == HEADERS and flags & END_STREAM:
                return


def h2_client(port: int) -> tuple[socket.socket, h2.connection.H2Connection]:
    sock = connect(port)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    return sock, conn


def infer_headers(port: int, **extra: str) -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", INFER_PATH),
        (":authority", f"127.0.0.1:{port}"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *extra.items(),
    ]


def hello(port: int) -> socket.socket:
    """A connection past the preface and an empty SETTINGS frame."""
    sock = connect(port)
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
    return sock


def goes_away(sock: socket.socket) -> None:
    """The server ends the connection (after its GOAWAY, if any)."""
    drain(sock)


# ------------------------------------------------------------------ the cases


def garbage_instead_of_preface(port: int) -> list[socket.socket]:
    sock = connect(port)
    sock.sendall(os.urandom(1 << 16))
    drain(sock)
    return []


def preface_then_garbage(port: int) -> list[socket.socket]:
    sock = connect(port)
    sock.sendall(PREFACE + os.urandom(1 << 16))
    goes_away(sock)
    return []


def half_a_preface_then_nothing(port: int) -> list[socket.socket]:
    sock = connect(port)
    sock.sendall(PREFACE[:10])
    return [sock]


def settings_of_bad_length(port: int) -> list[socket.socket]:
    sock = connect(port)
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0, b"\x00\x01\x00\x00\x10"))  # 5 bytes, not 6k
    goes_away(sock)
    return []


def data_on_stream_zero(port: int) -> list[socket.socket]:
    sock = hello(port)
    sock.sendall(frame(DATA, 0, 0, b"hello"))  # grpc ignores it: the connection stays
    return [sock]


def frame_longer_than_allowed(port: int) -> list[socket.socket]:
    sock = hello(port)
    header = struct.pack(">I", 1 << 23)[1:] + bytes([DATA, 0]) + struct.pack(">I", 1)
    sock.sendall(header + bytes(1 << 16))  # declares 8 MiB, more than SETTINGS allow
    goes_away(sock)
    return []


def headers_with_broken_hpack(port: int) -> list[socket.socket]:
    sock = hello(port)
    sock.sendall(frame(HEADERS, END_HEADERS, 1, b"\xff\xff\xff\xff\xff\xff\x7f" + os.urandom(64)))
    goes_away(sock)
    return []


def window_update_of_zero(port: int) -> list[socket.socket]:
    sock = hello(port)
    sock.sendall(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0)))
    goes_away(sock)
    return []


def ping_of_bad_length(port: int) -> list[socket.socket]:
    sock = hello(port)
    sock.sendall(frame(PING, 0, 0, b"1234"))
    goes_away(sock)
    return []


def hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 §5.1) with ``first``'s high bits in its first byte."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_literal(name: str, value: str) -> bytes:
    """A header as an HPACK literal without indexing, new name, no Huffman coding."""
    raw_name, raw_value = name.encode(), value.encode()
    return (
        b"\x00" + hpack_int(len(raw_name), 7) + raw_name + hpack_int(len(raw_value), 7) + raw_value
    )


def oversized_headers(port: int) -> list[socket.socket]:
    """1 MiB of metadata (HEADERS + CONTINUATION frames), then a message: the call is
    refused (a status and RST_STREAM), or the connection."""
    sock = hello(port)
    block = b"".join(
        hpack_literal(n, v) for n, v in infer_headers(port, **{"x-big": "a" * (1 << 20)})
    )
    pieces = [block[i : i + 16384] for i in range(0, len(block), 16384)]
    frames = [frame(HEADERS, 0, 1, pieces[0])]
    frames += [frame(CONTINUATION, 0, 1, piece) for piece in pieces[1:-1]]
    frames.append(frame(CONTINUATION, END_HEADERS, 1, pieces[-1]))
    body = b"\x0a\x01m"  # ModelInferRequest(model_name="m")
    frames.append(frame(DATA, END_STREAM, 1, b"\x00" + len(body).to_bytes(4, "big") + body))
    try:
        sock.sendall(b"".join(frames))
    except OSError:  # the server may close before it has read everything
        pass
    stream_refused(sock)
    return [sock]


def continuation_flood(port: int) -> list[socket.socket]:
    """HEADERS without END_HEADERS, then 4 MiB of CONTINUATION frames, never ending."""
    sock = hello(port)
    sock.sendall(frame(HEADERS, 0, 1, b"\x83\x86"))  # :method POST, :scheme http
    piece = frame(CONTINUATION, 0, 1, b"\x40\x01x\x7f\x7f" + b"a" * 16000)
    try:
        for _ in range(256):
            sock.sendall(piece)
    except OSError:  # closed by the server on the way: what it should do
        pass
    return [sock]


def streams_opened_and_abandoned(port: int) -> list[socket.socket]:
    """100 ModelInfer streams, each with a part of a 1 MiB message, then the socket closed."""
    sock, conn = h2_client(port)
    for _ in range(100):
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, infer_headers(port))
        conn.send_data(stream, b"\x00" + (1 << 20).to_bytes(4, "big") + b"\x0a\x03abc")
    sock.sendall(conn.data_to_send())
    sock.close()
    return []


def streams_abandoned_open(port: int) -> list[socket.socket]:
    """The same, the connection left open (the calls wait for the rest of their message)."""
    sock, conn = h2_client(port)
    for _ in range(100):
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, infer_headers(port))
        conn.send_data(stream, b"\x00" + (1 << 20).to_bytes(4, "big") + b"\x0a\x03abc")
    sock.sendall(conn.data_to_send())
    return [sock]


def headers_then_nothing(port: int) -> list[socket.socket]:
    """Slowloris: a HEADERS frame (no END_STREAM) on 20 connections, then silence."""
    held = []
    for _ in range(20):
        sock, conn = h2_client(port)
        conn.send_headers(conn.get_next_available_stream_id(), infer_headers(port))
        sock.sendall(conn.data_to_send())
        held.append(sock)
    return held


def rapid_reset(port: int) -> list[socket.socket]:
    """1000 streams opened and reset at once (the "rapid reset" pattern)."""
    sock, conn = h2_client(port)
    for _ in range(1000):
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, infer_headers(port))
        conn.reset_stream(stream)
    try:
        sock.sendall(conn.data_to_send())
    except OSError:
        pass
    sock.close()
    return []


def message_shorter_than_its_prefix(port: int) -> list[socket.socket]:
    """A gRPC message announcing 100 MB, the stream ended after 10 bytes (grpc keeps such a
    call waiting, without a status, until the connection goes)."""
    sock, conn = h2_client(port)
    stream = conn.get_next_available_stream_id()
    conn.send_headers(stream, infer_headers(port))
    conn.send_data(stream, b"\x00" + (100 << 20).to_bytes(4, "big") + b"\x0a\x03abc", True)
    sock.sendall(conn.data_to_send())
    return [sock]


def compressed_flag_without_encoding(port: int) -> list[socket.socket]:
    """A message flagged compressed on a call that declared no encoding: answered."""
    sock, conn = h2_client(port)
    stream = conn.get_next_available_stream_id()
    conn.send_headers(stream, infer_headers(port))
    body = b"\x0a\x01m"
    conn.send_data(stream, b"\x01" + len(body).to_bytes(4, "big") + body, True)
    sock.sendall(conn.data_to_send())
    stream_refused(sock, stream)
    return [sock]


CASES: list[Case] = [
    garbage_instead_of_preface,
    preface_then_garbage,
    half_a_preface_then_nothing,
    settings_of_bad_length,
    data_on_stream_zero,
    frame_longer_than_allowed,
    headers_with_broken_hpack,
    window_update_of_zero,
    ping_of_bad_length,
    oversized_headers,
    continuation_flood,
    streams_opened_and_abandoned,
    streams_abandoned_open,
    headers_then_nothing,
    rapid_reset,
    message_shorter_than_its_prefix,
    compressed_flag_without_encoding,
]


@pytest.fixture
def grpc_port(server_thread: ServerThread) -> int:
    port = server_thread.server.grpc_port
    assert port is not None
    return port


def assert_live(port: int) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        assert client.is_server_live(client_timeout=READ_TIMEOUT)
    finally:
        client.close()


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_server_survives(grpc_port: int, case: Case) -> None:
    held = case(grpc_port)
    try:
        assert_live(grpc_port)
    finally:
        for sock in held:
            sock.close()
    assert_live(grpc_port)


def test_every_case_on_one_server_then_inference(grpc_port: int) -> None:
    held: list[socket.socket] = []
    try:
        for case in CASES:
            held += case(grpc_port)
            assert_live(grpc_port)
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        try:
            tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
            tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
            result = client.infer("simple", [tensor], client_timeout=READ_TIMEOUT)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.ones((1, 4)))
        finally:
            client.close()
    finally:
        for sock in held:
            sock.close()
