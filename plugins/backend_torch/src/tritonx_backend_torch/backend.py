"""The ``pytorch`` backend: TorchScript (``pytorch_libtorch``) as Triton's libtorch backend
serves it, plus ``torch.export`` programs and AOTInductor packages (``torch_aoti``).

torch is imported inside :meth:`TorchBackend.load` and
:meth:`TorchBackend.auto_complete_config`, never at import time.
"""

from __future__ import annotations

import logging
import threading
import warnings
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
from tritonx.datatypes import DataType
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx_backend_torch import programs
from tritonx_backend_torch.settings import EXPORTED, TORCHSCRIPT, TorchSettings, read_settings

log = logging.getLogger("tritonx.backend.pytorch")

#: ``--backend-config=pytorch,default-max-batch-size=N`` for auto-completed programs.
DEFAULT_MAX_BATCH_SIZE = 4

_threads_lock = threading.Lock()
_threads_set: dict[str, int] = {}


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise TritonXError(
            f"the pytorch backend needs the torch package (pip install torch): {exc}",
            Code.UNAVAILABLE,
        ) from exc
    # request tensors may be read-only views of the received bytes; torch wraps them without
    # copying (models must not write into their inputs)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    return torch


def _apply_thread_counts(torch: Any, settings: TorchSettings, model: str) -> None:
    """Process-wide thread pools: the first model that sets a count wins (as in Triton)."""
    with _threads_lock:
        if settings.intra_op_threads and "intra" not in _threads_set:
            torch.set_num_threads(settings.intra_op_threads)
            _threads_set["intra"] = settings.intra_op_threads
        if settings.inter_op_threads and "inter" not in _threads_set:
            try:
                torch.set_num_interop_threads(settings.inter_op_threads)
                _threads_set["inter"] = settings.inter_op_threads
            except RuntimeError as exc:
                _threads_set["inter"] = torch.get_num_interop_threads()
                log.warning(
                    "model '%s': INTER_OP_THREAD_COUNT=%d not applied, torch's inter-op pool "
                    "already runs %d threads (%s)",
                    model,
                    settings.inter_op_threads,
                    _threads_set["inter"],
                    exc,
                )


def _model_file(ctx_path: Path | None, model: str, instance: str) -> Path:
    if ctx_path is None or not ctx_path.is_file():
        raise TritonXError(
            f"unable to find '{ctx_path}' for model instance '{instance}'", Code.UNAVAILABLE
        )
    return ctx_path


