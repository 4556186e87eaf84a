"""The ``dali`` backend: one DALI pipeline per model instance; a server batch is one iteration.

DALI is imported inside :meth:`DaliBackend.load` (and when a ``dali.py`` definition must be
autoserialized), never at import time. Auto-complete reads the serialized pipeline's protobuf
(:mod:`tritonx_backend_dali.pipeline_info`) and follows Triton's DALI backend
(``src/config_tools/config_tools.cc``): inputs from the pipeline's ``fn.external_source``
operators, outputs in the pipeline's order, ``max_batch_size`` from the pipeline,
``dynamic_batching`` and ``allow_ragged_batch`` added for batching models.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tritonx import (
    AutoCompleteContext,
    Backend,
    InferenceRequest,
    InferenceResponse,
    LoadContext,
    ModelConfig,
    ModelInstance,
    compute_timer,
)
from tritonx.datatypes import DataType
from tritonx.errors import Code, TritonXError, invalid_arg, unavailable
from tritonx_backend_dali.pipeline_info import NotAPipeline, PipelineInfo, parse_pipeline

log = logging.getLogger("tritonx.backend.dali")

#: The file inside a version folder when the config names none (Triton's rule).
MODEL_FILE = "model.dali"
#: The Python pipeline definition looked for when the model file is missing (autoserialized).
FALLBACK_FILE = "dali.py"
#: Model ``parameters`` Triton's DALI backend reads.
PARAM_NUM_THREADS = "num_threads"
PARAM_SPLIT = "split_along_outer_axis"

_autoserialize_lock = threading.Lock()


def _import_dali() -> Any:
    try:
        dali = importlib.import_module("nvidia.dali")
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise unavailable(
            "the dali backend needs NVIDIA DALI (pip install nvidia-dali-cuda130): " + str(exc)
        ) from exc
    return dali


def cuda_device_count() -> int:
    """GPUs DALI can use (0 without a GPU or CUDA driver)."""
    dali = _import_dali()
    try:
        return int(dali.backend.GetCUDADeviceCount())
    except Exception:  # pragma: no cover - driver-dependent
        return 0


def _autoserialize(path: Path) -> bytes:
    """Serialize the ``@autoserialize`` pipeline defined in the Python file ``path``."""
    _import_dali()
    invoke_autoserialize = importlib.import_module(
        "nvidia.dali._utils.autoserialize"
    ).invoke_autoserialize

    name = f"_tritonx_dali_autoserialize_{abs(hash(str(path)))}"
    with _autoserialize_lock, tempfile.TemporaryDirectory() as tmp:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise RuntimeError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
            target = Path(tmp) / "model.dali"
            invoke_autoserialize(module, str(target))
            return target.read_bytes()
        finally:
            sys.modules.pop(name, None)


def read_pipeline(version_path: Path, model_path: Path | None) -> tuple[bytes, PipelineInfo]:
    """The serialized pipeline of a version and what it declares, found as Triton's DALI
    backend looks for it: the model file (serialized, or a ``*.py`` definition to
    autoserialize), then ``dali.py`` (autoserialized)."""
    default = model_path if model_path is not None else version_path / MODEL_FILE
    fallback = version_path / FALLBACK_FILE
    problems: list[str] = []
    if default.is_file():
        data = default.read_bytes()
        try:
            return data, parse_pipeline(data)
        except NotAPipeline as exc:
            problems.append(f"{default} is not a serialized DALI pipeline ({exc})")
        if default.suffix == ".py":
            try:
                data = _autoserialize(default)
                return data, parse_pipeline(data)
            except Exception as exc:
                problems.append(f"autoserializing {default} failed: {exc}")
    else:
        problems.append(f"{default} does not exist")
    if fallback.is_file():
        try:
            data = _autoserialize(fallback)
            return data, parse_pipeline(data)
        except Exception as exc:
            problems.append(f"autoserializing {fallback} failed: {exc}")
    raise invalid_arg(
        "Failed to load model file. The program looked in the following locations: "
        f"{default}, {fallback}. Please make sure that the model exists in any of the "
        "locations and is properly serialized or can be properly serialized. ("
        + "; ".join(problems)
        + ")"
    )


def _config_mbs(model_dir: Path) -> int | None:
    """``max_batch_size`` as written in config.pbtxt, None when absent (Triton's
    ``ReadMBSFromPBtxt``: the DALI backend tells "0" from "not given")."""
    path = model_dir / "config.pbtxt"
    if not path.is_file():
        return None
    text = re.sub(r"#[^\n]*", "", path.read_text(errors="replace"))
    depth = 0
    for match in re.finditer(r"[{}\[\]]|\bmax_batch_size\s*:\s*(-?\w+)", text):
        token = match.group(0)
        if token in "{[":
            depth += 1
        elif token in "}]":
            depth -= 1
        elif depth == 0:
            try:
                return int(match.group(1), 0)
            except ValueError:
                return None
    return None


def _split_outputs(parameters: Mapping[str, str]) -> tuple[str, ...]:
    value = parameters.get(PARAM_SPLIT, "")
    return tuple(name for name in value.split(":") if name)


def _match_dims(name: str, config: Sequence[int], pipeline: Sequence[int]) -> list[int]:
    """Triton's ``MatchShapes``: equal lengths; each dim equal or -1 on one side."""
    if len(config) != len(pipeline):
        raise invalid_arg(
            f'Mismatch in number of dimensions for "{name}"\n'
            f"Number of dimensions defined in config: {len(config)}\n"
            f"Number of dimensions defined in pipeline: {len(pipeline)}"
        )
    out = []
    for c, p in zip(config, pipeline, strict=True):
        if c != p and c != -1 and p != -1:
            raise invalid_arg(
                f"Mismatch in dims for {name}\nDims defined in config: {list(config)}\n"
                f"Dims defined in pipeline: {list(pipeline)}"
            )
        out.append(max(c, p))
    return out


