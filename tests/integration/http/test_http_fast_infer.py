"""The HTTP ``/infer`` fast path (``tritonx._transports.http.fast_infer``, on by default) against aiohttp's
``web`` path (``--http-fast-infer false``): the same answers, in order, on raw connections.

Both servers serve the shared HTTP test repository. Raw sockets send exact bytes (pipelined,
split anywhere, a byte at a time) and read exact answers. aiohttp names itself in a
``Server`` header that the fast path does not send: that is how a test sees which path
answered. Cancellation of fast requests whose client goes away is tested in
``tests/integration/test_cancellation.py`` (its raw and ``tritonclient`` requests take the fast
path), the connection limits in ``tests/integration/test_limits.py``.
"""

from __future__ import annotations

import gzip
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from tritonx._runtime.plugins import make_plugin_manager
from tritonx.server import Server
from tritonx.testing import ServerThread, identity, loopback_settings
from tritonx.testing.repository import ModelRepositoryBuilder

HCL = "Inference-Header-Content-Length"
#: header fields left out of comparisons: aiohttp's ``Server`` (the fast path sends none) and
#: ``Date`` (both send one; two answers may be a second apart)
AIOHTTP_ONLY = ("date", "server")


def start(root: object, **overrides: object) -> ServerThread:
    settings = loopback_settings(
        root,  # type: ignore[arg-type]
        model_control_mode="explicit",
        load_model=("*",),
        allow_grpc=False,
        allow_metrics=False,
        **overrides,
    )
    thread = ServerThread(
        Server(settings, plugin_manager=make_plugin_manager(autoload=False, extra=[identity]))
    )
    thread.start()
    return thread


@pytest.fixture(scope="module")
def web(shared_repository: ModelRepositoryBuilder) -> Iterator[str]:
    """``host:port`` of a server without the fast path (the same repository as ``url``)."""
    thread = start(shared_repository.root, http_fast_infer=False)
    try:
        yield thread.server.http_url
    finally:
        thread.stop()


# ---------------------------------------------------------------------------- raw HTTP


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def fast(self) -> bool:
        """Whether the fast path answered (aiohttp's answers name aiohttp)."""
        return "server" not in self.headers

    def comparable(self) -> tuple[int, dict[str, str], bytes]:
        headers = {k: v for k, v in self.headers.items() if k not in AIOHTTP_ONLY}
        body = self.body
        if headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
            headers.pop("content-length")
        return self.status, headers, body


class Raw:
    """One client connection sending exact bytes and reading whole answers."""

    def __init__(self, url: str, timeout: float = 20.0) -> None:
        host, port = url.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError(f"closed by the server; unread: {self.buffer[:200]!r}")
        self.buffer += chunk

    def _take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._fill()
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            self._fill()
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def answer(self) -> Answer:
        """The next final answer (an interim ``100 Continue`` is skipped)."""
        status = 100
        while 100 <= status < 200:
            status = int(self._line().split(b" ", 2)[1])
            headers: dict[str, str] = {}
            while line := self._line():
                key, _, value = line.decode("latin-1").partition(":")
                assert key.lower() not in headers, f"repeated header {key}"
                headers[key.lower()] = value.strip()
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while size := int(self._line(), 16):
                body += self._take(size)
                self._take(2)
            self._take(2)
        else:
            body = self._take(int(headers["content-length"]))
        return Answer(status, headers, body)

    def answers(self, n: int) -> list[Answer]:
        return [self.answer() for _ in range(n)]

    def closed(self, seconds: float = 5.0) -> bool:
        """Whether the server closes the connection within ``seconds``."""
        self.sock.settimeout(seconds)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buffer += chunk
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


def request(
    path: str, body: bytes = b"", headers: dict[str, str] | None = None, method: str = "POST"
) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    for key, value in (headers or {}).items():
        head += f"{key}: {value}\r\n"
    return head.encode("latin-1") + b"\r\n" + body


def infer(model: str, body: object, headers: dict[str, str] | None = None, **kw: str) -> bytes:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return request(f"/v2/models/{model}/infer", raw, headers, **kw)


