"""The ``tensorrt`` backend: serialized TensorRT 10 engines (``model.plan``) run with the
named-tensor API (``get_tensor_name``, ``set_input_shape``, ``set_tensor_address``,
``execute_async_v3``), one execution context per selected optimization profile and one CUDA
stream per instance, on the instance group's GPU.

tensorrt and cuda-python are imported inside :meth:`TensorRTBackend.load` and
:meth:`TensorRTBackend.auto_complete_config`, never at import time. **Unverified on a GPU**
(see the README): only the parts that need no TensorRT are tested.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import tritonx
from tritonx import (
    AutoCompleteContext,
    Backend,
    InferenceRequest,
    InferenceResponse,
    LoadContext,
    ModelConfig,
    ModelInstance,
)
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.parameters import parse_bool
from tritonx.proto import model_config_pb2
from tritonx_backend_tensorrt.cuda import Cuda, DeviceBuffer, load_runtime
from tritonx_backend_tensorrt.modelconfig import (
    EngineIO,
    auto_complete,
    check_profiles,
    group_profiles,
    read_parameters,
    select_profile,
    validate,
)

log = logging.getLogger("tritonx.backend.tensorrt")

MODEL_FILE = "model.plan"
#: ``--backend-config=tensorrt,<key>`` keys Triton has and this backend does not act on:
#: refused, never silently accepted.
_NOT_SUPPORTED = ("coalesce-request-input", "execution-policy")


def import_tensorrt() -> Any:
    """The ``tensorrt`` module; UNAVAILABLE naming the package when it is not installed."""
    try:
        import tensorrt
    except ImportError as exc:
        raise TritonXError(
            "the tensorrt backend needs TensorRT 10: pip install tensorrt cuda-python (from "
            f"NVIDIA's package index, on a machine with a CUDA GPU) ({exc})",
            Code.UNAVAILABLE,
        ) from exc
    return tensorrt


def engine_io(trt: Any, engine: Any) -> list[EngineIO]:
    """An engine's I/O tensors with their profile shapes (TensorRT 10 named-tensor API)."""
    out = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        profiles = []
        if is_input and not engine.is_shape_inference_io(name):
            for p in range(engine.num_optimization_profiles):
                low, opt, high = engine.get_tensor_profile_shape(name, p)
                profiles.append((tuple(low), tuple(opt), tuple(high)))
        out.append(
            EngineIO(
                name=name,
                is_input=is_input,
                trt_type=engine.get_tensor_dtype(name).name,
                dims=tuple(engine.get_tensor_shape(name)),
                profiles=tuple(profiles),
                is_shape_tensor=bool(engine.is_shape_inference_io(name)),
                linear=engine.get_tensor_format(name) == trt.TensorFormat.LINEAR,
            )
        )
    return out


