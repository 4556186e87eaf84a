"""What the model repositories list: every read of them, and the names it found.

The model manager reads every repository before a load, a poll, the repository index and
the load and unload APIs (:meth:`RepositoryListing.scan`). A model found in two or more
repositories is one Triton refuses to serve. The names the last read found answer, without
another read, whether a repository has a model a request asks for
(:meth:`RepositoryListing.listed`, for ``--model-load-on-demand``), until that read is
``--unknown-model-rescan-secs`` old.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tritonx._core.namespaces import ModelId
from tritonx._core.registration import opened, renamed, with_repository, without_repository
from tritonx.errors import TritonXError
from tritonx.repository import Repository

log = logging.getLogger("tritonx.lifecycle")


class RepositoryListing:
    """Reads the model repositories and keeps the names their last read listed.

    :param repositories: the server's repositories, in ``--model-repository`` order.
    :param rescan_secs: ``--unknown-model-rescan-secs``.
    """

    def __init__(
        self, repositories: Sequence[Repository], rescan_secs: float, namespacing: bool = False
    ) -> None:
        self.repositories = repositories
        self.rescan_secs = rescan_secs
        #: ``--model-namespacing``: each repository is a namespace, a model is listed under
        #: its key ``<repository>::<name>`` (:attr:`ids`)
        self.namespacing = namespacing
        #: every key a read listed with namespacing on → its identifier
        self.ids: dict[str, ModelId] = {}
        #: the model names the last read of every repository listed (duplicates included),
        #: and when that read began (``time.monotonic()``; None: to be read again):
        #: :meth:`listed` answers from them, every :meth:`scan` renews them
        self._listed: frozenset[str] = frozenset()
        self._listed_at: float | None = None
        #: reads that began before this time do not renew the listing (:meth:`relist`)
        self._relisted = 0.0
        self._lock = threading.Lock()
        #: a read of the repositories a lookup started (:meth:`listed`), shared by lookups
        self._rescan: asyncio.Future[Any] | None = None
        #: reads of every repository (``tritonx_model_repository_scans_total``)
        self.scans = 0

    def scan(self, strict: bool = False) -> tuple[dict[str, Repository], dict[str, list[str]]]:
        """The models of every repository: those found once (with their repository), and the
        names found in two or more (with their URLs), which Triton refuses to serve (a
        name a registered repository maps is found there only: ``_core.registration``).

        :param strict: raise when a repository cannot be read (start-up, as Triton); else
            log it and go on with the others.

        Every read renews the listing :meth:`listed` answers from.
        """
        began = time.monotonic()
        found: dict[str, list[Repository]] = {}
        for repo in self.repositories:
            try:
                names = repo.list_models()
            except TritonXError:
                if strict:
                    raise
                log.exception("failed to read model repository %s", repo.url)
                continue
            for name in names:
                if self.namespacing:
                    mid = ModelId(repo.url, name)
                    name = str(mid)
                    self.ids.setdefault(name, mid)
                found.setdefault(name, []).append(repo)
        for name, repos in found.items():
            mapped = [repo for repo in repos if renamed(repo, name)]
            if mapped and len(repos) > 1:
                repos[:] = mapped[:1]  # a mapped name wins over folders of that name
        models = {name: repos[0] for name, repos in found.items() if len(repos) == 1}
        duplicates = {
            name: [r.url for r in repos] for name, repos in found.items() if len(repos) > 1
        }
        with self._lock:
            self.scans += 1
            if began >= self._relisted and (self._listed_at is None or began >= self._listed_at):
                self._listed, self._listed_at = frozenset(found), began
        return models, duplicates

    async def register(
        self,
        path: str | os.PathLike[str],
        mapping: Mapping[str, str] | None,
        *,
        explicit: bool,
        opener: Callable[[str], Repository],
    ) -> None:
        """Add the repository at ``path`` (``mapping``: ``{subfolder: served name}``) with
        Triton's checks and errors (``_core.registration``); the next :meth:`listed` reads
        the repositories again."""
        repo = await opened(path, mapping, explicit=explicit, opener=opener)
        # no await from the checks to the change; a new list: a scan under way reads the old
        self.repositories = with_repository(self.repositories, repo)
        self.relist()

    def unregister(self, path: str | os.PathLike[str], *, explicit: bool) -> None:
        """Remove the repository at ``path`` and its mappings (Triton's errors:
        ``_core.registration``)."""
        self.repositories = without_repository(self.repositories, path, explicit=explicit)
        self.relist()

    def relist(self) -> None:
        """The next :meth:`listed` reads the repositories again (an unload API call)."""
        with self._lock:
            self._listed_at = None
            self._relisted = time.monotonic()
        self._rescan = None  # (one under way began before: not shared)

    async def listed(self, name: str) -> bool:
        """Whether a repository lists ``name`` (once, or in several), as their last read
        found it, unless that read began ``--unknown-model-rescan-secs`` ago or more: then
        they are read again (one read shared by the lookups that need it meanwhile).

        So a request for a name in no repository costs no read of them: a model folder added
        since is found by the next poll, repository index, load or unload call, or after
        ``--unknown-model-rescan-secs``. The memory it takes is the repositories' listing,
        whatever names requests ask for."""
        if name in self._listed:
            return True  # (its load reads them again)
        listed_at = self._listed_at
        if listed_at is not None and time.monotonic() - listed_at < self.rescan_secs:
            return False
        rescan = self._rescan
        if rescan is None or rescan.done():
            rescan = self._rescan = asyncio.ensure_future(asyncio.to_thread(self.scan))
        await asyncio.shield(rescan)
        return name in self._listed
