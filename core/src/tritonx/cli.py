"""The ``tritonx`` command: ``serve`` (tritonserver's flags), ``plugins``, ``check``.

``serve`` parses its flags (:mod:`tritonx._runtime.cli_options`) into a :class:`ServerSettings` and
runs the server; the settings are checked once, by the server as it starts
(:mod:`tritonx._runtime.settings_check`): a refusal tritonserver makes while parsing its command line
is a usage error here (exit status 2), any other start-up failure exits with status 1.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import json
import logging
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import click

from tritonx._core.watchdog import ExitGuard
from tritonx._dataplane.trace_settings import (
    DeprecatedTraceFlags,
    TraceConfig,
    TraceConfigError,
    build_trace_config,
    settings_fields,
)
from tritonx._runtime.cli_options import NOT_IMPLEMENTED_FLAGS, serve_options
from tritonx._runtime.security import parse_restricted_option
from tritonx._runtime.settings_check import (
    SettingsError,
    check_safe_port_range,
    validate_settings,
)
from tritonx.config import EXAMPLE_REPOSITORY, ServerSettings
from tritonx.errors import PluginError, TritonXError

log = logging.getLogger("tritonx.cli")


#: a second ``<key>=`` joined by a comma to a ``--*-config`` value (``openai,allow=true,port=N``)
_JOINED_KEY = re.compile(r",([A-Za-z][A-Za-z0-9_.-]*)=")


def parse_keyed_config(values: Sequence[str], flag: str) -> dict[str, dict[str, str]]:
    """``<name>,<key>=<value>`` (or ``<key>=<value>`` for global settings) into nested dicts.

    One setting per flag, as Triton's ``--backend-config``: a value holding a second
    ``,<key>=`` is refused with what to pass instead."""
    out: dict[str, dict[str, str]] = {}
    for item in values:
        name, _, setting = item.partition(",") if "," in item else ("", "", item)
        key, sep, value = setting.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"'{item}' is not <name>,<key>=<value>", param_hint=flag)
        _refuse_joined(item, name, key, value, flag)
        out.setdefault(name, {})[key] = value
    return out


def _refuse_joined(item: str, name: str, key: str, value: str, flag: str) -> None:
    """Refuse a value that holds a second ``,<key>=`` (one setting per flag), saying what
    to pass instead."""
    starts = [m.start() for m in _JOINED_KEY.finditer(value)]
    if starts:
        prefix = f"{name}," if name else ""
        ends = [*starts[1:], len(value)]
        settings = [f"{key}={value[: starts[0]]}"]
        settings += [value[a + 1 : b] for a, b in zip(starts, ends, strict=True)]
        flags = " ".join(f"{flag} {prefix}{setting}" for setting in settings)
        raise click.BadParameter(
            f"'{item}' joins settings: one key=value per {flag} flag: pass {flags} separately",
            param_hint=flag,
        )


def parse_metrics_config(values: Sequence[str]) -> dict[str, str]:
    """``--metrics-config <setting>=<value>`` items (global settings only, as tritonserver's
    ParseMetricsConfigOption: a name before the setting, or an empty setting or value, is
    refused with its text)."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key or not value or "," in key:
            raise click.BadParameter(
                f"--metrics-config option format is <setting>=<value>. Got {item}",
                param_hint="--metrics-config",
            )
        _refuse_joined(item, "", key, value, "--metrics-config")
        out[key] = value
    return out


def parse_sinks(values: Sequence[str]) -> dict[str, dict[str, str]]:
    """``<sink>[,<key>=<value>]`` items into sink name → settings."""
    out: dict[str, dict[str, str]] = {}
    for item in values:
        name, _, setting = item.partition(",")
        if not name or "=" in name:
            raise click.BadParameter(
                f"'{item}' is not <sink>[,<key>=<value>]", param_hint="--metric-sink"
            )
        settings = out.setdefault(name, {})
        if setting:
            key, sep, value = setting.partition("=")
            if not sep or not key:
                raise click.BadParameter(
                    f"'{item}' is not <sink>[,<key>=<value>]", param_hint="--metric-sink"
                )
            settings[key] = value
    return out