def binary(model: str, header: dict[str, object], *tensors: bytes, **fields: str) -> bytes:
    """A binary-extension request: the JSON header then the tensors' bytes."""
    head = orjson.dumps(header)
    return infer(model, head + b"".join(tensors), {HCL: str(len(head)), **fields})


def fp32_identity(values: np.ndarray) -> bytes:
    """A binary ``id_fp32`` request of ``values`` (FP32, 1-D), its output asked for binary."""
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "FP32",
                "shape": [values.size],
                "parameters": {"binary_data_size": values.nbytes},
            }
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
    return binary("id_fp32", header, values.tobytes())


def tensor(name: str, datatype: str, shape: list[int], data: list[object]) -> dict[str, object]:
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


def int32(*values: int) -> dict[str, object]:
    return {"inputs": [tensor("INPUT0", "INT32", [len(values)], list(values))]}


def exchange(url: str, data: bytes, n: int) -> list[Answer]:
    with Raw(url) as conn:
        conn.send(data)
        return conn.answers(n)


FP32 = np.arange(4096, dtype=np.float32)
STRINGS = b"".join(struct.pack("<I", len(s)) + s for s in (b"alpha", b"", b"\xffbytes"))

#: requests whose answers must be the same on both paths (all taken by the fast path)
CASES = {
    "json": infer("id_int32", int32(1, -2, 3)),
    "json with id and parameters": infer(
        "id_int32", {"id": "r-7", "parameters": {"a": 1}, **int32(4)}
    ),
    "binary in, binary out": binary(
        "id_fp32",
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [4096],
                    "parameters": {"binary_data_size": FP32.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        },
        FP32.tobytes(),
    ),
    "binary in, json out": binary(
        "id_fp32",
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [3],
                    "parameters": {"binary_data_size": 12},
                }
            ]
        },
        FP32[:3].tobytes(),
    ),
    "binary_data_output": infer(
        "id_int32", {"parameters": {"binary_data_output": True}, **int32(5, 6)}
    ),
    "raw binary (header length 0)": infer(
        "id_fp32", FP32[:8].tobytes(), {HCL: "0", "Content-Type": "application/octet-stream"}
    ),
    "bytes": binary(
        "id_bytes",
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "BYTES",
                    "shape": [3],
                    "parameters": {"binary_data_size": len(STRINGS)},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        },
        STRINGS,
    ),
    "two inputs, one requested": infer(
        "multi",
        {
            "inputs": [
                tensor("INPUT0", "INT32", [2], [1, 2]),
                tensor("INPUT1", "BYTES", [2], ["a", "bc"]),
            ],
            "outputs": [{"name": "OUTPUT1"}],
        },
    ),
    "batched": infer(
        "batched", {"inputs": [tensor("INPUT0", "FP32", [1, 2, 3], [0.5, 1, 2, 3, 4, 5.25])]}
    ),
    "classification": infer(
        "classifier",
        {
            "inputs": [tensor("INPUT0", "FP32", [2, 4], [0.1, 0.9, 0.3, 0.2, 4, 3, 2, 1])],
            "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2}}],
        },
    ),
    "version 2": request("/v2/models/versions/versions/2/infer", orjson.dumps(int32(8))),
    "percent-encoded name, query": request(
        "/v2/models/id%5Fint32/infer?x=1", orjson.dumps(int32(9))
    ),
    "gzip answer": infer(
        "id_fp32",
        {"inputs": [tensor("INPUT0", "FP32", [512], [1.5] * 512)]},
        {"Accept-Encoding": "gzip"},
    ),
    "keep-alive": infer("id_int32", int32(1), {"Connection": "keep-alive"}),
    # errors, answered with Triton's status and message
    "unknown model": infer("nope", int32(1)),
    "unknown version": request("/v2/models/versions/versions/3/infer", orjson.dumps(int32(1))),
    "failing model": infer("failing", int32(13)),
    "decoupled model": infer("decoupled", int32(1)),
    "bad json": infer("id_int32", b'{"inputs": ['),
    "header length past the body": infer("id_int32", b"{}", {HCL: "30"}),
    "header length not a number": infer("id_int32", b"{}", {HCL: "x"}),
    "wrong datatype": infer("id_int32", {"inputs": [tensor("INPUT0", "FP32", [1], [1.0])]}),
    "shape and data disagree": infer("id_int32", {"inputs": [tensor("INPUT0", "INT32", [3], [1])]}),
    "unknown output": infer("id_int32", {**int32(1), "outputs": [{"name": "NOPE"}]}),
    "missing input": infer("multi", int32(1)),
    "empty body": infer("id_int32", b""),
    "binary size past the body": binary(
        "id_fp32",
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [4],
                    "parameters": {"binary_data_size": 16},
                }
            ]
        },
        b"\0" * 8,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_fast_path_answers_as_the_web_path(url: str, web: str, case: str) -> None:
    """Each request on a fresh connection to both servers: the same status, Triton headers
    and body; the fast path answered it."""
    data = CASES[case]
    fast, slow = exchange(url, data, 1)[0], exchange(web, data, 1)[0]
    assert fast.fast and not slow.fast
    assert fast.comparable() == slow.comparable()
    assert fast.headers["date"].endswith(" GMT")  # as aiohttp's, compared apart from the rest
    if case == "gzip answer":
        assert fast.headers["content-encoding"] == "gzip"
    status, headers, body = fast.comparable()
    if status == 200:  # the JSON header parses
        assert orjson.loads(body[: int(headers.get(HCL.lower(), len(body)))])["model_name"]