class TorchBackend(Backend):
    """Triton's ``pytorch`` backend: platform ``pytorch_libtorch`` (TorchScript ``model.pt``)
    and ``torch_aoti`` (``model.pt2``: a ``torch.export`` program or an AOTInductor package).

    ``--backend-config=pytorch,default-max-batch-size=N``: the ``max_batch_size`` auto-complete
    gives an exported program whose every input and output has a dynamic first dimension
    (default 4).
    """

    name: ClassVar[str] = "pytorch"
    platforms: ClassVar[tuple[str, ...]] = (TORCHSCRIPT, EXPORTED)
    default_model_filename: ClassVar[str | None] = "model.pt"
    #: only the global default-max-batch-size
    config_keys: ClassVar[frozenset[str] | None] = frozenset()

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        value = self.config.get("default-max-batch-size", str(DEFAULT_MAX_BATCH_SIZE))
        try:
            self.default_max_batch_size = int(value)
        except ValueError:
            raise invalid_arg(
                f"failed to convert 'default-max-batch-size' value '{value}' to an integer"
            ) from None
        # ENABLE_WEIGHT_SHARING: (model, version, file, device) -> [module, instances using it]
        self._shared: dict[tuple[str, int, str, str], list[Any]] = {}
        self._shared_lock = threading.Lock()

    # ------------------------------------------------------------------ auto-complete

    def auto_complete_config(self, ctx: AutoCompleteContext) -> None:
        """TorchScript: none (Triton's rule). ``torch.export`` programs: inputs, outputs,
        ``max_batch_size`` and ``dynamic_batching`` from the exported signature."""
        config = ctx.config
        platform = config.view().platform
        if platform != EXPORTED:
            log.warning(
                "skipping model configuration auto-complete for '%s': not supported for "
                "pytorch backend",
                config.name,
            )
            return
        if config.input_count > 0 and config.output_count > 0:
            return
        path = ctx.model_path
        if path is None or not path.is_file() or programs.is_aoti_package(path):
            log.warning(
                "skipping model configuration auto-complete for '%s': only torch.export "
                "programs (torch.export.save) carry a signature to complete it from",
                config.name,
            )
            return
        torch = _import_torch()
        try:
            program, signature = programs.load_exported(torch, path)
        except TritonXError:
            raise
        except Exception as exc:
            raise TritonXError(
                f"failed to load model '{config.name}': {exc}", Code.INTERNAL
            ) from exc
        inputs, outputs = programs.exported_io(torch, program, signature)
        _fill(config, inputs, outputs, self.default_max_batch_size)

    # ------------------------------------------------------------------ load

    def load(self, ctx: LoadContext) -> ModelInstance:
        """Load one instance on the device its instance group names."""
        config = ctx.config
        platform = config.platform or TORCHSCRIPT
        settings = read_settings(config.name, platform, ctx.parameters)
        programs.check_datatypes(config)
        path = _model_file(ctx.model_path, config.name, ctx.instance.name)
        torch = _import_torch()
        _apply_thread_counts(torch, settings, config.name)
        device = self._device(torch, ctx)
        key = (config.name, ctx.version, str(path), str(device))
        module = self._acquire(key) if settings.weight_sharing else None
        try:
            with torch.inference_mode(settings.inference_mode):
                if platform == TORCHSCRIPT:
                    if module is None:
                        module = self._load_script(torch, path, config.name, device, ctx)
                    program: programs.Program = programs.ScriptProgram(torch, module, config)
                elif programs.is_aoti_package(path):
                    if module is None:
                        module = self._load_aoti(torch, path, config.name, device)
                    program = programs.AotiProgram(torch, module, config)
                else:
                    if module is None:
                        module = self._load_export(torch, path, config.name, device)
                    program = programs.ExportedProgram(torch, module[0], module[1], config)
        except BaseException:
            if settings.weight_sharing:
                self._release(key)
            raise
        if settings.weight_sharing:
            self._store(key, module)
        ctx.logger.info(
            "loaded %s for instance %s on %s (%s)",
            path,
            ctx.instance.name,
            "the model's own devices" if ctx.instance.kind == "KIND_MODEL" else device,
            platform,
        )
        release = (lambda: self._release(key)) if settings.weight_sharing else None
        return TorchModelInstance(torch, program, config, settings, device, ctx, release)

    def _device(self, torch: Any, ctx: LoadContext) -> Any:
        kind = ctx.instance.kind
        if kind != "KIND_GPU":
            return torch.device("cpu")
        if not torch.cuda.is_available():
            raise TritonXError(
                f"unable to load model '{ctx.model_name}': instance '{ctx.instance.name}' is "
                f"KIND_GPU but torch {torch.__version__} has no usable CUDA device (a CPU "
                "build, or no driver); install a CUDA build of torch or use KIND_CPU",
                Code.UNAVAILABLE,
            )
        if ctx.instance.device_id >= torch.cuda.device_count():
            raise invalid_arg(
                f"unable to load model '{ctx.model_name}': torch sees "
                f"{torch.cuda.device_count()} CUDA device(s), instance "
                f"'{ctx.instance.name}' asks for GPU {ctx.instance.device_id}"
            )
        return torch.device("cuda", ctx.instance.device_id)

    @staticmethod
    def _load_script(torch: Any, path: Path, model: str, device: Any, ctx: LoadContext) -> Any:
        try:
            if ctx.instance.kind == "KIND_MODEL":
                module = torch.jit.load(str(path))
            else:
                module = torch.jit.load(str(path), map_location=device)
        except Exception as exc:
            raise TritonXError(f"failed to load model '{model}': {exc}", Code.INTERNAL) from exc
        module.eval()
        return module

    @staticmethod
    def _load_export(torch: Any, path: Path, model: str, device: Any) -> Any:
        try:
            program, signature = programs.load_exported(torch, path)
            module = program.module()
            if device.type != "cpu":
                module = module.to(device)
        except Exception as exc:
            raise TritonXError(f"failed to load model '{model}': {exc}", Code.INTERNAL) from exc
        return module, signature

    @staticmethod
    def _load_aoti(torch: Any, path: Path, model: str, device: Any) -> Any:
        try:
            index = device.index if device.type == "cuda" and device.index is not None else -1
            return torch._inductor.aoti_load_package(str(path), device_index=index)
        except Exception as exc:
            raise TritonXError(f"failed to load model '{model}': {exc}", Code.INTERNAL) from exc

    # ------------------------------------------------------------------ weight sharing

    def _acquire(self, key: tuple[str, int, str, str]) -> Any:
        with self._shared_lock:
            entry = self._shared.get(key)
            if entry is None:
                return None
            entry[1] += 1
            log.info("reusing the loaded model for an instance of '%s' (weight sharing)", key[0])
            return entry[0]

    def _store(self, key: tuple[str, int, str, str], module: Any) -> None:
        with self._shared_lock:
            if key not in self._shared:
                self._shared[key] = [module, 1]

    def _release(self, key: tuple[str, int, str, str]) -> None:
        with self._shared_lock:
            entry = self._shared.get(key)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._shared[key]

    def shared_instances(self, model: str) -> int:
        """How many instances of ``model`` share a module (ENABLE_WEIGHT_SHARING)."""
        with self._shared_lock:
            return sum(e[1] for k, e in self._shared.items() if k[0] == model)


