"""``tritonx._dataplane.classification``: Triton's top-k "value:index[:label]" strings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tritonx._dataplane.classification import LabelCache, classify
from tritonx.errors import TritonXError


def test_float_top_k_with_labels_and_ties() -> None:
    out = classify(np.array([1, 3, 3, 2], np.float32), 3, batched=False, labels=["a", "b", "", "d"])
    assert out.tolist() == [b"3.000000:1:b", b"3.000000:2", b"2.000000:3:d"]


def test_batched_and_k_capped() -> None:
    out = classify(np.array([[1, 2], [4, 3]], np.int32), 5, batched=True)
    assert out.shape == (2, 2)
    assert out.tolist() == [[b"2:1", b"1:0"], [b"4:0", b"3:1"]]


def test_unsigned_and_fp64() -> None:
    assert classify(np.array([0, 255], np.uint8), 1, batched=False).tolist() == [b"255:1"]
    assert classify(np.array([0.5], np.float64), 1, batched=False).tolist() == [b"0.500000:0"]


@pytest.mark.parametrize("dtype", [np.float16, np.bool_, object])
def test_unsupported_types(dtype: type) -> None:
    with pytest.raises(TritonXError, match="class result not available"):
        classify(np.zeros(2, dtype=dtype), 1, batched=False)


def test_label_cache_reads_only_inside_the_model_folder(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "labels.txt").write_text("x\ny\n")
    (tmp_path / "secret.txt").write_text("top secret\n")
    (model / "link.txt").symlink_to(tmp_path / "secret.txt")
    cache = LabelCache(model)
    assert cache.get("labels.txt") == ["x", "y"]
    assert cache.get("missing") is None
    assert cache.get("../secret.txt") is None
    assert cache.get(str(tmp_path / "secret.txt")) is None
    assert cache.get("link.txt") is None
