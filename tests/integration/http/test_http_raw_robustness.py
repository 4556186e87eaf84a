"""Raw-socket robustness of the HTTP listener: no bytes a client sends stall the server.

The listener frames HTTP/1.1 itself for the ``/infer`` fast path (``tritonx._transports.http.framing``,
``tritonx._transports.http.listener``); everything else is aiohttp's parser (llhttp). Each case sends the
same bytes to a server with the fast path (the default) and one without
(``http_fast_infer=False``): the answers' status lines must be equal (or both connections
closed without one), must be the ones given in the case (aiohttp's answers, or Triton's for
body-less requests), and afterwards a fresh connection to each server must get
``GET /v2/health/live`` answered. Every read has a deadline far above what any case needs:
a connection or an event loop that hangs fails the test instead of holding CI.

Sections: body-less and zero-length requests on every route and method (a body-less POST used
to spin the event loop forever: aiohttp's ``EMPTY_PAYLOAD`` is one shared stream that answers
``readchunk()`` with "end of an HTTP chunk" from its second use on); request smuggling and
malformed framing; pipelining; oversized heads; slow clients (header, body and keep-alive
timeouts set low, each case waiting for the server to close the connection).
"""

from __future__ import annotations

import socket
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tritonx._runtime.plugins import make_plugin_manager
from tritonx._runtime.security import RESTRICTED_CATEGORIES
from tritonx._transports.http.app import make_app
from tritonx._transports.http.routes import restricted_category
from tritonx.server import Server
from tritonx.testing import ServerThread, identity, loopback_settings
from tritonx.testing.repository import ModelRepositoryBuilder

#: seconds any single read may wait: far above what a case needs, far below CI's timeout
DEADLINE = 30.0
#: the timeouts of the servers that slow-client cases run against (seconds)
SHORT = {"http_header_timeout_secs": 1.0, "http_body_timeout_secs": 1.0}
PROBE = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
#: a last request that ends the connection once everything before it is answered
CLOSING_PROBE = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"

Address = tuple[str, int]


# ---------------------------------------------------------------------------------- servers


def _repository(root: Path) -> ModelRepositoryBuilder:
    repo = ModelRepositoryBuilder(root)
    repo.add_identity("id_int32", "INT32", dims=[-1])
    repo.add_identity("spare", "INT32", dims=[-1])  # unloaded and loaded by body-less POSTs
    repo.add(
        "multi",
        backend="identity",
        inputs=[("INPUT0", "INT32", [-1]), ("INPUT1", "BYTES", [-1])],
        outputs=[("OUTPUT0", "INT32", [-1]), ("OUTPUT1", "BYTES", [-1])],
    )
    return repo


@dataclass
class Pair:
    """The same repository served with the fast path (``fast``) and without (``web``)."""

    fast: ServerThread
    web: ServerThread

    def addresses(self) -> dict[str, Address]:
        return {"fast": _address(self.fast), "web": _address(self.web)}


def _address(thread: ServerThread) -> Address:
    host, port = thread.server.http_url.rsplit(":", 1)
    return host, int(port)


def _start(root: Path, **overrides: object) -> ServerThread:
    settings = loopback_settings(
        root,
        model_control_mode="explicit",
        load_model=("*",),
        allow_grpc=False,
        allow_metrics=False,
        allow_client_shm=True,  # shared-memory registration reads its body
        **overrides,
    )
    thread = ServerThread(
        Server(settings, plugin_manager=make_plugin_manager(autoload=False, extra=[identity]))
    )
    thread.start()
    return thread


def _pair(root: Path, **overrides: object) -> Iterator[Pair]:
    fast = _start(root, **overrides)
    try:
        web = _start(root, http_fast_infer=False, **overrides)
        try:
            yield Pair(fast, web)
        finally:
            web.stop()
    finally:
        fast.stop()


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _repository(tmp_path_factory.mktemp("robust") / "models").root


@pytest.fixture(scope="module")
def servers(repository: Path) -> Iterator[Pair]:
    """Default timeouts."""
    yield from _pair(repository)


@pytest.fixture(scope="module")
def short(repository: Path) -> Iterator[Pair]:
    """Header and body timeouts of one second, keep-alive of two."""
    yield from _pair(repository, http_keepalive_timeout_secs=2.0, **SHORT)


# ---------------------------------------------------------------------------------- raw HTTP


