"""The OpenVINO backend served by an in-process tritonx server.

Every model is an ONNX graph built here with the onnx helper, served as ONNX (through OpenVINO's
ONNX frontend) or converted to IR in the test; results are compared with ONNX Runtime running
the same ONNX graph.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import tritonclient.grpc.aio as grpcclient  # noqa: E402
import tritonclient.http.aio as httpclient  # noqa: E402
from onnx import TensorProto  # noqa: E402

import tritonx_backend_openvino  # noqa: E402
from tritonx import InferenceRequest, InstanceSpec, LoadContext, Server  # noqa: E402
from tritonx._runtime.plugins import make_plugin_manager  # noqa: E402
from tritonx.errors import Code, TritonXError  # noqa: E402
from tritonx.testing import (  # noqa: E402
    BackendContract,
    ModelRepositoryBuilder,
    identity,
)
from tritonx.testing import model_status as status  # noqa: E402
from tritonx.testing import serve_repository as serve  # noqa: E402
from tritonx.types import ModelState  # noqa: E402
from tritonx_backend_openvino.backend import OpenVINOBackend  # noqa: E402
from tritonx_backend_openvino.models import binary, dense, encoder, to_ir  # noqa: E402

ONE_CPU = "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
ONNX_FILE = 'default_model_filename: "model.onnx"\n'

# ----------------------------------------------------------------------------- fixtures


@pytest.fixture
def plugin_manager() -> Any:
    """The identity test backend plus this plugin, registered from its module (the plugin is
    used from the source tree whether or not its distribution is installed)."""
    return make_plugin_manager(autoload=False, extra=[identity, tritonx_backend_openvino])


def ort_run(model: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """ONNX Runtime's outputs for ``feeds`` (the reference)."""
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


async def infer_error(server: Server, request: InferenceRequest) -> TritonXError:
    """The error a request fails with (raised, or in its response)."""
    try:
        response = await server.infer(request)
    except TritonXError as exc:
        return exc
    assert response.error is not None, "the request did not fail"
    return response.error


def load_instance(model_dir: Path, config: Any, kind: str = "KIND_CPU") -> Any:
    """One instance loaded the way the server loads it (for the backend's public API)."""
    filename = config.raw.default_model_filename or "model.xml"
    ctx = LoadContext(
        model_name=model_dir.name,
        version=1,
        model_dir=model_dir,
        version_path=model_dir / "1",
        model_path=model_dir / "1" / filename,
        config=config,
        instance=InstanceSpec(name=f"{model_dir.name}_0", group_name=model_dir.name, kind=kind),
    )
    return OpenVINOBackend({}).load(ctx)


ADD_IO = {
    "inputs": [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
    "outputs": [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
}

# ----------------------------------------------------------------------------- the contract


class TestOpenVINOContract(BackendContract):
    """The inherited contract suite on a batching FP32 IR model with a full config."""

    backend_module = "tritonx_backend_openvino"
    framework_modules = ("openvino", "onnx")

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder) -> Path:
        return model_repository.add(
            "addsub",
            backend="openvino",
            max_batch_size=8,
            extra="dynamic_batching { }\n" + ONE_CPU,
            versions={1: to_ir(binary("Add", TensorProto.FLOAT))},
            **ADD_IO,  # type: ignore[arg-type]
        )


class TestOpenVINOAutoCompletedContract(BackendContract):
    """The contract suite on an IR model with batch layout and no config.pbtxt."""

    backend_module = "tritonx_backend_openvino"
    framework_modules = ("openvino", "onnx")

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder) -> Path:
        ir = to_ir(binary("Add", TensorProto.INT64), batch_layout=True)
        return model_repository.add("auto", write_config=False, versions={1: ir})


class TestOpenVINOOnnxContract(BackendContract):
    """The contract suite on an ONNX model read by OpenVINO (unbatched, auto-completed)."""

    backend_module = "tritonx_backend_openvino"
    framework_modules = ("openvino", "onnx")

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder) -> Path:
        return model_repository.add(
            "onnx",
            backend="openvino",
            extra=ONNX_FILE,
            versions={1: {"model.onnx": binary("Mul", TensorProto.FLOAT, [2, 4])}},
        )


