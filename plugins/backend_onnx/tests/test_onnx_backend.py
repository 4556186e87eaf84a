"""The ONNX Runtime backend served by an in-process tritonx server.

Every model is built here with the onnx helper API; nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tritonx import InferenceRequest, InstanceSpec, LoadContext  # noqa: E402
from tritonx.config import EXAMPLE_REPOSITORY  # noqa: E402
from tritonx.errors import Code, TritonXError  # noqa: E402
from tritonx.testing import BackendContract, ModelRepositoryBuilder  # noqa: E402
from tritonx.testing import model_status as status  # noqa: E402
from tritonx.testing import serve_repository as serve  # noqa: E402
from tritonx.types import ModelState  # noqa: E402
from tritonx_backend_onnx.backend import OnnxRuntimeBackend  # noqa: E402
from tritonx_backend_onnx.models import add_sub, identity, make_model, resnet18  # noqa: E402

ONE_CPU = "instance_group [ { count: 1, kind: KIND_CPU } ]\n"

# ----------------------------------------------------------------------------- fixtures


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    return ("backend_onnx",)


# ----------------------------------------------------------------------------- the contract


class TestOnnxContract(BackendContract):
    """The inherited backend contract suite on a batching FP32 add/sub model."""

    backend_module = "tritonx_backend_onnx"
    framework_modules = ("onnxruntime", "onnx")
    plugins = ("backend_onnx",)

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder) -> Path:
        return model_repository.add(
            "addsub",
            platform="onnxruntime_onnx",
            max_batch_size=8,
            inputs=[("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
            outputs=[("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
            extra="dynamic_batching { }\n" + ONE_CPU,
            versions={1: {"model.onnx": add_sub()}},
        )


class TestOnnxAutoCompletedContract(BackendContract):
    """The contract suite on a model with no config.pbtxt at all (auto-complete)."""

    backend_module = "tritonx_backend_onnx"
    framework_modules = ("onnxruntime", "onnx")
    plugins = ("backend_onnx",)

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder) -> Path:
        return model_repository.add(
            "auto", write_config=False, versions={1: {"model.onnx": add_sub(TensorProto.INT64)}}
        )


class TestOnnxStringContract(BackendContract):
    """The contract suite on the bundled ``simple_string`` example (BYTES in and out)."""

    backend_module = "tritonx_backend_onnx"
    framework_modules = ("onnxruntime", "onnx")
    plugins = ("backend_onnx",)

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder) -> Path:
        target = model_repository.root / "simple_string"
        shutil.copytree(
            EXAMPLE_REPOSITORY / "simple_string", target, ignore=shutil.ignore_patterns("*.md")
        )
        return target


# ----------------------------------------------------------------------------- auto-complete


async def test_auto_complete_without_config(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    model_repository.add(
        "batching",
        write_config=False,
        versions={1: {"model.onnx": add_sub(TensorProto.FLOAT, ["n", 4])}},
    )
    model_repository.add(
        "fixed",
        write_config=False,
        versions={1: {"model.onnx": add_sub(TensorProto.INT32, [2, 3])}},
    )
    model_repository.add(
        "scalar", write_config=False, versions={1: {"model.onnx": identity(TensorProto.FLOAT, [])}}
    )
    async with serve(model_repository, plugin_manager) as server:
        cfg = server.model_config("batching").to_json_dict()
        assert cfg["backend"] == "onnxruntime" and cfg["platform"] == "onnxruntime_onnx"
        assert cfg["default_model_filename"] == "model.onnx"
        assert cfg["max_batch_size"] == 4
        assert cfg["dynamic_batching"]["preferred_batch_size"] == [4]
        assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["input"]] == [
            ("INPUT0", "TYPE_FP32", [4]),
            ("INPUT1", "TYPE_FP32", [4]),
        ]
        assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["output"]] == [
            ("OUTPUT0", "TYPE_FP32", [4]),
            ("OUTPUT1", "TYPE_FP32", [4]),
        ]
        assert (
            cfg["instance_group"][0]["kind"] == "KIND_CPU"
            and cfg["instance_group"][0]["count"] == 2
        )

        fixed = server.model_config("fixed").to_json_dict()
        assert fixed["max_batch_size"] == 0 and "dynamic_batching" not in fixed
        assert [t["dims"] for t in fixed["input"]] == [[2, 3], [2, 3]]

        scalar = server.model_config("scalar").to_json_dict()
        assert scalar["max_batch_size"] == 0 and scalar["input"][0]["dims"] == [1]
        response = await server.infer(
            InferenceRequest("scalar", {"INPUT0": np.array([2.5], np.float32)})
        )
        assert response.error is None
        np.testing.assert_array_equal(response.outputs["OUTPUT0"], [2.5])
        assert response.outputs["OUTPUT0"].shape == (1,)

        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        response = await server.infer(InferenceRequest("batching", {"INPUT0": a, "INPUT1": a}))
        np.testing.assert_array_equal(response.raise_for_error().outputs["OUTPUT0"], a * 2)


async def test_auto_complete_partial_config_and_backend_config(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """A config with neither inputs nor outputs is completed; ``default-max-batch-size``
    comes from ``--backend-config``; a given max_batch_size and scheduler are kept."""
    model_repository.add(
        "noio", platform="onnxruntime_onnx", versions={1: {"model.onnx": add_sub()}}
    )
    model_repository.add(
        "mbs2",
        backend="onnxruntime",
        max_batch_size=2,
        extra="sequence_batching { }\n",
        versions={1: {"model.onnx": add_sub()}},
    )
    model_repository.add(
        "inputs_only",
        backend="onnxruntime",
        max_batch_size=8,
        inputs=[("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        versions={1: {"model.onnx": add_sub()}},
    )
    model_repository.add(
        "cannot_batch",
        backend="onnxruntime",
        max_batch_size=4,
        versions={1: {"model.onnx": add_sub(shape=[2, 4])}},
    )
    backend_config = {"onnxruntime": {"default-max-batch-size": "16"}}
    async with serve(model_repository, plugin_manager, backend_config=backend_config) as server:
        noio = server.model_config("noio").to_json_dict()
        assert noio["max_batch_size"] == 16 and noio["dynamic_batching"][
            "preferred_batch_size"
        ] == [16]
        # auto-complete adds no dynamic batcher to a model that has a scheduler
        mbs2 = server.model_config("mbs2").to_json_dict()
        assert mbs2["max_batch_size"] == 2 and "sequence_batching" in mbs2
        assert "dynamic_batching" not in mbs2
        inputs_only = server.model_config("inputs_only").to_json_dict()
        assert [t["name"] for t in inputs_only["output"]] == ["OUTPUT0", "OUTPUT1"]
        assert inputs_only["max_batch_size"] == 8
        state, reason = status(server, "cannot_batch")
        assert state is ModelState.UNAVAILABLE
        assert "autofill failed for model 'cannot_batch': model does not support batching" in reason


# ----------------------------------------------------------------------------- datatypes

DATATYPES = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BYTES": TensorProto.STRING,
    "BF16": TensorProto.BFLOAT16,
}


def sample(datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor of ``datatype`` as tritonx holds it (BYTES: object array of bytes)."""
    rng = np.random.default_rng(1)
    if datatype == "BYTES":
        out = np.empty(shape, dtype=object)
        out.reshape(-1)[:] = [f"s{i}-é".encode() for i in range(out.size)]
        return out
    if datatype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(bool)
    if datatype == "BF16":
        return rng.integers(0, 0x7F7F, size=shape).astype(np.uint16)
    from tritonx.datatypes import DataType

    dtype = DataType(datatype).numpy_dtype
    if dtype.kind == "f":
        return rng.standard_normal(size=shape).astype(dtype)
    return rng.integers(0, 100, size=shape).astype(dtype)


