"""The one validation step of :class:`~tritonx.config.ServerSettings`.

:meth:`tritonx.Server.start` runs :func:`validate_settings` before anything starts, for the
settings ``tritonx serve`` parsed from its flags and for those given in-process alike: a
check the CLI made alone (``--load-model`` without explicit mode, two listeners on one port)
refuses in-process settings with the CLI's message, and a value the CLI's option types never
let through (a negative timeout, an unknown mode) is refused with a message naming its flag.
What needs the installed plugins (the
``--backend-config`` keys a backend reads, the ``--cache-config`` and ``--metric-sink``
names, a repository URL's scheme) is checked where the plugins are collected.

Each refusal is a :class:`SettingsError` (INVALID_ARG). Those tritonserver makes while
parsing its command line carry ``usage=True``: ``tritonx serve`` reports them as usage errors
(exit status 2, before any model loads), the others as ``error: creating server: ...``
(exit status 1), as it always did.
"""

from __future__ import annotations

from collections.abc import Callable

from tritonx._core.memory_accounting import memory_measurable
from tritonx._core.metrics import MetricsOptions
from tritonx._core.model_config import check_config_name
from tritonx._core.rate_limiter import RateLimiter
from tritonx._core.reloader import watched_folder, watchfiles_missing
from tritonx._dataplane.header_forward import HeaderForward
from tritonx._dataplane.trace_settings import (
    OPENTELEMETRY,
    check_trace_config,
    config_from_settings,
    otel_missing,
)
from tritonx._runtime.security import check_restrictions, listener_tls_files
from tritonx.config import ServerSettings
from tritonx.errors import Code, TritonXError

__all__ = ["SettingsError", "validate_settings"]

#: Settings with a lowest value (the CLI's click ranges), by that value; a setting's flag is
#: its name with dashes (``--model-load-thread-count``).
AT_LEAST: dict[int, tuple[str, ...]] = {
    1: (
        "model_load_thread_count",
        "grpc_max_message_size",
        "grpc_max_decompressed_message_size",
        "grpc_max_concurrent_streams",
        "grpc_max_header_list_size",
        "grpc_header_timeout_secs",
        "grpc_send_timeout_secs",
        "grpc_max_stream_in_flight",
        "grpc_max_buffered_request_bytes",
    ),
    0: (
        "model_load_retry_count",
        "model_unload_timeout_secs",
        "event_loop_watchdog_secs",
        "http_header_timeout_secs",
        "http_body_timeout_secs",
        "http_keepalive_timeout_secs",
        "http_max_connections",
        "grpc_max_connection_age",
        "grpc_max_connection_age_grace",
        "grpc_max_send_buffer",
        "grpc_max_send_buffer_total",
        "grpc_max_connections",
        "grpc_max_reset_rate",
        "inline_execution_us",
        "model_load_on_demand_timeout_secs",
        "max_loaded_models",
        "model_memory_budget",
        "model_idle_unload_secs",
        "model_min_residency_secs",
        "unknown_model_rescan_secs",
    ),
}
#: Settings with a highest value (the CLI's click ranges), by that value.
AT_MOST: dict[int, tuple[str, ...]] = {
    2**31 - 1: (
        "grpc_max_message_size",
        "grpc_max_decompressed_message_size",
        "grpc_max_concurrent_streams",
        "grpc_max_header_list_size",
    ),
}
#: Settings in milliseconds (their messages say so).
MILLISECONDS = ("grpc_max_connection_age", "grpc_max_connection_age_grace")

#: Settings with a fixed set of values (the CLI's click choices).
ONE_OF: dict[str, tuple[str, ...]] = {
    "model_control_mode": ("none", "poll", "explicit"),
    "rate_limit": ("off", "execution_count"),
    "grpc_engine": ("loop", "aio"),
}


class SettingsError(TritonXError):
    """A :class:`~tritonx.config.ServerSettings` value the server refuses (INVALID_ARG).

    :param usage: tritonserver refuses it while parsing its command line: ``tritonx serve``
        reports it as a usage error (exit status 2).
    """

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message, Code.INVALID_ARG)
        self.usage = usage