def _tune_malloc() -> None:
    """Keep glibc from returning (and page-faulting back) the memory of large messages.

    With default settings every fresh 600 KB protobuf message costs hundreds of page faults;
    raising the mmap and trim thresholds cut grpc.aio's CPU per large request ~3x here. Users'
    own ``MALLOC_*`` environment variables win. Not with ``--model-memory-budget``: the memory
    of unloaded models must go back to the system (with these thresholds a model's large
    buffers come from the heap, and stay resident after its unload).
    """
    if any(k.startswith("MALLOC_") for k in os.environ) or not sys.platform.startswith("linux"):
        return
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    mallopt(m_mmap_threshold, 32 * 1024 * 1024)
    mallopt(m_trim_threshold, 256 * 1024 * 1024)
    mallopt(m_top_pad, 64 * 1024 * 1024)


@click.group()
@click.version_option(package_name="tritonx")
def cli() -> None:
    """tritonx: a Triton-compatible inference server built from plugins."""


@cli.command(
    epilog="tritonserver flags that tritonx does not implement yet are recognised and refused: "
    + ", ".join(NOT_IMPLEMENTED_FLAGS)
    + "."
)
@serve_options
def serve(**opts: Any) -> None:
    """Serve models over HTTP (:8000), gRPC (:8001) and metrics (:8002)."""
    configure_logging(opts)
    strict_model_config_warnings(opts)
    settings = settings_from_options(opts, trace_config(opts))
    if opts["allow_sagemaker"] and opts["sagemaker_safe_port_range"]:
        try:
            check_safe_port_range(settings, parse_port_range(opts["sagemaker_safe_port_range"]))
        except SettingsError as exc:
            raise click.UsageError(exc.message) from None
    if not settings.model_memory_budget:
        _tune_malloc()
    sys.exit(run_server(settings))


def configure_logging(opts: dict[str, Any]) -> None:
    """``--log-*``: the log's levels, format and file.

    :raises click.UsageError: when ``--log-file`` cannot be opened.
    """
    from tritonx._runtime import logs

    log_format = "ISO8601" if opts["log_format"].lower() == "iso8601" else "default"
    try:
        logs.configure(
            verbose=opts["log_verbose"],
            info=opts["log_info"],
            warning=opts["log_warning"],
            error=opts["log_error"],
            log_format=log_format,
            log_file=opts["log_file"],
        )
    except OSError as exc:
        raise click.UsageError(
            f"--log-file: cannot open '{opts['log_file']}': {exc.strerror or exc}"
        ) from None


#: Every ``ServerSettings`` field: ``serve`` fills each, from the option of the same name
#: unless :func:`settings_from_options` computes it (a field without either is a KeyError)
FIELDS = frozenset(f.name for f in fields(ServerSettings))


def settings_from_options(opts: dict[str, Any], trace: TraceConfig) -> ServerSettings:
    """The :class:`ServerSettings` of ``serve``'s options (parsed, not yet checked).

    :raises click.UsageError: for ``--response-cache-byte-size`` with ``--cache-config``, or
        a ``--*-restricted-*`` value that is not ``<category>[,...]:<key>=<value>``.
    """
    mode = opts["model_control_mode"].lower()
    repos = tuple(opts["model_repository"])
    exit_on_error = opts["exit_on_error"]
    if not repos and allow_vertex_ai(opts) and os.environ.get("AIP_STORAGE_URI"):
        repos = (os.environ["AIP_STORAGE_URI"],)  # as tritonserver: Vertex AI's artifacts
    if not repos:
        repos = (str(EXAMPLE_REPOSITORY),)
        _log_example_repository(repos[0])
        if exit_on_error is None:
            exit_on_error = False  # models whose backend plugin is not installed stay UNAVAILABLE
    parsed: dict[str, Any] = {
        "model_repository": repos,
        "model_control_mode": mode,
        "repository_poll_secs": opts["repository_poll_secs"] if mode == "poll" else 0.0,
        "exit_on_error": True if exit_on_error is None else exit_on_error,
        "disable_auto_complete_config": opts["disable_auto_complete_config"]
        or opts["strict_model_config"],
        "id": opts["server_id"],
        "backend_config": parse_keyed_config(opts["backend_config"], "--backend-config"),
        "cache_config": cache_config(opts),
        "grpc_infer_response_compression_level": opts[
            "grpc_infer_response_compression_level"
        ].lower(),
        "metrics_config": parse_metrics_config(opts["metrics_config"]),
        "metric_sinks": parse_sinks(opts["metric_sink"]),
        "frontend_config": cloud_frontends(
            opts, parse_keyed_config(opts["frontend_config"], "--frontend-config")
        ),
        **cloud_listeners(opts),
        **restrictions(opts),
        **settings_fields(trace),
    }
    same = {name: opts[name] for name in FIELDS - set(parsed)}
    return ServerSettings(**same, **parsed)


