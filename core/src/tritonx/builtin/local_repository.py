"""The local file system as a model repository (plain paths and ``file://`` URLs)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from pathlib import Path

from tritonx.errors import TritonXError, invalid_arg
from tritonx.hookspecs import hookimpl
from tritonx.registry import RepositoryRegistry
from tritonx.repository import Repository, walk_files


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
        return tuple(
            sorted((rel, st.st_mtime_ns, st.st_size) for rel, _, st in walk_files(self.root / name))
        )

    def localize(self, name: str) -> Path:
        path = self.root / name
        if not path.is_dir():
            raise TritonXError(f"model '{name}' is not a folder of {self.root}")
        return path
