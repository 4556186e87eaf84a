"""SageMaker's multi-model endpoint (MME) API, as Triton's SageMaker server serves it.

SageMaker downloads each model to ``/opt/ml/models/<hash>/model`` and asks the container:

* ``POST /models`` with ``{"model_name": "<hash>", "url": "/opt/ml/models/<hash>/model"}``:
  register the folder as a model repository (its model served under the name in the
  ``X-Amzn-SageMaker-Target-Model`` header, else ``model_name``) and load it. 200 (no body);
  409 when the name is already loaded; 507 when the model does not fit (an out-of-memory
  error, or tritonx's ``--max-loaded-models`` / ``--model-memory-budget`` refusal); 400 for
  anything else, with Triton's ``{"error": ...}`` body.
* ``GET /models``: ``{"models": [{"modelName": ..., "modelUrl": ...}]}``, the loaded models
  that are ready; ``GET /models/<name>``: one of them (404 when not loaded).
* ``POST /models/<name>/invoke``: inference on it (KServe v2 JSON or SageMaker's binary
  form); an error is 400, or 507 for an out-of-memory one.
* ``DELETE /models/<name>``: unload it with its dependents and unregister its repository
  (200; 404 when not loaded).

The folder layout is Triton's: ``<url>/config.pbtxt`` (the url is the model's own folder), or
model folders inside ``<url>`` (the ensemble among them is the one served, else the only
one).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from dataclasses import dataclass
from urllib.parse import quote

from aiohttp import web

import tritonx
from tritonx.errors import Code, TritonXError
from tritonx_frontend_sagemaker.contract import (
    TARGET_MODEL_HEADER,
    empty_response,
    error_response,
    is_out_of_memory,
)

log = logging.getLogger("tritonx.frontend.sagemaker")

#: Largest ``POST /models`` body: ``{"model_name": ..., "url": ...}`` is a few hundred bytes.
MAX_LOAD_BODY = 64 * 1024

#: Most non-empty HTTP chunks of a chunked ``POST /models`` body (Triton's
#: ``kMaxChunkedChunks``, a limit of its HTTP server on every request).
MAX_CHUNKS = 1 << 16

#: Longest model name (SageMaker's TargetModel is at most 1024 characters).
MAX_NAME_LENGTH = 1024

#: Longest ``url`` (Linux's PATH_MAX).
MAX_URL_LENGTH = 4096

#: Most entries looked at in a model's folder when finding its model (an archive holds a
#: model, or an ensemble and its few composing models).
MAX_FOLDER_ENTRIES = 4096

#: Bytes of each ``config.pbtxt`` read when looking for the ensemble.
MAX_CONFIG_BYTES = 1 << 20

#: The default root of the folders SageMaker gives (``<root>/<hash>/model``).
DEFAULT_ROOT = "/opt/ml/models"

_ENSEMBLE = re.compile(r'platform:(\s)*"ensemble"')
_NAME_PART = r"[0-9A-Za-z._]+"


@dataclass(frozen=True)
class LoadedModel:
    """A model loaded through ``POST /models``.

    :ivar name: the ``model_name`` of the load (the name in ``/models/<name>``).
    :ivar url: the repository registered for it (Triton's ``modelUrl``).
    :ivar served: the name the server serves it under (the load's target model).
    """

    name: str
    url: str
    served: str


class Refused(Exception):
    """A request answered with ``response`` (an error body, or none)."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


def _bad(message: str) -> Refused:
    return Refused(error_response(message, 400))


def check_name(value: object, what: str) -> str:
    """``value`` as a model name: a non-empty string of at most :data:`MAX_NAME_LENGTH`
    characters, without ``/``, ``\\`` or control characters, and not ``.`` or ``..``.

    :raises Refused: 400 otherwise.
    """
    if not isinstance(value, str) or not value:
        raise _bad(f'"{what}" must be a non-empty string')
    if len(value) > MAX_NAME_LENGTH:
        raise _bad(f'"{what}" is longer than {MAX_NAME_LENGTH} characters')
    if value in (".", "..") or any(c in "/\\" or ord(c) < 32 or ord(c) == 127 for c in value):
        raise _bad(f"invalid {what} '{value}': '/', '\\' and control characters are not allowed")
    return value


async def read_json_body(request: web.Request, limit: int, timeout: float) -> object:
    """The request's body as JSON, at most ``limit`` bytes and (chunked) at most
    :data:`MAX_CHUNKS` non-empty HTTP chunks, each piece within ``timeout`` seconds (0: no
    limit).

    :raises Refused: 400 for a body over either bound (the connection is then closed: the
        rest is not read), not JSON, or stalled.
    """
    declared = request.content_length
    if declared is not None and declared > limit:
        raise _too_large(declared, limit)
    pieces: list[bytes] = []
    size = chunks = 0
    while True:
        try:
            async with asyncio.timeout(timeout or None):
                piece, chunk_end = await request.content.readchunk()
        except TimeoutError:
            raise _closing("timed out reading the request body") from None
        if chunk_end:
            chunks += 1
            if chunks > MAX_CHUNKS:
                raise _closing(
                    f"Chunked request body exceeds maximum of {MAX_CHUNKS} non-empty chunks. "
                    "Send fewer or larger HTTP chunks."
                )
        elif not piece:
            break
        size += len(piece)
        if size > limit:
            raise _too_large(size, limit)
        pieces.append(piece)
    body = b"".join(pieces)
    if not body:
        return {}
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(f"failed to parse the request JSON buffer: {exc}") from None


def _closing(message: str) -> Refused:
    """A 400 after which the connection is closed (the rest of the body is not read)."""
    refused = _bad(message)
    refused.response.force_close()
    return refused


def _too_large(size: int, limit: int) -> Refused:
    return _closing(
        f"request JSON size of {size} bytes exceeds the maximum allowed input size of {limit} bytes"
    )


@dataclass(frozen=True)
class Placement:
    """Where a model's folder is registered: the repository and the subfolder served."""

    repository: str
    subfolder: str


def place(url: str, root: str) -> Placement:
    """Find the model in the folder ``url`` (absolute and normalized), as Triton does: a
    ``config.pbtxt`` in ``url`` makes ``url`` the model's own folder (the repository is its
    parent); else the model folders in it form the repository and the ensemble among them is
    the one served (else the only one; of several, the first by name). Blocking: run it in a
    worker thread.

    :raises Refused: 400 when ``url`` is not a folder, has no model folder or too many
        entries.
    """
    if not os.path.isdir(url):
        raise _bad(f"failed to register '{url}', repository not found")
    if os.path.isfile(os.path.join(url, "config.pbtxt")):
        parent, own = os.path.split(url)
        return Placement(parent, own)
    folders: list[str] = []
    ensembles: list[str] = []
    with os.scandir(url) as entries:
        for count, entry in enumerate(entries, 1):
            if count > MAX_FOLDER_ENTRIES:
                raise _bad(f"'{url}' holds more than {MAX_FOLDER_ENTRIES} entries")
            if not entry.is_dir(follow_symlinks=False):
                continue
            folders.append(entry.name)
            config_path = os.path.join(entry.path, "config.pbtxt")
            if not os.path.isfile(config_path):  # (a pipe or a device would block the read)
                continue
            try:
                with open(config_path, "rb") as config:
                    text = config.read(MAX_CONFIG_BYTES).decode("utf-8", "replace")
            except OSError:
                continue
            if _ENSEMBLE.search(text):
                log.info("SageMaker front-end detected an Ensemble config at path: %s", entry.path)
                ensembles.append(entry.name)
    chosen = sorted(ensembles or folders)
    if not chosen:
        raise _bad(f"no model found in '{url}'")
    if len(chosen) > 1:
        log.warning("several model folders in '%s': serving '%s'", url, chosen[0])
    return Placement(url, chosen[0])


def check_url(value: object, root: str) -> str:
    """The ``url`` of a load as an absolute, normalized path of the form
    ``<root>/<hash>/model[/<subdir>]`` (Triton's, with ``root`` ``/opt/ml/models``).

    :raises Refused: 400 with Triton's text otherwise.
    """
    if not isinstance(value, str) or not value:
        raise _bad('"url" must be a non-empty string')
    if len(value) > MAX_URL_LENGTH or "\0" in value:
        raise _bad(f'Invalid "url": longer than {MAX_URL_LENGTH} bytes or holding a NUL')
    path = os.path.abspath(value)  # (normalized: no '.', '..' or repeated '/')
    real = os.path.realpath(path)
    for candidate in (path, real):
        if candidate.startswith(("/dev/", "/proc/", "/sys/")) or candidate in (
            "/dev",
            "/proc",
            "/sys",
        ):
            raise _bad(
                f'Invalid URL: {value}. "url" property value cannot start with /dev/, /proc/, '
                "or /sys/."
            )
    pattern = rf"{re.escape(root.rstrip('/'))}/{_NAME_PART}/model(?:/{_NAME_PART})?"
    if re.fullmatch(pattern, path) is None:
        raise _bad(
            f"Invalid \"url\" '{value}': expected a path of the form "
            f"{root.rstrip('/')}/<hash>/model[/<subdir>]"
        )
    return path


class MultiModelEndpoint:
    """The models loaded through ``POST /models`` and the handlers of the MME routes.

    :param server: the server's handle.
    :param root: the folder SageMaker's model folders are in (``/opt/ml/models``).
    :param body_timeout: seconds a load's body may stall (``--http-body-timeout-secs``).
    """

    def __init__(self, server: tritonx.ServerHandle, root: str, body_timeout: float) -> None:
        self.server = server
        self.root = root
        self.body_timeout = body_timeout
        self.models: dict[str, LoadedModel] = {}
        #: names being loaded or unloaded (a second load of one is 409, an unload 404)
        self.busy: set[str] = set()

    def list_models(self) -> web.Response:
        """``GET /models``: the loaded models that are ready."""
        listed = [
            {"modelName": m.name, "modelUrl": m.url}
            for m in self.models.values()
            if self.server.model_ready(m.served)
        ]
        return _json({"models": listed})

    def get_model(self, name: str) -> web.Response:
        """``GET /models/<name>``."""
        model = self.models.get(name)
        if model is None:
            return empty_response(404)
        return _json({"modelName": model.name, "modelUrl": model.url})

    def target(self, name: str) -> LoadedModel | None:
        """The model ``/models/<name>/invoke`` runs, or None when ``name`` is not loaded."""
        return self.models.get(name)

    async def load(self, request: web.Request) -> web.Response:
        """``POST /models``: register the model's folder and load the model."""
        try:
            body = await read_json_body(request, MAX_LOAD_BODY, self.body_timeout)
            if not isinstance(body, dict):
                raise _bad("the request body must be a JSON object")
            name = check_name(body.get("model_name"), "model_name")
            url = check_url(body.get("url"), self.root)
            header = request.headers.get(TARGET_MODEL_HEADER)
            served = name if header is None else check_name(header, TARGET_MODEL_HEADER)
        except Refused as refused:
            return refused.response
        log.info("Loading SageMaker TargetModel: %s", served)
        if name in self.models or name in self.busy:
            return error_response(f"model '{name}' is already loaded", 409)
        self.busy.add(name)
        try:
            return await self._load(name, url, served)
        finally:
            self.busy.discard(name)

    async def _load(self, name: str, url: str, served: str) -> web.Response:
        try:
            placement = await asyncio.to_thread(place, url, self.root)
        except Refused as refused:
            return refused.response
        except OSError as exc:
            return error_response(f"failed to read '{url}': {exc.strerror or exc}", 400)
        try:
            await self.server.register_model_repository(
                placement.repository, {placement.subfolder: served}
            )
        except TritonXError as exc:
            return error_response(exc.message, 409 if exc.code is Code.ALREADY_EXISTS else 400)
        try:
            await self.server.load_model(served)
        except TritonXError as exc:
            await self._unregister(placement.repository)
            if exc.code is Code.ALREADY_EXISTS:
                return error_response(exc.message, 409)
            if is_out_of_memory(exc):
                log.info("SageMaker: model '%s' does not fit: answering 507", served)
                return error_response(exc.message, 507)
            return error_response(exc.message, 400)
        except BaseException:
            await self._unregister(placement.repository)
            raise
        self.models[name] = LoadedModel(name, placement.repository, served)
        return empty_response(200)

    async def _unregister(self, repository: str) -> None:
        try:
            await self.server.unregister_model_repository(repository)
        except TritonXError as exc:
            log.warning("could not unregister model repository '%s': %s", repository, exc)

    async def unload(self, name: str) -> web.Response:
        """``DELETE /models/<name>``: unload the model with its dependents, unregister its
        repository."""
        model = self.models.get(name)
        if model is None or name in self.busy:
            return empty_response(404)
        log.info("Unloading SageMaker TargetModel: %s", model.served)
        self.busy.add(name)
        try:
            try:
                await self.server.unload_model(model.served, unload_dependents=True)
            except TritonXError as exc:
                return error_response(exc.message, 400)
            del self.models[name]
            try:
                await self.server.unregister_model_repository(model.url)
            except TritonXError as exc:
                return error_response(exc.message, 400)
            return empty_response(200)
        finally:
            self.busy.discard(name)


def _json(document: object) -> web.Response:
    """A 200 answer of compact JSON, as Triton writes it."""
    return web.Response(
        body=json.dumps(document, separators=(",", ":")).encode(), content_type="application/json"
    )


def invoke_path(model: LoadedModel) -> str:
    """The KServe v2 path of an inference on ``model``."""
    return f"/v2/models/{quote(model.served, safe='')}/infer"


__all__ = [
    "LoadedModel",
    "MultiModelEndpoint",
    "Placement",
    "Refused",
    "check_name",
    "check_url",
    "invoke_path",
    "place",
    "read_json_body",
]
