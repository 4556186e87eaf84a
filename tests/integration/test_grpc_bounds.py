"""The event-loop gRPC engine's bounds against the hostile clients of issue 44: each case is
what one unauthenticated client did to the landed engine, sent here at a size that shows the
bound (the figures at full size are ``benchmarks/grpc_hostile.py``'s).

Frames are written by hand over a raw socket; header blocks by ``hpack``'s public encoder.
Nothing sleeps: reads wait for the server's frames with a socket timeout that only bounds a
hang, and timers are the server's (a test with a one-second bound waits for the frame it
sends).
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import hpack
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritonx.config import ServerSettings
from tritonx.proto import service_pb2
from tritonx.server import Server
from tritonx.testing import ModelRepositoryBuilder, ServerThread, loopback_settings

READ_TIMEOUT = 30.0
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = (
    0x0,
    0x1,
    0x2,
    0x3,
    0x4,
    0x6,
    0x7,
    0x8,
)
CONTINUATION = 0x9
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
PROTOCOL_ERROR, CANCEL, REFUSED_STREAM, ENHANCE_YOUR_CALM = 0x1, 0x8, 0x7, 0xB
INFER = "/inference.GRPCInferenceService/ModelInfer"
LIVE = "/inference.GRPCInferenceService/ServerLive"


@pytest.fixture
def settings(model_repository: ModelRepositoryBuilder) -> ServerSettings:
    model_repository.add_identity("ident", "UINT8", dims=[-1])
    model_repository.add_identity(
        "slow", "UINT8", dims=[-1], parameters={"execute_delay_ms": "1500"}
    )
    return loopback_settings(model_repository.root, allow_http=False, allow_metrics=False)


def serve(settings: ServerSettings, plugin_manager: Any, **overrides: Any) -> ServerThread:
    thread = ServerThread(Server(replace(settings, **overrides), plugin_manager=plugin_manager))
    thread.start()
    return thread


@pytest.fixture
def server(
    request: pytest.FixtureRequest, settings: ServerSettings, plugin_manager: Any
) -> Iterator[ServerThread]:
    overrides = getattr(request, "param", {})
    thread = serve(settings, plugin_manager, **overrides)
    try:
        yield thread
    finally:
        thread.stop()


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One whole frame, written by hand."""
    head = struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream)
    return head + payload


def settings_frame(**values: int) -> bytes:
    ids = {"initial_window": 0x4, "max_frame": 0x5}
    payload = b"".join(struct.pack(">HI", ids[k], v) for k, v in values.items())
    return frame(SETTINGS, 0, 0, payload)