@dataclass(frozen=True)
class Answer:
    status_line: bytes
    headers: dict[str, str]
    body: bytes

    @property
    def status(self) -> int:
        return int(self.status_line.split(b" ")[1])


class Closed(Exception):
    """The server closed the connection (EOF or reset) before a whole answer."""


class Raw:
    """One client connection sending exact bytes and reading whole answers."""

    def __init__(self, address: Address) -> None:
        self.sock = socket.create_connection(address, timeout=DEADLINE)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> bool:
        """Send ``data``; False when the server has closed the connection already."""
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    def _fill(self) -> None:
        try:
            chunk = self.sock.recv(1 << 20)
        except ConnectionResetError:
            chunk = b""
        except TimeoutError:
            raise AssertionError(
                f"no answer and no close within {DEADLINE} s (hung); read {self.buffer[:300]!r}"
            ) from None
        if not chunk:
            raise Closed(self.buffer)
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

    def answer(self, head: bool = False) -> Answer:
        """The next answer, an interim one (``100 Continue``) included; ``head``: the answer
        to a HEAD request (no body). Raises :class:`Closed` when the connection ends first."""
        status_line = self._line()
        headers: dict[str, str] = {}
        while line := self._line():
            key, _, value = line.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        status = int(status_line.split(b" ")[1])
        if head or status < 200 or status in (204, 304):
            body = b""
        elif headers.get("transfer-encoding") == "chunked":
            body = b""
            while size := int(self._line().split(b";")[0], 16):
                body += self._take(size)
                self._take(2)
            while self._line():  # trailers
                pass
        else:
            body = self._take(int(headers.get("content-length", "0")))
        return Answer(status_line, headers, body)

    def until_closed(self) -> list[Answer]:
        """Every answer until the server closes the connection."""
        answers = []
        while True:
            try:
                answers.append(self.answer())
            except Closed:
                return answers

    def closed(self) -> bool:
        """Wait for the server to close the connection (True), reading and dropping any
        answer; False if it is still open after the deadline."""
        try:
            self.until_closed()
        except AssertionError:
            return False
        return True


def assert_live(*addresses: Address) -> None:
    """A fresh connection to each server gets ``GET /v2/health/live`` answered."""
    for address in addresses:
        with Raw(address) as conn:
            conn.send(PROBE)
            assert conn.answer().status == 200, address


def statuses(answers: list[Answer]) -> list[bytes]:
    return [a.status_line for a in answers]


# ------------------------------------------------------------------- body-less requests

MODEL = "/v2/models/id_int32"
#: Triton's endpoints (triton-reference section 1) behind the catch-all route, with the
#: status tritonserver answers each method when the request has no body; a method not listed
#: answers 405 (404 where the path has no endpoint: ``None``).
TRITON_PATHS: dict[str, dict[str, int] | None] = {
    "/v2": {"GET": 200},
    "/v2/health/live": {"GET": 200},
    "/v2/health/ready": {"GET": 200},
    "/v2/models/stats": {"GET": 200},
    # an update's body is parsed even when empty (EVRequestToJsonAllowsEmpty): 500
    "/v2/logging": {"GET": 200, "POST": 500},
    "/v2/trace/setting": {"GET": 200, "POST": 500},
    MODEL: {"GET": 200},
    f"{MODEL}/versions/1": {"GET": 200},
    f"{MODEL}/ready": {"GET": 200},
    f"{MODEL}/versions/1/ready": {"GET": 200},
    f"{MODEL}/config": {"GET": 200},
    f"{MODEL}/versions/1/config": {"GET": 200},
    f"{MODEL}/stats": {"GET": 200},
    f"{MODEL}/versions/1/stats": {"GET": 200},
    # no Inference-Header-Content-Length: the header is the whole (empty) body, so this is
    # a raw binary request of zero bytes (GetInferenceHeaderLength, EVBufferToRawInput)
    f"{MODEL}/infer": {"POST": 200},
    f"{MODEL}/versions/1/infer": {"POST": 200},
    "/v2/models/multi/infer": {"POST": 400},  # a raw request needs a one-input model
    f"{MODEL}/generate": {"POST": 500},
    f"{MODEL}/generate_stream": {"POST": 500},
    f"{MODEL}/trace/setting": {"GET": 200, "POST": 500},
    f"{MODEL}/versions/1/trace/setting": None,
    # an empty body is no body: the index, a load or an unload without parameters
    "/v2/repository/index": {"POST": 200},
    "/v2/repository/models/spare/unload": {"POST": 200},
    "/v2/repository/models/spare/load": {"POST": 200},
    "/v2/repository/models/nope/load": {"POST": 500},
    "/v2/repository/other/index": {"POST": 501},
    "/v2/systemsharedmemory/status": {"GET": 200},
    "/v2/systemsharedmemory/region/r/status": {"GET": 404},
    "/v2/systemsharedmemory/region/r/register": {"POST": 500},
    "/v2/systemsharedmemory/region/r/unregister": {"POST": 200},
    "/v2/systemsharedmemory/unregister": {"POST": 200},
    "/v2/cudasharedmemory/status": {"GET": 200},
    "/v2/cudasharedmemory/region/r/status": {"GET": 404},
    "/v2/cudasharedmemory/region/r/register": {"POST": 500},
    "/v2/cudasharedmemory/region/r/unregister": {"POST": 200},
    "/v2/cudasharedmemory/unregister": {"POST": 200},
    "/v2/nothing": None,
}
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
#: the ways to send no body: (extra header lines, what follows the head)
BODYLESS = {
    "no Content-Length": (b"", b""),
    "Content-Length: 0": (b"Content-Length: 0\r\n", b""),
    "chunked, no chunk": (b"Transfer-Encoding: chunked\r\n", b"0\r\n\r\n"),
}


