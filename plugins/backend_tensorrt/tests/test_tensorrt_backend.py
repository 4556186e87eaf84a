"""The TensorRT backend.

Without TensorRT and a GPU (every machine this project has run on so far) the tests check what
needs neither: the config work on engine descriptions (auto-complete, validation, profile
selection, parameters), the refusals (KIND_CPU, TensorRT not installed), the light import.
The ``gpu`` tests build a real engine from an ONNX model with TensorRT's ONNX parser and serve
it; they run with ``--run-gpu`` where TensorRT and a GPU are present.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tritonx_backend_tensorrt
from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError
from tritonx.proto import model_config_pb2
from tritonx.testing import (
    BackendContract,
    ModelRepositoryBuilder,
    listed_plugins,
)
from tritonx.testing import model_status as status
from tritonx.testing import serve_repository as serve
from tritonx.types import ModelState
from tritonx_backend_tensorrt import modelconfig
from tritonx_backend_tensorrt.modelconfig import EngineIO

HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None
GPU_GROUP = "instance_group [ { count: 1, kind: KIND_GPU } ]\n"


@pytest.fixture(autouse=True)
def _tensorrt_plugin(register_plugin: Callable[[object], None]) -> None:
    register_plugin(tritonx_backend_tensorrt)


def dynamic_engine() -> list[EngineIO]:
    """What an add/sub engine with a dynamic batch and two profiles reports."""
    profiles = (((1, 4), (4, 4), (8, 4)), ((9, 4), (16, 4), (32, 4)))
    return [
        EngineIO("INPUT0", True, "FLOAT", (-1, 4), profiles),
        EngineIO("INPUT1", True, "FLOAT", (-1, 4), profiles),
        EngineIO("OUTPUT0", False, "FLOAT", (-1, 4)),
        EngineIO("OUTPUT1", False, "FLOAT", (-1, 4)),
    ]


def fixed_engine() -> list[EngineIO]:
    return [
        EngineIO("x", True, "HALF", (2, 3), (((2, 3), (2, 3), (2, 3)),)),
        EngineIO("y", False, "INT32", ()),
    ]


def parsed(text: str) -> ModelConfig:
    from google.protobuf import text_format

    return ModelConfig(text_format.Parse(text, model_config_pb2.ModelConfig()))


# ----------------------------------------------------------------------------- auto-complete


def test_auto_complete_from_engine_io() -> None:
    done = modelconfig.auto_complete({"name": "m"}, dynamic_engine(), 2)
    assert done["max_batch_size"] == 8  # profile 0 (the default) allows batches up to 8
    assert done["dynamic_batching"] == {}
    assert [(t["name"], t["data_type"], t["dims"]) for t in done["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]),
        ("INPUT1", "TYPE_FP32", [4]),
    ]
    assert [t["name"] for t in done["output"]] == ["OUTPUT0", "OUTPUT1"]
    # the profiles an instance group selects bound the batch
    both = modelconfig.auto_complete(
        {"name": "m", "instance_group": [{"profile": ["0", "1"]}]}, dynamic_engine(), 2
    )
    assert both["max_batch_size"] == 32
    # a static engine does not batch; a scalar output becomes dims [1] with an empty reshape
    fixed = modelconfig.auto_complete({"name": "f"}, fixed_engine(), 1)
    assert fixed["max_batch_size"] == 0 and "dynamic_batching" not in fixed
    assert fixed["input"] == [{"name": "x", "data_type": "TYPE_FP16", "dims": [2, 3]}]
    assert fixed["output"] == [
        {"name": "y", "data_type": "TYPE_INT32", "dims": [1], "reshape": {"shape": []}}
    ]
    # listed tensors keep what they say and get what they lack
    partial = modelconfig.auto_complete(
        {"name": "m", "max_batch_size": 4, "sequence_batching": {}, "input": [{"name": "INPUT1"}]},
        dynamic_engine(),
        2,
    )
    assert partial["input"] == [{"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}]
    assert "dynamic_batching" not in partial and partial["max_batch_size"] == 4


def test_auto_complete_refusals() -> None:
    cases: list[tuple[dict[str, Any], list[EngineIO], int, str]] = [
        (
            {"name": "m", "max_batch_size": 16},
            dynamic_engine(),
            2,
            "configuration specified max-batch 16 but TensorRT engine only supports max-batch 8",
        ),
        (
            {"name": "m", "instance_group": [{"profile": ["3"]}]},
            dynamic_engine(),
            2,
            "configuration specified invalid profile 3 . Number of profiles supported by "
            "TensorRT engine: 2",
        ),
        (
            {"name": "f", "input": [{"name": "x", "dims": [3]}]},
            fixed_engine(),
            1,
            "model tensor shape configuration hints for dynamic batching but the underlying "
            "engine doesn't support batching.",
        ),
        (
            {
                "name": "m",
                "input": [{"name": "INPUT0", "dims": [4]}, {"name": "INPUT1", "dims": [-1, 4]}],
            },
            dynamic_engine(),
            2,
            "model tensor configurations are contradicting each other",
        ),
        (
            {"name": "m", "input": [{"name": "NOPE"}]},
            dynamic_engine(),
            2,
            "unexpected inference input 'NOPE', allowed inputs are: INPUT0, INPUT1",
        ),
    ]
    for config, engine, count, message in cases:
        with pytest.raises(TritonXError) as err:
            modelconfig.auto_complete(config, engine, count)
        assert message in err.value.message, (config, err.value.message)


# ----------------------------------------------------------------------------- validation


ADDSUB = """
name: "addsub"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
        { name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
         { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 4 ] } ]
