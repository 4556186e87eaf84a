"""The FIL backend served by an in-process tritonx server.

Every model is trained here on small synthetic data (XGBoost, LightGBM, and a Treelite
checkpoint made from an XGBoost model); the server's answers over tritonclient HTTP and gRPC
are compared with the framework's own in-process prediction on the same rows.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")
treelite = pytest.importorskip("treelite")
gtil = pytest.importorskip("treelite.gtil")

import tritonclient.grpc.aio as grpcclient  # noqa: E402
import tritonclient.http.aio as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

import tritonx_backend_fil  # noqa: E402
from tritonx import InferenceRequest, InstanceSpec, LoadContext, Server  # noqa: E402
from tritonx._runtime.plugins import make_plugin_manager  # noqa: E402
from tritonx.errors import Code, TritonXError  # noqa: E402
from tritonx.testing import BackendContract, ModelRepositoryBuilder, ServeProcess, identity  # noqa: E402
from tritonx.testing import model_status as status  # noqa: E402
from tritonx.testing import serve_repository as serve  # noqa: E402
from tritonx.types import ModelState  # noqa: E402
from tritonx_backend_fil.backend import FILBackend  # noqa: E402
from tritonx_backend_fil.models import (  # noqa: E402
    FEATURES,
    data,
    lightgbm_model,
    treelite_checkpoint,
    xgboost_model,
)

ONE_CPU = "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
RTOL, ATOL = 1e-5, 1e-6

# ----------------------------------------------------------------------------- helpers


@pytest.fixture
def plugin_manager() -> Any:
    """The identity test backend plus this plugin, registered from its module."""
    return make_plugin_manager(autoload=False, extra=[identity, tritonx_backend_fil])


def add_fil(
    repo: ModelRepositoryBuilder,
    name: str,
    files: dict[str, bytes],
    out: int,
    *,
    features: int = FEATURES,
    max_batch_size: int = 8,
    extra: str = ONE_CPU,
    **parameters: str,
) -> Path:
    """A ``backend: "fil"`` model with FIL's input__0 / output__0 layout."""
    return repo.add(
        name,
        backend="fil",
        max_batch_size=max_batch_size,
        inputs=[("input__0", "FP32", [features] if max_batch_size else [-1, features])],
        outputs=[("output__0", "FP32", [out] if max_batch_size else [-1, out])],
        parameters=parameters,
        extra=extra,
        versions={1: files},
    )


async def infer_both(server: Server, model: str, x: np.ndarray) -> list[np.ndarray]:
    """``output__0`` for ``x`` through tritonclient HTTP and gRPC: [http, grpc]."""
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        results = []
        for module, client in ((httpclient, http), (grpcclient, grpc)):
            tensor = module.InferInput("input__0", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            result = await client.infer(model, [tensor])
            results.append(result.as_numpy("output__0"))
        return results
    finally:
        await http.close()
        await grpc.close()


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def load_instance(model_dir: Path, config: Any, kind: str = "KIND_CPU", **backend: str) -> Any:
    """One instance loaded the way the server loads it."""
    filename = config.raw.default_model_filename
    ctx = LoadContext(
        model_name=model_dir.name,
        version=1,
        model_dir=model_dir,
        version_path=model_dir / "1",
        model_path=model_dir / "1" / filename if filename else None,
        config=config,
        instance=InstanceSpec(name=f"{model_dir.name}_0", group_name=model_dir.name, kind=kind),
    )
    return FILBackend(backend).load(ctx)


# ----------------------------------------------------------------------------- the contract


class TestFILContract(BackendContract):
    """The contract suite on a dynamically batched XGBoost binary classifier (UBJSON)."""

    backend_module = "tritonx_backend_fil"
    framework_modules = ("xgboost", "lightgbm", "treelite")

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder) -> Path:
        model, _ = xgboost_model("binary", "ubj")
        return add_fil(
            model_repository,
            "xgb",
            {"xgboost.ubj": model},
            2,
            extra="dynamic_batching { }\n" + ONE_CPU,
            model_type="xgboost_ubj",
            is_classifier="true",
            predict_proba="true",
        )