# ----------------------------------------------------------------------------- datatypes

#: (config datatype, ONNX element type, numpy dtype, ONNX op) per datatype family
DATATYPES = [
    ("FP32", TensorProto.FLOAT, np.float32, "Mul"),
    ("FP16", TensorProto.FLOAT16, np.float16, "Add"),
    ("INT8", TensorProto.INT8, np.int8, "Add"),
    ("INT16", TensorProto.INT16, np.int16, "Add"),
    ("INT32", TensorProto.INT32, np.int32, "Mul"),
    ("INT64", TensorProto.INT64, np.int64, "Add"),
    ("UINT8", TensorProto.UINT8, np.uint8, "Add"),
    ("UINT16", TensorProto.UINT16, np.uint16, "Add"),
    ("UINT32", TensorProto.UINT32, np.uint32, "Add"),
    ("UINT64", TensorProto.UINT64, np.uint64, "Add"),
    ("BOOL", TensorProto.BOOL, np.bool_, "Xor"),
]


def _values(dtype: Any, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dtype is np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(size=shape).astype(dtype)
    return rng.integers(0, 50, size=shape).astype(dtype)


async def _infer_both(server: Server, model: str, feeds: dict[str, np.ndarray]) -> list[Any]:
    """The model's outputs through tritonclient HTTP and gRPC: [http result, grpc result]."""
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        results = []
        for module, client in ((httpclient, http), (grpcclient, grpc)):
            tensors = []
            for name, array in feeds.items():
                datatype = "BOOL" if array.dtype == np.bool_ else None
                tensor = module.InferInput(
                    name, list(array.shape), datatype or _triton_type(array.dtype)
                )
                tensor.set_data_from_numpy(array)
                tensors.append(tensor)
            results.append(await client.infer(model, tensors))
        return results
    finally:
        await http.close()
        await grpc.close()


def _triton_type(dtype: np.dtype) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return str(np_to_triton_dtype(dtype))


async def test_datatypes_batched_and_unbatched_match_onnxruntime(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """Every datatype family, as IR with max_batch_size > 0 and as ONNX unbatched, over HTTP
    and gRPC: the outputs equal ONNX Runtime's on the same graph, datatype and shape included."""
    graphs = {}
    for dt, elem, _, op in DATATYPES:
        key = dt.lower()
        graphs[key] = binary(op, elem, ["batch", 4])
        io = {
            "inputs": [("INPUT0", dt, [4]), ("INPUT1", dt, [4])],
            "outputs": [("OUTPUT0", dt, [4]), ("OUTPUT1", dt, [4])],
        }
        model_repository.add(
            f"ir_{key}",
            backend="openvino",
            max_batch_size=4,
            extra=ONE_CPU,
            versions={1: to_ir(graphs[key])},
            **io,  # type: ignore[arg-type]
        )
        model_repository.add(
            f"onnx_{key}",
            backend="openvino",
            extra=ONNX_FILE + ONE_CPU,
            versions={1: {"model.onnx": binary(op, elem, [3, 4])}},
        )
    rng = np.random.default_rng(0)
    async with serve(model_repository, plugin_manager) as server:
        for dt, _, dtype, _ in DATATYPES:
            key = dt.lower()
            for model, shape in ((f"ir_{key}", (3, 4)), (f"onnx_{key}", (3, 4))):
                assert server.model_ready(model), (model, status(server, model))
                feeds = {n: _values(dtype, shape, rng) for n in ("INPUT0", "INPUT1")}
                expected = ort_run(graphs[key], feeds)
                for result in await _infer_both(server, model, feeds):
                    for name, want in expected.items():
                        got = result.as_numpy(name)
                        assert got.dtype == want.dtype, (model, name, got.dtype)
                        assert got.shape == want.shape, (model, name, got.shape)
                        if dt == "FP16":
                            np.testing.assert_allclose(got, want, rtol=1e-3, err_msg=model)
                        else:
                            np.testing.assert_array_equal(got, want, err_msg=model)
        cfg = server.model_config("onnx_int8").to_json_dict()
        assert cfg["max_batch_size"] == 0
        assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["input"]] == [
            ("INPUT0", "TYPE_INT8", [3, 4]),
            ("INPUT1", "TYPE_INT8", [3, 4]),
        ]


async def test_bf16(model_repository: ModelRepositoryBuilder, plugin_manager: Any) -> None:
    """BF16 tensors (which Triton's openvino backend does not serve) travel as their bits."""
    model_repository.add(
        "bf16",
        backend="openvino",
        extra=ONNX_FILE + ONE_CPU,
        versions={1: {"model.onnx": binary("Add", TensorProto.BFLOAT16, [2, 4])}},
    )
    async with serve(model_repository, plugin_manager) as server:
        cfg = server.model_config("bf16").to_json_dict()
        assert cfg["input"][0]["data_type"] == "TYPE_BF16"
        values = np.arange(8, dtype=np.float32).reshape(2, 4)  # exact in bfloat16
        bits = (values.view(np.uint32) >> 16).astype(np.uint16)
        out = (
            await server.infer(InferenceRequest("bf16", {"INPUT0": bits, "INPUT1": bits}))
        ).raise_for_error()
        total = (out.outputs["OUTPUT0"].astype(np.uint32) << 16).view(np.float32)
        np.testing.assert_array_equal(total, values * 2)
        np.testing.assert_array_equal(out.outputs["OUTPUT1"], bits)


async def test_config_datatype_is_converted_by_openvino(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """As in Triton, the config's datatypes are set on the model's tensors and OpenVINO
    converts: an FP16 model configured with FP32 inputs and outputs serves FP32."""
    model_repository.add(
        "f16_as_f32",
        backend="openvino",
        max_batch_size=4,
        extra=ONE_CPU,
        versions={1: to_ir(binary("Add", TensorProto.FLOAT16))},
        **ADD_IO,  # type: ignore[arg-type]
    )
    async with serve(model_repository, plugin_manager) as server:
        x = np.array([[0.5, 1.0, 1.5, 2.0]], np.float32)
        out = (
            await server.infer(InferenceRequest("f16_as_f32", {"INPUT0": x, "INPUT1": x}))
        ).raise_for_error()
        assert out.outputs["OUTPUT0"].dtype == np.float32
        np.testing.assert_array_equal(out.outputs["OUTPUT0"], x * 2)


async def test_scalar_ports(model_repository: ModelRepositoryBuilder, plugin_manager: Any) -> None:
    """Rank-0 inputs and outputs are configured as dims [1] (auto-complete) and served so."""
    graph = binary("Add", TensorProto.FLOAT, [])
    model_repository.add(
        "scalar", backend="openvino", extra=ONNX_FILE, versions={1: {"model.onnx": graph}}
    )
    async with serve(model_repository, plugin_manager) as server:
        cfg = server.model_config("scalar").to_json_dict()
        assert [t["dims"] for t in cfg["input"] + cfg["output"]] == [[1], [1], [1], [1]]
        x = np.array([1.5], np.float32)
        out = await server.infer(InferenceRequest("scalar", {"INPUT0": x, "INPUT1": x}))
        np.testing.assert_array_equal(out.raise_for_error().outputs["OUTPUT0"], [3.0])
        assert out.outputs["OUTPUT1"].shape == (1,)


# ----------------------------------------------------------------------------- precision


async def test_fp32_precision_by_default_and_configurable(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """FP32 results agree with ONNX Runtime to 1e-5 by default (OpenVINO's CPU plugin would
    infer in bf16 on CPUs that have it); INFERENCE_PRECISION_HINT=bf16 is honoured."""
    graph = dense()
    common = {
        "backend": "openvino",
        "max_batch_size": 8,
        "inputs": [("x", "FP32", [64])],
        "outputs": [("y", "FP32", [32])],
    }
    model_repository.add(
        "f32",
        extra=ONE_CPU,
        versions={1: to_ir(graph)},
        **common,  # type: ignore[arg-type]
    )
    model_repository.add(
        "bf16",
        extra=ONE_CPU,
        parameters={"INFERENCE_PRECISION_HINT": "bf16"},
        versions={1: to_ir(graph)},
        **common,  # type: ignore[arg-type]
    )
    model_repository.add(
        "auto_device",  # OpenVINO's AUTO device picks the CPU, with the f32 precision set on it
        extra=ONE_CPU,
        parameters={"TARGET_DEVICE": "AUTO", "PERFORMANCE_HINT": "LATENCY"},
        versions={1: to_ir(graph)},
        **common,  # type: ignore[arg-type]
    )
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    want = ort_run(graph, {"x": x})["y"]
    async with serve(model_repository, plugin_manager) as server:
        for model in ("f32", "auto_device"):
            got = (await server.infer(InferenceRequest(model, {"x": x}))).raise_for_error()
            np.testing.assert_allclose(got.outputs["y"], want, rtol=1e-5, atol=1e-5, err_msg=model)
        low = (await server.infer(InferenceRequest("bf16", {"x": x}))).raise_for_error()
    cpu_default = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")
    if str(cpu_default.get_type_name()) == "bf16":
        # this CPU computes bf16: the hint changed the results, as it does without ours
        assert np.abs(low.outputs["y"] - want).max() > 1e-3
    else:  # a CPU without bf16 support ignores the hint
        np.testing.assert_allclose(low.outputs["y"], want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- auto-complete


async def test_auto_complete(model_repository: ModelRepositoryBuilder, plugin_manager: Any) -> None:
    model_repository.add(
        "layout", write_config=False, versions={1: to_ir(dense(), batch_layout=True)}
    )
    model_repository.add("plain", write_config=False, versions={1: to_ir(dense())})
    model_repository.add(
        "onnx_auto",
        backend="openvino",
        extra=ONNX_FILE,
        versions={1: {"model.onnx": encoder()}},
    )
    model_repository.add(
        "kept_batch",  # a model without batch layout and a max_batch_size: kept (with a warning)
        backend="openvino",
        max_batch_size=2,
        versions={1: to_ir(dense())},
    )
    model_repository.add(
        "big_batch",  # batch layout and max_batch_size given: kept, dynamic batching added
        backend="openvino",
        max_batch_size=16,
        versions={1: to_ir(dense(), batch_layout=True)},
    )
    async with serve(
        model_repository,
        plugin_manager,
        backend_config={"openvino": {"default-max-batch-size": "6"}},
    ) as server:
        cfg = server.model_config("layout").to_json_dict()
        assert cfg["backend"] == "openvino"
        assert cfg["default_model_filename"] == "model.xml"
        assert cfg["max_batch_size"] == 6
        assert "dynamic_batching" in cfg
        assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["input"]] == [
            ("x", "TYPE_FP32", [64])
        ]
        assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["output"]] == [
            ("y", "TYPE_FP32", [32])
        ]
        cfg = server.model_config("plain").to_json_dict()
        assert cfg["max_batch_size"] == 0 and "dynamic_batching" not in cfg
        assert [t["dims"] for t in cfg["input"]] == [[-1, 64]]
        cfg = server.model_config("onnx_auto").to_json_dict()
        assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["input"]] == [
            ("input_ids", "TYPE_INT64", [-1, -1]),
            ("attention_mask", "TYPE_INT64", [-1, -1]),
        ]
        assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["output"]] == [
            ("last_hidden_state", "TYPE_FP32", [-1, -1, 16])
        ]
        cfg = server.model_config("kept_batch").to_json_dict()
        assert cfg["max_batch_size"] == 2 and [t["dims"] for t in cfg["input"]] == [[64]]
        cfg = server.model_config("big_batch").to_json_dict()
        assert cfg["max_batch_size"] == 16 and "dynamic_batching" in cfg
        x = np.ones((5, 64), np.float32)
        for model in ("layout", "kept_batch", "big_batch"):
            rows = 2 if model == "kept_batch" else 5
            out = await server.infer(InferenceRequest(model, {"x": x[:rows]}))
            assert out.raise_for_error().outputs["y"].shape == (rows, 32), model