def validate_settings(settings: ServerSettings) -> ServerSettings:
    """Check ``settings`` as a whole; returns them unchanged.

    :raises SettingsError: the first value refused, with the message the CLI gives for it.
    """
    for check in CHECKS:
        try:
            check(settings)
        except SettingsError:
            raise
        except TritonXError as exc:  # a parser's own refusal, as the server would meet it
            raise SettingsError(exc.message) from None
    return settings


# ---------------------------------------------------------------------------------- checks


def _usage(message: str) -> SettingsError:
    return SettingsError(message, usage=True)


def _flag(name: str) -> str:
    """The flag of settings field ``name``: ``--`` and the name with dashes."""
    return "--" + name.replace("_", "-")


def check_trace(settings: ServerSettings) -> None:
    """The ``trace_*`` fields (``--trace-config``); opentelemetry mode needs its packages."""
    check_trace_config(config_from_settings(settings))
    if settings.trace_mode == OPENTELEMETRY:
        missing = otel_missing()
        if missing is not None:
            raise _usage(missing)


def check_model_control(settings: ServerSettings) -> None:
    """``--load-model`` needs explicit mode; ``--model-config-name`` is a file name."""
    if settings.model_namespacing and (settings.model_load_on_demand or settings.reload):
        raise _usage(
            "--model-namespacing is not implemented with --model-load-on-demand or --reload"
        )
    if settings.load_model and settings.model_control_mode != "explicit":
        raise _usage("--load-model requires --model-control-mode=explicit")
    check_config_name(settings.model_config_name)


def check_reload(settings: ServerSettings) -> None:
    """``--reload`` watches folders: local repositories only, and watchfiles installed."""
    if not settings.reload:
        return
    for url in settings.model_repository:
        if watched_folder(url) is None:
            raise _usage(
                f"--reload watches local model repositories only, not '{url}' (a cloud "
                "repository can be polled: --model-control-mode=poll)"
            )
    missing = watchfiles_missing()
    if missing is not None:
        raise _usage(missing)


def check_residency(settings: ServerSettings) -> None:
    """``--model-load-on-demand`` needs explicit or poll mode; the budgets and the idle
    unload need it (an unloaded model must load again on its next request); the pinned
    models must fit ``--max-loaded-models``; a memory budget needs ``/proc``."""
    if settings.model_load_on_demand and settings.model_control_mode == "none":
        raise _usage("--model-load-on-demand requires --model-control-mode=explicit or poll")
    if not settings.model_load_on_demand:
        for name in ("max_loaded_models", "model_memory_budget", "model_idle_unload_secs"):
            if getattr(settings, name):
                raise _usage(
                    f"{_flag(name)} requires --model-load-on-demand=true (a model it unloads "
                    "loads again on its next request)"
                )
        return
    limit = settings.max_loaded_models
    pinned = set(settings.load_model) - {"*"}
    if limit and len(pinned) > limit:
        raise _usage(
            f"--max-loaded-models {limit} cannot hold the {len(pinned)} models listed with "
            "--load-model (they are never unloaded)"
        )
    if settings.model_memory_budget and not memory_measurable():
        raise _usage("--model-memory-budget needs /proc to measure memory (Linux)")


def check_ranges(settings: ServerSettings) -> None:
    """:data:`AT_LEAST` and :data:`ONE_OF`, and tritonserver's ``--http-max-input-size``."""
    if settings.http_max_input_size <= 0:  # tritonserver's check and message
        raise _usage("--http-max-input-size must be greater than 0.")
    for lowest, names in AT_LEAST.items():
        for name in names:
            value = getattr(settings, name)
            if not value >= lowest:  # NaN included
                unit = " milliseconds" if name in MILLISECONDS else ""
                raise SettingsError(f"{_flag(name)} must be {lowest} or more{unit}, got {value}")
    for highest, names in AT_MOST.items():
        for name in names:
            value = getattr(settings, name)
            if value > highest:
                raise SettingsError(f"{_flag(name)} must be {highest} or less, got {value}")
    for name, values in ONE_OF.items():
        value = getattr(settings, name)
        if value not in values:
            raise SettingsError(f"{_flag(name)} must be {', '.join(values)}, got '{value}'")
    level = settings.grpc_infer_response_compression_level
    if level.lower() not in ("none", "low", "medium", "high"):
        raise SettingsError(
            f"invalid argument for --grpc-infer-response-compression-level: '{level}' "
            "(none, low, medium or high)"
        )


