"""The TensorFlow backend served by a real tritonx server, queried with the official
tritonclient over HTTP and gRPC.

Every model is built here (a ``tf.Module`` saved as a SavedModel, a GraphDef frozen from a
``tf.function``); results are compared with TensorFlow running the same model in-process.
One server (a :class:`ServerThread`) serves most models for the whole module: importing and
loading TensorFlow costs seconds. Nothing sleeps and no duration is asserted.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

import tritonx_backend_tensorflow  # noqa: E402
from tritonx import InferenceRequest, InstanceSpec, LoadContext, Server  # noqa: E402
from tritonx._runtime.plugins import make_plugin_manager  # noqa: E402
from tritonx.config import ModelConfig  # noqa: E402
from tritonx.errors import Code, TritonXError  # noqa: E402
from tritonx.proto import model_config_pb2  # noqa: E402
from tritonx.testing import (  # noqa: E402
    BackendContract,
    ModelRepositoryBuilder,
    ServerThread,
    identity,
    loopback_settings,
)
from tritonx.testing import model_status as status  # noqa: E402
from tritonx.types import ModelState  # noqa: E402
from tritonx_backend_tensorflow import models  # noqa: E402
from tritonx_backend_tensorflow.backend import TensorFlowBackend  # noqa: E402
from tritonx_backend_tensorflow.settings import parse_backend_config  # noqa: E402

SAVEDMODEL = "model.savedmodel"
ONE_CPU = "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
WAIT_S = 120.0

# ----------------------------------------------------------------------------- models


@dataclass
class Artifacts:
    """The models, built once per test session, and their in-process references."""

    dense: dict[str, bytes]
    dense_module: Any
    strings: dict[str, bytes]
    strings_module: Any
    parser: dict[str, bytes]
    graphdef: bytes
    graph_fn: Any
    tf1: dict[str, bytes]
    init_graph: bytes


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    root = tmp_path_factory.mktemp("tf_models")
    dense = models.save_dense(root / "dense")
    strings = models.save_strings(root / "strings")
    models.save_parser(root / "parser")
    graphdef, fn = models.frozen_graph()
    models.save_tf1(root / "tf1", tag="serve1")
    return Artifacts(
        dense=models.tree(root / "dense", SAVEDMODEL),
        dense_module=dense,
        strings=models.tree(root / "strings", SAVEDMODEL),
        strings_module=strings,
        parser=models.tree(root / "parser", SAVEDMODEL),
        graphdef=graphdef,
        graph_fn=fn,
        tf1=models.tree(root / "tf1", SAVEDMODEL),
        init_graph=models.graph_with_init_op(),
    )


def plugins() -> Any:
    """The identity test backend plus this plugin, registered from its module (used from the
    source tree whether or not the distribution is installed)."""
    return make_plugin_manager(autoload=False, extra=[identity, tritonx_backend_tensorflow])


@pytest.fixture
def plugin_manager() -> Any:
    return plugins()


#: the dense model with a full config: the scalar-per-item output ``total`` is dims [1]
#: reshaped to [] (Triton's way of configuring it)
DENSE_CONFIG = """
name: "dense_config"
platform: "tensorflow_savedmodel"
max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP32, dims: [ -1, 4 ] } ]
output [
  { name: "y", data_type: TYPE_FP32, dims: [ -1, 3 ] },
  { name: "total", data_type: TYPE_FP32, dims: [ 1 ], reshape: { shape: [ ] } }
]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

GRAPH_IO: dict[str, Any] = {
    "inputs": [("a", "FP32", [3]), ("b", "FP32", [3])],
    "outputs": [("out", "FP32", [3])],
}

#: model -> the start of the reason it must fail to load with (Triton's messages)
LOAD_ERRORS = {
    "init_ops_outside": "TF_INIT_OPS_FILE '../outside.json' of model 'init_ops_outside' must "
    "name a file inside the model directory",
    "corrupt_savedmodel": "Could not parse SavedModel at",
    "corrupt_graphdef": "Can't parse",
    "corrupt_variables": "Checksum does not match",
    "savedmodel_without_pb": "unable to auto-complete model configuration for "
    "'savedmodel_without_pb', failed to load model: SavedModel file does not exist at: ",
    "empty_graphdef": "model empty_graphdef has an empty network",
    "graphdef_without_config": "a GraphDef model carries no signature",
    "wrong_signature": "unable to load model 'wrong_signature', expected 'nope' signature",
    "wrong_tag": "unable to auto-complete model configuration for 'wrong_tag', failed to load "
    "model: Could not find meta graph def matching supplied tags: { train }. To inspect "
    "available tag-sets in the SavedModel, please use the SavedModel CLI: `saved_model_cli` "
    "(this one has: { serve })",
    "wrong_dims": "model 'wrong_dims', tensor 'x': the model expects 3 dimensions (shape "
    "[-1,-1,4]) but the model configuration specifies 3 dimensions (an initial batch dimension "
    "because max_batch_size > 0 followed by the explicit tensor shape, making complete shape "
    "[-1,-1,5])",
    "wrong_dtype": "unable to load model 'wrong_dtype', configuration expects datatype "
    "TYPE_FP64 for input 'x', model provides TYPE_FP32",
    "wrong_input": "unexpected inference input 'z', allowed inputs are: x",
    "wrong_output": "unexpected inference output 'nope', allowed outputs are: total, y",
    "wrong_graph_input": "unexpected inference input 'c', allowed inputs are: a, b",
    "bf16": "unsupported datatype 'TYPE_BF16' for tensor 'a' for model 'bf16'",
    "bad_threads": "parameter 'TF_NUM_INTRA_THREADS' must be non-negative number for "
    "TensorFlow model 'bad_threads'",
    "batch_on_unbatched": "unable to autofill for 'batch_on_unbatched', configuration "
    "specified max-batch 4 but model signature does not support batching",
    "no_savedmodel": "unable to find '",  # the core's check, before the backend's
    "cpu_accelerator": "CPU Execution Accelerator is not supported in TensorFlow backend",
    "tftrt": "model 'tftrt': the TensorRT execution accelerator (TF-TRT) is not supported",
    "unknown_accelerator": "unknown Execution Accelerator 'fast' is requested",
    "bad_op_library": "cannot open shared object file",
    "missing_control": "configuration specified sequence control 'START', but model does not "
    "provide that input",
}


