"""One settings validation step (``tritonx._runtime.settings_check``): ``Server.start()`` refuses, before
anything starts, the settings ``tritonx serve`` refuses, with the same message, whether they
come from the CLI or are given in-process."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click
import pluggy
import pytest

import tritonx
from tritonx import Server, TritonXError
from tritonx._runtime.settings_check import (
    AT_LEAST,
    AT_MOST,
    ONE_OF,
    SettingsError,
    validate_settings,
)
from tritonx.cli import cli
from tritonx.config import ServerSettings
from tritonx.errors import Code
from tritonx.testing import ModelRepositoryBuilder, loopback_settings
from tritonx.types import ModelEvent


class Events:
    """Records every model event: a start refused before anything starts has none."""

    def __init__(self) -> None:
        self.events: list[ModelEvent] = []

    @tritonx.hookimpl
    def tritonx_model_event(self, event: ModelEvent) -> None:
        self.events.append(event)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # checks the CLI alone made before (click.UsageError in ``serve``)
        (
            {"load_model": ("a",)},
            "--load-model requires --model-control-mode=explicit",
        ),
        (
            {"http_port": 9000, "grpc_port": 9000},
            "The server cannot listen to HTTP requests and GRPC requests at the same address "
            "and port 127.0.0.1:9000",
        ),
        (
            {"allow_grpc": False, "http_port": 9000, "metrics_port": 9000},
            "The server cannot listen to HTTP requests and metrics requests at the same "
            "address and port 127.0.0.1:9000",
        ),
        ({"http_max_input_size": 0}, "--http-max-input-size must be greater than 0."),
        # values the CLI's option types refuse (click ranges and choices)
        ({"model_load_thread_count": 0}, "--model-load-thread-count must be 1 or more, got 0"),
        (
            {"http_header_timeout_secs": -1.0},
            "--http-header-timeout-secs must be 0 or more, got -1.0",
        ),
        ({"http_max_connections": -1}, "--http-max-connections must be 0 or more, got -1"),
        ({"inline_execution_us": float("nan")}, "--inline-execution-us must be 0 or more, got nan"),
        (
            {"grpc_max_decompressed_message_size": 0},
            "--grpc-max-decompressed-message-size must be 1 or more, got 0",
        ),
        (
            {"model_control_mode": "EXPLICIT"},
            "--model-control-mode must be none, poll, explicit, got 'EXPLICIT'",
        ),
        (
            {"rate_limit": "always"},
            "--rate-limit must be off, execution_count, got 'always'",
        ),
    ],
)
async def test_cli_checks_apply_in_process(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: pluggy.PluginManager,
    register_plugin: Any,
    overrides: dict[str, Any],
    message: str,
) -> None:
    model_repository.add_identity("simple", "INT32", dims=[-1])
    events = Events()
    register_plugin(events)
    settings = loopback_settings(model_repository.root, **overrides)
    server = Server(settings, plugin_manager=plugin_manager)
    with pytest.raises(TritonXError) as err:
        await server.start()
    assert isinstance(err.value, SettingsError)
    assert err.value.code is Code.INVALID_ARG
    assert err.value.message == message
    assert events.events == []  # refused before any model loads
    assert not server.server_live() and not server.server_ready()


async def test_valid_settings_start(
    model_repository: ModelRepositoryBuilder, plugin_manager: pluggy.PluginManager
) -> None:
    """The same settings, valid, start (ports 0 may repeat: the OS picks each)."""
    model_repository.add_identity("simple", "INT32", dims=[-1])
    settings = loopback_settings(
        model_repository.root, model_control_mode="explicit", load_model=("simple",)
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        assert server.server_ready() and server.model_ready("simple")


def test_validate_settings() -> None:
    defaults = ServerSettings()
    assert validate_settings(defaults) is defaults
    usage = [
        replace(defaults, load_model=("a",)),
        replace(defaults, metrics_port=8000),
        replace(defaults, http_max_input_size=-1),
        replace(defaults, grpc_use_ssl=True),
    ]
    for settings in usage:  # what tritonserver refuses while parsing: exit status 2
        with pytest.raises(SettingsError) as err:
            validate_settings(settings)
        assert err.value.usage, err.value.message
    server_errors = [
        replace(defaults, model_config_name="../x"),
        replace(defaults, http_header_forward_pattern="x-("),
        replace(defaults, grpc_restricted_protocol={"nope": ("k", "v")}),
        replace(defaults, metrics_config={"colour": "red"}),
        replace(defaults, rate_limit_resource=("R",)),
        replace(defaults, trace_level=("LOUD",)),
        replace(defaults, grpc_max_connection_age=-5),
    ]
    for settings in server_errors:  # "error: creating server: ...": exit status 1
        with pytest.raises(SettingsError) as err:
            validate_settings(settings)
        assert not err.value.usage, err.value.message
        assert err.value.code is Code.INVALID_ARG


def test_a_disabled_listener_settings_are_not_read() -> None:
    """As before the one validation step: a listener that does not start reads none of its
    restrictions, header pattern or TLS files (CLI ranges still apply to every flag)."""
    defaults = ServerSettings()
    off = [
        replace(defaults, allow_grpc=False, grpc_header_forward_pattern="x-("),
        replace(defaults, allow_grpc=False, grpc_restricted_protocol={"nope": ("k", "v")}),
        replace(defaults, allow_http=False, http_header_forward_pattern="x-("),
        replace(defaults, allow_http=False, http_restricted_api={"nope": ("k", "v")}),
        replace(defaults, allow_grpc=False, grpc_use_ssl=True),
    ]
    for settings in off:
        assert validate_settings(settings) is settings
    with pytest.raises(SettingsError, match="--grpc-max-connection-age must be 0 or more"):
        validate_settings(replace(defaults, allow_grpc=False, grpc_max_connection_age=-5))


def test_the_in_process_ranges_and_choices_are_the_clis() -> None:
    """Every click range and choice of ``tritonx serve`` on a settings field is checked in
    process too, with the same bounds and values (one table could drift from the other)."""
    lowest = {name: bound for bound, names in AT_LEAST.items() for name in names}
    highest = {name: bound for bound, names in AT_MOST.items() for name in names}
    fields = set(ServerSettings.__dataclass_fields__)
    serve = cli.commands["serve"]
    ranges = choices = 0
    for param in serve.params:
        kind = param.type
        if param.name not in fields:
            continue
        if isinstance(kind, (click.IntRange, click.FloatRange)):
            ranges += 1
            assert lowest.get(param.name) == kind.min, param.name
            assert highest.get(param.name) == kind.max, param.name
        elif isinstance(kind, click.Choice):
            choices += 1
            if param.name == "grpc_infer_response_compression_level":
                refused = replace(ServerSettings(), **{param.name: "max"})
                with pytest.raises(SettingsError):
                    validate_settings(refused)
                continue
            assert tuple(ONE_OF[param.name]) == tuple(kind.choices), param.name
    assert len(lowest) == ranges and len(ONE_OF) == choices - 1
