"""Model repositories: where model folders come from (``--model-repository``).

A repository is named by a URL: a plain path or ``file://`` URL is the built-in local file
system (``tritonx.builtin.local_repository``); other schemes (``s3://``, ``gs://``, ``as://``)
come from plugins registered through ``tritonx_register_repositories``. The core uses only
this protocol: poll mode and the load API list models, ask for a change stamp, and localize a
model into a local folder that backends read.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Hashable, Iterator, Mapping
from pathlib import Path
from typing import ClassVar


class Repository(abc.ABC):
    """One ``--model-repository`` location.

    :cvar name: the implementation's name (for ``tritonx plugins`` and errors).
    :cvar schemes: the URL schemes it serves (``""`` is a plain local path).

    A complete example: ``docs/examples/repository_zip`` (models served from a zip archive).
    """

    name: ClassVar[str]
    schemes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, url: str, config: Mapping[str, str]) -> None:
        """``url`` is the ``--model-repository`` value; ``config`` its settings."""
        self.url = url
        self.config = dict(config)

    @abc.abstractmethod
    def list_models(self) -> list[str]:
        """The model folder names at the top of the repository (hidden entries skipped).

        Raise ``TritonXError`` when the repository cannot be read.
        """

    @abc.abstractmethod
    def stamp(self, name: str) -> Hashable:
        """A value that changes whenever any file of model ``name`` changes (poll mode and
        repeated loads compare it to skip models that did not change)."""

    @abc.abstractmethod
    def localize(self, name: str) -> Path:
        """A local folder holding model ``name`` (the folder itself for local repositories,
        a downloaded copy for remote ones). Called from a worker thread."""

    def release(self, name: str, path: Path) -> None:  # noqa: B027 - optional hook
        """``path`` (returned by :meth:`localize`) is no longer used: remove a copy."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def url_scheme(url: str) -> str:
    """The scheme of a repository URL: ``s3`` for ``s3://bucket``, ``""`` for a plain path."""
    head, sep, _ = url.partition("://")
    if not sep or "/" in head or not head.replace("+", "").replace("-", "").isalnum():
        return ""
    return head.lower()


def walk_files(folder: Path) -> Iterator[tuple[str, str, os.stat_result]]:
    """(path relative to ``folder``, full path, ``os.stat`` result) of every entry below
    ``folder`` that is not a folder, unsorted; entries that vanish while it walks are
    skipped, and so are ``__pycache__`` folders (Python writes them when a model's modules
    are imported: they are no change of the model). For :meth:`Repository.stamp`
    implementations and load fingerprints."""
    for dirpath, dirs, filenames in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for filename in filenames:
            path = os.path.join(dirpath, filename)
            try:
                st = os.stat(path)
            except OSError:
                continue
            yield os.path.relpath(path, folder), path, st


__all__ = ["Repository", "url_scheme", "walk_files"]