#: one connection's requests: fast ones around the web path's (metadata, GET, 405, chunked)
STREAM = [
    CASES["json"],
    request("/v2/models/id_int32", method="GET"),
    CASES["binary in, binary out"],
    CASES["unknown model"],
    request("/v2/models/id_int32/infer", method="GET"),  # 405
    CASES["raw binary (header length 0)"],
    request("/v2/health/ready", method="GET"),
    CASES["bytes"],
    CASES["failing model"],
    CASES["json with id and parameters"],
]
CHUNKED = (
    b"POST /v2/models/id_int32/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"%x\r\n%s\r\n0\r\n\r\n" % (len(orjson.dumps(int32(77))), orjson.dumps(int32(77)))
)


def test_one_connection_alternates_between_the_paths(url: str, web: str) -> None:
    """The requests one after the other on one keep-alive connection: each ``/infer`` takes
    the fast path, each other request aiohttp; the answers equal the web path's."""
    fast, slow = [], []
    with Raw(url) as one, Raw(web) as other:
        for data in STREAM:
            one.send(data)
            fast.append(one.answer())
            other.send(data)
            slow.append(other.answer())
    assert [a.comparable() for a in fast] == [a.comparable() for a in slow]
    assert [a.fast for a in fast] == [b"/infer HTTP" in r and r[:4] == b"POST" for r in STREAM]


def test_pipelined_requests_are_answered_in_order(url: str, web: str) -> None:
    """Ten requests in one write, mixing the fast path and aiohttp: the answers come back in
    request order and equal the web path's (once aiohttp serves a request, it also takes the
    ones that arrived with it)."""
    data = b"".join(STREAM)
    fast, slow = exchange(url, data, len(STREAM)), exchange(web, data, len(STREAM))
    assert [a.comparable() for a in fast] == [a.comparable() for a in slow]
    assert fast[0].fast


