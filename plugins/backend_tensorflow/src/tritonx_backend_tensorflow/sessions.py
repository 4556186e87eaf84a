"""TensorFlow sessions of the ``tensorflow`` backend: the ``ConfigProto`` Triton builds for a
model instance (threads, GPU memory, graph optimization level, execution accelerators), the
instance's device, and :func:`create_session`, which loads a SavedModel or a GraphDef into a
new session, checks the config against it and runs the model's init ops.

tensorflow comes in as an argument (``tf``, from :func:`~tritonx_backend_tensorflow.reading.import_tf`);
this module imports none of it at import time.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from tritonx import LoadContext, ModelConfig
from tritonx.errors import invalid_arg, unavailable
from tritonx_backend_tensorflow.reading import (
    SAVEDMODEL,
    graph_io,
    pick_meta_graph,
    pick_signature,
    platform_of,
    read_graph_def,
    read_saved_model,
    signature_io,
    tf_error,
)
from tritonx_backend_tensorflow.settings import BackendSettings, ModelSettings
from tritonx_backend_tensorflow.signature import TensorInfo, validate_graphdef, validate_savedmodel

log = logging.getLogger("tritonx.backend.tensorflow")


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


def instance_device(tf: Any, ctx: LoadContext) -> str | None:
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
    device = instance_device(tf, ctx)
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
            validate_savedmodel(config, inputs, outputs)
        else:
            graph_def = read_graph_def(tf, path, name)
            if device is not None:
                _clear_devices(graph_def)
            with graph.as_default(), tf.device(device):
                try:
                    tf.compat.v1.import_graph_def(graph_def, name="")
                except Exception as exc:
                    raise tf_error(exc) from exc
            inputs, outputs = graph_io(tf, graph, graph_def)
            validate_graphdef(config, inputs, outputs)
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
