"""Receiving request messages: bounded decompression, parsing without copies, and the heavy
part of large messages off the event loop.

grpc.aio hands each RPC's request deserializer the whole message as one ``bytes`` object,
on the event loop. Left to grpc, a compressed message is inflated by grpc core in full before
that (up to ``--grpc-max-message-size``, 2 GiB by default: a 400 KB gzip message became
419 MB and seconds of CPU), and protobuf's parser copies every ``bytes`` field of the message
into its own arena and again into a new ``bytes`` object on access, so a 524 MB
``ModelInferRequest`` was held three times over by the time its tensors were decoded.

So the server turns grpc's per-message decompression off (``grpc.per_message_decompression``
0) and every RPC's request deserializer is :func:`deserializer`:

* **compressed messages** are inflated here, bounded: ``zlib``'s ``max_length`` stops the
  output at the limit (``--grpc-max-decompressed-message-size``, default
  :data:`DEFAULT_MAX_DECOMPRESSED_SIZE`, and never more than ``--grpc-max-message-size``),
  so a message whose content would exceed it is refused RESOURCE_EXHAUSTED after inflating
  at most the limit. The first :data:`INLINE_INFLATE_BYTES` of output are inflated in the
  deserializer (a small compressed request is parsed right there, as an uncompressed one);
  the rest, if any, in one inflating thread, one message at a time (concurrent compressed
  messages take a core and one limit's worth of memory at most). grpc.aio does not show a message's Compressed-Flag
  (nor the ``grpc-encoding`` header) to the application, so a compressed message is
  recognised by its own header: gzip's ``1f 8b`` (a protobuf message never starts with
  ``0x1f``: wire type 7 does not exist) or a zlib header (grpc's "deflate"); a message that
  only looks like a zlib stream and does not inflate is parsed as it is.
* **large messages** (over :data:`INLINE_PARSE_BYTES`) are left to the handler
  (:class:`Received`). For ``ModelInferRequest`` the top-level fields are scanned and every
  ``raw_input_contents`` entry becomes a ``memoryview`` of the received bytes
  (:func:`split_raw_contents`): only the rest of the message is parsed by protobuf, and the
  input tensors are numpy views of the message grpc handed over, with no copy. A message
  that cannot be split that way (no raw contents, more than :data:`MAX_SPLIT_FIELDS`
  fields, groups) is parsed by protobuf, in a worker thread when it is larger than
  :data:`THREAD_PARSE_BYTES`.
* small uncompressed messages are parsed by protobuf in the deserializer, as before.

A message that protobuf cannot parse is answered INVALID_ARGUMENT with protobuf's message
(grpc.aio would answer UNKNOWN and log a traceback). Handlers given a :class:`Received`
finish it with :meth:`Received.message` or :meth:`Received.infer_request`, which return a
:class:`Refusal` instead of raising (no traceback keeps a message alive).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc

from tritonx._transports.grpc.context import CallContext
from tritonx._transports.grpc.errors import bounded_message

#: Default ``--grpc-max-decompressed-message-size``: the largest size a compressed request
#: message may inflate to (64 MiB).
DEFAULT_MAX_DECOMPRESSED_SIZE = 64 << 20
#: Uncompressed messages up to this size are parsed in the deserializer.
INLINE_PARSE_BYTES = 1 << 20
#: Output inflated in the deserializer before the rest of a message goes to a thread.
INLINE_INFLATE_BYTES = 256 << 10
#: Output inflated per ``decompress`` call past the first :data:`INLINE_INFLATE_BYTES`.
INFLATE_PIECE_BYTES = 4 << 20
#: Messages (or their parts without raw contents) larger than this that protobuf must parse
#: are parsed in a worker thread.
THREAD_PARSE_BYTES = 8 << 20
#: Top-level fields :func:`split_raw_contents` scans before leaving a message to protobuf.
MAX_SPLIT_FIELDS = 4096

#: ``ModelInferRequest.raw_input_contents``: field 7, length-delimited.
RAW_INPUT_CONTENTS_TAG = 7 << 3 | 2

#: First bytes a compressed message may start with: gzip's magic, or a zlib header's CMF
#: byte (method 8, window 2**8..2**15).
_MAYBE_COMPRESSED = bytes(int(b == 0x1F or (b & 0x0F == 8 and b >> 4 <= 7)) for b in range(256))


@dataclass(frozen=True, slots=True)
class Limit:
    """The largest size a compressed message may inflate to, and the flag that sets it."""

    size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
    flag: str = "--grpc-max-decompressed-message-size"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request message refused before any handler work: the status to answer with."""

    code: grpc.StatusCode
    details: str

    def fail(self, context: CallContext) -> None:
        """Set this status on the RPC of ``context``; returns None for the handler to return."""
        context.set_code(self.code)
        context.set_details(self.details)
        return None


def too_large(limit: Limit) -> Refusal:
    """The answer to a compressed message whose content exceeds ``limit``."""
    return Refusal(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"Received message larger than max after decompression: more than {limit.size} "
        f"bytes ({limit.flag})",
    )