async def test_every_datatype_and_zero_size(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """Identity models of every Triton datatype, batching and not, including zero-size tensors."""
    for dt, elem in DATATYPES.items():
        name = dt.lower()
        model_repository.add(
            f"{name}_b",
            backend="onnxruntime",
            max_batch_size=4,
            inputs=[("INPUT0", dt, [-1])],
            outputs=[("OUTPUT0", dt, [-1])],
            extra=ONE_CPU,
            versions={1: {"model.onnx": identity(elem, ["n", "k"])}},
        )
        model_repository.add(
            f"{name}_nb",
            backend="onnxruntime",
            inputs=[("INPUT0", dt, [2, -1])],
            outputs=[("OUTPUT0", dt, [2, -1])],
            extra=ONE_CPU,
            versions={1: {"model.onnx": identity(elem, [2, "k"])}},
        )
    async with serve(model_repository, plugin_manager) as server:
        for dt in DATATYPES:
            name = dt.lower()
            for model, shape in (
                (f"{name}_b", (3, 5)),
                (f"{name}_nb", (2, 3)),
                (f"{name}_b", (2, 0)),
                (f"{name}_b", (0, 3)),
                (f"{name}_nb", (2, 0)),
            ):
                data = sample(dt, shape)
                response = await server.infer(InferenceRequest(model, {"INPUT0": data}))
                assert response.error is None, (model, shape, response.error)
                out = response.outputs["OUTPUT0"]
                assert out.shape == shape, (model, shape, out.shape)
                assert out.dtype == data.dtype, (model, out.dtype)
                if dt == "BYTES":
                    assert all(isinstance(v, bytes) for v in out.reshape(-1)), model
                np.testing.assert_array_equal(out, data, err_msg=model)


# ----------------------------------------------------------------------------- strings


async def test_string_tensors(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    shutil.copytree(EXAMPLE_REPOSITORY / "simple_string", model_repository.root / "simple_string")
    model_repository.add(
        "text",
        backend="onnxruntime",
        inputs=[("INPUT0", "BYTES", [-1])],
        outputs=[("OUTPUT0", "BYTES", [-1])],
        extra=ONE_CPU,
        versions={1: {"model.onnx": identity(TensorProto.STRING, ["n"])}},
    )
    async with serve(model_repository, plugin_manager) as server:
        a = np.array([[str(i).encode() for i in range(-8, 8)]], dtype=object)
        b = np.array([[b"3"] * 16], dtype=object)
        out = (
            (await server.infer(InferenceRequest("simple_string", {"INPUT0": a, "INPUT1": b})))
            .raise_for_error()
            .outputs
        )
        assert out["OUTPUT0"].tolist() == [[str(i + 3).encode() for i in range(-8, 8)]]
        assert out["OUTPUT1"].tolist() == [[str(i - 3).encode() for i in range(-8, 8)]]
        # text survives the round trip, including non-ASCII and empty strings
        words = np.array(["héllo".encode(), b"", "日本".encode(), b"a b"], dtype=object)
        echoed = (
            (await server.infer(InferenceRequest("text", {"INPUT0": words})))
            .raise_for_error()
            .outputs["OUTPUT0"]
        )
        assert echoed.tolist() == words.tolist()
        # bytes that are not UTF-8 cannot become an ONNX string: a clear per-request error
        with pytest.raises(TritonXError) as bad:
            await server.infer(
                InferenceRequest("text", {"INPUT0": np.array([b"\xff\xfe"], dtype=object)})
            )
        assert bad.value.code is Code.INVALID_ARG and "UTF-8" in bad.value.message
        # a string that is not a number fails that request only
        junk = np.array([[b"x"] * 16], dtype=object)
        with pytest.raises(TritonXError, match="onnx runtime error"):
            await server.infer(InferenceRequest("simple_string", {"INPUT0": junk, "INPUT1": b}))
        assert server.model_ready("simple_string")


# ----------------------------------------------------------------------------- batching


async def test_batched_multi_request_execution(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """The dynamic batcher hands several requests to one execute: one session run, N results."""
    model_repository.add(
        "batched",
        backend="onnxruntime",
        max_batch_size=8,
        inputs=[("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
        extra="dynamic_batching { max_queue_delay_microseconds: 200000 }\n" + ONE_CPU,
        versions={1: {"model.onnx": add_sub()}},
    )
    async with serve(model_repository, plugin_manager) as server:
        inputs = [np.full((1 + i % 2, 4), i, np.float32) for i in range(4)]
        requests = [
            InferenceRequest(
                "batched",
                {"INPUT0": x, "INPUT1": np.ones_like(x)},
                requested_outputs=("OUTPUT1",) if i == 1 else None,
            )
            for i, x in enumerate(inputs)
        ]
        responses = await asyncio.gather(*(server.infer(r) for r in requests))
        for i, (x, response) in enumerate(zip(inputs, responses, strict=True)):
            outputs = response.raise_for_error().outputs
            np.testing.assert_array_equal(outputs["OUTPUT1"], x - 1)
            if i == 1:
                assert list(outputs) == ["OUTPUT1"]
            else:
                np.testing.assert_array_equal(outputs["OUTPUT0"], x + 1)
        ((_, _, stats),) = server.model_statistics("batched")
        assert stats.inference_count == sum(len(x) for x in inputs)
        assert stats.execution_count < len(inputs), "the requests were not batched"


async def test_execute_mixed_shapes_and_failing_request(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """Requests with different variable dims run one by one; a failing one fails alone."""
    model_repository.add(
        "var",
        backend="onnxruntime",
        max_batch_size=8,
        inputs=[("INPUT0", "BYTES", [-1])],
        outputs=[("OUTPUT0", "BYTES", [-1])],
        extra=ONE_CPU,
        versions={1: {"model.onnx": identity(TensorProto.STRING, ["n", "k"])}},
    )
    async with serve(model_repository, plugin_manager) as server:
        # an instance loaded as the server loads one, handed whole lists of requests
        config = server.model_config("var")
        version_path = model_repository.root / "var" / "1"
        backend = OnnxRuntimeBackend({})
        instance = backend.load(
            LoadContext(
                "var",
                1,
                version_path.parent,
                version_path,
                version_path / "model.onnx",
                config,
                InstanceSpec("var_0", "var"),
            )
        )
        # a CPU session may be run from the event loop (inline execution)
        assert instance.inline_execution
        good2 = np.array([[b"a", b"b"]], dtype=object)
        good3 = np.array([[b"c", b"d", b"e"]], dtype=object)
        bad = np.array([[b"\xff", b"x"]], dtype=object)
        requests = [InferenceRequest("var", {"INPUT0": x}) for x in (good2, good3, good2)]
        responses = await asyncio.to_thread(instance.execute, requests)
        assert [r.outputs["OUTPUT0"].tolist() for r in responses] == [
            good2.tolist(),
            good3.tolist(),
            good2.tolist(),
        ]
        requests = [InferenceRequest("var", {"INPUT0": x}) for x in (good2, bad, good2)]
        responses = await asyncio.to_thread(instance.execute, requests)
        assert responses[0].error is None and responses[2].error is None
        assert responses[1].error is not None and responses[1].error.code is Code.INVALID_ARG
        instance.unload()


# ----------------------------------------------------------------------------- refused configs


async def test_contradictory_configs_are_refused(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    onnx_file = {1: {"model.onnx": add_sub(TensorProto.FLOAT, ["n", 4])}}
    io = {
        "inputs": [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        "outputs": [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
    }
    cases = {
        "wrong_dtype": (
            {**io, "inputs": [("INPUT0", "INT32", [4]), ("INPUT1", "FP32", [4])]},
            "configuration expects datatype TYPE_INT32 for input 'INPUT0', model provides TYPE_FP32",
        ),
        "wrong_dims": (
            {**io, "outputs": [("OUTPUT0", "FP32", [5]), ("OUTPUT1", "FP32", [4])]},
            "tensor 'OUTPUT0': the model expects 2 dimensions (shape [-1,4]) but the model configuration specifies 2 dimensions",
        ),
        "wrong_rank": (
            {**io, "inputs": [("INPUT0", "FP32", [2, 2]), ("INPUT1", "FP32", [4])]},
            "tensor 'INPUT0': the model expects 2 dimensions",
        ),
        "unknown_input": (
            {**io, "inputs": [("INPUT0", "FP32", [4]), ("NOPE", "FP32", [4])]},
            "unexpected inference input 'NOPE', allowed inputs are: INPUT0, INPUT1",
        ),
        "missing_input": (
            {**io, "inputs": [("INPUT0", "FP32", [4])]},
            "unable to load model 'missing_input', configuration expects 1 inputs, model provides 2",
        ),
        "extra_input": (  # onnxruntime_backend's count comes first
            {**io, "inputs": [*io["inputs"], ("INPUT2", "FP32", [4])]},
            "unable to load model 'extra_input', configuration expects 3 inputs, model provides 2",
        ),
        "unknown_output": (
            {**io, "outputs": [("OUTPUT0", "FP32", [4]), ("OUT9", "FP32", [4])]},
            "unexpected inference output 'OUT9', allowed outputs are: OUTPUT0, OUTPUT1",
        ),
    }
    for name, (tensors, _) in cases.items():
        model_repository.add(
            name,
            backend="onnxruntime",
            max_batch_size=4,
            extra=ONE_CPU,
            versions=onnx_file,
            **tensors,
        )
    # max_batch_size 0 with the batch dim left out of dims: the model has rank 2
    model_repository.add(
        "no_batch_dim", backend="onnxruntime", extra=ONE_CPU, versions=onnx_file, **io
    )
    model_repository.add(
        "good", backend="onnxruntime", max_batch_size=4, extra=ONE_CPU, versions=onnx_file, **io
    )
    async with serve(model_repository, plugin_manager) as server:
        for name, (_, message) in cases.items():
            state, reason = status(server, name)
            assert state is ModelState.UNAVAILABLE, name
            assert message in reason, (name, reason)
        state, reason = status(server, "no_batch_dim")
        assert (
            state is ModelState.UNAVAILABLE
            and "the model expects 2 dimensions (shape [-1,4])" in reason
        )
        assert server.model_ready("good")
        x = np.ones((1, 4), np.float32)
        assert (
            await server.infer(InferenceRequest("good", {"INPUT0": x, "INPUT1": x}))
        ).error is None


async def test_corrupt_onnx_file(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """A corrupt model is UNAVAILABLE with ONNX Runtime's reason; the server serves the rest."""
    garbage = b"\x08\x07this is not an onnx model" * 10
    model_repository.add(
        "corrupt_noconfig", write_config=False, versions={1: {"model.onnx": garbage}}
    )
    model_repository.add(
        "corrupt",
        backend="onnxruntime",
        max_batch_size=4,
        inputs=[("INPUT0", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4])],
        versions={1: {"model.onnx": garbage}},
    )
    model_repository.add(
        "truncated", write_config=False, versions={1: {"model.onnx": add_sub()[:40]}}
    )
    model_repository.add("fine", write_config=False, versions={1: {"model.onnx": add_sub()}})
    async with serve(
        model_repository, plugin_manager, model_control_mode="explicit", load_model=("*",)
    ) as server:
        for name in ("corrupt_noconfig", "corrupt", "truncated"):
            state, reason = status(server, name)
            assert state is ModelState.UNAVAILABLE, (name, server.status_table())
            assert f"failed to load model '{name}'" in reason, reason
            assert not server.model_ready(name)
        assert server.model_ready("fine")
        x = np.ones((2, 4), np.float32)
        assert (
            await server.infer(InferenceRequest("fine", {"INPUT0": x, "INPUT1": x}))
        ).error is None
        # fixing the file and loading again brings the model up
        (model_repository.root / "corrupt_noconfig" / "1" / "model.onnx").write_bytes(add_sub())
        await server.load_model("corrupt_noconfig")
        assert server.model_ready("corrupt_noconfig")


async def test_model_folder_with_external_data(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, tmp_path: Path
) -> None:
    """``model.onnx`` may be a folder holding ``model.onnx`` plus external weight files."""
    weights = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(2, 4), "W")
    model = make_model(
        [helper.make_node("Add", ["INPUT0", "W"], ["OUTPUT0"])],
        [("INPUT0", TensorProto.FLOAT, [2, 4])],
        [("OUTPUT0", TensorProto.FLOAT, [2, 4])],
        [weights],
    )
    folder = model_repository.root / "external" / "1" / "model.onnx"
    folder.mkdir(parents=True)
    onnx.save_model(
        model,
        str(folder / "model.onnx"),
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    assert (folder / "weights.bin").exists()
    async with serve(model_repository, plugin_manager) as server:
        assert server.model_ready("external"), server.status_table()
        assert server.model_config("external").platform == "onnxruntime_onnx"
        out = (
            await server.infer(
                InferenceRequest("external", {"INPUT0": np.ones((2, 4), np.float32)})
            )
        ).raise_for_error()
        np.testing.assert_array_equal(out.outputs["OUTPUT0"], np.arange(8).reshape(2, 4) + 1)


# ----------------------------------------------------------------------------- session options and devices


async def test_session_options_from_parameters(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    params = {
        "intra_op_thread_count": "1",
        "inter_op_thread_count": "1",
        "execution_mode": "1",
        "enable_mem_arena": "1",
        "enable_mem_pattern": "false",
        "memory.enable_memory_arena_shrinkage": "cpu:0",
    }
    files = {1: {"model.onnx": add_sub()}}
    model_repository.add(
        "tuned",
        backend="onnxruntime",
        max_batch_size=4,
        parameters=params,
        extra="optimization { graph { level: 2 } }\n" + ONE_CPU,
        versions=files,
    )
    model_repository.add(
        "bad_mode",
        backend="onnxruntime",
        max_batch_size=4,
        parameters={"execution_mode": "3"},
        extra=ONE_CPU,
        versions=files,
    )
    model_repository.add(
        "bad_threads",
        backend="onnxruntime",
        max_batch_size=4,
        parameters={"intra_op_thread_count": "many"},
        extra=ONE_CPU,
        versions=files,
    )
    model_repository.add(
        "bad_accel",
        backend="onnxruntime",
        max_batch_size=4,
        extra='optimization { execution_accelerators { cpu_execution_accelerator [ { name: "warp" } ] } }\n'
        + ONE_CPU,
        versions=files,
    )
    async with serve(
        model_repository,
        plugin_manager,
        backend_config={"onnxruntime": {"intra_op_thread_count": "1"}},
    ) as server:
        assert server.model_ready("tuned"), server.status_table()
        x = np.ones((1, 4), np.float32)
        assert (
            await server.infer(InferenceRequest("tuned", {"INPUT0": x, "INPUT1": x}))
        ).error is None
        assert "execution_mode are 0 or 1 but got 3" in status(server, "bad_mode")[1]
        assert (
            "failed to convert 'intra_op_thread_count' value 'many'"
            in status(server, "bad_threads")[1]
        )
        assert "unknown Execution Accelerator 'warp' is requested" in status(server, "bad_accel")[1]


def _has_cuda_ep() -> bool:
    from tritonx._core.devices import gpu_count

    return gpu_count() > 0 and "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.mark.parametrize("accelerator", ["", "tensorrt"])
@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda_ep(), reason="needs a GPU and onnxruntime-gpu")
async def test_gpu_instance(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, accelerator: str
) -> None:
    if (
        accelerator == "tensorrt"
        and "TensorrtExecutionProvider" not in ort.get_available_providers()
    ):
        pytest.skip("onnxruntime has no TensorRT execution provider")
    extra = "instance_group [ { count: 1, kind: KIND_GPU } ]\n"
    if accelerator:
        extra += f'optimization {{ execution_accelerators {{ gpu_execution_accelerator [ {{ name: "{accelerator}" }} ] }} }}\n'
    model_repository.add(
        "gpu",
        backend="onnxruntime",
        max_batch_size=8,
        inputs=[("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
        extra=extra,
        versions={1: {"model.onnx": add_sub()}},
    )
    async with serve(model_repository, plugin_manager) as server:
        assert server.model_ready("gpu"), server.status_table()
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        out = (
            (await server.infer(InferenceRequest("gpu", {"INPUT0": x, "INPUT1": x})))
            .raise_for_error()
            .outputs
        )
        np.testing.assert_array_equal(out["OUTPUT0"], 2 * x)


# ----------------------------------------------------------------------------- a real-sized CNN


async def test_resnet18_shaped_cnn(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """A ResNet-18-shaped CNN (random weights, dynamic batch) auto-completes, loads and serves."""
    model_repository.add("resnet18", write_config=False, versions={1: {"model.onnx": resnet18()}})
    async with serve(model_repository, plugin_manager) as server:
        assert server.model_ready("resnet18"), server.status_table()
        cfg = server.model_config("resnet18").to_json_dict()
        assert cfg["max_batch_size"] == 4
        assert cfg["input"][0]["dims"] == [3, -1, -1] and cfg["output"][0]["dims"] == [1000]
        rng = np.random.default_rng(0)
        for shape in ((2, 3, 64, 64), (1, 3, 224, 224)):
            image = rng.standard_normal(shape).astype(np.float32)
            logits = (
                (await server.infer(InferenceRequest("resnet18", {"input": image})))
                .raise_for_error()
                .outputs["logits"]
            )
            assert logits.shape == (shape[0], 1000) and np.isfinite(logits).all()