class Client:
    """A raw HTTP/2 client: frames out as written, frames in as (type, flags, stream,
    payload)."""

    def __init__(self, port: int, **settings: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT)
        self.sock.settimeout(READ_TIMEOUT)
        self.encoder = hpack.Encoder()
        self.buffer = b""
        self.server_settings: dict[int, int] = {}
        self.sock.sendall(PREFACE + settings_frame(**settings))

    def headers(self, path: str) -> bytes:
        return self.encoder.encode(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", f"127.0.0.1:{self.port}"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ]
        )

    def call(self, stream: int, path: str, message: bytes, end: bool = True) -> bytes:
        """HEADERS and one DATA frame carrying ``message`` (split at 16 KiB)."""
        block = self.headers(path)
        out = frame(HEADERS, END_HEADERS, stream, block)
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        for at in range(0, len(body), 16384):
            piece = body[at : at + 16384]
            last = at + 16384 >= len(body)
            out += frame(DATA, END_STREAM if last and end else 0, stream, piece)
        return out

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> tuple[int, int, int, bytes] | None:
        """The next frame, or None once the server closed the connection."""
        while len(self.buffer) < 9 or len(self.buffer) < 9 + int.from_bytes(self.buffer[:3], "big"):
            try:
                data = self.sock.recv(1 << 16)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.buffer += data
        length = int.from_bytes(self.buffer[:3], "big")
        kind, flags = self.buffer[3], self.buffer[4]
        stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
        payload = self.buffer[9 : 9 + length]
        self.buffer = self.buffer[9 + length :]
        if kind == SETTINGS and not flags & ACK:
            for at in range(0, len(payload), 6):
                key, value = struct.unpack(">HI", payload[at : at + 6])
                self.server_settings[key] = value
        return kind, flags, stream, payload

    def until(self, kind: int, stream: int | None = None) -> tuple[int, int, bytes]:
        """Read until a frame of ``kind`` (on ``stream``); its (flags, stream, payload)."""
        while True:
            got = self.read()
            assert got is not None, f"connection closed before a frame of type {kind}"
            if got[0] == kind and (stream is None or got[2] == stream):
                return got[1], got[2], got[3]

    def goaway(self) -> int:
        """The error code of the GOAWAY the server sends, then its closing the connection."""
        return self.goaway_with_debug()[0]

    def goaway_with_debug(self) -> tuple[int, bytes]:
        """The error code and debug data of the GOAWAY the server sends, then its closing the
        connection."""
        _, _, payload = self.until(GOAWAY)
        code = int.from_bytes(payload[4:8], "big")
        while self.read() is not None:
            pass
        return code, bytes(payload[8:])

    def trailers(self, stream: int) -> dict[bytes, bytes]:
        """The trailers (or trailers-only answer) of ``stream``, decoded."""
        decoder = hpack.Decoder()
        while True:
            flags, _, block = self.until(HEADERS, stream)
            fields = {
                name.encode() if isinstance(name, str) else name: (
                    value.encode() if isinstance(value, str) else value
                )
                for name, value in decoder.decode(block)
            }
            if flags & END_STREAM:
                return fields

    def close(self) -> None:
        self.sock.close()


def live(port: int) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        assert client.is_server_live()
    finally:
        client.close()


def infer_message(model: str, size: int) -> bytes:
    request = service_pb2.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="INPUT0", datatype="UINT8")
    tensor.shape.append(size)
    request.raw_input_contents.append(np.zeros(size, np.uint8).tobytes())
    return request.SerializeToString()


# ---------------------------------------------------------------------------- 1: streams


def test_streams_past_the_announced_cap_are_refused(server: ServerThread) -> None:
    """Finding 1: nothing capped open streams. The cap is announced in SETTINGS and a
    stream past it is refused with REFUSED_STREAM; the open ones still answer."""
    client = Client(server.server.grpc_port)
    block = client.headers(INFER)
    opened = b"".join(frame(HEADERS, END_HEADERS, sid, block) for sid in range(1, 2 * 100, 2))
    client.send(opened + client.call(201, INFER, b""))
    _, _, payload = client.until(RST_STREAM, 201)
    assert int.from_bytes(payload, "big") == REFUSED_STREAM
    assert client.server_settings[0x3] == 100  # SETTINGS_MAX_CONCURRENT_STREAMS
    message = infer_message("ident", 4)
    client.send(frame(DATA, END_STREAM, 1, b"\x00" + len(message).to_bytes(4, "big") + message))
    assert client.trailers(1)[b"grpc-status"] == b"0"
    client.close()
    live(server.server.grpc_port)


def test_a_change_of_the_initial_window_moves_every_streams_window(
    server: ServerThread,
) -> None:
    """Finding 1's fix applies SETTINGS_INITIAL_WINDOW_SIZE lazily: an answer waiting on a
    zero window goes out once a later SETTINGS opens every stream's window."""
    client = Client(server.server.grpc_port, initial_window=0)
    client.until(SETTINGS)
    client.send(client.call(1, INFER, infer_message("ident", 1000)))
    # the headers go out (not flow-controlled); the data waits for the window
    client.until(HEADERS, 1)
    client.send(settings_frame(initial_window=1 << 20))
    _, _, payload = client.until(DATA, 1)
    assert payload[:1] == b"\x00"
    assert client.trailers(1)[b"grpc-status"] == b"0"
    client.close()


# ---------------------------------------------------------------------------- 2: zero window