def build_repository(repo: ModelRepositoryBuilder, art: Artifacts) -> None:
    """Every model the module's server serves (good and bad ones)."""
    repo.add("dense_auto", write_config=False, versions={1: art.dense})
    repo.add("dense_config", config=DENSE_CONFIG, versions={1: art.dense})
    repo.add(
        "double",
        platform="tensorflow_savedmodel",
        parameters={"TF_SIGNATURE_DEF": "double", "TF_GRAPH_TAG": "serve"},
        versions={1: art.dense},
    )
    repo.add("strings", write_config=False, versions={1: art.strings})
    repo.add(
        "parser",
        platform="tensorflow_savedmodel",
        max_batch_size=8,
        extra="dynamic_batching { }\n" + ONE_CPU,
        versions={1: art.parser},
    )
    repo.add(
        "graph",
        platform="tensorflow_graphdef",
        max_batch_size=8,
        extra=ONE_CPU,
        versions={1: {"model.graphdef": art.graphdef}},
        **GRAPH_IO,
    )
    repo.add(
        "graph_renamed",  # default_model_filename honoured
        backend="tensorflow",
        platform="tensorflow_graphdef",
        max_batch_size=8,
        extra='default_model_filename: "frozen.pb"\n' + ONE_CPU,
        versions={1: {"frozen.pb": art.graphdef}},
        **GRAPH_IO,
    )
    repo.add(
        "tf1_tagged",  # a TF1 SavedModel whose only tag is serve1
        platform="tensorflow_savedmodel",
        parameters={"TF_GRAPH_TAG": "serve1"},
        versions={1: art.tf1},
    )
    init_io: dict[str, Any] = {
        "platform": "tensorflow_graphdef",
        "max_batch_size": 4,
        "inputs": [("x", "FP32", [2])],
        "outputs": [("y", "FP32", [2])],
        "extra": ONE_CPU,
    }
    init_ops = json.dumps({"init_ops": ["init"]})
    repo.add(
        "init_ops",  # TF_INIT_OPS_FILE in the version folder
        parameters={"TF_INIT_OPS_FILE": "init_ops.json"},
        versions={1: {"model.graphdef": art.init_graph, "init_ops.json": init_ops}},
        **init_io,
    )
    model_dir = repo.add(
        "init_ops_model_dir",  # ... or in the model folder
        parameters={"TF_INIT_OPS_FILE": "init.json"},
        versions={1: {"model.graphdef": art.init_graph}},
        **init_io,
    )
    (model_dir / "init.json").write_text(init_ops)
    repo.add("no_init_ops", versions={1: {"model.graphdef": art.init_graph}}, **init_io)
    (repo.root / "outside.json").write_text(init_ops)  # beside the models, not in one
    repo.add(
        "init_ops_outside",
        parameters={"TF_INIT_OPS_FILE": "../outside.json"},
        versions={1: {"model.graphdef": art.init_graph}},
        **init_io,
    )
    # ---- models that must fail, each alone
    corrupt = dict(art.dense)
    corrupt[f"{SAVEDMODEL}/saved_model.pb"] = b"\x08\x01not a saved model\xff\xff"
    repo.add("corrupt_savedmodel", write_config=False, versions={1: corrupt})
    variables = {
        k: (b"\x00garbage" * 8 if "/variables/variables.data" in k else v)
        for k, v in art.dense.items()
    }
    repo.add("corrupt_variables", write_config=False, versions={1: variables})
    no_pb = {k: v for k, v in art.dense.items() if not k.endswith("saved_model.pb")}
    repo.add("savedmodel_without_pb", write_config=False, versions={1: no_pb})
    repo.add(
        "corrupt_graphdef",
        platform="tensorflow_graphdef",
        versions={1: {"model.graphdef": b"\xff\xfe garbage \x00\x01"}},
        **GRAPH_IO,
    )
    repo.add(
        "empty_graphdef",
        platform="tensorflow_graphdef",
        versions={1: {"model.graphdef": b""}},
        **GRAPH_IO,
    )
    repo.add(
        "graphdef_without_config",
        write_config=False,
        versions={1: {"model.graphdef": art.graphdef}},
    )
    for name, params in (
        ("wrong_signature", {"TF_SIGNATURE_DEF": "nope"}),
        ("wrong_tag", {"TF_GRAPH_TAG": "train"}),
        ("bad_threads", {"TF_NUM_INTRA_THREADS": "-1"}),
    ):
        repo.add(name, platform="tensorflow_savedmodel", parameters=params, versions={1: art.dense})
    dense_io = {
        "platform": "tensorflow_savedmodel",
        "max_batch_size": 4,
        "versions": {1: art.dense},
    }
    repo.add("wrong_dims", inputs=[("x", "FP32", [-1, 5])], **dense_io)  # type: ignore[arg-type]
    repo.add("wrong_dtype", inputs=[("x", "FP64", [-1, 4])], **dense_io)  # type: ignore[arg-type]
    repo.add("wrong_input", inputs=[("z", "FP32", [-1, 4])], **dense_io)  # type: ignore[arg-type]
    repo.add(
        "wrong_output",
        inputs=[("x", "FP32", [-1, 4])],
        outputs=[("nope", "FP32", [3])],
        **dense_io,  # type: ignore[arg-type]
    )
    repo.add(
        "bf16",  # (a SavedModel's auto-complete would replace BF16 by the signature's type)
        platform="tensorflow_graphdef",
        inputs=[("a", "BF16", [3]), ("b", "FP32", [3])],
        outputs=[("out", "FP32", [3])],
        versions={1: {"model.graphdef": art.graphdef}},
    )
    repo.add(
        "cpu_accelerator",
        extra="optimization { execution_accelerators { cpu_execution_accelerator "
        '[ { name: "openvino" } ] } }\n',
        **dense_io,  # type: ignore[arg-type]
    )
    for name, accelerator in (("tftrt", "tensorrt"), ("unknown_accelerator", "fast")):
        repo.add(
            name,
            extra="optimization { execution_accelerators { gpu_execution_accelerator "
            f'[ {{ name: "{accelerator}" }} ] }} }}\n',
            **dense_io,  # type: ignore[arg-type]
        )
    repo.add(
        "bad_op_library",
        extra='model_operations { op_library_filename: [ "/nonexistent/libcustom_ops.so" ] }\n',
        **dense_io,  # type: ignore[arg-type]
    )
    repo.add(
        "missing_control",
        extra='sequence_batching { control_input [ { name: "START" control [ { kind: '
        "CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] }\n",
        **dense_io,  # type: ignore[arg-type]
    )
    repo.add(
        "wrong_graph_input",
        platform="tensorflow_graphdef",
        max_batch_size=8,
        inputs=[("a", "FP32", [3]), ("c", "FP32", [3])],
        outputs=[("out", "FP32", [3])],
        versions={1: {"model.graphdef": art.graphdef}},
    )
    repo.add(
        "batch_on_unbatched",  # the strings signature batches; this one has a fixed first dim
        platform="tensorflow_savedmodel",
        max_batch_size=4,
        versions={1: models.tree(_fixed_batch_model(repo.root.parent), SAVEDMODEL)},
    )
    repo.add("no_savedmodel", platform="tensorflow_savedmodel", versions={1: {"other.txt": "x"}})


