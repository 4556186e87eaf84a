"""Resource limits of the transports, measured on a real ``tritonx serve`` subprocess.

Hostile or careless clients on loopback, bounded in size and time: stalled and oversized
HTTP bodies, idle and slow connections, connection storms, gzip bombs, large decodes,
rejected and compressed gRPC messages, unbounded error texts. Memory figures are the
server's resident set (``VmRSS`` / ``VmHWM`` in ``/proc/<pid>/status``), CPU figures its
``utime + stime``; bounds are generous (several times the fixed figures, a fraction of the
unfixed ones). Each test notes what the code before these limits did.

The code under test is whatever ``tritonx`` the test process imports (the subprocess gets
the same ``PYTHONPATH`` in front of the identity test backend).
"""

from __future__ import annotations

import asyncio
import os
import select
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import orjson
import pytest

from tritonx.proto import service_pb2, service_pb2_grpc
from tritonx.testing import ModelRepositoryBuilder, echo_plugin_env, listening

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

MiB = 1 << 20
#: seconds a server may take to start (a hang, not a measurement: generous for a loaded machine)
STARTUP_DEADLINE = 180.0
HCL = "Inference-Header-Content-Length"


class Tritonx:
    """A ``tritonx serve`` subprocess on loopback ports chosen by the OS."""

    def __init__(self, proc: subprocess.Popen[str], http: int, grpc_port: int) -> None:
        self.proc = proc
        self.http = http
        self.grpc = grpc_port
        self.log: list[str] = []

    def status(self, key: str) -> int:
        """A ``/proc/<pid>/status`` figure in MiB (VmRSS, VmHWM)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) // 1024
        raise KeyError(key)

    def rss(self) -> int:
        return self.status("VmRSS")

    def settled_rss(self, seconds: float = 1.0) -> int:
        """The RSS once it stops falling (buffers are freed after the answers go out)."""
        low = self.rss()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.1)
            low = min(low, self.rss())
        return low

    def cpu(self) -> float:
        """CPU seconds the server has used (user + system)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def sockets(self) -> int:
        """Open sockets of the server process."""
        fd_dir = Path(f"/proc/{self.proc.pid}/fd")
        count = 0
        for fd in fd_dir.iterdir():
            try:
                count += os.readlink(fd).startswith("socket:")
            except OSError:
                pass
        return count


