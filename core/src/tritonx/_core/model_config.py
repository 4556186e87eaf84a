"""Model configuration: reading config.pbtxt, version folders and policies, Triton's core
auto-complete, normalization, validation, and the JSON form the ``/config`` endpoint returns.

Rules follow Triton core's ``model_config_utils.cc`` (``AutoCompleteBackendFields``,
``NormalizeModelConfig``, ``NormalizeInstanceGroup``, ``ValidateModelConfig``); the JSON form
(``ModelConfigToJson``) is :func:`tritonx.config.config_to_json_dict`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from google.protobuf import json_format

from tritonx._core.devices import gpu_count
from tritonx._core.ensemble_config import ENSEMBLE, validate_scheduling
from tritonx._core.sequence import validate_sequence_batching
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.proto import model_config_pb2

if TYPE_CHECKING:
    from tritonx.registry import BackendRegistry


CONFIG_FILENAME = "config.pbtxt"
#: ``--model-config-name=<n>`` picks ``<model>/configs/<n>.pbtxt`` (Triton's ``kModelConfigFolder``)
CONFIG_FOLDER = "configs"


def check_config_name(name: str) -> None:
    """Refuse a ``--model-config-name`` that is not a plain file name.

    :raises TritonXError: INVALID_ARG.
    """
    if name and (name in (".", "..") or "/" in name or "\\" in name or "\0" in name):
        raise invalid_arg(
            f"--model-config-name: '{name}' must be a file name (without '.pbtxt'), "
            f"read from each model's '{CONFIG_FOLDER}' folder"
        )


def config_path(folder: Path, config_name: str) -> Path:
    """The model's config file, as Triton picks it: ``<folder>/configs/<config_name>.pbtxt``
    when ``--model-config-name`` names one that exists, else ``<folder>/config.pbtxt``."""
    if config_name:
        custom = folder / CONFIG_FOLDER / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    return folder / CONFIG_FILENAME


#: ``inference.ModelConfig`` (generated without type stubs, so typed as Any).
ModelConfigPb: TypeAlias = Any

#: Triton's legacy ``platform:`` strings and the backend that serves each.
PLATFORM_BACKENDS: dict[str, str] = {
    "tensorrt_plan": "tensorrt",
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "libtorch": "pytorch",
    "torch_aoti": "pytorch",
    "tensorflow_savedmodel": "tensorflow",
    "tensorflow_graphdef": "tensorflow",
}


def parse_config_json(text: str | bytes) -> ModelConfigPb:
    """Parse a JSON config override (the ``config`` load parameter)."""
    config = model_config_pb2.ModelConfig()
    try:
        json_format.Parse(text, config)
    except (json_format.ParseError, ValueError) as exc:
        raise invalid_arg(f"Invalid config override: {exc}") from exc
    return config


def auto_complete_backend_fields(
    config: ModelConfigPb,
    model_name: str,
    version_dir: Path | None,
    backends: BackendRegistry | None = None,
) -> None:
    """Triton's ``AutoCompleteBackendFields``: fill ``name``, ``backend``, ``platform`` and
    ``default_model_filename`` from the config and the files of a version folder.

    :param version_dir: the version folder to look into (None when the model has none).
    :param backends: the installed backends. After Triton's own rules, a ``platform:`` one of
        them declares selects it, and so does its default model filename in the version
        folder (before Triton's last rule, the ``model.<backend>`` name suffix).
    """
    if not config.name:
        config.name = model_name
    if config.platform == ENSEMBLE:
        return
    # Each rule either completes the config and answers True, or leaves it untouched.
    folder = _VersionFolder(version_dir)
    for rule in _RULES:
        if rule(config, folder):
            return
    if backends is not None and _installed_backend(config, folder, backends):
        return
    if not config.backend and not config.platform and not config.default_model_filename:
        if "." not in model_name:
            raise invalid_arg(
                f"Invalid model name: Could not determine backend for model '{model_name}' "
                "with no backend in model configuration. Expected model name of the form "
                "'model.<backend_name>'."
            )
        backend = model_name.split(".", 1)[1]
        config.backend = backend
        config.default_model_filename = f"model.{backend}"


class _VersionFolder:
    """The version folder auto-complete probes for model files (None: the model has none)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def has(self, name: str, kind: str = "any") -> bool:
        """Whether ``name`` exists in it (``kind``: ``file``, ``dir`` or ``any``)."""
        if self.path is None:
            return False
        path = self.path / name
        return (
            path.is_file() if kind == "file" else path.is_dir() if kind == "dir" else path.exists()
        )


def _untyped(config: ModelConfigPb) -> bool:
    """Neither a platform nor a model filename: the folder's files decide."""
    return not config.platform and not config.default_model_filename


def _tensorflow(config: ModelConfigPb, folder: _VersionFolder) -> bool:
    filename, platform = config.default_model_filename, config.platform
    if not platform and config.backend in ("", "tensorflow"):
        if filename == "model.savedmodel" or (
            not filename and folder.has("model.savedmodel", "dir")
        ):
            platform = "tensorflow_savedmodel"
        elif filename == "model.graphdef" or (
            not filename and folder.has("model.graphdef", "file")
        ):
            platform = "tensorflow_graphdef"
    if platform not in ("tensorflow_savedmodel", "tensorflow_graphdef"):
        return False
    config.platform = platform
    config.backend = config.backend or "tensorflow"
    if not filename:
        config.default_model_filename = (
            "model.savedmodel" if platform == "tensorflow_savedmodel" else "model.graphdef"
        )
    return True


@dataclass(frozen=True)
class _FileRule:
    """A backend chosen by its ``platform:``, its model filename, or (config naming neither)
    that file in the version folder; completes the platform and model filename."""

    backend: str
    platform: str
    filename: str
    kind: str = "any"

    def __call__(self, config: ModelConfigPb, folder: _VersionFolder) -> bool:
        filename = config.default_model_filename
        if not config.backend and (
            (self.platform and config.platform == self.platform)
            or filename == self.filename
            or (_untyped(config) and folder.has(self.filename, self.kind))
        ):
            config.backend = self.backend
        if config.backend != self.backend:
            return False
        if self.platform:
            config.platform = config.platform or self.platform
        config.default_model_filename = filename or self.filename
        return True


def _pytorch(config: ModelConfigPb, folder: _VersionFolder) -> bool:
    """TorchScript (``model.pt``) and AOTInductor (``model.pt2``)."""
    filename, untyped = config.default_model_filename, _untyped(config)
    if not config.backend:
        if config.platform in ("pytorch_libtorch", "libtorch", "torch_aoti") or filename in (
            "model.pt",
            "model.pt2",
        ):
            config.backend = "pytorch"
        elif untyped and folder.has("model.pt", "file"):
            config.backend, config.platform = "pytorch", "pytorch_libtorch"
        elif untyped and folder.has("model.pt2", "file"):
            config.backend, config.platform = "pytorch", "torch_aoti"
    if config.backend != "pytorch":
        return False
    if not config.platform:
        config.platform = "torch_aoti" if filename == "model.pt2" else "pytorch_libtorch"
    if not config.default_model_filename:
        config.default_model_filename = (
            "model.pt2" if config.platform == "torch_aoti" else "model.pt"
        )
    return True


#: Triton's rules, in its order.
_RULES: tuple[Callable[[ModelConfigPb, _VersionFolder], bool], ...] = (
    _tensorflow,
    _FileRule("tensorrt", "tensorrt_plan", "model.plan", "file"),
    _FileRule("onnxruntime", "onnxruntime_onnx", "model.onnx"),
    _FileRule("openvino", "", "model.xml"),
    _pytorch,
    _FileRule("python", "", "model.py"),
)


def _installed_backend(
    config: ModelConfigPb, folder: _VersionFolder, backends: BackendRegistry
) -> bool:
    """Installed backends Triton does not know: the one declaring the config's platform,
    else the first whose default model filename is in the folder."""
    if not config.backend and config.platform:
        owner = backends.backend_for_platform(config.platform)
        if owner is not None:
            config.backend = owner
            return True
    if config.backend or not _untyped(config):
        return False
    for backend, cls in backends.items():
        if cls.default_model_filename and folder.has(cls.default_model_filename):
            config.backend = backend
            config.default_model_filename = cls.default_model_filename
            return True
    return False


def normalize(config: ModelConfigPb) -> None:
    """Fill in Triton's defaults (``NormalizeModelConfig``) so ``/config`` shows what is used."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if config.HasField("dynamic_batching"):
        db = config.dynamic_batching
        if config.max_batch_size > 0 and not db.preferred_batch_size:
            db.preferred_batch_size.append(config.max_batch_size)
    if config.HasField("sequence_batching"):
        sb = config.sequence_batching
        if sb.max_sequence_idle_microseconds == 0:
            sb.max_sequence_idle_microseconds = 1_000_000
        if (
            sb.HasField("oldest")
            and config.max_batch_size > 0
            and not sb.oldest.preferred_batch_size
        ):
            sb.oldest.preferred_batch_size.append(config.max_batch_size)
    if not config.HasField("ensemble_scheduling"):
        opt = config.optimization
        if not opt.HasField("input_pinned_memory"):
            opt.input_pinned_memory.enable = True
        if not opt.HasField("output_pinned_memory"):
            opt.output_pinned_memory.enable = True


def normalize_instance_groups(config: ModelConfigPb, default_cpu_count: int = 1) -> None:
    """``NormalizeInstanceGroup``: the default group (named after the model), group names
    ``<model>_<index>``, KIND_AUTO resolved (KIND_CPU without GPUs) and default counts.

    :param default_cpu_count: the count of KIND_CPU groups that give none (the backend's
        ``default_cpu_instance_count``: 2 for ONNX Runtime, as Triton).
    """
    if config.HasField("ensemble_scheduling"):
        return
    kinds = model_config_pb2.ModelInstanceGroup.Kind
    if not config.instance_group:
        config.instance_group.add().name = config.name
    gpus = gpu_count()
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == kinds.KIND_AUTO:
            usable = gpus > 0 and all(0 <= g < gpus for g in group.gpus)
            group.kind = kinds.KIND_GPU if usable else kinds.KIND_CPU
        if group.kind == kinds.KIND_GPU and not group.gpus:
            group.gpus.extend(range(gpus))
        if group.count < 1:
            group.count = max(1, default_cpu_count) if group.kind == kinds.KIND_CPU else 1


def validate_at_poll(config: ModelConfigPb, dir_name: str, *, strict: bool = False) -> None:
    """What Triton checks when it polls a model, before any backend is involved: normalize
    (``GetNormalizedModelConfig``), ``ValidateModelConfig``, with ``strict`` (auto-complete
    disabled) also ``ValidateModelIOConfig``, then the directory name. (The ``runtime``
    field, :func:`check_runtime`, Triton checks when it looks the backend up.)"""
    normalize(config)
    validate_model_config(config)
    if strict:
        validate_io(config)
    if config.name != dir_name:
        raise invalid_arg(
            f"unexpected directory name '{dir_name}' for model '{config.name}', "
            "directory name must equal model name"
        )


def validate(config: ModelConfigPb, dir_name: str) -> None:
    """Every check of a completed config: ``ValidateModelConfig``, the directory name,
    ``ValidateModelIOConfig`` and ``ValidateInstanceGroup`` (Triton's order and messages)."""
    validate_model_config(config)
    if config.name != dir_name:
        raise invalid_arg(
            f"unexpected directory name '{dir_name}' for model '{config.name}', "
            "directory name must equal model name"
        )
    check_runtime(config)
    validate_io(config)
    _validate_instance_groups(config)


def validate_model_config(config: ModelConfigPb) -> None:
    """Triton's ``ValidateModelConfig`` with its messages (IO and instance groups apart)."""
    name = config.name
    if not name:
        raise invalid_arg("model configuration must specify 'name'")
    if not config.backend and config.platform != ENSEMBLE:
        raise invalid_arg(f"unexpected platform type '{config.platform}' for {name}")
    if config.backend and config.platform == ENSEMBLE:
        raise invalid_arg(
            f"Ensemble model '{name}' must have platform type '{config.platform}' and empty "
            "backend type"
        )
    implied = PLATFORM_BACKENDS.get(config.platform, "")
    if config.backend in _TYPED_BACKENDS and implied != config.backend:
        raise invalid_arg(
            f"unexpected 'platform' and 'backend' pair, got:{config.platform}, {config.backend}"
        )
    if config.max_batch_size < 0:
        raise invalid_arg(f"'max_batch_size' must be non-negative value for {name}")
    if not config.HasField("version_policy"):
        raise invalid_arg(f"must specify 'version policy' for {name}")
    if config.HasField("dynamic_batching"):
        _validate_dynamic_batching(config)
    if config.HasField("sequence_batching"):
        validate_sequence_batching(config)
    if config.HasField("ensemble_scheduling"):
        validate_scheduling(config)
    elif config.platform == ENSEMBLE:
        raise invalid_arg(
            f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble"
        )
    if config.model_transaction_policy.decoupled and config.response_cache.enable:
        raise invalid_arg(
            f"Response Cache does not currently support model {name} with 'decoupled' "
            "transaction policy. Please disable the response cache."
        )


def validate_io(config: ModelConfigPb) -> None:
    """Triton's ``ValidateModelIOConfig``: every input and output, then ``batch_input`` /
    ``batch_output``; messages end with " for <model>" (the batch inputs and outputs
    themselves: :class:`tritonx.batching.BatchIO`)."""
    name = config.name
    platform = config.platform
    for t in config.input:
        _validate_io_shape(config, "input", t)
        if t.format in (_FORMAT_NHWC, _FORMAT_NCHW) and len(t.dims) != 3:
            raise invalid_arg(f"model input NHWC/NCHW require 3 dims for {name}")
        _validate_trt_only_io(t, platform, "input", name)
    for t in config.output:
        _validate_io_shape(config, "output", t)
        _validate_trt_only_io(t, platform, "output", name)
    _validate_batch_io(config)


_FORMAT_NHWC = model_config_pb2.ModelInput.Format.FORMAT_NHWC
_FORMAT_NCHW = model_config_pb2.ModelInput.Format.FORMAT_NCHW


def _validate_trt_only_io(t: Any, platform: str, what: str, name: str) -> None:
    if platform != "tensorrt_plan" and t.is_shape_tensor:
        raise invalid_arg(f"shape tensors are only supported for TensorRT platform for {name}")
    if t.is_non_linear_format_io:
        if platform != "tensorrt_plan":
            raise invalid_arg(
                f"Non-linear IO format is only supported for the TensorRT platform for {name}"
            )
        if len(t.dims) != 3:
            raise invalid_arg(f"Non-linear IO format {what} requires 3 dims for {name}")


def _validate_batch_io(config: ModelConfigPb) -> None:
    """Triton's ``ValidateBatchIO`` (messages get " for <model>" as in ``ValidateModelIOConfig``)."""
    suffix = f" for {config.name}"
    inputs = {t.name for t in config.input}
    outputs = {t.name for t in config.output}
    bi_kinds = model_config_pb2.BatchInput.Kind
    fp32, int32 = model_config_pb2.DataType.TYPE_FP32, model_config_pb2.DataType.TYPE_INT32
    for bi in config.batch_input:
        kind = bi_kinds.Name(bi.kind)
        if len(bi.source_input) != 1:
            raise invalid_arg(
                f"batch input kind '{kind}' expects 1 source input, got "
                f"{len(bi.source_input)}{suffix}"
            )
        if bi.data_type not in (int32, fp32):
            raise invalid_arg(f"batch input data type must be TYPE_INT32 or TYPE_FP32{suffix}")
        for source in bi.source_input:
            if source not in inputs:
                raise invalid_arg(f"unknown source input name '{source}'{suffix}")
    bo_kinds = model_config_pb2.BatchOutput.Kind
    for bo in config.batch_output:
        if len(bo.source_input) != 1:
            raise invalid_arg(
                f"batch output kind '{bo_kinds.Name(bo.kind)}' expects 1 source input, got "
                f"{len(bo.source_input)}{suffix}"
            )
        for source in bo.source_input:
            if source not in inputs:
                raise invalid_arg(f"unknown source input name '{source}'{suffix}")
        seen: set[str] = set()
        for target in bo.target_name:
            if target not in outputs:
                raise invalid_arg(f"unknown target output name '{target}'{suffix}")
            if target in seen:
                raise invalid_arg(
                    f"target output name '{target}' can only be specified once{suffix}"
                )
            seen.add(target)


#: ``runtime`` of Triton's Python-based backends (``<backends>/<name>/model.py``).
PYTHON_RUNTIME = "model.py"


def check_runtime(config: ModelConfigPb) -> None:
    """The ``runtime`` field: tritonx backends are plugins, so a model may only name its
    backend's own library (``libtriton_<backend>.so``) or, as for Triton's Python-based
    backends, ``model.py``: the plugin serves it either way. Anything else is refused with
    Triton's backend-library messages."""
    runtime = config.runtime
    if not runtime or config.platform == ENSEMBLE:
        return
    own = f"libtriton_{config.backend}.so"
    if runtime == own:
        return
    if runtime == PYTHON_RUNTIME:
        # a Python-based backend's model.py: a tritonx backend plugin is that implementation;
        # the python backend itself has none (Triton's message)
        if config.backend == "python":
            raise invalid_arg(
                f"unable to find Python backend based backend library '{runtime}' for model "
                f"'{config.name}': the python backend is not a Python-based backend"
            )
        return
    if "/" in runtime or "\\" in runtime or runtime in (".", ".."):
        raise invalid_arg(
            f"backend library name '{runtime}' escapes backend directory of backend "
            f"'{config.backend}', for model '{config.name}', check model config runtime field"
        )
    raise invalid_arg(
        f"unable to find backend library '{runtime}' for model '{config.name}': tritonx "
        f"backends are plugins and 'runtime' may only name backend '{config.backend}''s "
        f"own library '{own}' (or be left empty)"
    )


_TYPED_BACKENDS = ("tensorflow", "tensorrt", "onnxruntime")


def _validate_dynamic_batching(config: ModelConfigPb) -> None:
    name, db = config.name, config.dynamic_batching
    for size in db.preferred_batch_size:
        if size <= 0:
            raise invalid_arg(f"dynamic batching preferred size must be positive for {name}")
        if size > config.max_batch_size:
            raise invalid_arg(
                f"dynamic batching preferred size must be <= max batch size for {name}"
            )
    levels = db.priority_levels
    if levels != 0 and (db.default_priority_level == 0 or db.default_priority_level > levels):
        raise invalid_arg(f"default priority level must be in range [1, {levels}] for {name}")
    for level in db.priority_queue_policy:
        if level == 0 or level > levels:
            raise invalid_arg(
                f"priority queue policy must have priority level in range [1, {levels}] for {name}"
            )
    if db.preserve_ordering:
        if levels > 1:
            raise invalid_arg(
                "Only one priority level is allowed when 'preserve_ordering' is true for " + name
            )
        delay = model_config_pb2.ModelQueuePolicy.TimeoutAction.DELAY
        policies = [db.default_queue_policy, *db.priority_queue_policy.values()]
        if any(p.timeout_action == delay and p.default_timeout_microseconds for p in policies):
            raise invalid_arg(
                "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is "
                f"true for {name}"
            )


def _validate_io_shape(config: ModelConfigPb, what: str, t: Any) -> None:
    suffix = f" for {config.name}"
    if not t.name:
        raise invalid_arg(f"model {what} must specify 'name'{suffix}")
    p = f"model {what} '{t.name}' "
    if t.data_type == model_config_pb2.DataType.TYPE_INVALID:
        raise invalid_arg(f"{p}must specify 'data_type'{suffix}")
    if not t.dims:
        raise invalid_arg(f"{p}must specify 'dims'{suffix}")
    if t.HasField("reshape") and not t.reshape.shape and config.max_batch_size == 0:
        raise invalid_arg(
            f"{p}cannot have empty reshape for non-batching model as scalar tensors are not "
            f"supported{suffix}"
        )
    for d in t.dims:
        if d < 1 and d != -1:
            raise invalid_arg(
                f"{p}dimension must be integer >= 1, or -1 to indicate a variable-size "
                f"dimension{suffix}"
            )
    if t.HasField("reshape"):
        for d in t.reshape.shape:
            if d < 1 and d != -1:
                raise invalid_arg(
                    f"{p}reshape dimensions must be integer >= 1, or -1 to indicate a "
                    f"variable-size dimension{suffix}"
                )
        dims, shape = list(t.dims), list(t.reshape.shape)
        dims_size, reshape_size = _element_count(dims), _element_count(shape)
        # the same element count, or both variable-size; an empty reshape needs dims of 1
        if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
            raise invalid_arg(f"{p}has different size for dims and reshape{suffix}")
        if dims_size == -1:
            # compare the element counts of the runs between variable-size dimensions
            dims_runs, shape_runs = _runs(dims), _runs(shape)
            if len(dims_runs) != len(shape_runs):
                raise invalid_arg(
                    f"{p}has different number of variable-size dimensions for dims and "
                    f"reshape{suffix}"
                )
            if dims_runs != shape_runs:
                raise invalid_arg(f"{p}has different size for dims and reshape{suffix}")


def _element_count(dims: list[int]) -> int:
    """Triton's ``GetElementCount``: -1 when any dimension is variable, 0 for no dims."""
    if -1 in dims:
        return -1
    count = 0
    for index, d in enumerate(dims):
        count = d if index == 0 else count * d
    return count


def _runs(dims: list[int]) -> list[int]:
    """Element counts of the runs of fixed dimensions around each -1."""
    runs, current = [], 1
    for d in dims:
        if d == -1:
            runs.append(current)
            current = 1
        else:
            current *= d
    runs.append(current)
    return runs


def _validate_instance_groups(config: ModelConfigPb) -> None:
    if config.HasField("ensemble_scheduling"):
        return
    kinds = model_config_pb2.ModelInstanceGroup.Kind
    m = config.name
    if not config.instance_group:
        raise invalid_arg(f"must specify one or more 'instance group's for {m}")
    gpus = gpu_count()
    for group in config.instance_group:
        g = group.name
        if group.kind == kinds.KIND_MODEL:
            if group.gpus:
                raise invalid_arg(
                    f"instance group {g} of model {m} has kind KIND_MODEL but specifies one or "
                    "more GPUs"
                )
        elif group.kind == kinds.KIND_GPU:
            if not group.gpus:
                if gpus == 0:
                    raise invalid_arg(
                        f"instance group {g} of model {m} has kind KIND_GPU but no GPUs are "
                        "available"
                    )
                raise invalid_arg(
                    f"instance group {g} of model {m} has kind KIND_GPU but specifies no GPUs"
                )
            for gpu in group.gpus:
                if not 0 <= gpu < gpus:
                    raise invalid_arg(
                        f"instance group {g} of model {m} specifies invalid or unsupported gpu id "
                        f"{gpu}. GPUs with at least the minimum required CUDA compute "
                        "compatibility of 6.000000 are: " + ", ".join(str(i) for i in range(gpus))
                    )
        elif group.kind == kinds.KIND_CPU:
            if group.gpus:
                raise invalid_arg(
                    f"instance group {g} of model {m} has kind KIND_CPU but specifies one or "
                    "more GPUs"
                )
        else:
            raise TritonXError(
                f"instance group {g} of model {m} has unexpected kind KIND_AUTO", Code.INTERNAL
            )


def check_model_files(config: ModelConfigPb, model_dir: Path) -> None:
    """Refuse file names in the config that lead outside the model's folder:
    ``default_model_filename`` (inside a version folder) and outputs' ``label_filename``."""
    root = model_dir.resolve()
    named = [("default_model_filename", root / "1", config.default_model_filename)]
    named += [
        (f"label_filename of output '{o.name}'", root, o.label_filename) for o in config.output
    ]
    for what, base, filename in named:
        if not filename:
            continue
        target = (base / filename).resolve()
        if root not in target.parents:
            raise invalid_arg(
                f"{what} '{filename}' of model '{config.name}' must name a file inside the "
                "model directory"
            )


def version_folders(model_dir: Path) -> dict[int, Path]:
    """Numeric version folders; non-numeric names and numbers with leading zeros ("01") are
    ignored, as in Triton ("0" itself is version 0)."""
    versions: dict[int, Path] = {}
    try:
        entries = list(model_dir.iterdir())
    except OSError:
        return versions
    for entry in entries:
        name = entry.name
        if not name.isdigit() or (len(name) > 1 and name.startswith("0")) or not entry.is_dir():
            continue
        versions[int(name)] = entry
    return versions


def versions_to_load(
    config: ModelConfigPb, available: dict[int, Path]
) -> tuple[list[int], list[int]]:
    """(the versions to load, the ``specific`` ones whose folder is missing); Triton's
    error when the policy leaves nothing to load."""
    policy = config.version_policy
    selected = select_versions(policy, available)
    missing: list[int] = []
    if policy.WhichOneof("policy_choice") == "specific":
        missing = [v for v in policy.specific.versions if v not in available]
    if not selected and not missing:
        raise invalid_arg(
            "at least one version must be available under the version policy of model "
            f"'{config.name}'"
        )
    return selected, missing


def select_versions(policy: ModelConfigPb, available: Iterable[int]) -> list[int]:
    """The versions ``policy`` serves among ``available`` (Triton's latest / all / specific)."""
    versions = sorted(available)
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        return versions
    if kind == "specific":
        wanted = set(policy.specific.versions)
        return [v for v in versions if v in wanted]
    n = policy.latest.num_versions if kind == "latest" else 1
    return versions[-max(n, 1) :] if versions else []