class TestFILLightGBMContract(BackendContract):
    """The contract suite on an unbatched LightGBM multi-class model (scores per class)."""

    backend_module = "tritonx_backend_fil"
    framework_modules = ("xgboost", "lightgbm", "treelite")

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder) -> Path:
        model, _ = lightgbm_model("multiclass")
        return add_fil(
            model_repository,
            "lgb",
            {"model.txt": model},
            3,
            max_batch_size=0,
            model_type="lightgbm",
            is_classifier="true",
            predict_proba="true",
        )


# ----------------------------------------------------------------------------- accuracy


def build_models(repo: ModelRepositoryBuilder) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """Every model kind in ``repo``; returns model name -> the framework's expected output."""
    x_reg, reg = xgboost_model("regression", "json", trees=20)
    x_bin, binary = xgboost_model("binary", "ubj")
    x_mul, multi = xgboost_model("multiclass", "json")
    l_bin, lbinary = lightgbm_model("binary")
    l_mul, lmulti = lightgbm_model("multiclass")
    l_reg, lreg = lightgbm_model("regression")
    expected: dict[str, Callable[[np.ndarray], np.ndarray]] = {}

    def p(booster: Any) -> Callable[[np.ndarray], np.ndarray]:
        if isinstance(booster, xgb.Booster):
            return lambda x: np.asarray(booster.inplace_predict(x)).reshape(len(x), -1)
        return lambda x: np.asarray(booster.predict(x)).reshape(len(x), -1)

    add_fil(repo, "xgb_reg", {"xgboost.json": x_reg}, 1, model_type="xgboost_json")
    expected["xgb_reg"] = p(reg)
    add_fil(
        repo,
        "xgb_bin_proba",
        {"xgboost.ubj": x_bin},
        2,
        model_type="xgboost_ubj",
        is_classifier="true",
        predict_proba="true",
    )
    expected["xgb_bin_proba"] = lambda x: np.hstack([1 - p(binary)(x), p(binary)(x)])
    add_fil(
        repo,
        "xgb_bin_p1",
        {"xgboost.ubj": x_bin},
        1,
        model_type="xgboost_ubj",
        is_classifier="true",
        predict_proba="true",
    )
    expected["xgb_bin_p1"] = p(binary)
    add_fil(
        repo,
        "xgb_bin_class",
        {"xgboost.ubj": x_bin},
        1,
        model_type="xgboost_ubj",
        is_classifier="true",
        threshold="0.3",
    )
    expected["xgb_bin_class"] = lambda x: (p(binary)(x) > 0.3).astype(np.float32)
    add_fil(
        repo,
        "xgb_multi_class",
        {"xgboost.json": x_mul},
        1,
        model_type="xgboost_json",
        output_class="true",  # FIL's legacy name of is_classifier
    )
    expected["xgb_multi_class"] = lambda x: p(multi)(x).argmax(axis=1).reshape(-1, 1)
    add_fil(
        repo,
        "xgb_multi_proba",
        {"xgboost.json": x_mul},
        3,
        model_type="xgboost_json",
        is_classifier="true",
        predict_proba="true",
    )
    expected["xgb_multi_proba"] = p(multi)
    add_fil(
        repo,
        "xgb_custom_name",
        {"trees.bin": x_reg},
        1,
        model_type="xgboost_json",
        extra='default_model_filename: "trees.bin"\n' + ONE_CPU,
    )
    expected["xgb_custom_name"] = p(reg)
    add_fil(  # a folder named by default_model_filename: FIL's file name inside it
        repo,
        "xgb_folder",
        {"trees/xgboost.json": x_reg},
        1,
        model_type="xgboost_json",
        extra='default_model_filename: "trees"\n' + ONE_CPU,
    )
    expected["xgb_folder"] = p(reg)
    add_fil(
        repo,
        "tl_multi",
        {"checkpoint.tl": treelite_checkpoint(x_mul, "json")},
        3,
        model_type="treelite_checkpoint",
        is_classifier="true",
        predict_proba="true",
    )
    expected["tl_multi"] = p(multi)
    add_fil(repo, "lgb_reg", {"model.txt": l_reg}, 1, model_type="lightgbm")
    expected["lgb_reg"] = p(lreg)
    add_fil(
        repo,
        "lgb_bin_class",
        {"model.txt": l_bin},
        1,
        model_type="lightgbm",
        is_classifier="true",
    )
    expected["lgb_bin_class"] = lambda x: (p(lbinary)(x) > 0.5).astype(np.float32)
    add_fil(
        repo,
        "lgb_multi_proba",
        {"model.txt": l_mul},
        3,
        model_type="lightgbm",
        is_classifier="true",
        predict_proba="true",
        storage_type="AUTO",  # removed from FIL (GPU tuning): accepted, ignored
        layout="breadth_first",  # GPU only: accepted, ignored
    )
    expected["lgb_multi_proba"] = lambda x: softmax(lmulti.predict(x, raw_score=True))
    add_fil(
        repo,
        "lgb_multi_class",
        {"model.txt": l_mul},
        1,
        model_type="lightgbm",
        is_classifier="true",
        cpu_nthread="1",
    )
    expected["lgb_multi_class"] = lambda x: p(lmulti)(x).argmax(axis=1).reshape(-1, 1)
    return expected


