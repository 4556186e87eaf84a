"""The HTTP/2 conformance suite's server and connections.

Each test module starts one tritonx server (the default ``--grpc-engine loop``, only the gRPC
listener, an empty model repository: the cases call ``ServerLive`` and the health check,
which every server serves) and opens a fresh TCP connection per case. The frame helpers live
in ``h2frames.py`` beside this file (a plain module: this folder is put on ``sys.path``, as
pytest's importlib mode does not).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tritonx._runtime.plugins import make_plugin_manager
from tritonx.server import Server
from tritonx.testing import ServerThread, loopback_settings

sys.path.insert(0, str(Path(__file__).parent))

from h2frames import H2Client


@pytest.fixture(scope="module")
def h2_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The gRPC port of one server for the whole module."""
    root = tmp_path_factory.mktemp("models")
    settings = loopback_settings(root, allow_http=False, allow_metrics=False)
    thread = ServerThread(Server(settings, plugin_manager=make_plugin_manager(autoload=False)))
    server = thread.start()
    try:
        port = server.grpc_port
        assert port is not None
        yield port
    finally:
        thread.stop()


@pytest.fixture
def raw(h2_port: int) -> Iterator[H2Client]:
    """A new connection, nothing sent yet."""
    client = H2Client(h2_port)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def conn(raw: H2Client) -> H2Client:
    """A new connection past the handshake (preface, empty SETTINGS, both ACKed)."""
    raw.handshake()
    return raw
