"""The fsspec code path the three stores share: listing, stamps, localize and release.

A store (``s3``, ``gcs``, ``azure``) supplies only how its URL is parsed, how its fsspec file
system is opened from Triton's credential variables, which listing fields identify an object's
content, and how its errors are worded. Everything else lives here, once.
"""

from __future__ import annotations

import abc
import atexit
import importlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from tritonx.errors import Code, PluginError, TritonXError
from tritonx.repository import Repository
from tritonx_repo_cloud.locations import Location

log = logging.getLogger("tritonx.repo_cloud")


@dataclass
class Transfers:
    """What :meth:`CloudRepository.localize` fetched for one model URL since the process
    started (see :func:`transfers`).

    :ivar localized: local copies made (one per load that was not skipped as unchanged).
    :ivar files_downloaded: objects downloaded from the store.
    :ivar bytes_downloaded: their total size.
    :ivar files_reused: files taken from a copy still in use instead of downloaded again
        (same object version: only the changed files of a changed model are fetched).
    """

    localized: int = 0
    files_downloaded: int = 0
    bytes_downloaded: int = 0
    files_reused: int = 0


_transfers: dict[str, Transfers] = {}
_transfers_lock = threading.Lock()
#: private folders of copies not released yet, removed when the process exits (a copy made
#: by the core's offline model check, which never releases, or a server that did not unload)
_holders: set[Path] = set()


@atexit.register
def _remove_leftover_copies() -> None:
    with _transfers_lock:
        left = list(_holders)
        _holders.clear()
    for holder in left:
        shutil.rmtree(holder, ignore_errors=True)


def transfers(model_url: str) -> Transfers:
    """The counters of the model at ``model_url`` (the repository URL, a slash and the model
    name, e.g. ``s3://bucket/models/add_sub``); zeros for a model never localized."""
    with _transfers_lock:
        return replace(_transfers.get(model_url.rstrip("/"), Transfers()))


@dataclass(frozen=True)
class RemoteEntry:
    """One object (or folder) of a model folder in the store."""

    path: str  # fsspec path
    rel: str  # path inside the model folder, "/"-separated
    is_dir: bool
    size: int
    version: str  # what identifies the content (etag, generation, mtime...)


@dataclass
class _Copy:
    """A local copy handed out by localize and not released yet."""

    name: str
    files: dict[str, tuple[str, int]] = field(default_factory=dict)  # rel -> (version, size)


