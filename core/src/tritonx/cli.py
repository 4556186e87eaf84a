"""The ``tritonx`` command: ``serve`` (tritonserver's flags), ``plugins``, ``check``."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from tritonx._core.watchdog import ExitGuard
from tritonx.config import EXAMPLE_REPOSITORY, ServerSettings
from tritonx.errors import PluginError, TritonXError
from tritonx.security import RESTRICTED_CATEGORIES, load_tls_files, parse_restricted_option
from tritonx.trace_settings import (
    DeprecatedTraceFlags,
    TraceConfig,
    TraceConfigError,
    build_trace_config,
    level_names,
    otel_missing,
)

log = logging.getLogger("tritonx.cli")

_TRUE = {"true", "on", "1", "yes"}
_FALSE = {"false", "off", "0", "no"}


class TritonBool(click.ParamType):
    """tritonserver's booleans: true/false, on/off, 1/0 (case-insensitive)."""

    name = "boolean"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        self.fail(f"'{value}' is not a boolean (true/false, on/off, 1/0)", param, ctx)


BOOL = TritonBool()


class IntBool(click.ParamType):
    """tritonserver's ``ParseIntBoolOption`` (``--log-verbose``): an integer, or true (1) /
    false (0)."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text == "true":
            return 1
        if text == "false":
            return 0
        try:
            number = int(text)
        except ValueError:
            self.fail(f"'{value}' is not an integer (or true/false)", param, ctx)
        if number < 0:
            self.fail(f"'{value}' must be 0 or more", param, ctx)
        return number


def bool_option(name: str, default: bool, help: str) -> Any:
    """``--flag=<bool>``; a bare ``--flag`` means true."""
    return click.option(
        name,
        type=BOOL,
        default=default,
        is_flag=False,
        flag_value=True,
        show_default=True,
        help=help,
    )


def parse_keyed_config(values: Sequence[str], flag: str) -> dict[str, dict[str, str]]:
    """``<name>,<key>=<value>`` (or ``<key>=<value>`` for global settings) into nested dicts."""
    out: dict[str, dict[str, str]] = {}
    for item in values:
        name, _, setting = item.partition(",") if "," in item else ("", "", item)
        key, sep, value = setting.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"'{item}' is not <name>,<key>=<value>", param_hint=flag)
        out.setdefault(name, {})[key] = value
    return out


#: tritonserver flags tritonx does not implement yet: recognised and refused with a message
#: (never accepted silently, never click's bare "No such option").
NOT_IMPLEMENTED_FLAGS: tuple[str, ...] = (
    "--model-namespacing",
    "--enable-peer-access",
    "--grpc-infer-thread-count",
    "--grpc-max-response-pool-size",
    "--backend-directory",
    "--repoagent-directory",
    "--cache-directory",
    "--pinned-memory-pool-byte-size",
    "--cuda-memory-pool-byte-size",
    "--cuda-virtual-address-size",
    "--min-supported-compute-capability",
    "--buffer-manager-thread-count",
    "--host-policy",
    "--model-load-gpu-limit",
    "--allow-sagemaker",
    "--sagemaker-port",
    "--sagemaker-safe-port-range",
    "--sagemaker-thread-count",
    "--allow-vertex-ai",
    "--vertex-ai-port",
    "--vertex-ai-thread-count",
    "--vertex-ai-default-model",
    "--allow-poll-model-repository",
    "--allow-model-control",
)


def _refuse(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value:
        flag = param.opts[0]
        raise click.UsageError(
            f"tritonserver's {flag} is not implemented by tritonx yet; remove it (see "
            "'tritonx serve --help' for the flags tritonx implements)",
            ctx,
        )


def not_implemented_options(func: Any) -> Any:
    """Add every flag of :data:`NOT_IMPLEMENTED_FLAGS` as a hidden option that refuses."""
    for flag in reversed(NOT_IMPLEMENTED_FLAGS):
        func = click.option(
            flag,
            multiple=True,
            is_flag=False,
            flag_value="true",
            hidden=True,
            expose_value=False,
            callback=_refuse,
        )(func)
    return func


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
    own ``MALLOC_*`` environment variables win.
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
@click.option(
    "--model-repository",
    "--model-store",
    "model_repository",
    multiple=True,
    help="Model repository: a path, or a URL whose scheme a repository plugin serves "
    "(repeatable). Default: the bundled example repository.",
)
@click.option(
    "--model-control-mode",
    type=click.Choice(["none", "poll", "explicit"], case_sensitive=False),
    default="none",
    show_default=True,
    help="How models are loaded and unloaded.",
)
@click.option(
    "--load-model", multiple=True, help="Model to load at start-up in explicit mode ('*' = all)."
)
@click.option(
    "--repository-poll-secs",
    type=float,
    default=15.0,
    show_default=True,
    help="Seconds between repository polls (poll mode).",
)
@click.option(
    "--exit-on-error",
    type=BOOL,
    default=None,
    is_flag=False,
    flag_value=True,
    help="Exit if a model fails to load at start-up [default: true; false when serving "
    "the bundled example repository].",
)
@bool_option("--strict-readiness", True, "Ready only when every model is ready.")
@click.option(
    "--disable-auto-complete-config",
    is_flag=True,
    default=False,
    help="Do not complete configs from model files.",
)
@bool_option("--strict-model-config", False, "Deprecated: same as --disable-auto-complete-config.")
@click.option(
    "--model-load-thread-count",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Models loaded in parallel.",
)
@click.option(
    "--model-config-name",
    default="",
    metavar="NAME",
    help="Read each model's configs/NAME.pbtxt instead of its config.pbtxt, for the models "
    "that have one.",
)
@click.option(
    "--model-load-retry-count",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Times a model version whose instances failed to load (or warm up) is loaded "
    "again before its load fails.",
)
@click.option(
    "--exit-timeout-secs",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds to wait for in-flight requests at shutdown (SIGINT, SIGTERM); then "
    "executions still running are stopped (python models' worker processes killed), and "
    "a process still alive 5 s later exits at once with status 1.",
)
@click.option(
    "--model-unload-timeout-secs",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds an unload (or the unload of the old version a reload does) waits for "
    "the requests in flight and the instances' unload; then queued requests fail, python "
    "models' worker processes are killed, instance threads still executing are abandoned "
    "and the unload completes (tritonx only).",
)
@click.option(
    "--event-loop-watchdog-secs",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Log the event loop's stack and count tritonx_event_loop_blocked_total when the "
    "loop is blocked this long (a blocking call in a coroutine or backend); 0: off "
    "(tritonx only).",
)
@click.option(
    "--id", "server_id", default="triton", show_default=True, help="Server identifier (/v2 name)."
)
@click.option(
    "--backend-config",
    multiple=True,
    help="<backend>,<key>=<value> (repeatable), or <key>=<value> for every backend "
    "(e.g. default-max-batch-size); a key the named backend does not read, or a global one "
    "no installed backend reads, stops the start with an error naming the keys that are "
    "read.",
)
@click.option(
    "--cache-config",
    multiple=True,
    help="<cache>,<key>=<value> (repeatable): the response cache plugin to use and its "
    "settings; models with response_cache { enable: true } use it.",
)
@click.option(
    "--response-cache-byte-size",
    type=int,
    default=None,
    help="Deprecated (as in tritonserver): the same as --cache-config=local,size=<bytes>.",
)
@bool_option("--allow-http", True, "Serve HTTP/REST.")
@click.option("--http-address", default="0.0.0.0", show_default=True)
@click.option("--http-port", type=int, default=8000, show_default=True)
@bool_option(
    "--reuse-http-port",
    False,
    "Allow several servers to listen on the same HTTP port when every one of them sets "
    "this (SO_REUSEPORT: the kernel spreads new connections over them). Each server keeps "
    "its own models, statistics and registrations: serve the same models from every one.",
)
@click.option(
    "--http-thread-count",
    type=int,
    default=8,
    show_default=True,
    help="Accepted for compatibility (the HTTP server is asynchronous).",
)
@click.option(
    "--http-max-input-size",
    type=int,
    default=64 * 1024 * 1024,
    show_default=True,
    help="Largest HTTP request body, in bytes; for compressed bodies, the decompressed size.",
)
@click.option(
    "--http-header-timeout-secs",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds a connection may take to send a request's headers (also bounds a TLS "
    "handshake); then it is closed. 0: no limit (tritonx only).",
)
@click.option(
    "--http-body-timeout-secs",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds without a byte while a request body is read; then 408 and the "
    "connection is closed. 0: no limit (tritonx only).",
)
@click.option(
    "--http-keepalive-timeout-secs",
    type=click.FloatRange(min=0),
    default=620.0,
    show_default=True,
    help="Seconds an idle connection is kept open between requests. 0: no limit (tritonx only).",
)
@click.option(
    "--http-max-connections",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Most open HTTP connections; beyond it new clients wait and the oldest idle or "
    "incomplete connection (no request in progress) is closed to make room. 0: the "
    "open-file limit less a quarter (tritonx only).",
)
@click.option(
    "--http-restricted-api",
    multiple=True,
    metavar="<api>[,<api>...]:<key>=<value>",
    help="Requests to these APIs must carry the HTTP header <key>: <value>, else 403 "
    "(repeatable; an API may be in one group only). APIs: "
    + ", ".join(RESTRICTED_CATEGORIES)
    + ".",
)
@click.option(
    "--http-header-forward-pattern",
    default="",
    metavar="REGEX",
    help="Headers of /infer requests whose name this regular expression matches "
    "(case-insensitive) become string parameters of the request, as in Triton; a matching "
    "reserved name fails the request with 400.",
)
@bool_option(
    "--http-use-ssl",
    False,
    "Serve HTTPS (--http-server-cert, --http-server-key); tritonx only, named after "
    "--grpc-use-ssl.",
)
@bool_option(
    "--http-use-ssl-mutual",
    False,
    "Serve HTTPS and require client certificates signed by --http-root-cert (tritonx only); "
    "implies --http-use-ssl.",
)
@click.option(
    "--http-server-cert", default="", metavar="FILE", help="PEM server certificate for HTTPS."
)
@click.option(
    "--http-server-key", default="", metavar="FILE", help="PEM server private key for HTTPS."
)
@click.option(
    "--http-root-cert",
    default="",
    metavar="FILE",
    help="PEM root certificate(s) that verify HTTPS clients.",
)
@bool_option(
    "--http-fast-infer",
    True,
    "Serve plain inference requests (whole, uncompressed, up to 256 KiB, untraced) without "
    "aiohttp's web layer: the same answers for less CPU per request (tritonx only).",
)
@bool_option(
    "--http-status-page",
    True,
    "Serve the live status page on GET / of the HTTP port (tritonx only).",
)
@bool_option("--allow-grpc", True, "Serve gRPC.")
@click.option("--grpc-address", default="0.0.0.0", show_default=True)
@click.option("--grpc-port", type=int, default=8001, show_default=True)
@bool_option(
    "--reuse-grpc-port",
    False,
    "Allow several servers to listen on the same gRPC port when every one of them sets "
    "this (SO_REUSEPORT: the kernel spreads new connections over them). Each server keeps "
    "its own models, statistics and registrations: serve the same models from every one.",
)
@click.option(
    "--grpc-infer-allocation-pool-size",
    type=int,
    default=8,
    show_default=True,
    help="Accepted for compatibility.",
)
@click.option(
    "--grpc-max-message-size",
    type=click.IntRange(min=1, max=2**31 - 1),
    default=2**31 - 1,
    show_default=True,
    help="Largest gRPC message received (after decompression) or sent, in bytes; larger "
    "ones get RESOURCE_EXHAUSTED (tritonx only).",
)
@click.option(
    "--grpc-max-decompressed-message-size",
    type=click.IntRange(min=1, max=2**31 - 1),
    default=64 << 20,
    show_default=True,
    help="Largest size a compressed gRPC request message may inflate to, in bytes; a larger "
    "one gets RESOURCE_EXHAUSTED once that much is inflated (tritonx only).",
)
@click.option("--grpc-keepalive-time", type=int, default=7_200_000, show_default=True)
@click.option("--grpc-keepalive-timeout", type=int, default=20_000, show_default=True)
@bool_option("--grpc-keepalive-permit-without-calls", False, "Allow keepalive pings without calls.")
@click.option("--grpc-http2-max-pings-without-data", type=int, default=2, show_default=True)
@click.option(
    "--grpc-http2-min-recv-ping-interval-without-data", type=int, default=300_000, show_default=True
)
@click.option("--grpc-http2-max-ping-strikes", type=int, default=2, show_default=True)
@click.option(
    "--grpc-restricted-protocol",
    multiple=True,
    metavar="<protocol>[,<protocol>...]:<key>=<value>",
    help="RPCs of these protocols must carry the metadata triton-grpc-protocol-<key>: <value>, "
    "else UNAVAILABLE (repeatable; a protocol may be in one group only). Protocols: as "
    "--http-restricted-api.",
)
@click.option(
    "--grpc-header-forward-pattern",
    default="",
    metavar="REGEX",
    help="As --http-header-forward-pattern, for the metadata of ModelInfer and "
    "ModelStreamInfer calls (INVALID_ARGUMENT for a reserved name).",
)
@click.option(
    "--grpc-infer-response-compression-level",
    type=click.Choice(["none", "low", "medium", "high"], case_sensitive=False),
    default="none",
    show_default=True,
    help="Compress ModelInfer / ModelStreamInfer responses (low: gzip; medium, high: "
    "deflate, the algorithms grpc's levels pick for a client accepting both).",
)
@click.option(
    "--grpc-max-connection-age",
    type=click.IntRange(min=0),
    default=0,
    help="Milliseconds a gRPC connection may live before the server ends it (GOAWAY); 0: no limit.",
)
@click.option(
    "--grpc-max-connection-age-grace",
    type=click.IntRange(min=0),
    default=0,
    help="Milliseconds the calls of a connection past its age get to finish before it is "
    "closed; 0: no limit.",
)
@bool_option(
    "--grpc-use-ssl", False, "Serve gRPC over TLS (--grpc-server-cert, --grpc-server-key)."
)
@bool_option(
    "--grpc-use-ssl-mutual",
    False,
    "Serve gRPC over TLS and require client certificates signed by --grpc-root-cert; "
    "implies --grpc-use-ssl.",
)
@click.option(
    "--grpc-server-cert", default="", metavar="FILE", help="PEM server certificate for gRPC TLS."
)
@click.option(
    "--grpc-server-key", default="", metavar="FILE", help="PEM server private key for gRPC TLS."
)
@click.option(
    "--grpc-root-cert",
    default="",
    metavar="FILE",
    help="PEM root certificate(s) that verify gRPC clients.",
)
@bool_option("--allow-metrics", True, "Serve Prometheus metrics.")
@bool_option("--allow-gpu-metrics", True, "Report GPU metrics.")
@bool_option("--allow-cpu-metrics", True, "Report CPU metrics.")
@click.option("--metrics-address", default=None, help="Defaults to --http-address.")
@click.option("--metrics-port", type=int, default=8002, show_default=True)
@click.option("--metrics-interval-ms", type=int, default=2000, show_default=True)
@click.option("--metrics-config", multiple=True, help="<key>=<value> (repeatable).")
@click.option(
    "--metric-sink",
    multiple=True,
    help="<sink>[,<key>=<value>] (repeatable): run this metric sink plugin with these "
    "settings (tritonx only).",
)
@click.option(
    "--rate-limit", type=click.Choice(["off", "execution_count"]), default="off", show_default=True
)
@click.option(
    "--rate-limit-resource", multiple=True, help="<name>:<count>[:<device>] (repeatable)."
)
@click.option(
    "--inline-execution-us",
    type=click.FloatRange(min=0),
    default=100.0,
    show_default=True,
    help="Run a model's batches on the event loop instead of handing them to an idle "
    "instance's thread while its executions average under this many microseconds "
    "(instances that allow it: onnxruntime on the CPU; not with --rate-limit, queue delays, "
    "priorities or queue policies). 0: never (tritonx only).",
)
@bool_option(
    "--allow-client-shm",
    False,
    "Let clients register and unregister system and CUDA shared-memory regions (inputs "
    "and outputs in shared memory).",
)
@click.option(
    "--log-verbose",
    type=IntBool(),
    default=0,
    show_default=True,
    help="Verbose logging level: 0 off, 1 or more adds verbose lines (true = 1, false = 0).",
)
@bool_option("--log-info", True, "Log informational messages.")
@bool_option("--log-warning", True, "Log warnings.")
@bool_option("--log-error", True, "Log errors.")
@click.option(
    "--log-format",
    type=click.Choice(["default", "ISO8601"], case_sensitive=False),
    default="default",
    show_default=True,
)
@click.option("--log-file", default=None, help="Append the log to this file instead of stderr.")
@click.option(
    "--trace-config",
    multiple=True,
    metavar="[<mode>,]<setting>=<value>",
    help="Tracing (repeatable). Global settings: level=OFF|TIMESTAMPS|TENSORS, rate=<n> "
    "(trace 1 request in n; 1000), count=<n> (traces to take; -1: no limit), "
    "mode=triton|opentelemetry. triton,file=<path>: the JSON trace file; "
    "triton,log-frequency=<n>: write every n traces to <file>.<k> (0: at shutdown). "
    "opentelemetry,url=<url>, opentelemetry,resource=<key>=<value> and "
    "opentelemetry,bsp_<setting>=<n> export OTLP/HTTP spans (needs tritonx[otel]).",
)
@click.option("--trace-file", default=None, help="Deprecated: --trace-config triton,file=.")
@click.option(
    "--trace-level", multiple=True, help="Deprecated: --trace-config level= (repeatable)."
)
@click.option("--trace-rate", default=None, help="Deprecated: --trace-config rate=.")
@click.option("--trace-count", default=None, help="Deprecated: --trace-config count=.")
@click.option(
    "--trace-log-frequency",
    default=None,
    help="Deprecated: --trace-config triton,log-frequency=.",
)
@not_implemented_options
def serve(**opts: Any) -> None:
    """Serve models over HTTP (:8000), gRPC (:8001) and metrics (:8002)."""
    from tritonx import logs

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
    strict_model_config_warnings(opts)
    trace = trace_config(opts)
    mode = opts["model_control_mode"].lower()
    if opts["load_model"] and mode != "explicit":
        raise click.UsageError("--load-model requires --model-control-mode=explicit")
    if opts["http_max_input_size"] <= 0:  # tritonserver's check and message
        raise click.UsageError("--http-max-input-size must be greater than 0.")
    cache_config = parse_keyed_config(opts["cache_config"], "--cache-config")
    if opts["response_cache_byte_size"] is not None:  # tritonserver's checks and messages
        if cache_config:
            raise click.UsageError(
                "Incompatible flags --response-cache-byte-size and --cache-config both "
                "provided. Please provide one or the other."  # (click adds "Error: ")
            )
        size = str(opts["response_cache_byte_size"])
        cache_config = {"local": {"size": size}}
        click.echo(
            "Warning: '--response-cache-byte-size' has been deprecated! This will default to "
            "the 'local' cache implementation with the provided byte size for its config. "
            "Please use '--cache-config' instead. The equivalent --cache-config CLI args "
            f"would be: '--cache-config=local,size={size}'",
            err=True,
        )
    repos = tuple(opts["model_repository"])
    exit_on_error = opts["exit_on_error"]
    if not repos:
        repos = (str(EXAMPLE_REPOSITORY),)
        log.info("no --model-repository given: serving the bundled example repository %s", repos[0])
        if not (EXAMPLE_REPOSITORY / "minilm_embed").is_dir():
            log.info(
                "the MiniLM ensemble example (minilm_embed) is not built: see "
                "core/src/tritonx/examples/minilm/README.md (python "
                "plugins/backend_onnx/scripts/make_minilm.py)"
            )
        if exit_on_error is None:
            exit_on_error = False  # models whose backend plugin is not installed stay UNAVAILABLE
    if exit_on_error is None:
        exit_on_error = True
    ports = [
        (opts["allow_http"], opts["http_port"], "HTTP"),
        (opts["allow_grpc"], opts["grpc_port"], "GRPC"),
        (opts["allow_metrics"], opts["metrics_port"], "metrics"),
    ]
    used = [p for allowed, p, _ in ports if allowed and p != 0]
    if len(used) != len(set(used)):
        raise click.UsageError(
            "The server cannot listen to HTTP, GRPC and metrics on the same port"
        )
    restrictions = {
        "http_restricted_api": ("http-restricted-api", "api"),
        "grpc_restricted_protocol": ("grpc-restricted-protocol", "protocol"),
    }
    restricted: dict[str, Any] = {}
    for field_name, (flag, feature_type) in restrictions.items():
        try:
            restricted[field_name] = parse_restricted_option(opts[field_name], flag, feature_type)
        except ValueError as exc:  # tritonserver's "Bad option" message
            raise click.UsageError(f'Bad option: "--{flag}".\n{exc}') from None
    settings = ServerSettings(
        model_repository=repos,
        model_control_mode=mode,
        load_model=tuple(opts["load_model"]),
        repository_poll_secs=opts["repository_poll_secs"] if mode == "poll" else 0.0,
        exit_on_error=exit_on_error,
        strict_readiness=opts["strict_readiness"],
        disable_auto_complete_config=opts["disable_auto_complete_config"]
        or opts["strict_model_config"],
        model_load_thread_count=opts["model_load_thread_count"],
        model_load_retry_count=opts["model_load_retry_count"],
        model_config_name=opts["model_config_name"],
        exit_timeout_secs=opts["exit_timeout_secs"],
        model_unload_timeout_secs=opts["model_unload_timeout_secs"],
        event_loop_watchdog_secs=opts["event_loop_watchdog_secs"],
        id=opts["server_id"],
        backend_config=parse_keyed_config(opts["backend_config"], "--backend-config"),
        cache_config=cache_config,
        allow_http=opts["allow_http"],
        http_address=opts["http_address"],
        http_port=opts["http_port"],
        reuse_http_port=opts["reuse_http_port"],
        http_thread_count=opts["http_thread_count"],
        http_max_input_size=opts["http_max_input_size"],
        http_header_timeout_secs=opts["http_header_timeout_secs"],
        http_body_timeout_secs=opts["http_body_timeout_secs"],
        http_keepalive_timeout_secs=opts["http_keepalive_timeout_secs"],
        http_max_connections=opts["http_max_connections"],
        http_fast_infer=opts["http_fast_infer"],
        http_restricted_api=restricted["http_restricted_api"],
        http_header_forward_pattern=opts["http_header_forward_pattern"],
        http_use_ssl=opts["http_use_ssl"],
        http_use_ssl_mutual=opts["http_use_ssl_mutual"],
        http_server_cert=opts["http_server_cert"],
        http_server_key=opts["http_server_key"],
        http_root_cert=opts["http_root_cert"],
        http_status_page=opts["http_status_page"],
        allow_grpc=opts["allow_grpc"],
        grpc_address=opts["grpc_address"],
        grpc_port=opts["grpc_port"],
        reuse_grpc_port=opts["reuse_grpc_port"],
        grpc_infer_allocation_pool_size=opts["grpc_infer_allocation_pool_size"],
        grpc_max_message_size=opts["grpc_max_message_size"],
        grpc_max_decompressed_message_size=opts["grpc_max_decompressed_message_size"],
        grpc_keepalive_time=opts["grpc_keepalive_time"],
        grpc_keepalive_timeout=opts["grpc_keepalive_timeout"],
        grpc_keepalive_permit_without_calls=opts["grpc_keepalive_permit_without_calls"],
        grpc_http2_max_pings_without_data=opts["grpc_http2_max_pings_without_data"],
        grpc_http2_min_recv_ping_interval_without_data=opts[
            "grpc_http2_min_recv_ping_interval_without_data"
        ],
        grpc_http2_max_ping_strikes=opts["grpc_http2_max_ping_strikes"],
        grpc_restricted_protocol=restricted["grpc_restricted_protocol"],
        grpc_header_forward_pattern=opts["grpc_header_forward_pattern"],
        grpc_infer_response_compression_level=opts["grpc_infer_response_compression_level"].lower(),
        grpc_max_connection_age=opts["grpc_max_connection_age"],
        grpc_max_connection_age_grace=opts["grpc_max_connection_age_grace"],
        grpc_use_ssl=opts["grpc_use_ssl"],
        grpc_use_ssl_mutual=opts["grpc_use_ssl_mutual"],
        grpc_server_cert=opts["grpc_server_cert"],
        grpc_server_key=opts["grpc_server_key"],
        grpc_root_cert=opts["grpc_root_cert"],
        allow_metrics=opts["allow_metrics"],
        allow_gpu_metrics=opts["allow_gpu_metrics"],
        allow_cpu_metrics=opts["allow_cpu_metrics"],
        metrics_address=opts["metrics_address"],
        metrics_port=opts["metrics_port"],
        metrics_interval_ms=opts["metrics_interval_ms"],
        metrics_config=parse_keyed_config(opts["metrics_config"], "--metrics-config").get("", {}),
        metric_sinks=parse_sinks(opts["metric_sink"]),
        rate_limit=opts["rate_limit"],
        inline_execution_us=opts["inline_execution_us"],
        rate_limit_resource=tuple(opts["rate_limit_resource"]),
        allow_client_shm=opts["allow_client_shm"],
        trace_level=trace_level_names(trace.level),
        trace_rate=trace.rate,
        trace_count=trace.count,
        trace_log_frequency=trace.log_frequency,
        trace_file=trace.file,
        trace_mode=trace.mode,
        trace_opentelemetry=trace.options,
    )
    check_tls(settings)
    _tune_malloc()
    sys.exit(run_server(settings))


def trace_config(opts: dict[str, Any]) -> TraceConfig:
    """The tracing configuration of ``--trace-config`` and the deprecated ``--trace-*`` flags
    (their warnings printed as tritonserver prints them).

    :raises click.UsageError: with tritonserver's "Bad option" message, or when
        ``opentelemetry`` mode lacks its packages.
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
    if config.mode == "opentelemetry":
        missing = otel_missing()
        if missing is not None:
            raise click.UsageError(missing)
    return config


