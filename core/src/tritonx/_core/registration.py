"""Model repositories registered while the server runs (Triton's
``TRITONSERVER_ServerRegisterModelRepository`` / ``...UnregisterModelRepository``).

Explicit model control mode only. A registered repository is read like a
``--model-repository`` one: its models become loadable by name and appear in the repository
index. A ``mapping`` serves a subfolder of the repository under another name
(:class:`MappedRepository`): the subfolder's own name is then not served from that
repository, the model's config gets the mapped name (Triton's rename, so a config naming the
folder loads), and a mapped name wins over a folder of that name in another repository.
Unregistering forgets the repository and its mappings; the models loaded from it stay
loaded, as in Triton (unload them with the repository API).

Beyond Triton, a mapping's subfolder and name must each be one plain path component (Triton
would join any text to the path, and fail the load of a name with a ``/``), and ``--reload``
watches only the ``--model-repository`` folders, not registered ones.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path

from tritonx.errors import Code, PluginError, TritonXError, invalid_arg, unsupported
from tritonx.repository import Repository

log = logging.getLogger("tritonx.lifecycle")

#: Triton's messages when the server is not in explicit model control mode
REGISTER_REFUSED = "repository registration is not allowed if model control mode is not EXPLICIT"
UNREGISTER_REFUSED = (
    "repository unregistration is not allowed if model control mode is not EXPLICIT"
)


class MappedRepository(Repository):
    """A repository whose subfolders in ``names`` are served under other names.

    :param inner: the repository read (chosen by the URL's scheme as any other).
    :param names: ``{served name: subfolder}``.
    """

    name = "mapped"

    def __init__(self, inner: Repository, names: Mapping[str, str]) -> None:
        super().__init__(inner.url, inner.config)
        self.inner = inner
        self.names = dict(names)
        self._hidden = frozenset(self.names.values())

    def maps(self, name: str) -> bool:
        """Whether ``name`` is a mapped name of this repository."""
        return name in self.names

    def list_models(self) -> list[str]:
        """The folders of the repository, a mapped subfolder under its mapped name (listed
        only while the subfolder exists)."""
        folders = self.inner.list_models()
        present = set(folders)
        listed = [f for f in folders if f not in self._hidden]
        listed.extend(name for name, sub in self.names.items() if sub in present)
        return listed

    def folder(self, name: str) -> str:
        """The subfolder that serves ``name``."""
        return self.names.get(name, name)

    def stamp(self, name: str) -> Hashable:
        """The inner repository's stamp of the subfolder serving ``name``."""
        return self.inner.stamp(self.folder(name))

    def localize(self, name: str) -> Path:
        """The inner repository's local folder of the subfolder serving ``name``."""
        return self.inner.localize(self.folder(name))

    def release(self, name: str, path: Path) -> None:
        """Release what :meth:`localize` returned."""
        self.inner.release(self.folder(name), path)


def renamed(repo: Repository | None, name: str) -> bool:
    """Whether ``name`` is served from ``repo`` under a mapped name (its config then gets
    that name, as Triton renames a mapped model's config)."""
    return isinstance(repo, MappedRepository) and repo.maps(name)


def served_names(path: str, mapping: Mapping[str, str] | None) -> dict[str, str]:
    """``{served name: subfolder}`` from the API's ``{subfolder: served name}``; refuses two
    subfolders mapped to one name (Triton's INVALID_ARG), and names or subfolders that are
    not one plain path component (a name a load would refuse, a folder outside ``path``)."""
    names: dict[str, str] = {}
    for subdir, name in (mapping or {}).items():
        if not isinstance(subdir, str) or not isinstance(name, str):
            raise invalid_arg(
                f"Mapped model name must be a string, found another type for {subdir}"
            )
        if name in names:
            raise invalid_arg(
                f"failed to register '{path}', there is a conflicting mapping for '{name}'"
            )
        if not _component(subdir):
            raise invalid_arg(
                f"failed to register '{path}': subfolder '{subdir}' of the mapping must be "
                "one folder name of the repository"
            )
        if not _component(name):
            raise invalid_arg(
                f"failed to register '{path}': invalid model name '{name}' in the mapping, "
                "model name must not be empty nor contain path traversal characters"
            )
        names[name] = subdir
    return names


def _component(text: str) -> bool:
    return bool(text.strip()) and text not in (".", "..") and "/" not in text and "\0" not in text


async def opened(
    path: str | os.PathLike[str],
    mapping: Mapping[str, str] | None,
    *,
    explicit: bool,
    opener: Callable[[str], Repository],
) -> Repository:
    """The repository a registration adds, checked as Triton checks it before it looks at
    the registered ones (:func:`with_repository` does that): the mapping, the control
    mode (UNSUPPORTED outside explicit mode), a readable folder (INVALID_ARG)."""
    url = os.fspath(path)  # (Triton compares the paths as given)
    names = served_names(url, mapping)
    if not explicit:
        raise unsupported(REGISTER_REFUSED)
    try:
        inner = opener(url)
    except PluginError as exc:
        raise invalid_arg(f"failed to register '{url}': {exc.message}") from None
    try:
        await asyncio.to_thread(inner.list_models)
    except (TritonXError, OSError) as exc:
        log.debug("registering %s: %s", url, exc)
        raise invalid_arg(f"failed to register '{url}', repository not found") from None
    return MappedRepository(inner, names) if names else inner


def with_repository(repositories: Sequence[Repository], repo: Repository) -> list[Repository]:
    """``repositories`` and ``repo``; raises Triton's ALREADY_EXISTS errors when ``repo``'s
    path is a repository already, or a name it maps is mapped by another repository."""
    if any(other.url == repo.url for other in repositories):
        raise TritonXError(
            f"model repository '{repo.url}' has already been registered", Code.ALREADY_EXISTS
        )
    for name in repo.names if isinstance(repo, MappedRepository) else ():
        if any(renamed(other, name) for other in repositories):
            raise TritonXError(
                f"failed to register '{name}', there is a conflicting mapping for '{name}'",
                Code.ALREADY_EXISTS,
            )
    log.info("Model repository registered: %s", repo.url)
    return [*repositories, repo]


def without_repository(
    repositories: Sequence[Repository], path: str | os.PathLike[str], *, explicit: bool
) -> list[Repository]:
    """``repositories`` less the one at ``path`` (and so its mappings); Triton's errors:
    UNSUPPORTED outside explicit mode, INVALID_ARG when no repository is at ``path``."""
    url = os.fspath(path)
    if not explicit:
        raise unsupported(UNREGISTER_REFUSED)
    kept = [repo for repo in repositories if repo.url != url]
    if len(kept) == len(repositories):
        raise invalid_arg(f"failed to unregister '{url}', repository not found")
    log.info("Model repository unregistered: %s", url)
    return kept
