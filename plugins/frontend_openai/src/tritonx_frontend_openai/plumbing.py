"""The request plumbing every endpoint shares: reading and checking the JSON body, finding the
model version (:class:`.catalog.Catalog` and the pipeline's ``resolve_loaded``, loading it on
demand) and answering in JSON.

:class:`Plumbing` holds what the handlers need of the frontend (the server, its settings, the
catalog, the request pipeline); :class:`.api.API` is one.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, cast

import orjson
from aiohttp import web

import tritonx_frontend_openai.validation as v
from tritonx import Code, ServerHandle, TritonXError
from tritonx.pipeline import Headers, Pipeline
from tritonx_frontend_openai.catalog import Catalog, Entry
from tritonx_frontend_openai.errors import from_triton, model_not_found
from tritonx_frontend_openai.generation import Context
from tritonx_frontend_openai.options import Options

#: OpenAI's limit on the inputs of one embeddings request, and on the prompts of one
#: completions request
MAX_EMBEDDING_INPUTS = 2048


def json_response(data: Any, headers: Mapping[str, str] | None = None) -> web.Response:
    """A 200 answer with ``data`` as JSON (numpy arrays as lists)."""
    return web.Response(
        body=orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY),
        content_type="application/json",
        headers=headers,
    )


class Plumbing:
    """What the handlers of one frontend share.

    :param server: the server's handle.
    :param options: the frontend's settings.
    :param catalog: the served model ids.
    """

    def __init__(self, server: ServerHandle, options: Options, catalog: Catalog) -> None:
        self.server = server
        self.options = options
        self.catalog = catalog
        self._pipeline: Pipeline | None = None

    @property
    def pipeline(self) -> Pipeline:
        """The server's request pipeline (``ServerHandle.pipeline``), made on first use."""
        if self._pipeline is None:
            self._pipeline = self.server.pipeline()
        return self._pipeline

    async def read_body(self, request: web.Request, known: frozenset[str]) -> dict[str, Any]:
        """The request's JSON object; OpenAI's 400 for a field not in ``known``."""
        body = v.parse_body(await request.read())
        v.check_fields(body, known)
        return body

    async def resolve(
        self, request: web.Request, model_id: str, kind: str
    ) -> tuple[Context, Entry]:
        """The pipeline's model lookup for ``model_id`` (loading it on demand) and its
        entry; OpenAI's 404 for an id not served."""
        model = self.catalog.model_for(model_id)
        try:
            served, _ = await self.pipeline.resolve_loaded(model, "", streaming=True)
        except TritonXError as exc:
            if exc.code is Code.NOT_FOUND:
                raise model_not_found(model_id) from None
            raise from_triton(exc) from None
        entry = self.catalog.entry(model_id, served.config, kind)
        prefix = "embd" if kind == "embed" else "cmpl"
        # aiohttp's headers are what the pipeline reads (get, in, items), though mypy does
        # not match CIMultiDictProxy's overloaded get with the Headers protocol
        headers = cast(Headers, request.headers)
        ctx = Context(self.pipeline, served, headers, f"{prefix}-{uuid.uuid4().hex}")
        return ctx, entry


def texts(body: Mapping[str, Any], field: str) -> list[str]:
    """``body[field]``, a string or an array of strings, as a list (an empty array: []);
    absent, token ids or another type: OpenAI's 400."""
    value = body.get(field)
    if value is None:
        raise v.missing(field)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return value
    if isinstance(value, list) and all(isinstance(t, int | list) for t in value):
        raise v.unsupported(field, "token ids are not supported, send text")
    raise v.wrong_type(field, "a string or an array of strings", value)


__all__ = ["MAX_EMBEDDING_INPUTS", "Plumbing", "json_response", "texts"]