@pytest.mark.parametrize("predictor", ["auto", "gtil"])
async def test_every_model_kind_matches_the_framework_over_http_and_grpc(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, predictor: str
) -> None:
    """XGBoost (JSON, UBJSON), LightGBM and Treelite models, regressors and classifiers, with
    and without predict_proba: HTTP and gRPC answers equal the framework's prediction, with
    the measured-fastest predictors (auto) and with Treelite's GTIL for every format."""
    expected = build_models(model_repository)
    x = data(rows=7, seed=42)
    x[1, 0] = x[2, :] = np.nan  # missing values take each tree's default branch
    async with serve(
        model_repository, plugin_manager, backend_config={"fil": {"predictor": predictor}}
    ) as server:
        for name, want in expected.items():
            assert server.model_ready(name), server.status_table()
            reference = want(x).astype(np.float32)
            for got in await infer_both(server, name, x):
                assert got.dtype == np.float32, name
                assert got.shape == reference.shape, (name, got.shape, reference.shape)
                np.testing.assert_allclose(got, reference, rtol=RTOL, atol=ATOL, err_msg=name)


async def test_tl2cgen_predictor_matches_the_framework_on_training_rows(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, caplog: Any
) -> None:
    """``--backend-config=fil,predictor=tl2cgen`` compiles each model with TL2cgen at load:
    on the training rows (values exactly on split thresholds) the answers equal the
    framework's."""
    pytest.importorskip("tl2cgen")
    if shutil.which("gcc") is None:
        pytest.skip("TL2cgen needs gcc")
    caplog.set_level(logging.INFO, logger="tritonx.backend.fil")
    x = data()
    model, booster = xgboost_model("multiclass", "json", x=x)
    lgbm, lbooster = lightgbm_model("binary", x=x)
    for name in ("a", "b"):
        add_fil(
            model_repository, f"xgb_{name}", {"xgboost.json": model}, 3, max_batch_size=64,
            model_type="xgboost_json", is_classifier="true", predict_proba="true",
        )  # fmt: skip
    add_fil(
        model_repository, "tl", {"checkpoint.tl": treelite_checkpoint(model)}, 1,
        max_batch_size=64, model_type="treelite_checkpoint", is_classifier="true",
    )  # fmt: skip
    add_fil(
        model_repository, "lgb", {"model.txt": lgbm}, 1, max_batch_size=64, model_type="lightgbm"
    )
    async with serve(
        model_repository, plugin_manager, backend_config={"fil": {"predictor": "tl2cgen"}}
    ) as server:
        for name in ("xgb_a", "xgb_b", "tl", "lgb"):
            assert server.model_ready(name), server.status_table()
        want = booster.inplace_predict(x)
        rows = x[:64]
        for name, reference in (
            ("xgb_a", want[:64]),
            ("xgb_b", want[:64]),
            ("tl", want[:64].argmax(axis=1).reshape(-1, 1)),
            ("lgb", lbooster.predict(rows).reshape(-1, 1)),
        ):
            for got in await infer_both(server, name, rows):
                np.testing.assert_allclose(got, reference, rtol=RTOL, atol=ATOL, err_msg=name)
    assert caplog.text.count("predictor tl2cgen") == 4, caplog.text