def _repository(root: Path) -> Path:
    repo = ModelRepositoryBuilder(root)
    repo.add_identity("m", "INT32", dims=[-1])
    repo.add_identity("b", "BYTES", dims=[-1])
    repo.add_identity("bytes_2", "BYTES", dims=[2])
    repo.add_identity("wild_2", "FP32", dims=[-1, -1])
    repo.add_identity("batched", "FP32", max_batch_size=4, dims=[-1, 3])
    repo.add(
        "two",
        backend="identity",
        inputs=[("INPUT0", "INT32", [-1]), ("INPUT1", "INT32", [-1])],
        outputs=[("OUTPUT0", "INT32", [-1]), ("OUTPUT1", "INT32", [-1])],
    )
    return repo.root


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment where the identity test backend is an installed plugin."""
    return echo_plugin_env(tmp_path_factory.mktemp("site"), drop=("TRITONX_", "MALLOC_"))


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _repository(tmp_path_factory.mktemp("limits") / "models")


_LIMITED = (
    "import os, resource, sys; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {nofile})); "
    "os.execv(sys.executable, [sys.executable, '-m', 'tritonx', *sys.argv[1:]])"
)


def _start(
    repository: Path,
    env: dict[str, str],
    *flags: str,
    extra_env: dict[str, str] | None = None,
    nofile: int | None = None,
) -> Tritonx:
    # the open-file limit is set by a small exec wrapper: a preexec_fn would run in a fork
    # of this process, whose grpc threads do not survive it
    launcher = (
        [sys.executable, "-c", _LIMITED.format(nofile=nofile)]
        if nofile
        else [sys.executable, "-m", "tritonx"]
    )
    args = [
        *launcher,
        "serve",
        "--model-repository",
        str(repository),
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--http-port=0",
        "--grpc-port=0",
        "--allow-metrics=false",
        *flags,
    ]

    proc = subprocess.Popen(
        args, env={**env, **(extra_env or {})}, stderr=subprocess.PIPE, text=True
    )
    # a server that hangs before logging "Started" is killed at the deadline, and the
    # failure carries its log
    addresses, lines = listening(proc, timeout=STARTUP_DEADLINE)
    port = {name: int(address.rpartition(":")[2]) for name, address in addresses.items()}
    server = Tritonx(proc, port["HTTPService"], port["GRPCInferenceService"])
    server.log = lines
    stream = proc.stderr
    assert stream is not None
    threading.Thread(target=lambda: lines.extend(stream), daemon=True).start()
    time.sleep(0.5)  # let start-up allocations settle before a baseline is taken
    return server


@pytest.fixture
def serve(repository: Path, plugin_env: dict[str, str]) -> Iterator[Callable[..., Tritonx]]:
    """Start ``tritonx serve`` with extra flags (stopped after the test)."""
    started: list[Tritonx] = []

    def start(*flags: str, **kw: Any) -> Tritonx:
        server = _start(repository, plugin_env, *flags, **kw)
        started.append(server)
        return server

    yield start
    for server in started:
        server.proc.kill()
        server.proc.wait(30)


@pytest.fixture(scope="module")
def shared(repository: Path, plugin_env: dict[str, str]) -> Iterator[Tritonx]:
    """One server with default flags for the tests that only send requests."""
    server = _start(repository, plugin_env)
    yield server
    server.proc.kill()
    server.proc.wait(30)


# ---------------------------------------------------------------------------------- clients


def http_request(
    port: int,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    method: str = "POST",
    timeout: float = 30.0,
) -> tuple[int, dict[str, str], bytes, bool]:
    """One request on a fresh connection: (status, headers, body, closed by the server).

    The body is sent from a thread while the answer is read, so an early answer (and a
    connection the server closes) is seen as the server sent it.
    """
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    for key, value in (headers or {}).items():
        head += f"{key}: {value}\r\n"

    def send() -> None:
        try:
            sock.sendall(head.encode() + b"\r\n")
            view = memoryview(body)
            for start in range(0, len(view), MiB):
                sock.sendall(view[start : start + MiB])
        except OSError:
            pass  # the server answered and closed early

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed without an answer: {data!r}"
            data += chunk
        head_bytes, _, rest = data.partition(b"\r\n\r\n")
        lines = head_bytes.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        answer_headers = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            answer_headers[key.strip().lower()] = value.strip()
        length = int(answer_headers.get("content-length", "0"))
        received = bytearray(rest)
        while len(received) < length:
            chunk = sock.recv(1 << 20)
            assert chunk, "connection closed in the middle of the answer"
            received += chunk
        closed = False
        if answer_headers.get("connection", "").lower() == "close":
            sock.settimeout(10)
            try:
                while sock.recv(65536):
                    pass
                closed = True
            except ConnectionResetError:
                closed = True
        return status, answer_headers, bytes(received[:length]), closed
    finally:
        sock.close()
        sender.join(10)


def json_error(body: bytes) -> str:
    return str(orjson.loads(body)["error"])


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` (EOF or reset) within ``seconds``."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def grpc_stub(port: int) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(
        f"127.0.0.1:{port}",
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
    )
    return channel, service_pb2_grpc.GRPCInferenceServiceStub(channel)


def gzip_bomb(inflated_mib: int) -> bytes:
    """A gzip body inflating to about ``inflated_mib`` MiB of zeros (built in ~0.2 s: the
    stream repeats one fully flushed 16 MiB block; its CRC is wrong, which only a reader
    that inflated all of it could notice)."""
    zeros = bytes(16 * MiB)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    block = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    return first + block * (inflated_mib // 16 - 1) + packer.flush()


# ---------------------------------------------------------------------------------- HTTP bodies


def test_stalled_bodies_allocate_only_what_arrived(serve: Callable[..., Tritonx]) -> None:
    """20 connections declare 64 MiB bodies and stall after 64 KiB: memory follows what
    arrived. Before: the full Content-Length was allocated (and zero-filled) up front, RSS
    +1.28 GB, and it stayed after the clients went away (a cycle through aiohttp's stored
    exception held the buffers)."""
    server = serve()
    base = server.settled_rss()
    socks = []
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", server.http))
        sock.sendall(
            b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
            % (64 * MiB)
            + b"{"
            + b" " * (64 * 1024 - 1)
        )
        socks.append(sock)
    time.sleep(1.5)
    stalled = server.rss()
    for sock in socks:
        sock.close()
    after = server.settled_rss(1.5)
    print(f"RSS: base {base} MiB, 20 stalled 64 MiB bodies {stalled} MiB, closed {after} MiB")
    assert stalled - base < 150
    assert after - base < 150
    status, _, _, _ = http_request(server.http, "/v2/health/ready", method="GET")
    assert status == 200


def test_stalled_body_times_out(serve: Callable[..., Tritonx]) -> None:
    """A body with no byte for ``--http-body-timeout-secs`` gets 408 and its connection is
    closed. Before: stalled bodies were waited for forever."""
    server = serve("--http-body-timeout-secs=1")
    socks = []
    for _ in range(3):
        sock = socket.create_connection(("127.0.0.1", server.http))
        sock.sendall(
            b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"
        )
        socks.append(sock)
    started = time.monotonic()
    for sock in socks:
        sock.settimeout(10)
        answer = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert b"timed out reading the request body: no data for 1 s" in answer
    assert time.monotonic() - started < 6
    body = orjson.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [3]}]}
    )
    status, _, out, _ = http_request(server.http, "/v2/models/m/infer", body)
    assert status == 200 and orjson.loads(out)["outputs"][0]["data"] == [3]


def test_idle_and_slow_connections_are_closed(serve: Callable[..., Tritonx]) -> None:
    """Connections that send nothing, send their headers a byte at a time, or stay idle
    after a request are closed after the header / keep-alive timeouts. Before: all of them
    were held forever (300 for 100 s in the report)."""
    server = serve("--http-header-timeout-secs=1", "--http-keepalive-timeout-secs=2")
    idle = [socket.create_connection(("127.0.0.1", server.http)) for _ in range(30)]
    slow = [socket.create_connection(("127.0.0.1", server.http)) for _ in range(3)]
    keepalive = socket.create_connection(("127.0.0.1", server.http))
    keepalive.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
    assert keepalive.recv(65536).startswith(b"HTTP/1.1 200 ")
    request = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 40
    started = time.monotonic()
    for byte in range(12):  # one byte each 0.2 s: the 1 s header deadline passes first
        for sock in slow:
            try:
                sock.sendall(request[byte : byte + 1])
            except OSError:
                pass
        time.sleep(0.2)
    assert all(closed_within(sock, 3) for sock in idle)
    assert all(closed_within(sock, 3) for sock in slow)
    assert time.monotonic() - started < 6
    assert closed_within(keepalive, 3)
    assert time.monotonic() - started < 6
    for sock in [*idle, *slow, keepalive]:
        sock.close()
    status, _, _, _ = http_request(server.http, "/v2/health/ready", method="GET")
    assert status == 200


def test_header_deadline_of_a_later_request_on_a_kept_connection(
    serve: Callable[..., Tritonx],
) -> None:
    """Each request's headers get their own deadline: a connection that keeps asking in time
    stays open past the header timeout, and a later request whose headers trickle in is cut
    off one header timeout after its own first byte (not at a deadline counted from the
    connection's opening)."""
    server = serve("--http-header-timeout-secs=1", "--http-keepalive-timeout-secs=30")
    request = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 60 + b"\r\n\r\n"
    sock = socket.create_connection(("127.0.0.1", server.http))
    opened = time.monotonic()
    sock.settimeout(5)
    while time.monotonic() - opened < 2.5:  # 2.5 header timeouts of prompt requests
        sock.sendall(request)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        time.sleep(0.3)
    time.sleep(0.3)  # the trickle starts partway into a deadline counted from an earlier byte
    first_byte = time.monotonic()
    closed_at = None
    for byte in range(len(request) - 4):  # one byte each 0.1 s, never the end of the headers
        try:
            sock.sendall(request[byte : byte + 1])
        except OSError:
            closed_at = time.monotonic()
            break
        if select.select([sock], [], [], 0.1)[0]:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                closed_at = time.monotonic()
                break
    sock.close()
    assert closed_at is not None
    assert 0.9 < closed_at - first_byte < 2.0


def test_connection_cap_queues_new_clients(serve: Callable[..., Tritonx]) -> None:
    """At ``--http-max-connections`` new clients wait (an idle connection is closed to make
    room) instead of being reset, and an accept storm of 200 clients is served in full.
    Before: no cap; at the open-file limit new clients were reset."""
    server = serve("--http-max-connections=8")
    base_sockets = server.sockets()
    idle = [socket.create_connection(("127.0.0.1", server.http)) for _ in range(8)]
    time.sleep(1.3)  # idle for longer than the eviction grace
    status, _, _, _ = http_request(server.http, "/v2/health/ready", method="GET", timeout=10)
    assert status == 200
    assert sum(closed_within(sock, 0.2) for sock in idle) >= 1  # one was closed for it
    for sock in idle:
        sock.close()

    async def storm() -> tuple[list[bytes], int]:
        peak = 0

        async def one() -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.http)
            writer.write(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), 30)
            writer.close()
            return answer

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, server.sockets() - base_sockets)
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch())
        answers = await asyncio.gather(*(one() for _ in range(200)))
        watcher.cancel()
        return answers, peak

    answers, peak = asyncio.run(storm())
    assert all(a.startswith(b"HTTP/1.1 200 ") for a in answers)
    print(f"accept storm: 200 clients answered, at most {peak} server sockets above base")
    assert peak <= 8 + 2