@pytest.mark.parametrize("server", [{"grpc_max_send_buffer": 1 << 20}], indirect=True)
def test_answers_to_a_client_that_opens_no_window_are_bounded(server: ServerThread) -> None:
    """Finding 2: answers to a client that leaves its window at 0 were parked without bound.
    Past --grpc-max-send-buffer an answer gets RESOURCE_EXHAUSTED (trailers are not
    flow-controlled), so what waits stays bounded."""
    client = Client(server.server.grpc_port, initial_window=0)
    message = infer_message("ident", 300 << 10)
    client.send(b"".join(client.call(sid, INFER, message) for sid in (1, 3, 5, 7, 9, 11)))
    # three answers of ~300 KiB fit in 1 MiB and wait; the other three are refused, in
    # whatever order the calls end
    decoder = hpack.Decoder()
    ended: dict[int, dict[str, str]] = {}
    while len(ended) < 3:
        flags, stream, block = client.until(HEADERS)
        fields = dict(decoder.decode(block))
        if flags & END_STREAM:
            ended[stream] = fields
    for fields in ended.values():
        assert fields["grpc-status"] == "8", fields
        assert "--grpc-max-send-buffer" in fields["grpc-message"]
    client.close()
    live(server.server.grpc_port)


@pytest.mark.parametrize("server", [{"grpc_send_timeout_secs": 1}], indirect=True)
def test_an_answer_that_waits_for_window_too_long_is_reset(server: ServerThread) -> None:
    """Finding 2: ... and without a bound in time; now an answer that makes no progress for
    --grpc-send-timeout-secs is reset (CANCEL)."""
    client = Client(server.server.grpc_port, initial_window=0)
    client.send(client.call(1, INFER, infer_message("ident", 1000)))
    _, _, payload = client.until(RST_STREAM, 1)
    assert int.from_bytes(payload, "big") == CANCEL
    client.close()


# ---------------------------------------------------------------------------- 3: HPACK bomb


def test_an_hpack_bomb_ends_the_connection(server: ServerThread) -> None:
    """Finding 3: a block that adds one 4 KB table entry and refers to it many times was
    decoded in full (a thousandfold header list) and the connection kept. Decoding now stops
    at 4x the header-list limit and the connection is ended (ENHANCE_YOUR_CALM)."""
    client = Client(server.server.grpc_port)
    base = client.headers(LIVE)
    entry = b"\x40" + bytes([0x0A]) + b"x-bomb-abc" + b"\x7f" + _int(4000 - 127) + b"v" * 4000
    bomb = base + entry + b"\xbe" * 5000  # index 62: the entry just added
    client.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, bomb))
    assert client.goaway() == ENHANCE_YOUR_CALM
    live(server.server.grpc_port)


