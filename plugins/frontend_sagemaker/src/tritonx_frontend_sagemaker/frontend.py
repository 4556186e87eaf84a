"""The frontend ``sagemaker``: Amazon SageMaker's serving contract on a listener of its own
(default port 8080), as Triton's ``--allow-sagemaker=true`` serves it.

Routes (matched on the raw path, as Triton does; any other path answers 400 without a body):

* ``GET /ping``: 200 when the server is ready (``SAGEMAKER_TRITON_PING_MODE=ready``, the
  default) or live (``live``), else 400.
* ``POST /invocations``: the default model (``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME``):
  KServe v2 inference (``SAGEMAKER_TRITON_INFERENCE_TYPE=infer``, the default), or Triton's
  ``generate`` / ``generate_stream``. The body is KServe v2 JSON, or SageMaker's binary form
  (``Content-Type: application/vnd.sagemaker-triton.binary+json;json-header-size=<n>``: a
  JSON header of ``n`` bytes, then the tensors' bytes); an answer with binary outputs comes
  in that form too.
* The multi-model endpoint API (:mod:`tritonx_frontend_sagemaker.mme`): ``GET /models``,
  ``POST /models``, ``GET /models/<m>``, ``DELETE /models/<m>``, ``POST /models/<m>/invoke``.

Inference goes through the server's KServe v2 HTTP handlers (:class:`tritonx.KServeHTTP`):
the same validation, limits (``--http-max-input-size``), statistics and traces as the HTTP
port. Inference bodies are never compressed (Triton's SageMaker server reads and writes
identity bodies only); a ``POST /models`` body is read by aiohttp, bounded.
``--http-restricted-api`` applies as in Triton: ``/ping`` is ``health``, inference is
``inference``, the model management routes are ``model-repository``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import ClassVar
from urllib.parse import quote

from aiohttp import web

import tritonx
from tritonx.errors import TritonXError, invalid_arg
from tritonx_frontend_sagemaker.contract import (
    BINARY_MIME_TYPE,
    HEADER_LENGTH,
    Environment,
    binary_header_size,
    empty_response,
    error_response,
    is_out_of_memory,
    restriction_refusal,
)
from tritonx_frontend_sagemaker.mme import (
    DEFAULT_MAX_MODEL_NAMES,
    DEFAULT_MAX_MODELS,
    DEFAULT_ROOT,
    MAX_TREE_ENTRIES,
    MultiModelEndpoint,
    invoke_path,
)

log = logging.getLogger("tritonx.frontend.sagemaker")

#: Triton's pattern of the multi-model endpoint routes: ``/models``, ``/models/<m>``,
#: ``/models/<m>/invoke``.
_MODELS = re.compile(r"/models(?:/)?([^/]+)?(/invoke)?")

CONFIG_KEYS: Mapping[str, str] = {
    "thread_count": (
        "Triton's --sagemaker-thread-count: a positive integer, accepted for compatibility "
        "(the frontend serves on the server's event loop; the value is checked, not used)"
    ),
    "models_root": (
        "the folder the multi-model endpoint's model urls must be in, as "
        f"<models_root>/<hash>/model[/<subdir>] (default {DEFAULT_ROOT}, SageMaker's)"
    ),
    "max_models": (
        "the most models the multi-model endpoint holds (loaded or loading) at once; a load "
        f"past it is answered 507 (default {DEFAULT_MAX_MODELS})"
    ),
    "max_model_names": (
        "the most model names the multi-model endpoint makes over the server's life (the "
        "server keeps an unloaded model's name in its repository index); a load bringing a "
        f"new name past it is answered 507 (default {DEFAULT_MAX_MODEL_NAMES})"
    ),
    "max_model_files": (
        "the most files, folders and links (at any depth) of a model's folder a multi-model "
        f"endpoint load looks through; a larger folder is refused, 400 (default {MAX_TREE_ENTRIES})"
    ),
}


def _positive(config: Mapping[str, str], key: str, default: int) -> int:
    """``--frontend-config sagemaker,<key>`` as a positive integer (``default`` unset)."""
    text = config.get(key, str(default))
    if not (text.isascii() and text.isdigit() and int(text) > 0):
        raise invalid_arg(f"--frontend-config sagemaker,{key}={text}: expected a positive integer")
    return int(text)


class SageMakerFrontend(tritonx.AiohttpFrontend):
    """Amazon SageMaker's serving contract (see the module docstring).

    :ivar environment: what it read from ``SAGEMAKER_TRITON_*`` at construction.
    :ivar mme: the multi-model endpoint's state and handlers.
    """

    name = "sagemaker"
    title = "Sagemaker HTTPService"
    default_port = 8080
    config_keys: ClassVar[Mapping[str, str]] = CONFIG_KEYS

    def __init__(
        self,
        server: tritonx.ServerHandle,
        settings: tritonx.ServerSettings,
        config: Mapping[str, str],
    ) -> None:
        super().__init__(server, settings, config)
        _positive(self.config, "thread_count", 8)
        max_models = _positive(self.config, "max_models", DEFAULT_MAX_MODELS)
        max_names = _positive(self.config, "max_model_names", DEFAULT_MAX_MODEL_NAMES)
        max_files = _positive(self.config, "max_model_files", MAX_TREE_ENTRIES)
        root = self.config.get("models_root", DEFAULT_ROOT)
        if not root.startswith("/"):
            raise invalid_arg(
                f"--frontend-config sagemaker,models_root={root}: expected an absolute path"
            )
        self.environment = Environment.read()
        self.restrictions = dict(settings.http_restricted_api)
        self.mme = MultiModelEndpoint(
            server, root, settings.http_body_timeout_secs, max_models, max_names, max_files
        )
        self._kserve: tritonx.KServeHTTP | None = None

    @property
    def kserve(self) -> tritonx.KServeHTTP:
        """The server's KServe v2 HTTP handlers."""
        if self._kserve is None:
            self._kserve = self.server.kserve_http()
        return self._kserve

    async def stop(self, timeout: float) -> None:
        """Stop listening, then remove the multi-model endpoint's private folders."""
        try:
            await super().stop(timeout)
        finally:
            self.mme.close()

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.http_max_input_size)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        """Route a request by its raw path, as Triton's SageMaker server does."""
        path = request.raw_path.split("?", 1)[0]
        log.debug("SageMaker request: %s %s", request.method, path)
        if path == "/ping":
            return await self.ping(request)
        if path == "/invocations":
            return await self.invocations(request)
        match = _MODELS.fullmatch(path)
        if match is None:
            return _unread(request, empty_response(400))
        name, action = match.group(1) or "", match.group(2) or ""
        method = request.method
        if method == "POST" and action:
            return await self.invoke(request, name)
        if method not in ("GET", "POST", "DELETE"):
            return _unread(request, empty_response(400))
        refused = restriction_refusal(self.restrictions, "model-repository", request)
        if refused is not None:
            return _unread(request, refused)
        if method == "GET":
            return self.mme.get_model(name) if name else self.mme.list_models()
        if method == "POST":
            return _unread(request, await self.mme.load(request))
        return _unread(request, await self.mme.unload(name))

    async def ping(self, request: web.Request) -> web.StreamResponse:
        """``/ping``: the server's readiness or liveness (``SAGEMAKER_TRITON_PING_MODE``)."""
        refused = restriction_refusal(self.restrictions, "health", request)
        if refused is not None:
            return _unread(request, refused)
        return await self.kserve.handle(request, f"/v2/health/{self.environment.ping_mode}")

    async def invocations(self, request: web.Request) -> web.StreamResponse:
        """``/invocations``: the default model's inference or generation."""
        refused = restriction_refusal(self.restrictions, "inference", request)
        if refused is not None:
            return _unread(request, refused)
        model = quote(self.environment.default_model, safe="")
        kind = self.environment.inference_type
        if kind != "infer":
            return await self.kserve.handle(request, f"/v2/models/{model}/{kind}")
        return await self.infer(request, f"/v2/models/{model}/infer", multi_model=False)

    async def invoke(self, request: web.Request, name: str) -> web.StreamResponse:
        """``POST /models/<name>/invoke``: inference on a model the endpoint loaded."""
        model = self.mme.target(name)
        if model is None:
            return _unread(request, empty_response(404))
        refused = restriction_refusal(self.restrictions, "inference", request)
        if refused is not None:
            return _unread(request, refused)
        log.info("Invoking SageMaker TargetModel: %s", model.served)
        return await self.infer(request, invoke_path(model), multi_model=True)

    async def infer(
        self, request: web.Request, path: str, *, multi_model: bool
    ) -> web.StreamResponse:
        """KServe v2 inference at ``path`` with SageMaker's content types and status codes.

        ``multi_model``: every failure is 400, or 507 when its message holds one of
        Triton's out-of-memory substrings, as Triton answers ``/models/<m>/invoke``;
        otherwise the HTTP port's codes, as Triton answers ``/invocations`` (its HTTP
        server's ``HandleInfer`` with the HTTP port's response callback).
        """
        encoding = request.headers.get("Content-Encoding", "")
        if encoding.strip().lower() not in ("", "identity"):
            return _unread(
                request,
                error_response(
                    f"unsupported Content-Encoding '{encoding}': SageMaker request bodies "
                    "are not compressed",
                    400,
                ),
            )
        # (SageMaker answers are not compressed)
        headers: dict[str, str | None] = {"Accept-Encoding": "identity"}
        length = request.content_length
        try:
            size = binary_header_size(request.headers.get("Content-Type"), length)
        except TritonXError as exc:
            return _unread(request, error_response(exc.message, 400))
        if size is not None:
            headers[HEADER_LENGTH] = str(size)
        elif HEADER_LENGTH in request.headers:
            headers[HEADER_LENGTH] = None  # (ignored, as Triton: a JSON body is all JSON)
        response = await self.kserve.handle(request, path, headers=headers)
        if response.prepared:
            return response
        if response.status < 400:
            header = response.headers.pop(HEADER_LENGTH, None)
            response.headers["Content-Type"] = (
                "application/json" if header is None else BINARY_MIME_TYPE + header
            )
            return response
        if multi_model:
            response.set_status(507 if is_out_of_memory(_error_message(response)) else 400)
        response.headers["Content-Type"] = "application/json"
        return response


def _error_message(response: web.StreamResponse) -> str:
    """The message of Triton's ``{"error": ...}`` body (empty when there is none)."""
    body = response.body if isinstance(response, web.Response) else None
    if not isinstance(body, bytes | bytearray):
        return ""
    try:
        parsed = json.loads(body)
    except ValueError:
        return ""
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return error if isinstance(error, str) else ""


def _unread(request: web.Request, response: web.Response) -> web.Response:
    """``response``, closing the connection after it when the request's body was not read
    to its end: a refused client's body is not read on (nor waited for)."""
    if request.body_exists and not request.content.is_eof():
        response.force_close()
        # tritonx's listener would otherwise drain the rest for aiohttp's lingering time
        close_after_response = getattr(request.protocol, "close_after_response", None)
        if close_after_response is not None:
            close_after_response()
    return response
