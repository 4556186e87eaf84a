"""Trace settings: what ``--trace-config`` and the trace extension (``/v2[/models/<m>]/trace/
setting``, gRPC ``TraceSetting``) read and change, with tritonserver's rules and messages
(server ``src/command_line_parser.cc``, ``src/tracer.cc``, ``src/http_server.cc``
``HandleTrace``, ``src/grpc/grpc_server.cc``).

A setting holds a level (``TIMESTAMPS`` and/or ``TENSORS`` bits, 0 = ``OFF``), a sampling rate,
a count of traces still to take (-1: no limit), a log frequency, the trace file and the mode
(``triton`` or ``opentelemetry``). The global setting starts from the command line; a model's
setting copies whatever it does not specify from the global one and follows later global
updates for those fields.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tritonx.errors import Code, TritonXError, invalid_arg

#: Trace level bits (``TRITONSERVER_InferenceTraceLevel``); 0 is OFF.
TIMESTAMPS = 0x4
TENSORS = 0x8

TRITON = "triton"
OPENTELEMETRY = "opentelemetry"
MODES = (TRITON, OPENTELEMETRY)

#: tritonserver's ``TraceManager::MIN_TRACE_COUNT_VALUE``.
MIN_TRACE_COUNT = -1
UINT32_MAX = 2**32 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

#: Settings of ``--trace-config <setting>=<value>`` (no mode: global ones).
GLOBAL_KEYS = ("level", "rate", "count", "mode")
#: Settings of ``--trace-config triton,<setting>=<value>``.
TRITON_KEYS = ("file", "log-frequency")
#: Settings of ``--trace-config opentelemetry,<setting>=<value>``.
OPENTELEMETRY_KEYS = (
    "url",
    "resource",
    "bsp_max_queue_size",
    "bsp_schedule_delay",
    "bsp_max_export_batch_size",
)
#: The batch span processor's defaults and the environment variables that override them
#: (tritonserver ``ProcessOpenTelemetryBatchSpanProcessorArgs``).
BSP_DEFAULTS = (
    ("bsp_max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE", "2048"),
    ("bsp_schedule_delay", "OTEL_BSP_SCHEDULE_DELAY", "5000"),
    ("bsp_max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
)


def level_names(level: int) -> list[str]:
    """The ``trace_level`` array the trace extension returns: ``["OFF"]`` or the set bits."""
    if not level:
        return ["OFF"]
    names = []
    if level & TIMESTAMPS:
        names.append("TIMESTAMPS")
    if level & TENSORS:
        names.append("TENSORS")
    return names


def stoi(text: str) -> int:
    """C++ ``std::stoi``: leading blanks, a sign, then digits (anything after them is
    ignored). Raises ValueError (``invalid_argument``) or OverflowError (``out_of_range``)."""
    i, n = 0, len(text)
    while i < n and text[i] in " \t\n\v\f\r":
        i += 1
    start = i
    if i < n and text[i] in "+-":
        i += 1
    digits = i
    while i < n and text[i].isdigit() and text[i].isascii():
        i += 1
    if i == digits:
        raise ValueError(text)
    value = int(text[start:i])
    if not INT32_MIN <= value <= INT32_MAX:
        raise OverflowError(text)
    return value


# ---------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class TraceConfig:
    """The start-up trace configuration (``--trace-config`` and the deprecated flags).

    :param level: level bits (:data:`TIMESTAMPS`, :data:`TENSORS`; 0 = OFF).
    :param rate: sample one request in ``rate`` (0: only requests carrying an OpenTelemetry
        context, in that mode).
    :param count: traces still to take; -1: no limit.
    :param log_frequency: write the collected traces to ``<file>.<n>`` every that many
        traces; 0: to ``<file>`` at shutdown.
    :param file: the trace file (``triton`` mode).
    :param mode: ``triton`` or ``opentelemetry``.
    :param options: the mode's own settings as ``(key, value)`` pairs in the order given
        (``opentelemetry``: url, resource, bsp_*).
    """

    level: int = 0
    rate: int = 1000
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    mode: str = TRITON
    options: tuple[tuple[str, str], ...] = ()


def config_from_settings(settings: Any) -> TraceConfig:
    """The :class:`TraceConfig` of a ``ServerSettings`` (its ``trace_*`` fields).

    :raises TritonXError: INVALID_ARG for a level name other than TIMESTAMPS / TENSORS / OFF.
    """
    level = 0
    for name in settings.trace_level:
        upper = str(name).upper()
        if upper == "OFF":
            level = 0
            break
        if upper not in ("TIMESTAMPS", "TENSORS"):
            raise invalid_arg(f"invalid value for trace level option: {name}")
        level |= TIMESTAMPS if upper == "TIMESTAMPS" else TENSORS
    return TraceConfig(
        level=level,
        rate=settings.trace_rate,
        count=settings.trace_count,
        log_frequency=settings.trace_log_frequency,
        file=settings.trace_file,
        mode=settings.trace_mode,
        options=tuple(settings.trace_opentelemetry),
    )


@dataclass
class NewSetting:
    """A trace-extension update (tritonserver ``TraceManager::NewSetting``): a field left
    None is unchanged, a ``clear_*`` flag drops a model's own value (back to the global one)."""

    level: int | None = None
    rate: int | None = None
    count: int | None = None
    log_frequency: int | None = None
    clear_level: bool = False
    clear_rate: bool = False
    clear_count: bool = False
    clear_log_frequency: bool = False

    @property
    def empty(self) -> bool:
        return (
            self.level is None
            and self.rate is None
            and self.count is None
            and self.log_frequency is None
            and not (
                self.clear_level or self.clear_rate or self.clear_count or self.clear_log_frequency
            )
        )