def routed_paths(server: Server) -> list[str]:
    """A concrete path for every route of the server's aiohttp application (a new route is
    covered here without editing this test); the catch-all route stands for
    :data:`TRITON_PATHS`."""
    app = make_app(server.dataplane, server.settings)
    paths: list[str] = []
    for resource in app.router.resources():
        info = resource.get_info()
        if "path" in info:
            paths.append(str(info["path"]))
        elif info.get("formatter") == "/{tail}":
            paths.extend(TRITON_PATHS)
        else:
            paths.append(str(info["formatter"]).format_map(defaultdict(lambda: "x")))
    return paths


def test_the_path_list_covers_every_triton_endpoint(servers: Pair) -> None:
    """Every restricted-API category (each Triton endpoint has one) has a path here, and
    every path here is routed as the table says."""
    paths = routed_paths(servers.fast.server)
    assert set(TRITON_PATHS) <= set(paths)
    covered = {restricted_category(path) for path in TRITON_PATHS}
    assert set(RESTRICTED_CATEGORIES) <= covered
    for path, methods in TRITON_PATHS.items():
        assert (restricted_category(path) is None) == (methods is None), path


def _expected(path: str, method: str) -> int | None:
    """The status of a body-less request (None: a route outside Triton's, any answer)."""
    if path not in TRITON_PATHS:
        return None
    methods = TRITON_PATHS[path]
    return 404 if methods is None else methods.get(method, 405)


def _bodyless(method: str, path: str, variant: str) -> bytes:
    head, tail = BODYLESS[variant]
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n".encode() + head + b"\r\n" + tail


def _comparable(answer: Answer) -> tuple[bytes, str, bytes]:
    """What two servers answer alike (the bodies of errors; others hold times and counts)."""
    body = answer.body if answer.status >= 400 else b""
    return answer.status_line, answer.headers.get("content-type", ""), body


@pytest.mark.parametrize("variant", list(BODYLESS))
def test_bodyless_requests_on_every_route(servers: Pair, variant: str) -> None:
    """Each route and method without a body, twice on one connection, pipelined, and again
    on a new one: every time the same answer (Triton's status; a JSON ``error`` for an
    error; equal with and without the fast path), and the server still answers after it.
    Before: from the second body-less request on (any route that reads a body), the event
    loop spun forever and nothing more was answered."""
    addresses = servers.addresses()
    for path in routed_paths(servers.fast.server):
        for method in METHODS:
            data = _bodyless(method, path, variant)
            head = method == "HEAD"
            seen: dict[str, list[tuple[bytes, str, bytes]]] = {}
            for name, address in addresses.items():
                answers: list[Answer] = []
                with Raw(address) as conn:  # one after the other on one connection
                    for _ in range(2):
                        assert conn.send(data)
                        answers.append(conn.answer(head))
                with Raw(address) as conn:  # pipelined on a new connection
                    assert conn.send(data + data)
                    answers += [conn.answer(head), conn.answer(head)]
                assert_live(address)
                seen[name] = [_comparable(a) for a in answers]
                expected = _expected(path, method)
                for answer in answers:
                    where = f"{name}: {method} {path} ({variant})"
                    if expected is not None:
                        assert answer.status == expected, (where, answer)
                    if answer.status >= 400 and not head and path in TRITON_PATHS:
                        error = orjson.loads(answer.body)["error"]
                        assert isinstance(error, str) and error, where
                if path.endswith("/infer") and expected == 200:  # zero elements
                    header = orjson.loads(answers[0].body)
                    assert header["outputs"][0]["shape"] == [0]
            assert seen["fast"] == seen["web"], (method, path, variant)