def _vertex_ai_environment() -> bool:
    """Whether Vertex AI runs the server (``AIP_MODE=PREDICTION``, as tritonserver reads it)."""
    return os.environ.get("AIP_MODE", "") == "PREDICTION"


def allow_vertex_ai(opts: dict[str, Any]) -> bool:
    """``--allow-vertex-ai``: as given, else whether Vertex AI runs the server."""
    allowed: bool | None = opts["allow_vertex_ai"]
    return _vertex_ai_environment() if allowed is None else allowed


def cloud_listeners(opts: dict[str, Any]) -> dict[str, bool]:
    """``allow_http`` and ``allow_grpc``: as given, else true, except under Vertex AI
    (``AIP_MODE=PREDICTION``), where tritonserver serves only the Vertex AI port by default."""
    default = not _vertex_ai_environment()
    return {
        name: default if opts[name] is None else opts[name] for name in ("allow_http", "allow_grpc")
    }


def cloud_frontends(
    opts: dict[str, Any], frontend_config: dict[str, dict[str, str]]
) -> dict[str, dict[str, str]]:
    """``frontend_config`` with tritonserver's SageMaker and Vertex AI flags as the settings
    of the ``sagemaker`` and ``vertex_ai`` frontend plugins (an explicit
    ``--frontend-config sagemaker,...`` or ``vertex_ai,...`` setting wins over a flag's).

    ``--allow-vertex-ai`` defaults to true under ``AIP_MODE=PREDICTION``, ``--vertex-ai-port``
    to ``AIP_HTTP_PORT`` (else 8080), as in tritonserver. The other flags of a contract that
    is not allowed are ignored, as tritonserver ignores them.
    """
    out = {name: dict(values) for name, values in frontend_config.items()}
    if opts["allow_sagemaker"]:
        flags = {
            "allow": "true",
            "port": str(opts["sagemaker_port"]),
            "thread_count": str(opts["sagemaker_thread_count"]),
        }
        out["sagemaker"] = {**flags, **out.get("sagemaker", {})}
    if allow_vertex_ai(opts):
        port = opts["vertex_ai_port"]
        if port is None:
            port_text = os.environ.get("AIP_HTTP_PORT", "8080")
            if not (port_text.isascii() and port_text.isdigit()):
                raise click.UsageError(f"AIP_HTTP_PORT must be a port number, got '{port_text}'")
            port = int(port_text)
        flags = {
            "allow": "true",
            "port": str(port),
            "thread_count": str(opts["vertex_ai_thread_count"]),
        }
        if opts["vertex_ai_default_model"]:
            flags["default_model"] = opts["vertex_ai_default_model"]
        out["vertex_ai"] = {**flags, **out.get("vertex_ai", {})}
    return out


def parse_port_range(text: str) -> tuple[int, int]:
    """``--sagemaker-safe-port-range``'s ``<integer>-<integer>``."""
    low, sep, high = text.partition("-")
    if not sep or not all(p.isascii() and p.isdigit() and len(p) <= 5 for p in (low, high)):
        raise click.BadParameter(
            f"'{text}' is not <integer>-<integer>", param_hint="--sagemaker-safe-port-range"
        )
    return int(low), int(high)


def _log_example_repository(path: str) -> None:
    log.info("no --model-repository given: serving the bundled example repository %s", path)
    if not (EXAMPLE_REPOSITORY / "minilm_embed").is_dir():
        log.info(
            "the MiniLM ensemble example (minilm_embed) is not built: from a checkout of "
            "tritonx, see core/src/tritonx/examples/minilm/README.md (python "
            "plugins/backend_onnx/scripts/make_minilm.py)"
        )


