"""Model repositories on disk: which models exist, their folders and version folders."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tritonx._proto import model_config_pb2

CONFIG_FILENAME = "config.pbtxt"


@dataclass(frozen=True, slots=True)
class ModelSource:
    """Where a model lives: ``<repository>/<name>``."""

    name: str
    path: Path
    repository: Path

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILENAME


def scan(repositories: Sequence[Path]) -> tuple[dict[str, ModelSource], dict[str, list[Path]]]:
    """Every model folder in ``repositories``.

    Returns the models found once, and the names found in two or more repositories (with
    those repositories), which Triton refuses to serve.
    """
    found: dict[str, list[ModelSource]] = {}
    for repo in repositories:
        try:
            entries = sorted(repo.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            found.setdefault(entry.name, []).append(ModelSource(entry.name, entry, repo))
    models = {name: srcs[0] for name, srcs in found.items() if len(srcs) == 1}
    duplicates = {
        name: [s.repository for s in srcs] for name, srcs in found.items() if len(srcs) > 1
    }
    return models, duplicates


def version_folders(model_dir: Path) -> dict[int, Path]:
    """Numeric version folders; non-numeric names and numbers with leading zeros ("01") are
    ignored, as in Triton ("0" itself is version 0)."""
    versions: dict[int, Path] = {}
    try:
        entries = list(model_dir.iterdir())
    except OSError:
        return versions
    for entry in entries:
        name = entry.name
        if not name.isdigit() or (len(name) > 1 and name.startswith("0")) or not entry.is_dir():
            continue
        versions[int(name)] = entry
    return versions


def select_versions(
    policy: model_config_pb2.ModelVersionPolicy, available: Iterable[int]
) -> list[int]:
    """The versions ``policy`` serves among ``available`` (Triton's latest / all / specific)."""
    versions = sorted(available)
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        return versions
    if kind == "specific":
        wanted = set(policy.specific.versions)
        return [v for v in versions if v in wanted]
    n = policy.latest.num_versions if kind == "latest" else 1
    return versions[-max(n, 1) :] if versions else []