def parse_levels(values: Iterable[str], setting: NewSetting) -> None:
    """The ``trace_level`` values of an update: ``OFF`` alone, or TIMESTAMPS and/or TENSORS
    (other strings are ignored, as tritonserver does)."""
    values = list(values)
    level = 0
    for text in values:
        if text == "OFF":
            if len(values) != 1:
                raise invalid_arg("Expect only one trace level 'OFF' is specified")
            setting.level = 0
        elif text == "TIMESTAMPS":
            level |= TIMESTAMPS
            setting.level = level
        elif text == "TENSORS":
            level |= TENSORS
            setting.level = level


def parse_uint(name: str, text: str) -> int:
    """``trace_rate`` / ``log_frequency`` of an update (``std::stoi``, tritonserver's
    messages).

    Unlike tritonserver, which stores a negative value wrapped into a uint32 (``-1`` becomes
    4294967295: a ``log_frequency`` of -1 would hold every trace in memory until four billion
    were collected), a negative value is refused with tritonserver's out-of-range message.
    """
    out_of_range = invalid_arg(
        f"Unable to parse '{name}', value is out of range [ 0, {UINT32_MAX} ], got: {text}"
    )
    try:
        value = stoi(text)
    except ValueError:
        raise invalid_arg(f"Unable to parse '{name}', got: {text}") from None
    except OverflowError:
        raise out_of_range from None
    if value < 0:
        raise out_of_range
    return value


#: The settings a trace-extension update may change (``trace_file`` is refused with
#: tritonserver's own message by the transports).
UPDATABLE_KEYS = ("trace_level", "trace_rate", "trace_count", "log_frequency")


def check_update_keys(keys: Iterable[str]) -> None:
    """Refuse an update naming a setting the trace extension cannot change.

    tritonserver ignores such keys silently, so a client setting ``trace_mode`` or
    ``opentelemetry_url`` believes it did. ``trace_mode`` and the mode's own settings (those
    a GET returns: ``url``, ``resource``, ``bsp_*``) are refused as tritonserver refuses
    ``trace_file``; any other name as unknown. Call it after the ``trace_file`` check.

    :raises TritonXError: UNSUPPORTED "trace mode can not be updated through network
        protocol" / "trace setting '<key>' can not be updated through network protocol", or
        INVALID_ARG "unknown trace setting '<key>' ...".
    """
    for key in keys:
        if key in UPDATABLE_KEYS:
            continue
        if key == "trace_mode":
            raise TritonXError(
                "trace mode can not be updated through network protocol", Code.UNSUPPORTED
            )
        if key in OPENTELEMETRY_KEYS or key == "trace_file":
            raise TritonXError(
                f"trace setting '{key}' can not be updated through network protocol",
                Code.UNSUPPORTED,
            )
        raise invalid_arg(
            f"unknown trace setting '{key}' (the trace extension updates "
            f"{', '.join(UPDATABLE_KEYS)})"
        )


def parse_count(text: str, grpc: bool = False) -> int:
    """``trace_count`` of an update: an int32 of at least -1."""
    try:
        count = stoi(text)
    except ValueError:
        raise invalid_arg(f"Unable to parse 'trace_count', got: {text}") from None
    except OverflowError:
        raise invalid_arg(
            f"Unable to parse 'trace_count', value is out of range [ {MIN_TRACE_COUNT}, "
            f"{INT32_MAX} ], got: {text}"
        ) from None
    if count < MIN_TRACE_COUNT:
        sep = " " if grpc else ""
        raise invalid_arg(
            f"Unable to parse 'trace_count'. Expecting value >= {MIN_TRACE_COUNT}, got:{sep}{text}"
        )
    return count