# ----------------------------------------------------------------------------- batching


async def test_dynamic_batch_of_a_static_model(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """An IR exported with a fixed batch of 1 serves any batch up to max_batch_size (its batch
    dimension is made dynamic), and concurrent requests are batched by the dynamic batcher."""
    graph = dense()
    static = onnx.load_from_string(graph)
    for value in (*static.graph.input, *static.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 1
    model_repository.add(
        "static1",
        backend="openvino",
        max_batch_size=8,
        inputs=[("x", "FP32", [64])],
        outputs=[("y", "FP32", [32])],
        extra="dynamic_batching { max_queue_delay_microseconds: 20000 }\n" + ONE_CPU,
        versions={1: to_ir(static.SerializeToString())},
    )
    xs = [
        np.random.default_rng(i).standard_normal((1 + i % 3, 64)).astype(np.float32)
        for i in range(9)
    ]
    async with serve(model_repository, plugin_manager) as server:
        results = await asyncio.gather(
            *(server.infer(InferenceRequest("static1", {"x": x})) for x in xs)
        )
        for x, result in zip(xs, results, strict=True):
            want = ort_run(graph, {"x": x})["y"]
            np.testing.assert_allclose(result.raise_for_error().outputs["y"], want, atol=1e-5)
        stats = server.model_statistics("static1")[0][2]
    assert max(stats.batch_stats) > 3, stats.batch_stats  # batches of several requests ran


async def test_batch_padding_and_static_batch(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """SKIP_OV_DYNAMIC_BATCHSIZE compiles a fixed batch of max_batch_size: other batch sizes
    fail with Triton's message unless ENABLE_BATCH_PADDING pads them."""
    graph = dense()
    common = {
        "backend": "openvino",
        "max_batch_size": 4,
        "inputs": [("x", "FP32", [64])],
        "outputs": [("y", "FP32", [32])],
        "extra": ONE_CPU,
        "versions": {1: to_ir(graph)},
    }
    model_repository.add(
        "fixed",
        parameters={"SKIP_OV_DYNAMIC_BATCHSIZE": "YES"},
        **common,  # type: ignore[arg-type]
    )
    model_repository.add(
        "padded",
        parameters={"ENABLE_BATCH_PADDING": "yes"},
        **common,  # type: ignore[arg-type]
    )
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    want = ort_run(graph, {"x": x})["y"]
    async with serve(model_repository, plugin_manager) as server:
        full = await server.infer(InferenceRequest("fixed", {"x": x}))
        np.testing.assert_allclose(full.raise_for_error().outputs["y"], want, atol=1e-5)
        short = await infer_error(server, InferenceRequest("fixed", {"x": x[:2]}))
        assert short.code is Code.INTERNAL
        assert (
            "expected requests with batch size '4', got '2'... this error can be avoided by "
            "setting 'ENABLE_BATCH_PADDING' parameter in model configuration to 'YES'"
        ) in str(short)
        padded = await server.infer(InferenceRequest("padded", {"x": x[:3]}))
        got = padded.raise_for_error().outputs["y"]
        assert got.shape == (3, 32)
        np.testing.assert_allclose(got, want[:3], atol=1e-5)
        assert server.model_ready("fixed")  # the bad request did not break the model


# ----------------------------------------------------------------------------- parameters


async def test_parameters_reach_the_compiled_model(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """PERFORMANCE_HINT, NUM_STREAMS, INFERENCE_NUM_THREADS, COMPILATION_NUM_THREADS and the
    precision hints are what the compiled model reports."""
    model_dir = model_repository.add(
        "tuned",
        backend="openvino",
        max_batch_size=4,
        inputs=[("x", "FP32", [64])],
        outputs=[("y", "FP32", [32])],
        parameters={
            "PERFORMANCE_HINT": "throughput",
            "NUM_STREAMS": "2",
            "INFERENCE_NUM_THREADS": "2",
            "TARGET_DEVICE": "cpu",
        },
        extra=ONE_CPU,
        versions={1: to_ir(dense())},
    )
    async with serve(model_repository, plugin_manager) as server:
        assert server.model_ready("tuned"), status(server, "tuned")
        config = server.model_config("tuned")
    instance = await asyncio.to_thread(load_instance, model_dir, config)
    try:
        assert str(instance.compiled_property("PERFORMANCE_HINT")) == "THROUGHPUT"
        assert int(instance.compiled_property("NUM_STREAMS")) == 2
        assert int(instance.compiled_property("INFERENCE_NUM_THREADS")) == 2
        precision = instance.compiled_property("INFERENCE_PRECISION_HINT")
        assert precision.get_type_name() == "f32"
    finally:
        instance.unload()
    bf16 = config.raw.__deepcopy__()
    bf16.parameters["HINT_BF16"].string_value = "YES"
    from tritonx.config import ModelConfig

    instance = await asyncio.to_thread(load_instance, model_dir, ModelConfig(bf16))
    try:
        want = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
        got = instance.compiled_property("INFERENCE_PRECISION_HINT").get_type_name()
        assert got == ("bf16" if want == "bf16" else got)
    finally:
        instance.unload()


BAD_PARAMETERS = [
    ({"PERFORMANCE_HINT": "fast"}, "to be LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got fast"),
    ({"NUM_STREAMS": "many"}, "'NUM_STREAMS' to be either AUTO/NUMA/<int_value>, got many"),
    ({"INFERENCE_NUM_THREADS": "-1"}, "'INFERENCE_NUM_THREADS' to be a non-negative number"),
    ({"COMPILATION_NUM_THREADS": "x"}, "'COMPILATION_NUM_THREADS' to be a non-negative number"),
    ({"HINT_BF16": "no"}, "expected the parameter 'HINT_BF16' to be YES, got no"),
    ({"INFERENCE_PRECISION_HINT": "f64"}, "'INFERENCE_PRECISION_HINT' to be one of f32, bf16"),
    (
        {"HINT_BF16": "YES", "INFERENCE_PRECISION_HINT": "f32"},
        "'HINT_BF16' and 'INFERENCE_PRECISION_HINT' (f32) contradict",
    ),
    ({"ENABLE_BATCH_PADDING": "maybe"}, "'ENABLE_BATCH_PADDING' to be YES or NO, got maybe"),
    ({"CPU_THREADS_NUM": "2"}, "the parameter 'CPU_THREADS_NUM' is not yet supported"),
    ({"TARGET_DEVICE": "NPU"}, "OpenVINO device 'NPU' (TARGET_DEVICE) is not available here"),
    ({"CPU_EXTENSION_PATH": "/nonexistent/libext.so"}, "CPU_EXTENSION_PATH '/nonexistent"),
    # passed to OpenVINO as Triton passes it; OpenVINO's CPU plugin (2026.4) refuses it
    (
        {"COMPILATION_NUM_THREADS": "1"},
        "openvino error in configuring openvino core : ",
    ),
]


async def test_bad_parameters_are_refused(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    ir = to_ir(dense())
    for i, (params, _) in enumerate(BAD_PARAMETERS):
        model_repository.add(
            f"bad{i}",
            backend="openvino",
            max_batch_size=4,
            inputs=[("x", "FP32", [64])],
            outputs=[("y", "FP32", [32])],
            parameters=params,
            extra=ONE_CPU,
            versions={1: ir},
        )
    async with serve(model_repository, plugin_manager) as server:
        for i, (_, message) in enumerate(BAD_PARAMETERS):
            state, reason = status(server, f"bad{i}")
            assert state is ModelState.UNAVAILABLE, (i, state)
            assert message in reason, (i, reason)


async def test_reshape_io_layers(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """RESHAPE_IO_LAYERS gives the model the config's dims: a model exported for [1, 4] serves
    other shapes; without it the same config is refused with Triton's message."""
    graph = binary("Add", TensorProto.FLOAT, [1, 4])
    io = {
        "inputs": [("INPUT0", "FP32", [-1, -1]), ("INPUT1", "FP32", [-1, -1])],
        "outputs": [("OUTPUT0", "FP32", [-1, -1]), ("OUTPUT1", "FP32", [-1, -1])],
    }
    model_repository.add(
        "reshaped",
        backend="openvino",
        parameters={"RESHAPE_IO_LAYERS": "YES"},
        extra=ONE_CPU,
        versions={1: to_ir(graph)},
        **io,  # type: ignore[arg-type]
    )
    model_repository.add(
        "not_reshaped",
        backend="openvino",
        extra=ONE_CPU,
        versions={1: to_ir(graph)},
        **io,  # type: ignore[arg-type]
    )
    async with serve(model_repository, plugin_manager) as server:
        x = np.arange(15, dtype=np.float32).reshape(3, 5)
        out = await server.infer(InferenceRequest("reshaped", {"INPUT0": x, "INPUT1": x}))
        np.testing.assert_array_equal(out.raise_for_error().outputs["OUTPUT0"], x * 2)
        state, reason = status(server, "not_reshaped")
        assert state is ModelState.UNAVAILABLE
        assert "tensor 'INPUT0': the model expects 2 dimensions (shape [1,4])" in reason


# ----------------------------------------------------------------------------- errors


async def test_config_errors(model_repository: ModelRepositoryBuilder, plugin_manager: Any) -> None:
    ir = to_ir(binary("Add", TensorProto.FLOAT))
    f64 = binary("Add", TensorProto.DOUBLE, [2, 4])
    model_repository.add(
        "few_inputs",
        backend="openvino",
        max_batch_size=4,
        inputs=[("INPUT0", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4])],
        versions={1: ir},
    )
    model_repository.add(
        "wrong_name",
        backend="openvino",
        max_batch_size=4,
        inputs=[("INPUT0", "FP32", [4]), ("X", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4])],
        versions={1: ir},
    )
    model_repository.add(
        "wrong_output",
        backend="openvino",
        max_batch_size=4,
        inputs=ADD_IO["inputs"],
        outputs=[("Z", "FP32", [4])],
        versions={1: ir},
    )
    model_repository.add(
        "wrong_dims",
        backend="openvino",
        max_batch_size=4,
        inputs=[("INPUT0", "FP32", [5]), ("INPUT1", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4])],
        versions={1: ir},
    )
    model_repository.add(
        "string",
        backend="openvino",
        max_batch_size=4,
        inputs=[("INPUT0", "BYTES", [4]), ("INPUT1", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4])],
        versions={1: ir},
    )
    model_repository.add(
        "fp64", backend="openvino", extra=ONNX_FILE, versions={1: {"model.onnx": f64}}
    )
    model_repository.add(
        "no_bin",
        backend="openvino",
        max_batch_size=4,
        inputs=[("x", "FP32", [64])],
        outputs=[("y", "FP32", [32])],
        versions={1: {"model.xml": to_ir(dense())["model.xml"]}},
    )
    model_repository.add(
        "no_file",
        backend="openvino",
        max_batch_size=4,
        **ADD_IO,  # type: ignore[arg-type]
        versions={1: {"other.xml": ir["model.xml"]}},
    )
    model_repository.add(
        "garbage",
        backend="openvino",
        max_batch_size=4,
        **ADD_IO,  # type: ignore[arg-type]
        versions={1: {"model.xml": "<net>not an IR", "model.bin": b""}},
    )
    expected = {
        "few_inputs": "unable to load model 'few_inputs', configuration expects 1 inputs, "
        "model provides 2",
        "wrong_name": "unexpected inference input 'X', allowed inputs are: INPUT0, INPUT1",
        "wrong_output": "unexpected inference output 'Z', allowed outputs are: OUTPUT0, OUTPUT1",
        "wrong_dims": "model 'wrong_dims', tensor 'INPUT0': the model expects 2 dimensions "
        "(shape [-1,4]) but the model configuration specifies 2 dimensions",
        "string": "unsupported datatype TYPE_STRING for input 'INPUT0' for model 'string'",
        "fp64": "unsupported datatype f64 for input 'INPUT0' for model 'fp64' (OpenVINO's CPU "
        "plugin computes FP64 in FP32 precision)",
        "no_bin": "openvino error in reading model",
        "no_file": "unable to find",
        "garbage": "openvino error in reading model",
    }
    async with serve(model_repository, plugin_manager) as server:
        for name, message in expected.items():
            state, reason = status(server, name)
            assert state is ModelState.UNAVAILABLE, (name, state)
            assert message in reason, (name, reason)


def test_gpu_instances_are_refused(model_repository: ModelRepositoryBuilder) -> None:
    """Triton's openvino backend serves KIND_CPU instances only (the device is TARGET_DEVICE)."""
    from tritonx.config import ModelConfig
    from tritonx.proto import model_config_pb2

    model_dir = model_repository.add(
        "gpu", backend="openvino", versions={1: to_ir(binary("Add", TensorProto.FLOAT))}
    )
    config = ModelConfig(model_config_pb2.ModelConfig(name="gpu", backend="openvino"))
    with pytest.raises(TritonXError) as err:
        load_instance(model_dir, config, kind="KIND_GPU")
    assert err.value.code is Code.INVALID_ARG
    assert (
        "unable to load model 'gpu', Triton OpenVINO backend supports only Kind CPU and AUTO"
        in (str(err.value))
    )


async def test_bad_request_leaves_the_model_serving(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """A request OpenVINO refuses (a shape the graph cannot take) fails alone."""
    model_repository.add(
        "add",
        backend="openvino",
        extra=ONNX_FILE + ONE_CPU,
        versions={1: {"model.onnx": binary("Add", TensorProto.FLOAT, ["a", "b"])}},
    )
    async with serve(model_repository, plugin_manager) as server:
        x = np.ones((2, 3), np.float32)
        y = np.ones((2, 4), np.float32)  # cannot be added to x
        bad = await infer_error(server, InferenceRequest("add", {"INPUT0": x, "INPUT1": y}))
        assert bad.code is Code.INTERNAL
        assert "openvino error in running inference" in str(bad)
        good = await server.infer(InferenceRequest("add", {"INPUT0": x, "INPUT1": x}))
        np.testing.assert_array_equal(good.raise_for_error().outputs["OUTPUT0"], x * 2)


# ----------------------------------------------------------------------------- MiniLM-shaped


@pytest.mark.parametrize("fmt", ["ir", "onnx"])
async def test_encoder_shaped_model(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, fmt: str
) -> None:
    """The MiniLM encoder's interface (input_ids, attention_mask INT64 [batch, sequence] ->
    last_hidden_state FP32 [batch, sequence, hidden]), auto-completed, as IR and as ONNX, over
    HTTP and gRPC: equal to ONNX Runtime."""
    graph = encoder()
    if fmt == "ir":
        model_repository.add("enc", write_config=False, versions={1: to_ir(graph)})
    else:
        model_repository.add(
            "enc", backend="openvino", extra=ONNX_FILE, versions={1: {"model.onnx": graph}}
        )
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 50, size=(2, 7)).astype(np.int64)
    mask = np.ones((2, 7), np.int64)
    mask[1, 5:] = 0
    want = ort_run(graph, {"input_ids": ids, "attention_mask": mask})["last_hidden_state"]
    async with serve(model_repository, plugin_manager) as server:
        for result in await _infer_both(server, "enc", {"input_ids": ids, "attention_mask": mask}):
            np.testing.assert_allclose(
                result.as_numpy("last_hidden_state"), want, rtol=1e-5, atol=1e-5
            )


# ----------------------------------------------------------------------------- statistics


async def test_compute_phases_are_reported(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """The backend marks its phases: compute_input and compute_output are measured."""
    model_repository.add(
        "timed",
        backend="openvino",
        max_batch_size=8,
        inputs=[("x", "FP32", [64])],
        outputs=[("y", "FP32", [32])],
        extra=ONE_CPU,
        versions={1: to_ir(dense())},
    )
    async with serve(model_repository, plugin_manager) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        try:
            for _ in range(3):
                x = httpclient.InferInput("x", [4, 64], "FP32")
                x.set_data_from_numpy(np.ones((4, 64), np.float32))
                await http.infer("timed", [x])
            stats = await http.get_inference_statistics("timed")
        finally:
            await http.close()
    inference = stats["model_stats"][0]["inference_stats"]
    assert inference["success"]["count"] == 3
    for phase in ("compute_input", "compute_infer", "compute_output"):
        assert inference[phase]["count"] == 3, phase
        assert inference[phase]["ns"] > 0, phase