class TensorRTBackend(Backend):
    """Triton's ``tensorrt`` backend (platform ``tensorrt_plan``, file ``model.plan``).

    ``--backend-config=tensorrt,<key>=<value>``: ``plugins`` (``;``-separated TensorRT plugin
    libraries loaded before any engine), ``version-compatible`` (allow version-compatible
    engines, which run the lean runtime they carry). ``coalesce-request-input`` and
    ``execution-policy`` are refused (INVALID_ARG): tritonx does not act on them.
    """

    name: ClassVar[str] = "tensorrt"
    platforms: ClassVar[tuple[str, ...]] = ("tensorrt_plan",)
    default_model_filename: ClassVar[str | None] = MODEL_FILE
    # (the unsupported ones are refused below with their own reason)
    config_keys: ClassVar[frozenset[str] | None] = frozenset(
        {"version-compatible", "plugins", *_NOT_SUPPORTED}
    )

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        for key in _NOT_SUPPORTED:
            if key in self.config:
                raise invalid_arg(
                    f"--backend-config=tensorrt,{key} is not supported by tritonx: each "
                    "instance gathers its requests' inputs into one host buffer and runs on its "
                    "own thread"
                )
        self.version_compatible = parse_bool(
            "version-compatible", self.config.get("version-compatible", "false")
        )
        self.plugin_libraries = [p for p in self.config.get("plugins", "").split(";") if p]
        self._plugins_loaded = False

    def _runtime(self, trt: Any) -> Any:
        logger = trt.Logger(trt.Logger.WARNING)
        if not self._plugins_loaded:
            for library in self.plugin_libraries:
                try:
                    ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
                except OSError as exc:
                    raise invalid_arg(f"unable to load TensorRT plugin '{library}': {exc}") from exc
            trt.init_libnvinfer_plugins(logger, "")
            self._plugins_loaded = True
        runtime = trt.Runtime(logger)
        if self.version_compatible:
            runtime.engine_host_code_allowed = True
        return runtime

    def _engine(self, trt: Any, path: Path | None, model: str) -> tuple[Any, Any]:
        if path is None or not path.is_file():
            raise TritonXError(f"unable to find '{path}' for model '{model}'", Code.NOT_FOUND)
        runtime = self._runtime(trt)
        engine = runtime.deserialize_cuda_engine(path.read_bytes())
        if engine is None:
            raise TritonXError(
                f"failed to load model '{model}': TensorRT could not deserialize {path} "
                "(an engine built by another TensorRT version or for another GPU?)",
                Code.INTERNAL,
            )
        return runtime, engine

    def auto_complete_config(self, ctx: AutoCompleteContext) -> None:
        """Fill ``max_batch_size``, ``dynamic_batching`` and the I/O from the engine."""
        raw = ctx.config.view().raw
        kinds = model_config_pb2.ModelInstanceGroup.Kind
        if any(g.kind == kinds.KIND_CPU for g in raw.instance_group):
            raise _gpu_only(ctx.config.name)
        trt = import_tensorrt()
        cuda = Cuda(load_runtime())
        gpus = [g for group in raw.instance_group for g in group.gpus]
        if gpus:
            cuda.set_device(gpus[0])
        _, engine = self._engine(trt, ctx.model_path, ctx.config.name)
        io = engine_io(trt, engine)
        completed = auto_complete(ctx.config.to_dict(), io, engine.num_optimization_profiles)
        ctx.config.update_from_dict(completed)

    def load(self, ctx: LoadContext) -> ModelInstance:
        """Deserialize the engine on the instance's GPU, one context per selected profile."""
        config = ctx.config
        if ctx.instance.kind != "KIND_GPU":
            raise _gpu_only(config.name)
        strategy = read_parameters(config, ctx.instance.name)
        profiles = group_profiles(config.raw, ctx.instance.group_name)
        trt = import_tensorrt()
        cuda = Cuda(load_runtime())
        cuda.set_device(ctx.instance.device_id)
        runtime, engine = self._engine(trt, ctx.model_path, config.name)
        io = engine_io(trt, engine)
        check_profiles(config.name, ctx.instance.name, profiles, engine.num_optimization_profiles)
        validate(config, io, ctx.instance.name)
        stream = cuda.stream()
        contexts: dict[int, Any] = {}
        allocation = getattr(trt.ExecutionContextAllocationStrategy, strategy)
        for profile_name, index in profiles:
            if index in contexts:
                log.warning(
                    "%s maps to profile index %d which has been mapped already, existing "
                    "optimization profile will be reused",
                    profile_name,
                    index,
                )
                continue
            context = engine.create_execution_context(allocation)
            if context is None:
                raise TritonXError("unable to create TensorRT context", Code.INTERNAL)
            if index != 0 and not context.set_optimization_profile_async(index, int(stream)):
                raise invalid_arg(
                    f"Can not set the specified optimization profile {profile_name}[{index}] "
                    f"for {ctx.instance.name}."
                )
            contexts[index] = context
        cuda.synchronize(stream)
        ctx.logger.info(
            "loaded %s for instance %s on GPU %d (profiles %s)",
            ctx.model_path,
            ctx.instance.name,
            ctx.instance.device_id,
            ", ".join(f"{n}[{i}]" for n, i in profiles),
        )
        return TensorRTInstance(
            trt,
            cuda,
            runtime,
            engine,
            contexts,
            profiles,
            stream,
            io,
            config,
            ctx.instance.device_id,
        )


