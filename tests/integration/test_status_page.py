"""The status page (``GET /``): its JSON, its restricted-API categories, the flag that turns it
off, and the page itself in a real headless Chromium (Debian's, driven by Playwright) while
load runs."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient

from tritonx import InferenceRequest, Server
from tritonx.config import ServerSettings
from tritonx.testing import ModelRepositoryBuilder, ServerThread, loopback_settings

#: screenshots land here too (git-ignored), besides the test's tmp dir
ARTIFACTS = Path(
    os.environ.get("TRITONX_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "artifacts")
)


def build_repository(repo: ModelRepositoryBuilder) -> None:
    repo.add_identity(
        "id_fp32",
        dims=[4],
        max_batch_size=8,
        extra="dynamic_batching { max_queue_delay_microseconds: 500 }\n"
        "instance_group [ { count: 2, kind: KIND_CPU } ]\n",
    )
    repo.add_identity("id_int32", datatype="INT32", dims=[-1])
    repo.add("broken", backend="no_such_backend", inputs=[("X", "FP32", [1])])


@pytest.fixture
def server_settings(model_repository: ModelRepositoryBuilder) -> ServerSettings:
    build_repository(model_repository)
    return loopback_settings(
        model_repository.root,
        allow_grpc=False,
        allow_metrics=False,
        metrics_config={"summary_latencies": "true"},
    )


async def get(server: Server, path: str, **headers: str) -> tuple[int, str, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{server.http_url}{path}", headers=headers) as resp:
            text = await resp.text()
            return resp.status, resp.headers.get("Content-Type", ""), text


async def test_page_assets_and_data(server: Server) -> None:
    status, ctype, html = await get(server, "/")
    assert status == 200 and ctype == "text/html; charset=utf-8"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{server.http_url}/") as resp:
            # the README's claim: the page only loads what the server itself ships
            assert resp.headers["Content-Security-Policy"].startswith("default-src 'self';")
    assert '<script src="/status/status.js">' in html and "http" not in html.split("<body")[1]
    for asset, kind in (("status.js", "application/javascript"), ("status.css", "text/css")):
        status, ctype, _ = await get(server, f"/status/{asset}")
        assert (status, ctype) == (200, kind)
    status, _, body = await get(server, "/status/nothing")
    assert status == 404

    await server.infer(InferenceRequest("id_fp32", {"INPUT0": np.ones((3, 4), np.float32)}))
    status, ctype, body = await get(server, "/status/data")
    assert status == 200 and ctype == "application/json"
    data = orjson.loads(body)
    assert data["server"]["name"] == "triton" and data["server"]["uptime_s"] >= 0
    assert data["server"]["latency_summaries"] is True
    models = {m["name"]: m for m in data["models"]}
    assert set(models) == {"id_fp32", "id_int32", "broken"}
    fp32 = models["id_fp32"]
    assert fp32["state"] == "READY" and fp32["version"] == 1
    assert fp32["config"]["instances"] == "2x CPU"
    assert fp32["config"]["scheduler"] == "dynamic batching (delay 500 µs; preferred 8)"
    assert fp32["config"]["max_batch_size"] == 8
    assert fp32["stats"]["success_count"] == 1 and fp32["stats"]["inference_count"] == 3
    assert len(fp32["stats"]["latency_quantiles_ms"]) == 3
    assert models["broken"]["state"] == "UNAVAILABLE"
    assert "no_such_backend" in models["broken"]["reason"]
    events = {(e["model"], e["state"]) for e in data["events"]}
    assert {("id_fp32", "LOADING"), ("id_fp32", "READY"), ("broken", "UNAVAILABLE")} <= events


@pytest.mark.parametrize(
    ("category", "page_refused"),
    [("statistics", False), ("model-config", False), ("metadata", True), ("inference", False)],
)
async def test_restricted_api(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: Any,
    category: str,
    page_refused: bool,
) -> None:
    build_repository(model_repository)
    settings = loopback_settings(
        model_repository.root,
        allow_grpc=False,
        allow_metrics=False,
        http_restricted_api={category: ("admin-key", "secret")},
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        refused = (
            403,
            "application/json",
            '{"error":"This API is restricted, expecting header \'admin-key\'"}',
        )
        page = await get(server, "/")
        assert (page == refused) == page_refused
        data = await get(server, "/status/data")
        if category == "inference":  # the page shows nothing of it
            assert data[0] == 200
        else:
            assert data == refused
        assert (await get(server, "/status/data", **{"admin-key": "secret"}))[0] == 200
        assert (await get(server, "/", **{"admin-key": "secret"}))[0] == 200


async def test_disabled(model_repository: ModelRepositoryBuilder, plugin_manager: Any) -> None:
    build_repository(model_repository)
    settings = loopback_settings(
        model_repository.root, allow_grpc=False, allow_metrics=False, http_status_page=False
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        for path in ("/", "/status/data", "/status/status.js"):
            assert await get(server, path) == (404, "application/json", '{"error":"Not Found"}')
        assert (await get(server, "/v2/health/live"))[0] == 200


# ---------------------------------------------------------------------------------- browser


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no system chromium (apt-get install chromium; .ci/run installs it as root)")


def load(url: str, stop: threading.Event) -> None:
    with httpclient.InferenceServerClient(url) as client:
        while not stop.is_set():
            for model, dtype, shape in (
                ("id_fp32", np.float32, (2, 4)),
                ("id_int32", np.int32, (5,)),
            ):
                arr = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
                inp = httpclient.InferInput(
                    "INPUT0", list(shape), "FP32" if dtype is np.float32 else "INT32"
                )
                inp.set_data_from_numpy(arr)
                client.infer(model, [inp])
            time.sleep(0.005)


def test_page_in_headless_chromium(server_thread: ServerThread, tmp_path: Path) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    executable = chromium_path()
    url = server_thread.server.http_url
    stop = threading.Event()
    loader = threading.Thread(target=load, args=(url, stop), daemon=True)
    errors: list[str] = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"http://{url}/")
            # every model of the repository is listed, the broken one with its reason
            for name in ("id_fp32", "id_int32", "broken"):
                page.wait_for_selector(f'#models tr[data-model="{name}"]')
            broken = page.inner_text('#models tr[data-model="broken"]')
            assert "UNAVAILABLE" in broken and "no_such_backend" in broken
            assert "2x CPU" in page.inner_text('#models tr[data-model="id_fp32"]')
            assert "READY" in page.inner_text("#events")
            loader.start()
            # the charts update while load runs: points accumulate and the rate is positive
            card = '.chart-card[data-model="id_fp32"]'
            page.wait_for_function(
                f"""() => {{
                    const c = document.querySelector('{card}');
                    return c && Number(c.dataset.points) >= 4 && Number(c.dataset.lastRate) > 0
                        && c.querySelectorAll('polyline').length >= 4;
                }}""",
                timeout=30_000,
            )
            first = int(page.get_attribute(card, "data-points") or 0)
            page.wait_for_function(
                f"() => Number(document.querySelector('{card}').dataset.points) > {first}",
                timeout=10_000,
            )
            assert page.query_selector('.chart-card[data-model="id_int32"] polyline')
            assert page.inner_text("#latency-head") == "P99 (MS)"  # (the header is upper-cased)
            assert float(page.inner_text("#totals .card:nth-child(3) .value")) > 0
            page.wait_for_function(  # a few more points of plot (no sleep: the page's own count)
                f"() => Number(document.querySelector('{card}').dataset.points) > {first + 2}",
                timeout=30_000,
            )
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            for target in (tmp_path / "status_page.png", ARTIFACTS / "status_page.png"):
                page.screenshot(path=str(target), full_page=True)
            assert (tmp_path / "status_page.png").stat().st_size > 10_000
            assert not page.is_visible("#error")
        finally:
            stop.set()
            if loader.is_alive():
                loader.join(10)
            browser.close()
    assert errors == []
