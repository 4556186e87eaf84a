"""Which CPU predictor is fastest for a 100-tree model, batch 1 and 64 (the README's figures).

    python benchmarks/fil_predictors.py [--tl2cgen]

Per format it times Treelite's GTIL (``treelite.gtil.predict``, FIL's own CPU path), the
framework's own predictor (XGBoost ``inplace_predict``, LightGBM ``predict``) and, with
``--tl2cgen`` (needs ``pip install tl2cgen`` and a C compiler), TL2cgen-compiled code; it also
reports each predictor's largest difference from the framework's prediction on the training
rows (whose values sit exactly on split thresholds), for the 100-tree model and a 300-tree one. Median microseconds of many calls, in-process (no server).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

FEATURES = 32
TREES = 100


def timeit(fn: Callable[[], Any], calls: int) -> float:
    for _ in range(max(10, calls // 10)):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000


def models(
    folder: Path, trees: int
) -> tuple[np.ndarray, dict[str, tuple[Any, Callable[[np.ndarray], Any] | None]]]:
    """The training rows and, per format, (treelite model, framework predictor) of one binary
    classifier each."""
    import lightgbm as lgb
    import treelite
    import xgboost as xgb

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4000, FEATURES)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(np.int32)
    bst = xgb.train(
        {"objective": "binary:logistic", "max_depth": 6}, xgb.DMatrix(x, y), num_boost_round=trees
    )
    bst.save_model(folder / "xgboost.json")
    lgbm = lgb.train(
        {"objective": "binary", "num_leaves": 31, "verbose": -1},
        lgb.Dataset(x, y),
        num_boost_round=trees,
    )
    lgbm.save_model(folder / "model.txt")
    booster = lgb.Booster(model_file=str(folder / "model.txt"))
    tl_xgb = treelite.frontend.load_xgboost_model(folder / "xgboost.json", format_choice="json")
    tl_xgb.serialize(folder / "checkpoint.tl")
    return x, {
        "xgboost_json": (tl_xgb, lambda a: bst.inplace_predict(a, validate_features=False)),
        "lightgbm": (
            treelite.frontend.load_lightgbm_model(folder / "model.txt"),
            lambda a: booster.predict(a),
        ),
        "treelite_checkpoint": (treelite.Model.deserialize(folder / "checkpoint.tl"), None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tl2cgen", action="store_true", help="also time TL2cgen-compiled code")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument(
        "--quantize", type=int, default=0, help="TL2cgen's quantize parameter (1: its default)"
    )
    args = parser.parse_args()
    import treelite.gtil as gtil

    rng = np.random.default_rng(1)
    rows = rng.standard_normal((64, FEATURES)).astype(np.float32)
    print(f"cores: {os.cpu_count()}, {TREES} trees, {FEATURES} features; median us per call")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for trees in (TREES, 300):
            train, found = models(folder, trees)
            for fmt, (tl, framework) in found.items():
                candidates: dict[str, Callable[[np.ndarray], Any]] = {
                    "gtil": lambda a, tl=tl: gtil.predict(tl, a, nthread=-1),
                }
                if framework is not None:
                    candidates["framework"] = framework
                if args.tl2cgen:
                    import tl2cgen

                    lib = folder / f"{fmt}.so"
                    start = time.perf_counter()
                    tl2cgen.export_lib(
                        tl,
                        toolchain="gcc",
                        libpath=lib,
                        nthread=os.cpu_count(),
                        params={"quantize": args.quantize},
                    )
                    compile_s = time.perf_counter() - start
                    predictor = tl2cgen.Predictor(lib)
                    candidates["tl2cgen"] = lambda a, p=predictor: p.predict(tl2cgen.DMatrix(a))
                reference = framework or candidates["gtil"]
                # the training rows: their values are the split thresholds (XGBoost's hist
                # method and LightGBM cut at data values), where comparisons must be exact
                big = train
                want = np.asarray(reference(big)).reshape(len(big), -1)
                for name, fn in candidates.items():
                    diff = np.abs(np.asarray(fn(big)).reshape(len(big), -1) - want).max()
                    line = f"{trees:4d} trees {fmt:20s} {name:10s} max|diff| {diff:.2e}"
                    if trees == TREES:
                        b1 = timeit(lambda fn=fn: fn(rows[:1]), args.calls)
                        b64 = timeit(lambda fn=fn: fn(rows), args.calls // 4)
                        line += f"  batch 1: {b1:8.1f} us  batch 64: {b64:8.1f} us"
                    if name == "tl2cgen":
                        line += f"  (compile {compile_s:.1f} s)"
                    print(line, flush=True)


if __name__ == "__main__":
    main()
