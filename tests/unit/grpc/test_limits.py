"""gRPC limits without a server: bounded status messages, errors that hold no frames, heavy
requests and responses, BYTES parsing bounded by the shape."""

from __future__ import annotations

import gc
import struct
import sys
import weakref
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from tritonx._transports.grpc.decode import OFFLOAD_ELEMENTS, Offload, decode_infer_request
from tritonx._transports.grpc.encode import heavy_response, stream_error
from tritonx._transports.grpc.errors import MAX_ERROR_BYTES, bounded_message, detached, fail
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.types import InferenceResponse

Tensor = service_pb2.ModelInferRequest.InferInputTensor


def encoded_size(message: str) -> int:
    """Bytes of ``message`` in a ``grpc-message`` trailer (percent-encoded UTF-8)."""
    data = message.encode()
    return len(data) + 2 * sum(not 0x20 <= b < 0x7F or b == 0x25 for b in data)


@pytest.mark.parametrize("char", ["a", "%", "\n", "é", "\U0001f600"])
def test_bounded_message_fits_the_trailer(char: str) -> None:
    assert bounded_message(char * 100) == char * 100
    long = "model '" + char * 100_000 + "'"
    cut = bounded_message(long)
    assert cut.endswith("...") and long.startswith(cut[:-3])
    assert MAX_ERROR_BYTES - 12 <= encoded_size(cut) <= MAX_ERROR_BYTES


class Context:
    """The part of ``grpc.aio.ServicerContext`` :func:`fail` uses."""

    def __init__(self) -> None:
        self.code: Any = None
        self.details = ""

    def set_code(self, code: Any) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details


def test_fail_sets_a_bounded_status_and_raises_nothing() -> None:
    context = Context()
    assert fail(context, invalid_arg("x" * 10_000)) is None
    assert context.code is grpc.StatusCode.INVALID_ARGUMENT
    assert context.details.endswith("...") and len(context.details) <= MAX_ERROR_BYTES
    fail(context, ValueError("a bug"))
    assert (context.code, context.details) == (grpc.StatusCode.INTERNAL, "a bug")


def test_detached_errors_hold_no_frames() -> None:
    class Big:
        pass

    def reject(message: Big) -> None:
        raise invalid_arg("bad request")

    payload = Big()
    alive = weakref.ref(payload)
    try:
        reject(payload)
    except TritonXError as exc:
        kept = detached(exc)
    del payload
    gc.disable()  # freed by reference counting alone, no cycle collection
    try:
        assert alive() is None
    finally:
        gc.enable()
    assert kept.__traceback__ is None and kept.__context__ is None
    assert (kept.code, kept.message) == (Code.INVALID_ARG, "bad request")
    assert stream_error(None, TritonXError("y" * 10_000)).error_message.endswith("...")


def test_rejected_request_is_freed_without_the_cycle_collector() -> None:
    """decode errors hold the message in their traceback; once handled, nothing does."""
    msg = service_pb2.ModelInferRequest(model_name="m")
    msg.inputs.append(Tensor(name="X", datatype="INT32", shape=[2]))
    msg.raw_input_contents.append(b"\0" * 5)
    before = sys.getrefcount(msg)
    try:
        decode_infer_request(msg, None)
    except TritonXError as exc:
        context = Context()
        fail(context, exc)
    assert sys.getrefcount(msg) == before
    assert "Expected 8, got 5" in context.details


class RefusingDataPlane:
    """Refuses every model, as an unknown model is refused."""

    async def loaded(self, call: Any) -> Any:
        return call()

    def resolve(self, name: str, version: int | None = None) -> Any:
        raise TritonXError(f"Request for unknown model: '{name}' is not found", Code.NOT_FOUND)


