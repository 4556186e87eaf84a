"""What HTTP/2 framing costs per unary gRPC call, before any server code runs (issue 36):
through h2's event API, and through framing of its own.

Two ``h2`` connections (a client and a server) talk in memory; per call the client sends the
HEADERS tritonclient sends for ``ModelInfer`` and one DATA frame (a length-prefixed message of
``--request-bytes``), and the server side — the only part timed — reads the frames, returns the
flow-control credit, and answers HEADERS, one DATA frame of ``--response-bytes`` and the
trailers (``grpc-status: 0``). The figure is the CPU one call costs an engine built on h2's
event API, compared with the protobuf work of an add_sub request (parse the request, build and
serialize the response) timed the same way. The HTTP ``/infer`` fast path's whole per-request
CPU (100-125 µs on the 2-core VM, ``benchmarks/README.md``) is the yardstick: an engine has
to frame a call in a small part of that to reach the issue's goal (gRPC ≤ 1.5x HTTP's CPU).

    python benchmarks/grpc_framing.py                     # 20000 calls
    python benchmarks/grpc_framing.py --calls 5000 --request-bytes 16000

Messages fit one DATA frame (HTTP/2's default 16 KiB): the small-call case the issue is about.
"""

from __future__ import annotations

import argparse
import struct
import time
from typing import Any

#: the request headers tritonclient.grpc (grpcio) sends for a unary ModelInfer call
REQUEST_HEADERS = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
    (b":authority", b"localhost:8001"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
    (b"grpc-accept-encoding", b"identity,deflate,gzip"),
    (b"user-agent", b"grpc-python/1.85.3 grpc-c/47.0.0 (linux; chttp2)"),
]
RESPONSE_HEADERS = [(b":status", b"200"), (b"content-type", b"application/grpc")]
TRAILERS = [(b"grpc-status", b"0")]


def message(size: int) -> bytes:
    """A gRPC length-prefixed message of ``size`` payload bytes."""
    return b"\x00" + struct.pack(">I", size) + b"x" * size


def h2_pair() -> tuple[Any, Any]:
    import h2.config
    import h2.connection

    client = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )
    server = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=False, header_encoding=None)
    )
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    return client, server


def h2_server_us(calls: int, request_bytes: int, response_bytes: int) -> float:
    """Mean server-side µs per unary call through h2's event API."""
    import h2.events

    client, server = h2_pair()
    request, response = message(request_bytes), message(response_bytes)
    stream = 1
    spent = 0
    for _ in range(calls):
        client.send_headers(stream, REQUEST_HEADERS)
        client.send_data(stream, request, end_stream=True)
        wire = client.data_to_send()
        start = time.perf_counter_ns()
        body = bytearray()
        for event in server.receive_data(wire):
            if isinstance(event, h2.events.DataReceived):
                body += event.data
                server.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        server.send_headers(stream, RESPONSE_HEADERS)
        server.send_data(stream, response)
        server.send_headers(stream, TRAILERS, end_stream=True)
        out = server.data_to_send()
        spent += time.perf_counter_ns() - start
        for event in client.receive_data(out):
            if isinstance(event, h2.events.DataReceived):
                client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        server.receive_data(client.data_to_send())
        stream += 2
    return spent / calls / 1000


#: HPACK of the response's headers and trailers, encoded once: ``:status: 200`` (static
#: table index 8) and the others as literals without indexing (no encoder state to keep)
def _literal(name: bytes, value: bytes) -> bytes:
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


