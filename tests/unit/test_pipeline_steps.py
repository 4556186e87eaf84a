"""The per-request steps of :mod:`tritonx.pipeline` (issue #45): ``Call.run`` drives
``Call.start``'s chain (answer, failure, heavy encoding, cancellation, the traced path), the
send and response-complete stamps, and the bare-final-flag rule."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tritonx.errors import NotLoaded, TritonXError
from tritonx.pipeline import Call, Pipeline, PlainDecoded, is_answer
from tritonx.types import InferenceRequest, InferenceResponse


class _Trace:
    def __init__(self) -> None:
        self.stamps: list[str] = []
        self.finished = 0

    def capture(self, name: str, ns: int) -> None:
        self.stamps.append(name)

    def finish(self) -> None:
        self.finished += 1


class _Tracer:
    active = False
    exporter = None


class _Served:
    name = "m"
    version = 1
    config: Any = None
    decoupled = False

    def labels(self, output: str) -> list[str] | None:
        return None


class _DataPlane:
    """Answers from a future the test settles (``queued``), or through ``infer`` when
    ``coroutine`` (the traced path)."""

    shared_memory: Any = None
    tracer = _Tracer()

    def __init__(self, coroutine: bool = False, missing: int = 0) -> None:
        self.coroutine = coroutine
        self.missing = missing
        self.queued: asyncio.Future[InferenceResponse] | None = None
        self.loads = 0

    def resolve(self, name: str, version: int | None = None) -> _Served:
        if self.missing:
            self.missing -= 1
            raise NotLoaded(name)
        return _Served()

    async def loaded(self, call: Any) -> Any:
        while True:
            try:
                return call()
            except NotLoaded:
                self.loads += 1

    def infer_future(self, request: Any, **_: Any) -> asyncio.Future[InferenceResponse] | None:
        if self.coroutine:
            return None
        self.queued = asyncio.get_running_loop().create_future()
        return self.queued

    async def infer(self, request: Any, **_: Any) -> InferenceResponse:
        return _response()


def _response(error: TritonXError | None = None) -> InferenceResponse:
    return InferenceResponse(model_name="m", model_version=1, outputs={}, error=error)


def _stamps(call: Call[PlainDecoded]) -> list[str]:
    trace: Any = call.trace
    return trace.stamps if trace is not None else []


def _call(dp: _DataPlane, protocol: str = "grpc", traced: bool = False) -> Call[PlainDecoded]:
    pipeline = Pipeline(dp, protocol)  # type: ignore[arg-type]
    decoded = PlainDecoded(InferenceRequest(model_name="m", inputs={}))
    return Call(pipeline, _Served(), decoded, _Trace() if traced else None)  # type: ignore[arg-type]


async def test_run_answers_through_the_callback_chain() -> None:
    dp = _DataPlane()
    call = _call(dp, traced=True)
    run = asyncio.ensure_future(call.run(lambda r: "encoded", lambda r: False))
    await asyncio.sleep(0)
    assert dp.queued is not None
    dp.queued.set_result(_response())
    assert await run == "encoded"
    assert _stamps(call) == ["INFER_RESPONSE_COMPLETE"]


async def test_run_raises_the_response_error_and_finishes() -> None:
    dp = _DataPlane()
    trace = _Trace()
    call = _call(dp)
    call.trace = trace  # type: ignore[assignment]
    run = asyncio.ensure_future(call.run(lambda r: "encoded", lambda r: False))
    await asyncio.sleep(0)
    assert dp.queued is not None
    dp.queued.set_result(_response(TritonXError("bad")))
    with pytest.raises(TritonXError, match="bad"):
        await run
    assert trace.finished == 1 and call.trace is None


@pytest.mark.parametrize("heavy", [False, True])
async def test_run_on_the_coroutine_path(heavy: bool) -> None:
    call = _call(_DataPlane(coroutine=True))
    assert await call.run(lambda r: "encoded", lambda r: heavy) == "encoded"


async def test_run_encodes_a_heavy_response_in_a_thread() -> None:
    dp = _DataPlane()
    call = _call(dp)
    run = asyncio.ensure_future(call.run(lambda r: "encoded", lambda r: True))
    await asyncio.sleep(0)
    assert dp.queued is not None
    dp.queued.set_result(_response())
    assert await run == "encoded"


async def test_cancelling_run_cancels_the_request() -> None:
    dp = _DataPlane()
    call = _call(dp)
    run = asyncio.ensure_future(call.run(lambda r: "encoded", lambda r: False))
    await asyncio.sleep(0)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert call.request.is_cancelled()
    assert dp.queued is not None and dp.queued.cancelled()


@pytest.mark.parametrize(
    ("protocol", "stamps"),
    [
        ("http", ["HTTP_SEND_START", "HTTP_SEND_END"]),
        ("grpc", ["GRPC_SEND_START", "GRPC_SEND_END"]),
    ],
)
async def test_send_frames_the_write_with_the_transport_stamps(
    protocol: str, stamps: list[str]
) -> None:
    call = _call(_DataPlane(), protocol, traced=True)

    async def write() -> int:
        assert _stamps(call) == stamps[:1]
        return 7

    assert await call.send(write()) == 7
    assert _stamps(call) == stamps
    untraced = _call(_DataPlane(), protocol)  # no trace: nothing to stamp, nothing fails
    untraced.sending()
    untraced.sent()
    untraced.response_complete()
    assert await untraced.send(asyncio.sleep(0, 8)) == 8


async def test_resolve_now_and_resolve_loaded() -> None:
    dp = _DataPlane(missing=3)
    pipeline = Pipeline(dp, "http")  # type: ignore[arg-type]
    assert pipeline.resolve_now("m", "") is None
    served, version = await pipeline.resolve_loaded("m", "")
    assert served.name == "m" and version is None and dp.loads == 1
    assert pipeline.resolve_now("m", "1") is not None


def test_a_bare_final_flag_is_no_answer() -> None:
    bare = InferenceResponse(model_name="m", model_version=1, outputs={}, final=True, empty=True)
    assert not is_answer(bare)
    assert is_answer(bare, empty_final=True)
    assert is_answer(_response())
