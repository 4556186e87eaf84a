"""Fixtures of the Vertex AI frontend's tests: servers started in a thread of their own
(``tritonx.testing.ServerThread``) with the environment Vertex AI sets (``AIP_*``), the
installed ``frontend_vertexai`` plugin and the identity test backend."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tritonx import Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ServerThread, identity, loopback_settings

#: The routes of Triton's qa (qa/L0_vertex_ai/test.sh).
PREDICT_ROUTE = "/predict"
HEALTH_ROUTE = "/health"


@dataclass
class Vertex:
    """A started server with the Vertex AI frontend.

    :ivar server: the in-process server.
    :ivar base: the frontend's base URL (``http://127.0.0.1:<port>``).
    """

    server: Server
    base: str

    @property
    def predict(self) -> str:
        """The predict route's URL."""
        return self.base + PREDICT_ROUTE

    @property
    def health(self) -> str:
        """The health route's URL."""
        return self.base + HEALTH_ROUTE


def vertex_environment(
    monkeypatch: pytest.MonkeyPatch, environ: Mapping[str, str | None] | None = None
) -> None:
    """Set what Vertex AI sets (``AIP_*``: Triton's qa routes by default); ``environ``
    overrides (None: unset)."""
    values: dict[str, str | None] = {
        "AIP_MODE": "PREDICTION",
        "AIP_PREDICT_ROUTE": PREDICT_ROUTE,
        "AIP_HEALTH_ROUTE": HEALTH_ROUTE,
        **(environ or {}),
    }
    for key, value in values.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)


@contextlib.contextmanager
def serve(
    root: Path,
    vertex_config: Mapping[str, str] | None = None,
    environ: Mapping[str, str | None] | None = None,
    plugins: tuple[str, ...] = ("frontend_vertexai",),
    **overrides: Any,
) -> Iterator[Vertex]:
    """A started server over ``root`` with the Vertex AI frontend on a free loopback port
    and the Vertex AI environment (:func:`vertex_environment`) while it starts."""
    config = {"allow": "true", "port": "0", "address": "127.0.0.1", **(vertex_config or {})}
    settings = loopback_settings(root, frontend_config={"vertex_ai": config}, **overrides)
    pm = make_plugin_manager(autoload=True, only=plugins, extra=[identity])
    with pytest.MonkeyPatch.context() as monkeypatch:
        vertex_environment(monkeypatch, environ)
        thread = ServerThread(Server(settings, plugin_manager=pm))
        try:
            server = thread.start()
        except BaseException:
            thread.stop()
            raise
    try:
        yield Vertex(server, server.frontend_urls["vertex_ai"])
    finally:
        thread.stop()


@pytest.fixture(scope="session")
def serve_vertex() -> Any:
    """:func:`serve`, for tests that start servers of their own."""
    return serve