def _corrupt(algorithm: str) -> Refusal:
    return Refusal(
        grpc.StatusCode.INTERNAL,
        f"Unexpected error decompressing data for algorithm '{algorithm}'",
    )


def _unparsable(exc: Exception) -> Refusal:
    return Refusal(
        grpc.StatusCode.INVALID_ARGUMENT, bounded_message(str(exc) or "Error parsing message")
    )


def compression_of(data: bytes) -> str | None:
    """``"gzip"`` or ``"deflate"`` when ``data`` starts with that format's header, else None."""
    if len(data) < 2:
        return None
    first, second = data[0], data[1]
    if first == 0x1F:
        return "gzip" if second == 0x8B else None
    if first & 0x0F == 8 and first >> 4 <= 7 and (first << 8 | second) % 31 == 0:
        return None if second & 0x20 else "deflate"  # grpc never uses a preset dictionary
    return None


def _parse(parse: Callable[[bytes], Any], data: bytes) -> Any:
    """``parse(data)``, or a :class:`Refusal` when protobuf cannot parse it."""
    try:
        return parse(data)
    except Exception as exc:  # DecodeError (and anything else the parser raises)
        return _unparsable(exc)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it (IndexError past the end)."""
    value = data[pos]
    pos += 1
    if value < 0x80:
        return value, pos
    value &= 0x7F
    shift = 7
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")


def split_raw_contents(data: bytes) -> tuple[bytes, list[memoryview]] | None:
    """Split a serialized ``ModelInferRequest`` into the message without its
    ``raw_input_contents`` (a small copy) and a view of each raw contents entry, in order.

    None when the message has no raw contents, is malformed at the top level, holds a group,
    or has more than :data:`MAX_SPLIT_FIELDS` top-level fields: protobuf then parses it.
    """
    view = memoryview(data)
    end = len(data)
    pos = 0
    keep_from = 0
    kept: list[memoryview] = []
    raws: list[memoryview] = []
    try:
        for _ in range(MAX_SPLIT_FIELDS):
            if pos >= end:
                break
            start = pos
            tag, pos = _varint(data, pos)
            wire = tag & 7
            if wire == 2:
                length, pos = _varint(data, pos)
                value = pos
                pos += length
                if pos > end:
                    return None
                if tag == RAW_INPUT_CONTENTS_TAG:
                    if start > keep_from:
                        kept.append(view[keep_from:start])
                    raws.append(view[value:pos])
                    keep_from = pos
            elif wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                return None
        else:
            if pos < end:
                return None
    except IndexError:
        return None
    if pos != end or not raws:
        return None
    kept.append(view[keep_from:])
    return b"".join(kept), raws


class Received:
    """A request message the deserializer left to the handler: large, still to be inflated
    past :data:`INLINE_INFLATE_BYTES`, or already refused.

    Handlers call :meth:`message` (any RPC) or :meth:`infer_request` (``ModelInferRequest``,
    raw contents as views).
    """

    __slots__ = ("_algorithm", "_data", "_inflater", "_limit", "_parse", "_refusal")

    def __init__(
        self,
        data: bytes,
        parse: Callable[[bytes], Any],
        limit: Limit,
        inflater: Any = None,
        algorithm: str = "",
        refusal: Refusal | None = None,
    ) -> None:
        self._data = data
        self._parse = parse
        self._limit = limit
        self._inflater = inflater
        self._algorithm = algorithm
        self._refusal = refusal

    @classmethod
    def refused(cls, refusal: Refusal) -> Received:
        """A message already refused (by the deserializer)."""
        return cls(b"", _no_parse, Limit(), refusal=refusal)

    def _inflate_rest(self) -> bytes | Refusal:
        """Inflate the rest of the message in pieces of :data:`INFLATE_PIECE_BYTES`, never
        past the limit (in the inflating thread): a message over the limit is refused holding
        at most the limit in memory."""
        inflater = self._inflater
        pieces = [self._data]
        size = len(self._data)
        limit = self._limit.size
        tail = inflater.unconsumed_tail
        try:
            while not inflater.eof:
                piece = inflater.decompress(tail, min(INFLATE_PIECE_BYTES, limit - size + 1))
                size += len(piece)
                if size > limit:
                    return too_large(self._limit)
                if not piece and len(inflater.unconsumed_tail) == len(tail):
                    break  # the input ended before the stream did
                tail = inflater.unconsumed_tail
                pieces.append(piece)
        except zlib.error:
            return _corrupt(self._algorithm)
        if not inflater.eof or inflater.unused_data:
            return _corrupt(self._algorithm)
        return b"".join(pieces)

    async def _bytes(self) -> bytes | Refusal:
        if self._refusal is not None:
            return self._refusal
        if self._inflater is None:
            return self._data
        loop = asyncio.get_running_loop()
        data = await loop.run_in_executor(_inflating_thread(), self._inflate_rest)
        self._inflater = None
        self._data = b""
        return data

    async def _parsed(self, data: bytes) -> Any:
        if len(data) > THREAD_PARSE_BYTES:
            return await asyncio.to_thread(_parse, self._parse, data)
        return _parse(self._parse, data)

    async def message(self) -> Any:
        """The parsed message, or a :class:`Refusal`."""
        data = await self._bytes()
        if isinstance(data, Refusal):
            return data
        return await self._parsed(data)

    async def infer_request(self) -> tuple[Any, list[memoryview] | None] | Refusal:
        """(the ``ModelInferRequest`` without its raw contents, a view of each raw contents
        entry) or, when the message cannot be split, (the whole message, None); or a
        :class:`Refusal`."""
        data = await self._bytes()
        if isinstance(data, Refusal):
            return data
        split = split_raw_contents(data)
        if split is None:
            parsed = await self._parsed(data)
            return parsed if isinstance(parsed, Refusal) else (parsed, None)
        head, raws = split
        parsed = await self._parsed(head)
        return parsed if isinstance(parsed, Refusal) else (parsed, raws)


_inflater_pool: ThreadPoolExecutor | None = None


def _inflating_thread() -> ThreadPoolExecutor:
    """The one thread inflating messages past their first :data:`INLINE_INFLATE_BYTES`: one
    message at a time, so concurrent compressed messages (bombs among them) take one core
    and their limit's worth of memory at most, and the event loop keeps the other."""
    global _inflater_pool
    if _inflater_pool is None:
        _inflater_pool = ThreadPoolExecutor(1, thread_name_prefix="tritonx-grpc-inflate")
    return _inflater_pool


