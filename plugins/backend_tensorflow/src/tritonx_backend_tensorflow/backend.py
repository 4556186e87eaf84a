"""The ``tensorflow`` backend: SavedModel (``model.savedmodel`` folder) and frozen GraphDef
(``model.graphdef`` file), each instance running a TensorFlow session as Triton's does.

tensorflow is imported inside :meth:`TensorFlowBackend.auto_complete_config` and
:meth:`TensorFlowBackend.load`, never at import time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
from tritonx.errors import Code, TritonXError, invalid_arg, unavailable
from tritonx_backend_tensorflow import signature
from tritonx_backend_tensorflow.settings import (
    BACKEND_KEYS,
    BackendSettings,
    ModelSettings,
    parse_backend_config,
    parse_model_settings,
)
from tritonx_backend_tensorflow.signature import TensorInfo

log = logging.getLogger("tritonx.backend.tensorflow")

SAVEDMODEL = "tensorflow_savedmodel"
GRAPHDEF = "tensorflow_graphdef"
#: The model file of each platform when the config names none (Triton's names).
DEFAULT_FILES = {SAVEDMODEL: "model.savedmodel", GRAPHDEF: "model.graphdef"}
#: Signatures that are never the serving one (Triton skips them when it picks one).
_NOT_SERVING = ("__saved_model_init_op", "__saved_model_train_op")


def _import_tf() -> Any:
    # TensorFlow's C++ INFO lines (oneDNN notices, session starts) are not server logs
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    try:
        import tensorflow as tf
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise TritonXError(
            f"the tensorflow backend needs the tensorflow-cpu (or tensorflow) package: {exc}",
            Code.UNAVAILABLE,
        ) from exc
    return tf


def tf_error(exc: BaseException) -> TritonXError:
    """A TensorFlow exception as a TritonXError (INTERNAL, TensorFlow's message)."""
    if isinstance(exc, TritonXError):
        return exc
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return TritonXError(message.strip(), Code.INTERNAL)


def platform_of(config: ModelConfig) -> str:
    """The config's TensorFlow platform; another value is Triton's INVALID_ARG."""
    platform = config.platform
    if platform not in DEFAULT_FILES:
        raise invalid_arg(f"platform {platform} not supported for TensorFlow model '{config.name}'")
    return platform


# --------------------------------------------------------------------------- reading models


def _dtype_name(tf: Any, dtype: Any) -> str:
    from tensorflow.core.framework import types_pb2

    enum = dtype if isinstance(dtype, int) else tf.dtypes.as_dtype(dtype).as_datatype_enum
    return str(types_pb2.DataType.Name(enum))


def _dims(shape: Any) -> tuple[int, ...]:
    """A ``TensorShapeProto`` as Triton reads it: an unknown rank is rank 0."""
    if shape.unknown_rank:
        return ()
    return tuple(int(d.size) for d in shape.dim)


def read_saved_model(path: Path) -> Any:
    """The ``SavedModel`` message of a SavedModel folder (``saved_model.pb`` or ``.pbtxt``)."""
    from google.protobuf import message, text_format
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    pb, pbtxt = path / "saved_model.pb", path / "saved_model.pbtxt"
    try:
        if pb.is_file():
            proto.ParseFromString(pb.read_bytes())
        elif pbtxt.is_file():
            text_format.Parse(pbtxt.read_text(), proto)
        else:
            raise TritonXError(
                f"SavedModel file does not exist at: {path}/{{saved_model.pbtxt|saved_model.pb}}",
                Code.INTERNAL,
            )
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as exc:
        raise TritonXError(
            f"Could not parse SavedModel at {path}: {exc or 'not a SavedModel protobuf'}",
            Code.INTERNAL,
        ) from exc
    return proto


def pick_meta_graph(proto: Any, tag: str, model: str) -> Any:
    """The meta graph whose tag set is exactly ``{tag}`` (``serve`` when empty), as
    TensorFlow's ``LoadSavedModel`` (which Triton calls) picks it, with its message."""
    tag = tag or "serve"
    for meta in proto.meta_graphs:
        if set(meta.meta_info_def.tags) == {tag}:
            return meta
    available = "; ".join(
        "{ " + ", ".join(sorted(m.meta_info_def.tags)) + " }" for m in proto.meta_graphs
    )
    raise TritonXError(
        f"Could not find meta graph def matching supplied tags: {{ {tag} }}. To inspect "
        "available tag-sets in the SavedModel, please use the SavedModel CLI: "
        f"`saved_model_cli` (this one has: {available or 'none'})",
        Code.INTERNAL,
    )


def pick_signature(meta: Any, name: str, model: str) -> tuple[str, Any]:
    """The signature ``name`` (``serving_default`` when empty, else the first other than the
    init and train ones, with a warning), as Triton picks it."""
    key = name or "serving_default"
    defs = meta.signature_def
    if key in defs:
        return key, defs[key]
    if not name:
        for other in sorted(defs):
            if other not in _NOT_SERVING:
                log.warning(
                    "unable to find serving signature '%s' in model '%s'; using signature '%s'",
                    key,
                    model,
                    other,
                )
                return other, defs[other]
    raise TritonXError(f"unable to load model '{model}', expected '{key}' signature", Code.INTERNAL)


def signature_io(tf: Any, sig: Any, model: str) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """A signature's inputs and outputs (sorted by name), unsupported datatypes refused."""
    inputs = [
        TensorInfo(k, v.name, _dtype_name(tf, v.dtype), _dims(v.tensor_shape))
        for k, v in sorted(sig.inputs.items())
    ]
    outputs = [
        TensorInfo(k, v.name, _dtype_name(tf, v.dtype), _dims(v.tensor_shape))
        for k, v in sorted(sig.outputs.items())
    ]
    for ios in (inputs, outputs):
        for io in ios:
            if not io.tensor:
                raise TritonXError(
                    f"unable to load model '{model}': signature tensor '{io.name}' is not a "
                    "dense tensor (composite and sparse signature tensors are not supported)",
                    Code.INTERNAL,
                )
    signature.check_supported(inputs, "input", model)
    signature.check_supported(outputs, "output", model)
    return inputs, outputs


def read_graph_def(tf: Any, path: Path, model: str) -> Any:
    """The ``GraphDef`` in ``path`` (binary protobuf), Triton's messages for bad ones."""
    from google.protobuf import message

    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(path.read_bytes())
    except (message.DecodeError, OSError) as exc:
        raise TritonXError(f"Can't parse {path} as binary proto: {exc}", Code.INTERNAL) from exc
    if not graph_def.node:
        raise TritonXError(f"model {model} has an empty network", Code.INTERNAL)
    return graph_def


# --------------------------------------------------------------------------- sessions


@dataclass
class Session:
    """One TF session with its model loaded, shared by up to ``MAX_SESSION_SHARE_COUNT``
    instances of one model version on one device.

    :param inputs: the model's (potential) inputs by config name.
    :param outputs: the model's (potential) outputs by config name.
    """

    session: Any
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]
    config: ModelConfig
    #: instances given this session so far (Triton's share count), and those still using it
    given: int = 0
    users: int = 0

    def close(self) -> None:
        self.session.close()