def test_two_bodyless_posts_in_a_row(servers: Pair) -> None:
    """The issue's reproduction: ``curl -X POST .../v2/repository/index`` twice (no
    ``Content-Length``): both answered with the index, on new connections."""
    for address in servers.addresses().values():
        for _ in range(3):
            with Raw(address) as conn:
                conn.send(b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n")
                answer = conn.answer()
            assert answer.status == 200
            assert {"name": "id_int32", "version": "1", "state": "READY"} in orjson.loads(
                answer.body
            )


# ------------------------------------------------------------------- framing and smuggling

BODY = orjson.dumps(
    {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [7]}]}
)
INFER = b"/v2/models/id_int32/infer"


def infer(
    extra: bytes = b"", body: bytes = BODY, length: bool = True, target: bytes = INFER
) -> bytes:
    """A POST of ``body`` (with its Content-Length unless ``length`` is false)."""
    head = b"POST " + target + b" HTTP/1.1\r\nHost: x\r\n"
    if length:
        head += b"Content-Length: %d\r\n" % len(body)
    return head + extra + b"\r\n" + body


def chunked(body: bytes, extra: bytes = b"") -> bytes:
    return infer(b"Transfer-Encoding: chunked\r\n" + extra, body, length=False)


OK = LIVE = b"HTTP/1.1 200 OK"
#: aiohttp's answer to what its parser refuses (then it closes the connection)
BAD = b"HTTP/1.0 400 Bad Request"
#: a request hidden in a body (answered: model statistics)
SMUGGLED = b"GET /v2/models/id_int32/stats HTTP/1.1\r\nHost: x\r\n\r\n"


@dataclass(frozen=True)
class Case:
    """Bytes sent at once (then a request with ``Connection: close`` unless ``probe`` is
    false), and the status lines of every answer until the server closes the connection.

    ``split``: where aiohttp (the server without the fast path) is sent the bytes in two
    writes, the first answered before the second goes: aiohttp's answer to bytes depends on
    how they arrive (all in one read, a request followed by garbage gets only a 400), and the
    fast path reads a request at a time. ``pause``: the same for both servers (a client
    that waits for its first answer).
    """

    data: bytes
    answers: tuple[bytes, ...]
    probe: bool = True
    split: int = 0
    pause: int = 0


def case(data: bytes, *answers: bytes, probe: bool = True, split: int = 0, pause: int = 0) -> Case:
    ending = (LIVE,) if probe and answers[-1:] != (BAD,) else ()
    return Case(data, answers + ending, probe, split, pause)