def _fixed_batch_model(root: Path) -> Path:
    path = root / "fixed"

    class Fixed(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([2, 3], tf.float32, name="x")])
        def serve(self, x: Any) -> dict[str, Any]:
            return {"y": x + 1.0}

    module = Fixed()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, artifacts: Artifacts
) -> Iterator[ServerThread]:
    """One server for the module, HTTP and gRPC on loopback."""
    repo = ModelRepositoryBuilder(tmp_path_factory.mktemp("tf_repo") / "models")
    build_repository(repo, artifacts)
    thread = ServerThread(Server(loopback_settings(repo.root), plugin_manager=plugins()))
    thread.start(timeout=WAIT_S)
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture(scope="module")
def clients(served: ServerThread) -> Iterator[tuple[Any, Any]]:
    http = httpclient.InferenceServerClient(served.server.http_url)
    grpc = grpcclient.InferenceServerClient(served.server.grpc_url)
    try:
        yield http, grpc
    finally:
        http.close()
        grpc.close()


def infer_both(
    clients: tuple[Any, Any], model: str, feeds: dict[str, np.ndarray], outputs: list[str]
) -> list[dict[str, np.ndarray]]:
    """The model's outputs through tritonclient HTTP (binary and JSON) and gRPC."""
    results = []
    for module, client, binary in (
        (httpclient, clients[0], True),
        (httpclient, clients[0], False),
        (grpcclient, clients[1], True),
    ):
        tensors = []
        for name, array in feeds.items():
            datatype = "BYTES" if array.dtype == object else _triton_type(array.dtype)
            tensor = module.InferInput(name, list(array.shape), datatype)
            if module is httpclient:
                tensor.set_data_from_numpy(array, binary_data=binary)
            else:
                tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        if module is httpclient:
            wanted = [module.InferRequestedOutput(n, binary_data=binary) for n in outputs]
        else:
            wanted = [module.InferRequestedOutput(n) for n in outputs]
        result = client.infer(model, tensors, outputs=wanted)
        results.append({n: result.as_numpy(n) for n in outputs})
    return results


def _triton_type(dtype: np.dtype) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return str(np_to_triton_dtype(dtype))


# ----------------------------------------------------------------------------- serving


def test_models_load_and_bad_ones_fail_alone(served: ServerThread) -> None:
    server = served.server
    for model in (
        "dense_auto",
        "dense_config",
        "double",
        "strings",
        "parser",
        "graph",
        "tf1_tagged",
        "init_ops",
        "init_ops_model_dir",
        "no_init_ops",
    ):
        assert server.model_ready(model), (model, status(server, model))
    assert server.model_ready("graph_renamed"), status(server, "graph_renamed")
    for model, message in LOAD_ERRORS.items():
        state, reason = status(server, model)
        assert state is ModelState.UNAVAILABLE, (model, state, reason)
        assert message in reason, (model, reason)


def test_auto_complete_from_the_signature(served: ServerThread) -> None:
    """max_batch_size from default-max-batch-size (4), dynamic batching, inputs and outputs
    from serving_default; a batch item's scalar is dims [1] reshaped to []; Triton's default
    of two KIND_CPU instances for tensorflow."""
    cfg = served.server.model_config("dense_auto").to_json_dict()
    assert cfg["platform"] == "tensorflow_savedmodel"
    assert cfg["backend"] == "tensorflow"
    assert cfg["default_model_filename"] == SAVEDMODEL
    assert cfg["max_batch_size"] == 4
    assert "dynamic_batching" in cfg
    assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["input"]] == [
        ("x", "TYPE_FP32", [-1, 4])
    ]
    outputs = {t["name"]: t for t in cfg["output"]}
    assert (outputs["y"]["data_type"], outputs["y"]["dims"]) == ("TYPE_FP32", [-1, 3])
    assert outputs["total"]["dims"] == [1] and outputs["total"]["reshape"] == {"shape": []}
    assert [(g["kind"], g["count"]) for g in cfg["instance_group"]] == [("KIND_CPU", 2)]
    strings = served.server.model_config("strings").to_json_dict()
    assert [(t["name"], t["data_type"], t["dims"]) for t in strings["input"]] == [
        ("text", "TYPE_STRING", [2])
    ]
    double = served.server.model_config("double").to_json_dict()  # TF_SIGNATURE_DEF
    assert [(t["name"], t["data_type"], t["dims"]) for t in double["input"]] == [
        ("a", "TYPE_INT64", [2])
    ]
    assert [(t["name"], t["data_type"], t["dims"]) for t in double["output"]] == [
        ("b", "TYPE_INT64", [2])
    ]


