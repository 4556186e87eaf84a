"""What a client flooding the readiness endpoints can and cannot do to the server while a
python model's ``is_ready()`` hangs: each instance is asked once at a time however many
checks come (HTTP ``/v2/health/ready`` and ``/v2/models/<m>/ready``, gRPC ``ServerReady``
and the health service), so checks neither multiply ``is_ready()`` waits nor hold the
threads the rest of the server runs its blocking work on (loads, large bodies, answers)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from grpc import aio
from tritonclient.utils import InferenceServerException

import tritonx_backend_python.worker as worker
from tritonx import Server
from tritonx.testing import loopback_settings

IO = {"inputs": [("IN", "FP32", [2])], "outputs": [("OUT", "FP32", [2])]}

#: concurrent checks: more than any default executor has threads (at most 32)
CHECKS = 48


async def until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    """Wait for ``condition()`` (a deadline only to fail a test that would hang)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while not condition():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.01)


async def test_a_flood_of_checks_on_a_hung_is_ready_holds_one_wait(
    model_repository, add_model, plugin_manager, tmp_path: Path, caplog, monkeypatch
) -> None:
    # is_ready() that never answers while the checks wait (not Triton's 5 s, so that
    # nothing here depends on how long anything takes)
    monkeypatch.setattr(worker, "READY_CHECK_TIMEOUT_S", 3600.0)
    caplog.set_level(logging.DEBUG, logger="tritonx")
    state = tmp_path / "slow"
    state.mkdir()
    add_model("slow", "slow_ready", parameters={"STATE_DIR": str(state)}, **IO)

    def calls() -> int:
        return len((state / "calls").read_text().splitlines()) if (state / "calls").exists() else 0

    def joins() -> int:
        return sum("joins the" in r.getMessage() for r in caplog.records)

    settings = loopback_settings(
        model_repository.root, model_control_mode="explicit", load_model=("*",)
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        (state / "hold").touch()  # is_ready() answers once this goes
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        channel = aio.insecure_channel(server.grpc_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        http = httpclient.InferenceServerClient(server.http_url)
        check = channel.unary_unary("/grpc.health.v1.Health/Check")

        async def get(path: str) -> bool:
            async with session.get(f"http://{server.http_url}{path}") as response:
                return response.status == 200

        def one(i: int):  # type: ignore[no-untyped-def]
            match i % 4:
                case 0:
                    return get("/v2/health/ready")
                case 1:
                    return get("/v2/models/slow/ready")
                case 2:
                    return grpc.is_server_ready()
            return check(b"")

        checks: list[asyncio.Future[object]] = []
        try:
            checks += [asyncio.ensure_future(one(i)) for i in range(CHECKS)]
            # every check reached the instance: one is_ready() call, the others wait for it
            await until(lambda: calls() == 1 and joins() >= CHECKS - 1, "checks not coalesced")
            assert not any(c.done() for c in checks)
            # the threads the server's blocking work runs on are free: a load is answered
            with pytest.raises(InferenceServerException, match="failed to poll"):
                await http.load_model("nope")
            assert await asyncio.to_thread(lambda: True)
            assert not any(c.done() for c in checks)
            (state / "hold").unlink()
            answers = await asyncio.gather(*checks)
            assert all(a in (True, b"\x08\x01") for a in answers), answers
            assert calls() == 1  # they all had the answer of the one call
            assert joins() == CHECKS - 1
        finally:
            (state / "hold").unlink(missing_ok=True)
            await asyncio.gather(*checks, return_exceptions=True)
            await session.close()
            await channel.close()
            await grpc.close()
            await http.close()
