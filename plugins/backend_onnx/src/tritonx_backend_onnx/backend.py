"""The ``onnxruntime`` backend: one ``onnxruntime.InferenceSession`` per model instance.

onnxruntime is imported inside :meth:`OnnxRuntimeBackend.load` and
:meth:`OnnxRuntimeBackend.auto_complete_config`, never at import time.
"""

from __future__ import annotations

import importlib.metadata
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
from tritonx.batching import BatchIO
from tritonx.datatypes import DataType
from tritonx.errors import Code, TritonXError, invalid_arg, not_found
from tritonx_backend_onnx import accelerators, modelconfig
from tritonx_backend_onnx.tensors import (
    TensorInfo,
    bf16_to_ort,
    bytes_to_ort,
    fit_shape,
    ort_to_bytes,
    ortvalue_to_numpy,
    tensor_info,
)

log = logging.getLogger("tritonx.backend.onnxruntime")

#: The file inside a model-directory ``default_model_filename`` (Triton's rule).
MODEL_FILE = "model.onnx"


def _import_ort() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise TritonXError(
            f"the onnxruntime backend needs the onnxruntime (or onnxruntime-gpu) package: {exc}",
            Code.UNAVAILABLE,
        ) from exc
    return onnxruntime


def resolve_model_file(path: Path | None, model: str) -> Path:
    """The ``.onnx`` file to open: ``path`` itself, or ``path/model.onnx`` for a folder
    (a folder holds the model plus its external-data files)."""
    if path is None:
        raise not_found(f"no model file is configured for model '{model}'")
    if path.is_dir():
        path = path / MODEL_FILE
    if not path.is_file():
        raise not_found(f"unable to find '{path}' for model '{model}'")
    return path


def open_session(
    ort: Any, path: Path, model: str, options: Any = None, providers: Any = None
) -> Any:
    """An ``InferenceSession`` for ``path``; ONNX Runtime's refusal becomes INVALID_ARG."""
    try:
        return ort.InferenceSession(
            str(path), sess_options=options, providers=providers or ["CPUExecutionProvider"]
        )
    except TritonXError:
        raise
    except Exception as exc:
        raise invalid_arg(f"failed to load model '{model}' from {path}: {exc}") from exc


def session_io(session: Any) -> tuple[list[TensorInfo], list[TensorInfo], list[TensorInfo]]:
    """(inputs, outputs, overridable initializers) of a session, in graph order."""
    return (
        [tensor_info(n) for n in session.get_inputs()],
        [tensor_info(n) for n in session.get_outputs()],
        [tensor_info(n) for n in session.get_overridable_initializers()],
    )