async def test_servicer_releases_a_refused_request_at_once() -> None:
    """Before: ``context.abort()`` raised an exception grpc keeps on the call, whose
    traceback held the handler's frame and so the request: a cycle only the cyclic garbage
    collector broke."""
    from tritonx._transports.grpc.servicer import GRPCInferenceServicer

    servicer = GRPCInferenceServicer(RefusingDataPlane())  # type: ignore[arg-type]
    msg = service_pb2.ModelInferRequest(model_name="nope" * 3000)
    before = sys.getrefcount(msg)
    context = Context()
    gc.disable()
    try:
        assert await servicer.ModelInfer(msg, context) is None
        assert sys.getrefcount(msg) == before
    finally:
        gc.enable()
    assert context.code is grpc.StatusCode.NOT_FOUND
    assert context.details.endswith("...") and len(context.details) <= MAX_ERROR_BYTES


class BrokenDataPlane:
    """Fails as a bug would (not a TritonXError)."""

    async def loaded(self, call: Any) -> Any:
        return call()

    def resolve(self, name: str, version: int | None = None) -> Any:
        raise ValueError("cannot reshape array of size 3 into shape (2,)")


async def test_unexpected_errors_are_internal_not_unknown() -> None:
    """grpc.aio answers an escaping exception UNKNOWN "Unexpected <class ...>: ..."; the
    servicer logs it and answers INTERNAL with its message."""
    from tritonx._transports.grpc.servicer import GRPCInferenceServicer

    servicer = GRPCInferenceServicer(BrokenDataPlane())  # type: ignore[arg-type]
    context = Context()
    assert await servicer.ModelInfer(service_pb2.ModelInferRequest(model_name="m"), context) is None
    assert context.code is grpc.StatusCode.INTERNAL
    assert context.details == "cannot reshape array of size 3 into shape (2,)"


def raw_bytes_request(shape: list[int], raw: bytes) -> service_pb2.ModelInferRequest:
    msg = service_pb2.ModelInferRequest(model_name="m")
    msg.inputs.append(Tensor(name="S", datatype="BYTES", shape=shape))
    msg.raw_input_contents.append(raw)
    return msg


def test_bytes_parsing_stops_past_the_shape() -> None:
    raw = struct.pack("<I", 1) + b"a"
    decoded = decode_infer_request(raw_bytes_request([2], raw * 2), None)
    assert decoded.request.inputs["S"].tolist() == [b"a", b"a"]
    with pytest.raises(TritonXError) as info:
        decode_infer_request(raw_bytes_request([2], raw * 1_000_000), None)
    assert info.value.message == (
        "[request id: <id_unknown>] unexpected number of string elements 3 for inference "
        "input 'S' for model 'm', expecting 2"
    )
    with pytest.raises(TritonXError, match=r"expected 3 string elements .* got 2"):
        decode_infer_request(raw_bytes_request([3], raw * 2), None)
    with pytest.raises(TritonXError, match="BYTES tensor is truncated"):
        decode_infer_request(raw_bytes_request([1], struct.pack("<I", 5) + b"ab"), None)
    with pytest.raises(TritonXError, match="incomplete 4-byte length prefix"):
        decode_infer_request(raw_bytes_request([2], raw + b"\1\0"), None)


def heavy(msg: service_pb2.ModelInferRequest) -> bool:
    try:
        decode_infer_request(msg, None, offload=True)
    except Offload:
        return True
    except TritonXError:
        pass
    return False


def test_heavy_requests_and_responses() -> None:
    assert not heavy(raw_bytes_request([OFFLOAD_ELEMENTS], b""))
    assert heavy(raw_bytes_request([OFFLOAD_ELEMENTS + 1], b""))
    numeric = service_pb2.ModelInferRequest(model_name="m")
    numeric.inputs.append(Tensor(name="X", datatype="FP32", shape=[10**6]))
    numeric.raw_input_contents.append(bytes(4 * 10**6))
    assert not heavy(numeric)  # raw numeric data: a view, no per-element work
    del numeric.raw_input_contents[:]
    numeric.inputs[0].contents.fp32_contents.append(1.0)
    assert heavy(numeric)
    assert not heavy_response(InferenceResponse(outputs={"Y": np.zeros(10**6, np.float32)}))
    strings = np.array([b"x"] * (OFFLOAD_ELEMENTS + 1), dtype=object)
    assert heavy_response(InferenceResponse(outputs={"Y": strings}))