def _match_dtype(
    name: str, config_type: str, pipeline_type: str | None, is_input: bool = False
) -> str:
    """The datatype of a tensor: the config's, checked against the pipeline's declared one.

    A ``TYPE_STRING`` (BYTES) input is tritonx's way to send encoded data (one element per
    sample): it feeds the pipeline UINT8 bytes, so it matches a UINT8 (or undeclared) input;
    an output's type is the pipeline's (numbers: never ``TYPE_STRING``)."""
    if not is_input and config_type == "TYPE_STRING":
        raise invalid_arg(
            f"output '{name}': a DALI pipeline produces numeric tensors, not TYPE_STRING"
        )
    if config_type not in ("", "TYPE_INVALID"):
        if pipeline_type is not None and config_type != pipeline_type:
            if not (is_input and config_type == "TYPE_STRING" and pipeline_type == "TYPE_UINT8"):
                raise invalid_arg(
                    f'Mismatch of data_type config for "{name}".\n'
                    f"Data type defined in config: {config_type}\n"
                    f"Data type defined in pipeline: {pipeline_type}"
                )
        return config_type
    if pipeline_type is None or pipeline_type == "TYPE_INVALID":
        raise invalid_arg(
            f'Missing data_type config for "{name}": the pipeline does not declare it '
            "(give fn.external_source a dtype, the pipeline output_dtype, or set it in "
            "config.pbtxt)"
        )
    return pipeline_type


def _pipeline_dims(ndim: int | None, batched: bool) -> list[int] | None:
    if ndim is None:
        return None
    return [-1] * (ndim if batched else ndim + 1)


def _output_ndims(
    info: PipelineInfo, split: Sequence[str], names: Sequence[str]
) -> list[int | None]:
    out: list[int | None] = []
    for i, io in enumerate(info.outputs):
        ndim = io.ndim
        name = names[i] if i < len(names) else io.name
        if ndim is not None and name in split:
            ndim -= 1
        out.append(ndim)
    return out


