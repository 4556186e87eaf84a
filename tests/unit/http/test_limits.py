"""HTTP decoding limits and Triton's texts, without sockets: raw binary requests, the byte
size overflow check, deeply nested and piecewise-parsed JSON, heavy bodies, bounded errors."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from tritonx._transports.http import json_header as decode_module
from tritonx._transports.http.decode import (
    OFFLOAD_JSON_BYTES,
    decode_infer_request,
    heavy_body,
    raw_binary_request,
)
from tritonx._transports.http.encode import heavy_response
from tritonx._transports.http.errors import MAX_ERROR_CHARS, bounded_message, error_response
from tritonx._transports.http.json_header import (
    MAX_SHALLOW_BRACKETS,
    _shallow_json,
    parse_json_header,
)
from tritonx._transports.http.json_tensor import ARRAY_SLICE, _array
from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError
from tritonx.proto import model_config_pb2
from tritonx.types import InferenceResponse

LIMIT = 64 << 20
UNKNOWN = "[request id: <id_unknown>] "


def config(*inputs: tuple[str, str, list[int]], max_batch_size: int = 0) -> ModelConfig:
    raw = model_config_pb2.ModelConfig(name="m", max_batch_size=max_batch_size)
    for name, datatype, dims in inputs:
        raw.input.add(name=name, data_type=model_config_pb2.DataType.Value(datatype), dims=dims)
    return ModelConfig(raw)


def raw_error(body: bytes, cfg: ModelConfig) -> str:
    with pytest.raises(TritonXError) as info:
        raw_binary_request(body, cfg, "m", None, LIMIT)
    assert info.value.code is Code.INVALID_ARG
    return info.value.message


# ---------------------------------------------------------------------------------- raw binary


def test_raw_binary_input_count_message_is_tritons() -> None:
    # core InferenceRequest::Normalize: found <inputs in the request> ... got <config inputs>
    cfg = config(("A", "TYPE_INT32", [-1]), ("B", "TYPE_INT32", [-1]))
    assert raw_error(b"\0" * 4, cfg) == (
        f"{UNKNOWN}Raw request must only have 1 input (found 1) to be deduced but got 2 "
        "inputs in 'm' model configuration"
    )


def test_raw_binary_bytes_and_wildcard_messages_are_tritons() -> None:
    assert raw_error(b"ab", config(("S", "TYPE_STRING", [2]))) == (
        f"{UNKNOWN}For BYTE datatype raw input 'S', the model must have input shape [1]"
    )
    assert raw_error(b"ab", config(("S", "TYPE_STRING", [-1]))) == (
        f"{UNKNOWN}For BYTE datatype raw input 'S', the model must have input shape [1]"
    )
    assert raw_error(b"\0" * 8, config(("X", "TYPE_FP32", [-1, 2, -1]))) == (
        f"{UNKNOWN}The shape of the raw input 'X' can not be deduced because there are more "
        "than one variable-sized dimension"
    )


def test_raw_binary_byte_size_uses_the_deduced_shape() -> None:
    # dims [-1, 3] FP32 and 30 bytes: Triton deduces 30 / 3 / 4 = 2 rows, expects 24
    assert raw_error(b"\0" * 30, config(("X", "TYPE_FP32", [-1, 3]))) == (
        f"{UNKNOWN}input byte size mismatch for input 'X' for model 'm'. Expected 24, got 30"
    )
    assert raw_error(b"\0" * 12, config(("X", "TYPE_FP32", [2]), max_batch_size=4)) == (
        f"{UNKNOWN}input byte size mismatch for input 'X' for model 'm'. Expected 8, got 12"
    )


def test_raw_binary_shapes() -> None:
    data = np.arange(6, dtype=np.float32).tobytes()
    decoded = raw_binary_request(data, config(("X", "TYPE_FP32", [-1, 3])), "m", None, LIMIT)
    assert decoded.request.inputs["X"].shape == (2, 3) and decoded.binary_default
    batched = config(("X", "TYPE_FP32", [3, -1]), max_batch_size=2)
    assert raw_binary_request(data, batched, "m", None, LIMIT).request.inputs["X"].shape == (
        1,
        3,
        2,
    )
    strings = config(("S", "TYPE_STRING", [1, 1]), max_batch_size=2)
    value = raw_binary_request(b"hello", strings, "m", None, LIMIT).request.inputs["S"]
    assert value.shape == (1, 1, 1) and value.reshape(-1)[0] == b"hello"
    empty = raw_binary_request(b"", config(("X", "TYPE_FP32", [-1])), "m", None, LIMIT)
    assert empty.request.inputs["X"].shape == (0,)


# ---------------------------------------------------------------------------------- JSON inputs


def test_byte_size_overflow_message_is_tritons() -> None:
    header = {"inputs": [{"name": "X", "datatype": "FP64", "shape": [2**61, 2], "data": [1]}]}
    with pytest.raises(TritonXError) as info:
        decode_infer_request(orjson.dumps(header), None, "m", None, LIMIT)
    assert info.value.code is Code.INVALID_ARG
    assert info.value.message == (
        "byte size overflow for input 'X': element count (4611686018427387904) * data type "
        "size (8) exceeds maximum allowed size (9223372036854775807)"
    )
    # one-byte types cannot overflow: the max input size check answers
    header = {"inputs": [{"name": "X", "datatype": "INT8", "shape": [2**62], "data": [1]}]}
    with pytest.raises(TritonXError, match=r"has a byte_size .* that exceeds the maximum"):
        decode_infer_request(orjson.dumps(header), None, "m", None, LIMIT)


def test_deep_json_is_read_as_triton_reads_it() -> None:
    deep = b"[" * 3000 + b"]" * 3000
    text = b'{"ready": ' + deep + b', "x": "[[\\"]"}'
    doc = parse_json_header(text, len(text), LIMIT)
    assert isinstance(doc["ready"], list) and doc["x"] == '[["]'
    assert parse_json_header(deep, len(deep), LIMIT) is not None
    body = b'{"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": ' + deep + b"}]}"
    with pytest.raises(TritonXError) as info:
        decode_infer_request(body, None, "m", None, LIMIT)
    assert info.value.code is Code.INVALID_ARG
    assert "JSON nesting depth exceeds maximum allowed limit (100)" in info.value.message
    with pytest.raises(TritonXError) as info:  # still not JSON: Triton's 500
        parse_json_header(deep + b"x", len(deep) + 1, LIMIT)
    assert info.value.code is Code.INTERNAL
    assert info.value.message.startswith("failed to parse the request JSON buffer: ")


def test_shallow_json_keeps_strings_and_shape() -> None:
    text = b'{"a": [[["]]]"]], {"b": {"c": [1]}}]}'
    assert _shallow_json(text, keep=2) == b'{"a": [[], {}]}'
    assert orjson.loads(_shallow_json(text, keep=10)) == orjson.loads(text)


def test_large_data_arrays_are_parsed_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode_module, "PIECEWISE_JSON_BYTES", 100)
    monkeypatch.setattr(decode_module, "JSON_PIECE_BYTES", 64)
    calls: list[int] = []
    real_loads = orjson.loads

    def loads(data: bytes) -> object:
        calls.append(len(data))
        return real_loads(data)

    monkeypatch.setattr(decode_module.orjson, "loads", loads)
    values = list(range(1000, 1100))
    header = {"id": "data", "inputs": [{"name": "X", "datatype": "INT32", "shape": [100]}]}
    header["inputs"][0]["data"] = values  # type: ignore[index]
    body = orjson.dumps(header).replace(b'"data":[', b'"data" : [ ')
    doc = parse_json_header(body, len(body), LIMIT)
    monkeypatch.setattr(decode_module.orjson, "loads", real_loads)
    assert doc == real_loads(body)
    assert len(calls) > 5 and max(calls) < len(body) // 2  # pieces, never the whole body
    for bad in (body.replace(b"1050,", b"1050,,"), body.replace(b"1099]", b"1099,]")):
        with pytest.raises(TritonXError, match="failed to parse the request JSON buffer"):
            parse_json_header(bad, len(bad), LIMIT)


def test_long_lists_convert_a_slice_at_a_time() -> None:
    values = list(range(ARRAY_SLICE * 2 + 5))
    assert np.array_equal(_array(values), np.array(values))
    mixed = [*range(ARRAY_SLICE), 2**64 - 1]  # slices of different dtypes: converted whole
    assert _array(mixed).dtype == np.array(mixed).dtype


def test_heavy_bodies_and_responses() -> None:
    small = orjson.dumps({"inputs": []})
    assert not heavy_body(small, None)
    assert heavy_body(b" " * (OFFLOAD_JSON_BYTES + 1), None)
    head = b'{"inputs":[{"datatype":"BYTES"}]}'
    assert heavy_body(head + bytes(OFFLOAD_JSON_BYTES + 1), len(head))
    numeric = b'{"inputs":[{"datatype":"FP32"}]}'
    assert not heavy_body(numeric + bytes(OFFLOAD_JSON_BYTES + 1), len(numeric))
    assert not heavy_response(InferenceResponse(outputs={"Y": np.zeros(100, np.float32)}))
    assert heavy_response(InferenceResponse(outputs={"Y": np.array([b"x"] * 20000, object)}))


# ---------------------------------------------------------------------------------- errors


def test_error_bodies_are_bounded() -> None:
    assert bounded_message("short") == "short"
    long = "x" * (MAX_ERROR_CHARS + 10)
    assert bounded_message(long) == "x" * MAX_ERROR_CHARS + "..."
    response = error_response("unknown model '" + "y" * 100_000 + "'", 404)
    assert isinstance(response.body, bytes)
    message = orjson.loads(response.body)["error"]
    assert len(message) == MAX_ERROR_CHARS + 3 and message.endswith("...")


# ---------------------------------------------------------------------------------- listener


def test_listener_limits_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    from tritonx._transports.http.listener import HTTPLimits, default_max_connections
    from tritonx.config import ServerSettings

    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, 4096))
    assert default_max_connections() == 192
    monkeypatch.setattr(resource, "getrlimit", lambda _: (65536, 65536))
    assert default_max_connections() == 49152
    limits = HTTPLimits.from_settings(ServerSettings())
    assert (limits.header_timeout, limits.body_timeout, limits.keepalive_timeout) == (60, 60, 620)
    assert limits.max_connections == 49152 and limits.handler_keepalive == 620
    # three listeners (e.g. HTTP, metrics, a frontend) share the descriptors equally
    assert HTTPLimits.from_settings(ServerSettings(), listeners=3).max_connections == 16384
    limits = HTTPLimits.from_settings(
        ServerSettings(http_max_connections=8, http_keepalive_timeout_secs=0)
    )
    assert limits.max_connections == 8
    assert limits.handler_keepalive > 10**8  # 0: no limit (aiohttp's 0 closes at once)


def test_deep_json_with_too_many_brackets_is_refused_without_a_rescan() -> None:
    """A body deeper than orjson reads is rescanned in Python only up to a bracket budget:
    past it (a few kilobytes of gzip can inflate to megabytes of ``[``), Triton's parse error
    at once, not seconds of CPU."""
    deep = b"[" * (MAX_SHALLOW_BRACKETS + 1)
    with pytest.raises(TritonXError) as info:
        parse_json_header(deep, len(deep), LIMIT)
    assert "failed to parse the request JSON buffer: nested deeper than 1024 levels" in (
        info.value.message
    )
    assert f"with {MAX_SHALLOW_BRACKETS + 1} brackets" in info.value.message