def _session_config(
    tf: Any, config: ModelConfig, backend: BackendSettings, model: ModelSettings, gpu: bool
) -> Any:
    """The ``ConfigProto`` Triton's ``NewSessionOptions`` builds."""
    proto = tf.compat.v1.ConfigProto()
    proto.intra_op_parallelism_threads = model.intra_threads
    proto.inter_op_parallelism_threads = model.inter_threads
    proto.use_per_session_threads = model.per_session_threads
    proto.allow_soft_placement = backend.allow_soft_placement
    proto.gpu_options.allow_growth = backend.gpu_memory_fraction == 0.0
    proto.gpu_options.per_process_gpu_memory_fraction = backend.gpu_memory_fraction
    opt = config.raw.optimization
    if opt.HasField("graph"):
        level = opt.graph.level
        levels = tf.compat.v1.OptimizerOptions
        jit = levels.DEFAULT
        if level == -1:
            jit = levels.OFF
        elif level == 1:
            jit = levels.ON_1
        elif level > 1:
            jit = levels.ON_2
        proto.graph_options.optimizer_options.global_jit_level = jit
    if _auto_mixed_precision(config, gpu):
        from tensorflow.core.protobuf import rewriter_config_pb2

        proto.graph_options.rewrite_options.auto_mixed_precision = (
            rewriter_config_pb2.RewriterConfig.ON
        )
    return proto


