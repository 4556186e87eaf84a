"""One Triton-layout repository with a model of every framework backend added for Triton's
formats beyond ONNX, Python, PyTorch and OpenVINO: a TensorFlow SavedModel (with and without
config.pbtxt: Triton auto-completes it), a TensorFlow GraphDef, a DALI pipeline (with and
without config.pbtxt), and XGBoost, LightGBM and Treelite tree models for the FIL backend — all
generated here. One ``tritonx serve`` process loads them all; tritonclient over HTTP and gRPC
gets the answers the frameworks give in-process on the same inputs.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

for module in ("tensorflow", "nvidia.dali", "xgboost", "lightgbm", "treelite", "PIL"):
    pytest.importorskip(module)
pytest.importorskip("tritonx_backend_tensorflow")
pytest.importorskip("tritonx_backend_dali")
pytest.importorskip("tritonx_backend_fil")

import tensorflow as tf  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
from PIL import Image  # noqa: E402

from tritonx.testing import ModelRepositoryBuilder, ServeProcess  # noqa: E402
from tritonx_backend_dali import pipelines  # noqa: E402
from tritonx_backend_fil import models as trees  # noqa: E402
from tritonx_backend_tensorflow import models as tfmodels  # noqa: E402

PLUGINS = ("backend_tensorflow", "backend_dali", "backend_fil", "backend_onnx")
FEATURES = 8
GRAPHDEF_CONFIG = """
name: "tf_graphdef"
platform: "tensorflow_graphdef"
max_batch_size: 8
input [ { name: "a", data_type: TYPE_FP32, dims: [ 3 ] },
        { name: "b", data_type: TYPE_FP32, dims: [ 3 ] } ]
