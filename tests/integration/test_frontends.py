"""Frontend plugins (``tritonx_register_frontends``, :mod:`tritonx.frontend`): a frontend
defined here starts with the server on its own listener, runs inference through the one
request pipeline (``ServerHandle.pipeline``), is configured and refused through
``--frontend-config``, and stops with the server."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web

import tritonx
from tritonx import InferenceRequest, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.errors import PluginError, TritonXError
from tritonx.pipeline import PlainDecoded
from tritonx.testing import ModelRepositoryBuilder, identity, loopback_settings


class Echo(tritonx.AiohttpFrontend):
    """``POST /echo/<model>`` with a JSON list: the model's OUTPUT0 for INPUT0 = that list."""

    name = "echo"
    title = "Echo frontend"
    default_port = 0
    base_path = "/echo"
    config_keys: Mapping[str, str] = {"greeting": "what GET /echo/hello answers"}

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/echo/hello", self.hello)
        app.router.add_post("/echo/{model}", self.infer)
        return app

    async def hello(self, request: web.Request) -> web.Response:
        return web.json_response({"greeting": self.config.get("greeting", "hello")})

    async def infer(self, request: web.Request) -> web.Response:
        pipeline = self.server.pipeline()
        model = request.match_info["model"]
        try:
            served, _ = await pipeline.resolve_loaded(model, "")
            data = np.asarray(await request.json(), dtype=np.float32)
            decoded = PlainDecoded(InferenceRequest(model, {"INPUT0": data}))
            call = pipeline.admit(served, decoded, request.headers)
            output = await call.run(lambda r: r.outputs["OUTPUT0"].tolist(), lambda r: False)
        except TritonXError as exc:
            return web.json_response({"error": exc.message}, status=400)
        headers = dict(call.reply_headers)
        return web.json_response({"OUTPUT0": output}, headers=headers)


class EchoPlugin:
    @tritonx.hookimpl
    def tritonx_register_frontends(self, registry: tritonx.FrontendRegistry) -> None:
        registry.add(Echo)


def server(repo: ModelRepositoryBuilder, **overrides: Any) -> Server:
    pm = make_plugin_manager(autoload=False, extra=[identity, EchoPlugin()])
    return Server(loopback_settings(repo.root, **overrides), plugin_manager=pm)


@pytest.fixture
def repo(tmp_path: Any) -> ModelRepositoryBuilder:
    builder = ModelRepositoryBuilder(tmp_path / "models")
    builder.add_identity("id")
    return builder


async def test_a_frontend_plugin_serves_through_the_pipeline(
    repo: ModelRepositoryBuilder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tritonx.server")
    config = {"echo": {"greeting": "hi", "address": "127.0.0.1"}}
    async with server(repo, frontend_config=config) as srv:
        url = srv.frontend_urls["echo"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/echo")
        assert f"Echo frontend at {url}" in caplog.text
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/hello") as resp:
                assert await resp.json() == {"greeting": "hi"}
            headers = {"X-Request-ID": "abc-1"}
            async with session.post(f"{url}/id", json=[1, 2, 3], headers=headers) as resp:
                assert await resp.json() == {"OUTPUT0": [1.0, 2.0, 3.0]}
                assert resp.headers["X-Request-ID"] == "abc-1"  # the pipeline's step
            async with session.post(f"{url}/nope", json=[1]) as resp:
                assert resp.status == 400
                assert "Request for unknown model: 'nope'" in (await resp.json())["error"]
        # the statistics count its requests like any other transport's
        (stats,) = [s for n, _, s in srv.dataplane.model_statistics("id")]
        assert stats.success.count == 1
    assert srv.frontend_urls == {}  # stopped with the server
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(f"{url}/hello")


async def test_frontend_config_is_checked(repo: ModelRepositoryBuilder) -> None:
    with pytest.raises(PluginError, match=r"unknown frontend 'nope' in --frontend-config"):
        await server(repo, frontend_config={"nope": {"port": "1"}}).start()
    with pytest.raises(PluginError, match=r"--frontend-config echo: unknown key\(s\) colour"):
        await server(repo, frontend_config={"echo": {"colour": "blue"}}).start()
    with pytest.raises(PluginError, match="--frontend-config echo: port must be 0 to 65535"):
        await server(repo, frontend_config={"echo": {"port": "http"}}).start()
    async with server(repo, frontend_config={"echo": {"allow": "false"}}) as srv:
        assert srv.frontend_urls == {}


async def test_a_taken_port_names_the_frontend(repo: ModelRepositoryBuilder) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = {"echo": {"address": "127.0.0.1", "port": str(port)}}
        with pytest.raises(TritonXError, match=f"Echo frontend cannot listen on 127.0.0.1:{port}"):
            await server(repo, frontend_config=config).start()
