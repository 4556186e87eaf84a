"""A streamed answer's framing: server-sent events, one ``data: {...}`` event a chunk, ending
with ``data: [DONE]``.

The first piece of the answer is awaited before the HTTP answer starts, so that a request the
model refuses gets an HTTP error; a failure once the events have begun ends them with an error
event. A client gone mid-stream closes the pieces' generator, which cancels the model's
requests.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any

import orjson
from aiohttp import web

from tritonx import TritonXError
from tritonx_frontend_openai.errors import OpenAIError, from_triton
from tritonx_frontend_openai.generation import Context, Piece

log = logging.getLogger("tritonx.frontend.openai")

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
#: the event that ends every stream
DONE = b"data: [DONE]\n\n"

#: the chunks (JSON objects) one piece of the answer becomes
Chunks = list[dict[str, Any]]


def event(data: Any) -> bytes:
    """One server-sent event carrying ``data`` as JSON."""
    return b"data: " + orjson.dumps(data) + b"\n\n"


async def stream_events(
    request: web.Request,
    pieces: AsyncGenerator[Piece, None],
    chunks: Callable[[Piece], Chunks],
    opening: Chunks,
    closing: Callable[[], Chunks],
    ctx: Context,
) -> web.StreamResponse:
    """Answer with server-sent events: ``opening`` chunks, ``chunks(piece)`` for each
    piece, ``closing()`` chunks, ``[DONE]``. The first piece is awaited before the answer
    starts, so a request the model refuses gets an HTTP error; a later failure ends the
    stream with an error event. A client gone mid-stream closes ``pieces`` (the handler
    is cancelled), which cancels the model's requests."""
    async with contextlib.aclosing(pieces):
        try:
            first = await anext(pieces)
        except StopAsyncIteration:
            first = None
        except TritonXError as exc:
            raise from_triton(exc) from None
        response = web.StreamResponse(headers={**SSE_HEADERS, **ctx.reply_headers})
        await response.prepare(request)
        try:
            for chunk in opening:
                await response.write(event(chunk))
            if first is not None:
                for chunk in chunks(first):
                    await response.write(event(chunk))
                try:
                    async for piece in pieces:
                        for chunk in chunks(piece):
                            await response.write(event(chunk))
                except Exception as exc:  # the answer has begun: an error event ends it
                    if isinstance(exc, ConnectionError):
                        raise
                    await _end_with_error(response, exc, ctx)
                    return response
            for chunk in closing():
                await response.write(event(chunk))
            await response.write(DONE)
            await response.write_eof()
        except ConnectionError:  # the client went away: leaving closes ``pieces``
            log.debug("client of %s went away", ctx.request_id)
        return response


async def _end_with_error(response: web.StreamResponse, exc: Exception, ctx: Context) -> None:
    """End a begun stream with OpenAI's error object as its last event (a server bug's
    details are logged, not sent)."""
    error = from_triton(exc)
    if isinstance(exc, OpenAIError | TritonXError):
        log.info("stream %s ended by an error: %s", ctx.request_id, error)
    else:
        log.exception("stream %s failed", ctx.request_id)
        error.message = "The server had an error while processing your request."
    await response.write(event(error.body()))
    await response.write(DONE)


__all__ = ["DONE", "SSE_HEADERS", "Chunks", "event", "stream_events"]
