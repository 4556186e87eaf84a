"""The logging extension through the real tritonclient: ``/v2/logging`` and gRPC
``LogSettings`` with Triton's validation messages, changing what a running ``tritonx serve``
writes to its ``--log-file`` (levels, verbose lines, the default and ISO8601 formats)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpc_sync
import tritonclient.grpc.aio as grpcclient
import tritonclient.http as http_sync
import tritonclient.http.aio as httpclient
from aiohttp import ClientSession
from tritonclient.utils import InferenceServerException

from tritonx import Server
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

DEFAULTS = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}

#: I1130 04:33:59.123456 1234 file.py:12] "message"
DEFAULT_LINE = re.compile(
    r'^([IWE])(\d{4}) (\d{2}:\d{2}:\d{2}\.\d{6}) (\d+) ([\w.]+):(\d+)\] (".*")$'
)
#: the preamble alone (the start-up table's line carries the table on the next lines)
DEFAULT_PREAMBLE = re.compile(r"^[IWE]\d{4} \d{2}:\d{2}:\d{2}\.\d{6} \d+ [\w.]+:\d+\] ")
#: 2024-11-30T04:33:59Z I 1234 file.py:12] "message"
ISO_LINE = re.compile(
    r'^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z) ([IWE]) (\d+) ([\w.]+):(\d+)\] (".*")$'
)


@pytest.fixture
async def server(
    model_repository: ModelRepositoryBuilder, restore_logging: None, plugin_manager: Any
) -> AsyncIterator[Server]:
    async with Server(
        loopback_settings(model_repository.root), plugin_manager=plugin_manager
    ) as srv:
        yield srv


async def test_settings_over_http(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert await client.get_log_settings() == DEFAULTS
        updated = await client.update_log_settings(
            {"log_verbose_level": 2, "log_format": "ISO8601", "log_warning": False}
        )
        assert updated == {**DEFAULTS, "log_verbose_level": 2, "log_format": "ISO8601", "log_warning": False}  # fmt: skip
        # null leaves a setting as it is
        assert (await client.update_log_settings({"log_info": None}))["log_info"] is True
        assert await client.get_log_settings() == updated
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"log_file": "/tmp/x.log"}, 501, "log file location can not be updated through network protocol"),
        ({"log_format": "json"}, 503, "invalid argument for --log_format, got: json"),
        ({"log_info": "yes"}, 500, "attempt to access JSON non-boolean as boolean"),
        ({"log_verbose_level": -1}, 500, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ({"log_verbose_level": True}, 500, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ],
)  # fmt: skip
async def test_http_errors(server: Server, body: dict[str, Any], status: int, message: str) -> None:
    async with ClientSession() as session:
        url = f"http://{server.http_url}/v2/logging"
        async with session.post(url, json=body) as reply:
            assert reply.status == status
            assert await reply.json() == {"error": message}
        async with session.put(url, json={}) as reply:
            assert reply.status == 405
        async with session.get(url) as reply:
            assert await reply.json() == DEFAULTS


async def test_earlier_keys_stay_applied_when_a_later_one_fails(server: Server) -> None:
    """tritonserver applies the keys one by one: a bad log_format after a good log_info
    leaves log_info changed."""
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        with pytest.raises(InferenceServerException, match="invalid argument for --log_format"):
            await client.update_log_settings({"log_info": False, "log_format": "bad"})
        assert (await client.get_log_settings())["log_info"] is False
    finally:
        await client.close()


async def test_settings_over_grpc(server: Server) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        got = await client.get_log_settings(as_json=True)
        assert got["settings"]["log_info"] == {"bool_param": True}
        assert got["settings"]["log_file"] == {"string_param": ""}
        updated = await client.update_log_settings(
            {"log_verbose_level": 1, "log_error": False, "log_format": "ISO8601"}, as_json=True
        )
        assert updated["settings"]["log_verbose_level"] == {"uint32_param": 1}
        assert updated["settings"]["log_error"] == {"bool_param": False}
        assert updated["settings"]["log_format"] == {"string_param": "ISO8601"}
        for settings, message in [
            ({"log_file": "x"}, "log file location can not be updated through network protocol"),
            ({"log_format": "bad"}, "invalid argument for log_format, got: bad"),
            ({"log_info": None}, "expect boolean for 'log_info'"),
            ({"log_verbose_level": None}, "expect int32 for 'log_verbose_level'"),
            ({"log_format": None}, "expect string for 'log_format'"),
        ]:
            with pytest.raises(InferenceServerException) as info:
                await client.update_log_settings(settings)
            assert message in info.value.message()
    finally:
        await client.close()


async def test_restricted_logging_category(
    model_repository: ModelRepositoryBuilder, restore_logging: None, plugin_manager: Any
) -> None:
    settings = loopback_settings(
        model_repository.root,
        http_restricted_api={"logging": ("log-key", "v")},
        grpc_restricted_protocol={"logging": ("log-key", "v")},
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            with pytest.raises(InferenceServerException, match="This API is restricted"):
                await http.update_log_settings({"log_info": False})
            with pytest.raises(InferenceServerException, match="This protocol is restricted"):
                await grpc.get_log_settings()
            assert (await http.get_log_settings(headers={"log-key": "v"}))["log_info"] is True
            got = await grpc.get_log_settings(headers={"triton-grpc-protocol-log-key": "v"})
            assert got.settings["log_info"].bool_param is True
        finally:
            await http.close()
            await grpc.close()


# ---------------------------------------------------------------------------- a real server


def _env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "backend_echo.py").write_text(
        "from tritonx.testing.identity import tritonx_register_backends  # noqa: F401\n"
    )
    info = site / "tritonx_backend_echo-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: tritonx-backend-echo\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text("[tritonx]\nbackend_echo = backend_echo\n")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
    environ["PYTHONPATH"] = os.pathsep.join([str(site), environ.get("PYTHONPATH", "")])
    environ["TRITONX_PLUGINS"] = "backend_echo"
    return environ


class Served:
    """A ``tritonx serve`` subprocess writing its log to a file."""

    def __init__(self, tmp_path: Path, repo: Path, log_file: Path, *flags: str) -> None:
        self.log_file = log_file
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tritonx", "serve", "--model-repository", str(repo),
             "--model-control-mode=explicit", "--allow-metrics=false",
             "--http-address", "127.0.0.1", "--http-port", "0",
             "--grpc-address", "127.0.0.1", "--grpc-port", "0",
             "--log-file", str(log_file), *flags],
            env=_env(tmp_path), stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.http = self.grpc = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (self.http and self.grpc):
            time.sleep(0.05)
            text = log_file.read_text() if log_file.exists() else ""
            found = re.search(r"Started HTTPService at (\S+):(\d+)", text)
            self.http = f"{found.group(1)}:{found.group(2)}" if found else ""
            found = re.search(r"Started GRPCInferenceService at (\S+):(\d+)", text)
            self.grpc = f"{found.group(1)}:{found.group(2)}" if found else ""
            if self.proc.poll() is not None:
                break
        assert self.http and self.grpc, self.stop()

    def lines(self) -> list[str]:
        return self.log_file.read_text().splitlines()

    def new_lines(self, before: int) -> list[str]:
        return self.lines()[before:]

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        self.proc.wait(30)
        return err


def _get(url: str) -> Any:
    with urllib.request.urlopen(url) as reply:
        return reply.status


@pytest.fixture
def served(tmp_path: Path, model_repository: ModelRepositoryBuilder) -> Iterator[Served]:
    for name in ("m1", "m2", "m3", "m4"):
        model_repository.add_identity(name, dims=[2], max_batch_size=2)
    server = Served(tmp_path, model_repository.root, tmp_path / "server.log")
    try:
        yield server
    finally:
        server.stop()


def test_log_settings_change_what_the_server_writes(served: Served) -> None:
    http = http_sync.InferenceServerClient(served.http)
    grpc = grpc_sync.InferenceServerClient(served.grpc)
    # the stderr stays quiet: everything goes to the file
    settings = http.get_log_settings()
    assert settings["log_file"] == str(served.log_file)
    assert all(DEFAULT_PREAMBLE.match(line) for line in served.lines() if line[:1].isalnum())

    # info off (HTTP): a model load writes nothing
    before = len(served.lines())
    assert http.update_log_settings({"log_info": False})["log_info"] is False
    http.load_model("m1")
    assert not any("successfully loaded 'm1'" in line for line in served.new_lines(before))

    # info on again (gRPC): the next load is logged, in the default format
    before = len(served.lines())
    grpc.update_log_settings({"log_info": True})
    grpc.load_model("m2")
    new = served.new_lines(before)
    loaded = [line for line in new if "successfully loaded 'm2' version 1" in line]
    assert loaded and DEFAULT_LINE.match(loaded[0]), new
    match = DEFAULT_LINE.match(loaded[0])
    assert match is not None
    assert match.group(1) == "I" and match.group(4) == str(served.proc.pid)
    assert json.loads(match.group(7)) == "successfully loaded 'm2' version 1"

    # verbose 1: every HTTP request is logged
    before = len(served.lines())
    http.update_log_settings({"log_verbose_level": 1})
    assert _get(f"http://{served.http}/v2/health/ready") == 200
    assert any("HTTP request: GET /v2/health/ready" in line for line in served.new_lines(before))
    http.update_log_settings({"log_verbose_level": 0})
    before = len(served.lines())
    _get(f"http://{served.http}/v2/health/live")
    assert not any("HTTP request" in line for line in served.new_lines(before))

    # ISO8601 (gRPC): later lines change format
    before = len(served.lines())
    grpc.update_log_settings({"log_format": "ISO8601"})
    http.load_model("m3")
    new = served.new_lines(before)
    loaded = [line for line in new if "successfully loaded 'm3' version 1" in line]
    assert loaded and ISO_LINE.match(loaded[0]), new
    iso = ISO_LINE.match(loaded[0])
    assert iso is not None and iso.group(2) == "I" and iso.group(3) == str(served.proc.pid)

    # back to default (HTTP)
    before = len(served.lines())
    http.update_log_settings({"log_format": "default"})
    http.load_model("m4")
    loaded = [line for line in served.new_lines(before) if "successfully loaded 'm4'" in line]
    assert loaded and DEFAULT_LINE.match(loaded[0])
    assert http.get_log_settings()["log_format"] == "default"


def test_cli_flags_start_the_server_with_those_settings(
    tmp_path: Path, model_repository: ModelRepositoryBuilder
) -> None:
    model_repository.add_identity("m1", dims=[2], max_batch_size=2)
    server = Served(
        tmp_path,
        model_repository.root,
        tmp_path / "iso.log",
        "--log-format=ISO8601",
        "--log-verbose=true",
        "--log-warning=false",
    )
    try:
        http = http_sync.InferenceServerClient(server.http)
        assert http.get_log_settings() == {
            "log_file": str(tmp_path / "iso.log"),
            "log_info": True,
            "log_warning": False,
            "log_error": True,
            "log_verbose_level": 1,
            "log_format": "ISO8601",
        }
        started = [line for line in server.lines() if "Started HTTPService" in line]
        assert started and ISO_LINE.match(started[0])
    finally:
        err = server.stop()
    assert "Started HTTPService" not in err  # the log went to the file only
