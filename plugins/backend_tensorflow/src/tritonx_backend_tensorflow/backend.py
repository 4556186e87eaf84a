"""The ``tensorflow`` backend: SavedModel (``model.savedmodel`` folder) and frozen GraphDef
(``model.graphdef`` file), each instance running a TensorFlow session as Triton's does.

:class:`TensorFlowBackend` (auto-complete, ``tritonx check`` notes, loading and sharing
sessions) and :class:`TensorFlowModelInstance` (running requests through a session). Reading
the model files is in :mod:`~tritonx_backend_tensorflow.reading`, creating sessions in
:mod:`~tritonx_backend_tensorflow.sessions`.

tensorflow is imported inside :meth:`TensorFlowBackend.auto_complete_config` and
:meth:`TensorFlowBackend.load`, never at import time.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

import tritonx
from tritonx import (
    AutoCompleteContext,
    Backend,
    InferenceRequest,
    InferenceResponse,
    LoadContext,
    ModelInstance,
)
from tritonx.batching import BatchIO
from tritonx.errors import Code, TritonXError
from tritonx_backend_tensorflow.reading import (
    GRAPHDEF,
    SAVEDMODEL,
    import_tf,
    pick_meta_graph,
    pick_signature,
    placeholder_io,
    platform_of,
    read_graph_def,
    read_saved_model,
    signature_io,
    tf_error,
)
from tritonx_backend_tensorflow.sessions import Session, create_session, instance_device
from tritonx_backend_tensorflow.settings import (
    BACKEND_KEYS,
    parse_backend_config,
    parse_model_settings,
)
from tritonx_backend_tensorflow.signature import (
    auto_complete,
    check_datatypes,
    extra_input_names,
    state_outputs,
    validate_graphdef,
    validate_savedmodel,
)


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
        tf = import_tf()
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
        auto_complete(config, inputs, outputs, self.settings.default_max_batch_size)

    def check_notes(self, ctx: AutoCompleteContext) -> dict[str, str]:
        """``tritonx check``: the completed config checked against the model's signature
        (SavedModel) or its placeholders and nodes (GraphDef), without creating a session."""
        config = ctx.config.view()
        platform = platform_of(config)
        check_datatypes(config)
        settings = parse_model_settings(config.parameters, config.name)
        path = ctx.model_path
        if path is None or not path.exists():
            return {}
        tf = import_tf()
        if platform == SAVEDMODEL:
            saved = read_saved_model(path)
            meta = pick_meta_graph(saved, settings.graph_tag, config.name)
            key, sig = pick_signature(meta, settings.signature_def, config.name)
            inputs, outputs = signature_io(tf, sig, config.name)
            validate_savedmodel(config, inputs, outputs)
            return {"signature": key}
        graph_def = read_graph_def(tf, path, config.name)
        inputs, outputs = placeholder_io(tf, graph_def)
        validate_graphdef(config, inputs, outputs)
        return {"nodes": str(len(graph_def.node))}

    def load(self, ctx: LoadContext) -> ModelInstance:
        """Load the model into a TF session on the instance's device (or share one, with
        ``MAX_SESSION_SHARE_COUNT``) and check the config against it."""
        config = ctx.config
        platform_of(config)
        check_datatypes(config)
        settings = parse_model_settings(ctx.parameters, ctx.model_name)
        tf = import_tf()
        device = instance_device(tf, ctx)
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
        for extra in extra_input_names(config):
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
            for name, dims in state_outputs(config)
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
