"""The gRPC engines at the HTTP/2 level and where their answers could differ.

Every test with a server runs on both engines (the ``grpc_engine`` fixture): the event-loop
engine (``--grpc-engine loop``, the default) is held to what grpc core (``--grpc-engine aio``)
answers; a test of a rule grpc core does not follow is ``loop_engine_only``, one the loop
engine fails ``loop_engine_differs`` (see ``conftest.py``).

Raw HTTP/2 clients are ``h2``'s; the rest is the real tritonclient or grpc's own client.
Nothing sleeps: reads wait for the server's frames with a socket timeout that only bounds a
hang.
"""

from __future__ import annotations

import shutil
import socket
import struct
from pathlib import Path
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
import h2.settings
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tritonx._transports.grpc.engine import parse_timeout
from tritonx._transports.http2.hpack import HeaderDecoder
from tritonx.config import EXAMPLE_REPOSITORY, ServerSettings
from tritonx.proto import service_pb2, service_pb2_grpc
from tritonx.testing import ModelRepositoryBuilder, ServerThread, loopback_settings
from tritonx.testing.serve_process import ServeProcess

READ_TIMEOUT = 20.0
INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
PING, GOAWAY = 0x6, 0x7


@pytest.fixture
def server_settings(model_repository: ModelRepositoryBuilder, grpc_engine: str) -> ServerSettings:
    model_repository.add_identity("ident", "FP32", dims=[-1])
    model_repository.add_identity("words", "BYTES", dims=[-1])
    model_repository.add_identity("slow", "FP32", dims=[-1], parameters={"execute_delay_ms": "300"})
    return loopback_settings(
        model_repository.root, allow_http=False, allow_metrics=False, grpc_engine=grpc_engine
    )


def start(settings: ServerSettings, plugin_manager: Any, **overrides: Any) -> ServerThread:
    from dataclasses import replace

    from tritonx.server import Server

    thread = ServerThread(Server(replace(settings, **overrides), plugin_manager=plugin_manager))
    thread.start()
    return thread


def infer_request(data: np.ndarray) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="ident", id="r1")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32")
    tensor.shape.extend(data.shape)
    request.raw_input_contents.append(data.tobytes())
    return request.SerializeToString()


def simple_request() -> bytes:
    """A ModelInferRequest for the bundled ``simple`` model (INT32 [1, 16] twice)."""
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="INT32")
        tensor.shape.extend([1, 16])
        request.raw_input_contents.append(np.arange(16, dtype=np.int32).tobytes())
    return request.SerializeToString()


