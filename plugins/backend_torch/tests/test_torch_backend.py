"""The PyTorch backend served by an in-process tritonx server.

Every model is built here (``torch.jit.script`` / ``torch.export``); nothing is downloaded.
The plugin is registered with the ``register_plugin`` fixture, so the suite runs from the
source tree whether or not ``tritonx-backend-torch`` is pip-installed.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ml_dtypes  # noqa: E402
import tritonclient.grpc.aio as grpcclient  # noqa: E402
import tritonclient.http.aio as httpclient  # noqa: E402

import tritonx_backend_torch  # noqa: E402
from tritonx import InferenceRequest, InstanceSpec, LoadContext, Server  # noqa: E402
from tritonx.errors import Code, TritonXError  # noqa: E402
from tritonx.testing import (  # noqa: E402
    BackendContract,
    ModelRepositoryBuilder,
    listed_plugins,
)
from tritonx.testing import model_status as status  # noqa: E402
from tritonx.testing import serve_repository as serve  # noqa: E402
from tritonx.types import ModelState  # noqa: E402
from tritonx_backend_torch import TorchBackend  # noqa: E402

# torch 2.13 deprecates the TorchScript API these tests exercise on purpose
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning:torch"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]

ONE_CPU = "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
Dim = torch.export.Dim


@pytest.fixture(autouse=True)
def _torch_plugin(register_plugin: Callable[[object], None]) -> None:
    register_plugin(tritonx_backend_torch)


# ----------------------------------------------------------------------------- models


class AddSub(torch.nn.Module):
    def forward(
        self, INPUT0: torch.Tensor, INPUT1: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return INPUT0 + INPUT1, INPUT0 - INPUT1


class Ordered(torch.nn.Module):
    """Outputs that tell which argument went where."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a * 10 + b, a - b


class Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Increment(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


class Negate(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logical_not(x)


class InferenceProbe(torch.nn.Module):
    """Reports whether it runs under torch.inference_mode (new tensors are inference tensors)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        return torch.full_like(x, float(y.is_inference()))


class DictOut(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"sum": x + y, "prod": x * y}


class DictIn(torch.nn.Module):
    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["x"] - inputs["y"]


class Counter(torch.nn.Module):
    """Stateful: every call adds one to a buffer (shows which instances share weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1, dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x + self.calls


class Encoder(torch.nn.Module):
    """A MiniLM-shaped encoder: (input_ids, attention_mask) INT64 -> last_hidden_state FP32."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(100, 16)
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        hidden = self.embed(input_ids) * attention_mask.unsqueeze(-1).to(torch.float32)
        return {"last_hidden_state": self.layer(hidden)}


def scripted(module: torch.nn.Module) -> bytes:
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(module.eval()), buffer)
    return buffer.getvalue()


def exported(module: torch.nn.Module, args: tuple[Any, ...], dynamic: Any = None) -> bytes:
    program = torch.export.export(module.eval(), args, dynamic_shapes=dynamic)
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()


def addsub_model(repo: ModelRepositoryBuilder, name: str = "addsub", **kw: Any) -> Path:
    return repo.add(
        name,
        platform="pytorch_libtorch",
        max_batch_size=8,
        inputs=[("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        outputs=[("OUTPUT__0", "FP32", [4]), ("OUTPUT__1", "FP32", [4])],
        extra=kw.pop("extra", "dynamic_batching { }\n" + ONE_CPU),
        versions={1: {"model.pt": scripted(AddSub())}},
        **kw,
    )


# ----------------------------------------------------------------------------- the contract


class TestTorchScriptContract(BackendContract):
    """The inherited contract suite on a batching TorchScript add/sub model."""

    backend_module = "tritonx_backend_torch"
    framework_modules = ("torch",)

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder) -> Path:
        return addsub_model(model_repository)


class TestExportedContract(BackendContract):
    """The contract suite on a torch.export program with no config.pbtxt (auto-complete)."""

    backend_module = "tritonx_backend_torch"
    framework_modules = ("torch",)

    @pytest.fixture
    def model(self, model_repository: ModelRepositoryBuilder) -> Path:
        batch = Dim("batch", max=64)
        program = exported(
            DictOut(), (torch.ones(2, 3), torch.ones(2, 3)), ({0: batch}, {0: batch})
        )
        return model_repository.add(
            "dictout", write_config=False, versions={1: {"model.pt2": program}}
        )


# ----------------------------------------------------------------------------- datatypes

FAMILIES: dict[str, tuple[type[torch.nn.Module], tuple[str, ...]]] = {
    "float": (Scale, ("FP32", "FP64")),
    "half": (Scale, ("FP16", "BF16")),
    "int": (Increment, ("UINT8", "INT8", "INT16", "INT32", "INT64")),
    "bool": (Negate, ("BOOL",)),
}
TORCH_TYPES = {
    "BOOL": torch.bool,
    "UINT8": torch.uint8,
    "INT8": torch.int8,
    "INT16": torch.int16,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "FP16": torch.float16,
    "FP32": torch.float32,
    "FP64": torch.float64,
    "BF16": torch.bfloat16,
}


def sample(datatype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A random torch tensor of ``datatype``."""
    generator = torch.Generator().manual_seed(7)
    if datatype == "BOOL":
        return torch.randint(0, 2, shape, generator=generator).to(torch.bool)
    if datatype in ("FP16", "FP32", "FP64", "BF16"):
        return torch.randn(shape, generator=generator).to(TORCH_TYPES[datatype])
    return torch.randint(0, 100, shape, generator=generator).to(TORCH_TYPES[datatype])


def to_tritonx(tensor: torch.Tensor) -> np.ndarray:
    """A torch tensor as tritonx holds it (BF16 as uint16 bits)."""
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()


async def test_every_datatype_batched_and_unbatched(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """A generated TorchScript model per datatype family; the served outputs equal torch's."""
    for module, datatypes in FAMILIES.values():
        model = scripted(module())
        for dt in datatypes:
            model_repository.add(
                f"{dt.lower()}_b",
                platform="pytorch_libtorch",
                max_batch_size=4,
                inputs=[("x", dt, [-1])],
                outputs=[("OUTPUT__0", dt, [-1])],
                extra=ONE_CPU,
                versions={1: {"model.pt": model}},
            )
            model_repository.add(
                f"{dt.lower()}_nb",
                platform="pytorch_libtorch",
                inputs=[("x", dt, [2, 3])],
                outputs=[("OUTPUT__0", dt, [2, 3])],
                extra=ONE_CPU,
                versions={1: {"model.pt": model}},
            )
    async with serve(model_repository, plugin_manager) as server:
        for module, datatypes in FAMILIES.values():
            reference = torch.jit.script(module())
            for dt in datatypes:
                for name, shape in ((f"{dt.lower()}_b", (3, 5)), (f"{dt.lower()}_nb", (2, 3))):
                    x = sample(dt, shape)
                    response = await server.infer(InferenceRequest(name, {"x": to_tritonx(x)}))
                    out = response.raise_for_error().outputs["OUTPUT__0"]
                    expected = to_tritonx(reference(x))
                    assert out.dtype == expected.dtype and out.shape == shape, (name, out.dtype)
                    np.testing.assert_array_equal(out, expected, err_msg=name)


async def test_unsupported_datatypes_are_refused(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    model = scripted(Scale())
    model_repository.add(
        "text",
        platform="pytorch_libtorch",
        inputs=[("x", "BYTES", [-1])],
        outputs=[("OUTPUT__0", "BYTES", [-1])],
        extra=ONE_CPU,
        versions={1: {"model.pt": model}},
    )
    model_repository.add(
        "u16",
        platform="pytorch_libtorch",
        inputs=[("x", "UINT16", [-1])],
        outputs=[("OUTPUT__0", "UINT16", [-1])],
        extra=ONE_CPU,
        versions={1: {"model.pt": model}},
    )
    async with serve(model_repository, plugin_manager) as server:
        state, reason = status(server, "text")
        assert state is ModelState.UNAVAILABLE
        assert "input 'x' of model 'text' is TYPE_STRING" in reason and "not supported" in reason
        state, reason = status(server, "u16")
        assert state is ModelState.UNAVAILABLE
        assert "unsupported datatype TYPE_UINT16 for input 'x' for model 'u16'" in reason


# ----------------------------------------------------------------------------- naming


async def test_input_and_output_naming_conventions(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """Forward-argument names (any order), ``<name>__<index>`` and config order, as Triton."""
    model = {1: {"model.pt": scripted(Ordered())}}
    common = {"platform": "pytorch_libtorch", "max_batch_size": 4, "extra": ONE_CPU}
    # forward-argument names, listed in the reverse order of the signature
    model_repository.add(
        "by_arg",
        inputs=[("b", "FP32", [2]), ("a", "FP32", [2])],
        outputs=[("OUT__0", "FP32", [2]), ("OUT__1", "FP32", [2])],
        versions=model,
        **common,
    )
    # <name>__<index>, inputs and outputs listed out of order
    model_repository.add(
        "by_index",
        inputs=[("INPUT__1", "FP32", [2]), ("INPUT__0", "FP32", [2])],
        outputs=[("DIFF__1", "FP32", [2]), ("MIX__0", "FP32", [2])],
        versions=model,
        **common,
    )
    # neither: the config's order
    model_repository.add(
        "by_order",
        inputs=[("first", "FP32", [2]), ("second", "FP32", [2])],
        outputs=[("mix", "FP32", [2]), ("diff", "FP32", [2])],
        versions=model,
        **common,
    )
    async with serve(model_repository, plugin_manager) as server:
        a = np.array([[1, 2]], np.float32)
        b = np.array([[3, 4]], np.float32)
        mix, diff = a * 10 + b, a - b
        out = (await server.infer(InferenceRequest("by_arg", {"a": a, "b": b}))).raise_for_error()
        np.testing.assert_array_equal(out.outputs["OUT__0"], mix)
        np.testing.assert_array_equal(out.outputs["OUT__1"], diff)
        out = (
            await server.infer(InferenceRequest("by_index", {"INPUT__0": a, "INPUT__1": b}))
        ).raise_for_error()
        np.testing.assert_array_equal(out.outputs["MIX__0"], mix)
        np.testing.assert_array_equal(out.outputs["DIFF__1"], diff)
        out = (
            await server.infer(InferenceRequest("by_order", {"first": a, "second": b}))
        ).raise_for_error()
        np.testing.assert_array_equal(out.outputs["mix"], mix)
        np.testing.assert_array_equal(out.outputs["diff"], diff)


async def test_dict_input_and_dict_output(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """A ``Dict[str, Tensor]`` forward argument (Triton) and a dictionary result whose keys
    name the outputs (beyond Triton's libtorch backend, which refuses dictionary results)."""
    model_repository.add(
        "dict_in",
        platform="pytorch_libtorch",
        max_batch_size=4,
        inputs=[("x", "INT32", [3]), ("y", "INT32", [3])],
        outputs=[("OUTPUT__0", "INT32", [3])],
        extra=ONE_CPU,
        versions={1: {"model.pt": scripted(DictIn())}},
    )
    model_repository.add(
        "dict_out",
        platform="pytorch_libtorch",
        max_batch_size=4,
        inputs=[("x", "FP32", [3]), ("y", "FP32", [3])],
        outputs=[("prod", "FP32", [3]), ("sum", "FP32", [3])],
        extra=ONE_CPU,
        versions={1: {"model.pt": scripted(DictOut())}},
    )
    model_repository.add(
        "dict_out_bad",
        platform="pytorch_libtorch",
        max_batch_size=4,
        inputs=[("x", "FP32", [3]), ("y", "FP32", [3])],
        outputs=[("total", "FP32", [3])],
        extra=ONE_CPU,
        versions={1: {"model.pt": scripted(DictOut())}},
    )
    async with serve(model_repository, plugin_manager) as server:
        x = np.arange(6, dtype=np.int32).reshape(2, 3)
        out = (
            await server.infer(InferenceRequest("dict_in", {"x": x, "y": x * 3}))
        ).raise_for_error()
        np.testing.assert_array_equal(out.outputs["OUTPUT__0"], -2 * x)
        f = x.astype(np.float32)
        out = (await server.infer(InferenceRequest("dict_out", {"x": f, "y": f}))).raise_for_error()
        np.testing.assert_array_equal(out.outputs["sum"], f + f)
        np.testing.assert_array_equal(out.outputs["prod"], f * f)
        with pytest.raises(TritonXError) as err:
            await server.infer(InferenceRequest("dict_out_bad", {"x": f, "y": f}))
        assert "The output total in the model configuration is not a key" in err.value.message
        assert server.model_ready("dict_out_bad")


# ----------------------------------------------------------------------------- parameters


async def test_parameters(model_repository: ModelRepositoryBuilder, plugin_manager: Any) -> None:
    """Triton's parameters are read; bad values and ones that cannot apply are refused."""
    good = {
        "DISABLE_OPTIMIZED_EXECUTION": "true",
        "INFERENCE_MODE": "false",
        "DISABLE_CUDNN": "true",
        "ENABLE_CACHE_CLEANING": "true",
        "ENABLE_JIT_PROFILING": "false",
        "ENABLE_JIT_EXECUTOR": "true",
        "ENABLE_TENSOR_FUSER": "false",
        "INTRA_OP_THREAD_COUNT": "1",
        "INTER_OP_THREAD_COUNT": "1",
    }
    addsub_model(model_repository, "tuned", parameters=good)
    for name, params in (("probe_default", {}), ("probe_off", {"INFERENCE_MODE": "false"})):
        model_repository.add(
            name,
            platform="pytorch_libtorch",
            max_batch_size=4,
            inputs=[("x", "FP32", [2])],
            outputs=[("OUTPUT__0", "FP32", [2])],
            parameters=params,
            extra=ONE_CPU,
            versions={1: {"model.pt": scripted(InferenceProbe())}},
        )
    addsub_model(model_repository, "bad_bool", parameters={"INFERENCE_MODE": "maybe"})
    addsub_model(model_repository, "bad_int", parameters={"INTRA_OP_THREAD_COUNT": "many"})
    addsub_model(
        model_repository, "compile", parameters={"TORCH_COMPILE_OPTIONAL_PARAMETERS": "{}"}
    )
    batch = Dim("batch", max=64)
    model_repository.add(
        "jit_on_export",
        platform="torch_aoti",
        parameters={"DISABLE_OPTIMIZED_EXECUTION": "true"},
        versions={
            1: {
                "model.pt2": exported(
                    AddSub(), (torch.ones(2, 4), torch.ones(2, 4)), ({0: batch}, {0: batch})
                )
            }
        },
    )
    async with serve(model_repository, plugin_manager) as server:
        assert server.model_ready("tuned"), server.status_table()
        x = np.ones((2, 4), np.float32)
        out = (
            await server.infer(InferenceRequest("tuned", {"INPUT0": x, "INPUT1": x}))
        ).raise_for_error()
        np.testing.assert_array_equal(out.outputs["OUTPUT__0"], 2 * x)
        # INTRA_OP_THREAD_COUNT: torch's intra-op pool in the thread that executes (OpenMP
        # keeps the count per thread, so each execute applies it; the first model wins)
        instance = _load(TorchBackend({}), server, "tuned", 0)

        def run_and_read() -> tuple[int, bool]:
            instance.execute([InferenceRequest("tuned", {"INPUT0": x, "INPUT1": x})])
            return int(torch.get_num_threads()), bool(torch._C._get_graph_executor_optimize())

        try:
            # DISABLE_OPTIMIZED_EXECUTION: the JIT executor's (thread-local) switch is off
            assert await asyncio.to_thread(run_and_read) == (1, False)
        finally:
            instance.unload()
        # INFERENCE_MODE: on by default, off when asked (the model reports is_inference())
        for name, expected in (("probe_default", 1.0), ("probe_off", 0.0)):
            out = (
                await server.infer(InferenceRequest(name, {"x": np.zeros((1, 2), np.float32)}))
            ).raise_for_error()
            assert out.outputs["OUTPUT__0"].tolist() == [[expected, expected]], name
        assert (
            "failed to convert 'INFERENCE_MODE' value 'maybe' to boolean"
            in status(server, "bad_bool")[1]
        )
        assert (
            "failed to convert 'INTRA_OP_THREAD_COUNT' value 'many' to an integer"
            in status(server, "bad_int")[1]
        )
        assert "TORCH_COMPILE_OPTIONAL_PARAMETERS" in status(server, "compile")[1]
        assert (
            "parameter 'DISABLE_OPTIMIZED_EXECUTION' applies to TorchScript models"
            in status(server, "jit_on_export")[1]
        )


def _load(backend: TorchBackend, server: Server, name: str, index: int) -> Any:
    config = server.model_config(name)
    version_path = Path(server.settings.model_repository[0]) / name / "1"
    ctx = LoadContext(
        model_name=name,
        version=1,
        model_dir=version_path.parent,
        version_path=version_path,
        model_path=version_path / "model.pt",
        config=config,
        instance=InstanceSpec(name=f"{name}_{index}", group_name=name, index=index),
    )
    return backend.load(ctx)


async def test_weight_sharing(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """ENABLE_WEIGHT_SHARING: instances on one device use one module (a stateful model shows
    it); without it each instance loads its own."""
    for name, share in (("shared", "true"), ("separate", "false")):
        model_repository.add(
            name,
            platform="pytorch_libtorch",
            max_batch_size=4,
            inputs=[("x", "INT64", [1])],
            outputs=[("OUTPUT__0", "INT64", [1])],
            parameters={"ENABLE_WEIGHT_SHARING": share},
            extra=ONE_CPU,
            versions={1: {"model.pt": scripted(Counter())}},
        )
    async with serve(model_repository, plugin_manager) as server:
        backend = TorchBackend({})
        zero = [InferenceRequest("m", {"x": np.zeros((1, 1), np.int64)})]
        for name, expected in (("shared", [1, 2, 3]), ("separate", [1, 1, 2])):
            first, second = (_load(backend, server, name, i) for i in range(2))
            seen = [
                int(instance.execute(zero)[0].outputs["OUTPUT__0"][0, 0])
                for instance in (first, second, second)
            ]
            assert seen == expected, name
            first.unload()
            second.unload()
        assert backend.shared_instances("shared") == 0


# ----------------------------------------------------------------------------- errors


async def test_load_errors(model_repository: ModelRepositoryBuilder, plugin_manager: Any) -> None:
    scripted_addsub = {1: {"model.pt": scripted(AddSub())}}
    model_repository.add("no_config", write_config=False, versions=scripted_addsub)
    addsub_model(model_repository, "missing_file")
    (model_repository.root / "missing_file" / "1" / "model.pt").unlink()
    model_repository.add(
        "corrupt",
        platform="pytorch_libtorch",
        inputs=[("x", "FP32", [4])],
        outputs=[("OUTPUT__0", "FP32", [4])],
        versions={1: {"model.pt": b"not a torchscript archive" * 4}},
    )
    model_repository.add(
        "too_few_inputs",
        platform="pytorch_libtorch",
        max_batch_size=4,
        inputs=[("INPUT0", "FP32", [4])],
        outputs=[("OUTPUT__0", "FP32", [4])],
        versions=scripted_addsub,
    )
    model_repository.add(
        "no_outputs",
        platform="pytorch_libtorch",
        max_batch_size=4,
        inputs=[("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        versions=scripted_addsub,
    )
    addsub_model(model_repository, "fine")
    async with serve(model_repository, plugin_manager) as server:
        expected = {
            "no_config": "model configuration must contain at least one input, none were specified.",
            "missing_file": "unable to find '",
            "corrupt": "failed to load model 'corrupt'",
            "too_few_inputs": "configuration expects 1 inputs, model provides 2",
            "no_outputs": "model configuration must contain at least one output, none were specified.",
        }
        for name, message in expected.items():
            state, reason = status(server, name)
            assert state is ModelState.UNAVAILABLE, (name, server.status_table())
            assert message in reason, (name, reason)
        assert server.model_ready("fine")


async def test_execute_errors_fail_only_their_request(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """A wrong output datatype and a forward that raises are per-request errors with Triton's
    messages; the model keeps serving."""
    model_repository.add(
        "wrong_type",
        platform="pytorch_libtorch",
        max_batch_size=4,
        inputs=[("x", "FP32", [-1])],
        outputs=[("OUTPUT__0", "INT32", [-1])],
        extra=ONE_CPU,
        versions={1: {"model.pt": scripted(Scale())}},
    )
    model_repository.add(
        "mismatch",
        platform="pytorch_libtorch",
        max_batch_size=4,
        inputs=[("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
        outputs=[("OUTPUT__0", "FP32", [-1]), ("OUTPUT__1", "FP32", [-1])],
        extra="dynamic_batching { max_queue_delay_microseconds: 100000 }\n" + ONE_CPU,
        versions={1: {"model.pt": scripted(AddSub())}},
    )
    async with serve(model_repository, plugin_manager) as server:
        with pytest.raises(TritonXError) as err:
            await server.infer(InferenceRequest("wrong_type", {"x": np.ones((1, 2), np.float32)}))
        assert err.value.code is Code.INVALID_ARG
        assert (
            "configuration expects datatype TYPE_INT32 for output 'OUTPUT__0', model provides "
            "TYPE_FP32" in err.value.message
        )
        good = {"INPUT0": np.ones((1, 3), np.float32), "INPUT1": np.ones((1, 3), np.float32)}
        bad = {"INPUT0": np.ones((1, 3), np.float32), "INPUT1": np.ones((1, 2), np.float32)}
        results = await asyncio.gather(
            server.infer(InferenceRequest("mismatch", good)),
            server.infer(InferenceRequest("mismatch", bad)),
            server.infer(InferenceRequest("mismatch", good)),
            return_exceptions=True,
        )
        assert not isinstance(results[0], BaseException) and not isinstance(
            results[2], BaseException
        )
        np.testing.assert_array_equal(results[0].outputs["OUTPUT__0"], 2 * good["INPUT0"])
        assert isinstance(results[1], TritonXError) and results[1].code is Code.INTERNAL
        assert results[1].message.startswith("PyTorch execute failure: ")
        assert server.model_ready("mismatch")


async def test_gpu_instance_without_cuda_torch_is_refused(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The core accepts KIND_GPU when it sees a GPU; a torch without CUDA then refuses it."""
    if torch.cuda.is_available():
        pytest.skip("torch has CUDA here")
    from tritonx._core.devices import gpu_count

    monkeypatch.setenv("TRITONX_GPU_COUNT", "1")
    gpu_count.cache_clear()
    try:
        addsub_model(
            model_repository, "gpu", extra="instance_group [ { count: 1, kind: KIND_GPU } ]\n"
        )
        async with serve(model_repository, plugin_manager) as server:
            state, reason = status(server, "gpu")
            assert state is ModelState.UNAVAILABLE
            assert "is KIND_GPU but torch" in reason and "has no usable CUDA device" in reason
    finally:
        monkeypatch.delenv("TRITONX_GPU_COUNT")
        gpu_count.cache_clear()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA build of torch and a GPU")
async def test_gpu_instances(model_repository: ModelRepositoryBuilder, plugin_manager: Any) -> None:
    """KIND_GPU: TorchScript and an exported program on the group's GPU, BF16 included."""
    gpu = "instance_group [ { count: 2, kind: KIND_GPU, gpus: [ 0 ] } ]\n"
    addsub_model(model_repository, "gpu_script", extra=gpu)
    batch = Dim("batch", max=64)
    model_repository.add(
        "gpu_export",
        platform="torch_aoti",
        max_batch_size=8,
        inputs=[("x", "BF16", [3]), ("y", "BF16", [3])],
        outputs=[("sum", "BF16", [3]), ("prod", "BF16", [3])],
        parameters={"ENABLE_CACHE_CLEANING": "true"},
        extra=gpu,
        versions={
            1: {
                "model.pt2": exported(
                    DictOut(),
                    (torch.ones(2, 3, dtype=torch.bfloat16),) * 2,
                    ({0: batch}, {0: batch}),
                )
            }
        },
    )
    async with serve(model_repository, plugin_manager) as server:
        assert server.model_ready("gpu_script") and server.model_ready("gpu_export"), (
            server.status_table()
        )
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        requests = [InferenceRequest("gpu_script", {"INPUT0": x, "INPUT1": x}) for _ in range(8)]
        for response in await asyncio.gather(*(server.infer(r) for r in requests)):
            np.testing.assert_array_equal(response.raise_for_error().outputs["OUTPUT__0"], 2 * x)
        b = sample("BF16", (2, 3))
        out = (
            await server.infer(
                InferenceRequest("gpu_export", {"x": to_tritonx(b), "y": to_tritonx(b)})
            )
        ).raise_for_error()
        np.testing.assert_array_equal(out.outputs["sum"], to_tritonx(b + b))
        np.testing.assert_array_equal(out.outputs["prod"], to_tritonx(b * b))


# ----------------------------------------------------------------------------- torch.export


async def test_exported_program_auto_complete_and_names(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """A ``model.pt2`` without config.pbtxt: inputs named after the forward arguments, a
    dictionary result's keys name the outputs, dynamic batch -> max_batch_size 4 and a
    dynamic batcher; Triton's path names (``ARGS[i]``, ``RESULT[key]``) work in a full config."""
    batch = Dim("batch", max=64)
    program = exported(DictOut(), (torch.ones(2, 3), torch.ones(2, 3)), ({0: batch}, {0: batch}))
    fixed = exported(Scale(), (torch.ones(2, 3, dtype=torch.float64),))
    model_repository.add("auto", write_config=False, versions={1: {"model.pt2": program}})
    model_repository.add("fixed", write_config=False, versions={1: {"model.pt2": fixed}})
    model_repository.add(
        "paths",
        platform="torch_aoti",
        max_batch_size=8,
        inputs=[("ARGS[1]", "FP32", [3]), ("INPUT__0", "FP32", [3])],
        outputs=[("RESULT[prod]", "FP32", [3]), ("OUTPUT__0", "FP32", [3])],
        versions={1: {"model.pt2": program}},
    )
    small = Dim("small", max=4)
    model_repository.add(
        "limited",
        platform="torch_aoti",
        max_batch_size=8,
        inputs=[("x", "FP32", [3]), ("y", "FP32", [3])],
        outputs=[("sum", "FP32", [3])],
        versions={
            1: {
                "model.pt2": exported(
                    DictOut(), (torch.ones(2, 3), torch.ones(2, 3)), ({0: small}, {0: small})
                )
            }
        },
    )
    model_repository.add(
        "unknown_name",
        platform="torch_aoti",
        max_batch_size=8,
        inputs=[("x", "FP32", [3]), ("z", "FP32", [3])],
        outputs=[("sum", "FP32", [3])],
        versions={1: {"model.pt2": program}},
    )
    async with serve(model_repository, plugin_manager) as server:
        cfg = server.model_config("auto").to_json_dict()
        assert cfg["backend"] == "pytorch" and cfg["platform"] == "torch_aoti"
        assert cfg["max_batch_size"] == 4 and "dynamic_batching" in cfg
        assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["input"]] == [
            ("x", "TYPE_FP32", [3]),
            ("y", "TYPE_FP32", [3]),
        ]
        assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["output"]] == [
            ("sum", "TYPE_FP32", [3]),
            ("prod", "TYPE_FP32", [3]),
        ]
        fixed_cfg = server.model_config("fixed").to_json_dict()
        assert fixed_cfg["max_batch_size"] == 0
        assert [(t["name"], t["dims"]) for t in fixed_cfg["output"]] == [("OUTPUT__0", [2, 3])]

        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        y = np.full((2, 3), 2, np.float32)
        out = (await server.infer(InferenceRequest("auto", {"x": x, "y": y}))).raise_for_error()
        np.testing.assert_array_equal(out.outputs["sum"], x + y)
        np.testing.assert_array_equal(out.outputs["prod"], x * y)
        out = (
            await server.infer(InferenceRequest("paths", {"INPUT__0": x, "ARGS[1]": y}))
        ).raise_for_error()
        np.testing.assert_array_equal(out.outputs["OUTPUT__0"], x + y)
        np.testing.assert_array_equal(out.outputs["RESULT[prod]"], x * y)
        state, reason = status(server, "unknown_name")
        assert state is ModelState.UNAVAILABLE
        assert (
            "unexpected inference input 'z' for model 'unknown_name', allowed inputs are: x, y"
            in reason
        )
        # a batch the program's own shape constraints refuse (batch <= 4) fails alone
        big = np.ones((6, 3), np.float32)
        with pytest.raises(TritonXError, match="PyTorch execute failure"):
            await server.infer(InferenceRequest("limited", {"x": big, "y": big}))
        assert server.model_ready("limited")


async def test_minilm_shaped_encoder_torchscript_and_export(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """An encoder shaped like MiniLM's (input_ids, attention_mask INT64 -> last_hidden_state
    FP32, dynamic batch and sequence) served as TorchScript and as a torch.export program,
    both equal to the eager module."""
    encoder = Encoder().eval()
    ids = torch.randint(0, 100, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.int64)
    batch, seq = Dim("batch", max=64), Dim("seq", max=128)
    model_repository.add(
        "encoder_pt2",
        write_config=False,
        versions={
            1: {
                "model.pt2": exported(
                    encoder, (ids, mask), ({0: batch, 1: seq}, {0: batch, 1: seq})
                )
            }
        },
    )
    traced = torch.jit.trace(encoder, (ids, mask), strict=False, check_trace=False)
    buffer = io.BytesIO()
    torch.jit.save(traced, buffer)
    model_repository.add(
        "encoder_pt",
        platform="pytorch_libtorch",
        max_batch_size=8,
        inputs=[("input_ids", "INT64", [-1]), ("attention_mask", "INT64", [-1])],
        outputs=[("last_hidden_state", "FP32", [-1, 16])],
        extra=ONE_CPU,
        versions={1: {"model.pt": buffer.getvalue()}},
    )
    async with serve(model_repository, plugin_manager) as server:
        cfg = server.model_config("encoder_pt2").to_json_dict()
        assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["input"]] == [
            ("input_ids", "TYPE_INT64", [-1]),
            ("attention_mask", "TYPE_INT64", [-1]),
        ]
        assert [(t["name"], t["dims"]) for t in cfg["output"]] == [("last_hidden_state", [-1, 16])]
        ids2 = torch.randint(0, 100, (3, 11))
        mask2 = torch.ones(3, 11, dtype=torch.int64)
        mask2[0, 5:] = 0
        with torch.no_grad():
            expected = encoder(ids2, mask2)["last_hidden_state"].numpy()
        for name in ("encoder_pt2", "encoder_pt"):
            out = (
                await server.infer(
                    InferenceRequest(
                        name, {"input_ids": ids2.numpy(), "attention_mask": mask2.numpy()}
                    )
                )
            ).raise_for_error()
            np.testing.assert_allclose(
                out.outputs["last_hidden_state"], expected, rtol=1e-4, atol=1e-5
            )


@pytest.mark.slow
async def test_aoti_package(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, tmp_path: Path
) -> None:
    """An AOTInductor package (compiled here with the C++ toolchain: ~40 s on 2 CPUs) served
    with a full config; auto-complete is refused for packages (no signature to read)."""
    batch = Dim("batch", max=64)
    program = torch.export.export(
        DictOut().eval(),
        (torch.ones(2, 3), torch.ones(2, 3)),
        dynamic_shapes=({0: batch}, {0: batch}),
    )
    package = torch._inductor.aoti_compile_and_package(
        program, package_path=str(tmp_path / "p.pt2")
    )
    data = Path(package).read_bytes()
    model_repository.add(
        "aoti",
        platform="torch_aoti",
        max_batch_size=8,
        inputs=[("ARGS[0]", "FP32", [3]), ("ARGS[1]", "FP32", [3])],
        outputs=[("RESULT[sum]", "FP32", [3]), ("OUTPUT__1", "FP32", [3])],
        extra=ONE_CPU,
        versions={1: {"model.pt2": data}},
    )
    model_repository.add("aoti_auto", write_config=False, versions={1: {"model.pt2": data}})
    async with serve(model_repository, plugin_manager) as server:
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        out = (
            await server.infer(InferenceRequest("aoti", {"ARGS[0]": x, "ARGS[1]": x}))
        ).raise_for_error()
        np.testing.assert_array_equal(out.outputs["RESULT[sum]"], x + x)
        np.testing.assert_array_equal(out.outputs["OUTPUT__1"], x * x)
        state, reason = status(server, "aoti_auto")
        assert state is ModelState.UNAVAILABLE
        assert "model configuration must contain at least one input" in reason


# ----------------------------------------------------------------------------- clients


async def test_tritonclient_http_and_grpc(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """tritonclient HTTP and gRPC against a TorchScript model and an exported program (BF16
    and FP16 included), with Triton's compute phases measured."""
    addsub_model(model_repository)
    model_repository.add(
        "bf16",
        platform="pytorch_libtorch",
        max_batch_size=4,
        inputs=[("x", "BF16", [3])],
        outputs=[("OUTPUT__0", "BF16", [3])],
        extra=ONE_CPU,
        versions={1: {"model.pt": scripted(Scale())}},
    )
    batch = Dim("batch", max=64)
    model_repository.add(
        "dictout",
        write_config=False,
        versions={
            1: {
                "model.pt2": exported(
                    DictOut(),
                    (torch.ones(2, 3, dtype=torch.float16),) * 2,
                    ({0: batch}, {0: batch}),
                )
            }
        },
    )
    async with serve(model_repository, plugin_manager) as server:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            x = np.arange(8, dtype=np.float32).reshape(2, 4)
            h = np.arange(6, dtype=np.float16).reshape(2, 3)
            b = np.array([[1.5, -2.0, 3.25]], dtype=ml_dtypes.bfloat16)
            for client in (http, grpc):
                assert await client.is_model_ready("addsub")
                meta = await client.get_model_metadata(
                    "dictout", **({} if client is http else {"as_json": True})
                )
                assert meta["platform"] == "torch_aoti"
                inputs = []
                for name in ("INPUT0", "INPUT1"):
                    tensor = (httpclient if client is http else grpcclient).InferInput(
                        name, [2, 4], "FP32"
                    )
                    tensor.set_data_from_numpy(x)
                    inputs.append(tensor)
                result = await client.infer("addsub", inputs)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), 2 * x)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), 0 * x)

                module = httpclient if client is http else grpcclient
                hx, hy = (
                    module.InferInput("x", [2, 3], "FP16"),
                    module.InferInput("y", [2, 3], "FP16"),
                )
                hx.set_data_from_numpy(h)
                hy.set_data_from_numpy(h)
                result = await client.infer("dictout", [hx, hy])
                np.testing.assert_array_equal(result.as_numpy("sum"), h + h)
                np.testing.assert_array_equal(result.as_numpy("prod"), h * h)

                bx = module.InferInput("x", [1, 3], "BF16")
                bx.set_data_from_numpy(b)
                result = await client.infer("bf16", [bx])
                got = result.as_numpy("OUTPUT__0")
                np.testing.assert_array_equal(got.astype(np.float32), b.astype(np.float32) * 2)

            stats = (await http.get_inference_statistics("addsub"))["model_stats"][0]
            inference = stats["inference_stats"]
            for phase in ("compute_input", "compute_infer", "compute_output"):
                assert inference[phase]["count"] == 2 and inference[phase]["ns"] > 0, phase
        finally:
            await http.close()
            await grpc.close()


# ----------------------------------------------------------------------------- discovery


def test_tritonx_plugins_lists_the_backend(tmp_path: Path) -> None:
    """``tritonx plugins`` finds the backend through the entry point its pyproject declares
    (written into a dist-info here, so the test needs no pip install) and lists what it
    registered, without importing the framework."""
    listed = listed_plugins(Path(__file__).resolve().parents[1], tmp_path)
    assert list(listed) == ["backend_torch"]
    assert listed["backend_torch"]["distribution"] == "tritonx-backend-torch"
    assert listed["backend_torch"]["registered"]["backends"] == ["pytorch"]
