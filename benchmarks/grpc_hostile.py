"""Hostile gRPC clients against the event-loop engine (issue 44): the figures of its bounds.

Runs ``tritonx serve`` as a subprocess over the bundled example repository (gRPC on
loopback, ``--event-loop-watchdog-secs 0.1``) and, per phase, one raw HTTP/2 client doing
what the probe of the landed engine did, while a second thread asks ``GET /v2/health/live``
every 20 ms. Each phase prints the slowest health answer during the attack, the watchdog's
count of loop stalls over 100 ms, the server's CPU seconds (``/proc/<pid>/stat``) and RSS
growth (``VmRSS``), and what the attacking connection got (GOAWAY code, or still open):

* **streams**: 40,000 streams that never finish (a repeated indexed HEADERS block each) then
  40,000 empty SETTINGS frames (landed: the loop blocked 66 s);
* **settings**: 100 open streams (the cap) then 40,000 SETTINGS frames changing the initial
  window;
* **window**: 300 ``simple_identity`` calls of 1 MiB each from a client whose receive window
  is 0 (landed: RSS 276 → 871 MB, held);
* **hpack**: 40 header blocks of 250 KiB that add one 4 KB table entry and refer to it on
  every byte (landed: 9.7 s CPU, loop blocked 6.9 s);
* **reset**: 100,000 HEADERS + DATA + RST_STREAM (rapid reset; landed: 4-6 s CPU, health
  answers over 1 s);
* **fields**: 6,000 header blocks of 400 one-byte indexed fields each, the most a block may
  decode to (the second break pass's 1,690 held the loop 10 s; they now end the connection).

    python benchmarks/grpc_hostile.py                    # every phase but window-open, ~1 min
    python benchmarks/grpc_hostile.py --phases streams,reset
    python benchmarks/grpc_hostile.py -- --grpc-max-reset-rate 0   # flags for tritonx serve
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import hpack
from serving import Served, serve

from tritonx.config import EXAMPLE_REPOSITORY
from tritonx.proto import service_pb2

TICK = os.sysconf("SC_CLK_TCK")
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x7, 0x8
END_STREAM, END_HEADERS = 0x1, 0x4
INFER = "/inference.GRPCInferenceService/ModelInfer"
LIVE = "/inference.GRPCInferenceService/ServerLive"
CODES = {0: "NO_ERROR", 1: "PROTOCOL_ERROR", 9: "COMPRESSION_ERROR", 11: "ENHANCE_YOUR_CALM"}


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    assert match is not None
    return int(match.group(1)) / 1024


class Prober(threading.Thread):
    """``GET /v2/health/live`` every 20 ms; the slowest answer (a failure counts as 10 s)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/v2/health/live"
        self.stop = threading.Event()
        self.slowest = 0.0
        self.count = 0

    def run(self) -> None:
        while not self.stop.is_set():
            start = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as answer:
                    answer.read()
                took = time.monotonic() - start
            except OSError:
                took = 10.0
            self.slowest = max(self.slowest, took)
            self.count += 1
            self.stop.wait(0.02)


class Attacker:
    """A raw HTTP/2 connection."""

    def __init__(self, port: int, settings: bytes = b"") -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.encoder = hpack.Encoder()
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))
        self.received = bytearray()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def block(self, path: str) -> bytes:
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

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except OSError:
                return
            if not data:
                return
            self.received += data

    def send(self, data: bytes) -> bool:
        """False once the server closed the connection."""
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def frames(self) -> list[tuple[int, int, int, bytes]]:
        out = []
        data = bytes(self.received)
        pos = 0
        while pos + 9 <= len(data):
            length = int.from_bytes(data[pos : pos + 3], "big")
            if pos + 9 + length > len(data):
                break
            stream = int.from_bytes(data[pos + 5 : pos + 9], "big")
            out.append((data[pos + 3], data[pos + 4], stream, data[pos + 9 : pos + 9 + length]))
            pos += 9 + length
        return out

    def credit(self) -> tuple[int, dict[int, int], int, set[int]]:
        """What the server granted so far, as a compliant client counts it: the connection's
        window, each stream's window increments, its initial stream window, and the streams
        it ended (trailers or RST_STREAM)."""
        connection, streams, initial, ended = 65535, {}, 65535, set()
        for kind, flags, stream, payload in self.frames():
            if kind == WINDOW_UPDATE:
                increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
                if stream:
                    streams[stream] = streams.get(stream, 0) + increment
                else:
                    connection += increment
            elif kind == SETTINGS and not flags & 1:
                for at in range(0, len(payload), 6):
                    if int.from_bytes(payload[at : at + 2], "big") == 4:
                        initial = int.from_bytes(payload[at + 2 : at + 6], "big")
            elif (kind == HEADERS and flags & END_STREAM) or kind == RST_STREAM:
                ended.add(stream)
        return connection, streams, initial, ended

    def outcome(self) -> str:
        for kind, _, _, payload in self.frames():
            if kind == GOAWAY:
                code = int.from_bytes(payload[4:8], "big")
                return f"GOAWAY {CODES.get(code, code)}"
        return "still open"

    def close(self) -> None:
        self.sock.close()
        self.reader.join(5)


