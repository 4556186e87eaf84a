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

A load's folder may come from someone the operator does not trust (a model archive), and its
request from a client of the port; so, beyond Triton's checks:

* the url must resolve (symbolic links followed) inside ``<models_root>/<hash>``; every file
  and link in its folder is looked at (at most ``max_model_files`` entries): a link
  that leads outside the folder, or anything but a regular file or a folder (a FIFO, a
  device), is refused (400);
* no name a load brings (the served name, and in the folder form the names of its other
  model folders) may be one the server already knows (its repositories' models, another
  load's): 409; so ``DELETE`` and ``invoke`` act only on what the load registered;
* a model's own folder is registered through a private folder holding only a link to it,
  so that its sibling folders are never served;
* at most ``max_models`` models at once, and at most ``max_model_names`` names made over the
  endpoint's life (the server keeps an unloaded model's name in its index): past either,
  507 (no room);
* a failed load unloads what it loaded and unregisters its repository.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
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

#: Bytes of all the ``config.pbtxt`` files read by one load when looking for the ensemble
#: (a real one is kilobytes).
MAX_PLACE_BYTES = 4 << 20

#: Default most entries (files, folders, links, at any depth) of a model's folder a load
#: looks at before registering it (``max_model_files``).
MAX_TREE_ENTRIES = 1 << 16

#: Default most models loaded (or loading) through the endpoint at once (``max_models``).
DEFAULT_MAX_MODELS = 1000

#: Default most model names the endpoint may make over its life (``max_model_names``).
DEFAULT_MAX_MODEL_NAMES = 4096

#: The default root of the folders SageMaker gives (``<root>/<hash>/model``).
DEFAULT_ROOT = "/opt/ml/models"

_ENSEMBLE = re.compile(rb'platform:\s*"ensemble"')
_NAME_PART = r"[0-9A-Za-z._]+"


@dataclass(frozen=True)
class LoadedModel:
    """A model loaded through ``POST /models``.

    :ivar name: the ``model_name`` of the load (the name in ``/models/<name>``).
    :ivar url: Triton's ``modelUrl``: the repository Triton would register for it.
    :ivar served: the name the server serves it under (the load's target model).
    :ivar repository: the repository registered for it.
    :ivar names: every model name the registration brings (``served``, and the other model
        folders of a folder-form load).
    :ivar private: the private folder made for it (removed with it), or "".
    """

    name: str
    url: str
    served: str
    repository: str = ""
    names: frozenset[str] = field(default_factory=frozenset)
    private: str = ""


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
    if value in (".", "..") or not value.isprintable() or any(c in "/\\" for c in value):
        # (not printable: control characters, lone surrogates of undecodable bytes, ...)
        raise _bad(
            f"invalid {what} '{value}': '/', '\\', control characters and other unprintable "
            "characters are not allowed"
        )
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
    except RecursionError:
        raise _bad("failed to parse the request JSON buffer: nested too deeply") from None


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
    """Where a model's folder is registered: the repository and the subfolder served.

    :ivar repository: the folder Triton registers (a model's own folder's parent, or the
        url): Triton's ``modelUrl``.
    :ivar subfolder: the model folder served.
    :ivar own: whether the url is the model's own folder (``config.pbtxt`` in it).
    :ivar folders: the model folders the repository holds (in the folder form).
    """

    repository: str
    subfolder: str
    own: bool = False
    folders: tuple[str, ...] = ()


def _is_ensemble(data: bytes) -> bool:
    """Whether ``data`` holds ``platform:`` then white space then ``"ensemble"`` (Triton's
    pattern; without its capture group the search is linear, about 10 ms per MiB at worst)."""
    return _ENSEMBLE.search(data) is not None