# ---------------------------------------------------------------------------------- CLI


class TraceConfigError(ValueError):
    """A ``--trace-config`` (or deprecated ``--trace-*``) value tritonx refuses."""


def _cli_int(text: str, low: int = INT32_MIN, high: int = INT32_MAX) -> int:
    try:
        value = stoi(text)
    except ValueError:
        raise TraceConfigError(f"Invalid option value. Got {text}") from None
    except OverflowError:
        raise TraceConfigError(f"Provided option value is out of bound. Got {text}") from None
    if not low <= value <= high:
        raise TraceConfigError(f"Provided option value is out of bound. Got {text}")
    return value


def _cli_uint32(text: str) -> int:
    stripped = text.strip()
    if not stripped or not stripped.isdigit() or not stripped.isascii():
        raise TraceConfigError(f"Invalid option value. Got {text}")
    value = int(stripped)
    if value > UINT32_MAX:
        raise TraceConfigError(f"Provided option value is out of bound. Got {text}")
    return value


def parse_level_option(text: str) -> int:
    """tritonserver's ``ParseTraceLevelOption`` (case-insensitive)."""
    arg = text.lower()
    if arg in ("false", "off"):
        return 0
    if arg in ("true", "on", "min", "max", "timestamps"):
        return TIMESTAMPS
    if arg == "tensors":
        return TENSORS
    raise TraceConfigError(f"invalid value for trace level option: {arg}")


def parse_mode_option(text: str) -> str:
    """tritonserver's ``ParseTraceModeOption`` (case-insensitive)."""
    arg = text.lower()
    if arg in MODES:
        return arg
    raise TraceConfigError(
        f'invalid value for trace mode option: {arg}. Available options are "triton" and '
        '"opentelemetry"'
    )


def split_trace_config(arg: str) -> tuple[str, str, str]:
    """``[<mode>,]<setting>=<value>`` → (mode or "" for global, setting, value), with
    tritonserver's ``ParseTraceConfigOption`` messages."""
    comma = arg.find(",")
    mode = ""
    if comma > 0:
        mode = parse_mode_option(arg[:comma])
    elif comma == 0:
        raise TraceConfigError(
            "No trace mode specified. --trace-config option format is "
            f"<trace mode>,<setting>=<value> or <setting>=<value>. Got {arg}"
        )
    equals = arg.find("=", comma + 1)
    if equals < 0:
        raise TraceConfigError(
            f"--trace-config option format is '<trace mode>,<setting>=<value>'. Got {arg}"
        )
    setting, value = arg[comma + 1 : equals], arg[equals + 1 :]
    if not setting or not value:
        raise TraceConfigError(
            f"--trace-config option format is '<trace mode>,<setting>=<value>'. Got {arg}"
        )
    return mode, setting, value


@dataclass
class DeprecatedTraceFlags:
    """The deprecated ``--trace-file/--trace-level/--trace-rate/--trace-count/
    --trace-log-frequency`` values (None or empty: not given)."""

    file: str | None = None
    level: Sequence[str] = ()
    rate: str | None = None
    count: str | None = None
    log_frequency: str | None = None
    #: warnings to print (tritonserver prints them on stderr)
    warnings: list[str] = field(default_factory=list)


@dataclass
class _TraceArgs:
    """What tritonserver's ``PostProcessTraceArgs`` accumulates while it reads the flags."""

    old: DeprecatedTraceFlags
    config: TraceConfig = field(default_factory=TraceConfig)
    #: a level of OFF was given: tracing is off whatever else was
    explicit_off: bool = False
    warnings: list[str] = field(default_factory=list)

    def set(self, **changes: Any) -> None:
        self.config = replace(self.config, **changes)

    def add_level(self, text: str) -> None:
        parsed = parse_level_option(text)
        self.explicit_off |= parsed == 0
        self.set(level=self.config.level | parsed)

    def deprecated(self, flag: str, replacement: str) -> None:
        self.warnings.append(
            f"Warning: '--{flag}' has been deprecated and will be removed in future "
            f"releases. Please use '--trace-config {replacement} instead."
        )

    def overriding(self, given: object, flag: str, what: str) -> None:
        """The deprecated ``--<flag>`` (``given``, None or empty: not given) gives way."""
        if given:
            self.warnings.append(
                f"Warning: Overriding deprecated '--{flag}' in favor of provided {what} in "
                "--trace-config!"
            )