def _both_builds_installed() -> bool:
    names = set()
    for dist in ("onnxruntime", "onnxruntime-gpu"):
        try:
            importlib.metadata.distribution(dist)
            names.add(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return len(names) == 2


class OnnxRuntimeBackend(Backend):
    """Triton's ``onnxruntime`` backend (platform ``onnxruntime_onnx``, file ``model.onnx``).

    ``--backend-config=onnxruntime,<key>=<value>`` keys: ``default-max-batch-size`` (for
    auto-complete, default 4) and defaults for the session ``parameters``
    (``intra_op_thread_count``, ``inter_op_thread_count``, ``execution_mode``,
    ``enable_mem_arena``, ``enable_mem_pattern``...), which a model's own ``parameters``
    override.
    """

    name: ClassVar[str] = "onnxruntime"
    platforms: ClassVar[tuple[str, ...]] = ("onnxruntime_onnx",)
    default_model_filename: ClassVar[str | None] = MODEL_FILE
    default_cpu_instance_count: ClassVar[int] = 2
    # (enable-global-threadpool is refused below with its own reason)
    config_keys: ClassVar[frozenset[str] | None] = frozenset(
        {"enable-global-threadpool", *modelconfig.SESSION_KEYS}
    )

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        value = self.config.get("default-max-batch-size", str(modelconfig.DEFAULT_MAX_BATCH_SIZE))
        self.default_max_batch_size = modelconfig.parse_int("default-max-batch-size", value)
        if "enable-global-threadpool" in self.config:
            log.warning(
                "--backend-config=onnxruntime,enable-global-threadpool is not supported by the "
                "ONNX Runtime Python API; every session keeps its own thread pools"
            )

    def auto_complete_config(self, ctx: AutoCompleteContext) -> None:
        """Fill inputs, outputs, ``max_batch_size`` and ``dynamic_batching`` from the graph."""
        config = ctx.config
        if config.input_count > 0 and config.output_count > 0:
            return
        ort = _import_ort()
        path = resolve_model_file(ctx.model_path, config.name)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.intra_op_num_threads = 1
        for library in config.view().raw.model_operations.op_library_filename:
            options.register_custom_ops_library(library)
        session = open_session(ort, path, config.name, options)
        inputs, outputs, _ = session_io(session)
        del session
        modelconfig.auto_complete(config, inputs, outputs, self.default_max_batch_size)

    def load(self, ctx: LoadContext) -> ModelInstance:
        """Open one session for this instance, on the providers its kind asks for, and check
        the config against the graph."""
        ort = _import_ort()
        config = ctx.config
        name = ctx.model_name
        path = resolve_model_file(ctx.model_path, name)
        kind = ctx.instance.kind
        providers = accelerators.providers_for(
            config.raw, ctx.parameters, kind, ctx.instance.device_id, ort.get_available_providers()
        )
        if kind == "KIND_GPU" and _both_builds_installed():
            ctx.logger.warning(
                "both onnxruntime and onnxruntime-gpu are installed; they share one module, "
                "so which one is loaded is undefined: uninstall onnxruntime"
            )
        settings = modelconfig.session_settings(config.raw, ctx.parameters, self.config)
        options, run_options = modelconfig.make_session_options(ort, settings)
        session = open_session(ort, path, name, options, providers)
        used = session.get_providers()
        wanted = [ep for ep, _ in providers if ep != "CPUExecutionProvider"]
        unused = [ep for ep in wanted if ep not in used]
        if unused:
            raise TritonXError(
                f"model '{name}' instance '{ctx.instance.name}': ONNX Runtime could not start "
                f"{', '.join(unused)} (the session fell back to {', '.join(used)}); check the "
                "libraries the provider loads (CUDA/cuDNN and TensorRT for onnxruntime-gpu, "
                "OpenVINO for onnxruntime-openvino)",
                Code.UNAVAILABLE,
            )
        inputs, outputs, initializers = session_io(session)
        modelconfig.validate(config, inputs, outputs, initializers)
        ctx.logger.info("loaded %s for instance %s on %s", path, ctx.instance.name, ", ".join(used))
        scalars = {t.name for t in (*inputs, *initializers) if not t.dims}
        instance = OnnxModelInstance(ort, session, run_options, config, scalars)
        # session.run holds no thread-bound state; on the CPU a tiny model's run is shorter
        # than the hand-off to its thread (GPU sessions keep to their threads)
        instance.inline_execution = used == ["CPUExecutionProvider"]
        return instance


class OnnxModelInstance(ModelInstance):
    """One ONNX Runtime session serving one instance.

    Several requests are run as one batch (stacked on the batch axis) when their shapes
    agree; if such a batch fails, each request is run alone so only the bad one fails.
    """

    def __init__(
        self,
        ort: Any,
        session: Any,
        run_options: Any,
        config: ModelConfig,
        scalar_inputs: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        self._ort = ort
        self._scalar_inputs = scalar_inputs
        self._session = session
        self._run_options = run_options
        self._batching = config.max_batch_size > 0
        self._input_types = {io.name: io.datatype for io in config.inputs}
        self._outputs = [(io.name, io.datatype, io.dims) for io in config.outputs]
        # a stateful model: the sequence batcher adds control and state inputs, and reads
        # the state outputs back, whatever outputs the client asked for
        injected, self._state_outputs = modelconfig.sequence_tensors(config.raw)
        self._input_types.update(
            {n: dt for n, dt in injected.items() if n not in self._input_types}
        )
        known = {name for name, _, _ in self._outputs}
        self._outputs_all = self._outputs + [o for o in self._state_outputs if o[0] not in known]
        #: ragged inputs, batch inputs and batch outputs (None: the model has none)
        self._batch_io = BatchIO.of(config)
        self._ortvalues = any(dt is DataType.BF16 for _, dt, _ in self._outputs)
        if self._ortvalues and DataType.BYTES in self._input_types.values():
            # BF16 outputs need OrtValue runs, and ONNX Runtime builds no string OrtValues
            raise TritonXError(
                f"model '{config.name}': BYTES inputs together with BF16 outputs are not "
                "supported by the onnxruntime backend",
                Code.UNSUPPORTED,
            )

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        """Run ``requests``: batched when possible, one by one otherwise.

        Marks Triton's compute phases on :func:`tritonx.compute_timer`: input (stacking and
        converting inputs into feeds), infer (``session.run``), output (converting and
        splitting the results).
        """
        timer = tritonx.compute_timer()
        if self._batch_io is not None:
            return self._execute_ragged(requests, self._batch_io, timer)
        if len(requests) > 1 and self._batching and self._same_shapes(requests):
            try:
                inputs = tritonx.concat_inputs(requests)
                wanted = self._wanted(requests)
                feeds = self._feeds(inputs)
                timer.input_done()
                results = self._infer(feeds, wanted)
                timer.output_started()
                outputs = self._convert(inputs, wanted, results)
            except Exception:
                pass  # run them one by one, so only the failing request gets the error
            else:
                return tritonx.split_outputs(requests, outputs)
        # one by one: prepare every request's feeds, then run them, then convert the results
        prepared: list[tuple[Any, Any] | BaseException] = []
        for request in requests:
            try:
                wanted = self._wanted([request])
                prepared.append((wanted, self._feeds(request.inputs)))
            except Exception as exc:
                prepared.append(exc)
        timer.input_done()
        ran: list[Any] = []
        for item in prepared:
            if isinstance(item, BaseException):
                ran.append(item)
                continue
            try:
                ran.append(self._infer(item[1], item[0]))
            except Exception as exc:
                ran.append(exc)
        timer.output_started()
        responses: list[InferenceResponse] = []
        for request, item, results in zip(requests, prepared, ran, strict=True):
            if isinstance(results, BaseException):
                responses.append(InferenceResponse.failed(_as_error(results)))
                continue
            assert not isinstance(item, BaseException)
            try:
                outputs = self._convert(request.inputs, item[0], results)
            except Exception as exc:
                responses.append(InferenceResponse.failed(_as_error(exc)))
            else:
                responses.append(InferenceResponse(outputs=outputs))
        return responses

    def _execute_ragged(
        self, requests: Sequence[InferenceRequest], batch_io: BatchIO, timer: Any
    ) -> list[InferenceResponse]:
        """Run a model with ragged inputs, batch inputs or batch outputs as Triton's ONNX
        Runtime backend does: always the whole batch in one run (ragged inputs flattened into
        one 1-dimensional tensor, the batch inputs the core added), batch outputs scattered
        with their source input's shapes; an error fails every request of the batch."""
        try:
            inputs = batch_io.concat(requests)
            wanted = self._wanted(requests)
            feeds = self._feeds(inputs)
            timer.input_done()
            results = self._infer(feeds, wanted)
            timer.output_started()
            total = sum(r.batch_size for r in requests)
            outputs = self._convert(inputs, wanted, results, total, batch_io.batch_outputs)
        except Exception as exc:
            error = _as_error(exc)
            return [InferenceResponse.failed(error) for _ in requests]
        return batch_io.split(requests, outputs)

    def unload(self) -> None:
        """Drop the session (ONNX Runtime frees its memory)."""
        self._session = None

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _same_shapes(requests: Sequence[InferenceRequest]) -> bool:
        first = requests[0].inputs
        for request in requests[1:]:
            if request.inputs.keys() != first.keys():
                return False
            for name, array in request.inputs.items():
                if array.shape[1:] != first[name].shape[1:]:
                    return False
        return True

    def _wanted(
        self, requests: Sequence[InferenceRequest]
    ) -> list[tuple[str, DataType, tuple[int, ...]]]:
        names: set[str] = set()
        for request in requests:
            if request.requested_outputs is None:
                return self._outputs_all
            names.update(request.requested_outputs)
        if self._state_outputs:
            names.update(name for name, _, _ in self._state_outputs)
        return [o for o in self._outputs_all if o[0] in names] or self._outputs_all

    def _feeds(self, inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Inputs as ONNX Runtime takes them (strings, BF16 OrtValues, scalars)."""
        feeds: dict[str, Any] = {}
        for name, array in inputs.items():
            dt = self._input_types.get(name)
            if name in self._scalar_inputs and array.ndim and array.size == 1:
                array = array.reshape(())  # configured as [1], a scalar in the graph
            if dt is DataType.BYTES:
                feeds[name] = bytes_to_ort(array, name)
            elif dt is DataType.BF16:
                feeds[name] = bf16_to_ort(self._ort, array)
            else:
                feeds[name] = array
        if self._ortvalues and any(not isinstance(v, self._ort.OrtValue) for v in feeds.values()):
            feeds = {
                n: v
                if isinstance(v, self._ort.OrtValue)
                else self._ort.OrtValue.ortvalue_from_numpy(v)
                for n, v in feeds.items()
            }
        return feeds

    def _infer(
        self, feeds: dict[str, Any], wanted: Sequence[tuple[str, DataType, tuple[int, ...]]]
    ) -> list[Any]:
        """``session.run`` (with OrtValues when an output is BF16)."""
        names = [n for n, _, _ in wanted]
        if self._ortvalues:
            return list(self._session.run_with_ort_values(names, feeds, self._run_options))
        return list(self._session.run(names, feeds, self._run_options))

    def _convert(
        self,
        inputs: Mapping[str, np.ndarray],
        wanted: Sequence[tuple[str, DataType, tuple[int, ...]]],
        results: list[Any],
        total: int | None = None,
        as_is: frozenset[str] = frozenset(),
    ) -> dict[str, np.ndarray]:
        """The run's results as numpy arrays of the configured shapes (``total``: the batch
        size when inputs do not tell it; outputs in ``as_is`` keep the model's shape)."""
        if self._ortvalues:
            results = [ortvalue_to_numpy(v) for v in results]
        batch = next(iter(inputs.values())).shape[0] if self._batching and inputs else None
        if total is not None and self._batching:
            batch = total
        outputs: dict[str, np.ndarray] = {}
        for (name, dt, dims), array in zip(wanted, results, strict=True):
            array = np.asarray(array)
            if dt is DataType.BYTES:
                array = ort_to_bytes(array)
            if name in as_is:
                outputs[name] = array
                continue
            target = (batch, *dims) if batch is not None else dims
            outputs[name] = fit_shape(array, tuple(target))
        return outputs


def _as_error(exc: BaseException) -> TritonXError:
    """An ONNX Runtime exception as a TritonXError (its InvalidArgument → INVALID_ARG)."""
    if isinstance(exc, TritonXError):
        return exc
    code = (
        Code.INVALID_ARG
        if type(exc).__name__ in ("InvalidArgument", "InvalidGraph")
        else Code.INTERNAL
    )
    return TritonXError(f"onnx runtime error: {exc}", code)