"""


def test_validate_config_against_engine() -> None:
    modelconfig.validate(parsed(ADDSUB), dynamic_engine(), "addsub_0")
    cases = {
        ADDSUB.replace("TYPE_FP32, dims: [ 4 ] },\n", "TYPE_INT32, dims: [ 4 ] },\n", 1): (
            "unexpected datatype TYPE_INT32 for input 'INPUT0' for model 'addsub', the engine's "
            "is TYPE_FP32"
        ),
        ADDSUB.replace('"OUTPUT1"', '"OUT9"'): (
            "unexpected inference output 'OUT9', allowed outputs are: OUTPUT0, OUTPUT1"
        ),
        ADDSUB.replace("dims: [ 4 ] },\n         {", "dims: [ 5 ] },\n         {"): (
            "tensor 'OUTPUT0': the model expects shape [-1,4] but the model configuration "
            "specifies [-1,5]"
        ),
        ADDSUB.replace("max_batch_size: 8", "max_batch_size: 0"): (
            "the model expects shape [-1,4] but the model configuration specifies [4]"
        ),
        ADDSUB.replace(
            ',\n         { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 4 ] }', ""
        ): "expected configuration for output 'OUTPUT1' for addsub_0",
    }
    for text, message in cases.items():
        with pytest.raises(TritonXError) as err:
            modelconfig.validate(parsed(text), dynamic_engine(), "addsub_0")
        assert message in err.value.message, err.value.message
    shape_engine = [*dynamic_engine()[:1], EngineIO("INPUT1", True, "INT64", (1,), (), True)]
    shape_engine += dynamic_engine()[2:]
    text = ADDSUB.replace('"INPUT1", data_type: TYPE_FP32', '"INPUT1", data_type: TYPE_INT64')
    with pytest.raises(TritonXError) as err:
        modelconfig.validate(parsed(text), shape_engine, "addsub_0")
    assert err.value.code is Code.UNSUPPORTED and "is a shape tensor" in err.value.message


def test_profiles_and_parameters() -> None:
    config = parsed(
        ADDSUB + 'instance_group [ { name: "g", kind: KIND_GPU, profile: [ "1", "0" ] } ]'
    )
    profiles = modelconfig.group_profiles(config.raw, "g")
    assert profiles == [("1", 1), ("0", 0)]
    assert modelconfig.group_profiles(parsed(ADDSUB).raw) == [("default", 0)]
    engine = dynamic_engine()
    assert modelconfig.select_profile({"INPUT0": (4, 4), "INPUT1": (4, 4)}, engine, profiles) == 0
    assert modelconfig.select_profile({"INPUT0": (20, 4), "INPUT1": (20, 4)}, engine, profiles) == 1
    with pytest.raises(TritonXError) as err:
        modelconfig.select_profile({"INPUT0": (40, 4), "INPUT1": (40, 4)}, engine, profiles)
    assert "failed to find any Optimization Profile among [ 1[1] 0[0]]" in err.value.message
    with pytest.raises(TritonXError) as err:
        modelconfig.check_profiles("addsub", "g_0", [("2", 2)], 2)
    assert (
        "Can not set the specified optimization profile 2[2] for g_0. Expected optimization "
        "profile index range 0-1" in err.value.message
    )
    with pytest.raises(TritonXError, match="unable to parse 'x'"):
        modelconfig.group_profiles(parsed(ADDSUB + 'instance_group [ { profile: [ "x" ] } ]').raw)

    assert modelconfig.read_parameters(parsed(ADDSUB), "i") == "STATIC"
    strategy = (
        'parameters { key: "execution_context_allocation_strategy" value: { string_value: "%s" } }'
    )
    assert (
        modelconfig.read_parameters(parsed(ADDSUB + strategy % "ON_PROFILE_CHANGE"), "i")
        == "ON_PROFILE_CHANGE"
    )
    with pytest.raises(TritonXError, match="Supported values are 'STATIC' and 'ON_PROFILE_CHANGE'"):
        modelconfig.read_parameters(parsed(ADDSUB + strategy % "LAZY"), "i")
    with pytest.raises(TritonXError) as err:
        modelconfig.read_parameters(parsed(ADDSUB + "optimization { cuda { graphs: true } }"), "i")
    assert err.value.code is Code.UNSUPPORTED and "optimization.cuda graphs" in err.value.message


# ----------------------------------------------------------------------------- refusals


async def test_kind_cpu_and_missing_tensorrt_are_refused(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KIND_CPU is refused with Triton's message; where TensorRT is not installed a GPU
    instance (the core told a GPU exists) and auto-complete say how to install it."""
    from tritonx._core.devices import gpu_count

    if HAS_TENSORRT:
        pytest.skip("tensorrt is installed here")
    monkeypatch.setenv("TRITONX_GPU_COUNT", "1")
    gpu_count.cache_clear()
    try:
        io = {
            "inputs": [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
            "outputs": [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
        }
        plan = {1: {"model.plan": b"not checked before tensorrt is imported"}}
        model_repository.add(
            "cpu",
            platform="tensorrt_plan",
            max_batch_size=8,
            extra="instance_group [ { kind: KIND_CPU } ]\n",
            versions=plan,
            **io,
        )
        model_repository.add(
            "gpu", platform="tensorrt_plan", max_batch_size=8, extra=GPU_GROUP, versions=plan, **io
        )
        model_repository.add("auto", write_config=False, versions=plan)
        async with serve(model_repository, plugin_manager) as server:
            state, reason = status(server, "cpu")
            assert state is ModelState.UNAVAILABLE
            assert "unable to load model 'cpu', TensorRT backend supports only GPU device" in reason
            for name in ("gpu", "auto"):
                state, reason = status(server, name)
                assert state is ModelState.UNAVAILABLE, name
                assert "needs TensorRT 10: pip install tensorrt cuda-python" in reason, reason
    finally:
        monkeypatch.delenv("TRITONX_GPU_COUNT")
        gpu_count.cache_clear()


def test_light_import() -> None:
    code = (
        "import json, sys\nimport tritonx_backend_tensorrt\n"
        "print(json.dumps([m for m in ('tensorrt', 'cuda', 'torch') if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_tritonx_plugins_lists_the_backend(tmp_path: Path) -> None:
    """``tritonx plugins`` finds the backend through the entry point its pyproject declares
    (written into a dist-info here, so the test needs no pip install) and lists what it
    registered, without importing the framework."""
    listed = listed_plugins(Path(__file__).resolve().parents[1], tmp_path)
    assert list(listed) == ["backend_tensorrt"]
    assert listed["backend_tensorrt"]["distribution"] == "tritonx-backend-tensorrt"
    assert listed["backend_tensorrt"]["registered"]["backends"] == ["tensorrt"]


# ----------------------------------------------------------------------------- on a GPU


def build_addsub_plan(tmp: Path) -> bytes:
    """An add/sub engine built here from an ONNX graph: dynamic batch, two profiles."""
    trt = pytest.importorskip("tensorrt")
    pytest.importorskip("onnx")
    from tritonx_backend_onnx.models import add_sub

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(add_sub(shape=["n", 4])), [
        parser.get_error(i) for i in range(parser.num_errors)
    ]
    config = builder.create_builder_config()
    for low, opt, high in (((1, 4), (4, 4), (8, 4)), ((9, 4), (16, 4), (32, 4))):
        profile = builder.create_optimization_profile()
        for name in ("INPUT0", "INPUT1"):
            profile.set_shape(name, low, opt, high)
        config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    assert plan is not None
    return bytes(plan)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_TENSORRT, reason="needs TensorRT (pip install tensorrt cuda-python)")
class TestTensorRTContract(BackendContract):
    """The contract suite on a real engine (GPU machines with TensorRT only)."""

    backend_module = "tritonx_backend_tensorrt"
    framework_modules = ("tensorrt",)

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder, tmp_path: Path) -> Path:
        return model_repository.add(
            "addsub_plan",
            write_config=False,
            versions={1: {"model.plan": build_addsub_plan(tmp_path)}},
        )


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_TENSORRT, reason="needs TensorRT (pip install tensorrt cuda-python)")
async def test_engine_profiles_over_http_and_grpc(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, tmp_path: Path
) -> None:
    import tritonclient.grpc.aio as grpcclient
    import tritonclient.http.aio as httpclient

    plan = build_addsub_plan(tmp_path)
    model_repository.add(
        "two_profiles",
        platform="tensorrt_plan",
        extra='instance_group [ { count: 1, kind: KIND_GPU, profile: [ "0", "1" ] } ]\n',
        versions={1: {"model.plan": plan}},
    )
    async with serve(model_repository, plugin_manager) as server:
        assert server.model_ready("two_profiles"), server.status_table()
        assert server.model_config("two_profiles").max_batch_size == 32
        for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
            client = module.InferenceServerClient(url)
            try:
                for rows in (3, 20):  # one batch per profile
                    x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
                    inputs = []
                    for name in ("INPUT0", "INPUT1"):
                        tensor = module.InferInput(name, [rows, 4], "FP32")
                        tensor.set_data_from_numpy(x)
                        inputs.append(tensor)
                    result = await client.infer("two_profiles", inputs)
                    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * x)
                    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 0 * x)
            finally:
                await client.close()


def test_backend_config_it_does_not_act_on_is_refused() -> None:
    """Triton's coalesce-request-input / execution-policy are refused, not silently kept;
    version-compatible takes Triton's boolean spellings and refuses others."""
    from tritonx_backend_tensorrt.backend import TensorRTBackend

    for key in ("coalesce-request-input", "execution-policy"):
        with pytest.raises(TritonXError) as err:
            TensorRTBackend({key: "true"})
        assert err.value.code is Code.INVALID_ARG
        assert f"--backend-config=tensorrt,{key} is not supported by tritonx" in err.value.message
    assert TensorRTBackend({"version-compatible": "Yes"}).version_compatible is True
    assert TensorRTBackend({}).version_compatible is False
    with pytest.raises(TritonXError, match="failed to convert 'version-compatible'"):
        TensorRTBackend({"version-compatible": "maybe"})