def test_open_file_limit_does_not_reset_clients(serve: Callable[..., Tritonx]) -> None:
    """With a 256-descriptor limit and 300 idle connections open, a new client is served
    (the default cap, 192 here, keeps descriptors free; idle connections make room).
    Before: accept() failed at the limit and new clients were reset."""
    server = serve(nofile=256)
    idle = []
    for _ in range(300):
        idle.append(socket.create_connection(("127.0.0.1", server.http), timeout=5))
    time.sleep(1.3)
    started = time.monotonic()
    status, _, _, _ = http_request(server.http, "/v2/health/ready", method="GET", timeout=20)
    assert status == 200
    assert time.monotonic() - started < 10
    for sock in idle:
        sock.close()


def test_gzip_bombs_stop_at_the_limit(serve: Callable[..., Tritonx]) -> None:
    """A 10 MB gzip body inflating to ~2.4 GB: inflation stops at --http-max-input-size (or
    never starts when the request fails first) and the connection is closed. Before: an
    answer sent before the body was read (unknown model, repository APIs) left aiohttp
    inflating the rest for its 10 s lingering time, ~7 CPU-s per upload."""
    server = serve()
    bomb = gzip_bomb(2400)
    gzip_headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    cpu = server.cpu()
    started = time.monotonic()
    cases = [
        ("/v2/models/m/infer", 400, "Decompressed data size exceeds the maximum allowed value"),
        ("/v2/models/nope/infer", 404, "Request for unknown model: 'nope' is not found"),
        ("/v2/repository/index", 400, "Decompressed data size exceeds the maximum allowed value"),
    ]
    for path, want, message in cases:
        status, _, body, closed = http_request(server.http, path, bomb, gzip_headers)
        assert (status, closed) == (want, True), (path, body[:200])
        assert message in json_error(body)
    used = server.cpu() - cpu
    print(f"3 gzip bombs: {used:.2f} CPU-s, {time.monotonic() - started:.2f} s")
    assert used < 3