def cache_config(opts: dict[str, Any]) -> dict[str, dict[str, str]]:
    """``--cache-config``, or the deprecated ``--response-cache-byte-size`` (its warning
    printed as tritonserver prints it)."""
    config = parse_keyed_config(opts["cache_config"], "--cache-config")
    if opts["response_cache_byte_size"] is None:
        return config
    if config:  # tritonserver's checks and messages
        raise click.UsageError(
            "Incompatible flags --response-cache-byte-size and --cache-config both "
            "provided. Please provide one or the other."  # (click adds "Error: ")
        )
    size = str(opts["response_cache_byte_size"])
    click.echo(
        "Warning: '--response-cache-byte-size' has been deprecated! This will default to "
        "the 'local' cache implementation with the provided byte size for its config. "
        "Please use '--cache-config' instead. The equivalent --cache-config CLI args "
        f"would be: '--cache-config=local,size={size}'",
        err=True,
    )
    return {"local": {"size": size}}


def restrictions(opts: dict[str, Any]) -> dict[str, Any]:
    """``--http-restricted-api`` and ``--grpc-restricted-protocol`` as settings fields."""
    out: dict[str, Any] = {}
    for field_name, flag, feature_type in (
        ("http_restricted_api", "http-restricted-api", "api"),
        ("grpc_restricted_protocol", "grpc-restricted-protocol", "protocol"),
    ):
        try:
            out[field_name] = parse_restricted_option(opts[field_name], flag, feature_type)
        except ValueError as exc:  # tritonserver's "Bad option" message
            raise click.UsageError(f'Bad option: "--{flag}".\n{exc}') from None
    return out


def trace_config(opts: dict[str, Any]) -> TraceConfig:
    """The tracing configuration of ``--trace-config`` and the deprecated ``--trace-*`` flags
    (their warnings printed as tritonserver prints them).

    :raises click.UsageError: with tritonserver's "Bad option" message.
    """
    deprecated = DeprecatedTraceFlags(
        file=opts["trace_file"],
        level=tuple(opts["trace_level"]),
        rate=opts["trace_rate"],
        count=opts["trace_count"],
        log_frequency=opts["trace_log_frequency"],
    )
    try:
        config, warnings = build_trace_config(opts["trace_config"], deprecated)
    except TraceConfigError as exc:
        raise click.UsageError(str(exc)) from None
    for line in warnings:
        click.echo(line, err=True)
    return config


def strict_model_config_warnings(opts: dict[str, Any]) -> None:
    """tritonserver's warnings (on stderr) for the deprecated ``--strict-model-config``."""
    source = click.get_current_context().get_parameter_source("strict_model_config")
    given = source is not None and source is not click.core.ParameterSource.DEFAULT
    if given:
        click.echo(
            "Warning: '--strict-model-config' has been deprecated! Please use "
            "'--disable-auto-complete-config' instead.",
            err=True,
        )
    if opts["disable_auto_complete_config"] and given and not opts["strict_model_config"]:
        click.echo(
            "Warning: Overriding deprecated '--strict-model-config' from False to True in "
            "favor of '--disable-auto-complete-config'!",
            err=True,
        )


def run_server(settings: ServerSettings) -> int:
    """Run the server until SIGINT/SIGTERM; returns the process exit code.

    The signals are handled outside the event loop (:class:`~tritonx._core.watchdog.ExitGuard`):
    the first starts the graceful stop, and a process still alive ``--exit-timeout-secs`` +
    :data:`~tritonx._core.watchdog.HARD_EXIT_GRACE_S` seconds later (a blocked loop, a stop
    that does not end) exits at once with status 1, as tritonserver when its exit timeout
    expires."""
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    guard = ExitGuard(settings.exit_timeout_secs)
    guard.install()  # before the runner: asyncio's own SIGINT handler then stays out
    try:
        return int(runner(_serve(settings, guard)))
    finally:
        guard.uninstall()