def h2_client(
    port: int, local_settings: dict[int, int] | None = None
) -> tuple[socket.socket, h2.connection.H2Connection]:
    """A connection past both prefaces (the server's SETTINGS and window are known)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT)
    config = h2.config.H2Configuration(client_side=True, header_encoding=None)
    conn = h2.connection.H2Connection(config)
    conn.local_settings = h2.settings.Settings(client=True, initial_values=local_settings or {})
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    settings = window = False
    while not (settings and window):
        data = sock.recv(1 << 16)
        assert data
        for event in conn.receive_data(data):
            settings = settings or isinstance(event, h2.events.RemoteSettingsChanged)
            window = window or isinstance(event, h2.events.WindowUpdated)
    sock.sendall(conn.data_to_send())
    return sock, conn


def send_message(conn: h2.connection.H2Connection, stream: int, message: bytes) -> None:
    """A gRPC message in DATA frames of the largest size allowed, the stream then ended."""
    data = b"\x00" + len(message).to_bytes(4, "big") + message
    size = conn.max_outbound_frame_size
    for at in range(0, len(data), size):
        conn.send_data(stream, data[at : at + size])
    conn.end_stream(stream)


def call_headers(port: int, path: str = INFER_PATH, **extra: str) -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", f"127.0.0.1:{port}"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *extra.items(),
    ]


def run_call(
    sock: socket.socket, conn: h2.connection.H2Connection, stream: int
) -> tuple[bytes, dict[bytes, bytes]]:
    """Read until ``stream`` ends; its DATA (credited back as it comes, so the server sends
    at most one window at a time) and its trailers."""
    body = bytearray()
    trailers: dict[bytes, bytes] = {}
    while True:
        data = sock.recv(1 << 16)
        assert data, "the server closed the connection"
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.DataReceived) and event.stream_id == stream:
                body += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, stream)
            elif (
                isinstance(event, (h2.events.TrailersReceived, h2.events.ResponseReceived))
                and event.stream_id == stream
            ):
                trailers = dict(event.headers)  # (a trailers-only answer: its headers)
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                sock.sendall(conn.data_to_send())
                return bytes(body), trailers
        sock.sendall(conn.data_to_send())


def response_of(body: bytes) -> service_pb2.ModelInferResponse:
    assert body[0] == 0 and int.from_bytes(body[1:5], "big") == len(body) - 5
    return service_pb2.ModelInferResponse.FromString(body[5:])


# ------------------------------------------------------------------ both engines


def test_both_engines_answer_alike(server_thread: ServerThread) -> None:
    """Inference, a stream, an error status and the health check, over either engine."""
    url = server_thread.server.grpc_url
    client = grpcclient.InferenceServerClient(url)
    try:
        tensor = grpcclient.InferInput("INPUT0", [3], "FP32")
        tensor.set_data_from_numpy(np.array([1, 2, 3], np.float32))
        result = client.infer("ident", [tensor], request_id="a", client_timeout=READ_TIMEOUT)
        assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3]
        assert result.get_response().id == "a"
        with pytest.raises(InferenceServerException) as err:
            client.infer("nope", [tensor], client_timeout=READ_TIMEOUT)
        assert err.value.status() == "StatusCode.NOT_FOUND"
        assert "'nope'" in (err.value.message() or "")
        answers: list[Any] = []
        client.start_stream(callback=lambda result, error: answers.append((result, error)))
        for i in range(3):
            client.async_stream_infer("ident", [tensor], request_id=str(i))
        client.stop_stream()
        assert [r.get_response().id for r, e in answers if e is None] == ["0", "1", "2"]
    finally:
        client.close()
    with grpc.insecure_channel(url) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        assert check(b"", timeout=READ_TIMEOUT) == b"\x08\x01"  # status: SERVING
        nope = channel.unary_unary("/inference.GRPCInferenceService/Nope")
        with pytest.raises(grpc.RpcError) as rpc_err:
            nope(b"", timeout=READ_TIMEOUT)
        assert rpc_err.value.code() is grpc.StatusCode.UNIMPLEMENTED


def call_error(call: Any, *args: Any, **kwargs: Any) -> tuple[grpc.StatusCode, str]:
    """The status (code, details) a grpc client call ends with, which must not be OK."""
    with pytest.raises(grpc.RpcError) as info:
        call(*args, **kwargs)
    return info.value.code(), info.value.details()


def test_statuses_and_metadata_answer_alike(server_thread: ServerThread) -> None:
    """Details with characters grpc-message percent-encodes, the ``x-request-id`` echoed in
    the trailing metadata, a deadline that passes, unknown methods and services."""
    url = server_thread.server.grpc_url
    request = service_pb2.ModelInferRequest.FromString(infer_request(np.ones(4, np.float32)))
    with grpc.insecure_channel(url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response, call = stub.ModelInfer.with_call(
            request, metadata=[("x-request-id", "abc-1"), ("x-other", "1")], timeout=READ_TIMEOUT
        )
        assert response.id == "r1"
        assert call.code() is grpc.StatusCode.OK and not call.details()
        assert tuple(call.initial_metadata()) == ()
        assert [tuple(m) for m in call.trailing_metadata()] == [("x-request-id", "abc-1")]
        name = "nö %2F\t'\"é"
        request.model_name = name
        assert call_error(stub.ModelInfer, request, timeout=READ_TIMEOUT) == (
            grpc.StatusCode.NOT_FOUND,
            f"Request for unknown model: '{name}' is not found",
        )
        for path in ("/inference.GRPCInferenceService/Nope", "/no.Such/Service"):
            assert call_error(channel.unary_unary(path), b"", timeout=READ_TIMEOUT) == (
                grpc.StatusCode.UNIMPLEMENTED,
                "Method not found!",
            )
        health_watch = channel.unary_stream("/grpc.health.v1.Health/Watch")
        assert call_error(lambda: list(health_watch(b"", timeout=READ_TIMEOUT)))[0] is (
            grpc.StatusCode.UNIMPLEMENTED
        )


def test_a_deadline_that_passes_ends_the_call(server_thread: ServerThread) -> None:
    """A ``grpc-timeout`` shorter than the model's execution: DEADLINE_EXCEEDED ``Deadline
    Exceeded`` (grpc core's words, seen in the raw trailers: a client's own deadline would
    hide the server's), and the connection goes on serving."""
    port = server_thread.server.grpc_port
    assert port is not None
    sock, conn = h2_client(port)
    try:
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, call_headers(port, **{"grpc-timeout": "100m"}))
        request = service_pb2.ModelInferRequest.FromString(infer_request(np.ones(2, np.float32)))
        request.model_name = "slow"
        send_message(conn, stream, request.SerializeToString())
        sock.sendall(conn.data_to_send())
        body, trailers = run_call(sock, conn, stream)
        assert body == b""
        assert trailers[b"grpc-status"] == b"4"
        assert trailers[b"grpc-message"] == b"Deadline Exceeded"
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, call_headers(port))
        send_message(conn, stream, infer_request(np.ones(2, np.float32)))
        sock.sendall(conn.data_to_send())
        body, trailers = run_call(sock, conn, stream)
        assert trailers[b"grpc-status"] == b"0" and response_of(body).id == "r1"
    finally:
        sock.close()