class TensorRTInstance(ModelInstance):
    """One engine on one GPU: reused device buffers per tensor, a CUDA stream of its own."""

    def __init__(
        self,
        trt: Any,
        cuda: Cuda,
        runtime: Any,
        engine: Any,
        contexts: dict[int, Any],
        profiles: Sequence[tuple[str, int]],
        stream: Any,
        io: Sequence[EngineIO],
        config: ModelConfig,
        device: int,
    ) -> None:
        self._cuda = cuda
        self._runtime = runtime
        self._engine = engine
        self._contexts = contexts
        self._profiles = [(n, i) for n, i in profiles if i in contexts] or list(profiles)
        self._stream = stream
        self._io = list(io)
        self._device = device
        self._batching = config.max_batch_size > 0
        self._inputs = [(t.name, t.datatype) for t in config.inputs]
        self._outputs = [(t.name, t.datatype) for t in config.outputs]
        self._buffers = {t.name: DeviceBuffer(cuda) for t in io}
        self._shape_of = {t.name: t.dims for t in io}

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        """Run the requests as one batch (stacked on the batch axis) when they share shapes,
        else one by one; per-request errors fail only their request."""
        timer = tritonx.compute_timer()
        self._cuda.set_device(self._device)
        if len(requests) == 1 or (self._batching and _same_shapes(requests)):
            try:
                outputs = self._run(tritonx.concat_inputs(requests), timer)
            except Exception as exc:
                if len(requests) == 1:
                    return [InferenceResponse.failed(_as_error(exc))]
            else:
                return tritonx.split_outputs(requests, outputs)
        responses = []
        for request in requests:
            try:
                responses.append(InferenceResponse(outputs=self._run(dict(request.inputs), timer)))
            except Exception as exc:
                responses.append(InferenceResponse.failed(_as_error(exc)))
        return responses

    def _run(self, inputs: Mapping[str, np.ndarray], timer: Any) -> dict[str, np.ndarray]:
        shapes = {name: tuple(array.shape) for name, array in inputs.items()}
        index = select_profile(shapes, self._io, self._profiles)
        context = self._contexts[index]
        for name, _ in self._inputs:
            array = np.ascontiguousarray(inputs[name])
            shape = tuple(array.shape) or (1,)
            if not context.set_input_shape(name, shape):
                raise invalid_arg(
                    f"unable to set the shape {list(shape)} of input '{name}' (the engine's "
                    f"shape is {list(self._shape_of[name])})"
                )
            pointer = self._buffers[name].ensure(array.nbytes)
            self._cuda.to_device(pointer, array, self._stream)
            context.set_tensor_address(name, pointer)
        missing = context.infer_shapes()
        if missing:
            raise invalid_arg(
                "failed to specify the dimensions of all input tensors or values of all input "
                f"shape tensors ({', '.join(missing)})"
            )
        host: dict[str, np.ndarray] = {}
        for name, datatype in self._outputs:
            shape = tuple(context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise TritonXError(
                    f"output '{name}' has a data-dependent shape {list(shape)}: engines whose "
                    "output shapes are known only after execution are not supported",
                    Code.UNSUPPORTED,
                )
            array = np.empty(shape, dtype=datatype.numpy_dtype)
            pointer = self._buffers[name].ensure(array.nbytes)
            context.set_tensor_address(name, pointer)
            host[name] = array
        timer.input_done()
        if not context.execute_async_v3(int(self._stream)):
            raise TritonXError(
                f"unable to enqueue for inference {self._engine.name}", Code.INTERNAL
            )
        for name, array in host.items():
            self._cuda.to_host(array, self._buffers[name].pointer, self._stream)
        self._cuda.synchronize(self._stream)
        timer.output_started()
        return host

    def unload(self) -> None:
        """Free the device buffers, the contexts, the engine and the stream."""
        self._cuda.set_device(self._device)
        for buffer in self._buffers.values():
            buffer.release()
        self._contexts.clear()
        self._engine = None
        self._cuda.destroy_stream(self._stream)


def _gpu_only(model: str) -> TritonXError:
    return invalid_arg(f"unable to load model '{model}', TensorRT backend supports only GPU device")


def _same_shapes(requests: Sequence[InferenceRequest]) -> bool:
    first = requests[0].inputs
    return all(
        r.inputs.keys() == first.keys()
        and all(a.shape[1:] == first[n].shape[1:] for n, a in r.inputs.items())
        for r in requests[1:]
    )


def _as_error(exc: BaseException) -> TritonXError:
    if isinstance(exc, TritonXError):
        return exc
    return TritonXError(f"TensorRT execute failure: {exc}", Code.INTERNAL)