def trace_level_names(level: int) -> tuple[str, ...]:
    """``ServerSettings.trace_level`` for level bits (() when OFF)."""
    names = level_names(level)
    return () if names == ["OFF"] else tuple(names)


def check_tls(settings: ServerSettings) -> None:
    """Read and check the TLS files of the enabled listeners before any model loads.

    :raises click.UsageError: naming the flag whose file is missing or not valid PEM.
    """
    for enabled, prefix in ((settings.allow_http, "http"), (settings.allow_grpc, "grpc")):
        if not enabled:
            continue
        try:
            load_tls_files(
                prefix,
                use_ssl=getattr(settings, f"{prefix}_use_ssl"),
                mutual=getattr(settings, f"{prefix}_use_ssl_mutual"),
                server_cert=getattr(settings, f"{prefix}_server_cert"),
                server_key=getattr(settings, f"{prefix}_server_key"),
                root_cert=getattr(settings, f"{prefix}_root_cert"),
            )
        except TritonXError as exc:
            raise click.UsageError(exc.message) from None


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
    from tritonx.plugins import collect, describe_plugins, make_plugin_manager

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
    from tritonx.plugins import collect, make_plugin_manager
    from tritonx.server import format_table

    settings = ServerSettings(
        model_repository=tuple(repositories) or (str(EXAMPLE_REPOSITORY),),
        disable_auto_complete_config=disable_auto_complete_config,
        backend_config=parse_keyed_config(backend_config, "--backend-config"),
        model_config_name=model_config_name,
    )
    try:
        manager = ModelManager(settings, collect(make_plugin_manager()))
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
        header = (
            "Model", "Versions", "Status", "Backend", "Max batch", "Inputs", "Outputs",
            "Instances",
        )  # fmt: skip
        click.echo(format_table(header, rows), nl=False)
    if any(not r.ok for r in results):
        sys.exit(1)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``tritonx`` script; plugins may add subcommands first."""
    try:
        from tritonx.plugins import make_plugin_manager

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