def _int(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def test_a_long_huffman_value_is_refused_before_it_is_decoded(server: ServerThread) -> None:
    """Finding 5: a 232 KiB Huffman-coded value was decoded before the size check. Its
    shortest decoding is already past the bound (4x the 16 KiB header-list limit): the
    connection ends without decoding it."""
    client = Client(server.server.grpc_port)
    base = client.headers(LIVE)
    value = b"\xff" * 250_000  # not even valid Huffman: it must not be decoded
    field = b"\x00\x03x-a" + b"\xff" + _int(len(value) - 127) + value
    block = base + field
    pieces = [block[at : at + 16384] for at in range(0, len(block), 16384)]
    out = frame(HEADERS, END_STREAM, 1, pieces[0])
    for index, piece in enumerate(pieces[1:], 1):
        flags = END_HEADERS if index == len(pieces) - 1 else 0
        out += frame(CONTINUATION, flags, 1, piece)
    client.send(out)
    assert client.goaway() == ENHANCE_YOUR_CALM
    live(server.server.grpc_port)


# ---------------------------------------------------------------------------- 4: rapid reset


@pytest.mark.parametrize("server", [{"grpc_max_reset_rate": 1}], indirect=True)
def test_rapid_reset_ends_the_connection(server: ServerThread) -> None:
    """Finding 4 (CVE-2023-44487): HEADERS + DATA + RST_STREAM without limit. Resets before
    the answer draw from a budget (ten seconds at --grpc-max-reset-rate); past it GOAWAY
    ENHANCE_YOUR_CALM."""
    client = Client(server.server.grpc_port)
    message = infer_message("slow", 4)
    out = b""
    for sid in range(1, 2 * 100, 2):
        out += client.call(sid, INFER, message) + frame(RST_STREAM, 0, sid, b"\x00\x00\x00\x08")
    client.send(out)
    assert client.goaway() == ENHANCE_YOUR_CALM
    live(server.server.grpc_port)


# ---------------------------------------------------------------------------- 5: the rest


def test_headers_on_a_skipped_stream_id_are_a_connection_error(server: ServerThread) -> None:
    """Finding 5: a HEADERS frame on a stream id lower than one already used was ignored (the
    call hung until its deadline); RFC 9113 §5.1.1: PROTOCOL_ERROR."""
    client = Client(server.server.grpc_port)
    client.send(client.call(5, LIVE, b""))
    assert client.trailers(5)[b"grpc-status"] == b"0"
    client.send(client.call(3, LIVE, b""))
    assert client.goaway() == PROTOCOL_ERROR


def test_a_stream_that_depends_on_itself_is_reset(server: ServerThread) -> None:
    """Finding 5: a PRIORITY self-dependency was accepted; RFC 7540 §5.3.1: PROTOCOL_ERROR
    (a stream error), and the connection goes on."""
    client = Client(server.server.grpc_port)
    client.send(frame(PRIORITY, 0, 1, struct.pack(">IB", 1, 16)))
    _, _, payload = client.until(RST_STREAM, 1)
    assert int.from_bytes(payload, "big") == PROTOCOL_ERROR
    client.send(client.call(3, LIVE, b""))
    assert client.trailers(3)[b"grpc-status"] == b"0"
    client.close()


@pytest.mark.parametrize("server", [{"grpc_header_timeout_secs": 1}], indirect=True)
def test_an_unfinished_header_block_times_out(server: ServerThread) -> None:
    """A HEADERS frame without END_HEADERS, then nothing: the connection could take no other
    frame for ever; past --grpc-header-timeout-secs it is ended."""
    client = Client(server.server.grpc_port)
    block = client.headers(LIVE)
    client.send(frame(HEADERS, 0, 1, block[:5]))
    assert client.goaway() == ENHANCE_YOUR_CALM


@pytest.mark.parametrize("server", [{"grpc_max_buffered_request_bytes": 1000}], indirect=True)
def test_request_bytes_held_server_wide_are_bounded(server: ServerThread) -> None:
    """Request message bytes held at once (as they arrive, not as announced) count against
    --grpc-max-buffered-request-bytes: one call holding most of it leaves another
    RESOURCE_EXHAUSTED; once it ends, room is back."""
    holder = Client(server.server.grpc_port)
    block = holder.headers(INFER)
    first = b"\x00" + (950).to_bytes(4, "big") + b"\x00" * 900  # 950 announced, 900 sent
    holder.send(frame(HEADERS, END_HEADERS, 1, block) + frame(DATA, 0, 1, first))
    holder.send(holder.call(3, LIVE, b""))  # answered: the server has read the above
    assert holder.trailers(3)[b"grpc-status"] == b"0"
    other = Client(server.server.grpc_port)
    other.send(other.call(1, INFER, infer_message("ident", 300)))
    trailers = other.trailers(1)
    assert trailers[b"grpc-status"] == b"8"
    assert b"--grpc-max-buffered-request-bytes" in trailers[b"grpc-message"]
    holder.send(frame(RST_STREAM, 0, 1, b"\x00\x00\x00\x08"))
    holder.send(holder.call(5, LIVE, b""))
    assert holder.trailers(5)[b"grpc-status"] == b"0"
    other.send(other.call(3, INFER, infer_message("ident", 300)))
    assert other.trailers(3)[b"grpc-status"] == b"0"
    holder.close()
    other.close()


def test_a_stop_lets_the_call_in_progress_finish_after_goaway(
    settings: ServerSettings, plugin_manager: Any
) -> None:
    """A graceful stop: GOAWAY naming the last stream taken, and the call in progress ends
    with its answer (not a reset)."""
    thread = serve(settings, plugin_manager)
    client = Client(thread.server.grpc_port)
    client.send(client.call(1, INFER, infer_message("slow", 4)) + client.call(3, LIVE, b""))
    assert client.trailers(3)[b"grpc-status"] == b"0"  # stream 1 was read before it
    stopper = threading.Thread(target=thread.stop)
    stopper.start()
    try:
        frames = []
        while (got := client.read()) is not None:
            frames.append(got)
        assert [f for f in frames if f[0] == RST_STREAM] == []
        goaways = [payload for kind, _, _, payload in frames if kind == GOAWAY]
        assert goaways and goaways[0][:8] == struct.pack(">II", 3, 0)  # last stream, NO_ERROR
        answer = [f for f in frames if f[0] == HEADERS and f[2] == 1 and f[1] & END_STREAM]
        assert dict(hpack.Decoder().decode(answer[0][3]))["grpc-status"] == "0"
    finally:
        client.close()
        stopper.join()


def test_an_announced_size_holds_nothing_of_other_connections(server: ServerThread) -> None:
    """A prefix announcing a 2 GiB message, then nothing, used to reserve it server-wide: every
    other client's call got RESOURCE_EXHAUSTED. Only bytes that arrive count server-wide; an
    announcement counts against its own connection's share."""
    attacker = Client(server.server.grpc_port)
    block = attacker.headers(INFER)
    prefix = b"\x00" + (2**31 - 1).to_bytes(4, "big")
    attacker.send(frame(HEADERS, END_HEADERS, 1, block) + frame(DATA, 0, 1, prefix))
    attacker.send(attacker.call(3, LIVE, b""))  # answered: the server has read the above
    assert attacker.trailers(3)[b"grpc-status"] == b"0"
    other = Client(server.server.grpc_port)
    other.send(other.call(1, INFER, infer_message("ident", 300)))
    assert other.trailers(1)[b"grpc-status"] == b"0"
    # on its own connection, a second message past the share is refused
    attacker.send(attacker.call(5, INFER, infer_message("ident", 300)))
    trailers = attacker.trailers(5)
    assert trailers[b"grpc-status"] == b"8"
    assert b"on this connection" in trailers[b"grpc-message"]
    attacker.close()
    other.close()


def test_a_block_of_many_tiny_fields_ends_the_connection(server: ServerThread) -> None:
    """A header block of ~1,700 one-byte fields stayed under the decoded-size bound and cost
    milliseconds each, without end (second break pass). Every field now costs the bound at
    least 128 bytes: 600 of them end the connection."""
    client = Client(server.server.grpc_port)
    block = client.headers(LIVE) + b"\xbf" * 600  # static index 19: accept: ""
    client.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, block))
    assert client.goaway() == ENHANCE_YOUR_CALM
    live(server.server.grpc_port)


