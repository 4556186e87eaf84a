"""Token counts and pieces for the OpenAI API's ``usage`` and for streaming simple models.

:func:`load_tokenizer` finds a model's tokenizer in its model folder:

1. ``tokenizer.json`` (a Hugging Face *fast* tokenizer file) in the model folder, in a version
   folder (``1/``, ``2/``..., highest first), or in a local folder that a vLLM-style
   ``<version>/model.json`` names as ``"tokenizer"`` or ``"model"``; read with the
   ``tokenizers`` library (no model hub: only local files are read).
2. Otherwise a :class:`WhitespaceTokenizer`: each word with the whitespace before it is one
   token. That is an **approximation** of a real tokenizer's counts (real tokenizers split words
   into sub-words), and exactly how the bundled mock LLM (``examples/mock_llm``) counts and
   streams its tokens.

A :class:`Tokenizer` counts tokens (``count``) and splits text into pieces that concatenate back
to the text (``split``): one piece per token for the whitespace tokenizer; for a real tokenizer
one piece per token where a token covers its own characters (tokens that share characters, as
byte-level pieces of one character do, are merged into one piece).
"""

from __future__ import annotations

import itertools
import json
import pathlib
import re
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "HFTokenizer",
    "Tokenizer",
    "WhitespaceTokenizer",
    "candidate_dirs",
    "load_tokenizer",
]


#: a word with the whitespace before it, or whitespace that ends the text
_WHITESPACE_TOKEN = re.compile(r"\s*\S+|\s+")


@runtime_checkable
class Tokenizer(Protocol):
    """What the frontend needs of a tokenizer."""

    def count(self, text: str) -> int:
        """The number of tokens of ``text`` (no special tokens added)."""
        ...

    def split(self, text: str) -> list[str]:
        """Pieces of ``text`` that concatenate back to ``text``, one per token (or group of
        tokens sharing characters)."""
        ...


class WhitespaceTokenizer:
    """Words with their leading whitespace as tokens: ``"Hi  there\\n"`` is
    ``["Hi", "  there", "\\n"]`` (trailing whitespace is a token of its own).

    An approximation of a real tokenizer's counts, used when a model folder has no
    ``tokenizer.json``; the bundled mock LLM counts and streams its tokens the same way.
    """

    name = "whitespace"

    def count(self, text: str) -> int:
        return sum(1 for _ in _WHITESPACE_TOKEN.finditer(text))

    def split(self, text: str) -> list[str]:
        return _WHITESPACE_TOKEN.findall(text)

    def __repr__(self) -> str:
        return "WhitespaceTokenizer()"


class HFTokenizer:
    """A Hugging Face ``tokenizer.json`` read with the ``tokenizers`` library; truncation and
    padding saved in the file are switched off, no special tokens are added."""

    def __init__(self, path: pathlib.Path) -> None:
        try:
            from tokenizers import Tokenizer as _Tokenizer
        except ImportError as exc:  # pragma: no cover - a dependency of the plugin
            raise ValueError(
                f"{path} needs the 'tokenizers' library: pip install tokenizers"
            ) from exc
        try:
            tokenizer = _Tokenizer.from_file(str(path))
        except Exception as exc:
            raise ValueError(f"cannot read the tokenizer {path}: {exc}") from exc
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self.path = path
        self.name = str(path)

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def split(self, text: str) -> list[str]:
        if not text:
            return []
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        # each piece starts where a token's characters start; the first piece also holds any
        # text before the first token (e.g. whitespace a normalizer dropped)
        starts = sorted({start for start, end in encoding.offsets if end > start and start > 0})
        bounds = [0, *starts, len(text)]
        return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]

    def __repr__(self) -> str:
        return f"HFTokenizer({str(self.path)!r})"


def _version_dirs(model_dir: pathlib.Path) -> list[pathlib.Path]:
    """The numeric version folders of a model folder, highest version first."""
    try:
        found = [p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    except OSError:
        return []
    return sorted(found, key=lambda p: int(p.name), reverse=True)


def _model_json_dirs(folder: pathlib.Path, root: pathlib.Path) -> Iterator[pathlib.Path]:
    """Folders inside ``root`` (the model's folder) that a vLLM ``model.json`` in ``folder``
    names as its ``tokenizer`` or ``model`` (relative to ``folder``)."""
    path = folder / "model.json"
    if not path.is_file():
        return
    try:
        engine_args: Any = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(engine_args, dict):
        return
    for key in ("tokenizer", "model"):
        value = engine_args.get(key)
        if isinstance(value, str) and value:
            # only a folder inside the model's: a config may not make the frontend read
            # elsewhere (--frontend-config openai,tokenizer=<path> names any folder)
            local = (folder / value).resolve()
            if local.is_relative_to(root) and local.is_dir():
                yield local


def candidate_dirs(model_dir: pathlib.Path | None) -> list[pathlib.Path]:
    """Where a model's tokenizer files are looked for, in order: the model folder, its version
    folders (highest first), then local folders named by a version folder's vLLM
    ``model.json`` (``"tokenizer"``, then ``"model"``)."""
    if model_dir is None:
        return []
    model_dir = pathlib.Path(model_dir)
    dirs = [model_dir, *_version_dirs(model_dir)]
    for folder in list(dirs):
        dirs.extend(_model_json_dirs(folder, model_dir.resolve()))
    unique: list[pathlib.Path] = []
    for folder in dirs:
        if folder not in unique:
            unique.append(folder)
    return unique


def load_tokenizer(model_dir: pathlib.Path | None) -> Tokenizer:
    """The model's ``tokenizer.json`` (see :func:`candidate_dirs`), else a
    :class:`WhitespaceTokenizer` (an approximation). A ``tokenizer.json`` that cannot be read
    raises :class:`ValueError`."""
    for folder in candidate_dirs(model_dir):
        path = folder / "tokenizer.json"
        if path.is_file():
            return HFTokenizer(path)
    return WhitespaceTokenizer()