def _auto_mixed_precision(config: ModelConfig, gpu: bool) -> bool:
    """Check the execution accelerators (Triton's rules); True when ``auto_mixed_precision``
    applies (GPU instances only)."""
    accelerators = config.raw.optimization.execution_accelerators
    if accelerators.cpu_execution_accelerator:
        raise invalid_arg("CPU Execution Accelerator is not supported in TensorFlow backend")
    mixed = False
    for accelerator in accelerators.gpu_execution_accelerator:
        if accelerator.name == "tensorrt":
            raise invalid_arg(
                f"model '{config.name}': the TensorRT execution accelerator (TF-TRT) is not "
                "supported by tritonx's tensorflow backend; convert the model with TF-TRT "
                "beforehand or serve it with the tensorrt backend"
            )
        if accelerator.name == "auto_mixed_precision":
            mixed = True
        elif accelerator.name != "gpu_io":
            raise invalid_arg(f"unknown Execution Accelerator '{accelerator.name}' is requested")
    if accelerators.gpu_execution_accelerator and not gpu:
        log.warning("GPU Execution Accelerator will be ignored for model instance on CPU")
    return mixed and gpu


def _device(tf: Any, ctx: LoadContext) -> str | None:
    """The TF device an instance's graph is placed on (None: where the graph says)."""
    kind = ctx.instance.kind
    if kind == "KIND_MODEL":
        return None
    if kind == "KIND_GPU":
        gpus = tf.config.list_physical_devices("GPU")
        if ctx.instance.device_id >= len(gpus):
            raise unavailable(
                f"unable to load model '{ctx.model_name}': instance {ctx.instance.name} is "
                f"KIND_GPU on GPU {ctx.instance.device_id}, but this TensorFlow build sees "
                f"{len(gpus)} GPU(s) (tensorflow-cpu has no GPU support: install the "
                "'tensorflow' package with CUDA for GPU instances)"
            )
        return f"/device:GPU:{ctx.instance.device_id}"
    return "/device:CPU:0"


def _clear_devices(graph_def: Any) -> None:
    """Triton's placement rule: the nodes not pinned to a CPU lose their device, so the
    instance's device applies."""
    for node in graph_def.node:
        if "cpu" not in node.device.lower():
            node.device = ""


def _run_init_ops(session: Any, ctx: LoadContext, settings: ModelSettings) -> None:
    if not settings.init_ops_file:
        return
    path = ctx.version_path / settings.init_ops_file
    if not path.exists():
        path = ctx.model_dir / settings.init_ops_file
    root = ctx.model_dir.resolve()
    if root not in path.resolve().parents:  # a config never makes the server read elsewhere
        raise invalid_arg(
            f"TF_INIT_OPS_FILE '{settings.init_ops_file}' of model '{ctx.model_name}' must "
            "name a file inside the model directory"
        )
    try:
        ops = json.loads(path.read_text())["init_ops"]
    except OSError as exc:
        raise invalid_arg(f"failed to read TF_INIT_OPS_FILE '{path}': {exc.strerror}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise invalid_arg(
            f"TF_INIT_OPS_FILE '{path}' must be a JSON object with an 'init_ops' array of "
            f"operation names: {exc}"
        ) from exc
    if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
        raise invalid_arg(f"'init_ops' in TF_INIT_OPS_FILE '{path}' must list operation names")
    for op in ops:
        try:
            session.run(session.graph.get_operation_by_name(op))
        except Exception as exc:
            raise tf_error(exc) from exc


