"""``tritonx._transports.http.routes.read_body`` on bodies that are empty or end at a chunk boundary.

aiohttp gives every request without a body the same stream, ``EMPTY_PAYLOAD``, whose
``readchunk()`` answers ``(b"", False)`` the first time in the process and ``(b"", True)``
("the end of an HTTP chunk") ever after, without waiting. A reader that loops on that answer
never yields to the event loop: the whole server stopped (issue 29). A coroutine that never
yields cannot be timed out from its own loop, so each read here runs in a thread of its own
and the test fails when the thread is still busy after a generous delay.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any
from unittest import mock

from aiohttp import StreamReader
from aiohttp.streams import EMPTY_PAYLOAD
from aiohttp.test_utils import make_mocked_request

from tritonx._transports.http.body import read_body

LIMIT = 1 << 20
#: seconds a read may take before the test declares it spinning
DEADLINE = 20.0


def run_in_thread(make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run ``make()`` on a new event loop in a daemon thread; its result, or a failure if
    the thread is still running after :data:`DEADLINE` seconds."""
    result: list[Any] = []

    def target() -> None:
        result.append(asyncio.run(make()))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(DEADLINE)
    assert not thread.is_alive(), "read_body never returned (the event loop spins)"
    return result[0]


def test_bodyless_requests_read_an_empty_body_every_time() -> None:
    async def read(headers: dict[str, str]) -> bytes:
        request = make_mocked_request(
            "POST", "/v2/repository/index", headers, payload=EMPTY_PAYLOAD
        )
        return bytes(await read_body(request, LIMIT, timeout=5.0))

    for headers in ({}, {"Content-Length": "0"}, {}, {"Transfer-Encoding": "chunked"}, {}):
        assert bytes(run_in_thread(lambda headers=headers: read(headers))) == b""  # type: ignore[misc]


def test_a_chunked_body_is_read_past_chunk_boundaries() -> None:
    """An empty answer at the end of one chunk, with more chunks to come, waits for them."""

    async def read() -> bytes:
        loop = asyncio.get_running_loop()
        stream = StreamReader(mock.Mock(_reading_paused=False), 1 << 16, loop=loop)
        stream.begin_http_chunk_receiving()
        request = make_mocked_request(
            "POST", "/v2/models/m/infer", {"Transfer-Encoding": "chunked"}, payload=stream
        )
        steps = [
            lambda: stream.feed_data(b"ab"),
            stream.end_http_chunk_receiving,  # read_body has read "ab": (b"", True) next
            lambda: stream.feed_data(b"cd"),
            stream.end_http_chunk_receiving,
            stream.feed_eof,
        ]

        def step() -> None:
            steps.pop(0)()
            if steps:
                loop.call_later(0.01, step)

        loop.call_soon(step)
        return bytes(await read_body(request, LIMIT, timeout=5.0))

    assert run_in_thread(read) == b"abcd"