def test_concurrent_gzip_bombs_leave_other_requests_fast(serve: Callable[..., Tritonx]) -> None:
    """8 concurrent gzip bombs on an unknown model and on the repository index: health probes
    meanwhile are answered without waiting for the bombs' inflation, and nothing inflates
    after the answers. Before: the bombs kept inflating on the event loop for aiohttp's 10 s
    lingering time (the slowest healthy request took 12 s here, ~7 CPU-s per upload).

    Measured in the server's CPU-seconds, not wall-clock time, so a loaded machine changes
    nothing: a loop busy inflating answers no probe, however fast the machine."""
    server = serve()
    bomb = gzip_bomb(2400)
    gzip_headers = {"Content-Encoding": "gzip"}
    paths = ["/v2/models/nope/infer", "/v2/repository/index"] * 4

    def bombs() -> None:
        threads = [
            threading.Thread(
                target=lambda p=p: http_request(server.http, p, bomb, gzip_headers), daemon=True
            )
            for p in paths
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
            assert not thread.is_alive(), "a gzip bomb was not answered"

    cpu = server.cpu()
    _, worst, probes = _probe_while(server, bombs)
    used = server.cpu() - cpu
    print(
        f"8 concurrent gzip bombs: {used:.2f} server CPU-s; {probes} probes, the slowest "
        f"{worst:.2f} CPU-s"
    )
    assert worst < 3.0  # the bombs' whole work here is ~1.4 CPU-s; before: ~7 per upload
    # nothing keeps inflating after the answers: an idle server uses (almost) no CPU-seconds
    # in a window of wall-clock time, however loaded the machine
    cpu = server.cpu()
    threading.Event().wait(2)
    assert server.cpu() - cpu < 0.5


# ---------------------------------------------------------------------------------- decodes


def _probe_while(server: Tritonx, work: Callable[[], Any]) -> tuple[Any, float, int]:
    """Run ``work`` in a thread while health probes go out one after another (every 20 ms) on
    one connection; return its result, the most CPU-seconds the server spent while one probe
    waited for its answer, and the number of probes.

    An event loop held by a long computation answers no probe until it is done, so the probe
    sent meanwhile waits for the whole computation's CPU time, whatever the machine's load
    (which stretches wall-clock times, not CPU-seconds). The first probe is answered before
    ``work`` starts, and one goes out as long as it runs."""
    result: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # re-raised in the test's thread
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    worst = 0.0
    probes = 0
    probe = socket.create_connection(("127.0.0.1", server.http), timeout=120)
    try:
        while probes == 0 or thread.is_alive():
            before = server.cpu()
            probe.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = probe.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:100]
            worst = max(worst, server.cpu() - before)
            probes += 1
            if probes == 1:
                thread.start()
            threading.Event().wait(0.02)  # pacing, not synchronisation
        thread.join()
    finally:
        probe.close()
    if failed:
        raise failed[0]
    return result[0], worst, probes


