"""The frontend ``openai``: an aiohttp application on its own listener (default port 9000,
base path ``/v1``), started and stopped with the server.

Every answer that is not a success is OpenAI's error JSON: a body that is too large (413),
no or a wrong API key (401), an unknown path (404) or method (405), and a handler's failure
(500, logged) included. The keys are checked before the route's method: on a protected path
a request without a valid key gets 401 whatever its method (``HEAD``, ``OPTIONS``...).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import ClassVar

from aiohttp import web

import tritonx
from tritonx_frontend_openai.api import API
from tritonx_frontend_openai.auth import Auth
from tritonx_frontend_openai.catalog import Catalog
from tritonx_frontend_openai.errors import OpenAIError
from tritonx_frontend_openai.options import CONFIG_KEYS, Options

log = logging.getLogger("tritonx.frontend.openai")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class OpenAIFrontend(tritonx.AiohttpFrontend):
    """The OpenAI-compatible API (see the distribution's README)."""

    name = "openai"
    title = "OpenAI frontend"
    default_port = 9000
    base_path = "/v1"
    config_keys: ClassVar[Mapping[str, str]] = CONFIG_KEYS

    def __init__(
        self,
        server: tritonx.ServerHandle,
        settings: tritonx.ServerSettings,
        config: Mapping[str, str],
    ) -> None:
        super().__init__(server, settings, config)
        self.options = Options.parse(self.config)
        self.catalog = Catalog(server, settings, self.options)
        self.api = API(server, self.options, self.catalog)
        self.auth = Auth(self.options, self.base_path)

    def make_app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.options.max_request_size,
            middlewares=[self._errors],
            # a client that goes away cancels its handler: a stream's model request with it
            handler_args={"handler_cancellation": True},
        )
        base, api = self.base_path, self.api
        app.router.add_get(f"{base}/models", api.list_models)
        app.router.add_get(f"{base}/models/{{model:.+}}", api.get_model)
        app.router.add_post(f"{base}/completions", api.completions)
        app.router.add_post(f"{base}/chat/completions", api.chat_completions)
        app.router.add_post(f"{base}/embeddings", api.embeddings)
        return app

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if self.auth.active:  # (every method: HEAD, OPTIONS and 405s included)
                self.auth.check(request.path, request.headers)
            length = request.content_length
            if length is not None and length > self.options.max_request_size:
                raise self._too_large(length)
            return await handler(request)
        except OpenAIError as exc:
            return exc.response()
        except web.HTTPRequestEntityTooLarge:
            return self._too_large(None).response()
        except web.HTTPNotFound:
            message = f"Invalid URL ({request.method} {request.path})"
            return OpenAIError(404, message).response()
        except web.HTTPMethodNotAllowed:
            message = f"Invalid method for URL ({request.method} {request.path})"
            return OpenAIError(405, message).response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return OpenAIError(exc.status, exc.reason).response()
        except Exception:
            log.exception("OpenAI frontend: %s %s failed", request.method, request.path)
            return OpenAIError(
                500,
                "The server had an error while processing your request.",
                type="server_error",
            ).response()

    def _too_large(self, size: int | None) -> OpenAIError:
        limit = self.options.max_request_size
        what = f"Request size of {size} bytes" if size is not None else "The request body"
        return OpenAIError(
            413,
            f"{what} exceeds the maximum allowed input size of {limit} bytes "
            "(--frontend-config openai,max_request_size).",
            code="content_too_large",
        )


__all__ = ["OpenAIFrontend"]