def test_messages_over_the_limit_are_answered_in_grpc_cores_words(
    server_settings: ServerSettings, plugin_manager: Any
) -> None:
    """--grpc-max-message-size on a request (unary) and on answers (unary and streaming):
    RESOURCE_EXHAUSTED with grpc core's text."""
    small = service_pb2.ModelInferRequest.FromString(infer_request(np.ones(35, np.float32)))
    size = small.ByteSize()  # its answer is larger (model version, outputs)
    limit = size + 10
    big = service_pb2.ModelInferRequest.FromString(infer_request(np.ones(100, np.float32)))
    thread = start(server_settings, plugin_manager, grpc_max_message_size=limit)
    try:
        with grpc.insecure_channel(thread.server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            code, details = call_error(stub.ModelInfer, big, timeout=READ_TIMEOUT)
            assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert (
                details
                == f"SERVER: Received message larger than max ({big.ByteSize()} vs. {limit})"
            )
            code, details = call_error(stub.ModelInfer, small, timeout=READ_TIMEOUT)
            assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert details.startswith("SERVER: Sent message larger than max (")
            assert details.endswith(f" vs. {limit})")
            code, details = call_error(
                lambda: list(stub.ModelStreamInfer(iter([small]), timeout=READ_TIMEOUT))
            )
            assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert details.startswith("SERVER: Sent message larger than max (")
    finally:
        thread.stop()


def test_a_unary_call_with_two_messages_answers_the_first(server_thread: ServerThread) -> None:
    message = infer_request(np.ones(2, np.float32))
    with grpc.insecure_channel(server_thread.server.grpc_url) as channel:
        call = channel.stream_stream(INFER_PATH)  # ModelInfer, called as a stream
        answers = list(call(iter([message, message]), timeout=READ_TIMEOUT))
    assert [service_pb2.ModelInferResponse.FromString(a).id for a in answers] == ["r1"]


# ------------------------------------------------------------------ HTTP/2 level


def test_a_response_larger_than_the_clients_window_waits_for_its_credit(
    server_thread: ServerThread,
) -> None:
    """A 512 KiB answer to a client announcing 16 KiB stream windows and keeping its 64 KiB
    connection window: sent as the client's WINDOW_UPDATE frames come, whole and in order."""
    port = server_thread.server.grpc_port
    assert port is not None
    data = np.arange(1 << 17, dtype=np.float32)  # 512 KiB: within the server's windows
    sock, conn = h2_client(port, {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 16384})
    try:
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, call_headers(port))
        send_message(conn, stream, infer_request(data))
        sock.sendall(conn.data_to_send())
        body, trailers = run_call(sock, conn, stream)
    finally:
        sock.close()
    assert trailers[b"grpc-status"] == b"0"
    answer = response_of(body)
    assert answer.id == "r1"
    np.testing.assert_array_equal(np.frombuffer(answer.raw_output_contents[0], np.float32), data)


