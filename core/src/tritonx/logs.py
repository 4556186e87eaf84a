"""Triton's log line format: ``I1130 04:33:59.123456 1234 server.py:88] "message"``."""

from __future__ import annotations

import json
import logging
import os
import sys
import time


class TritonFormatter(logging.Formatter):
    """Formats records as tritonserver does (``default`` or ``ISO8601``).

    Messages are JSON-escaped (quoted) unless ``TRITON_SERVER_ESCAPE_LOG_MESSAGES=0``; records
    logged with ``extra={"raw": True}`` (tables) are printed as they are on the next line.
    """

    def __init__(self, log_format: str = "default") -> None:
        super().__init__()
        self.iso = log_format.lower() == "iso8601"
        self.escape = os.environ.get("TRITON_SERVER_ESCAPE_LOG_MESSAGES", "1") != "0"

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelname[0] if record.levelname[0] in "EWI" else "I"
        if record.levelno >= logging.ERROR:
            level = "E"
        where = f"{record.process} {os.path.basename(record.pathname)}:{record.lineno}]"
        if self.iso:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
            head = f"{stamp} {level} {where}"
        else:
            t = time.gmtime(record.created)
            usec = int((record.created % 1) * 1_000_000)
            head = f"{level}{t.tm_mon:02d}{t.tm_mday:02d} {time.strftime('%H:%M:%S', t)}.{usec:06d} {where}"
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        if getattr(record, "raw", False):
            return f"{head} \n{message}"
        return f"{head} {json.dumps(message) if self.escape else message}"


def configure(
    *,
    verbose: int = 0,
    info: bool = True,
    warning: bool = True,
    error: bool = True,
    log_format: str = "default",
    log_file: str | None = None,
) -> None:
    """Set up the ``tritonx`` loggers from tritonserver's ``--log-*`` flags."""
    if verbose > 0:
        level = logging.DEBUG
    elif info:
        level = logging.INFO
    elif warning:
        level = logging.WARNING
    elif error:
        level = logging.ERROR
    else:
        level = logging.CRITICAL + 1
    handler: logging.Handler
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(TritonFormatter(log_format))
    root = logging.getLogger("tritonx")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