async def test_binary_threshold_and_edge_rows(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """The class of a binary classifier is ``P(1) > threshold`` on the very rows the
    framework scores, thresholds 0 and 1 included."""
    model, booster = xgboost_model("binary", "json")
    for threshold in ("0", "0.5", "1"):
        add_fil(
            model_repository,
            f"t{threshold.replace('.', '_')}",
            {"xgboost.json": model},
            1,
            model_type="xgboost_json",
            is_classifier="true",
            threshold=threshold,
        )
    x = data(rows=8, seed=3)
    prob = booster.inplace_predict(x).reshape(-1, 1)
    async with serve(model_repository, plugin_manager) as server:
        for threshold in ("0", "0.5", "1"):
            name = f"t{threshold.replace('.', '_')}"
            for got in await infer_both(server, name, x):
                np.testing.assert_array_equal(got, (prob > float(threshold)).astype(np.float32))


async def test_a_request_of_no_rows_gets_no_rows(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """An unbatched model's ``[rows, features]`` input with 0 rows answers ``[0, width]``
    (the frameworks refuse an empty matrix; it is no error)."""
    model, _ = xgboost_model("binary", "json")
    add_fil(
        model_repository,
        "rows",
        {"xgboost.json": model},
        1,
        max_batch_size=0,
        model_type="xgboost_json",
    )
    async with serve(model_repository, plugin_manager) as server:
        for got in await infer_both(server, "rows", np.zeros((0, FEATURES), np.float32)):
            assert got.shape == (0, 1) and got.dtype == np.float32


# ----------------------------------------------------------------------------- batching


async def test_concurrent_requests_form_one_batch_with_compute_times(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, monkeypatch: Any
) -> None:
    """Four concurrent gRPC requests reach the model as one batch, predicted in one call
    (the batch is full only once all four are queued, so no timing is involved); the
    statistics show one execution of four inferences and its compute times."""
    model, booster = xgboost_model("regression", "json")
    add_fil(
        model_repository,
        "batched",
        {"xgboost.json": model},
        1,
        max_batch_size=4,
        extra="dynamic_batching { max_queue_delay_microseconds: 60000000 }\n" + ONE_CPU,
        model_type="xgboost_json",
    )
    calls: list[int] = []
    real = gtil.predict

    def counting(model: Any, x: np.ndarray, **kw: Any) -> Any:
        calls.append(len(x))
        return real(model, x, **kw)

    monkeypatch.setattr(gtil, "predict", counting)
    rows = [data(rows=1, seed=s) for s in range(4)]
    async with serve(model_repository, plugin_manager) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        http = httpclient.InferenceServerClient(server.http_url)
        try:

            async def one(x: np.ndarray) -> np.ndarray:
                tensor = grpcclient.InferInput("input__0", list(x.shape), "FP32")
                tensor.set_data_from_numpy(x)
                return (await client.infer("batched", [tensor])).as_numpy("output__0")

            results = await asyncio.gather(*(one(x) for x in rows))
            stats = await http.get_inference_statistics("batched")
        finally:
            await client.close()
            await http.close()
    assert calls == [4]
    for x, got in zip(rows, results, strict=True):
        np.testing.assert_allclose(got, booster.inplace_predict(x).reshape(-1, 1), rtol=RTOL)
    (model_stats,) = stats["model_stats"]
    assert model_stats["inference_count"] == 4
    assert model_stats["execution_count"] == 1
    inference = model_stats["inference_stats"]
    for phase in ("compute_input", "compute_infer", "compute_output"):
        assert inference[phase]["count"] == 4, phase
        assert inference[phase]["ns"] > 0, phase
    (batch,) = model_stats["batch_stats"]
    assert batch["batch_size"] == 4
    assert batch["compute_infer"]["count"] == 1


# ----------------------------------------------------------------------------- faults


async def test_bad_models_fail_alone_with_clear_messages(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """A corrupt file, a missing file, a bad parameter, a config that does not fit the model
    and SHAP output each fail their own model's load with a clear message; a good model in the
    same repository keeps serving."""
    model, booster = xgboost_model("regression", "json")
    add_fil(model_repository, "good", {"xgboost.json": model}, 1, model_type="xgboost_json")
    add_fil(
        model_repository, "corrupt", {"xgboost.json": b"{not json"}, 1, model_type="xgboost_json"
    )
    add_fil(model_repository, "corrupt_lgb", {"model.txt": b"garbage\n"}, 1, model_type="lightgbm")
    add_fil(model_repository, "missing", {"other.json": model}, 1, model_type="xgboost_json")
    add_fil(model_repository, "bad_type", {"xgboost.json": model}, 1, model_type="catboost")
    add_fil(model_repository, "unknown_key", {"xgboost.json": model}, 1, model_typo="xgboost")
    add_fil(
        model_repository, "bad_layout", {"xgboost.json": model}, 1,
        model_type="xgboost_json", layout="diagonal",
    )  # fmt: skip
    add_fil(
        model_repository, "features", {"xgboost.json": model}, 1, features=5,
        model_type="xgboost_json",
    )  # fmt: skip
    add_fil(model_repository, "width", {"xgboost.json": model}, 3, model_type="xgboost_json")
    model_repository.add(
        "shap",
        backend="fil",
        max_batch_size=8,
        inputs=[("input__0", "FP32", [FEATURES])],
        outputs=[("output__0", "FP32", [1]), ("treeshap_output", "FP32", [FEATURES + 1])],
        parameters={"model_type": "xgboost_json"},
        versions={1: {"xgboost.json": model}},
    )
    add_fil(model_repository, "new_format", {"xgboost.model": model}, 1)  # model_type: xgboost
    x = data(rows=50)
    two_targets = xgb.train({"nthread": 1}, xgb.DMatrix(x, np.stack([x[:, 0], x[:, 1]], 1)), 2)
    add_fil(
        model_repository, "multi_target", {"xgboost.ubj": bytes(two_targets.save_raw("ubj"))},
        1, model_type="xgboost_ubj",
    )  # fmt: skip
    expected = {
        "new_format": "set model_type to xgboost_json or xgboost_ubj",
        "multi_target": "Multi-target model not supported (num_target = 2)",
        "corrupt": "unable to load model 'corrupt'",
        "corrupt_lgb": "as lightgbm",
        "missing": "unable to find",
        "bad_type": "catboost not recognized as a valid serialization format",
        "unknown_key": "unknown parameter(s) 'model_typo'",
        "bad_layout": "Unknown nvForest layout name: diagonal",
        "features": "the model has 8 features",
        "width": "expected [1]",
        "shap": "'treeshap_output' output (SHAP values) is not supported",
    }
    async with serve(model_repository, plugin_manager) as server:
        for name, text in expected.items():
            state, reason = status(server, name)
            assert state is ModelState.UNAVAILABLE, (name, state, reason)
            assert text in reason, (name, reason)
        x = data(rows=3, seed=9)
        for got in await infer_both(server, "good", x):
            np.testing.assert_allclose(got, booster.inplace_predict(x).reshape(-1, 1), rtol=RTOL)
        # the missing file's message names the file FIL reads for the model_type
        assert "xgboost.json" in status(server, "missing")[1]


async def test_wrong_dtype_and_shape_are_invalid_argument(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """Requests of the wrong datatype or number of features get Triton's 400 /
    INVALID_ARGUMENT (checked by the core against the config) and the model keeps serving."""
    model, booster = xgboost_model("regression", "json")
    add_fil(model_repository, "m", {"xgboost.json": model}, 1, model_type="xgboost_json")
    async with serve(model_repository, plugin_manager) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            for x, dtype, text in (
                (
                    np.zeros((2, FEATURES), np.float64),
                    "FP64",
                    "data-type is 'FP64', but model 'm' expects 'FP32'",
                ),
                (np.zeros((2, FEATURES + 1), np.float32), "FP32", "unexpected shape"),
            ):
                for module, client, code in (
                    (httpclient, http, "400"),
                    (grpcclient, grpc, "StatusCode.INVALID_ARGUMENT"),
                ):
                    tensor = module.InferInput("input__0", list(x.shape), dtype)
                    tensor.set_data_from_numpy(x)
                    with pytest.raises(InferenceServerException) as info:
                        await client.infer("m", [tensor])
                    assert info.value.status() == code, info.value
                    assert text in info.value.message(), info.value.message()
        finally:
            await http.close()
            await grpc.close()
        x = data(rows=2)
        for got in await infer_both(server, "m", x):
            np.testing.assert_allclose(got, booster.inplace_predict(x).reshape(-1, 1), rtol=RTOL)


async def test_framework_exception_fails_only_that_request(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, monkeypatch: Any
) -> None:
    """A framework exception during prediction fails that request with INTERNAL (HTTP 500)
    and the framework's message; within a batch only the failing request fails; the server and
    the model keep serving."""
    model, booster = xgboost_model("regression", "json")
    path = add_fil(model_repository, "m", {"xgboost.json": model}, 1, model_type="xgboost_json")
    real = gtil.predict

    def failing(model: Any, x: np.ndarray, **kw: Any) -> Any:
        if (x == 13).any():
            raise treelite.TreeliteError("GTIL exploded on purpose")
        return real(model, x, **kw)

    monkeypatch.setattr(gtil, "predict", failing)
    bad = np.full((1, FEATURES), 13, np.float32)
    good = data(rows=2)
    async with serve(model_repository, plugin_manager) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            for module, client, code in (
                (httpclient, http, "500"),
                (grpcclient, grpc, "StatusCode.INTERNAL"),
            ):
                tensor = module.InferInput("input__0", list(bad.shape), "FP32")
                tensor.set_data_from_numpy(bad)
                with pytest.raises(InferenceServerException) as info:
                    await client.infer("m", [tensor])
                assert info.value.status() == code
                assert "GTIL exploded on purpose" in info.value.message()
        finally:
            await http.close()
            await grpc.close()
        assert server.model_ready("m")
        for got in await infer_both(server, "m", good):
            np.testing.assert_allclose(got, booster.inplace_predict(good).reshape(-1, 1), rtol=RTOL)
        # one execute of three requests, the middle one failing: only it fails
        instance = load_instance(path, server.model_config("m"))
        requests = [InferenceRequest("m", {"input__0": x}) for x in (good, bad, good[:1])]
        for r in requests:
            r.batch_size = len(r.inputs["input__0"])
        responses = await asyncio.to_thread(instance.execute, requests)
        assert responses[1].error is not None
        assert responses[1].error.code is Code.INTERNAL
        assert "GTIL exploded on purpose" in responses[1].error.message
        for i in (0, 2):
            x = requests[i].inputs["input__0"]
            np.testing.assert_allclose(
                responses[i].raise_for_error().outputs["output__0"],
                booster.inplace_predict(x).reshape(-1, 1),
                rtol=RTOL,
            )


async def test_kind_gpu_is_refused(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """There is no GPU path: a KIND_GPU instance is refused at load with a clear message."""
    model, _ = xgboost_model("regression", "json")
    path = add_fil(model_repository, "m", {"xgboost.json": model}, 1, model_type="xgboost_json")
    async with serve(model_repository, plugin_manager) as server:
        config = server.model_config("m")
    with pytest.raises(TritonXError) as info:
        await asyncio.to_thread(load_instance, path, config, "KIND_GPU")
    assert info.value.code is Code.UNSUPPORTED
    assert "runs models on the CPU only" in info.value.message


# ----------------------------------------------------------------------------- tritonx check


def test_tritonx_check_reads_fil_models(model_repository: ModelRepositoryBuilder) -> None:
    """``tritonx check`` reads each FIL model with Treelite: a good one is OK with its
    description and predictor, one whose config does not fit the model is an error."""
    model, _ = xgboost_model("multiclass", "json")
    lgbm, _ = lightgbm_model("regression")
    add_fil(
        model_repository, "good", {"xgboost.json": model}, 3,
        model_type="xgboost_json", is_classifier="true", predict_proba="true",
    )  # fmt: skip
    add_fil(model_repository, "lgbm", {"model.txt": lgbm}, 1, model_type="lightgbm")
    add_fil(model_repository, "bad", {"xgboost.json": model}, 1, model_type="xgboost_json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
    env["TRITONX_PLUGINS"] = "backend_fil"
    result = subprocess.run(
        [sys.executable, "-m", "tritonx", "check", "--json", str(model_repository.root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    models = {m["name"]: m for m in json.loads(result.stdout)}
    assert models["good"]["status"] == "OK", models["good"]
    assert models["good"]["notes"] == {
        "model": "xgboost_json: 30 trees, 8 features, 3 classes",
        "predictor": "gtil",
    }
    assert models["lgbm"]["notes"]["predictor"] == "lightgbm"
    assert models["bad"]["status"] == "ERROR"
    assert "expected [3]" in models["bad"]["error"]


# ----------------------------------------------------------------------------- concurrency


def test_instances_predict_concurrently_without_sharing_state(
    model_repository: ModelRepositoryBuilder,
) -> None:
    """Two instances of one model, each driven from its own thread at the same moment (a
    barrier), both give the framework's answer: instances share no predictor state."""
    model, booster = lightgbm_model("multiclass")
    path = add_fil(
        model_repository, "m", {"model.txt": model}, 3,
        model_type="lightgbm", is_classifier="true", predict_proba="true",
    )  # fmt: skip
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    from tritonx.config import ModelConfig

    raw = text_format.Parse((path / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    config = ModelConfig(raw)
    instances = [load_instance(path, config) for _ in range(2)]
    x = data(rows=16, seed=5)
    barrier = threading.Barrier(2)
    out: list[Any] = [None, None]

    def run(i: int) -> None:
        barrier.wait()
        req = InferenceRequest("m", {"input__0": x})
        req.batch_size = len(x)
        out[i] = instances[i].execute([req])[0].raise_for_error().outputs["output__0"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in out:
        np.testing.assert_allclose(got, booster.predict(x), rtol=RTOL, atol=ATOL)


# ----------------------------------------------------------------------------- tritonx serve


def test_tritonx_serve_subprocess(model_repository: ModelRepositoryBuilder, tmp_path: Path) -> None:
    """``tritonx serve`` with the installed plugin (entry point ``backend_fil``): a LightGBM
    model answers the synchronous tritonclient over HTTP and gRPC next to a corrupt model that
    failed alone, and ``/metrics`` counts its compute time."""
    model, booster = lightgbm_model("binary")
    add_fil(
        model_repository, "lgb", {"model.txt": model}, 2,
        model_type="lightgbm", is_classifier="true", predict_proba="true",
    )  # fmt: skip
    add_fil(model_repository, "broken", {"model.txt": b"tree\nnonsense"}, 1, model_type="lightgbm")
    x = data(rows=5, seed=11)
    p = booster.predict(x).reshape(-1, 1)
    with ServeProcess(
        model_repository.root,
        tmp_path / "serve.log",
        "--exit-on-error=false",
        "--strict-readiness=false",
        plugins=("backend_fil",),
    ) as proc:
        import tritonclient.grpc as grpc_sync
        import tritonclient.http as http_sync

        for module, url in ((http_sync, proc.http_url), (grpc_sync, proc.grpc_url)):
            client = module.InferenceServerClient(url)
            try:
                assert client.is_model_ready("lgb")
                assert not client.is_model_ready("broken")
                tensor = module.InferInput("input__0", list(x.shape), "FP32")
                tensor.set_data_from_numpy(x)
                got = client.infer("lgb", [tensor]).as_numpy("output__0")
            finally:
                client.close()
            np.testing.assert_allclose(got, np.hstack([1 - p, p]), rtol=RTOL, atol=ATOL)
        samples = proc.metrics()
        labels = (("model", "lgb"), ("version", "1"))
        assert samples[("nv_inference_count_total", labels)] == 2 * len(x)
        assert samples[("nv_inference_compute_infer_duration_us_total", labels)] > 0