def build_trace_config(
    values: Sequence[str], deprecated: DeprecatedTraceFlags | None = None
) -> tuple[TraceConfig, list[str]]:
    """The :class:`TraceConfig` of ``--trace-config`` values plus the deprecated flags,
    following tritonserver's ``PostProcessTraceArgs``; returns it with the warnings to show.

    Unlike tritonserver, a setting name it does not know is refused rather than ignored.

    :raises TraceConfigError: with tritonserver's message (``Bad option: ...``).
    """
    args = _TraceArgs(deprecated or DeprecatedTraceFlags())
    _read_deprecated(args)
    groups = _group_trace_config(values)
    for setting, value in groups[""]:
        with _bad_option(f"--trace-config {setting}"):
            _read_global(args, setting, value)
    if args.config.mode == OPENTELEMETRY:
        _read_opentelemetry(args, groups)
    else:
        _read_triton(args, groups)
    if args.explicit_off:
        args.set(level=0)
    return args.config, args.warnings


@contextlib.contextmanager
def _bad_option(option: str) -> Iterator[None]:
    """A :class:`TraceConfigError` inside becomes tritonserver's ``Bad option`` for
    ``option``."""
    try:
        yield
    except TraceConfigError as exc:
        raise TraceConfigError(f'Bad option: "{option}".\n{exc}') from None


def _read_deprecated(args: _TraceArgs) -> None:
    """``--trace-file``, ``--trace-level``, ``--trace-rate``, ``--trace-count`` and
    ``--trace-log-frequency``, each with its deprecation warning."""
    old = args.old
    if old.file is not None:
        args.deprecated("trace-file", "triton,file=<filepath>")
        args.set(file=old.file)
    for text in old.level:
        args.deprecated("trace-level", "level=<OFF|TIMESTAMPS|TENSORS>")
        with _bad_option("--trace-level"):
            args.add_level(text)
    for flag, given, name, lowest, replacement in (
        ("trace-rate", old.rate, "rate", 0, "rate=<rate value>"),
        ("trace-count", old.count, "count", MIN_TRACE_COUNT, "count=<count value>"),
        (
            "trace-log-frequency",
            old.log_frequency,
            "log_frequency",
            0,
            "triton,log-frequency=<log frequency value>",
        ),
    ):
        if given is None:
            continue
        args.deprecated(flag, replacement)
        with _bad_option(f"--{flag}"):
            args.set(**{name: _cli_int(given, lowest)})


