"""The trace and logging extensions over HTTP: the bodies of ``/v2[/models/<m>]/trace/setting``
and ``/v2/logging``, with tritonserver's checks and messages (server ``src/http_server.cc``
``HandleTrace``, ``HandleLogging``). Routing, methods and body reading stay in ``routes``."""

from __future__ import annotations

from typing import Any

from tritonx._dataplane.dataplane import DataPlane
from tritonx._dataplane.trace_settings import (
    NewSetting,
    check_update_keys,
    parse_count,
    parse_levels,
    parse_uint,
)
from tritonx._runtime import logs
from tritonx._transports.http.errors import internal
from tritonx.errors import Code, TritonXError, invalid_arg


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise internal("attempt to access JSON non-string as string")
    return value


def trace_setting(dp: DataPlane, model: str, update: Any) -> dict[str, Any]:
    """Apply ``update`` (the POST body, or None for GET) to the global (``model`` "") or a
    model's trace setting; return the settings then in force."""
    if model and not dp.model_ready(model):
        raise invalid_arg(f"Request for unknown model : {model}")
    tracer = dp.tracer
    if isinstance(update, dict):
        new = NewSetting()
        if "trace_file" in update:
            raise TritonXError(
                "trace file location can not be updated through network protocol",
                Code.UNSUPPORTED,
            )
        check_update_keys(update)
        if "trace_level" in update:
            levels = update["trace_level"]
            if levels is None:
                new.clear_level = True
            else:
                if not isinstance(levels, list):
                    raise internal("attempt to access JSON non-array as array")
                parse_levels([_string(v) for v in levels], new)
        for key, field in (("trace_rate", "rate"), ("log_frequency", "log_frequency")):
            if key in update:
                if update[key] is None:
                    setattr(new, f"clear_{field}", True)
                else:
                    setattr(new, field, parse_uint(key, _string(update[key])))
        if "trace_count" in update:
            if update["trace_count"] is None:
                new.clear_count = True
            else:
                new.count = parse_count(_string(update["trace_count"]))
        tracer.update(model, new)
    return tracer.describe(model)


def log_settings(update: Any) -> dict[str, Any]:
    """Apply ``update`` (the POST body, or None for GET) to the server's logging, key by key
    as tritonserver does (a bad value leaves the earlier keys applied); return all six."""
    if isinstance(update, dict):
        if update.get("log_file") is not None:
            raise logs.file_not_settable()
        for key, field in (
            ("log_info", "info"),
            ("log_warning", "warning"),
            ("log_error", "error"),
        ):
            value = update.get(key)
            if value is None:
                continue
            if not isinstance(value, bool):
                raise internal("attempt to access JSON non-boolean as boolean")
            logs.update_level(field, value)
        level = update.get("log_verbose_level")
        if level is not None:
            if isinstance(level, bool) or not isinstance(level, int) or level < 0:
                raise internal("attempt to access JSON non-unsigned-integer as unsigned-integer")
            logs.update(verbose=level)
        log_format = update.get("log_format")
        if log_format is not None:
            log_format = _string(log_format)
            if log_format not in logs.FORMATS:
                raise TritonXError(
                    f"invalid argument for --log_format, got: {log_format}", Code.UNAVAILABLE
                )
            logs.update(log_format=log_format)
    return logs.settings()
