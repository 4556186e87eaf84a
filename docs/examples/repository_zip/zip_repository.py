"""``zip://``: models served from a zip archive (a :class:`tritonx.Repository` example).

``tritonx serve --model-repository zip:///srv/models.zip`` serves an archive laid out as a
model repository (``<model>/config.pbtxt``, ``<model>/<version>/...`` at its top). A model is
extracted into a temporary folder when it loads and removed once it is unloaded (or its load
fails); poll mode reloads a model whose members changed. The archive is the operator's, as a
model folder is: its members cannot land outside the extraction folder (``zipfile`` drops
``..`` and leading ``/``), but their size is not bounded.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections.abc import Hashable, Mapping
from pathlib import Path

import tritonx
from tritonx.errors import invalid_arg, not_found


@tritonx.hookimpl
def tritonx_register_repositories(registry: tritonx.RepositoryRegistry) -> None:
    """Serve ``zip://`` URLs."""
    registry.add(ZipRepository)


class ZipRepository(tritonx.Repository):
    name = "zip"
    schemes = ("zip",)

    def __init__(self, url: str, config: Mapping[str, str]) -> None:
        super().__init__(url, config)
        self.archive = Path(url.removeprefix("zip://"))

    def _members(self, prefix: str = "") -> list[zipfile.ZipInfo]:
        """The archive's members whose path starts with ``prefix``."""
        try:
            with zipfile.ZipFile(self.archive) as archive:
                return [m for m in archive.infolist() if m.filename.startswith(prefix)]
        except (OSError, zipfile.BadZipFile) as exc:
            raise invalid_arg(f"cannot read model repository {self.url}: {exc}") from exc

    def list_models(self) -> list[str]:
        tops = {m.filename.split("/")[0] for m in self._members() if "/" in m.filename}
        return sorted(t for t in tops if t and not t.startswith("."))

    def stamp(self, name: str) -> Hashable:
        return tuple(sorted((m.filename, m.CRC, m.file_size) for m in self._members(f"{name}/")))

    def localize(self, name: str) -> Path:
        folder = Path(tempfile.mkdtemp(prefix="tritonx-zip-"))
        try:
            with zipfile.ZipFile(self.archive) as archive:  # one read: the archive may change
                members = [m for m in archive.infolist() if m.filename.startswith(f"{name}/")]
                if not members:
                    raise not_found(f"model '{name}' is not in {self.url}")
                for member in members:  # extract() keeps every path inside folder
                    archive.extract(member, folder)
        except BaseException as exc:
            shutil.rmtree(folder, ignore_errors=True)
            if isinstance(exc, (OSError, zipfile.BadZipFile)):
                raise invalid_arg(f"cannot extract model '{name}' from {self.url}: {exc}") from exc
            raise
        return folder / name

    def release(self, name: str, path: Path) -> None:
        shutil.rmtree(path.parent, ignore_errors=True)
