"""The ``checksum`` agent: each parameter ``<ALGORITHM>:<relative path>`` = expected hex digest.

Like Triton's checksum agent (checksum_repository_agent ``src/checksum.cc``) it acts on the
LOAD action only and fails the load with Triton's messages; unlike it, files are hashed in
chunks (never read whole into memory), SHA-256 exists beside MD5, and a path that leaves the
model folder (``..``, an absolute path, a symlink pointing out) is refused.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonx import AgentContext, RepoAgent
from tritonx.errors import Code, TritonXError

#: algorithm name as written in the key (case-insensitive) → (name in messages, hash factory)
ALGORITHMS: dict[str, tuple[str, Callable[[], Any]]] = {
    "md5": ("MD5", hashlib.md5),
    "sha256": ("SHA256", hashlib.sha256),
}

CHUNK = 1 << 20


def file_digest(path: Path | str, algorithm: str = "md5") -> str:
    """The lowercase hex digest of a file, read in 1 MiB chunks."""
    digest = ALGORITHMS[algorithm.lower()][1]()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return str(digest.hexdigest())


class ChecksumAgent(RepoAgent):
    """Verifies the digests named in its parameters before the model loads."""

    name = "checksum"

    def on_load(self, ctx: AgentContext) -> Path | None:
        base = ctx.model_dir.resolve()
        for key in sorted(ctx.parameters):
            expected = ctx.parameters[key]
            algorithm, sep, relpath = key.partition(":")
            if not sep:
                raise TritonXError(f"failed to parse key: {key}", Code.INVALID_ARG)
            entry = ALGORITHMS.get(algorithm.lower())
            if entry is None:
                raise TritonXError(f"Unsupported checksum algorithm: {algorithm}", Code.UNSUPPORTED)
            label = entry[0]
            path = Path(os.path.realpath(base / relpath))
            if os.path.isabs(relpath) or base not in path.parents:
                raise TritonXError(
                    f"Invalid checksum path '{relpath}': the file must stay within the model "
                    "directory",
                    Code.INVALID_ARG,
                )
            try:
                got = file_digest(path, algorithm)
            except OSError as exc:
                raise TritonXError(
                    f"failed to open text file for read {relpath}: {exc.strerror}",
                    Code.INVALID_ARG,
                ) from exc
            if got != expected:
                raise TritonXError(
                    f"Mismatched {label} hash for file {relpath}, expect: {expected}, got: {got}",
                    Code.INVALID_ARG,
                )
        return None
