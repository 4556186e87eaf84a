"""Small tree models trained on synthetic data, for tests and the predictor benchmark.

Each helper returns the model file's bytes and the trained in-process model (the reference the
tests compare the server with). The frameworks are imported inside the functions.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

FEATURES = 8


def data(rows: int = 400, features: int = FEATURES, seed: int = 0) -> np.ndarray:
    """Standard-normal FP32 samples ``[rows, features]``."""
    return np.random.default_rng(seed).standard_normal((rows, features)).astype(np.float32)


def targets(x: np.ndarray, kind: str) -> np.ndarray:
    """Labels for ``x``: ``regression`` (a smooth function), ``binary`` or ``multiclass`` (3)."""
    signal = x[:, 0] + 0.5 * x[:, 1] - 0.25 * x[:, 2] ** 2
    if kind == "regression":
        return signal.astype(np.float32)
    if kind == "binary":
        return (signal > 0).astype(np.int32)
    return np.digitize(signal, [-0.5, 0.5]).astype(np.int32)


def _saved(save: Any, name: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        save(str(path))
        return path.read_bytes()


def xgboost_model(
    kind: str, fmt: str = "json", trees: int = 10, depth: int = 4, x: np.ndarray | None = None
) -> tuple[bytes, Any]:
    """An XGBoost Booster (``reg:squarederror``, ``binary:logistic`` or ``multi:softprob``)
    saved as ``json`` or ``ubj``; returns (file bytes, booster)."""
    import xgboost as xgb

    x = data() if x is None else x
    objectives: dict[str, dict[str, Any]] = {
        "regression": {"objective": "reg:squarederror"},
        "binary": {"objective": "binary:logistic"},
        "multiclass": {"objective": "multi:softprob", "num_class": 3},
    }
    params: dict[str, Any] = {**objectives[kind], "max_depth": depth, "nthread": 1, "seed": 0}
    booster = xgb.train(params, xgb.DMatrix(x, targets(x, kind)), num_boost_round=trees)
    return _saved(booster.save_model, f"model.{fmt}"), booster


def lightgbm_model(
    kind: str, trees: int = 10, leaves: int = 15, x: np.ndarray | None = None
) -> tuple[bytes, Any]:
    """A LightGBM Booster (``regression``, ``binary`` or ``multiclass``) in its text format;
    returns (file bytes, booster)."""
    import lightgbm as lgb

    x = data() if x is None else x
    objectives: dict[str, dict[str, Any]] = {
        "regression": {"objective": "regression"},
        "binary": {"objective": "binary"},
        "multiclass": {"objective": "multiclass", "num_class": 3},
    }
    params: dict[str, Any] = {
        **objectives[kind],
        "num_leaves": leaves,
        "num_threads": 1,
        "verbose": -1,
        "seed": 0,
    }
    booster = lgb.train(params, lgb.Dataset(x, targets(x, kind)), num_boost_round=trees)
    return _saved(booster.save_model, "model.txt"), booster


def treelite_checkpoint(model_bytes: bytes, fmt: str = "json") -> bytes:
    """The Treelite checkpoint of an XGBoost model file (``json`` or ``ubj``)."""
    import treelite

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"model.{fmt}"
        src.write_bytes(model_bytes)
        model = treelite.frontend.load_xgboost_model(
            src, format_choice="json" if fmt == "json" else "ubjson"
        )
        return _saved(model.serialize, "checkpoint.tl")