async def _serve(settings: ServerSettings, guard: ExitGuard) -> int:
    from tritonx.server import Server

    server = Server(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    guard.on_signal(lambda: loop.call_soon_threadsafe(stop.set))
    try:
        await server.start()
    except (TritonXError, PluginError) as exc:
        if isinstance(exc, SettingsError) and exc.usage:  # as tritonserver's parser refuses it
            raise click.UsageError(exc.message) from None
        code = exc.code.label if isinstance(exc, TritonXError) else "Internal"
        click.echo(f"error: creating server: {code} - {exc.message}", err=True)
        return 1
    except OSError as exc:
        click.echo(f"error: creating server: Internal - {exc}", err=True)
        return 1
    await stop.wait()
    log.info("Waiting for in-flight requests to complete.")
    await server.stop(settings.exit_timeout_secs)
    guard.stopped = True
    log.info("All models are stopped, unloading models")
    return 0


@cli.command()
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Also list built-in plugins and plugins with nothing registered.",
)
def plugins(show_all: bool) -> None:
    """List installed plugins as JSON (name, distribution, version, hooks, registered)."""
    from tritonx._runtime.plugins import collect, describe_plugins, make_plugin_manager

    pm = make_plugin_manager()
    entries = describe_plugins(pm, collect(pm))
    if not show_all:
        entries = [
            e
            for e in entries
            if not e.get("builtin") and (e.get("registered") or e.get("distribution"))
        ]
    click.echo(json.dumps(entries, indent=2))


@cli.command("check")
@click.argument("repositories", nargs=-1, type=str)
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the results as JSON.")
@click.option(
    "--disable-auto-complete-config",
    is_flag=True,
    default=False,
    help="Check as 'serve --disable-auto-complete-config' would load.",
)
@click.option(
    "--backend-config",
    multiple=True,
    help="<backend>,<key>=<value> (repeatable), as for serve (auto-complete reads some).",
)
@click.option(
    "--model-config-name",
    default="",
    metavar="NAME",
    help="Check each model's configs/NAME.pbtxt where it has one, as serve reads it.",
)
def check(
    repositories: tuple[str, ...],
    as_json: bool,
    disable_auto_complete_config: bool,
    backend_config: tuple[str, ...],
    model_config_name: str,
) -> None:
    """Check model repositories offline: every model's completed config, or the exact
    reason 'serve' would fail to load it. Loads no instance. Exit code 1 if any would fail.

    With no REPOSITORIES, checks the bundled example repository."""
    from tritonx._core.check import check_repositories
    from tritonx._core.lifecycle import ModelManager
    from tritonx._runtime.plugins import collect, make_plugin_manager
    from tritonx.server import format_table

    settings = ServerSettings(
        model_repository=tuple(repositories) or (str(EXAMPLE_REPOSITORY),),
        disable_auto_complete_config=disable_auto_complete_config,
        backend_config=parse_keyed_config(backend_config, "--backend-config"),
        model_config_name=model_config_name,
    )
    try:
        manager = ModelManager(validate_settings(settings), collect(make_plugin_manager()))
        results = asyncio.run(check_repositories(manager))
    except (TritonXError, PluginError) as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(1)
    finally:
        if "manager" in locals():
            asyncio.run(manager.shutdown())
    if as_json:
        click.echo(json.dumps([r.to_json() for r in results], indent=2))
    else:
        rows: list[tuple[str, ...]] = []
        for r in results:
            if r.ok:
                cells = r.summary()
                rows.append(
                    (
                        r.name,
                        ",".join(str(v) for v in r.versions),
                        "OK",
                        cells["backend"],
                        cells["max_batch_size"],
                        cells["inputs"],
                        cells["outputs"],
                        cells["instances"],
                    )
                )
            else:
                rows.append((r.name, "-", f"ERROR: {r.error.strip()}", "", "", "", "", ""))
        header: tuple[str, ...] = (
            "Model", "Versions", "Status", "Backend", "Max batch", "Inputs", "Outputs",
            "Instances",
        )  # fmt: skip
        if any(r.notes for r in results):  # backends' notes (Backend.check_notes)
            header += ("Notes",)
            rows = [(*row, r.notes_text()) for row, r in zip(rows, results, strict=True)]
        click.echo(format_table(header, rows), nl=False)
    if any(not r.ok for r in results):
        sys.exit(1)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``tritonx`` script; plugins may add subcommands first."""
    try:
        from tritonx._runtime.plugins import make_plugin_manager

        make_plugin_manager().hook.tritonx_register_commands(cli=cli)
    except PluginError as exc:
        click.echo(f"warning: plugins not loaded: {exc}", err=True)
    try:
        cli.main(
            args=list(argv) if argv is not None else None, prog_name="tritonx", standalone_mode=True
        )
    except PluginError as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(1)