def test_large_json_numbers_do_not_stall_the_event_loop(serve: Callable[..., Tritonx]) -> None:
    """62 MB of JSON numbers (7.75 M INT32) decoded, run and encoded back: health probes
    meanwhile answer quickly (decode and encode run in a worker thread, the JSON parsed a
    piece at a time so that the thread never holds the GIL long). Before: probes waited
    0.9-1.2 s (parse, conversion and encoding at once on the loop): as many CPU-seconds."""
    server = serve()
    values = np.arange(7_750_000, dtype=np.int32) + 1_000_000
    body = orjson.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "datatype": "INT32", "shape": [values.size], "data": values}
            ]
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
    )
    assert len(body) > 62_000_000
    (status, _, out, _), worst, probes = _probe_while(
        server, lambda: http_request(server.http, "/v2/models/m/infer", body, timeout=240)
    )
    assert status == 200
    assert len(orjson.loads(out)["outputs"][0]["data"]) == values.size
    print(f"62 MB JSON request: {probes} probes, the slowest {worst:.2f} server CPU-s")
    assert worst < 0.5


def test_large_bytes_inputs_do_not_stall_the_event_loop(serve: Callable[..., Tritonx]) -> None:
    """A 2 M-element BYTES input (binary over HTTP, raw over gRPC), echoed back: health
    probes meanwhile answer quickly. Before: the event loop stalled for ~3 s (~3 CPU-s)."""
    server = serve()
    count = 2_000_000
    raw = (b"\x01\x00\x00\x00x") * count
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "BYTES",
                    "shape": [count],
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    )
    (status, headers, out, _), worst, probes = _probe_while(
        server,
        lambda: http_request(
            server.http, "/v2/models/b/infer", header + raw, {HCL: str(len(header))}, timeout=240
        ),
    )
    assert status == 200 and out[int(headers[HCL.lower()]) :] == raw
    print(f"2 M BYTES elements over HTTP: {probes} probes, the slowest {worst:.2f} server CPU-s")
    assert worst < 1.0

    request = service_pb2.ModelInferRequest(model_name="b")
    request.inputs.add(name="INPUT0", datatype="BYTES", shape=[count])
    request.raw_input_contents.append(raw)
    channel, stub = grpc_stub(server.grpc)
    with channel:
        response, worst, probes = _probe_while(
            server, lambda: stub.ModelInfer(request, timeout=240)
        )
    assert response.raw_output_contents[0] == raw
    print(f"2 M BYTES elements over gRPC: {probes} probes, the slowest {worst:.2f} server CPU-s")
    assert worst < 1.0