@pytest.mark.parametrize("server", [{"grpc_max_buffered_request_bytes": 2000}], indirect=True)
def test_messages_announced_at_once_are_bounded_as_their_bytes_arrive(
    server: ServerThread,
) -> None:
    """Two connections announcing 1,500 bytes each before either sends a byte were both
    admitted and held 3,000 against a 2,000 limit. The limit now holds as bytes arrive."""
    one, two = Client(server.server.grpc_port), Client(server.server.grpc_port)
    prefix = b"\x00" + (1500).to_bytes(4, "big")
    for client in (one, two):
        client.send(
            frame(HEADERS, END_HEADERS, 1, client.headers(INFER)) + frame(DATA, 0, 1, prefix)
        )
        client.send(client.call(3, LIVE, b""))  # answered: the prefix was read
        assert client.trailers(3)[b"grpc-status"] == b"0"
    one.send(frame(DATA, 0, 1, b"\x00" * 1400))
    one.send(one.call(5, LIVE, b""))
    assert one.trailers(5)[b"grpc-status"] == b"0"
    two.send(frame(DATA, 0, 1, b"\x00" * 1400))
    trailers = two.trailers(1)
    assert trailers[b"grpc-status"] == b"8"
    assert b"--grpc-max-buffered-request-bytes" in trailers[b"grpc-message"]
    one.close()
    two.close()