def create_session(
    tf: Any, ctx: LoadContext, backend: BackendSettings, settings: ModelSettings
) -> Session:
    """Load the model into a new session on the instance's device and check the config
    against it."""
    config = ctx.config
    name = ctx.model_name
    platform = platform_of(config)
    path = ctx.model_path
    assert path is not None  # the core refuses a version without its model file
    device = _device(tf, ctx)
    proto = _session_config(
        tf, config, backend, settings, gpu=device is not None and "GPU" in device
    )
    for library in config.raw.model_operations.op_library_filename:
        try:
            tf.load_op_library(library)
        except Exception as exc:
            raise tf_error(exc) from exc
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph, config=proto)
    try:
        if platform == SAVEDMODEL:
            saved = read_saved_model(path)
            meta = pick_meta_graph(saved, settings.graph_tag, name)
            _, sig = pick_signature(meta, settings.signature_def, name)
            inputs, outputs = signature_io(tf, sig, name)
            tags = list(meta.meta_info_def.tags)
            with graph.as_default(), tf.device(device), _quiet_deprecation():
                try:
                    tf.compat.v1.saved_model.loader.load(
                        session, tags, str(path), clear_devices=device is not None
                    )
                except Exception as exc:
                    raise tf_error(exc) from exc
            signature.validate_savedmodel(config, inputs, outputs)
        else:
            graph_def = read_graph_def(tf, path, name)
            if device is not None:
                _clear_devices(graph_def)
            with graph.as_default(), tf.device(device):
                try:
                    tf.compat.v1.import_graph_def(graph_def, name="")
                except Exception as exc:
                    raise tf_error(exc) from exc
            inputs, outputs = _graph_io(tf, graph, graph_def)
            signature.validate_graphdef(config, inputs, outputs)
        _run_init_ops(session, ctx, settings)
    except BaseException:
        session.close()
        raise
    return Session(
        session,
        {io.name: io for io in inputs},
        {io.name: io for io in outputs},
        config,
    )


def _quiet_deprecation() -> contextlib.AbstractContextManager[Any]:
    """Silence TensorFlow's "loader.load is deprecated" log line: the TF1 loader is the one
    that loads a SavedModel into a session (as Triton's C++ ``LoadSavedModel``)."""
    try:
        from tensorflow.python.util import deprecation

        return deprecation.silence()
    except (ImportError, AttributeError):  # pragma: no cover - a TensorFlow without it
        return contextlib.nullcontext()


def _graph_io(tf: Any, graph: Any, graph_def: Any) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """A GraphDef's potential inputs (placeholders) and outputs (every other node)."""
    inputs: list[TensorInfo] = []
    outputs: list[TensorInfo] = []
    for node in graph_def.node:
        if node.op == "Placeholder":
            dtype = _dtype_name(tf, node.attr["dtype"].type)
            dims = _dims(node.attr["shape"].shape) if "shape" in node.attr else ()
            inputs.append(TensorInfo(node.name, f"{node.name}:0", dtype, dims))
        else:
            op = graph.get_operation_by_name(node.name)
            dtype = _dtype_name(tf, op.outputs[0].dtype) if op.outputs else ""
            outputs.append(TensorInfo(node.name, f"{node.name}:0", dtype))
    return inputs, outputs


# --------------------------------------------------------------------------- the backend