def _fill(
    config: tritonx.EditableModelConfig,
    inputs: Sequence[programs.TensorMeta],
    outputs: Sequence[programs.TensorMeta],
    default_max_batch_size: int,
) -> None:
    """Complete ``config`` from a program's signature (the ONNX Runtime backend's rules)."""
    input_count, output_count = config.input_count, config.output_count
    can_batch = all(t.dims and t.dims[0] == -1 for t in (*inputs, *outputs))
    if can_batch:
        if config.max_batch_size == 0:
            config.max_batch_size = max(default_max_batch_size, 0)
        if config.max_batch_size > 1 and not config.has_scheduler:
            config.enable_dynamic_batching()
    elif config.max_batch_size != 0:
        raise invalid_arg(
            f"autofill failed for model '{config.name}': model does not support batching "
            "while non-zero max_batch_size is specified"
        )
    batching = config.max_batch_size > 0
    if input_count == 0:
        for t in inputs:
            dims = t.dims[1:] if batching else t.dims
            config.add_input(t.name, t.datatype, dims or [1], reshape=None if dims else [])
    if output_count == 0:
        for t in outputs:
            dims = t.dims[1:] if batching else t.dims
            config.add_output(t.name, t.datatype, dims or [1], reshape=None if dims else [])


class TorchModelInstance(ModelInstance):
    """One loaded program serving one instance.

    Requests are stacked on the batch axis and run as one call when their shapes agree; if
    that call fails, each request runs alone so only the bad one fails.
    """

    def __init__(
        self,
        torch: Any,
        program: programs.Program,
        config: ModelConfig,
        settings: TorchSettings,
        device: Any,
        ctx: LoadContext,
        release: Any = None,
    ) -> None:
        self._torch = torch
        self._program = program
        self._settings = settings
        self._script = (config.platform or TORCHSCRIPT) == TORCHSCRIPT
        self._kind = ctx.instance.kind
        self._device = device
        self._cuda = device.type == "cuda"
        self._stream = torch.cuda.Stream(device) if self._cuda else None
        self._release = release
        self._batching = config.max_batch_size > 0
        self._inputs = [(io.name, io.datatype) for io in config.inputs]
        self._outputs = [(io.name, io.datatype, io.dims, io.reshape) for io in config.outputs]
        self._bf16 = torch.bfloat16
        self._as_int16 = torch.int16

    # ------------------------------------------------------------------ execute

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        """Run ``requests``; marks Triton's compute phases on :func:`tritonx.compute_timer`:
        input (numpy to torch, device copies), infer (``forward``), output (back to numpy)."""
        timer = tritonx.compute_timer()
        if len(requests) > 1 and self._batching and _same_shapes(requests):
            try:
                inputs = tritonx.concat_inputs(requests)
                tensors = self._to_torch(inputs)
                timer.input_done()
                results = self._run(tensors)
                timer.output_started()
                outputs = self._to_numpy(results, len(next(iter(inputs.values()))))
            except Exception:
                pass  # one by one below, so only the failing request gets the error
            else:
                self._after()
                return tritonx.split_outputs(requests, outputs)
        prepared: list[Any] = []
        for request in requests:
            try:
                prepared.append(self._to_torch(request.inputs))
            except Exception as exc:
                prepared.append(_as_error(exc))
        timer.input_done()
        ran: list[Any] = []
        for item in prepared:
            if isinstance(item, TritonXError):
                ran.append(item)
                continue
            try:
                ran.append(self._run(item))
            except Exception as exc:
                ran.append(_as_error(exc, execute=True))
        timer.output_started()
        responses = []
        for request, results in zip(requests, ran, strict=True):
            if isinstance(results, TritonXError):
                responses.append(InferenceResponse.failed(results))
                continue
            try:
                batch = len(next(iter(request.inputs.values()))) if request.inputs else 1
                responses.append(InferenceResponse(outputs=self._to_numpy(results, batch)))
            except Exception as exc:
                responses.append(InferenceResponse.failed(_as_error(exc)))
        self._after()
        return responses

    def unload(self) -> None:
        """Drop the program (and this instance's share of a shared module)."""
        self._program = programs.Program()
        if self._release is not None:
            self._release()
            self._release = None
        if self._cuda:
            self._torch.cuda.empty_cache()

    # ------------------------------------------------------------------ internals

    def _to_torch(self, inputs: Mapping[str, np.ndarray]) -> list[Any]:
        torch = self._torch
        tensors = []
        for name, datatype in self._inputs:
            array = inputs.get(name)
            if array is None:
                raise invalid_arg(f"expected input '{name}' is missing from the request")
            if not array.flags.c_contiguous:
                array = np.ascontiguousarray(array)
            tensor = torch.from_numpy(array)  # no copy: the request's memory
            if datatype is DataType.BF16:
                tensor = tensor.view(self._bf16)  # uint16 bits, reinterpreted
            tensors.append(tensor)
        if self._stream is not None:
            # copied on the instance's stream, the one forward runs on
            with torch.cuda.stream(self._stream):
                tensors = [t.to(self._device, non_blocking=True) for t in tensors]
        return tensors

    def _run(self, tensors: list[Any]) -> list[Any]:
        torch = self._torch
        s = self._settings
        if self._script:
            torch._C._set_graph_executor_optimize(s.optimized_execution)
            if s.jit_profiling is not None:
                torch._C._jit_set_profiling_mode(s.jit_profiling)
            if s.jit_executor is not None:
                torch._C._jit_set_profiling_executor(s.jit_executor)
            if s.tensor_fuser is not None:
                torch._C._jit_set_texpr_fuser_enabled(s.tensor_fuser)
        if self._cuda:
            torch.backends.cudnn.enabled = s.cudnn
        if s.intra_op_threads and torch.get_num_threads() != _threads_set.get("intra"):
            torch.set_num_threads(_threads_set["intra"])  # this worker thread's OpenMP pool
        with torch.inference_mode(s.inference_mode), torch.no_grad():
            if self._stream is not None:
                with torch.cuda.stream(self._stream):
                    results = self._program.run(tensors)
                    results = [r.cpu() if hasattr(r, "cpu") else r for r in results]
            else:
                results = self._program.run(tensors)
        return results

    def _to_numpy(self, results: list[Any], batch: int) -> dict[str, np.ndarray]:
        torch = self._torch
        outputs: dict[str, np.ndarray] = {}
        for (name, datatype, dims, reshape), tensor in zip(self._outputs, results, strict=True):
            if not isinstance(tensor, torch.Tensor):
                raise invalid_arg(
                    f"output '{name}' must be of type Tensor, the model returned "
                    f"{type(tensor).__name__}"
                )
            got = programs.datatype_of(torch, tensor.dtype)
            if got is not datatype:
                provided = got.config_name if got is not None else str(tensor.dtype)
                raise invalid_arg(
                    f"configuration expects datatype {datatype.config_name} for output "
                    f"'{name}', model provides {provided}"
                )
            if tensor.dim() == 0:
                raise invalid_arg(f"output '{name}' is a scalar which is not supported.")
            tensor = tensor.detach()
            if tensor.device.type != "cpu":
                tensor = tensor.cpu()
            if datatype is DataType.BF16:
                array = tensor.view(self._as_int16).numpy().view(np.uint16)
            else:
                array = tensor.numpy()
            if reshape is not None:
                target = (batch, *dims) if self._batching else dims
                if -1 not in target and array.size == int(np.prod(target, dtype=np.int64)):
                    array = array.reshape(target)
            outputs[name] = array
        return outputs

    def _after(self) -> None:
        if self._settings.cache_cleaning and self._cuda:
            self._torch.cuda.empty_cache()


def _same_shapes(requests: Sequence[InferenceRequest]) -> bool:
    first = requests[0].inputs
    for request in requests[1:]:
        if request.inputs.keys() != first.keys():
            return False
        for name, array in request.inputs.items():
            if array.shape[1:] != first[name].shape[1:]:
                return False
    return True


def _as_error(exc: BaseException, execute: bool = False) -> TritonXError:
    if isinstance(exc, TritonXError):
        return exc
    if execute:
        return TritonXError(f"PyTorch execute failure: {exc}", Code.INTERNAL)
    return TritonXError(str(exc), Code.INTERNAL)
