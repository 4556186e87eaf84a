"""What a model's requirements file becomes before anything is installed: a :class:`Plan`
(the installer's lines, local paths as references to :class:`LocalInput` s), and what is
done with the plan's local inputs: :func:`stage` copies them into a fresh folder, hashing
what it copies, and writes the requirements file the installer reads; :func:`digest` hashes
one in place (``tritonx check``, and the cache lookup before a copy).

:mod:`~tritonx_backend_python.reqfile` reads a requirements file into a plan under the
operator's rules, and re-exports these names.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tritonx.errors import invalid_arg


@dataclass(frozen=True)
class LocalInput:
    """A wheel, sdist or folder inside the model's folder that the install reads.

    :param source: the resolved path (inside the model's folder).
    :param name: the name of its staged copy (a wheel's or sdist's file name; ``project`` or
        ``links`` for a folder).
    :param folder: a folder (a project, or a ``--find-links`` folder) rather than a file.
    """

    source: Path
    name: str
    folder: bool


#: a line of the plan: text, and references to inputs (their index in :attr:`Plan.inputs`)
Part = str | int


@dataclass
class Plan:
    """What the installer is given: option lines, requirement lines and constraint lines, with
    references to the local inputs they name.

    :param files: the requirements files read (the model's and those it includes), relative to
        the model's folder.
    """

    options: list[list[Part]] = field(default_factory=list)
    requirements: list[list[Part]] = field(default_factory=list)
    constraints: list[list[Part]] = field(default_factory=list)
    inputs: list[LocalInput] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def add_input(self, local: LocalInput) -> int:
        """The reference of ``local`` (one per path and kind)."""
        for index, known in enumerate(self.inputs):
            if known.source == local.source and known.folder == local.folder:
                return index
        self.inputs.append(local)
        return len(self.inputs) - 1

    def render(self, paths: Sequence[str], uris: Sequence[str] | None = None) -> tuple[str, str]:
        """The requirements text and the constraints text, each reference written as
        ``paths[i]`` (``uris[i]`` after ``@ ``: a ``file:`` URL)."""

        def line(parts: list[Part]) -> str:
            out: list[str] = []
            for part in parts:
                if isinstance(part, int):
                    after_at = bool(out) and out[-1].endswith("@ ")
                    out.append((uris or paths)[part] if after_at else paths[part])
                else:
                    out.append(part)
            return "".join(out)

        requirements = [line(p) for p in self.options + self.requirements]
        constraints = [line(p) for p in self.constraints]
        return "".join(f"{r}\n" for r in requirements), "".join(f"{c}\n" for c in constraints)

    def identity(self, digests: Sequence[str]) -> dict[str, object]:
        """What the cache key hashes of the plan: its lines, each reference written as its
        input's name and content digest."""
        marks = [f"<{i.name} {d}>" for i, d in zip(self.inputs, digests, strict=True)]
        requirements, constraints = self.render(marks)
        return {"requirements": requirements, "constraints": constraints}


# --------------------------------------------------------------------- inputs: hash and copy


def _entries(local: LocalInput, model_root: Path, model: str) -> Iterator[tuple[str, Path, bool]]:
    """(relative path, real file, executable) of every file of an input, in a stable order.

    :raises TritonXError: INVALID_ARG for a symbolic link leaving the model's folder, a
        symbolic link to a folder, or an entry that is no regular file (a FIFO would block).
    """

    where = (
        f"python model '{model}': local package {local.source.relative_to(model_root).as_posix()}"
    )

    def checked(path: Path, label: str) -> tuple[Path, bool]:
        real = path.resolve()
        if not real.is_relative_to(model_root):
            raise invalid_arg(f"{where}: {label} leaves the model's folder (a symbolic link)")
        info = real.stat()
        if not stat.S_ISREG(info.st_mode):
            raise invalid_arg(f"{where}: {label} is no regular file")
        return real, bool(info.st_mode & 0o111)

    if not local.folder:
        real, executable = checked(local.source, "the file")
        yield local.name, real, executable
        return
    walked: list[tuple[str, Path, bool]] = []
    for folder, dirs, files in os.walk(local.source, followlinks=False):
        base = Path(folder)
        for name in dirs:
            if (base / name).is_symlink():
                raise invalid_arg(
                    f"{where}: {(base / name).relative_to(local.source).as_posix()} is a "
                    "symbolic link to a folder (refused)"
                )
        for name in files:
            rel = (base / name).relative_to(local.source).as_posix()
            real, executable = checked(base / name, rel)
            walked.append((rel, real, executable))
    yield from sorted(walked)


def _combine(local: LocalInput, files: list[tuple[str, bool, str]]) -> str:
    summary = hashlib.sha256(f"{'folder' if local.folder else 'file'} {local.name}\n".encode())
    for rel, executable, file_digest in files:
        summary.update(f"{rel}\0{int(executable)}\0{file_digest}\n".encode())
    return summary.hexdigest()


def digest(local: LocalInput, model_dir: Path, model: str) -> str:
    """The content digest of an input in place (names, executable bits and bytes of its
    files)."""
    root = model_dir.resolve()
    files = []
    try:
        for rel, real, executable in _entries(local, root, model):
            file_hash = hashlib.sha256()
            with real.open("rb") as source:
                while chunk := source.read(1 << 20):
                    file_hash.update(chunk)
            files.append((rel, executable, file_hash.hexdigest()))
    except OSError as exc:
        raise invalid_arg(
            f"python model '{model}': cannot read its local package {local.name}: "
            f"{exc.strerror or type(exc).__name__}"
        ) from exc
    return _combine(local, files)


def stage(plan: Plan, model_dir: Path, folder: Path, model: str) -> list[str]:
    """Copy the plan's inputs into ``folder`` (``inputs/<i>/<name>``), hashing what is copied,
    and write ``requirements.txt`` (and ``constraints.txt``) naming the copies: what the
    installer reads. The digests of the copies, in the order of :attr:`Plan.inputs`."""
    root = model_dir.resolve()
    paths: list[str] = []
    digests: list[str] = []
    try:
        for index, local in enumerate(plan.inputs):
            target = folder / "inputs" / str(index) / local.name
            files = []
            for rel, real, executable in _entries(local, root, model):
                copy = target / rel if local.folder else target
                copy.parent.mkdir(parents=True, exist_ok=True)
                file_hash = hashlib.sha256()
                with real.open("rb") as source, copy.open("wb") as out:
                    while chunk := source.read(1 << 20):
                        file_hash.update(chunk)
                        out.write(chunk)
                if executable:
                    copy.chmod(0o755)
                files.append((rel, executable, file_hash.hexdigest()))
            if local.folder:
                target.mkdir(parents=True, exist_ok=True)
            digests.append(_combine(local, files))
            paths.append(str(target))
    except OSError as exc:
        raise invalid_arg(
            f"python model '{model}': cannot copy its local packages: "
            f"{exc.strerror or type(exc).__name__}"
        ) from exc
    requirements, constraints = plan.render(paths, [Path(p).as_uri() for p in paths])
    if constraints:
        (folder / "constraints.txt").write_text(constraints, encoding="utf-8")
        requirements = f"--constraint {folder / 'constraints.txt'}\n{requirements}"
    (folder / "requirements.txt").write_text(requirements, encoding="utf-8")
    return digests