# ---------------------------------------------------------------------------------- gRPC memory


def _rejected(size: int, model: str = "m") -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model)
    request.inputs.add(name="INPUT0", datatype="INT32", shape=[10])
    request.raw_input_contents.append(bytes(size))
    return request


def test_rejected_grpc_messages_are_released(serve: Callable[..., Tritonx]) -> None:
    """Three rejected 200 MiB ModelInfer messages (one of them on a stream) are freed when
    they are answered, and the heap is trimmed after them. Before: an abort() cycle (the
    aborting exception, kept on the call, held the handler's frame and so the request) kept
    each until a cyclic GC: +1.5 GB."""
    server = serve()
    base = server.settled_rss()
    channel, stub = grpc_stub(server.grpc)
    with channel:
        for request in (_rejected(200 * MiB), _rejected(200 * MiB, model="nope")):
            with pytest.raises(grpc.RpcError) as info:
                stub.ModelInfer(request)
            assert info.value.code() in (
                grpc.StatusCode.INVALID_ARGUMENT,
                grpc.StatusCode.NOT_FOUND,
            )
            del request
        answers = list(stub.ModelStreamInfer(iter([_rejected(200 * MiB)])))
        assert "input byte size mismatch" in answers[0].error_message
        del answers
    after = server.settled_rss(1.5)
    print(f"RSS: base {base} MiB, after 3 rejected 200 MiB messages {after} MiB")
    assert after - base < 400


def test_compressed_grpc_messages_are_bounded_when_inflated(
    serve: Callable[..., Tritonx],
) -> None:
    """A gzip message inflating past --grpc-max-message-size is refused with
    RESOURCE_EXHAUSTED without being inflated in full (peak RSS grows by about the limit);
    a smaller one that is rejected is released."""
    server = serve("--grpc-max-message-size=33554432")
    base = server.settled_rss()
    peak = server.status("VmHWM")
    channel, stub = grpc_stub(server.grpc)
    with channel:
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(_rejected(160 * MiB), compression=grpc.Compression.Gzip)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        grown = server.status("VmHWM") - max(peak, base)
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(_rejected(24 * MiB), compression=grpc.Compression.Gzip)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    after = server.settled_rss(1.5)
    print(f"160 MiB gzip message, 32 MiB limit: peak +{grown} MiB; RSS {base} -> {after} MiB")
    assert grown < 100
    assert after - base < 200


# ---------------------------------------------------------------------------------- errors


def test_grpc_error_messages_are_bounded(shared: Tritonx) -> None:
    """An error echoing a 64 KiB model name reaches the client as NOT_FOUND, its message cut
    to 4 KiB (percent-encoded) with '...'. Before: the status trailer passed the client's
    metadata limit and the client got RESOURCE_EXHAUSTED "received metadata size exceeds
    hard limit (value length 65578 vs. 16384)" instead."""
    channel, stub = grpc_stub(shared.grpc)
    with channel:
        for name in ("n" * 65536, "é" * 30000, "\n" * 30000):
            with pytest.raises(grpc.RpcError) as info:
                stub.ModelInfer(service_pb2.ModelInferRequest(model_name=name))
            assert info.value.code() == grpc.StatusCode.NOT_FOUND
            details = info.value.details()
            assert details.startswith("Request for unknown model: '" + name[:10])
            assert details.endswith("...")
            encoded = details.encode()
            assert (
                len(encoded) + 2 * sum(not 0x20 <= b < 0x7F or b == 0x25 for b in encoded) <= 4096
            )
        stream = list(
            stub.ModelStreamInfer(iter([service_pb2.ModelInferRequest(model_name="n" * 65536)]))
        )
        assert stream[0].error_message.endswith("...")
        assert len(stream[0].error_message) < 4200