output [ { name: "out", data_type: TYPE_FP32, dims: [ 3 ] } ]
"""
SAVEDMODEL_CONFIG = """
name: "tf_savedmodel_config"
platform: "tensorflow_savedmodel"
max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP32, dims: [ -1, 4 ] } ]
output [
  { name: "y", data_type: TYPE_FP32, dims: [ -1, 3 ] },
  { name: "total", data_type: TYPE_FP32, dims: [ 1 ], reshape: { shape: [ ] } }
]
"""
DALI_CONFIG = """
name: "dali_config"
backend: "dali"
max_batch_size: 8
input [ { name: "IMAGE", data_type: TYPE_UINT8, dims: [ -1 ], allow_ragged_batch: true } ]
output [ { name: "RESIZED", data_type: TYPE_UINT8, dims: [ 16, 16, 3 ] } ]
"""


class Artifacts:
    """The models written into the repository, with their in-process references."""

    dense: Any
    graph_fn: Any
    dali: bytes
    xgb: Any
    lgbm: Any
    treelite_model: Any


def fil(repo: ModelRepositoryBuilder, name: str, files: dict[str, bytes], model_type: str) -> None:
    repo.add(
        name,
        backend="fil",
        max_batch_size=8,
        inputs=[("input__0", "FP32", [FEATURES])],
        outputs=[("output__0", "FP32", [1])],
        parameters={"model_type": model_type, "is_classifier": "false"},
        extra="instance_group [ { count: 1, kind: KIND_CPU } ]\n",
        versions={1: files},
    )


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Artifacts]:
    work = tmp_path_factory.mktemp("framework_backends")
    repo = ModelRepositoryBuilder(work / "models")
    art = Artifacts()
    saved = work / "dense"
    art.dense = tfmodels.save_dense(saved)
    dense_files = tfmodels.tree(saved, "model.savedmodel")
    repo.add("tf_savedmodel", write_config=False, versions={1: dense_files})
    repo.add("tf_savedmodel_config", config=SAVEDMODEL_CONFIG, versions={1: dense_files})
    graphdef, art.graph_fn = tfmodels.frozen_graph()
    repo.add("tf_graphdef", config=GRAPHDEF_CONFIG, versions={1: {"model.graphdef": graphdef}})
    repo.add("dali_arith", write_config=False, versions={1: {"model.dali": pipelines.arithmetic()}})
    art.dali = pipelines.decode_resize(size=16)
    repo.add("dali", write_config=False, versions={1: {"model.dali": art.dali}})
    # the config renames the pipeline's output, as Triton's DALI backend allows
    repo.add("dali_config", config=DALI_CONFIG, versions={1: {"model.dali": art.dali}})
    x = trees.data(400, FEATURES)
    xgb_bytes, art.xgb = trees.xgboost_model("regression", "json", trees=20, x=x)
    fil(repo, "xgboost", {"xgboost.json": xgb_bytes}, "xgboost_json")
    lgbm_bytes, art.lgbm = trees.lightgbm_model("regression", trees=20, x=x)
    fil(repo, "lightgbm", {"model.txt": lgbm_bytes}, "lightgbm")
    fil(
        repo,
        "treelite",
        {"checkpoint.tl": trees.treelite_checkpoint(xgb_bytes)},
        "treelite_checkpoint",
    )
    return repo.root, art


@pytest.fixture(scope="module")
def served(artifacts: tuple[Path, Artifacts], tmp_path_factory: pytest.TempPathFactory) -> Any:
    root, _ = artifacts
    log = tmp_path_factory.mktemp("framework_backends_log") / "serve.log"
    with ServeProcess(root, log, plugins=PLUGINS, listeners=("http", "grpc"), timeout=180) as s:
        yield s


def infer_both(
    served: Any, model: str, inputs: dict[str, np.ndarray], outputs: list[str]
) -> list[dict[str, np.ndarray]]:
    """The outputs over HTTP and over gRPC (binary tensors)."""
    results = []
    for module, url in ((httpclient, served.http_url), (grpcclient, served.grpc_url)):
        client = module.InferenceServerClient(url)
        try:
            tensors = []
            for name, array in inputs.items():
                datatype = {"float32": "FP32", "uint8": "UINT8"}[str(array.dtype)]
                tensor = module.InferInput(name, list(array.shape), datatype)
                tensor.set_data_from_numpy(array)
                tensors.append(tensor)
            result = client.infer(model, tensors)
            results.append({name: result.as_numpy(name) for name in outputs})
        finally:
            client.close()
    return results


def test_every_model_loads(served: Any) -> None:
    client = httpclient.InferenceServerClient(served.http_url)
    try:
        index = {m["name"]: m.get("state") for m in client.get_model_repository_index()}
        config = client.get_model_config("tf_savedmodel")
        dali_config = client.get_model_config("dali")
    finally:
        client.close()
    assert index == {
        name: "READY"
        for name in (
            "dali",
            "dali_arith",
            "dali_config",
            "lightgbm",
            "tf_graphdef",
            "tf_savedmodel",
            "tf_savedmodel_config",
            "treelite",
            "xgboost",
        )
    }
    # auto-completed from the SavedModel's signature and from the DALI pipeline
    assert [t["name"] for t in config["input"]] == ["x"]
    assert sorted(t["name"] for t in config["output"]) == ["total", "y"]
    assert [t["name"] for t in dali_config["input"]] == ["IMAGE"]


@pytest.mark.parametrize("model", ["tf_savedmodel", "tf_savedmodel_config"])
def test_savedmodel(served: Any, artifacts: tuple[Path, Artifacts], model: str) -> None:
    _, art = artifacts
    x = np.random.default_rng(1).standard_normal((3, 5, 4)).astype(np.float32)
    want = art.dense.serve(tf.constant(x))
    for got in infer_both(served, model, {"x": x}, ["y", "total"]):
        np.testing.assert_allclose(got["y"], want["y"].numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            got["total"].reshape(-1), want["total"].numpy(), rtol=1e-5, atol=1e-5
        )


def test_graphdef(served: Any, artifacts: tuple[Path, Artifacts]) -> None:
    _, art = artifacts
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((4, 3)).astype(np.float32) for _ in range(2))
    want = art.graph_fn(tf.constant(a), tf.constant(b)).numpy()
    for got in infer_both(served, "tf_graphdef", {"a": a, "b": b}, ["out"]):
        np.testing.assert_allclose(got["out"], want, rtol=1e-5, atol=1e-6)


def jpeg(seed: int) -> np.ndarray:
    pixels = np.random.default_rng(seed).integers(0, 256, (24, 20, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return np.frombuffer(out.getvalue(), np.uint8)


@pytest.mark.parametrize("model", ["dali", "dali_config"])
def test_dali_pipeline(served: Any, artifacts: tuple[Path, Artifacts], model: str) -> None:
    _, art = artifacts
    client = httpclient.InferenceServerClient(served.http_url)
    try:  # auto-completed: the pipeline's output name; configured: the config's
        (output,) = [t["name"] for t in client.get_model_config(model)["output"]]
    finally:
        client.close()
    from tritonx_backend_dali.pipeline_info import parse_pipeline

    auto = parse_pipeline(art.dali).outputs[0].name  # DALI's name of the resize's output
    assert output == ("RESIZED" if model == "dali_config" else auto)
    image = jpeg(3)
    (want,) = pipelines.run(art.dali, {"IMAGE": [image]})[0]
    for got in infer_both(served, model, {"IMAGE": image[None, :]}, [output]):
        np.testing.assert_array_equal(got[output][0], want)


@pytest.mark.parametrize("model", ["xgboost", "lightgbm", "treelite"])
def test_tree_models(served: Any, artifacts: tuple[Path, Artifacts], model: str) -> None:
    import xgboost as xgb

    _, art = artifacts
    x = trees.data(6, FEATURES, seed=5)
    if model == "lightgbm":
        want = art.lgbm.predict(x)
    else:  # the Treelite checkpoint was made from the XGBoost model
        want = art.xgb.predict(xgb.DMatrix(x))
    for got in infer_both(served, model, {"input__0": x}, ["output__0"]):
        np.testing.assert_allclose(got["output__0"].reshape(-1), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("model", "shape"),
    [
        ("tf_savedmodel_config", ["--shape", "x:5,4"]),
        ("dali_arith", ["--shape", "INPUT0:16"]),
        ("xgboost", []),
    ],
)
def test_tritonx_analyze_sweeps_them(
    artifacts: tuple[Path, Artifacts], tmp_path: Path, model: str, shape: list[str]
) -> None:
    """``tritonx analyze`` (a tiny sweep, its own servers) measures each new backend's model
    and writes a config that serves."""
    import json

    from click.testing import CliRunner

    tools = pytest.importorskip("tritonx_tools_analyze.cli")
    root, _ = artifacts
    out = tmp_path / "out"
    args = [model, "--model-repository", str(root), "--output-dir", str(out), *shape]
    args += ["--concurrency=1,2", "--measurement-seconds=0.3", "--warmup-seconds=0.1"]
    args += ["--confirm-rounds=1", "--max-variants=1", "--load-generator=builtin", "--quiet"]
    result = CliRunner().invoke(tools.analyze, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = [r for r in json.loads((out / "results.json").read_text())["rows"]]
    assert rows and all(r["errors"] == 0 and r["infer_per_s"] > 0 for r in rows), rows
    assert (out / "config.pbtxt").read_text()