@pytest.mark.parametrize("server", [{"grpc_max_send_buffer_total": 1 << 20}], indirect=True)
def test_answers_waiting_on_all_connections_are_bounded(server: ServerThread) -> None:
    """Each connection's send buffer was bounded, their sum was not (10 zero-window
    connections held 730 MB). Past --grpc-max-send-buffer-total an answer that would wait is
    refused, whichever connection it is on."""
    message = infer_message("ident", 300 << 10)
    waiting = []
    for _ in range(3):  # ~900 KiB waiting in all
        client = Client(server.server.grpc_port, initial_window=0)
        client.send(client.call(1, INFER, message))
        client.until(HEADERS, 1)  # the answer's headers: its data waits
        waiting.append(client)
    late = Client(server.server.grpc_port, initial_window=0)
    late.send(late.call(1, INFER, message) + late.call(3, INFER, message))
    decoder = hpack.Decoder()
    while True:
        flags, _, block = late.until(HEADERS)
        fields = dict(decoder.decode(block))
        if flags & END_STREAM:
            break
    assert fields["grpc-status"] == "8", fields
    assert "--grpc-max-send-buffer-total" in fields["grpc-message"]
    for client in [*waiting, late]:
        client.close()


STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"


@pytest.mark.parametrize("server", [{"grpc_max_stream_in_flight": 1}], indirect=True)
def test_data_past_the_window_granted_is_refused(server: ServerThread) -> None:
    """The windows this side grants are enforced (RFC 9113 §6.9.1): a streaming call whose
    handler is busy holds back its stream's credit, and a client that sends past the 1 MiB
    it was granted anyway gets RST_STREAM FLOW_CONTROL_ERROR (it was buffered before)."""
    client = Client(server.server.grpc_port)
    message = infer_message("slow", 256 << 10)
    body = (b"\x00" + len(message).to_bytes(4, "big") + message) * 6  # ~1.5 MiB
    out = frame(HEADERS, END_HEADERS, 1, client.headers(STREAM_INFER))
    for at in range(0, len(body), 16384):
        out += frame(DATA, 0, 1, body[at : at + 16384])
    client.send(out)
    _, _, payload = client.until(RST_STREAM, 1)
    assert int.from_bytes(payload, "big") == 0x3  # FLOW_CONTROL_ERROR
    client.close()
    live(server.server.grpc_port)


@pytest.mark.parametrize("server", [{"grpc_max_connections": 2}], indirect=True)
def test_connections_past_the_cap_send_an_idle_one_away_or_are_refused(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    """--grpc-max-connections: at the cap the oldest connection without a call open gets
    GOAWAY to make room; when every one has a call open, the new connection is closed with
    GOAWAY ENHANCE_YOUR_CALM saying why, and a flood of refusals logs one line, not one each."""
    caplog.set_level(logging.WARNING, logger="tritonx.grpc")
    port = server.server.grpc_port
    idle = Client(port)
    idle.send(idle.call(1, LIVE, b""))
    assert idle.trailers(1)[b"grpc-status"] == b"0"
    busy = Client(port)
    busy.send(frame(HEADERS, END_HEADERS, 1, busy.headers(INFER)))  # a call left open
    busy.send(busy.call(3, LIVE, b""))
    assert busy.trailers(3)[b"grpc-status"] == b"0"
    newer = Client(port)
    code, debug = idle.goaway_with_debug()
    assert code == 0 and b"--grpc-max-connections" in debug  # NO_ERROR: sent away
    newer.send(frame(HEADERS, END_HEADERS, 1, newer.headers(INFER)))  # a call left open
    newer.send(newer.call(3, LIVE, b""))
    assert newer.trailers(3)[b"grpc-status"] == b"0"
    for _ in range(3):
        refused = Client(port)
        code, debug = refused.goaway_with_debug()
        assert code == 0xB  # ENHANCE_YOUR_CALM
        assert debug == (
            b"too many connections: --grpc-max-connections 2 reached, each with a call open"
        )
    lines = [r.getMessage() for r in caplog.records if "connections refused" in r.getMessage()]
    assert 1 <= len(lines) < 3  # one per 10 s (two only if the machine stalled that long)
    assert lines[0].startswith("gRPC connections refused: 1 ")
    for client in (busy, newer):
        client.send(client.call(5, LIVE, b""))
        assert client.trailers(5)[b"grpc-status"] == b"0"
        client.close()