def test_http_error_messages_are_bounded(shared: Tritonx) -> None:
    body = orjson.dumps(
        {"inputs": [{"name": "X" * 100_000, "datatype": "INT32", "shape": [1], "data": [1]}]}
    )
    status, _, out, _ = http_request(shared.http, "/v2/models/m/infer", body)
    message = json_error(out)
    assert status == 400
    assert "unexpected inference input 'XXXX" in message
    assert message.endswith("...") and len(message) == 4096 + 3


# ---------------------------------------------------------------------------------- Triton's answers


def test_nonpositive_http_max_input_size_is_refused(
    repository: Path, plugin_env: dict[str, str]
) -> None:
    """tritonserver refuses ``--http-max-input-size`` <= 0 (before: accepted)."""
    for value in ("0", "-1"):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "tritonx",
                "serve",
                "--model-repository",
                str(repository),
                f"--http-max-input-size={value}",
                "--allow-grpc=false",
                "--allow-metrics=false",
                "--http-port=0",
            ],
            env=plugin_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2, result.stderr[-500:]
        assert "Error: --http-max-input-size must be greater than 0." in result.stderr


def test_deeply_nested_json_bodies(shared: Tritonx) -> None:
    """JSON nested past orjson's 1024 levels is read as Triton reads it: a deep ``ready`` on
    the repository index is 400 (Triton's message), deep unrelated members are ignored,
    deep input ``data`` fails Triton's nesting check (400). Before: 500, parse failure."""
    deep = b"[" * 5000 + b"]" * 5000
    status, _, out, _ = http_request(
        shared.http, "/v2/repository/index", b'{"ready": ' + deep + b"}"
    )
    assert (status, json_error(out)) == (400, "Invalid value for 'ready': expected a boolean")
    status, _, out, _ = http_request(shared.http, "/v2/repository/index", b'{"x": ' + deep + b"}")
    assert status == 200 and {"name": "m", "version": "1", "state": "READY"} in orjson.loads(out)
    status, _, out, _ = http_request(shared.http, "/v2/repository/index", deep)
    assert status == 200
    body = (
        b'{"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": '
        + deep
        + b"}]}"
    )
    status, _, out, _ = http_request(shared.http, "/v2/models/m/infer", body)
    assert status == 400
    assert "JSON nesting depth exceeds maximum allowed limit (100)" in json_error(out)


def test_raw_binary_errors_are_tritons(shared: Tritonx) -> None:
    """Raw binary requests (Inference-Header-Content-Length: 0) fail with core's messages.
    Before: the two counts of the input-count message were swapped and the other texts
    were tritonx's own."""
    cases = [
        (
            "two",
            b"\0" * 4,
            "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be "
            "deduced but got 2 inputs in 'two' model configuration",
        ),
        (
            "bytes_2",
            b"ab",
            "[request id: <id_unknown>] For BYTE datatype raw input 'INPUT0', the model must "
            "have input shape [1]",
        ),
        (
            "wild_2",
            b"\0" * 8,
            "[request id: <id_unknown>] The shape of the raw input 'INPUT0' can not be deduced "
            "because there are more than one variable-sized dimension",
        ),
        (
            "batched",
            b"\0" * 30,
            "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model "
            "'batched'. Expected 24, got 30",
        ),
    ]
    for model, body, message in cases:
        status, _, out, _ = http_request(shared.http, f"/v2/models/{model}/infer", body, {HCL: "0"})
        assert (status, json_error(out)) == (400, message)
    status, headers, out, _ = http_request(
        shared.http,
        "/v2/models/batched/infer",
        np.arange(6, dtype=np.float32).tobytes(),
        {HCL: "0"},
    )
    assert status == 200
    assert orjson.loads(out[: int(headers[HCL.lower()])])["outputs"][0]["shape"] == [1, 2, 3]


def test_byte_size_overflow_is_tritons(shared: Tritonx) -> None:
    """A JSON input whose byte size overflows int64 gets Triton's 'byte size overflow'
    message (before: the max-input-size message with a 20-digit byte size)."""
    body = orjson.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [2**61], "data": [1]}]}
    )
    status, _, out, _ = http_request(shared.http, "/v2/models/m/infer", body)
    assert (status, json_error(out)) == (
        400,
        "byte size overflow for input 'INPUT0': element count (2305843009213693952) * data "
        "type size (4) exceeds maximum allowed size (9223372036854775807)",
    )