CASES: dict[str, Case] = {
    "plain infer": case(infer(), OK),
    # request smuggling: two framings of one body, each refused
    "Content-Length and Transfer-Encoding": case(
        infer(b"Transfer-Encoding: chunked\r\n", b"0\r\n\r\n" + SMUGGLED), BAD
    ),
    "Transfer-Encoding and Content-Length": case(
        b"POST /v2/models/id_int32/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Length: 4\r\n\r\n5c\r\nGPOST / HTTP/1.1\r\n\r\n0\r\n\r\n",
        BAD,
    ),
    "Content-Length twice, equal": case(infer(b"Content-Length: %d\r\n" % len(BODY)), BAD),
    "Content-Length twice, different": case(infer(b"Content-Length: 2\r\n"), BAD),
    "Content-Length list": case(
        infer(b"Content-Length: %d, %d\r\n" % (len(BODY), len(BODY)), length=False), BAD
    ),
    "Content-Length signed": case(infer(b"Content-Length: +%d\r\n" % len(BODY), length=False), BAD),
    "Content-Length negative": case(infer(b"Content-Length: -1\r\n", length=False), BAD),
    "Content-Length hex": case(infer(b"Content-Length: 0x%x\r\n" % len(BODY), length=False), BAD),
    "Content-Length with a space": case(infer(b"Content-Length: 1 2\r\n", length=False), BAD),
    "Content-Length overflow": case(
        infer(b"Content-Length: " + b"9" * 25 + b"\r\n", length=False), BAD
    ),
    "Content-Length empty": case(infer(b"Content-Length: \r\n", b"", length=False), BAD),
    "Content-Length padded": case(
        infer(b"Content-Length: \t%d \t\r\n" % len(BODY), length=False), OK
    ),
    "Content-Length leading zeros": case(
        infer(b"Content-Length: 00%d\r\n" % len(BODY), length=False), OK
    ),
    "space before the colon": case(
        infer(b"Content-Length : %d\r\n" % len(BODY), length=False), BAD
    ),
    "obs-fold": case(infer(b"X-A: a\r\n b\r\n"), BAD),
    "obs-fold hiding Content-Length": case(infer(b"X-A: a\r\n Content-Length: 5\r\n"), BAD),
    "bare LF line ends": case(infer().replace(b"\r\n", b"\n"), BAD),
    "one bare LF": case(infer().replace(b"Host: x\r\n", b"Host: x\n"), BAD),
    "one bare CR": case(infer().replace(b"Host: x\r\n", b"Host: x\r"), BAD),
    "CR in a value": case(infer(b"X-A: a\rb\r\n"), BAD),
    "NUL in a value": case(infer(b"X-A: a\x00b\r\n"), BAD),
    "DEL in a value": case(infer(b"X-A: a\x7fb\r\n"), BAD),
    "vertical tab in a value": case(infer(b"X-A: a\x0bb\r\n"), BAD),
    "control byte in Host": case(infer().replace(b"Host: x", b"Host: a\x01b"), BAD),
    "tab and obs-text in a value": case(infer(b"X-A: \ta\tb \x80\xff\r\n"), OK),
    "space in a name": case(infer(b"X A: b\r\n"), BAD),
    "separator in a name": case(infer(b"X@A: b\r\n"), BAD),
    "control byte in a name": case(infer(b"X\x01A: b\r\n"), BAD),
    "UTF-8 in a name": case(infer(b"X-\xc3\xa9: b\r\n"), BAD),
    "empty name": case(infer(b": b\r\n"), BAD),
    "no colon": case(infer(b"XA\r\n"), BAD),
    "no Host": case(infer().replace(b"Host: x\r\n", b""), BAD),
    "two Host fields": case(infer(b"Host: y\r\n"), BAD),
    "HTTP/1.0 without Host": case(
        infer().replace(b"Host: x\r\n", b"").replace(b"HTTP/1.1", b"HTTP/1.0"),
        OK.replace(b"1.1", b"1.0"),
        probe=False,
    ),
    "lower-case method": case(infer().replace(b"POST", b"post", 1), BAD),
    "separator in the method": case(infer().replace(b"POST", b"PO(T", 1), BAD),
    "tab after the method": case(infer().replace(b"POST ", b"POST\t", 1), BAD),
    "two spaces after the method": case(infer().replace(b"POST ", b"POST  ", 1), OK),
    "control byte in the target": case(infer(target=INFER + b"\x01"), BAD),
    "UTF-8 in the target": case(infer(target=b"/v2/models/id\xc3\xa9/infer"), BAD),
    "target without a slash": case(infer(target=INFER[1:]), BAD),
    "HTTP/2.0": case(infer().replace(b"HTTP/1.1", b"HTTP/2.0", 1), BAD),
    "HTTP/1.2": case(infer().replace(b"HTTP/1.1", b"HTTP/1.2", 1), BAD),
    "lower-case version": case(infer().replace(b"HTTP/1.1", b"http/1.1", 1), BAD),
    "HTTP/2 preface": case(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", BAD),
    "TLS on the plain port": case(b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(40), BAD),
    "NUL bytes": case(b"\x00\x01\x02\x03\r\n\r\n", BAD),
    "empty lines before a request": case(b"\r\n\r\n" + infer(), OK),
    # chunked bodies
    "chunked": case(chunked(b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)), OK),
    "chunked in pieces, extension and trailer": case(
        chunked(
            b"5;a=b\r\n%s\r\n%x\r\n%s\r\n0\r\nX-T: 1\r\n\r\n" % (BODY[:5], len(BODY) - 5, BODY[5:])
        ),
        OK,
    ),
    "chunk size not hex": case(chunked(b"zz\r\nabc\r\n0\r\n\r\n"), BAD),
    "chunk size overflow": case(chunked(b"f" * 20 + b"\r\nabc\r\n0\r\n\r\n"), BAD),
    "chunk size negative": case(chunked(b"-1\r\nabc\r\n0\r\n\r\n"), BAD),
    "chunk size after a space": case(chunked(b" 3\r\nabc\r\n0\r\n\r\n"), BAD),
    "chunk longer than its size": case(chunked(b"3\r\nabcX\r\n0\r\n\r\n"), BAD),
    "chunk lines with bare LF": case(chunked(b"%x\n%s\n0\n\n" % (len(BODY), BODY)), BAD),
    "Transfer-Encoding identity with Content-Length": case(
        infer(b"Transfer-Encoding: identity\r\n"), BAD
    ),
    "Transfer-Encoding chunked, identity": case(
        infer(b"Transfer-Encoding: chunked, identity\r\n", b"0\r\n\r\n", length=False), BAD
    ),
    "Transfer-Encoding twice": case(chunked(b"0\r\n\r\n", b"Transfer-Encoding: chunked\r\n"), BAD),
    "Transfer-Encoding xchunked": case(
        infer(b"Transfer-Encoding: xchunked\r\n", b"0\r\n\r\n" + SMUGGLED, length=False), BAD
    ),
    # pipelining after bodies, and bodies longer than declared
    "pipelined after bodies": case(infer() + infer() + SMUGGLED + infer(), OK, OK, OK, OK),
    "pipelined after a GET with a body": case(
        b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nGET /" + infer(),
        OK,
        OK,
    ),
    "body longer than declared": case(infer() + b"GARBAGE\r\n\r\n", OK, BAD, split=len(infer())),
    "body longer than declared, not /infer": case(
        b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}\r\nX",
        OK,
        BAD,
        split=len(b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"),
    ),
    "data after Connection: close": case(
        infer(b"Connection: close\r\n") + infer(),
        OK,
        probe=False,
        split=len(infer(b"Connection: close\r\n")),
    ),
    "Expect: 100-continue": case(infer(b"Expect: 100-continue\r\n"), b"HTTP/1.1 100 Continue", OK),
    "unknown Expect": case(infer(b"Expect: 101-nope\r\n"), b"HTTP/1.1 417 Expectation Failed"),
    "Upgrade ignored": case(
        infer(b"Connection: Upgrade\r\nUpgrade: websocket\r\n"),
        OK,
        pause=len(infer(b"Connection: Upgrade\r\nUpgrade: websocket\r\n")),
    ),
    # oversized heads: aiohttp's limits are 8190 bytes a line, 128 fields
    "a line of 8190 bytes": case(infer(b"X-A: " + b"a" * 8185 + b"\r\n"), OK),
    "a line of 9000 bytes": case(infer(b"X-A: " + b"a" * 8995 + b"\r\n"), BAD),
    "a name of 9000 bytes": case(infer(b"X" * 9000 + b": a\r\n"), BAD),
    "a target of 9000 bytes": case(infer(target=INFER + b"?" + b"a" * 9000), BAD),
    "128 fields": case(infer(b"".join(b"X-%d: a\r\n" % i for i in range(126))), OK),
    "129 fields": case(infer(b"".join(b"X-%d: a\r\n" % i for i in range(127))), BAD),
    "a head of 70 KiB": case(
        infer(b"".join(b"X-%d: %s\r\n" % (i, b"a" * 1000) for i in range(70))), OK
    ),
    "a head of 1 MiB": case(
        infer(b"".join(b"X-%d: %s\r\n" % (i, b"a" * 8000) for i in range(128))), BAD
    ),
    "10000 fields": case(infer(b"X: a\r\n" * 10000), BAD),
    "a request line without end": case(b"GET /" + b"a" * 100_000, BAD, probe=False),
}


