"""The server's log: tritonserver's line formats and its logging settings, changeable while the
server runs (the logging extension: ``/v2/logging``, gRPC ``LogSettings``).

Line formats (common ``src/logging.cc``)::

    default   I1130 04:33:59.123456 1234 server.py:88] "message"
    ISO8601   2024-11-30T04:33:59Z I 1234 server.py:88] "message"

Messages are JSON-escaped (quoted) unless ``TRITON_SERVER_ESCAPE_LOG_MESSAGES=0``. Like
tritonserver's single logger, the settings are one per process: ``log_info``,
``log_warning``, ``log_error`` switch those levels, ``log_verbose_level`` N shows verbose
records up to level N (``logging.DEBUG`` is verbose level 1, anything below it level 2;
they print as ``I`` lines, as tritonserver's), ``log_format`` picks the line format and
``log_file`` (set at start-up only) is where lines go, stderr otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from tritonx.errors import Code, TritonXError

#: The formats ``--log-format`` and ``log_format`` accept.
FORMATS = ("default", "ISO8601")

#: The logger tritonx logs under (``tritonx.*``).
ROOT = "tritonx"

#: The highest ``log_verbose_level`` (tritonserver keeps the level in an int32).
MAX_VERBOSE_LEVEL = 2**31 - 1


@dataclass
class LogState:
    """The logging settings in force (tritonserver's ``gLogger_``)."""

    info: bool = True
    warning: bool = True
    error: bool = True
    verbose: int = 0
    format: str = "default"
    file: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The six settings as the logging extension returns them, in tritonserver's order."""
        return {
            "log_file": self.file,
            "log_info": self.info,
            "log_warning": self.warning,
            "log_error": self.error,
            "log_verbose_level": self.verbose,
            "log_format": self.format,
        }


#: The process's logging settings.
STATE = LogState()
_lock = threading.Lock()


def _verbose_level(levelno: int) -> int:
    return 1 if levelno >= logging.DEBUG else 2


def enabled(levelno: int) -> bool:
    """Whether a record of ``levelno`` is logged under the current settings."""
    state = STATE
    if levelno >= logging.ERROR:
        return state.error
    if levelno >= logging.WARNING:
        return state.warning
    if levelno >= logging.INFO:
        return state.info
    return state.verbose >= _verbose_level(levelno)


class LevelFilter(logging.Filter):
    """Drops the records the current settings switch off (info on/off independently of
    warnings, verbose levels...)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return enabled(record.levelno)


class TritonFormatter(logging.Formatter):
    """Formats records as tritonserver does, in the format currently set (or ``log_format``
    when given, for a handler that must keep one).

    Records logged with ``extra={"raw": True}`` (tables) are printed as they are on the next
    line.
    """

    def __init__(self, log_format: str | None = None) -> None:
        super().__init__()
        self.fixed = log_format
        self.escape = os.environ.get("TRITON_SERVER_ESCAPE_LOG_MESSAGES", "1") != "0"

    @property
    def iso(self) -> bool:
        return (self.fixed or STATE.format).lower() == "iso8601"

    def format(self, record: logging.LogRecord) -> str:
        level = "E" if record.levelno >= logging.ERROR else "W" if record.levelno >= 30 else "I"
        where = f"{record.process} {os.path.basename(record.pathname)}:{record.lineno}]"
        t = time.gmtime(record.created)
        if self.iso:
            head = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', t)} {level} {where}"
        else:
            usec = int((record.created % 1) * 1_000_000)
            head = f"{level}{t.tm_mon:02d}{t.tm_mday:02d} {time.strftime('%H:%M:%S', t)}.{usec:06d} {where}"
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        if getattr(record, "raw", False):
            return f"{head} \n{message}"
        return f"{head} {json.dumps(message) if self.escape else message}"


def _logger_level() -> int:
    """The lowest record level any setting lets through (cheap rejection in the logger)."""
    state = STATE
    if state.verbose >= 2:
        return 1
    if state.verbose >= 1:
        return logging.DEBUG
    if state.info:
        return logging.INFO
    if state.warning:
        return logging.WARNING
    if state.error:
        return logging.ERROR
    return logging.CRITICAL + 1


def _apply() -> None:
    logging.getLogger(ROOT).setLevel(_logger_level())


def configure(
    *,
    verbose: int = 0,
    info: bool = True,
    warning: bool = True,
    error: bool = True,
    log_format: str = "default",
    log_file: str | None = None,
) -> None:
    """Set up the ``tritonx`` loggers from tritonserver's ``--log-*`` flags: lines go to
    ``log_file`` (appended) or stderr, in the settings' format.

    :raises OSError: the log file cannot be opened.
    """
    if log_format not in FORMATS:
        raise ValueError(f"invalid argument for --log-format, got: {log_format}")
    handler: logging.Handler
    handler = (
        logging.FileHandler(log_file, mode="a", encoding="utf-8")
        if log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(TritonFormatter())
    handler.addFilter(LevelFilter())
    with _lock:
        STATE.info, STATE.warning, STATE.error = info, warning, error
        STATE.verbose = max(0, verbose)
        STATE.format = log_format
        STATE.file = log_file or ""
        root = logging.getLogger(ROOT)
        for old in root.handlers:
            old.close()
        root.handlers[:] = [handler]
        root.propagate = False
        _apply()


def update(
    *,
    info: bool | None = None,
    warning: bool | None = None,
    error: bool | None = None,
    verbose: int | None = None,
    log_format: str | None = None,
) -> None:
    """Change the settings in force (None: unchanged); takes effect at once for every
    ``tritonx`` logger.

    :raises TritonXError: INVALID_ARG for a ``verbose`` level outside [0,
        :data:`MAX_VERBOSE_LEVEL`] (nothing is changed then).
    """
    if verbose is not None:
        check_verbose_level(verbose)
    with _lock:
        if info is not None:
            STATE.info = info
        if warning is not None:
            STATE.warning = warning
        if error is not None:
            STATE.error = error
        if verbose is not None:
            STATE.verbose = verbose
        if log_format is not None:
            STATE.format = log_format
        _apply()


def check_verbose_level(level: int) -> int:
    """``level`` if it is a ``log_verbose_level`` the server can hold, else INVALID_ARG with
    tritonserver's out-of-range wording.

    tritonserver casts the value to an int32 (2**32 + 5 becomes 5, 4294967295 becomes -1);
    tritonx refuses it instead of storing a level the client did not ask for.
    """
    if not 0 <= level <= MAX_VERBOSE_LEVEL:
        raise TritonXError(
            f"Unable to parse 'log_verbose_level', value is out of range [ 0, "
            f"{MAX_VERBOSE_LEVEL} ], got: {level}",
            Code.INVALID_ARG,
        )
    return level


def update_level(level: str, on: bool) -> None:
    """Switch ``info``, ``warning`` or ``error`` records on or off."""
    if level not in ("info", "warning", "error"):
        raise ValueError(f"unknown log level '{level}'")
    with _lock:
        setattr(STATE, level, on)
        _apply()


def settings() -> dict[str, Any]:
    """The settings in force, as the logging extension returns them."""
    return STATE.as_dict()


def file_not_settable() -> TritonXError:
    """tritonserver's refusal to move the log file over the network."""
    return TritonXError(
        "log file location can not be updated through network protocol", Code.UNSUPPORTED
    )