class TensorFlowBackend(Backend):
    """Triton's ``tensorflow`` backend: platforms ``tensorflow_savedmodel`` (a
    ``model.savedmodel`` folder) and ``tensorflow_graphdef`` (a ``model.graphdef`` file).

    ``--backend-config=tensorflow,<key>=<value>``: ``allow-soft-placement``,
    ``gpu-memory-fraction``, ``version`` (2 only) and ``default-max-batch-size`` (4).
    """

    name: ClassVar[str] = "tensorflow"
    platforms: ClassVar[tuple[str, ...]] = (SAVEDMODEL, GRAPHDEF)
    default_model_filename: ClassVar[str | None] = None  # per platform (DEFAULT_FILES)
    #: Triton's default for KIND_CPU groups without a count: 2 for tensorflow
    default_cpu_instance_count: ClassVar[int] = 2
    config_keys: ClassVar[frozenset[str] | None] = BACKEND_KEYS

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.settings = parse_backend_config(self.config)
        self._sessions: dict[tuple[Any, ...], Session] = {}
        self._lock = threading.Lock()
        #: held while a shared session is looked up or created
        self._sharing = threading.Lock()

    def auto_complete_config(self, ctx: AutoCompleteContext) -> None:
        """Fill ``max_batch_size``, ``dynamic_batching``, inputs and outputs from a
        SavedModel's signature; a GraphDef has none, its config is left as written."""
        config = ctx.config
        view = config.view()
        if view.platform != SAVEDMODEL or ctx.model_path is None or not ctx.model_path.exists():
            return
        tf = _import_tf()
        settings = parse_model_settings(view.parameters, config.name)
        try:
            saved = read_saved_model(ctx.model_path)
            meta = pick_meta_graph(saved, settings.graph_tag, config.name)
            _, sig = pick_signature(meta, settings.signature_def, config.name)
            inputs, outputs = signature_io(tf, sig, config.name)
        except TritonXError as exc:
            raise TritonXError(
                f"unable to auto-complete model configuration for '{config.name}', failed to "
                f"load model: {exc.message}",
                Code.INTERNAL,
            ) from exc
        signature.auto_complete(config, inputs, outputs, self.settings.default_max_batch_size)

    def check_notes(self, ctx: AutoCompleteContext) -> dict[str, str]:
        """``tritonx check``: the completed config checked against the model's signature
        (SavedModel) or its placeholders and nodes (GraphDef), without creating a session."""
        config = ctx.config.view()
        platform = platform_of(config)
        signature.check_datatypes(config)
        settings = parse_model_settings(config.parameters, config.name)
        path = ctx.model_path
        if path is None or not path.exists():
            return {}
        tf = _import_tf()
        if platform == SAVEDMODEL:
            saved = read_saved_model(path)
            meta = pick_meta_graph(saved, settings.graph_tag, config.name)
            key, sig = pick_signature(meta, settings.signature_def, config.name)
            inputs, outputs = signature_io(tf, sig, config.name)
            signature.validate_savedmodel(config, inputs, outputs)
            return {"signature": key}
        graph_def = read_graph_def(tf, path, config.name)
        inputs = [
            TensorInfo(
                n.name,
                f"{n.name}:0",
                _dtype_name(tf, n.attr["dtype"].type),
                _dims(n.attr["shape"].shape),
            )
            for n in graph_def.node
            if n.op == "Placeholder"
        ]
        outputs = [
            TensorInfo(n.name, f"{n.name}:0", "") for n in graph_def.node if n.op != "Placeholder"
        ]
        signature.validate_graphdef(config, inputs, outputs)
        return {"nodes": str(len(graph_def.node))}

    def load(self, ctx: LoadContext) -> ModelInstance:
        """Load the model into a TF session on the instance's device (or share one, with
        ``MAX_SESSION_SHARE_COUNT``) and check the config against it."""
        config = ctx.config
        platform_of(config)
        signature.check_datatypes(config)
        settings = parse_model_settings(ctx.parameters, ctx.model_name)
        tf = _import_tf()
        device = _device(tf, ctx)
        # one version's instances share its sessions: never another version's, nor those of
        # an earlier load of the same files (a reload), nor those of another model
        key = (ctx.model_name, ctx.version, str(ctx.model_path), id(config), device)
        if settings.max_session_share_count == 1:
            session = create_session(tf, ctx, self.settings, settings)
            session.given = session.users = 1
        else:  # instances load in parallel threads: one creates, the next ones share
            with self._sharing:
                shared = self._sessions.get(key)
                if shared is not None and shared.given < settings.max_session_share_count:
                    with self._lock:
                        shared.given += 1
                        shared.users += 1
                    return TensorFlowModelInstance(self, key, shared)
                session = create_session(tf, ctx, self.settings, settings)
                session.given = session.users = 1
                with self._lock:
                    self._sessions[key] = session
        ctx.logger.info(
            "loaded %s for instance %s on %s", ctx.model_path, ctx.instance.name, device or "model"
        )
        return TensorFlowModelInstance(self, key, session)

    def release(self, key: tuple[Any, ...], session: Session) -> None:
        """An instance is done with ``session``: closed when its last user leaves."""
        with self._lock:
            session.users -= 1
            last = session.users == 0
            if last and self._sessions.get(key) is session:
                del self._sessions[key]
        if last:
            session.close()

    def close(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            session.close()


@dataclass
class _Group:
    """Requests of one execute that run together (the same shapes), and how they ran."""

    indexes: list[int]
    requests: list[InferenceRequest]
    wanted: list[_Output] = field(default_factory=list)
    feed: dict[str, np.ndarray] = field(default_factory=dict)
    results: list[Any] = field(default_factory=list)
    batch: int = 1
    error: TritonXError | None = None


def _rows(inputs: Mapping[str, np.ndarray]) -> int:
    """The batch size of batched inputs: their first dimension."""
    for array in inputs.values():
        return int(array.shape[0]) if array.ndim else 1
    return 1


@dataclass(frozen=True, slots=True)
class _Output:
    name: str
    tensor: str
    dims: tuple[int, ...]
    reshaped: bool


class TensorFlowModelInstance(ModelInstance):
    """One model instance: runs its requests through its (possibly shared) session.

    Requests whose inputs have the same shapes (the batch dimension aside) run as one batch,
    in one ``Session.run``; if such a batch fails, each request runs alone so only the bad
    one fails.
    """

    def __init__(self, backend: TensorFlowBackend, key: tuple[Any, ...], shared: Session) -> None:
        self._backend: TensorFlowBackend | None = backend
        self._key = key
        self._shared = shared
        config = shared.config
        self._batching = config.max_batch_size > 0
        self._decoupled = config.decoupled
        self._feeds: dict[str, tuple[str, tuple[int, ...] | None]] = {}
        for io in config.inputs:
            self._feeds[io.name] = (shared.inputs[io.name].tensor, io.reshape)
        for extra in signature.extra_input_names(config):
            self._feeds.setdefault(extra, (shared.inputs[extra].tensor, None))
        for bi in config.raw.batch_input:
            for target in bi.target_name:
                self._feeds.setdefault(target, (shared.inputs[target].tensor, None))
        self._outputs = [
            _Output(io.name, shared.outputs[io.name].tensor, io.dims, io.reshape is not None)
            for io in config.outputs
        ]
        #: implicit state (sequence batching): outputs fetched on every run
        self._state = [
            _Output(name, shared.outputs[name].tensor, dims, False)
            for name, dims in signature.state_outputs(config)
            if name not in config.output_map
        ]
        self._outputs += self._state
        #: ragged inputs, batch inputs and batch outputs (None: the model has none)
        self._batch_io = BatchIO.of(config)

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse] | None:
        """Run ``requests``: each group of same-shaped requests as one batch, in one
        ``Session.run``. A decoupled model (``model_transaction_policy { decoupled: true }``)
        sends each request its one response, final, as Triton's backend does.

        Marks Triton's compute phases on :func:`tritonx.compute_timer`: input (gathering the
        inputs), infer (``Session.run``), output (splitting the results).
        """
        responses = self._execute(requests)
        if not self._decoupled:
            return responses
        for request, response in zip(requests, responses, strict=True):
            request.get_response_sender().send(response, final=True)
        return None

    def _execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        timer = tritonx.compute_timer()
        if self._batch_io is not None:
            return self._execute_ragged(requests, self._batch_io, timer)
        keyed: dict[tuple[Any, ...], list[int]] = {}
        for i, request in enumerate(requests):
            key = (
                tuple((n, a.shape[1:]) for n, a in sorted(request.inputs.items()))
                if self._batching
                else (i,)
            )
            keyed.setdefault(key, []).append(i)
        groups = [_Group(indexes, [requests[i] for i in indexes]) for indexes in keyed.values()]
        for group in groups:
            try:
                inputs = (
                    tritonx.concat_inputs(group.requests)
                    if self._batching
                    else dict(group.requests[0].inputs)
                )
                group.wanted = self._wanted(group.requests)
                group.feed = self._feed(inputs)
                group.batch = _rows(inputs) if self._batching else 1
            except Exception as exc:
                group.error = tf_error(exc)
        timer.input_done()
        for group in groups:
            if group.error is None:
                try:
                    group.results = self._run(group.feed, group.wanted)
                except Exception as exc:
                    group.error = tf_error(exc)
        timer.output_started()
        responses: dict[int, InferenceResponse] = {}
        for group in groups:
            if group.error is not None and len(group.requests) > 1:
                # the batch failed: run its requests one by one, so only the bad one fails
                for i in group.indexes:
                    responses[i] = self._alone(requests[i])
                continue
            try:
                if group.error is not None:
                    raise group.error
                outputs = self._shape(group.results, group.wanted, group.batch)
                split = (
                    tritonx.split_outputs(group.requests, outputs)
                    if self._batching
                    else [InferenceResponse(outputs=outputs)]
                )
            except Exception as exc:
                split = [InferenceResponse.failed(tf_error(exc))] * len(group.requests)
            responses.update(zip(group.indexes, split, strict=True))
        return [responses[i] for i in range(len(requests))]

    def _execute_ragged(
        self, requests: Sequence[InferenceRequest], batch_io: BatchIO, timer: Any
    ) -> list[InferenceResponse]:
        """A model with ragged inputs, batch inputs or batch outputs runs as Triton's backend
        runs it: the whole batch in one run (ragged inputs flattened into one 1-dimensional
        tensor, the batch inputs the core added), batch outputs scattered with their source
        input's shapes; an error fails every request of the batch."""
        try:
            inputs = batch_io.concat(requests)
            wanted = self._wanted(requests)
            feed = self._feed(inputs)
            timer.input_done()
            results = self._run(feed, wanted)
            timer.output_started()
            total = sum(r.batch_size for r in requests) if self._batching else 1
            outputs = self._shape(results, wanted, total, batch_io.batch_outputs)
        except Exception as exc:
            error = tf_error(exc)
            return [InferenceResponse.failed(error) for _ in requests]
        return batch_io.split(requests, outputs)

    def unload(self) -> None:
        """Leave the session (closed when no other instance shares it)."""
        if self._backend is not None:
            self._backend.release(self._key, self._shared)
            self._backend = None

    # ------------------------------------------------------------------ internals

    def _alone(self, request: InferenceRequest) -> InferenceResponse:
        try:
            wanted = self._wanted([request])
            results = self._run(self._feed(request.inputs), wanted)
            batch = _rows(request.inputs) if self._batching else 1
            return InferenceResponse(outputs=self._shape(results, wanted, batch))
        except Exception as exc:
            return InferenceResponse.failed(tf_error(exc))

    def _wanted(self, requests: Sequence[InferenceRequest]) -> list[_Output]:
        names: set[str] = set()
        for request in requests:
            if request.requested_outputs is None:
                return self._outputs
            names.update(request.requested_outputs)
        names.update(o.name for o in self._state)
        return [o for o in self._outputs if o.name in names] or self._outputs

    def _feed(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        feed: dict[str, np.ndarray] = {}
        for name, array in inputs.items():
            tensor, reshape = self._feeds[name]
            if reshape is not None:
                lead = array.shape[:1] if self._batching else ()
                array = array.reshape((*lead, *reshape))
            feed[tensor] = array
        return feed

    def _run(self, feed: Mapping[str, np.ndarray], wanted: Sequence[_Output]) -> list[Any]:
        results = self._shared.session.run([o.tensor for o in wanted], feed_dict=dict(feed))
        return list(results)

    def _shape(
        self,
        results: Sequence[Any],
        wanted: Sequence[_Output],
        batch: int,
        as_is: frozenset[str] = frozenset(),
    ) -> dict[str, np.ndarray]:
        """The run's results in the configured shapes (``as_is``: batch outputs, kept as the
        model gives them)."""
        outputs: dict[str, np.ndarray] = {}
        for spec, value in zip(wanted, results, strict=True):
            array = np.asarray(value)
            if spec.name in as_is:
                pass
            elif spec.reshaped:
                array = array.reshape((batch, *spec.dims) if self._batching else spec.dims)
            elif self._batching and (array.ndim == 0 or array.shape[0] != batch):
                raise TritonXError(
                    f"output '{spec.name}' has shape {list(array.shape)}, which does not start "
                    f"with the batch size {batch}",
                    Code.INTERNAL,
                )
            outputs[spec.name] = array
        return outputs
