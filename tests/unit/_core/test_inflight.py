"""``InFlight``: the count of requests in flight that every scheduler's ``drain`` waits on."""

from __future__ import annotations

import asyncio

from tritonx._core.inflight import InFlight


async def test_drain_returns_at_once_when_nothing_is_in_flight() -> None:
    assert await InFlight().drain(0)


async def test_drain_waits_for_the_last_request() -> None:
    inflight = InFlight()
    inflight.track()
    inflight.track()
    assert inflight.count == 2
    assert not await inflight.drain(0)  # busy: the timeout passes first
    waiter = asyncio.ensure_future(inflight.drain())
    inflight.untrack()
    assert not await inflight.drain(0)  # one request still in flight
    assert not waiter.done()
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.add_done_callback(inflight.untrack)  # (as a done callback, the way schedulers use it)
    future.set_result(None)
    assert await waiter
    assert inflight.count == 0