#: How tritonserver's port checks name the listeners of the frontends it has built in
_FRONTEND_LISTENERS = {"sagemaker": "SageMaker", "vertex_ai": "Vertex AI"}


def listener_ports(settings: ServerSettings) -> list[tuple[str, str, int]]:
    """(name, address, port) of each listener the start opens on a given port (not 0), in
    tritonserver's order: HTTP, GRPC, metrics, then each frontend ``--frontend-config``
    starts with a ``port=`` (SageMaker and Vertex AI named as tritonserver names them)."""
    out = [
        (name, address, port)
        for allowed, name, address, port in (
            (settings.allow_http, "HTTP", settings.http_address, settings.http_port),
            (settings.allow_grpc, "GRPC", settings.grpc_address, settings.grpc_port),
            (
                settings.allow_metrics,
                "metrics",
                settings.metrics_address or settings.http_address,
                settings.metrics_port,
            ),
        )
        if allowed
    ]
    for name, config in sorted(settings.frontend_config.items()):
        if config.get("allow", "true").strip().lower() in ("false", "0", "off", "no"):
            continue
        port_text = config.get("port", "")
        if port_text.isascii() and port_text.isdigit() and len(port_text) <= 5:
            address = config.get("address", settings.http_address)
            out.append((_FRONTEND_LISTENERS.get(name, name), address, int(port_text)))
    return [listener for listener in out if listener[2] != 0]


def check_port_collision(settings: ServerSettings) -> None:
    """tritonserver's ``CheckPortCollision``: no two listeners on one address and port."""
    listeners = listener_ports(settings)
    for i, (name, address, port) in enumerate(listeners):
        for other, other_address, other_port in listeners[i + 1 :]:
            if address == other_address and port == other_port:
                raise _usage(
                    f"The server cannot listen to {name} requests and {other} requests at "
                    f"the same address and port {address}:{port}"
                )


def check_safe_port_range(settings: ServerSettings, allowed: tuple[int, int]) -> None:
    """``--sagemaker-safe-port-range``: every other listener on the SageMaker listener's
    address uses a port in ``allowed`` (tritonserver's ``CheckPortCollision``)."""
    listeners = listener_ports(settings)
    sagemaker = [item for item in listeners if item[0] == "SageMaker"]
    if not sagemaker:
        return
    _, address, _ = sagemaker[0]
    low, high = allowed
    for name, other_address, port in listeners:
        if name != "SageMaker" and other_address == address and not low <= port <= high:
            raise _usage(
                f"The server cannot listen to {name} requests at port {port}, allowed port "
                f"range is [{low}, {high}]"
            )


def check_listeners(settings: ServerSettings) -> None:
    """The enabled listeners: distinct ports, restrictions, header patterns, TLS files."""
    check_port_collision(settings)
    restricted = {"http": "http_restricted_api", "grpc": "grpc_restricted_protocol"}
    for prefix in ("http", "grpc"):
        if not getattr(settings, f"allow_{prefix}"):
            continue  # a listener that does not start reads none of its settings
        try:
            listener_tls_files(settings, prefix)
        except TritonXError as exc:
            raise _usage(exc.message) from None
        check_restrictions(getattr(settings, restricted[prefix]), restricted[prefix])
        pattern = getattr(settings, f"{prefix}_header_forward_pattern")
        HeaderForward.of(pattern, f"--{prefix}-header-forward-pattern")


def check_parsed(settings: ServerSettings) -> None:
    """The settings the core parses: ``--metrics-config``, ``--rate-limit-resource``."""
    MetricsOptions.from_config(settings.metrics_config)
    RateLimiter.from_settings(settings.rate_limit, settings.rate_limit_resource)


#: The checks, in the order the CLI made them.
CHECKS: tuple[Callable[[ServerSettings], None], ...] = (
    check_trace,
    check_model_control,
    check_reload,
    check_ranges,
    check_residency,
    check_listeners,
    check_parsed,
)