def _read_config(path: str, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of the regular file ``path`` (None when it is not one, or
    cannot be read); a FIFO is opened without waiting, and neither it nor a device is read.
    (:func:`check_tree` has checked that links stay inside the model's folder.)"""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as config:
            return config.read(limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def place(url: str, root: str) -> Placement:
    """Find the model in the folder ``url`` (absolute and normalized), as Triton does: a
    ``config.pbtxt`` in ``url`` makes ``url`` the model's own folder (the repository is its
    parent); else the model folders in it form the repository and the ensemble among them is
    the one served (else the only one; of several, the first by name). At most
    :data:`MAX_CONFIG_BYTES` of each ``config.pbtxt`` and :data:`MAX_PLACE_BYTES` in all are
    read. Blocking: run it in a worker thread.

    :raises Refused: 400 when ``url`` is not a folder, has no model folder, too many
        entries, or more configuration bytes than the budget.
    """
    if not os.path.isdir(url):
        raise _bad(f"failed to register '{url}', repository not found")
    if os.path.isfile(os.path.join(url, "config.pbtxt")):
        parent, own = os.path.split(url)
        return Placement(parent, own, own=True, folders=(own,))
    folders: list[str] = []
    ensembles: list[str] = []
    budget = MAX_PLACE_BYTES
    with os.scandir(url) as entries:
        for count, entry in enumerate(entries, 1):
            if count > MAX_FOLDER_ENTRIES:
                raise _bad(f"'{url}' holds more than {MAX_FOLDER_ENTRIES} entries")
            # a link to a folder is a model too, as the repository lists it (check_tree has
            # kept every link inside the folder)
            if not entry.is_dir() or entry.name.startswith("."):
                continue
            folders.append(entry.name)
            data = _read_config(os.path.join(entry.path, "config.pbtxt"), MAX_CONFIG_BYTES + 1)
            if data is None:
                continue
            if len(data) > MAX_CONFIG_BYTES:
                raise _bad(f"'{entry.path}/config.pbtxt' is larger than {MAX_CONFIG_BYTES} bytes")
            budget -= len(data)
            if budget < 0:
                raise _bad(
                    f"the model configurations in '{url}' are larger than {MAX_PLACE_BYTES} "
                    "bytes in all"
                )
            if _is_ensemble(data):
                log.info("SageMaker front-end detected an Ensemble config at path: %s", entry.path)
                ensembles.append(entry.name)
    chosen = sorted(ensembles or folders)
    if not chosen:
        raise _bad(f"no model found in '{url}'")
    if len(chosen) > 1:
        log.warning("several model folders in '%s': serving '%s'", url, chosen[0])
    return Placement(url, chosen[0], folders=tuple(sorted(folders)))


def check_tree(folder: str, shown: str, limit: int = MAX_TREE_ENTRIES) -> None:
    """Refuse a model folder (resolved: no links in its path) the load must not read:
    anything in it (at most ``limit`` entries, at any depth: more is refused) that is not a
    regular file, a folder or a link, or a link that leads outside ``folder`` or to
    anything but a regular file or a folder. ``shown``: the folder as the client named it.
    Blocking: run it in a worker thread.

    :raises Refused: 400.
    """
    count = 0
    pending = [folder]
    while pending:
        current = pending.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    count += 1
                    if count > limit:
                        raise _bad(f"'{shown}' holds more than {limit} files and folders")
                    if _check_entry(entry, folder, shown):
                        pending.append(entry.path)
        except OSError as exc:
            raise _bad(f"failed to read '{shown}': {exc.strerror or exc}") from None


def _check_entry(entry: os.DirEntry[str], folder: str, shown: str) -> bool:
    """Whether ``entry`` (in the model folder ``folder``) is a folder to walk (False for a
    regular file, or a link inside ``folder``). :raises Refused: see :func:`check_tree`."""
    if entry.is_dir(follow_symlinks=False):
        return True
    if entry.is_file(follow_symlinks=False):
        return False
    where = os.path.join(shown, os.path.relpath(entry.path, folder))
    if entry.is_symlink():
        target = os.path.realpath(entry.path)
        if os.path.commonpath((target, folder)) != folder:
            raise _bad(f"'{where}' is a symbolic link that leads outside of '{shown}'")
        try:
            mode = os.stat(target).st_mode
        except OSError:
            return False  # (a dangling link: reading it fails as a missing file would)
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            return False  # (a folder inside this one is walked there)
    raise _bad(f"'{where}' is not a regular file or a folder")


def check_url(value: object, root: str) -> str:
    """The ``url`` of a load as an absolute, normalized path of the form
    ``<root>/<hash>/model[/<subdir>]`` (Triton's, with ``root`` ``/opt/ml/models``).

    :raises Refused: 400 with Triton's text otherwise.
    """
    if not isinstance(value, str) or not value:
        raise _bad('"url" must be a non-empty string')
    if len(value) > MAX_URL_LENGTH or "\0" in value:
        raise _bad(f'Invalid "url": longer than {MAX_URL_LENGTH} bytes or holding a NUL')
    if not value.isprintable():
        raise _bad('Invalid "url": it holds unprintable characters')
    path = os.path.abspath(value)  # (normalized: no '.', '..' or repeated '/')
    # lexical only, on the event loop: links are resolved in resolve_url, off the loop, and
    # must stay inside <root>/<hash>
    if path.startswith(("/dev/", "/proc/", "/sys/")) or path in ("/dev", "/proc", "/sys"):
        raise _bad(
            f'Invalid URL: {value}. "url" property value cannot start with /dev/, /proc/, or /sys/.'
        )
    pattern = rf"{re.escape(root.rstrip('/'))}/{_NAME_PART}/model(?:/{_NAME_PART})?"
    if re.fullmatch(pattern, path) is None:
        raise _bad(
            f"Invalid \"url\" '{value}': expected a path of the form "
            f"{root.rstrip('/')}/<hash>/model[/<subdir>]"
        )
    return path


def resolve_url(path: str, root: str) -> str:
    """The folder ``path`` (a :func:`check_url` result) resolves to, which must be inside
    ``<root>/<hash>`` (``root`` resolved, ``<hash>`` the path's own, not a link). Blocking
    (it reads the file system).

    :raises Refused: 400 when a link leads elsewhere.
    """
    real_root = os.path.realpath(root)
    relative = os.path.relpath(path, os.path.abspath(root))
    base = os.path.join(real_root, relative.split(os.sep, 1)[0])
    real = os.path.realpath(path)
    if os.path.commonpath((real, base)) != base or real == base:
        raise _bad(
            f"Invalid \"url\" '{path}': a symbolic link leads it outside of "
            f"{root.rstrip('/')}/<hash>"
        )
    return real


def inspect(path: str, root: str, limit: int = MAX_TREE_ENTRIES) -> tuple[str, Placement]:
    """The resolved folder of a load's url and its :class:`Placement`, once the folder is
    checked (:func:`resolve_url`, :func:`check_tree` with ``limit``, :func:`place`).
    Blocking.

    :raises Refused: 400.
    """
    real = resolve_url(path, root)
    if os.path.isdir(real):
        check_tree(real, path, limit)
    placement = place(real, root)
    shown = os.path.dirname(path) if placement.own else path
    return real, Placement(shown, placement.subfolder, placement.own, placement.folders)


class MultiModelEndpoint:
    """The models loaded through ``POST /models`` and the handlers of the MME routes.

    :param server: the server's handle.
    :param root: the folder SageMaker's model folders are in (``/opt/ml/models``).
    :param body_timeout: seconds a load's body may stall (``--http-body-timeout-secs``).
    :param max_models: most models loaded or loading at once (507 past it).
    :param max_names: most model names made over the endpoint's life (507 past it).
    :param max_files: most entries of a model's folder (400 past it).
    """

    def __init__(
        self,
        server: tritonx.ServerHandle,
        root: str,
        body_timeout: float,
        max_models: int = DEFAULT_MAX_MODELS,
        max_names: int = DEFAULT_MAX_MODEL_NAMES,
        max_files: int = MAX_TREE_ENTRIES,
    ) -> None:
        self.server = server
        self.root = root
        self.body_timeout = body_timeout
        self.max_models = max_models
        self.max_names = max_names
        self.max_files = max_files
        self.models: dict[str, LoadedModel] = {}
        #: names being loaded or unloaded (a second load of one is 409, an unload 404)
        self.busy: set[str] = set()
        #: model names of the loaded models and of the loads under way
        self.in_use: set[str] = set()
        #: every model name the endpoint brought into the server (the server keeps them)
        self.made: set[str] = set()
        self.loading = 0
        self._placing = asyncio.Lock()
        self._private_root = ""

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
        if len(self.models) + self.loading >= self.max_models:
            return error_response(
                f"no room for model '{name}': the multi-model endpoint holds its most models "
                f"(max_models={self.max_models})",
                507,
            )
        early = self._refusal(served, {served})  # (before the folder is looked through)
        if early is not None:
            return early
        self.busy.add(name)
        self.loading += 1
        try:
            return await self._load(name, url, served)
        finally:
            self.loading -= 1
            self.busy.discard(name)

    def _claim(
        self, served: str, placement: Placement
    ) -> tuple[frozenset[str], web.Response | None]:
        """The names a load brings, claimed for it; or an answer refusing it: 409 when one is
        served already (by the server's repositories or another load), 507 when the endpoint
        has made its most names."""
        names = {served} | {f for f in placement.folders if f != placement.subfolder}
        refusal = self._refusal(served, names)
        if refusal is not None:
            return frozenset(), refusal
        new = names - self.made
        # (the index is read only for names new to the endpoint: at most max_names times
        # for loads that go on; a loaded model is found without it)
        known = {n for n in new if self.server.model_ready(n)}
        if new and not known:
            known = {row.name for row in self.server.repository_index()} & new
        for other in sorted(known):
            return frozenset(), error_response(
                f"model '{other}' is already served by this server: a load may not replace it",
                409,
            )
        self.made |= new
        self.in_use |= names
        return frozenset(names), None

    def _refusal(self, served: str, names: set[str]) -> web.Response | None:
        """409 when one of ``names`` is another load's, 507 when they would take the
        endpoint past ``max_model_names``; None otherwise."""
        for other in sorted(names & self.in_use):
            return error_response(
                f"model '{other}' is already served by another load of the multi-model endpoint",
                409,
            )
        if len(self.made) + len(names - self.made) > self.max_names:
            return error_response(
                f"no room for model '{served}': the multi-model endpoint made its most model "
                f"names (max_model_names={self.max_names})",
                507,
            )
        return None

    def _private_folder(self, real: str, subfolder: str) -> str:
        """A new private folder (under :attr:`_private_root`, made first on the loop) holding
        only a link ``subfolder`` to ``real``."""
        private = tempfile.mkdtemp(dir=self._private_root)
        os.symlink(real, os.path.join(private, subfolder))
        return private

    async def _load(self, name: str, url: str, served: str) -> web.Response:
        try:
            async with self._placing:
                real, placement = await asyncio.to_thread(inspect, url, self.root, self.max_files)
        except Refused as refused:
            return refused.response
        except OSError as exc:
            return error_response(f"failed to read '{url}': {exc.strerror or exc}", 400)
        names, refusal = self._claim(served, placement)
        if refusal is not None:
            return refusal
        model = LoadedModel(name, placement.repository, served, real, names)
        registered = False
        try:
            if placement.own:
                if not self._private_root:  # (on the loop: two loads cannot both make it)
                    self._private_root = tempfile.mkdtemp(prefix="tritonx-sagemaker-mme-")
                private = await asyncio.to_thread(self._private_folder, real, placement.subfolder)
                model = LoadedModel(name, placement.repository, served, private, names, private)
            try:
                await self.server.register_model_repository(
                    model.repository, {placement.subfolder: served}
                )
            except TritonXError as exc:
                status = 409 if exc.code is Code.ALREADY_EXISTS else 400
                await self._forget(model, registered=False)
                return error_response(exc.message, status)
            registered = True
            await self.server.load_model(served)
        except TritonXError as exc:
            await self._forget(model, registered=registered)
            if exc.code is Code.ALREADY_EXISTS:
                return error_response(exc.message, 409)
            if is_out_of_memory(exc):
                log.info("SageMaker: model '%s' does not fit: answering 507", served)
                return error_response(exc.message, 507)
            return error_response(exc.message, 400)
        except OSError as exc:  # (the private folder could not be made)
            await self._forget(model, registered=registered)
            return error_response(f"failed to register '{url}': {exc.strerror or exc}", 500)
        except BaseException:
            await self._forget(model, registered=registered)
            raise
        self.models[name] = model
        return empty_response(200)

    async def _forget(self, model: LoadedModel, registered: bool) -> None:
        """Undo a load: unload every model its registration brought that is loaded,
        unregister its repository (``registered``), remove its private folder, release its
        names (the server keeps them in its index: they stay the endpoint's to reuse)."""
        try:
            if registered:
                for other in sorted(model.names):
                    if self.server.model_ready(other):
                        try:
                            await self.server.unload_model(other, unload_dependents=True)
                        except TritonXError as exc:
                            log.warning("could not unload model '%s': %s", other, exc)
                await self._unregister(model.repository)
        finally:
            if model.private:
                shutil.rmtree(model.private, ignore_errors=True)
            self.in_use -= model.names

    async def _unregister(self, repository: str) -> None:
        try:
            await self.server.unregister_model_repository(repository)
        except TritonXError as exc:
            log.warning("could not unregister model repository '%s': %s", repository, exc)

    async def unload(self, name: str) -> web.Response:
        """``DELETE /models/<name>``: unload the model with its dependents (and any other
        model its registration brought), unregister its repository."""
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
            await self._forget(model, registered=True)
            return empty_response(200)
        finally:
            self.busy.discard(name)

    def close(self) -> None:
        """Remove the private folders (the server is stopping)."""
        if self._private_root:
            shutil.rmtree(self._private_root, ignore_errors=True)
            self._private_root = ""


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
    "check_tree",
    "check_url",
    "inspect",
    "invoke_path",
    "place",
    "read_json_body",
    "resolve_url",
]