@pytest.mark.parametrize("model", ["dense_auto", "dense_config"])
@pytest.mark.parametrize("seq", [1, 5, 7])
def test_savedmodel_matches_tensorflow(
    clients: tuple[Any, Any], artifacts: Artifacts, model: str, seq: int
) -> None:
    """A variable dimension (seq) and the batch dimension, over HTTP (binary and JSON) and
    gRPC: the outputs equal the tf.Module's on the same inputs."""
    x = np.random.default_rng(seq).standard_normal((3, seq, 4)).astype(np.float32)
    want = {k: v.numpy() for k, v in artifacts.dense_module.serve(tf.constant(x)).items()}
    for got in infer_both(clients, model, {"x": x}, ["y", "total"]):
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6)
        assert got["total"].shape == (3, 1)
        np.testing.assert_allclose(got["total"][:, 0], want["total"], rtol=1e-5, atol=1e-5)


def test_other_signature(clients: tuple[Any, Any]) -> None:
    a = np.array([[1, 2], [-3, 2**40]], np.int64)
    for got in infer_both(clients, "double", {"a": a}, ["b"]):
        np.testing.assert_array_equal(got["b"], a * 2)


def test_tf1_savedmodel_with_its_own_tag(served: ServerThread, clients: tuple[Any, Any]) -> None:
    """TF_GRAPH_TAG picks the meta graph; the TF1 signature is auto-completed and served."""
    cfg = served.server.model_config("tf1_tagged").to_json_dict()
    assert cfg["max_batch_size"] == 4
    assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["input"]] == [
        ("in", "TYPE_INT32", [3])
    ]
    assert [(t["name"], t["dims"]) for t in cfg["output"]] == [("neg", [3]), ("out", [3])]
    x = np.array([[1, 2, 3], [-4, 5, 60]], np.int32)
    for got in infer_both(clients, "tf1_tagged", {"in": x}, ["out", "neg"]):
        np.testing.assert_array_equal(got["out"], x + 10)
        np.testing.assert_array_equal(got["neg"], -x)


def test_init_ops_file(clients: tuple[Any, Any]) -> None:
    """TF_INIT_OPS_FILE runs the listed operations once after the load (the file in the
    version folder or the model folder); without them TensorFlow fails the requests."""
    x = np.array([[1.0, 2.0], [0.5, -1.0]], np.float32)
    for model in ("init_ops", "init_ops_model_dir"):
        for got in infer_both(clients, model, {"x": x}, ["y"]):
            np.testing.assert_array_equal(got["y"], x * np.array([[3.0, 4.0]], np.float32))
    tensor = httpclient.InferInput("x", [2, 2], "FP32")
    tensor.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException) as err:
        clients[0].infer("no_init_ops", [tensor])
    assert err.value.status() == "500"
    assert "Could not find variable scale" in err.value.message(), err.value.message()


def test_strings(clients: tuple[Any, Any], artifacts: Artifacts) -> None:
    text = np.array([[b"hello", b""], ["wörld".encode(), b"b\x00in"]], dtype=object)
    want = {k: v.numpy() for k, v in artifacts.strings_module.serve(tf.constant(text)).items()}
    for got in infer_both(clients, "strings", {"text": text}, ["upper", "length"]):
        # (tritonclient's JSON path returns BYTES elements as str)
        upper = [[v.encode() if isinstance(v, str) else v for v in row] for row in got["upper"]]
        assert upper == want["upper"].tolist()
        np.testing.assert_array_equal(got["length"], want["length"])
        assert got["length"].dtype == np.int32