def grpc_message(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


def streams_phase(attacker: Attacker) -> None:
    first = attacker.block(INFER)
    repeated = attacker.block(INFER)  # the same fields, now indexed: a few bytes
    out = [frame(HEADERS, END_HEADERS, 1, first)]
    out += [frame(HEADERS, END_HEADERS, sid, repeated) for sid in range(3, 80_000, 2)]
    out += [frame(SETTINGS, 0, 0)] * 40_000
    data = b"".join(out)
    for at in range(0, len(data), 1 << 16):
        if not attacker.send(data[at : at + (1 << 16)]):
            break


def settings_phase(attacker: Attacker) -> None:
    """As many open streams as the server allows, then 40,000 SETTINGS frames that move the
    initial window up and down (each one moved every stream's window on the landed engine)."""
    first = attacker.block(INFER)
    repeated = attacker.block(INFER)
    out = [frame(HEADERS, END_HEADERS, 1, first)]
    out += [frame(HEADERS, END_HEADERS, sid, repeated) for sid in range(3, 200, 2)]
    for index in range(40_000):
        value = 65535 + (index & 1)
        out.append(frame(SETTINGS, 0, 0, (4).to_bytes(2, "big") + value.to_bytes(4, "big")))
    data = b"".join(out)
    for at in range(0, len(data), 1 << 16):
        if not attacker.send(data[at : at + (1 << 16)]):
            break


def window_phase(attacker: Attacker) -> None:
    request = service_pb2.ModelInferRequest(model_name="simple_identity")
    tensor = request.inputs.add(name="INPUT0", datatype="BYTES")
    tensor.shape.extend([1, 1])
    value = b"x" * (1 << 20)
    request.raw_input_contents.append(len(value).to_bytes(4, "little") + value)
    body = grpc_message(request.SerializeToString())
    block = attacker.block(INFER)
    # a compliant sender: within the windows the server grants and its 100 open streams
    sent_total = 0
    sent: dict[int, int] = {}
    for index in range(300):
        sid = 2 * index + 1
        while True:
            _, _, _, ended = attacker.credit()
            if index - len(ended) < 100 or attacker.outcome() != "still open":
                break
            time.sleep(0.01)
        if attacker.outcome() != "still open":
            break
        head = frame(HEADERS, END_HEADERS, sid, block if index == 0 else attacker.block(INFER))
        if not attacker.send(head):
            break
        for at in range(0, len(body), 16384):
            piece = body[at : at + 16384]
            deadline = time.monotonic() + 30
            while True:
                connection, streams, initial, _ = attacker.credit()
                if (
                    sent_total + len(piece) <= connection
                    and sent.get(sid, 0) + len(piece) <= initial + streams.get(sid, 0)
                ) or time.monotonic() > deadline:
                    break
                time.sleep(0.002)
            last = at + 16384 >= len(body)
            if not attacker.send(frame(DATA, END_STREAM if last else 0, sid, piece)):
                return
            sent_total += len(piece)
            sent[sid] = sent.get(sid, 0) + len(piece)
    # every call answered (trailers) or waiting (its headers sent): then RSS is read
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        answered = {stream for kind, _, stream, _ in attacker.frames() if kind == HEADERS}
        refused = {stream for kind, _, stream, _ in attacker.frames() if kind == RST_STREAM}
        if len(answered | refused) >= 300 or attacker.outcome() != "still open":
            break
        time.sleep(0.1)


def hpack_phase(attacker: Attacker) -> None:
    base = attacker.block(LIVE)
    size = 4000
    entry = b"\x40\x0ax-bomb-abc\x7f" + _varint(size - 127) + b"v" * size
    blocks = []
    for index in range(40):
        bomb = (base if index == 0 else attacker.block(LIVE)) + entry
        bomb += b"\xbe" * (250 * 1024 - len(bomb))
        pieces = [bomb[at : at + 16384] for at in range(0, len(bomb), 16384)]
        sid = 2 * index + 1
        blocks.append(frame(HEADERS, END_STREAM, sid, pieces[0]))
        for n, piece in enumerate(pieces[1:], 1):
            blocks.append(frame(0x9, END_HEADERS if n == len(pieces) - 1 else 0, sid, piece))
    data = b"".join(blocks)
    for at in range(0, len(data), 1 << 16):
        if not attacker.send(data[at : at + (1 << 16)]):
            break


#: one-byte fields per block in the fields phase: the most the decoding bound lets through
#: (at 128 bytes a field); 1,690 was the break pass's (now the connection's end)
FIELDS = 400


def fields_phase(attacker: Attacker) -> None:
    """6,000 header blocks, each the gRPC headers then :data:`FIELDS` one-byte indexed fields
    (second break pass: with 1,690 each block cost ~4 ms and one connection held the loop
    10 s)."""
    base = attacker.block(LIVE)
    repeated = attacker.block(LIVE)
    out = []
    for index in range(6000):
        tail = b"\xbf" * FIELDS + (b"\xbf" if index & 1 else b"\xc1")
        block = (base if index == 0 else repeated) + tail
        out.append(frame(HEADERS, END_HEADERS | END_STREAM, 2 * index + 1, block))
    data = b"".join(out)
    for at in range(0, len(data), 1 << 16):
        if not attacker.send(data[at : at + (1 << 16)]):
            break


def reset_phase(attacker: Attacker) -> None:
    first = attacker.block(LIVE)
    repeated = attacker.block(LIVE)
    body = grpc_message(b"")
    chunk = []
    for index in range(100_000):
        sid = 2 * index + 1
        chunk.append(frame(HEADERS, END_HEADERS, sid, first if index == 0 else repeated))
        chunk.append(frame(DATA, 0, sid, body))
        chunk.append(frame(RST_STREAM, 0, sid, b"\x00\x00\x00\x08"))
        if len(chunk) >= 3000:
            if not attacker.send(b"".join(chunk)):
                return
            chunk = []
    attacker.send(b"".join(chunk))


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


PHASES = {
    "streams": (streams_phase, b""),
    "settings": (settings_phase, b""),
    "window": (window_phase, (4).to_bytes(2, "big") + (0).to_bytes(4, "big")),
    # the same calls from a client that reads its answers: the memory the calls themselves
    # take (run it first to compare: allocator high-water marks are reached once)
    "window-open": (window_phase, b""),
    "hpack": (hpack_phase, b""),
    "reset": (reset_phase, b""),
    "fields": (fields_phase, b""),
}


def run_phase(name: str, served: Served, log: Path) -> str:
    attack, settings = PHASES[name]
    pid = served.pid
    stalls_before = log.read_text(errors="replace").count("has been blocked")
    prober = Prober(served.http_port)
    prober.start()
    cpu0, rss0 = cpu_seconds(pid), rss_mb(pid)
    attacker = Attacker(served.grpc_port, settings)
    start = time.monotonic()
    attack(attacker)
    # until the server has dealt with what was sent: the connection ended, or the server idle
    last = cpu_seconds(pid)
    while time.monotonic() - start < 120 and attacker.outcome() == "still open":
        time.sleep(0.5)
        now = cpu_seconds(pid)
        if now - last < 0.1:  # (the prober alone costs ~0.03 s per 0.5 s)
            break
        last = now
    rss1 = rss_mb(pid)
    cpu1 = cpu_seconds(pid)
    outcome = attacker.outcome()
    attacker.close()
    prober.stop.set()
    prober.join()
    stalls = log.read_text(errors="replace").count("has been blocked") - stalls_before
    return (
        f"{name:8} slowest health {prober.slowest * 1000:7.1f} ms | loop stalls > 100 ms: "
        f"{stalls} | server CPU {cpu1 - cpu0:6.2f} s | RSS {rss0:6.0f} -> {rss1:6.0f} MB "
        f"(+{rss1 - rss0:.0f}) | {outcome} | {time.monotonic() - start:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phases", default="streams,settings,window,hpack,reset,fields")
    parser.add_argument("serve_args", nargs="*", help="flags for tritonx serve (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "serve.log"
        extra = ["--event-loop-watchdog-secs", "0.1", "--log-info", "true", *args.serve_args]
        with serve(Path(EXAMPLE_REPOSITORY), extra, log) as served:
            for name in args.phases.split(","):
                print(run_phase(name, served, log), flush=True)


if __name__ == "__main__":
    main()
