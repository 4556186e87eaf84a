"""The OpenAI API's handlers, one a route: the models endpoints here, the others in their own
modules (:mod:`.completions`, :mod:`.chat_completions`, :mod:`.embeddings`). The route table,
path to handler, is :meth:`.frontend.OpenAIFrontend.make_app`.

Each handler reads and checks the body, finds the model version (:mod:`.plumbing`), writes
the model's requests (:mod:`.conventions`), runs them through the server's request pipeline
(:mod:`.generation`) and answers in OpenAI's JSON, or as server-sent events (:mod:`.sse`)
when the client streams.
"""

from __future__ import annotations

from aiohttp import web

from tritonx_frontend_openai.chat_completions import handle_chat_completions
from tritonx_frontend_openai.chat_request import CHAT_FIELDS
from tritonx_frontend_openai.completions import COMPLETION_FIELDS, handle_completions
from tritonx_frontend_openai.embeddings import EMBEDDING_FIELDS, handle_embeddings
from tritonx_frontend_openai.plumbing import json_response
from tritonx_frontend_openai.textgen import GenerationPlumbing


class API(GenerationPlumbing):
    """The handlers of one frontend (``API(server, options, catalog)``, see
    :class:`.plumbing.Plumbing`)."""

    async def list_models(self, request: web.Request) -> web.Response:
        """``GET /v1/models``: every served model id."""
        data = [entry.describe() for entry in self.catalog.listing()]
        return json_response({"object": "list", "data": data})

    async def get_model(self, request: web.Request) -> web.Response:
        """``GET /v1/models/{model}``: one served model id (OpenAI's 404 for another)."""
        return json_response(self.catalog.find(request.match_info["model"]).describe())

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/completions`` (:mod:`.completions`)."""
        return await handle_completions(self, request)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions`` (:mod:`.chat_completions`)."""
        return await handle_chat_completions(self, request)

    async def embeddings(self, request: web.Request) -> web.Response:
        """``POST /v1/embeddings`` (:mod:`.embeddings`)."""
        return await handle_embeddings(self, request)


__all__ = ["API", "CHAT_FIELDS", "COMPLETION_FIELDS", "EMBEDDING_FIELDS"]