def test_many_calls_on_one_connection_share_its_window(server_thread: ServerThread) -> None:
    """Eight 256 KiB answers at once on a connection whose 64 KiB window holds a quarter of
    one: they share it as the credit comes, and all arrive whole."""
    port = server_thread.server.grpc_port
    assert port is not None
    sock, conn = h2_client(port)
    try:
        streams = {}
        for i in range(8):
            stream = conn.get_next_available_stream_id()
            data = np.full(1 << 16, i, np.float32)
            conn.send_headers(stream, call_headers(port))
            send_message(conn, stream, infer_request(data))
            streams[stream] = data
        sock.sendall(conn.data_to_send())
        bodies: dict[int, bytearray] = {s: bytearray() for s in streams}
        ended: set[int] = set()
        while len(ended) < len(streams):
            received = sock.recv(1 << 16)
            assert received
            for event in conn.receive_data(received):
                if isinstance(event, h2.events.DataReceived):
                    bodies[event.stream_id] += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    ended.add(event.stream_id)
            sock.sendall(conn.data_to_send())
    finally:
        sock.close()
    for stream, data in streams.items():
        answer = response_of(bytes(bodies[stream]))
        np.testing.assert_array_equal(
            np.frombuffer(answer.raw_output_contents[0], np.float32), data
        )


def test_a_message_over_the_limit_is_refused_from_its_prefix(
    server_settings: ServerSettings, plugin_manager: Any
) -> None:
    """--grpc-max-message-size: the call ends RESOURCE_EXHAUSTED as soon as the 5-byte prefix
    announces more (nothing of the body is needed); grpc core's exact text:
    :func:`test_messages_over_the_limit_are_answered_in_grpc_cores_words`."""
    thread = start(server_settings, plugin_manager, grpc_max_message_size=1000)
    try:
        port = thread.server.grpc_port
        assert port is not None
        sock, conn = h2_client(port)
        try:
            stream = conn.get_next_available_stream_id()
            conn.send_headers(stream, call_headers(port))
            conn.send_data(stream, b"\x00" + (5000).to_bytes(4, "big") + b"\x0a")
            sock.sendall(conn.data_to_send())
            _, trailers = run_call(sock, conn, stream)
        finally:
            sock.close()
        assert trailers[b"grpc-status"] == b"8"
        assert trailers[b"grpc-message"].endswith(
            b"Received message larger than max (5000 vs. 1000)"
        )
        assert grpcclient.InferenceServerClient(thread.server.grpc_url).is_server_live()
    finally:
        thread.stop()