def test_a_stream_split_anywhere_is_framed_the_same(url: str) -> None:
    """The pipelined stream sent in two writes, split at 40 places (in heads, in bodies, on
    request boundaries): the same answers every time."""
    data = b"".join(STREAM)
    want = [a.comparable() for a in exchange(url, data, len(STREAM))]
    cuts = sorted({*range(1, len(data), max(1, len(data) // 32)), *_boundaries(STREAM)})
    assert len(cuts) >= 40
    for cut in cuts:
        with Raw(url) as conn:
            conn.send(data[:cut])
            time.sleep(0.005)
            conn.send(data[cut:])
            assert [a.comparable() for a in conn.answers(len(STREAM))] == want, cut


def _boundaries(requests: list[bytes]) -> set[int]:
    out, at = set(), 0
    for item in requests:
        head = item.index(b"\r\n\r\n")
        out |= {at + head, at + head + 2, at + head + 4, at + len(item) - 1, at + len(item)}
        at += len(item)
    return {cut for cut in out if 0 < cut < at}


def test_a_request_sent_a_byte_at_a_time_takes_the_fast_path(url: str) -> None:
    data = CASES["json"]
    with Raw(url) as conn:
        for i in range(len(data)):
            conn.send(data[i : i + 1])
            time.sleep(0.001)
        answer = conn.answer()
    assert answer.fast and answer.status == 200
    assert orjson.loads(answer.body)["outputs"][0]["data"] == [1, -2, 3]


def test_head_then_body_takes_the_fast_path(url: str) -> None:
    """geventhttpclient (``tritonclient.http``) may write the head and the body apart."""
    data = CASES["binary in, binary out"]
    cut = data.index(b"\r\n\r\n") + 4
    with Raw(url) as conn:
        for _ in range(3):
            conn.send(data[:cut])
            time.sleep(0.05)
            conn.send(data[cut:])
            answer = conn.answer()
            assert answer.fast and answer.status == 200
            assert answer.body.endswith(FP32.tobytes())


def test_a_body_trickling_in_takes_the_fast_path(url: str) -> None:
    """A 200 KB request in 1 KiB writes, then a second one right behind it: the first is
    held until its body is whole, the second is framed from the bytes that came after."""
    values = np.arange(50_000, dtype=np.float32)
    data = fp32_identity(values) + CASES["json"]
    with Raw(url) as conn:
        for at in range(0, len(data), 1024):
            conn.send(data[at : at + 1024])
        first, second = conn.answers(2)
    assert first.fast and first.status == 200
    assert first.body.endswith(values.tobytes())
    assert second.fast and orjson.loads(second.body)["outputs"][0]["data"] == [1, -2, 3]


def test_after_a_chunked_request_aiohttp_serves_the_connection(url: str, web: str) -> None:
    """A chunked request is not framed by the fast path: it and every later request of the
    connection go to aiohttp, answered as by the web path."""
    data = CASES["json"] + CHUNKED + CASES["json"] + CASES["unknown model"]
    fast, slow = exchange(url, data, 4), exchange(web, data, 4)
    assert [a.fast for a in fast] == [True, False, False, False]
    assert [a.comparable() for a in fast] == [a.comparable() for a in slow]
    assert orjson.loads(fast[1].body)["outputs"][0]["data"] == [77]


@pytest.mark.parametrize(
    "extra",
    [
        {"Expect": "100-continue"},
        {"Connection": "close"},
        {"Content-Encoding": "identity"},
        {"X-Twice": "1\r\nX-Twice: 2"},
    ],
    ids=["expect", "close", "content-encoding", "repeated header"],
)
def test_requests_the_fast_path_leaves_to_aiohttp(
    url: str, web: str, extra: dict[str, str]
) -> None:
    data = infer("id_int32", int32(3), extra)
    if extra.get("Connection") != "close":
        data += CASES["json"]  # the connection goes on
    n = 1 if extra.get("Connection") == "close" else 2
    fast, slow = exchange(url, data, n), exchange(web, data, n)
    assert [a.comparable() for a in fast] == [a.comparable() for a in slow]
    assert not fast[0].fast and fast[0].status == 200


def test_http_1_0_large_bodies_and_odd_paths_go_to_aiohttp(url: str, web: str) -> None:
    big = np.arange(80_000, dtype=np.float32)  # 320 KB: over the fast path's 256 KiB
    old = CASES["json"].replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    utf8 = request("/v2/models/\xc3\xa9/infer", orjson.dumps(int32(1)))  # aiohttp: 400
    for data in (fp32_identity(big), old, utf8):
        fast, slow = exchange(url, data, 1)[0], exchange(web, data, 1)[0]
        assert not fast.fast and fast.status == (400 if data is utf8 else 200)
        assert fast.comparable() == slow.comparable()


def test_pipelined_large_answers_to_a_slow_reader(url: str) -> None:
    """64 pipelined 128 KiB requests whose client starts reading late: the server stops
    reading while answers wait to be written (no unbounded buffering, no deadlock) and every
    answer arrives, in order, with its own data."""
    count, size = 64, 32768
    arrays = [np.full(size, i, dtype=np.float32) for i in range(count)]
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "FP32",
                "shape": [size],
                "parameters": {"binary_data_size": size * 4},
            }
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
    with Raw(url, timeout=60) as conn:
        sender = threading.Thread(
            target=lambda: conn.send(
                b"".join(binary("id_fp32", header, a.tobytes()) for a in arrays)
            )
        )
        sender.start()
        time.sleep(1.0)  # the server's writes back up meanwhile
        for i in range(count):
            answer = conn.answer()
            assert answer.status == 200 and answer.fast
            out = np.frombuffer(answer.body[-size * 4 :], dtype=np.float32)
            assert (out == i).all(), i
        sender.join(30)
        assert not sender.is_alive()


@pytest.fixture
def shm_servers(shared_repository: ModelRepositoryBuilder) -> Iterator[tuple[str, str]]:
    """A server with the fast path and one without, both with ``--allow-client-shm``."""
    fast = start(shared_repository.root, allow_client_shm=True)
    try:
        web = start(shared_repository.root, allow_client_shm=True, http_fast_infer=False)
        try:
            yield fast.server.http_url, web.server.http_url
        finally:
            web.stop()
    finally:
        fast.stop()


def test_system_shared_memory_on_the_fast_path(shm_servers: tuple[str, str]) -> None:
    """tritonclient.http with inputs and outputs in a system shared-memory region, on both
    paths: the outputs land in the region."""
    url, web = shm_servers
    answers: list[object] = []
    data = np.arange(16, dtype=np.int32)
    key, name = f"/tritonx_fast_{id(data)}", "fast_shm"
    handle = shm.create_shared_memory_region(name, key, 2 * data.nbytes)
    try:
        shm.set_shared_memory_region(handle, [data])
        for address in (url, web):
            client = httpclient.InferenceServerClient(address)
            try:
                client.register_system_shared_memory(name, key, 2 * data.nbytes)
                inp = httpclient.InferInput("INPUT0", [16], "INT32")
                inp.set_shared_memory(name, data.nbytes)
                out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
                out.set_shared_memory(name, data.nbytes, offset=data.nbytes)
                result = client.infer("id_int32", [inp], outputs=[out])
                answers.append(result.get_response())
                view = shm.get_contents_as_numpy(handle, np.int32, [16], offset=data.nbytes)
                assert (view == data).all()
                shm.set_shared_memory_region(handle, [np.zeros(16, np.int32)], offset=data.nbytes)
            finally:
                client.unregister_system_shared_memory(name)
                client.close()
    finally:
        shm.destroy_shared_memory_region(handle)
    assert answers[0] == answers[1]


def test_tritonclient_headers_take_the_fast_path(url: str) -> None:
    """The header fields tritonclient.http (geventhttpclient) and tritonclient.http.aio
    (aiohttp) send, on a raw connection where the answer shows the path; then the real
    synchronous client, answered right with and without binary outputs."""
    for data in (CASES["binary in, binary out"], CASES["json"]):
        with Raw(url) as conn:
            conn.send(
                data.replace(
                    b"Host: x\r\n",
                    b"Host: x\r\nUser-Agent: python/gevent-http-client-2.6.1\r\n"
                    b"Accept: */*\r\nAccept-Encoding: gzip, deflate, br\r\n",
                )
            )
            assert conn.answer().fast
    inp = httpclient.InferInput("INPUT0", [3], "INT32")
    inp.set_data_from_numpy(np.array([7, 8, 9], dtype=np.int32))
    client = httpclient.InferenceServerClient(url)
    try:
        for binary_data in (True, False):
            out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_data)
            result = client.infer("id_int32", [inp], outputs=[out], request_id="abc")
            assert result.as_numpy("OUTPUT0").tolist() == [7, 8, 9]
            assert result.get_response()["id"] == "abc"
    finally:
        client.close()


# ---------------------------------------------------------------- servers of their own


def test_restricted_inference_is_refused_before_the_fast_path(
    shared_repository: ModelRepositoryBuilder,
) -> None:
    """``--http-restricted-api inference:infer-key=s3cret``: without the header (or with
    another value) aiohttp answers Triton's 403; with it, the fast path serves."""
    thread = start(
        shared_repository.root, http_restricted_api={"inference": ("infer-key", "s3cret")}
    )
    try:
        address = thread.server.http_url
        for headers in ({}, {"infer-key": "wrong"}):
            answer = exchange(address, infer("id_int32", int32(1), headers), 1)[0]
            assert answer.status == 403 and not answer.fast
            assert orjson.loads(answer.body) == {
                "error": "This API is restricted, expecting header 'infer-key'"
            }
        answer = exchange(address, infer("id_int32", int32(1), {"Infer-Key": "s3cret"}), 1)[0]
        assert answer.status == 200 and answer.fast
    finally:
        thread.stop()


def test_without_a_header_timeout_a_request_in_parts_goes_to_aiohttp(
    shared_repository: ModelRepositoryBuilder,
) -> None:
    """The fast path holds a request's body only within the header timeout; with none, a
    request whose body comes later is aiohttp's (its body timeout applies)."""
    thread = start(shared_repository.root, http_header_timeout_secs=0)
    try:
        data = CASES["json"]
        cut = data.index(b"\r\n\r\n") + 4
        with Raw(thread.server.http_url) as conn:
            conn.send(data[:cut])
            time.sleep(0.05)
            conn.send(data[cut:])
            first = conn.answer()
            conn.send(data)
            second = conn.answer()
        assert first.status == second.status == 200
        assert not first.fast and second.fast
    finally:
        thread.stop()


def test_a_fast_request_whose_body_stalls_gets_the_body_timeout(
    shared_repository: ModelRepositoryBuilder,
) -> None:
    """A fast request's partial body is held for at most ``--http-body-timeout-secs``; then
    aiohttp reads the request and answers the stalled body with its 408 (within two body
    timeouts, not the 60 s header timeout), and the server serves the next connection."""
    thread = start(shared_repository.root, http_body_timeout_secs=1)
    try:
        data = CASES["json"]
        cut = data.index(b"\r\n\r\n") + 5  # the head and one byte of the body
        with Raw(thread.server.http_url, timeout=10) as conn:
            conn.send(data)
            assert conn.answer().fast  # the connection waits for its next request: framed here
            started = time.monotonic()
            conn.send(data[:cut])
            answer = conn.answer()
            waited = time.monotonic() - started
        assert answer.status == 408 and not answer.fast
        assert b"timed out reading the request body: no data for 1 s" in answer.body
        assert 1.0 <= waited < 4.0
        with Raw(thread.server.http_url) as conn:
            conn.send(data)
            assert conn.answer().status == 200
    finally:
        thread.stop()


def test_a_fast_request_in_flight_is_answered_at_shutdown(tmp_path: object) -> None:
    """Stopping the server while a fast request executes: it is answered, then the
    connection closes."""
    repo = ModelRepositoryBuilder(tmp_path / "models")  # type: ignore[operator]
    repo.add_identity("slow", "INT32", dims=[-1], parameters={"execute_delay_ms": "700"})
    thread = start(repo.root)
    with Raw(thread.server.http_url) as conn:
        conn.send(infer("slow", int32(5)))
        time.sleep(0.2)  # executing now
        stopper = threading.Thread(target=thread.stop)
        stopper.start()
        answer = conn.answer()
        assert answer.status == 200 and answer.fast
        assert orjson.loads(answer.body)["outputs"][0]["data"] == [5]
        assert conn.closed(10)
        stopper.join(60)


def test_keepalive_timeout_closes_a_connection_used_only_by_the_fast_path(
    shared_repository: ModelRepositoryBuilder,
) -> None:
    thread = start(shared_repository.root, http_keepalive_timeout_secs=1.0)
    try:
        with Raw(thread.server.http_url) as conn:
            for _ in range(3):
                conn.send(CASES["json"])
                assert conn.answer().fast
                time.sleep(0.3)  # less than the timeout: still open
            assert not conn.closed(0.2)
            assert conn.closed(3.0)
    finally:
        thread.stop()
