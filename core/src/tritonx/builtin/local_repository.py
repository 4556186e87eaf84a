"""The local file system as a model repository (plain paths and ``file://`` URLs)."""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from pathlib import Path

from tritonx.errors import TritonXError, invalid_arg
from tritonx.hookspecs import hookimpl
from tritonx.registry import RepositoryRegistry
from tritonx.repository import Repository


@hookimpl
def tritonx_register_repositories(registry: RepositoryRegistry) -> None:
    """Serve plain paths and ``file://`` URLs."""
    registry.add(LocalRepository)


class LocalRepository(Repository):
    """Model folders in a local directory; models are used in place."""

    name = "local"
    schemes = ("", "file")

    def __init__(self, url: str, config: Mapping[str, str]) -> None:
        super().__init__(url, config)
        self.root = Path(url[len("file://") :] if url.lower().startswith("file://") else url)

    def list_models(self) -> list[str]:
        try:
            entries = sorted(self.root.iterdir())
        except OSError as exc:
            raise invalid_arg(f"failed to stat file {self.root}: {exc.strerror or exc}") from exc
        return [e.name for e in entries if not e.name.startswith(".") and e.is_dir()]

    def stamp(self, name: str) -> Hashable:
        """(relative path, mtime, size) of every file of the model."""
        path = self.root / name
        stamp: list[tuple[str, int, int]] = []
        for dirpath, _dirs, filenames in os.walk(path):
            for filename in filenames:
                full = os.path.join(dirpath, filename)
                try:
                    st = os.stat(full)
                except OSError:
                    continue
                stamp.append((os.path.relpath(full, path), st.st_mtime_ns, st.st_size))
        return tuple(sorted(stamp))

    def localize(self, name: str) -> Path:
        path = self.root / name
        if not path.is_dir():
            raise TritonXError(f"model '{name}' is not a folder of {self.root}")
        return path