RESPONSE_BLOCK = b"\x88" + _literal(b"content-type", b"application/grpc")
TRAILER_BLOCK = _literal(b"grpc-status", b"0")
DATA, HEADERS, WINDOW_UPDATE = 0x0, 0x1, 0x8
END_STREAM, END_HEADERS = 0x1, 0x4


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def own_framer_us(calls: int, request_bytes: int, response_bytes: int) -> float:
    """Mean server-side µs per unary call with framing of its own: frames cut by their
    9-byte headers, request HEADERS decoded by ``hpack`` unless the block is the same bytes as
    the last one that carried only indexed fields (its decoded headers are reused), flow
    control credit returned once half the window is used, the answer's HEADERS, DATA and
    trailers written from blocks encoded once. The client side is h2's, as above. (Not an
    engine: it keeps no send window, handles no CONTINUATION, PING, RST_STREAM or SETTINGS
    change — what an engine adds for the rare frames.)"""
    import h2.events
    import hpack

    client, _ = h2_pair()  # (the server's h2 only did the connection preface and settings)
    decoder = hpack.Decoder()
    cached_block = b""
    cached: list[tuple[bytes, bytes]] = []
    request, response_body = message(request_bytes), message(response_bytes)
    window_used = 0
    stream = 1
    spent = 0
    for _ in range(calls):
        client.send_headers(stream, REQUEST_HEADERS)
        client.send_data(stream, request, end_stream=True)
        wire = client.data_to_send()
        start = time.perf_counter_ns()
        view = memoryview(wire)
        at = 0
        body = b""
        out: list[bytes] = []
        while at < len(view):
            length = int.from_bytes(view[at : at + 3], "big")
            kind = view[at + 3]
            sid = int.from_bytes(view[at + 5 : at + 9], "big") & 0x7FFFFFFF
            payload = view[at + 9 : at + 9 + length]
            at += 9 + length
            if kind == HEADERS:
                block = bytes(payload)
                if block != cached_block:
                    headers = decoder.decode(block, raw=True)
                    # a block of indexed fields only (every byte's top bit set) changes no
                    # table: the same bytes decode to the same headers next time
                    if all(b & 0x80 for b in block):
                        cached_block, cached = block, headers
                else:
                    headers = cached
            elif kind == DATA:
                body = bytes(payload)
                window_used += length
                if window_used > 32768:  # give the credit back, connection and stream
                    credit = struct.pack(">I", window_used)
                    out.append(_frame(WINDOW_UPDATE, 0, 0, credit))
                    window_used = 0
        assert body and headers
        out.append(_frame(HEADERS, END_HEADERS, sid, RESPONSE_BLOCK))
        out.append(_frame(DATA, 0, sid, response_body))
        out.append(_frame(HEADERS, END_HEADERS | END_STREAM, sid, TRAILER_BLOCK))
        reply = b"".join(out)
        spent += time.perf_counter_ns() - start
        for event in client.receive_data(reply):
            if isinstance(event, h2.events.DataReceived):
                client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        client.data_to_send()  # (the client's credit: this framer does not send)
        stream += 2
    return spent / calls / 1000


def protobuf_us(calls: int) -> float:
    """Mean µs to parse an add_sub ModelInferRequest and build + serialize its response."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="FP32")
        tensor.shape.append(4)
        request.raw_input_contents.append(b"\x00" * 16)
    wire = request.SerializeToString()
    start = time.perf_counter_ns()
    for _ in range(calls):
        parsed = service_pb2.ModelInferRequest()
        parsed.ParseFromString(wire)
        answer = service_pb2.ModelInferResponse(model_name="add_sub", model_version="1")
        for name in ("OUTPUT0", "OUTPUT1"):
            out = answer.outputs.add(name=name, datatype="FP32")
            out.shape.append(4)
            answer.raw_output_contents.append(b"\x00" * 16)
        answer.SerializeToString()
    return (time.perf_counter_ns() - start) / calls / 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--request-bytes", type=int, default=200)
    parser.add_argument("--response-bytes", type=int, default=150)
    args = parser.parse_args(argv)
    for name in ("request_bytes", "response_bytes"):
        if not 0 <= getattr(args, name) <= 16384 - 5:
            parser.error(f"--{name.replace('_', '-')} must fit one 16 KiB DATA frame")
    framing = h2_server_us(args.calls, args.request_bytes, args.response_bytes)
    own = own_framer_us(args.calls, args.request_bytes, args.response_bytes)
    proto = protobuf_us(args.calls)
    print(f"h2 server side, one unary call:          {framing:7.1f} us")
    print(f"framing of its own, one unary call:      {own:7.1f} us")
    print(f"protobuf, add_sub request + response:    {proto:7.1f} us")


if __name__ == "__main__":
    main()