def _outcome(address: Address, item: Case, split: int = 0) -> list[bytes]:
    data = item.data + (CLOSING_PROBE if item.probe else b"")
    with Raw(address) as conn:
        if split:
            conn.send(data[:split])
            first = [conn.answer()]
            if first[0].headers.get("connection", "").lower() == "close":
                return statuses(first + conn.until_closed())
            conn.send(data[split:])
            return statuses(first + conn.until_closed())
        conn.send(data)
        return statuses(conn.until_closed())


@pytest.mark.parametrize("name", list(CASES))
def test_raw_bytes_are_answered_as_aiohttp_answers_them(servers: Pair, name: str) -> None:
    """The same answers with and without the fast path, the ones aiohttp gives; neither
    server hangs the connection, and both go on serving."""
    item = CASES[name]
    addresses = servers.addresses()
    fast = _outcome(addresses["fast"], item, item.pause)
    web = _outcome(addresses["web"], item, item.split or item.pause)
    assert fast == web
    assert fast == list(item.answers)
    assert_live(*addresses.values())


def test_a_smuggled_request_is_never_served(servers: Pair) -> None:
    """Behind each refused framing above hides a request for the model's statistics: only
    the 400 comes back, never a statistics answer."""
    for name, item in CASES.items():
        if SMUGGLED in item.data and item.answers[:1] == (BAD,):
            for address in servers.addresses().values():
                with Raw(address) as conn:
                    conn.send(item.data)
                    answers = conn.until_closed()
                assert [a.status for a in answers] == [400], name
                assert b"model_stats" not in b"".join(a.body for a in answers), name


