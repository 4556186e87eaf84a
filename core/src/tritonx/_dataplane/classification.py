"""Triton's classification extension: an output turned into its top-k classes.

Shared by the HTTP and gRPC frontends. A client asks for ``classification: k`` on a requested
output; the server returns that output as a BYTES tensor of ``"<value>:<index>[:<label>]"``
strings, k' = min(k, elements per batch item) per batch item, sorted by value descending.
Values are formatted like C++ ``std::to_string`` (``5.000000`` for floats, plain integers);
labels come from the output's ``label_filename`` (one label per line, in the model directory).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tritonx.errors import invalid_arg

log = logging.getLogger("tritonx.classification")

#: Triton refuses to classify larger tensors (``kMaxClassificationElements``).
MAX_CLASSIFICATION_ELEMENTS = 1_000_000

_PROTOCOL_NAMES = {
    "b": "BOOL",
    "f2": "FP16",
    "O": "BYTES",
}


def _dtype_name(dtype: np.dtype) -> str:
    if dtype.kind == "f" and dtype.itemsize == 2:
        return "FP16"
    return _PROTOCOL_NAMES.get(dtype.kind, str(dtype).upper())


def classify(
    array: np.ndarray,
    class_count: int,
    *,
    batched: bool,
    labels: Sequence[str] | None = None,
) -> np.ndarray:
    """Return the top-``class_count`` classes of ``array`` as an object array of bytes.

    :param array: the output tensor (integer, FP32 or FP64).
    :param class_count: k, the number of classes asked for (> 0).
    :param batched: whether the first dimension is the batch (the model batches): then each
        batch item is classified separately and the result has shape ``[batch, k']``, else
        the whole tensor is one item and the shape is ``[k']``.
    :param labels: label of each class index (from ``label_filename``); an index past the
        end or an empty line adds no label.
    :raises TritonXError: INVALID_ARG for unsupported datatypes or tensors over 1,000,000
        elements, with Triton's messages.
    """
    dtype = array.dtype
    if dtype.kind not in "iuf" or (dtype.kind == "f" and dtype.itemsize not in (4, 8)):
        raise invalid_arg(
            f"class result not available for output due to unsupported type '{_dtype_name(dtype)}'"
        )
    batch = int(array.shape[0]) if batched and array.ndim > 0 else 0
    rows = array.reshape(max(batch, 1), -1) if array.size else array.reshape(max(batch, 1), 0)
    per_item = rows.shape[1]
    if per_item > MAX_CLASSIFICATION_ELEMENTS:
        raise invalid_arg("classification output tensor too large")
    k = min(int(class_count), per_item)
    is_float = dtype.kind == "f"
    out = np.empty((rows.shape[0], k), dtype=object)
    for r in range(rows.shape[0]):
        row = rows[r]
        # Descending by value, ties broken by the lower index first.
        order = per_item - 1 - np.argsort(row[::-1], kind="stable")[::-1][:k]
        for j, idx in enumerate(order.tolist()):
            value = row[idx]
            text = f"{float(value):f}" if is_float else str(int(value))
            text = f"{text}:{idx}"
            if labels is not None and idx < len(labels) and labels[idx]:
                text = f"{text}:{labels[idx]}"
            out[r, j] = text.encode("utf-8")
    return out if batch > 0 else out.reshape(k)


class LabelCache:
    """Label files of one model folder, read once and kept until they change on disk.

    A ``label_filename`` is always read from inside the model's folder: a name that resolves
    outside it (``../``, an absolute path, a symlink out) has no labels and is logged.
    """

    def __init__(self, model_dir: Path) -> None:
        self._root = model_dir.resolve()
        self._cache: dict[str, tuple[int, list[str]]] = {}

    def get(self, filename: str) -> list[str] | None:
        """The lines of ``filename`` (like C++ ``std::getline``), or None if it cannot be
        read or lies outside the model's folder."""
        path = (self._root / filename).resolve()
        if self._root not in path.parents:
            log.warning(
                "label file '%s' is outside the model folder %s: ignored", filename, self._root
            )
            return None
        key = os.fspath(path)
        try:
            mtime = os.stat(key).st_mtime_ns
        except OSError:
            return None
        hit = self._cache.get(key)
        if hit is not None and hit[0] == mtime:
            return hit[1]
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        self._cache[key] = (mtime, lines)
        return lines