class CloudRepository(Repository, abc.ABC):
    """A model repository in an object store, read through fsspec.

    :cvar mount_env: Triton's variable naming the folder local copies are made in
        (default: the system's temporary folder).
    :cvar extra: the ``tritonx-repo-cloud[<extra>]`` that installs the store's library.
    :cvar module: that library's import name.
    """

    mount_env: ClassVar[str]
    extra: ClassVar[str]
    module: ClassVar[str]

    def __init__(self, url: str, config: Mapping[str, str]) -> None:
        super().__init__(url, config)
        if self.config:
            raise PluginError(
                f"repository '{url}' takes no settings (got {', '.join(sorted(self.config))}); "
                "credentials and endpoints come from environment variables"
            )
        if os.environ.get("TRITON_CLOUD_CREDENTIAL_PATH"):
            raise PluginError(
                "TRITON_CLOUD_CREDENTIAL_PATH (Triton's beta credential file) is not supported "
                "by tritonx-repo-cloud: set the store's environment variables instead"
            )
        self.location = self.parse(url)
        self.mount_dir = os.environ.get(self.mount_env) or tempfile.gettempdir()
        self._lock = threading.Lock()
        self._copies: dict[Path, _Copy] = {}
        self._stamps: dict[str, Hashable] = {}
        self.fs = self.open_filesystem(self.library())

    # ------------------------------------------------------------------ per store

    @classmethod
    @abc.abstractmethod
    def parse(cls, url: str) -> Location:
        """The URL's bucket, prefix and endpoint; raise ``TritonXError`` when malformed."""

    @abc.abstractmethod
    def open_filesystem(self, library: Any) -> Any:
        """The fsspec file system, configured from the store's environment variables."""

    @abc.abstractmethod
    def object_version(self, info: Mapping[str, Any]) -> str:
        """What identifies an object's content in a listing entry (etag, mtime...)."""

    @abc.abstractmethod
    def unreadable(self, exc: BaseException) -> TritonXError:
        """The store's wording for a repository it cannot list (credentials, network)."""

    @abc.abstractmethod
    def bucket_missing(self, exc: BaseException) -> TritonXError:
        """The store's wording for a bucket (container) that does not exist."""

    # ------------------------------------------------------------------ Repository

    def list_models(self) -> list[str]:
        """The folders at the repository's top (hidden ones skipped)."""
        root = self.location.root
        try:
            self.fs.invalidate_cache()
            entries = self.fs.ls(root, detail=True)
        except FileNotFoundError as exc:
            raise self._not_found(exc) from exc
        except Exception as exc:
            raise self.unreadable(exc) from exc
        names: set[str] = set()
        for info in entries:
            if info.get("type") != "directory":
                continue
            name = str(info.get("name", "")).rstrip("/").rsplit("/", 1)[-1]
            if name and not name.startswith("."):
                names.add(name)
        return sorted(names)

    def stamp(self, name: str) -> Hashable:
        """Every object of the model with its version and size: one listing, no download.

        A listing that fails keeps the last stamp (the loaded copy goes on serving)."""
        try:
            entries = self._entries(name)
        except TritonXError as exc:
            log.warning("failed to poll model '%s' at %s: %s", name, self._model_url(name), exc)
            return self._stamps.get(name, ("unreadable", object()))
        stamp = tuple(sorted((e.rel, e.is_dir, e.size, e.version) for e in entries))
        self._stamps[name] = stamp
        return stamp

    def localize(self, name: str) -> Path:
        """Download model ``name`` into a new private folder (``<tmp>/<name>``, mode 0700).

        Files whose object version matches a copy still in use are linked from it instead
        of downloaded again."""
        url = self._model_url(name)
        entries = self._entries(name)
        if not entries:
            raise TritonXError(f"directory or file does not exist at {url}", Code.INTERNAL)
        try:
            holder = Path(tempfile.mkdtemp(prefix="tritonx-model-", dir=self.mount_dir))
        except OSError as exc:
            raise TritonXError(
                f"failed to create a local folder for {url} in {self.mount_dir} "
                f"({self.mount_env}): {exc.strerror or exc}",
                Code.INTERNAL,
            ) from exc
        dest = holder / name
        copy = _Copy(name)
        remote: list[str] = []
        local: list[str] = []
        reused = 0
        size = 0
        try:
            dest.mkdir()
            for entry in sorted(entries, key=lambda e: e.rel):
                target = dest.joinpath(*entry.rel.split("/"))
                if entry.is_dir:
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                copy.files[entry.rel] = (entry.version, entry.size)
                if self._reuse(name, entry, target):
                    reused += 1
                    continue
                remote.append(entry.path)
                local.append(str(target))
                size += entry.size
            if remote:
                self.fs.get(remote, local)
        except Exception as exc:
            shutil.rmtree(holder, ignore_errors=True)
            raise TritonXError(
                f"Failed to get object at {url} due to exception: {_detail(exc)}",
                Code.INTERNAL,
            ) from exc
        with self._lock:
            self._copies[dest] = copy
        key = url.rstrip("/")
        with _transfers_lock:
            _holders.add(holder)
            counters = _transfers.setdefault(key, Transfers())
            counters.localized += 1
            counters.files_downloaded += len(remote)
            counters.bytes_downloaded += size
            counters.files_reused += reused
        log.info(
            "localized model '%s' from %s into %s: %d files downloaded (%d bytes), %d reused",
            name,
            url,
            dest,
            len(remote),
            size,
            reused,
        )
        return dest

    def release(self, name: str, path: Path) -> None:
        """Remove a copy made by :meth:`localize` (its private folder with it)."""
        with self._lock:
            copy = self._copies.pop(path, None)
        if copy is None:
            return
        with _transfers_lock:
            _holders.discard(path.parent)
        shutil.rmtree(path.parent, ignore_errors=True)
        log.info("released model '%s' copy %s", name, path)

    # ------------------------------------------------------------------ helpers

    @classmethod
    def library(cls) -> Any:
        """The store's fsspec implementation, or a clear error naming the extra to install."""
        try:
            return importlib.import_module(cls.module)
        except ImportError as exc:
            raise PluginError(
                f"{cls.schemes[0]}:// repositories need {cls.module.split('.')[0]}: "
                f"pip install 'tritonx-repo-cloud[{cls.extra}]' ({exc})"
            ) from exc

    def _model_url(self, name: str) -> str:
        return self.location.model_url(name)

    def _not_found(self, exc: BaseException) -> TritonXError:
        """The root cannot be listed: the bucket, or only the folder, is missing."""
        try:
            bucket_exists = bool(self.fs.exists(self.location.bucket))
        except Exception as check:
            return self.unreadable(check)
        if not bucket_exists:
            return self.bucket_missing(exc)
        return TritonXError(f"directory or file does not exist at {self.url}", Code.INTERNAL)

    def _entries(self, name: str) -> list[RemoteEntry]:
        """The objects (and folders) under the model's folder, from one recursive listing."""
        base = f"{self.location.root}/{name}"
        prefix = base + "/"
        try:
            self.fs.invalidate_cache()
            found = self.fs.find(base, withdirs=True, detail=True)
        except FileNotFoundError:
            found = {}
        except Exception as exc:
            raise TritonXError(
                f"Could not list contents of directory at {self._model_url(name)} due to "
                f"exception: {_detail(exc)}",
                Code.INTERNAL,
            ) from exc
        entries: dict[str, RemoteEntry] = {}
        for path, info in found.items():
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix) :]
            is_dir = info.get("type") == "directory" or rel.endswith("/")
            rel = rel.strip("/")
            if not rel:
                continue
            if any(part in ("", ".", "..") for part in rel.split("/")):
                raise TritonXError(
                    f"object '{path}' of {self._model_url(name)} has a path that leaves the "
                    "model folder",
                    Code.INTERNAL,
                )
            version = "" if is_dir else self.object_version(info)
            if is_dir and rel in entries:
                continue  # a folder marker and the folder the listing derived: keep one
            size = int(info.get("size") or 0)
            entries[rel] = RemoteEntry(path, rel, is_dir, 0 if is_dir else size, version)
        return list(entries.values())

    def _reuse(self, name: str, entry: RemoteEntry, target: Path) -> bool:
        """Link (or copy) ``entry`` from a live copy holding the same object version."""
        with self._lock:
            sources = [
                path / entry.rel
                for path, copy in self._copies.items()
                if copy.name == name and copy.files.get(entry.rel) == (entry.version, entry.size)
            ]
        for source in sources:
            try:
                os.link(source, target)
                return True
            except OSError:
                try:
                    shutil.copyfile(source, target)
                    return True
                except OSError:
                    continue
        return False


def _detail(exc: BaseException) -> str:
    """``Name: message`` of the most telling exception in ``exc``'s chain."""
    code, message = error_code(exc)
    return f"{code}: {message}" if message else code


def error_code(exc: BaseException) -> tuple[str, str]:
    """(error code or exception name, message): an S3/GCS/Azure service error's code when the
    chain holds one, else the innermost exception's name and text."""
    seen: set[int] = set()
    current: BaseException | None = exc
    innermost = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, dict) and isinstance(response.get("Error"), dict):
            error = response["Error"]
            return str(error.get("Code", type(current).__name__)), str(error.get("Message", ""))
        error_code_attr = getattr(current, "error_code", None)
        if isinstance(error_code_attr, str) and error_code_attr:
            message = str(getattr(current, "reason", "") or current).splitlines()[0]
            return error_code_attr, message
        innermost = current
        current = current.__cause__ or current.__context__
    text = str(innermost).strip() or str(exc).strip()
    return type(innermost).__name__, text.splitlines()[0] if text else ""
