"""Reading an HTTP request body (``/infer``, ``/generate`` and the JSON control bodies):
bounded by ``--http-max-input-size``, inflated when compressed, and timed out when stalled."""

from __future__ import annotations

import asyncio

import numpy as np
from aiohttp import StreamReader, web

from tritonx._transports.http.binary import Body
from tritonx._transports.http.errors import BodyError
from tritonx.errors import TritonXError, unsupported


def _too_large(size: int, limit: int, header: str | None) -> BodyError:
    """Triton's text for a body over ``--http-max-input-size``, by the kind of body
    (``header``: its ``Inference-Header-Content-Length``): a JSON body ("request JSON size
    of ..."), a raw binary body (header length 0: "Raw input has a byte_size ... that exceeds
    the maximum allowed value ..."), a JSON header followed by binary data (its header over
    the limit: Triton's JSON text; its binary data: "... exceeds the maximum allowed value
    ...")."""
    hint = "Use --http-max-input-size to increase the limit."
    json_length = None
    if header is not None:
        text = header.strip()
        # (past 18 digits it is no length Triton parses: and int() refuses past 4300)
        digits = text.isascii() and text.isdigit() and len(text) <= 18
        json_length = int(text) if digits else None
    if header is None or (json_length is not None and json_length > limit):
        length = size if header is None else json_length
        return BodyError(
            f"request JSON size of {length} bytes exceeds the maximum allowed input size of "
            f"{limit} bytes. {hint}"
        )
    if json_length == 0:
        return BodyError(
            f"Raw input has a byte_size ({size} bytes) that exceeds the maximum allowed value "
            f"of {limit} bytes. {hint}"
        )
    return BodyError(
        f"request of {size} bytes (JSON header and binary input data) exceeds the maximum "
        f"allowed value of {limit} bytes. {hint}"
    )


#: A body declared (Content-Length) up to this size is read into one buffer of that size;
#: a larger one, or one of unknown size (chunked, compressed), into a buffer that doubles as
#: its bytes arrive: memory follows what the client actually sent.
EAGER_BODY_SIZE = 1 << 20

_COMPRESSED = ("gzip", "deflate")


async def read_body(
    request: web.Request, limit: int, timeout: float = 0.0, *, json_only: bool = False
) -> Body:
    """The (decompressed) request body in one writable buffer, at most ``limit`` bytes.

    aiohttp inflates ``Content-Encoding: gzip|deflate`` bodies itself, a chunk at a time as
    they are read; reading stops as soon as the inflated size passes ``limit``. Other
    encodings are refused as Triton does (501). A body declared over the limit is refused
    before it is read. When the body has not fully arrived yet, ``timeout`` (seconds; 0: none)
    bounds the wait for each of its chunks. ``json_only``: the body is one JSON document
    whatever its ``Inference-Header-Content-Length`` says (Triton reads that header on
    ``/infer`` only: ``/generate`` over the limit is "request JSON size of <body> bytes ...").

    :raises BodyError: the body is too large, malformed, cut short or stalled (the caller
        answers and closes the connection: the rest of the body is never read).
    """
    encoding = request.headers.get("Content-Encoding", "")
    if encoding not in ("", "identity", "gzip", "deflate"):
        raise unsupported("Unsupported compression type")
    compressed = encoding in _COMPRESSED
    length = None if compressed else request.content_length
    header = None if json_only else request.headers.get("Inference-Header-Content-Length")
    if length is not None:
        if length > limit:
            raise _too_large(length, limit, header)
        if length == 0:
            return b""
    stream = request.content
    if stream.is_eof() or timeout <= 0:  # all of it is here already: no waiting
        return await _read_body(stream, length, limit, compressed, header, None, 0.0)
    try:
        async with asyncio.timeout(timeout) as deadline:
            return await _read_body(stream, length, limit, compressed, header, deadline, timeout)
    except TimeoutError:
        raise BodyError(
            f"timed out reading the request body: no data for {timeout:g} s", 408
        ) from None


async def _read_body(
    stream: StreamReader,
    length: int | None,
    limit: int,
    compressed: bool,
    header: str | None,
    deadline: asyncio.Timeout | None,
    timeout: float,
) -> Body:
    failure = ""
    try:
        if length is not None and length <= EAGER_BODY_SIZE:
            buf = bytearray(length)
            view = memoryview(buf)
            pos = 0
            while pos < length:
                chunk, boundary = await stream.readchunk()
                if not chunk:
                    if boundary and not stream.at_eof():  # the end of one HTTP chunk
                        continue
                    break  # the end of the body
                n = len(chunk)
                if pos + n > length:
                    failure = "request body is longer than its Content-Length"
                    break
                view[pos : pos + n] = chunk
                pos += n
                if deadline is not None:
                    deadline.reschedule(asyncio.get_running_loop().time() + timeout)
            view.release()
            if not failure and pos != length:
                failure = f"unexpected end of request body: got {pos} of {length} bytes"
            if not failure:
                return buf
        else:
            cap = limit if length is None else length
            grown = np.empty(min(cap, EAGER_BODY_SIZE if length else 1 << 16), np.uint8)
            size = 0
            while True:
                chunk, boundary = await stream.readchunk()
                if not chunk:
                    if boundary and not stream.at_eof():  # the end of one HTTP chunk
                        continue
                    break  # the end of the body
                end = size + len(chunk)
                if end > cap:
                    if length is not None:
                        failure = "request body is longer than its Content-Length"
                    elif compressed:
                        failure = (
                            f"Decompressed data size exceeds the maximum allowed value of "
                            f"{limit} bytes. Use --http-max-input-size to increase the limit."
                        )
                    else:
                        raise _too_large(end, limit, header)
                    break
                if end > grown.size:
                    grown.resize(min(cap, max(end, 2 * grown.size)), refcheck=False)
                grown[size:end] = np.frombuffer(chunk, np.uint8)
                size = end
                if deadline is not None:
                    deadline.reschedule(asyncio.get_running_loop().time() + timeout)
            if not failure:
                if length is not None and size != length:
                    failure = f"unexpected end of request body: got {size} of {length} bytes"
                elif compressed and size == 0:
                    failure = "nothing to be decompressed"
                else:
                    return memoryview(grown.data)[:size]
    except (TritonXError, asyncio.CancelledError, TimeoutError):
        raise
    except Exception as exc:  # connection reset, bad chunked framing, corrupt gzip
        # aiohttp keeps the exception (its traceback holds this frame) on the stream:
        # drop the traceback so that neither it nor the buffer outlives the request
        failure = f"failed to read the request body: {exc}"
        exc.__traceback__ = None
    raise BodyError(failure)


__all__ = ["EAGER_BODY_SIZE", "read_body"]
