"""What the HTTP inference handlers share about one exchange: the request's headers as the
inference pipeline reads them (:class:`tritonx.pipeline.Headers`: trace context, forwarding)
and the sending of a traced answer."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiohttp import web

from tritonx.pipeline import Call


class RequestHeaders:
    """The headers of an aiohttp request: looked up case-insensitively; forwarded with
    their names as sent and their raw values (invalid UTF-8 replaced, as Triton's
    frontend passes bytes through)."""

    __slots__ = ("_request",)

    def __init__(self, request: web.Request) -> None:
        self._request = request

    def get(self, name: str, default: None = None, /) -> str | None:
        return self._request.headers.get(name, default)

    def __contains__(self, name: object, /) -> bool:
        return name in self._request.headers

    def __getitem__(self, name: str) -> str:
        return self._request.headers[name]

    def keys(self) -> Iterable[str]:
        return self._request.headers.keys()

    def items(self) -> Iterable[tuple[str, str | bytes]]:
        return ((k.decode("latin-1"), v) for k, v in self._request.raw_headers)


class FieldHeaders:
    """The headers the ``/infer`` fast path framed (lower-case names, raw values). The fast
    path serves no traced request and forwards no header: only ``get`` is read."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[bytes, bytes]) -> None:
        self._fields = fields

    def get(self, name: str, default: None = None, /) -> str | None:
        value = self._fields.get(name.encode("latin-1"))
        return default if value is None else value.decode("latin-1")

    def __contains__(self, name: object, /) -> bool:
        return isinstance(name, str) and name.encode("latin-1") in self._fields

    def items(self) -> Iterable[tuple[str, str | bytes]]:
        return ((k.decode("latin-1"), v) for k, v in self._fields.items())


async def send_traced(request: web.Request, reply: web.StreamResponse, call: Call[Any]) -> None:
    """Send ``reply`` now, so that the traced ``call``'s send stamps frame the write
    (:meth:`tritonx.pipeline.Call.send`)."""
    await call.send(_send_whole(request, reply))


async def _send_whole(request: web.Request, reply: web.StreamResponse) -> None:
    await reply.prepare(request)
    await reply.write_eof()


__all__ = ["FieldHeaders", "RequestHeaders", "send_traced"]