# ---------------------------------------------------------------------------------- slow clients


@pytest.mark.parametrize(
    "data",
    [b"", b"POST /v2/models/id_int32/infer HTTP/1.1\r\nHost: x\r\n", b"GET /v2/health/li"],
    ids=["nothing", "a head without its end", "a partial request line"],
)
def test_headers_that_never_end_are_cut_off(short: Pair, data: bytes) -> None:
    """The header timeout closes the connection without an answer."""
    for address in short.addresses().values():
        with Raw(address) as conn:
            conn.send(data)
            assert conn.until_closed() == []
    assert_live(*short.addresses().values())


def test_headers_sent_a_byte_at_a_time_are_cut_off(short: Pair) -> None:
    """Slowloris: a byte every quarter of the header timeout keeps no connection open past
    it (each byte is sent when the connection has not closed for that long)."""
    data = infer(b"X-Slow: " + b"a" * 400 + b"\r\n")
    for address in short.addresses().values():
        with Raw(address) as conn:
            conn.sock.settimeout(SHORT["http_header_timeout_secs"] / 4)
            sent = 0
            while sent < len(data):
                if not conn.send(data[sent : sent + 1]):
                    break
                sent += 1
                try:
                    if not conn.sock.recv(65536):
                        break  # closed
                except TimeoutError:
                    continue
                except ConnectionResetError:
                    break
            assert sent < len(data), "the whole head went through one byte at a time"
    assert_live(*short.addresses().values())


@pytest.mark.parametrize(
    "data",
    [
        infer(body=BODY[:10] + b" " * 90)[:-90],
        b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
        chunked(b"64\r\n{"),
    ],
    ids=["/infer", "repository index", "chunked /infer"],
)
def test_a_stalled_body_gets_408(short: Pair, data: bytes) -> None:
    """A body shorter than declared that stops coming: 408 and the connection closed (on
    the fast path a held request goes to aiohttp after the body timeout, which then waits
    its own body timeout)."""
    for address in short.addresses().values():
        with Raw(address) as conn:
            conn.send(data)
            answers = conn.until_closed()
        assert [a.status for a in answers] == [408]
        assert orjson.loads(answers[0].body) == {
            "error": "timed out reading the request body: no data for 1 s"
        }
    assert_live(*short.addresses().values())


@pytest.mark.parametrize(
    "data",
    [infer()[:-10], infer(b"Expect: 100-continue\r\n")[: -len(BODY)]],
    ids=["part of the body", "no body after Expect"],
)
def test_a_client_that_stops_sending_mid_body_gets_no_answer(short: Pair, data: bytes) -> None:
    """A client that shuts its side down before its body is whole gets the connection closed
    without an answer (nobody reads one), and the server goes on."""
    for address in short.addresses().values():
        with Raw(address) as conn:
            conn.send(data)
            conn.sock.shutdown(socket.SHUT_WR)
            answers = conn.until_closed()
        assert [a.status for a in answers if a.status >= 200] == []
    assert_live(*short.addresses().values())


def test_an_idle_kept_connection_is_closed(short: Pair) -> None:
    """After an answer, a connection that sends nothing more is closed at the keep-alive
    timeout (fast and aiohttp answers alike)."""
    for address in short.addresses().values():
        with Raw(address) as conn:
            conn.send(infer())
            assert conn.answer().status == 200
            assert conn.until_closed() == []
    assert_live(*short.addresses().values())