@pytest.mark.parametrize("model", ["graph", "graph_renamed"])
def test_graphdef_matches_tensorflow(
    clients: tuple[Any, Any], artifacts: Artifacts, model: str
) -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((5, 3)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    want = artifacts.graph_fn(tf.constant(a), tf.constant(b)).numpy()
    for got in infer_both(clients, model, {"a": a, "b": b}, ["out"]):
        np.testing.assert_allclose(got["out"], want, rtol=1e-5, atol=1e-6)


def test_bad_requests_get_triton_errors(clients: tuple[Any, Any]) -> None:
    """Datatype and shape errors are the core's 400 / INVALID_ARGUMENT, with Triton's text."""
    http, grpc = clients
    x64 = np.ones((1, 2, 4), np.float64)
    for module, client in ((httpclient, http), (grpcclient, grpc)):
        tensor = module.InferInput("x", [1, 2, 4], "FP64")
        tensor.set_data_from_numpy(x64)
        with pytest.raises(InferenceServerException) as err:
            client.infer("dense_config", [tensor])
        assert "inference input 'x' data-type is 'FP64', but model 'dense_config' expects " in (
            err.value.message()
        )
        assert err.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
        bad = module.InferInput("x", [1, 2, 5], "FP32")
        bad.set_data_from_numpy(np.ones((1, 2, 5), np.float32))
        with pytest.raises(InferenceServerException) as err:
            client.infer("dense_config", [bad])
        assert "unexpected shape for input 'x' for model 'dense_config'" in err.value.message()
        assert err.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


def test_tensorflow_error_fails_the_request_only(clients: tuple[Any, Any]) -> None:
    """TensorFlow failing a run (a string that is no number) fails that request: 500 /
    INTERNAL with TensorFlow's message; the model keeps serving."""
    http, grpc = clients
    bad = np.array([[b"abc"]], dtype=object)
    for module, client in ((httpclient, http), (grpcclient, grpc)):
        tensor = module.InferInput("text", [1, 1], "BYTES")
        tensor.set_data_from_numpy(bad)
        with pytest.raises(InferenceServerException) as err:
            client.infer("parser", [tensor])
        assert "StringToNumberOp could not correctly convert string: abc" in err.value.message()
        assert err.value.status() in ("500", "StatusCode.INTERNAL")
    good = np.array([[b"1.5"], [b"-2"]], dtype=object)
    for got in infer_both(clients, "parser", {"text": good}, ["number"]):
        np.testing.assert_array_equal(got["number"], [[1.5], [-2.0]])


async def test_a_failing_request_in_a_batch_fails_alone(
    artifacts: Artifacts, tmp_path: Path
) -> None:
    """Three requests handed to one execute, the middle one bad: one batch fails in TF, so
    each runs alone and only the bad one fails."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    model_dir = repo.add("parser", write_config=False, versions={1: artifacts.parser})
    config = ModelConfig(
        model_config_pb2.ModelConfig(
            name="parser",
            platform="tensorflow_savedmodel",
            max_batch_size=8,
            input=[model_config_pb2.ModelInput(name="text", data_type=13, dims=[1])],
            output=[model_config_pb2.ModelOutput(name="number", data_type=11, dims=[1])],
        )
    )
    instance = await asyncio.to_thread(load_instance, model_dir, config)
    try:
        requests = []
        for value in (b"1", b"x", b"3"):
            request = InferenceRequest("parser", {"text": np.array([[value]], dtype=object)})
            request.batch_size = 1
            requests.append(request)
        responses = await asyncio.to_thread(instance.execute, requests)
    finally:
        instance.unload()
    assert responses[0].raise_for_error().outputs["number"].tolist() == [[1.0]]
    assert responses[2].raise_for_error().outputs["number"].tolist() == [[3.0]]
    error = responses[1].error
    assert error is not None and error.code is Code.INTERNAL
    assert "could not correctly convert string: x" in error.message


def test_decoupled_model_sends_one_final_response(artifacts: Artifacts, tmp_path: Path) -> None:
    """With ``decoupled: true`` each request gets its response through its sender, final."""
    from tritonx.types import ResponseSender

    repo = ModelRepositoryBuilder(tmp_path / "models")
    model_dir = repo.add("dense", write_config=False, versions={1: artifacts.dense})
    config = _config(
        DENSE_CONFIG.replace('name: "dense_config"', 'name: "dense"')
        + "model_transaction_policy { decoupled: true }\n"
    )
    instance = load_instance(model_dir, config)
    sent: list[tuple[int, Any, bool]] = []
    try:
        requests = []
        for i in range(2):
            request = InferenceRequest("dense", {"x": np.full((1, 2, 4), i, np.float32)})
            request.response_sender = ResponseSender(
                lambda response, final, i=i: sent.append((i, response, final))
            )
            requests.append(request)
        assert instance.execute(requests) is None
    finally:
        instance.unload()
    assert [(i, final) for i, _, final in sent] == [(0, True), (1, True)]
    for i, response, _ in sent:
        want = artifacts.dense_module.serve(tf.fill((1, 2, 4), float(i)))["y"].numpy()
        np.testing.assert_allclose(response.outputs["y"], want, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- batching


async def test_concurrent_requests_form_one_batch_in_one_session_run(
    artifacts: Artifacts,
    model_repository: ModelRepositoryBuilder,
    plugin_manager: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four concurrent requests, held by the scheduler until all four are queued
    (``TRITONSERVER_DELAY_SCHEDULER``), run as one batch of 4 in one execution; each gets its
    own rows; the statistics show the batch and the compute times."""
    import tritonclient.http.aio as aiohttpclient

    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "4")
    model_repository.add(
        "dense_config",
        config=DENSE_CONFIG + "dynamic_batching { }\n",
        versions={1: artifacts.dense},
    )
    runs: list[int] = []
    real_run = tf.compat.v1.Session.run

    def counting_run(self: Any, fetches: Any, feed_dict: Any = None, **kw: Any) -> Any:
        first = next(iter((feed_dict or {}).values()), None)
        runs.append(first.shape[0] if isinstance(first, np.ndarray) else 0)
        return real_run(self, fetches, feed_dict=feed_dict, **kw)

    monkeypatch.setattr(tf.compat.v1.Session, "run", counting_run)
    xs = [np.random.default_rng(i).standard_normal((1, 3, 4)).astype(np.float32) for i in range(4)]
    settings = loopback_settings(model_repository.root, allow_grpc=False, allow_metrics=False)
    async with Server(settings, plugin_manager=plugin_manager) as server:
        async with aiohttpclient.InferenceServerClient(server.http_url) as client:

            async def one(x: np.ndarray) -> np.ndarray:
                tensor = aiohttpclient.InferInput("x", list(x.shape), "FP32")
                tensor.set_data_from_numpy(x)
                result = await client.infer("dense_config", [tensor])
                return np.asarray(result.as_numpy("y"))

            runs.clear()  # (loading ran no session.run: no init ops)
            got = await asyncio.wait_for(asyncio.gather(*(one(x) for x in xs)), WAIT_S)
            stats = await client.get_inference_statistics("dense_config")
    for x, y in zip(xs, got, strict=True):
        want = artifacts.dense_module.serve(tf.constant(x))["y"].numpy()
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    assert runs == [4]  # one Session.run for the four requests
    model_stats = stats["model_stats"][0]
    assert model_stats["execution_count"] == 1
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in model_stats["batch_stats"]] == [
        (4, 1)
    ]
    inference = model_stats["inference_stats"]
    assert inference["success"]["count"] == 4
    for phase in ("compute_input", "compute_infer", "compute_output"):
        assert inference[phase]["count"] == 4, phase
        assert inference[phase]["ns"] > 0, phase