def _no_parse(data: bytes) -> None:
    return None


def _inflate_start(data: bytes, parse: Callable[[bytes], Any], limit: Limit) -> Any:
    """A message starting like a compressed one: inflate its start here; the parsed message
    when that was all of it, else a :class:`Received` holding the inflater."""
    algorithm = compression_of(data)
    if algorithm is None:
        return _plain(data, parse, limit)
    inflater = zlib.decompressobj(31 if algorithm == "gzip" else 15)
    first = min(INLINE_INFLATE_BYTES, limit.size)
    try:
        head = inflater.decompress(data, first + 1)
    except zlib.error:
        if algorithm == "deflate":  # only looked like a zlib stream
            return _plain(data, parse, limit)
        return Received.refused(_corrupt(algorithm))
    if inflater.eof:
        if inflater.unused_data:
            return Received.refused(_corrupt(algorithm))
        if len(head) > limit.size:
            return Received.refused(too_large(limit))
        return _parsed_or_refused(parse, head)
    if len(head) <= first:  # the input ended before the stream did
        if algorithm == "deflate":
            return _plain(data, parse, limit)
        return Received.refused(_corrupt(algorithm))
    if first == limit.size:
        return Received.refused(too_large(limit))
    return Received(head, parse, limit, inflater, algorithm)


def _parsed_or_refused(parse: Callable[[bytes], Any], data: bytes) -> Any:
    parsed = _parse(parse, data)
    return Received.refused(parsed) if isinstance(parsed, Refusal) else parsed


def _plain(data: bytes, parse: Callable[[bytes], Any], limit: Limit) -> Any:
    if len(data) > INLINE_PARSE_BYTES:
        return Received(data, parse, limit)
    return _parsed_or_refused(parse, data)


def deserializer(parse: Callable[[bytes], Any], limit: Limit) -> Callable[[bytes], Any]:
    """The request deserializer of an RPC whose messages ``parse`` parses (a message class's
    ``FromString``): the parsed message, or a :class:`Received` for its handler."""
    maybe_compressed = _MAYBE_COMPRESSED

    def deserialize(data: bytes) -> Any:
        if data and maybe_compressed[data[0]]:
            return _inflate_start(data, parse, limit)
        if len(data) > INLINE_PARSE_BYTES:
            return Received(data, parse, limit)
        try:
            return parse(data)
        except Exception as exc:
            return Received.refused(_unparsable(exc))

    return deserialize


def receiving(handler: grpc.RpcMethodHandler, limit: Limit) -> grpc.RpcMethodHandler:
    """``handler`` with :func:`deserializer`; a unary-unary one also with a behavior that
    finishes a :class:`Received` message (answering a refusal itself) before calling the
    original. The behaviors of other kinds must handle :class:`Received` messages.
    """
    if handler.request_deserializer is None:
        return handler
    deserialize = deserializer(handler.request_deserializer, limit)
    inner = handler.unary_unary
    if inner is None:
        return handler._replace(request_deserializer=deserialize)

    async def unary_unary(request: Any, context: CallContext) -> Any:
        if type(request) is Received:
            request = await request.message()
            if type(request) is Refusal:
                return request.fail(context)
        return await inner(request, context)

    return handler._replace(request_deserializer=deserialize, unary_unary=unary_unary)
