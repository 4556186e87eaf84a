"""The site's screenshots, made by this test so they show what the code draws today.

``docs/assets/screenshots/status-page.png``: the status page (``GET /``) of a real server over
the example repository while two clients send requests, in Debian's headless Chromium driven
by Playwright. ``docs/assets/screenshots/analyze-report.png``: the ``report.html`` a real
``tritonx analyze`` run writes for the example ``simple`` model. Every run makes both into
its temporary folder; ``TRITONX_UPDATE_SCREENSHOTS=1`` (or a picture missing from the docs)
writes them into the repository's docs folder too, to commit (a plain test run leaves the
checkout as it was). Each test skips when Chromium or Playwright is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

import tritonx
from tritonx import Server
from tritonx.testing import ServerThread, loopback_settings

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "assets" / "screenshots"
VIEWPORT = {"width": 1200, "height": 800}
#: the status page's models (from the example repository) and their inputs' type
MODELS: dict[str, type[np.generic]] = {"simple": np.int32, "simple_int8": np.int8}
#: a picture the site can carry: smaller than this
MAX_BYTES = 300_000


def chromium_path() -> str:
    """Debian's Chromium (Playwright drives it; no browser download)."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no system chromium (apt-get install chromium; .ci/run installs it as root)")


def send_requests(url: str, model: str, dtype: type[np.generic], stop: threading.Event) -> None:
    """Infer on ``model`` (two 16-element inputs, as the example ``simple`` models) until
    ``stop`` is set."""
    datatype = "INT32" if dtype is np.int32 else "INT8"
    data = np.arange(16, dtype=dtype).reshape(1, 16)
    with httpclient.InferenceServerClient(url) as client:
        while not stop.is_set():
            inputs = []
            for name in ("INPUT0", "INPUT1"):
                tensor = httpclient.InferInput(name, [1, 16], datatype)
                tensor.set_data_from_numpy(data)
                inputs.append(tensor)
            client.infer(model, inputs)


def browser_page(playwright: Any, errors: list[str]) -> tuple[Any, Any]:
    """A headless Chromium and a page of the screenshots' size recording console errors."""
    browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True)
    page = browser.new_page(viewport=VIEWPORT)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return browser, page


def save(page: Any, folder: Path, name: str, *, full_page: bool = False) -> Path:
    """Screenshot the viewport (or the whole page) into ``folder``, and into the docs'
    screenshots folder when asked to (``TRITONX_UPDATE_SCREENSHOTS=1``) or missing there."""
    target = folder / name
    page.screenshot(path=str(target), full_page=full_page)
    assert 10_000 < target.stat().st_size < MAX_BYTES
    published = SCREENSHOTS / name
    if os.environ.get("TRITONX_UPDATE_SCREENSHOTS") == "1" or not published.is_file():
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, published)
    return target


def test_status_page_screenshot(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium_path()
    for model in MODELS:  # two of the example models: the page and its charts fit the picture
        shutil.copytree(Path(tritonx.EXAMPLE_REPOSITORY) / model, tmp_path / model)
    settings = loopback_settings(
        tmp_path,
        allow_grpc=False,
        allow_metrics=False,
        metrics_config={"summary_latencies": "true"},
    )
    stop = threading.Event()
    errors: list[str] = []
    with ServerThread(Server(settings)) as server:
        url = server.http_url
        clients = [
            threading.Thread(target=send_requests, args=(url, model, dtype, stop), daemon=True)
            for model, dtype in MODELS.items()
        ]
        with sync_api.sync_playwright() as playwright:
            browser, page = browser_page(playwright, errors)
            try:
                page.goto(f"http://{url}/")
                page.wait_for_selector('#models tr[data-model="simple"]')
                for client in clients:
                    client.start()
                # a few seconds of plot on both charts, with the latency percentiles
                page.wait_for_function(
                    """() => ['simple', 'simple_int8'].every(m => {
                        const c = document.querySelector(`.chart-card[data-model="${m}"]`);
                        return c && Number(c.dataset.points) >= 8
                            && Number(c.dataset.lastRate) > 0
                            && c.querySelectorAll('polyline').length >= 4;
                    })""",
                    timeout=60_000,
                )
                assert page.inner_text("#latency-head") == "P99 (MS)"
                assert not page.is_visible("#error")
                save(page, tmp_path, "status-page.png", full_page=True)
            finally:
                stop.set()
                for client in clients:
                    if client.is_alive():
                        client.join(10)
                browser.close()
    assert errors == []


def test_analyze_report_screenshot(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    pytest.importorskip("tritonx_tools_analyze")
    pytest.importorskip("matplotlib")  # the report's plots (the plots extra)
    chromium_path()
    out = tmp_path / "analyze-simple"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tritonx",
            "analyze",
            "simple",
            "--model-repository",
            tritonx.EXAMPLE_REPOSITORY,
            "--output-dir",
            str(out),
            "--concurrency=1,2",
            "--measurement-seconds=0.3",
            "--warmup-seconds=0.1",
            "--confirm-rounds=1",
            "--max-variants=3",
            "--load-generator=builtin",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = out / "report.html"
    errors: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser, page = browser_page(playwright, errors)
        try:
            page.goto(report.as_uri())
            page.wait_for_selector("img[src='pareto.png']")
            page.wait_for_function(
                "() => [...document.images].length >= 4"
                " && [...document.images].every(i => i.complete && i.naturalWidth > 0)"
            )
            assert "simple" in page.inner_text("header h1")
            # tall enough for the result and the first plot (throughput vs p99 latency)
            page.set_viewport_size({"width": VIEWPORT["width"], "height": 1250})
            save(page, tmp_path, "analyze-report.png")
        finally:
            browser.close()
    assert errors == []