def autofill(
    config: dict[str, Any], info: PipelineInfo, batched: bool, config_mbs: int | None
) -> None:
    """Triton's DALI ``AutofillConfig`` on a config in Triton's JSON form (in place)."""
    pipe_inputs = {io.name: io for io in info.inputs}
    inputs: list[dict[str, Any]] = config.setdefault("input", [])
    for index, given_input in enumerate(inputs):
        if not given_input.get("name"):
            raise invalid_arg(
                f"The input at index {index} in the model configuration does not contain a "
                "`name` field."
            )
        if given_input["name"] not in pipe_inputs:
            raise invalid_arg(
                f"Configuration file contains config for {given_input['name']} but such input is not "
                "present in the pipeline."
            )
    for io in info.inputs:
        found = [i for i in inputs if i.get("name") == io.name]
        item: dict[str, Any] = found[0] if found else {"name": io.name}
        if not found:
            inputs.append(item)
        item["data_type"] = _match_dtype(
            io.name, item.get("data_type", ""), io.triton_type, is_input=True
        )
        dims = _pipeline_dims(io.ndim, batched)
        if dims is not None:
            given = [int(d) for d in item.get("dims", [])]
            item["dims"] = _match_dims(io.name, given, dims) if given else dims
        if batched:
            item["allow_ragged_batch"] = True
    outputs: list[dict[str, Any]] = config.setdefault("output", [])
    if len(outputs) > len(info.outputs):
        raise invalid_arg(
            "The number of outputs specified in the DALI pipeline and the configuration file "
            f"do not match.\nModel config outputs: {len(outputs)}\n"
            f"Pipeline outputs: {len(info.outputs)}"
        )
    split = _split_outputs(
        {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
    )
    for i, io in enumerate(info.outputs):
        if i == len(outputs):
            outputs.append({})
        item = outputs[i]
        if not item.get("name"):
            item["name"] = io.name
        item["data_type"] = _match_dtype(item["name"], item.get("data_type", ""), io.triton_type)
        ndim = io.ndim
        if ndim is not None and item["name"] in split:
            ndim -= 1
        dims = _pipeline_dims(ndim, batched)
        if dims is not None:
            given = [int(d) for d in item.get("dims", [])]
            item["dims"] = _match_dims(item["name"], given, dims) if given else dims
    if config_mbs is None:
        config["max_batch_size"] = info.max_batch_size if batched else 0
    elif config_mbs < 0 or (batched and config_mbs == 0):
        config["max_batch_size"] = info.max_batch_size
    scheduling = ("dynamic_batching", "sequence_batching", "ensemble_scheduling")
    if batched and not any(config.get(key) for key in scheduling):
        config["dynamic_batching"] = {}


def validate(config: ModelConfig, info: PipelineInfo) -> None:
    """Triton's DALI ``ValidateConfig``: the config's inputs and outputs match the pipeline."""
    batched = config.max_batch_size > 0
    pipe_inputs = {io.name: io for io in info.inputs}
    for io in config.inputs:
        if io.name not in pipe_inputs:
            raise invalid_arg(
                f"Configuration file contains config for {io.name} but such input is not "
                "present in the pipeline."
            )
    names = {io.name: io for io in config.inputs}
    for pio in info.inputs:
        cio = names.get(pio.name)
        if cio is None:
            raise invalid_arg(f'Missing config for "{pio.name}" input.')
        _match_dtype(pio.name, f"TYPE_{_config_type(cio.datatype)}", pio.triton_type, is_input=True)
        dims = _pipeline_dims(pio.ndim, batched)
        if dims is not None:
            _match_dims(pio.name, cio.dims, dims)
    if len(config.outputs) != len(info.outputs):
        raise invalid_arg(
            "The number of outputs specified in the DALI pipeline and the configuration file "
            f"do not match.\nModel config outputs: {len(config.outputs)}\n"
            f"Pipeline outputs: {len(info.outputs)}"
        )
    split = _split_outputs(config.parameters)
    ndims = _output_ndims(info, split, [o.name for o in config.outputs])
    for cio, pio, ndim in zip(config.outputs, info.outputs, ndims, strict=True):
        _match_dtype(cio.name, f"TYPE_{_config_type(cio.datatype)}", pio.triton_type)
        dims = _pipeline_dims(ndim, batched)
        if dims is not None:
            _match_dims(cio.name, cio.dims, dims)


def _config_type(datatype: DataType) -> str:
    return "STRING" if datatype is DataType.BYTES else datatype.value


class DaliBackend(Backend):
    """Triton's ``dali`` backend (default file ``model.dali``; ``dali.py`` autoserialized).

    ``--backend-config=dali,release_after_unload=true`` releases DALI's unused memory pools
    when the last DALI model unloads; ``plugin_libs=<a.so>:<b.so>`` loads DALI operator
    plugins before the first pipeline is built (both as in Triton).
    """

    name: ClassVar[str] = "dali"
    default_model_filename: ClassVar[str | None] = MODEL_FILE
    #: the model file may be missing when ``dali.py`` defines the pipeline
    reports_missing_model_file: ClassVar[bool] = True
    config_keys: ClassVar[frozenset[str] | None] = frozenset(
        {"release_after_unload", "plugin_libs"}
    )

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        value = self.config.get("release_after_unload", "false").strip().lower()
        if value not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            raise invalid_arg(f"failed to convert 'release_after_unload' value '{value}'")
        self.release_after_unload = value in ("true", "1", "yes", "on")
        self.plugin_libs = tuple(p for p in self.config.get("plugin_libs", "").split(":") if p)
        self._plugins_loaded = False
        self._loaded = 0
        self._lock = threading.Lock()

    # --------------------------------------------------------------------- auto-complete
    def auto_complete_config(self, ctx: AutoCompleteContext) -> None:
        """Fill inputs, outputs, ``max_batch_size`` and ``dynamic_batching`` from the pipeline."""
        _, info = read_pipeline(ctx.version_path, ctx.model_path)
        config_mbs = _config_mbs(ctx.model_dir)
        batched = config_mbs != 0
        data = ctx.config.to_dict()
        autofill(data, info, batched, config_mbs)
        ctx.config.update_from_dict(data)

    def check_notes(self, ctx: AutoCompleteContext) -> dict[str, str]:
        """The pipeline's batch size and whether it needs a GPU (``tritonx check``)."""
        _, info = read_pipeline(ctx.version_path, ctx.model_path)
        validate(ctx.config.view(), info)
        notes = {"pipeline batch size": str(info.max_batch_size)}
        notes["device"] = "gpu: " + ", ".join(info.gpu_operators) if info.gpu_operators else "cpu"
        return notes

    # --------------------------------------------------------------------- load
    def load(self, ctx: LoadContext) -> ModelInstance:
        config = ctx.config
        if config.decoupled:
            raise invalid_arg(
                f"model '{ctx.model_name}': decoupled DALI models (model_transaction_policy "
                "{ decoupled: true }, Triton's multi-iteration inputs) are not supported by "
                "tritonx's dali backend"
            )
        serialized, info = read_pipeline(ctx.version_path, ctx.model_path)
        validate(config, info)
        dali = _import_dali()
        self._load_plugins(dali)
        kind = ctx.instance.kind
        device_id: int | None
        if kind == "KIND_GPU" or (kind == "KIND_MODEL" and info.gpu_operators):
            count = cuda_device_count()
            if count == 0:
                raise unavailable(
                    f"model '{ctx.model_name}': instance '{ctx.instance.name}' is {kind} but "
                    "DALI finds no CUDA GPU on this machine (no GPU or no CUDA driver); "
                    "use instance_group [ { kind: KIND_CPU } ] with a pipeline of CPU "
                    "operators"
                )
            device_id = ctx.instance.device_id if kind == "KIND_GPU" else 0
        else:
            if info.gpu_operators:
                raise invalid_arg(
                    f"model '{ctx.model_name}': the DALI pipeline uses GPU operators ("
                    + ", ".join(info.gpu_operators)
                    + f") but instance '{ctx.instance.name}' is {kind}: GPU operators need a "
                    "KIND_GPU instance"
                    + ("" if cuda_device_count() else " and a CUDA GPU, which this machine lacks")
                )
            device_id = None
        num_threads = info.num_threads if info.num_threads > 0 else 1
        if PARAM_NUM_THREADS in ctx.parameters:
            value = ctx.parameters[PARAM_NUM_THREADS].strip()
            if not value.lstrip("-").isdigit():
                raise invalid_arg(f"failed to convert '{PARAM_NUM_THREADS}' value '{value}'")
            if int(value) > 0:
                num_threads = int(value)
        batch = config.max_batch_size if config.max_batch_size > 0 else info.max_batch_size
        instance = DaliModelInstance(
            dali,
            serialized,
            config,
            max_batch_size=batch,
            num_threads=num_threads,
            device_id=device_id,
            split=_split_outputs(ctx.parameters),
            on_unload=self._unloaded,
        )
        with self._lock:
            self._loaded += 1
        ctx.logger.info(
            "DALI pipeline of model '%s' loaded (batch %d, %d threads, %s)",
            ctx.model_name,
            batch,
            num_threads,
            "CPU" if device_id is None else f"GPU {device_id}",
        )
        return instance

    def _load_plugins(self, dali: Any) -> None:
        with self._lock:
            if self._plugins_loaded:
                return
            for lib in self.plugin_libs:
                try:
                    importlib.import_module("nvidia.dali.plugin_manager").load_library(lib)
                except Exception as exc:
                    raise invalid_arg(f"failed to load DALI plugin library '{lib}': {exc}") from exc
            self._plugins_loaded = True

    def _unloaded(self) -> None:
        with self._lock:
            self._loaded -= 1
            last = self._loaded == 0
        if last and self.release_after_unload:
            _import_dali().backend.ReleaseUnusedMemory()


class DaliModelInstance(ModelInstance):
    """One DALI pipeline: each ``execute`` feeds every sample of every request to the
    pipeline's external sources and runs one iteration."""

    def __init__(
        self,
        dali: Any,
        serialized: bytes,
        config: ModelConfig,
        *,
        max_batch_size: int,
        num_threads: int,
        device_id: int | None,
        split: Sequence[str] = (),
        on_unload: Any = None,
    ) -> None:
        self._dali = dali
        self._serialized = serialized
        self.batched = config.max_batch_size > 0
        self.max_batch_size = max_batch_size
        self.num_threads = num_threads
        self.device_id = device_id
        self.inputs = {io.name: io.datatype for io in config.inputs}
        self.outputs = [(io.name, io.datatype) for io in config.outputs]
        self.split = frozenset(split)
        self._on_unload = on_unload
        self._pipe: Any = self._build()

    def _build(self) -> Any:
        try:
            pipe = self._dali.Pipeline.deserialize(
                serialized_pipeline=self._serialized,
                batch_size=self.max_batch_size,
                num_threads=self.num_threads,
                device_id=self.device_id,
                prefetch_queue_depth=1,
            )
            pipe.build()
        except Exception as exc:
            raise TritonXError(f"DALI Backend error: {exc}", Code.INVALID_ARG) from exc
        return pipe

    # --------------------------------------------------------------------- execute
    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        try:
            return self._run(requests)
        except _DaliRunError as exc:
            if len(requests) == 1:
                return [InferenceResponse.failed(exc.error)]
        # one request of the batch broke the iteration: run them one by one, so that only
        # the bad ones fail
        responses = []
        for request in requests:
            try:
                responses.extend(self._run([request]))
            except _DaliRunError as exc:
                responses.append(InferenceResponse.failed(exc.error))
        return responses

    def _samples(self, request: InferenceRequest) -> tuple[int, dict[str, list[np.ndarray]]]:
        feeds: dict[str, list[np.ndarray]] = {}
        count = -1
        for name, datatype in self.inputs.items():
            array = np.asarray(request.inputs[name])
            if array.ndim == 0:
                raise invalid_arg(f"input '{name}': a DALI input needs a sample dimension")
            n = array.shape[0]
            if count not in (-1, n):
                raise invalid_arg("Each input in a request must have the same batch size.")
            count = n
            if datatype is DataType.BYTES:
                rows = array.reshape(n, -1)
                if rows.shape[1] != 1:
                    raise invalid_arg(
                        f"input '{name}': a BYTES input to a DALI pipeline carries one element "
                        f"per sample (the encoded data); got {rows.shape[1]} per sample"
                    )
                feeds[name] = [np.frombuffer(bytes(v), dtype=np.uint8) for v in rows[:, 0].tolist()]
            else:
                feeds[name] = [np.ascontiguousarray(array[i]) for i in range(n)]
        if count == 0:
            raise invalid_arg("a request to a DALI pipeline needs at least one sample")
        return max(count, 0), feeds

    def _run(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        try:
            return self._iteration(requests)
        except TritonXError as exc:
            raise _DaliRunError(exc) from exc

    def _iteration(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        timer = compute_timer()
        counts: list[int] = []
        feeds: dict[str, list[np.ndarray]] = {name: [] for name in self.inputs}
        for request in requests:
            count, samples = self._samples(request)
            counts.append(count)
            for name, items in samples.items():
                feeds[name].extend(items)
        total = sum(counts)
        if total > self.max_batch_size:
            raise invalid_arg(
                f"{total} samples exceed the DALI pipeline's batch size {self.max_batch_size}"
            )
        if total == 0:
            raise invalid_arg("a DALI pipeline needs at least one sample")
        timer.input_done()
        try:
            for name, items in feeds.items():
                self._pipe.feed_input(name, items)
            outputs = self._pipe.run()
        except Exception as exc:
            # a failed iteration leaves DALI's pipeline unusable: build it again
            self._pipe = self._build()
            raise _DaliRunError(TritonXError(f"DALI error: {exc}", Code.UNKNOWN)) from exc
        timer.output_started()
        results: list[dict[str, np.ndarray]] = [{} for _ in requests]
        for index, (name, datatype) in enumerate(self.outputs):
            tensor_list = outputs[index]
            if self.device_id is not None and hasattr(tensor_list, "as_cpu"):
                tensor_list = tensor_list.as_cpu()
            produced = [np.array(tensor_list[i]) for i in range(len(tensor_list))]
            if produced:  # (an output is never BYTES: DALI produces numbers)
                got = DataType.from_numpy(produced[0].dtype)
                if got is not datatype:
                    raise TritonXError(
                        f"DALI pipeline output '{name}' is {got.value} but the model config "
                        f"declares {datatype.value}",
                        Code.INTERNAL,
                    )
            start = 0
            for r, count in enumerate(counts):
                part = produced[start : start + count]
                start += count
                results[r][name] = self._join(name, part)
        return [InferenceResponse(outputs=out) for out in results]

    def _join(self, name: str, samples: list[np.ndarray]) -> np.ndarray:
        if name in self.split:
            if any(s.ndim == 0 for s in samples):
                raise TritonXError(
                    f"output '{name}' in {PARAM_SPLIT} has scalar samples", Code.INVALID_ARG
                )
            try:
                return np.concatenate(samples, axis=0)
            except ValueError as exc:
                raise TritonXError(
                    f"output '{name}': samples do not share their inner shape ({exc})",
                    Code.INVALID_ARG,
                ) from exc
        shapes = {s.shape for s in samples}
        if len(shapes) > 1:
            raise TritonXError(
                f"DALI pipeline output '{name}' has samples of different shapes in one request "
                f"({sorted(shapes)}): a response tensor needs one shape, so resize or pad in "
                "the pipeline",
                Code.INVALID_ARG,
            )
        return np.stack(samples)

    def unload(self) -> None:
        self._pipe = None
        if self._on_unload is not None:
            self._on_unload()


class _DaliRunError(Exception):
    def __init__(self, error: TritonXError) -> None:
        super().__init__(error.message)
        self.error = error