def _group_trace_config(values: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    """The ``--trace-config`` values by mode ("" for the global settings), each setting
    checked against the mode's known names."""
    groups: dict[str, list[tuple[str, str]]] = {"": [], TRITON: [], OPENTELEMETRY: []}
    known = {"": GLOBAL_KEYS, TRITON: TRITON_KEYS, OPENTELEMETRY: OPENTELEMETRY_KEYS}
    for arg in values:
        with _bad_option("--trace-config"):
            group, setting, value = split_trace_config(arg)
        if setting not in known[group]:
            where = f"{group} " if group else "global "
            raise TraceConfigError(
                f'Bad option: "--trace-config {arg}".\nunknown {where}trace setting '
                f"'{setting}' (known: {', '.join(known[group])})"
            )
        groups[group].append((setting, value))
    return groups


def _read_global(args: _TraceArgs, setting: str, value: str) -> None:
    """One global ``--trace-config <setting>=<value>``."""
    old = args.old
    if setting == "rate":
        args.overriding(old.rate is not None, "trace-rate", "rate value")
        args.set(rate=_cli_int(value, 0))
    elif setting == "level":
        args.overriding(old.level, "trace-level", "level")
        args.add_level(value)
    elif setting == "mode":
        args.set(mode=parse_mode_option(value))
    elif setting == "count":
        args.overriding(old.count is not None, "trace-count", "count")
        args.set(count=_cli_int(value, MIN_TRACE_COUNT))


def _read_opentelemetry(args: _TraceArgs, groups: dict[str, list[tuple[str, str]]]) -> None:
    """``opentelemetry`` mode: its settings (the batch span processor's from the environment
    unless given); the ``triton`` ones and the deprecated file flags are ignored."""
    old = args.old
    if old.file is not None:
        args.warnings.append(
            "Warning: '--trace-file' is deprecated and will be ignored with opentelemetry "
            "tracing mode. "
        )
    if old.log_frequency is not None:
        args.warnings.append(
            "Warning: '--trace-log-frequency' is deprecated and will be ignored with "
            "opentelemetry tracing mode."
        )
    for setting, _ in groups[TRITON]:
        args.warnings.append(
            f"Warning: '--trace-config triton,{setting}' is ignored in opentelemetry tracing mode."
        )
    options: list[tuple[str, str]] = []
    for setting, value in groups[OPENTELEMETRY]:
        if setting.startswith("bsp_"):
            with _bad_option(f"--trace-config opentelemetry,{setting}"):
                value = str(_cli_uint32(value))
        elif setting == "resource" and "=" not in value:
            raise TraceConfigError(
                f'Bad option: "--trace-config opentelemetry,resource".\nexpected '
                f"resource=<key>=<value>, got {value}"
            )
        options.append((setting, value))
    given = {setting for setting, _ in options}
    for setting, env, default in BSP_DEFAULTS:
        if setting not in given:
            with _bad_option(env):
                options.append((setting, str(_cli_uint32(os.environ.get(env, default)))))
    args.set(options=tuple(options))


def _read_triton(args: _TraceArgs, groups: dict[str, list[tuple[str, str]]]) -> None:
    """``triton`` mode: its ``file`` and ``log-frequency``; the ``opentelemetry`` settings
    are ignored."""
    old = args.old
    for setting, _ in groups[OPENTELEMETRY]:
        args.warnings.append(
            f"Warning: '--trace-config opentelemetry,{setting}' is ignored in triton tracing mode."
        )
    for setting, value in groups[TRITON]:
        with _bad_option(f"--trace-config triton,{setting}"):
            if setting == "file":
                args.overriding(old.file is not None, "trace-file", "file")
                args.set(file=value)
            else:
                args.overriding(old.log_frequency is not None, "trace-log-frequency", setting)
                args.set(log_frequency=_cli_int(value, 0))


#: :class:`TraceConfig` fields a ``ServerSettings`` holds as ``trace_<name>``
SETTINGS_FIELDS = ("rate", "count", "log_frequency", "file", "mode")


def settings_fields(config: TraceConfig) -> dict[str, Any]:
    """The ``trace_*`` fields of a ``ServerSettings`` for ``config`` (the inverse of
    :func:`config_from_settings`)."""
    names = level_names(config.level)
    fields = {f"trace_{name}": getattr(config, name) for name in SETTINGS_FIELDS}
    fields["trace_level"] = () if names == ["OFF"] else tuple(names)
    fields["trace_opentelemetry"] = config.options
    return fields


def check_trace_config(config: TraceConfig) -> None:
    """Validate a :class:`TraceConfig` given in-process (the CLI builds valid ones).

    :raises TritonXError: INVALID_ARG naming the field.
    """
    if config.level & ~(TIMESTAMPS | TENSORS):
        raise invalid_arg(f"trace level bits {config.level:#x} are not TIMESTAMPS/TENSORS")
    if config.mode not in MODES:
        raise invalid_arg(
            f'invalid value for trace mode option: {config.mode}. Available options are "triton"'
            ' and "opentelemetry"'
        )
    if not 0 <= config.rate <= UINT32_MAX:
        raise invalid_arg(f"trace rate {config.rate} is out of range [ 0, {UINT32_MAX} ]")
    if not MIN_TRACE_COUNT <= config.count <= INT32_MAX:
        raise invalid_arg(f"trace count {config.count} is out of range [ -1, {INT32_MAX} ]")
    if not 0 <= config.log_frequency <= UINT32_MAX:
        raise invalid_arg(f"trace log frequency {config.log_frequency} is out of range")
    for key, _ in config.options:
        if key not in OPENTELEMETRY_KEYS:
            raise invalid_arg(
                f"unknown opentelemetry trace setting '{key}' (known: "
                f"{', '.join(OPENTELEMETRY_KEYS)})"
            )


def otel_missing() -> str | None:
    """Why ``opentelemetry`` mode cannot run here (a missing package), or None."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        return (
            "--trace-config mode=opentelemetry needs the opentelemetry-sdk and "
            "opentelemetry-exporter-otlp-proto-http packages (pip install 'tritonx[otel]'): "
            f"{exc}"
        )
    return None


def unsupported_in_mode(message: str) -> TritonXError:
    """An UNSUPPORTED error (used for settings a mode cannot honour)."""
    return TritonXError(message, Code.UNSUPPORTED)


def warn(lines: Iterable[str]) -> None:
    """Print tritonserver's parser warnings on stderr."""
    for line in lines:
        print(line, file=sys.stderr)
