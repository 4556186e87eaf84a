"""Running requests through the server's one request pipeline: a generation choice as a
stream of text pieces (stop sequences applied, counts and finish reason at the end), the
choices of one request merged, and single-answer calls (embeddings).

Every request is resolved, admitted and run by :meth:`tritonx.ServerHandle.pipeline`'s steps;
leaving a stream early (a stop sequence, a client gone, a failed choice) closes the pipeline's
generator, which cancels the model's request (python models see ``is_cancelled()``).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tritonx import InferenceRequest, InferenceResponse
from tritonx.pipeline import Headers, Pipeline, PlainDecoded, is_answer
from tritonx_frontend_openai.conventions import GenerateParams, Generator


@dataclass
class Piece:
    """Part of one choice's answer.

    :ivar index: the choice.
    :ivar text: new text.
    :ivar logprobs: vLLM's log probabilities of the tokens of this piece, if asked.
    :ivar finish_reason: set on the choice's last piece only.
    :ivar prompt_tokens: on the last piece: the prompt's tokens.
    :ivar completion_tokens: on the last piece: the tokens generated.
    """

    index: int
    text: str = ""
    logprobs: list[dict[str, Any]] | None = None
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class Context:
    """What the choices of one HTTP request share."""

    pipeline: Pipeline
    #: the model version the pipeline resolved (``served.name``, ``served.config``)
    served: Any
    headers: Headers
    request_id: str
    #: headers every answer carries (the pipeline's ``X-Request-ID`` echo)
    reply_headers: dict[str, str] = field(default_factory=dict)


class Counter:
    """Counts tokens of texts the model did not count (the model's tokenizer), for one
    request: a prompt shared by its ``n`` choices is counted once."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._prompts: dict[str, int] = {}

    def count(self, text: str) -> int:
        return int(self.tokenizer.count(text)) if text else 0

    def prompt(self, text: str) -> int:
        """:meth:`count`, once per distinct prompt of the request."""
        known = self._prompts.get(text)
        if known is None:
            known = self._prompts[text] = self.count(text)
        return known


class StopMatcher:
    """Cuts a stream of text at the first stop sequence; text that may be the start of one
    is held back until it is known not to be."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.held = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """The text that can be sent now, and whether a stop sequence was reached (the text
        is then the part before it)."""
        if not self.stops:
            return text, False
        buffer = self.held + text
        found = [i for i in (buffer.find(s) for s in self.stops) if i >= 0]
        if found:
            self.held = ""
            return buffer[: min(found)], True
        keep = 0
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(buffer)), keep, -1):
                if buffer.endswith(stop[:size]):
                    keep = size
                    break
        self.held = buffer[len(buffer) - keep :]
        return buffer[: len(buffer) - keep], False

    def flush(self) -> str:
        """The text held back, at the end of the stream."""
        held, self.held = self.held, ""
        return held


def _identity(response: InferenceResponse) -> InferenceResponse:
    return response


def _never(response: InferenceResponse) -> bool:
    return False


async def responses(
    ctx: Context, inputs: dict[str, np.ndarray], *, decoupled: bool
) -> AsyncGenerator[InferenceResponse, None]:
    """The model's responses to one request with ``inputs``: through the pipeline's
    ``Call.responses`` for a decoupled model, ``Call.run`` for another. A response carrying
    an error raises it; the decoupled models' bare final flags are skipped."""
    request = InferenceRequest(ctx.served.name, inputs, id=ctx.request_id)
    call = ctx.pipeline.admit(ctx.served, PlainDecoded(request), ctx.headers)
    ctx.reply_headers.update(call.reply_headers)
    try:
        if not decoupled:
            yield await call.run(_identity, _never)
            return
        stream = call.responses()
        try:
            async for response in stream:
                if response.error is not None:
                    raise response.error
                if is_answer(response):
                    yield response
        finally:
            await stream.aclose()  # cancels the request when left early
    finally:
        call.finish()


async def infer_once(
    ctx: Context, inputs: dict[str, np.ndarray], *, decoupled: bool
) -> InferenceResponse:
    """The one answer of a model to ``inputs`` (a decoupled model's first response)."""
    async with contextlib.aclosing(responses(ctx, inputs, decoupled=decoupled)) as stream:
        async for response in stream:
            return response
    raise RuntimeError("the model sent no response")


async def choice(
    ctx: Context,
    convention: Generator,
    params: GenerateParams,
    index: int,
    counter: Counter,
) -> AsyncGenerator[Piece, None]:
    """One choice of a generation request: text pieces as the model sends them, then a last
    piece with the finish reason and the token counts."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    stops = StopMatcher(params.stop)
    generated: list[str] = []
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model_reason: str | None = None
    stopped = False
    if params.echo:
        yield Piece(index, params.prompt)
    inputs = convention.request_inputs(params)
    stream = responses(ctx, inputs, decoupled=convention.decoupled)
    async with contextlib.aclosing(stream):
        async for response in stream:
            out = convention.read(response.outputs)
            if out.prompt_tokens is not None and prompt_tokens is None:
                prompt_tokens = out.prompt_tokens
            if out.completion_tokens is not None:
                completion_tokens = (completion_tokens or 0) + out.completion_tokens
            if out.finish_reason:
                model_reason = out.finish_reason
            text, stopped = stops.feed(decoder.decode(out.text))
            if text or out.logprobs:
                generated.append(text)
                yield Piece(index, text, out.logprobs)
            if stopped:
                break  # leaves the pipeline's stream: the model's request is cancelled
    if not stopped:
        tail, stopped = stops.feed(decoder.decode(b"", final=True))
        tail += "" if stopped else stops.flush()
        if tail:
            generated.append(tail)
            yield Piece(index, tail)
    if prompt_tokens is None:
        prompt_tokens = counter.prompt(params.prompt)
    if completion_tokens is None:
        completion_tokens = counter.count("".join(generated))
    if stopped:
        reason = "stop"
    elif model_reason in ("stop", "length"):
        reason = model_reason
    elif completion_tokens >= params.max_tokens:
        reason = "length"
    else:
        reason = "stop"
    yield Piece(
        index,
        finish_reason=reason,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )


_DONE = object()


async def merged(streams: Sequence[AsyncGenerator[Piece, None]]) -> AsyncGenerator[Piece, None]:
    """The pieces of several choices as they come; the first failure raises (the other
    choices are cancelled), and leaving early cancels them all."""
    if len(streams) == 1:
        async with contextlib.aclosing(streams[0]) as only:
            async for piece in only:
                yield piece
        return
    queue: asyncio.Queue[object] = asyncio.Queue()

    async def pump(stream: AsyncGenerator[Piece, None]) -> None:
        try:
            async with contextlib.aclosing(stream) as source:
                async for piece in source:
                    queue.put_nowait(piece)
        except Exception as exc:
            queue.put_nowait(exc)
        else:
            queue.put_nowait(_DONE)

    tasks = [asyncio.create_task(pump(s)) for s in streams]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                assert isinstance(item, Piece)
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def collect(stream: AsyncGenerator[Piece, None]) -> list[Piece]:
    """Every piece of one or more choices (a request that does not stream)."""
    async with contextlib.aclosing(stream) as pieces:
        return [piece async for piece in pieces]


__all__ = [
    "Context",
    "Counter",
    "Piece",
    "StopMatcher",
    "choice",
    "collect",
    "infer_once",
    "merged",
    "responses",
]