def test_requests_of_different_shapes_in_one_execute(artifacts: Artifacts, tmp_path: Path) -> None:
    """Requests whose variable dims differ cannot be stacked: each shape runs as its own
    batch, in the same execute."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    model_dir = repo.add("dense_config", config=DENSE_CONFIG, versions={1: artifacts.dense})
    config = _config(DENSE_CONFIG)
    instance = load_instance(model_dir, config)
    try:
        xs = [
            np.random.default_rng(i).standard_normal((1 + i % 2, 2 + i % 3, 4)).astype(np.float32)
            for i in range(5)
        ]
        requests = []
        for x in xs:
            request = InferenceRequest("dense_config", {"x": x})
            request.batch_size = x.shape[0]
            requests.append(request)
        responses = instance.execute(requests)
    finally:
        instance.unload()
    for x, response in zip(xs, responses, strict=True):
        want = artifacts.dense_module.serve(tf.constant(x))
        got = response.raise_for_error().outputs
        np.testing.assert_allclose(got["y"], want["y"].numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["total"][:, 0], want["total"].numpy(), rtol=1e-5, atol=1e-5)


RAGGED_CONFIG = """
name: "ragged"
platform: "tensorflow_savedmodel"
max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP32, dims: [ -1 ], allow_ragged_batch: true } ]
batch_input [ {
  kind: BATCH_ACCUMULATED_ELEMENT_COUNT, target_name: "ends", data_type: TYPE_INT32,
  source_input: "x"
} ]
output [ { name: "sum", data_type: TYPE_FP32, dims: [ 1 ], reshape: { shape: [ ] } } ]
dynamic_batching { }
instance_group [ { count: 1, kind: KIND_CPU } ]
"""


async def test_ragged_batch(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Three requests of different lengths on a ragged input run as one batch: their elements
    flattened into one tensor, with the batch input the core computes; each gets its sum."""
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    models.save_ragged(tmp_path / "ragged")
    model_repository.add(
        "ragged", config=RAGGED_CONFIG, versions={1: models.tree(tmp_path / "ragged", SAVEDMODEL)}
    )
    xs = [np.arange(n, dtype=np.float32).reshape(1, n) + n for n in (1, 4, 2)]
    settings = loopback_settings(
        model_repository.root, allow_http=False, allow_grpc=False, allow_metrics=False
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        assert server.model_ready("ragged"), status(server, "ragged")
        results = await asyncio.wait_for(
            asyncio.gather(*(server.infer(InferenceRequest("ragged", {"x": x})) for x in xs)),
            WAIT_S,
        )
        stats = server.model_statistics("ragged")[0][2]
    for x, result in zip(xs, results, strict=True):
        got = result.raise_for_error().outputs["sum"]
        assert got.shape == (1, 1)
        assert got[0, 0] == pytest.approx(float(x.sum()))
    assert stats.batch_stats and max(stats.batch_stats) == 3, stats.batch_stats


# ----------------------------------------------------------------------------- the backend API


def _config(text: str) -> ModelConfig:
    from google.protobuf import text_format

    raw = model_config_pb2.ModelConfig()
    text_format.Parse(text, raw)
    return ModelConfig(raw)


def load_instance(
    model_dir: Path,
    config: ModelConfig,
    kind: str = "KIND_CPU",
    backend: TensorFlowBackend | None = None,
    index: int = 0,
) -> Any:
    """One instance loaded the way the server loads it."""
    filename = config.raw.default_model_filename or (
        SAVEDMODEL if config.platform == "tensorflow_savedmodel" else "model.graphdef"
    )
    ctx = LoadContext(
        model_name=model_dir.name,
        version=1,
        model_dir=model_dir,
        version_path=model_dir / "1",
        model_path=model_dir / "1" / filename,
        config=config,
        instance=InstanceSpec(
            name=f"{model_dir.name}_{index}", group_name=model_dir.name, kind=kind
        ),
    )
    return (backend or TensorFlowBackend({})).load(ctx)


def test_session_settings_and_sharing(artifacts: Artifacts, tmp_path: Path) -> None:
    """TF_NUM_INTRA_THREADS, TF_NUM_INTER_THREADS, TF_USE_PER_SESSION_THREADS reach the
    session's ConfigProto (with allow-soft-placement and gpu-memory-fraction);
    MAX_SESSION_SHARE_COUNT=2 makes two instances share one session, the third gets its own;
    the session closes with its last instance."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    model_dir = repo.add("dense", write_config=False, versions={1: artifacts.dense})
    config = _config(
        DENSE_CONFIG.replace('name: "dense_config"', 'name: "dense"')
        + """
parameters { key: "TF_NUM_INTRA_THREADS" value { string_value: "2" } }
parameters { key: "TF_NUM_INTER_THREADS" value { string_value: "3" } }
parameters { key: "TF_USE_PER_SESSION_THREADS" value { string_value: "on" } }
parameters { key: "MAX_SESSION_SHARE_COUNT" value { string_value: "2" } }
optimization { graph { level: 1 } }
"""
    )
    backend = TensorFlowBackend({"allow-soft-placement": "false", "gpu-memory-fraction": "0.5"})
    first, second, third = (
        load_instance(model_dir, config, backend=backend, index=i) for i in range(3)
    )
    try:
        session = first._shared.session
        proto = session._config
        assert proto.intra_op_parallelism_threads == 2
        assert proto.inter_op_parallelism_threads == 3
        assert proto.use_per_session_threads is True
        assert proto.allow_soft_placement is False
        assert proto.gpu_options.per_process_gpu_memory_fraction == pytest.approx(0.5)
        assert proto.gpu_options.allow_growth is False
        jit = proto.graph_options.optimizer_options.global_jit_level
        assert jit == tf.compat.v1.OptimizerOptions.ON_1
        assert second._shared is first._shared
        assert third._shared is not first._shared
        first.unload()
        x = np.ones((1, 2, 4), np.float32)
        out = second.execute([InferenceRequest("dense", {"x": x})])[0]
        assert out.raise_for_error().outputs["y"].shape == (1, 2, 3)
    finally:
        second.unload()
        third.unload()
    assert session._closed
    backend.close()


def test_backend_config() -> None:
    settings = parse_backend_config({})
    assert (settings.allow_soft_placement, settings.gpu_memory_fraction) == (True, 0.0)
    assert settings.default_max_batch_size == 4
    assert parse_backend_config({"default-max-batch-size": "0"}).default_max_batch_size == 0
    assert parse_backend_config({"version": "2"}).allow_soft_placement
    for config, message in (
        ({"version": "1"}, "only TensorFlow 2 is supported"),
        ({"allow-soft-placement": "maybe"}, "failed to convert 'allow-soft-placement'"),
        ({"gpu-memory-fraction": "2"}, "'gpu-memory-fraction' must be between 0.0 and 1.0"),
        ({"default-max-batch-size": "x"}, "failed to convert 'default-max-batch-size'"),
    ):
        with pytest.raises(TritonXError) as err:
            TensorFlowBackend(config)
        assert message in err.value.message, config
        assert err.value.code is Code.INVALID_ARG


async def test_backend_config_through_the_server(
    artifacts: Artifacts, model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """--backend-config=tensorflow,default-max-batch-size=0: auto-complete keeps the batch
    dimension in the dims (no batching); an unknown key stops the server."""
    model_repository.add("dense", write_config=False, versions={1: artifacts.dense})
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        backend_config={"tensorflow": {"default-max-batch-size": "0"}},
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        cfg = server.model_config("dense").to_json_dict()
        assert cfg["max_batch_size"] == 0 and "dynamic_batching" not in cfg
        assert [t["dims"] for t in cfg["input"]] == [[-1, -1, 4]]
        x = np.ones((2, 3, 4), np.float32)
        out = (await server.infer(InferenceRequest("dense", {"x": x}))).raise_for_error()
        assert out.outputs["y"].shape == (2, 3, 3)
    bad = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
        backend_config={"tensorflow": {"intra-op-threads": "2"}},
    )
    with pytest.raises(TritonXError) as err:
        async with Server(bad, plugin_manager=plugin_manager):
            pass
    assert "backend 'tensorflow' has no setting 'intra-op-threads'" in err.value.message


def test_gpu_instances_need_a_gpu_build(artifacts: Artifacts, tmp_path: Path) -> None:
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this TensorFlow sees a GPU")
    repo = ModelRepositoryBuilder(tmp_path / "models")
    model_dir = repo.add("dense", write_config=False, versions={1: artifacts.dense})
    config = _config(DENSE_CONFIG.replace('name: "dense_config"', 'name: "dense"'))
    with pytest.raises(TritonXError) as err:
        load_instance(model_dir, config, kind="KIND_GPU")
    assert err.value.code is Code.UNAVAILABLE
    assert "this TensorFlow build sees 0 GPU(s)" in err.value.message


@pytest.mark.gpu
def test_gpu_instance(artifacts: Artifacts, tmp_path: Path) -> None:
    """A KIND_GPU instance on a GPU build of TensorFlow runs the model on the GPU."""
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("TensorFlow sees no GPU (tensorflow-cpu, or no CUDA device)")
    repo = ModelRepositoryBuilder(tmp_path / "models")
    model_dir = repo.add("dense", write_config=False, versions={1: artifacts.dense})
    config = _config(DENSE_CONFIG.replace('name: "dense_config"', 'name: "dense"'))
    instance = load_instance(model_dir, config, kind="KIND_GPU")
    try:
        x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
        out = instance.execute([InferenceRequest("dense", {"x": x})])[0].raise_for_error()
        want = artifacts.dense_module.serve(tf.constant(x))["y"].numpy()
        np.testing.assert_allclose(out.outputs["y"], want, rtol=1e-4, atol=1e-5)
    finally:
        instance.unload()


# ----------------------------------------------------------------------------- tritonx serve


def test_tritonx_serve(artifacts: Artifacts, tmp_path: Path) -> None:
    """``tritonx serve`` with the installed plugin (entry point ``backend_tensorflow``) and
    ``--backend-config=tensorflow,default-max-batch-size=2``: the auto-completed SavedModel
    answers the synchronous tritonclient over HTTP and gRPC next to a corrupt GraphDef that
    failed alone, and ``/metrics`` counts its compute time."""
    from importlib.metadata import PackageNotFoundError, distribution

    from tritonx.testing import ServeProcess

    try:
        distribution("tritonx-backend-tensorflow")
    except PackageNotFoundError:
        pytest.skip("needs pip install -e plugins/backend_tensorflow (the entry point)")
    repo = ModelRepositoryBuilder(tmp_path / "models")
    repo.add("dense", write_config=False, versions={1: artifacts.dense})
    repo.add(
        "broken",
        platform="tensorflow_graphdef",
        versions={1: {"model.graphdef": b"\x0a\xff broken"}},
        **GRAPH_IO,
    )
    x = np.random.default_rng(9).standard_normal((2, 3, 4)).astype(np.float32)
    want = artifacts.dense_module.serve(tf.constant(x))["y"].numpy()
    with ServeProcess(
        repo.root,
        tmp_path / "serve.log",
        "--exit-on-error=false",
        "--strict-readiness=false",
        "--backend-config=tensorflow,default-max-batch-size=2",
        plugins=("backend_tensorflow",),
        timeout=WAIT_S,
    ) as proc:
        for module, url in ((httpclient, proc.http_url), (grpcclient, proc.grpc_url)):
            client = module.InferenceServerClient(url)
            try:
                assert client.is_model_ready("dense")
                assert not client.is_model_ready("broken")
                config = client.get_model_config("dense")
                config = (
                    config
                    if module is httpclient
                    else json.loads(
                        json_format.MessageToJson(config.config, preserving_proto_field_name=True)
                    )
                )
                assert int(config["max_batch_size"]) == 2
                tensor = module.InferInput("x", list(x.shape), "FP32")
                tensor.set_data_from_numpy(x)
                got = client.infer("dense", [tensor]).as_numpy("y")
            finally:
                client.close()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        samples = proc.metrics()
    labels = (("model", "dense"), ("version", "1"))
    assert samples[("nv_inference_count_total", labels)] == 2 * len(x)
    assert samples[("nv_inference_compute_infer_duration_us_total", labels)] > 0


# ----------------------------------------------------------------------------- tritonx check


def test_tritonx_check(artifacts: Artifacts, tmp_path: Path) -> None:
    """``tritonx check`` completes the SavedModel's config and reports the GraphDef without
    config, the wrong signature and the bad dims as serve would, loading nothing."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    repo.add("dense", write_config=False, versions={1: artifacts.dense})
    repo.add(
        "graph",
        platform="tensorflow_graphdef",
        max_batch_size=8,
        versions={1: {"model.graphdef": artifacts.graphdef}},
        **GRAPH_IO,
    )
    repo.add(
        "graph_noconfig", write_config=False, versions={1: {"model.graphdef": artifacts.graphdef}}
    )
    repo.add(
        "wrong_signature",
        platform="tensorflow_savedmodel",
        parameters={"TF_SIGNATURE_DEF": "nope"},
        versions={1: artifacts.dense},
    )
    repo.add(
        "wrong_dims",
        platform="tensorflow_savedmodel",
        max_batch_size=4,
        inputs=[("x", "FP32", [-1, 5])],
        versions={1: artifacts.dense},
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
    src = Path(tritonx_backend_tensorflow.__file__).parent.parent
    env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    env["TRITONX_PLUGINS"] = "backend_tensorflow"
    result = _check(repo.root, env, tmp_path)
    assert result.returncode == 1, result.stderr
    report = {m["name"]: m for m in json.loads(result.stdout)}
    dense = report["dense"]
    assert dense["status"] == "OK", dense
    assert dense["config"]["max_batch_size"] == 4
    assert [t["name"] for t in dense["config"]["input"]] == ["x"]
    assert dense["notes"] == {"signature": "serving_default"}
    assert report["graph"]["status"] == "OK", report["graph"]
    assert report["graph_noconfig"]["status"] == "ERROR"
    assert "a GraphDef model carries no signature" in report["graph_noconfig"]["error"]
    assert "expected 'nope' signature" in report["wrong_signature"]["error"]
    assert "the model expects 3 dimensions (shape [-1,-1,4])" in report["wrong_dims"]["error"]


def _check(root: Path, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("tritonx-backend-tensorflow")
    except PackageNotFoundError:  # declare the entry point next to the sources
        info = tmp_path / "ep" / "tritonx_backend_tensorflow-0.1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: tritonx-backend-tensorflow\nVersion: 0.1.0\n"
        )
        (info / "entry_points.txt").write_text(
            "[tritonx]\nbackend_tensorflow = tritonx_backend_tensorflow\n"
        )
        env["PYTHONPATH"] = os.pathsep.join([str(info.parent), env["PYTHONPATH"]])
    return subprocess.run(
        [sys.executable, "-m", "tritonx", "check", "--json", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


# ----------------------------------------------------------------------------- the contract


class TestTensorFlowSavedModelContract(BackendContract):
    """The inherited contract suite on a SavedModel with no config.pbtxt (auto-complete)."""

    backend_module = "tritonx_backend_tensorflow"
    framework_modules = ("tensorflow", "keras")

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder, artifacts: Artifacts) -> Path:
        return model_repository.add("dense", write_config=False, versions={1: artifacts.dense})


class TestTensorFlowStringContract(BackendContract):
    """The contract suite on the BYTES SavedModel, with a full config."""

    backend_module = "tritonx_backend_tensorflow"
    framework_modules = ("tensorflow",)

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder, artifacts: Artifacts) -> Path:
        return model_repository.add(
            "strings",
            platform="tensorflow_savedmodel",
            max_batch_size=4,
            inputs=[("text", "BYTES", [2])],
            outputs=[("upper", "BYTES", [2]), ("length", "INT32", [2])],
            extra=ONE_CPU,
            versions={1: artifacts.strings},
        )


class TestTensorFlowGraphDefContract(BackendContract):
    """The contract suite on a frozen GraphDef (its config is required)."""

    backend_module = "tritonx_backend_tensorflow"
    framework_modules = ("tensorflow",)

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder, artifacts: Artifacts) -> Path:
        return model_repository.add(
            "graph",
            platform="tensorflow_graphdef",
            max_batch_size=8,
            extra="dynamic_batching { }\n" + ONE_CPU,
            versions={1: {"model.graphdef": artifacts.graphdef}},
            **GRAPH_IO,
        )


def test_shared_sessions_stay_within_their_version(tmp_path: Path) -> None:
    """MAX_SESSION_SHARE_COUNT shares a session between a version's instances, never with
    another version of the model (each answers with its own SavedModel)."""
    repo = ModelRepositoryBuilder(tmp_path / "models")
    files: dict[int, dict[str, bytes]] = {}
    for version, factor in ((1, 1.0), (2, 2.0)):

        class Scale(tf.Module):
            @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
            def serve(self, x: Any) -> dict[str, Any]:
                return {"y": x * factor}  # noqa: B023 - traced now, per version

        module = Scale()
        folder = tmp_path / f"scale{version}"
        tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
        files[version] = models.tree(folder, SAVEDMODEL)
    repo.add(
        "scale",
        platform="tensorflow_savedmodel",
        max_batch_size=4,
        inputs=[("x", "FP32", [2])],
        outputs=[("y", "FP32", [2])],
        parameters={"MAX_SESSION_SHARE_COUNT": "2"},
        extra="version_policy { all { } }\ninstance_group [ { count: 1, kind: KIND_CPU } ]\n",
        versions=files,
    )
    x = np.ones((1, 2), np.float32)
    with ServerThread(Server(loopback_settings(repo.root), plugin_manager=plugins())) as server:
        client = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
        try:
            for version, factor in ((1, 1.0), (2, 2.0)):
                tensor = httpclient.InferInput("x", [1, 2], "FP32")
                tensor.set_data_from_numpy(x)
                got = client.infer("scale", [tensor], model_version=str(version))
                np.testing.assert_array_equal(got.as_numpy("y"), x * factor)
        finally:
            client.close()