def test_an_unanswered_keepalive_ping_closes_the_connection(
    server_settings: ServerSettings, plugin_manager: Any
) -> None:
    thread = start(
        server_settings,
        plugin_manager,
        grpc_keepalive_time=50,
        grpc_keepalive_timeout=50,
        grpc_keepalive_permit_without_calls=True,
    )
    try:
        port = thread.server.grpc_port
        assert port is not None
        sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT)
        sock.sendall(PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        received = bytearray()
        while True:  # read (never answering the server's PING) until the server closes
            try:
                data = sock.recv(1 << 16)
            except ConnectionResetError:
                break
            if not data:
                break
            received += data
        sock.close()
        kinds = [kind for kind, _, _ in frames_of(bytes(received))]
        assert PING in kinds
        assert grpcclient.InferenceServerClient(thread.server.grpc_url).is_server_live()
    finally:
        thread.stop()


def frames_of(data: bytes) -> list[tuple[int, int, bytes]]:
    frames = []
    pos = 0
    while pos + 9 <= len(data):
        length = int.from_bytes(data[pos : pos + 3], "big")
        frames.append((data[pos + 3], data[pos + 4], data[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    return frames


def test_a_ping_flood_without_calls_is_sent_away(server_thread: ServerThread) -> None:
    """grpc core's policing (--grpc-http2-max-ping-strikes 2, a ping every 5 minutes at most
    without data): the third early ping gets GOAWAY ENHANCE_YOUR_CALM ``too_many_pings``."""
    port = server_thread.server.grpc_port
    assert port is not None
    sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT)
    ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + b"12345678"
    sock.sendall(PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + ping * 4)
    received = bytearray()
    while True:
        data = sock.recv(1 << 16)
        if not data:
            break
        received += data
    sock.close()
    goaways = [payload for kind, _, payload in frames_of(bytes(received)) if kind == GOAWAY]
    assert goaways and struct.unpack(">I", goaways[0][4:8])[0] == 0xB  # ENHANCE_YOUR_CALM
    assert goaways[0][8:] == b"too_many_pings"
    assert grpcclient.InferenceServerClient(server_thread.server.grpc_url).is_server_live()


@pytest.mark.loop_engine_only(
    reason="grpc core does not check the content-type: it serves a call sent as text/plain "
    "(PROTOCOL-HTTP2: servers SHOULD answer 415)"
)
def test_a_bad_content_type_gets_415(server_thread: ServerThread) -> None:
    port = server_thread.server.grpc_port
    assert port is not None
    sock, conn = h2_client(port)
    try:
        stream = conn.get_next_available_stream_id()
        headers = [(k, "text/plain" if k == "content-type" else v) for k, v in call_headers(port)]
        conn.send_headers(stream, headers, end_stream=True)
        sock.sendall(conn.data_to_send())
        status = None
        while status is None:
            data = sock.recv(1 << 16)
            assert data
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = dict(event.headers)[b":status"]
    finally:
        sock.close()
    assert status == b"415"


# ------------------------------------------------------------------ pieces


def test_grpc_timeout_values() -> None:
    assert parse_timeout(b"5S") == 5.0
    assert parse_timeout(b"250m") == 0.25
    assert parse_timeout(b"99999999u") == pytest.approx(99.999999)
    assert parse_timeout(b"2H") == 7200.0
    for bad in (b"", b"S", b"5", b"5x", b"123456789S", b"-1S"):
        assert parse_timeout(bad) is None


def test_header_blocks_decode_as_hpack_encodes_them() -> None:
    """The engine's HPACK decoder against ``hpack``'s encoder: indexed, literal, Huffman and
    table-size-update blocks, over several calls sharing the dynamic table."""
    import hpack

    encoder = hpack.Encoder()
    decoder = HeaderDecoder()
    calls = [
        [(":path", INFER_PATH), ("user-agent", "grpc-c/47"), ("x-id", str(i))] for i in range(50)
    ]
    for headers in calls:
        block = encoder.encode(headers)
        assert decoder.decode(block) == [(k.encode(), v.encode()) for k, v in headers]
    encoder.header_table_size = 256  # the encoder signals the smaller table
    block = encoder.encode(calls[0])
    assert decoder.decode(block) == [(k.encode(), v.encode()) for k, v in calls[0]]
    same = encoder.encode(calls[0])
    assert decoder.decode(same) is decoder.decode(same)  # an indexed-only block, kept


def test_pings_beside_flowing_data_are_no_strikes(server_thread: ServerThread) -> None:
    """A client pinging with every DATA frame it sends and receives (as grpc core's BDP
    probes do during large transfers) is not sent away for too many pings."""
    port = server_thread.server.grpc_port
    assert port is not None
    data = np.arange(1 << 17, dtype=np.float32)  # 512 KiB each way
    sock, conn = h2_client(port, {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 16384})
    try:
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, call_headers(port))
        message = infer_request(data)
        wire = b"\x00" + len(message).to_bytes(4, "big") + message
        size = conn.max_outbound_frame_size
        for at in range(0, len(wire), size):
            conn.send_data(stream, wire[at : at + size], end_stream=at + size >= len(wire))
            conn.ping(at.to_bytes(8, "big"))
        sock.sendall(conn.data_to_send())
        body = bytearray()
        trailers: dict[bytes, bytes] = {}
        ended = False
        count = 0
        while not ended:
            received = sock.recv(1 << 16)
            assert received, "the server closed the connection"
            for event in conn.receive_data(received):
                if isinstance(event, h2.events.DataReceived):
                    body += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, stream)
                    count += 1
                    conn.ping(count.to_bytes(8, "big"))
                elif isinstance(event, h2.events.TrailersReceived):
                    trailers = dict(event.headers)
                elif isinstance(event, h2.events.StreamEnded):
                    ended = True
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise AssertionError(f"sent away: {event.additional_data!r}")
            sock.sendall(conn.data_to_send())
    finally:
        sock.close()
    assert trailers[b"grpc-status"] == b"0"
    answer = response_of(bytes(body))
    np.testing.assert_array_equal(np.frombuffer(answer.raw_output_contents[0], np.float32), data)


@pytest.mark.loop_engine_only(
    reason="grpc core races its deadline timer against the handler: a call whose deadline "
    "is already due may still end OK when the handler answers first (CI, 2026-12-07)"
)
def test_a_deadline_due_before_the_call_starts_still_ends_it(
    tmp_path: Path, grpc_engine: str
) -> None:
    """``tritonx serve`` (uvloop: due timers run before the loop's ready callbacks) and a
    ``grpc-timeout`` already due when the call's message arrives: the call ends
    DEADLINE_EXCEEDED (its handler's task was cancelled before its first step), and the
    connection goes on serving."""
    root = tmp_path / "models"
    shutil.copytree(EXAMPLE_REPOSITORY / "simple", root / "simple")  # ONNX add/sub
    with ServeProcess(
        root,
        tmp_path / "serve.log",
        f"--grpc-engine={grpc_engine}",
        plugins=("backend_onnx",),
        listeners=("grpc",),
    ) as served:
        port = int(served.grpc_url.rsplit(":", 1)[1])
        sock, conn = h2_client(port)
        try:
            for timeout in ("1n", "0m"):
                stream = conn.get_next_available_stream_id()
                conn.send_headers(stream, call_headers(port, **{"grpc-timeout": timeout}))
                send_message(conn, stream, simple_request())
                sock.sendall(conn.data_to_send())  # HEADERS and DATA in one write
                _, trailers = run_call(sock, conn, stream)
                assert trailers[b"grpc-status"] == b"4", (timeout, trailers)
                assert trailers[b"grpc-message"] == b"Deadline Exceeded"
            stream = conn.get_next_available_stream_id()
            conn.send_headers(stream, call_headers(port))
            send_message(conn, stream, simple_request())
            sock.sendall(conn.data_to_send())
            body, trailers = run_call(sock, conn, stream)
            assert trailers[b"grpc-status"] == b"0"
            assert response_of(body).model_name == "simple"
        finally:
            sock.close()


def test_a_client_that_never_reads_is_not_read_either(server_thread: ServerThread) -> None:
    """Every SETTINGS frame owes an ACK: a client sending them without reading the ACKs
    fills the server's write buffer, and the server then stops reading from it (its memory
    stays bounded) instead of queueing answers without end."""
    port = server_thread.server.grpc_port
    assert port is not None
    sock, _ = h2_client(port)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        chunk = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" * 16384  # owes 147 KB of ACKs
        sock.settimeout(2.0)  # bounds the wait once the server has stopped reading
        sent = 0
        with pytest.raises(TimeoutError):
            while sent < 256 << 20:  # never reached once the server stops reading
                sock.sendall(chunk)
                sent += len(chunk)
    finally:
        sock.close()
    assert grpcclient.InferenceServerClient(server_thread.server.grpc_url).is_server_live()
