"""The trace and logging extensions over gRPC: ``TraceSetting`` and ``LogSettings`` with
tritonserver's checks and messages (server ``src/grpc/grpc_server.cc``)."""

from __future__ import annotations

from tritonx._dataplane.dataplane import DataPlane
from tritonx._dataplane.trace_settings import (
    NewSetting,
    check_update_keys,
    parse_count,
    parse_levels,
    parse_uint,
)
from tritonx._runtime import logs
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.proto import service_pb2


def _one(name: str, values: list[str]) -> str:
    if len(values) != 1:
        raise invalid_arg(f"expect only 1 value for '{name}'")
    return values[0]


def trace_setting(
    dp: DataPlane, request: service_pb2.TraceSettingRequest
) -> service_pb2.TraceSettingResponse:
    """Apply the request's settings (an empty value list clears one) to the global or the
    model's trace setting; answer with the settings then in force."""
    model = request.model_name
    if model and not dp.model_ready(model):
        raise invalid_arg(f"Request for unknown model : {model}")
    tracer = dp.tracer
    settings = request.settings
    if settings:
        if "trace_file" in settings:
            raise TritonXError(
                "trace file location can not be updated through network protocol",
                Code.UNSUPPORTED,
            )
        check_update_keys(settings)
        new = NewSetting()
        if "trace_level" in settings:
            levels = list(settings["trace_level"].value)
            if not levels:
                new.clear_level = True
            else:
                parse_levels(levels, new)
        for key, field in (("trace_rate", "rate"), ("log_frequency", "log_frequency")):
            if key in settings:
                values = list(settings[key].value)
                if not values:
                    setattr(new, f"clear_{field}", True)
                else:
                    setattr(new, field, parse_uint(key, _one(key, values)))
        if "trace_count" in settings:
            values = list(settings["trace_count"].value)
            if not values:
                new.clear_count = True
            else:
                new.count = parse_count(_one("trace_count", values), grpc=True)
        tracer.update(model, new)
    response = service_pb2.TraceSettingResponse()
    for key, values in tracer.describe_lists(model).items():
        response.settings[key].value.extend(values)
    return response


def log_settings(request: service_pb2.LogSettingsRequest) -> service_pb2.LogSettingsResponse:
    """Apply the request's settings key by key (a bad one leaves the earlier ones applied);
    answer with all six."""
    settings = request.settings
    if settings:
        if "log_file" in settings:
            raise logs.file_not_settable()
        for key, field in (
            ("log_info", "info"),
            ("log_warning", "warning"),
            ("log_error", "error"),
        ):
            if key in settings:
                value = settings[key]
                if value.WhichOneof("parameter_choice") != "bool_param":
                    raise invalid_arg(f"expect boolean for '{key}'")
                logs.update_level(field, value.bool_param)
        if "log_verbose_level" in settings:
            value = settings["log_verbose_level"]
            if value.WhichOneof("parameter_choice") != "uint32_param":
                raise invalid_arg("expect int32 for 'log_verbose_level'")
            logs.update(verbose=value.uint32_param)
        if "log_format" in settings:
            value = settings["log_format"]
            if value.WhichOneof("parameter_choice") != "string_param":
                raise invalid_arg("expect string for 'log_format'")
            if value.string_param not in logs.FORMATS:
                raise invalid_arg(f"invalid argument for log_format, got: {value.string_param}")
            logs.update(log_format=value.string_param)
    state = logs.STATE
    response = service_pb2.LogSettingsResponse()
    out = response.settings
    out["log_file"].string_param = state.file
    out["log_info"].bool_param = state.info
    out["log_warning"].bool_param = state.warning
    out["log_error"].bool_param = state.error
    out["log_verbose_level"].uint32_param = state.verbose
    out["log_format"].string_param = state.format
    return response
