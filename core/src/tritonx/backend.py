"""What a backend plugin implements: :class:`Backend` (one per backend name) and
:class:`ModelInstance` (one per instance of each loaded model version).

The contract:

* Everything a backend does is **synchronous**. The core calls ``load``, ``execute`` and
  ``unload`` from a worker thread dedicated to that instance, so an instance never sees two
  concurrent ``execute`` calls and needs no locks. Frameworks that release the GIL (ONNX
  Runtime, libtorch, TensorRT, OpenVINO) run instances truly in parallel. Two opt-ins save
  the thread hand-offs: ``inline_execution`` (short executions may run on the event loop)
  and ``async_execution`` (an instance that runs its work elsewhere, e.g. in a process,
  starts batches from the loop with ``execute_async`` and answers through a loop future).
* ``execute`` receives 1..N requests and returns exactly one response per request, in order.
  With ``max_batch_size > 0`` the core's scheduler may hand several requests at once (never
  more batch items than ``max_batch_size`` in total); ``tritonx.concat_inputs`` and
  ``tritonx.split_outputs`` do the stack-run-split. Decoupled models
  (``model_transaction_policy { decoupled: true }``) return ``None`` and send responses through
  ``request.response_sender`` instead.
* Per-request errors go in ``InferenceResponse.failed(err)``; an exception raised from
  ``execute`` fails every request of that call (INTERNAL unless it is a TritonXError).
* The core validates inputs against the config (names, datatypes, shapes, batch size), drops
  outputs the client did not ask for, and measures timings: backends do none of that. A
  backend that can tell when its input preparation ended and its output extraction began
  marks both on :func:`compute_timer` (optional; without marks the whole ``execute`` counts
  as compute infer, Triton's ``compute_input`` / ``compute_output`` stay 0).
* A plugin's entry-point module must not import its framework at import time: import it
  inside ``load`` (``tritonx.testing.BackendContract`` checks this).
"""

from __future__ import annotations

import abc
import asyncio
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from tritonx.config import EditableModelConfig, ModelConfig
from tritonx.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from tritonx.handle import ServerHandle


class ComputeTimer:
    """The phases of one ``execute``, as Triton's statistics and traces split it.

    ``compute_input`` runs from the start of ``execute`` to :meth:`input_done` (inputs
    gathered and converted for the framework), ``compute_infer`` from there to
    :meth:`output_started` (the framework ran), ``compute_output`` from there to the end of
    ``execute`` (outputs converted and split into responses). A backend marks them on the
    timer :func:`compute_timer` returns, from the thread ``execute`` runs in; unmarked phases
    count as ``compute_infer``. Timestamps are ``time.perf_counter_ns()`` values (the
    system's monotonic clock, so a worker process may pass its own).
    """

    __slots__ = ("input_end_ns", "output_start_ns")

    def __init__(self) -> None:
        self.input_end_ns = 0
        self.output_start_ns = 0

    def input_done(self, ns: int | None = None) -> None:
        """The inputs are ready for the framework (now, or at ``ns``)."""
        self.input_end_ns = time.perf_counter_ns() if ns is None else ns

    def output_started(self, ns: int | None = None) -> None:
        """The framework returned; output extraction begins (now, or at ``ns``)."""
        self.output_start_ns = time.perf_counter_ns() if ns is None else ns

    def reset(self) -> None:
        """Forget the marks (the core calls it before each ``execute``)."""
        self.input_end_ns = 0
        self.output_start_ns = 0


_timers = threading.local()


def compute_timer() -> ComputeTimer:
    """The :class:`ComputeTimer` of the ``execute`` running in this thread.

    The core resets it before each ``execute`` and reads it after; outside an ``execute``
    (a backend exercised on its own) the marks are simply never read.
    """
    timer: ComputeTimer | None = getattr(_timers, "timer", None)
    if timer is None:
        timer = _timers.timer = ComputeTimer()
    return timer


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """Which instance of an ``instance_group`` is being loaded.

    :param name: Triton's instance name, ``<group name>_<index within the group>``.
    :param group_name: the instance group's name.
    :param kind: ``KIND_CPU``, ``KIND_GPU`` or ``KIND_MODEL``.
    :param device_id: the GPU id for ``KIND_GPU`` instances, 0 otherwise.
    :param index: the instance's index within the whole model (0..total-1).
    """

    name: str
    group_name: str
    kind: str = "KIND_CPU"
    device_id: int = 0
    index: int = 0


@dataclass(frozen=True)
class LoadContext:
    """Everything a backend gets when loading one instance of one model version.

    :param model_name: the model's name.
    :param version: the version being loaded.
    :param model_dir: the model's folder (``<repository>/<model>``).
    :param version_path: ``<model_dir>/<version>``.
    :param model_path: the model file: ``default_model_filename`` (or the backend's default)
        inside ``version_path``; ``None`` when neither names one.
    :param config: the completed, normalized model config.
    :param instance: which instance this is.
    :param backend_config: ``--backend-config=<backend>,<key>=<value>`` settings.
    :param server: the running server, for backends that call other models (BLS) or add
        metrics; ``None`` only when a backend is exercised outside a server. Its coroutines
        run on ``server.loop`` (from a worker thread use ``server.run_threadsafe(coro)``).
    """

    model_name: str
    version: int
    model_dir: Path
    version_path: Path
    model_path: Path | None
    config: ModelConfig
    instance: InstanceSpec
    backend_config: Mapping[str, str] = field(default_factory=dict)
    server: ServerHandle | None = None

    @property
    def parameters(self) -> dict[str, str]:
        """The config.pbtxt ``parameters`` map."""
        return self.config.parameters

    @property
    def logger(self) -> logging.Logger:
        """A logger named ``tritonx.backend.<backend>.<model>``."""
        return logging.getLogger(f"tritonx.backend.{self.config.backend}.{self.model_name}")


@dataclass
class AutoCompleteContext:
    """What ``Backend.auto_complete_config`` gets: a *mutable* config to fill in.

    :param config: the config read from config.pbtxt (possibly empty), as an
        :class:`~tritonx.config.EditableModelConfig`; the backend adds what is missing
        (inputs, outputs, max_batch_size...) in place.
    :param model_dir: the model's folder.
    :param version_path: the folder of the version used to complete the config.
    :param model_path: the model file inside it.
    :param backend_config: ``--backend-config`` settings of this backend plus global ones.
    :param check_only: True under ``tritonx check``: no instance will be loaded, so build,
        download or install nothing (complete what can be completed without, or raise a
        TritonXError that says what is missing).
    """

    config: EditableModelConfig
    model_dir: Path
    version_path: Path
    model_path: Path | None
    backend_config: Mapping[str, str] = field(default_factory=dict)
    check_only: bool = False


class ModelInstance(abc.ABC):
    """One loaded instance of a model version: ``execute`` is never called twice at once,
    from its own worker thread (or, with :attr:`inline_execution`, also from the server's
    event loop; with :attr:`async_execution` batches may also start on the loop through
    :meth:`execute_async`, never while ``execute`` runs)."""

    #: True when ``execute`` may also run on the server's event-loop thread: it holds no
    #: thread-bound state and neither blocks on I/O nor waits for other threads. Then, for
    #: a model whose executions are short (``--inline-execution-us``), the scheduler runs
    #: them on the loop and saves two thread hand-offs per batch (onnxruntime does).
    inline_execution: bool = False

    #: True when :meth:`execute_async` is implemented: the instance runs a batch elsewhere
    #: (e.g. in a worker process) and only needs the event loop to start it and to collect
    #: the answer. Then, for a non-decoupled model whose queue forms batches at once (no
    #: queue delay, priorities or queue policy, no rate limiter), the scheduler starts its
    #: batches on the loop and no instance thread is woken per batch (the python backend's
    #: worker processes do). ``execute`` must still work: the instance's thread uses it when
    #: the loop cannot (the instance was not ready, or requests were queued already).
    async_execution: bool = False

    @abc.abstractmethod
    def execute(self, requests: Sequence[InferenceRequest]) -> Sequence[InferenceResponse] | None:
        """Run ``requests`` and return one response per request, in order.

        Decoupled models return ``None`` and answer through ``request.response_sender``.
        A request whose ``release_flags`` the instance set to
        :data:`~tritonx.types.REQUEST_RELEASE_RESCHEDULE` runs again in a later batch
        (iterative sequences): its entry in the returned list is ignored.
        """

    def execute_async(
        self, requests: Sequence[InferenceRequest]
    ) -> asyncio.Future[Sequence[InferenceResponse] | None]:
        """Start running ``requests`` and return a future of the running event loop that gets
        one response per request, in order (or the exception that fails them all, as from
        ``execute``). Called on the event loop, only when :attr:`async_execution` is True,
        never while another execution of this instance runs; it must not block."""
        raise NotImplementedError(f"{type(self).__name__} has no execute_async")

    def unload(self) -> None:  # noqa: B027 - optional hook
        """Release the instance's resources. Called once, after the last ``execute``."""

    def abort(self) -> bool:
        """Stop at once whatever the instance is still doing when its time is up: an
        execution (``execute`` or an :meth:`execute_async` batch) or an ``unload`` that
        outlived ``--model-unload-timeout-secs`` (or ``--exit-timeout-secs`` when the server
        exits). Called once, from a thread of the core, while that work may still run.

        Return True when it will end soon, its requests answered with an error (the
        python backend kills the model's worker process); the core then waits a few seconds
        for it. False (the default: a thread cannot be killed) makes the core abandon the
        instance's thread (a daemon that ends with the process; should the execution ever
        return, that thread still calls ``unload``) and fail its requests itself."""
        return False

    def is_ready(self) -> bool:
        """Whether the instance can serve; True by default. While it is False (e.g. a worker
        process restarting) the core gives the instance no requests, and the model stays
        READY as long as another of its instances is ready."""
        return True

    def not_ready_reason(self) -> str:
        """Why ``is_ready()`` is False (shown as the UNAVAILABLE reason in the index)."""
        return "model instance is not ready"

    def probe_ready(self) -> str | None:
        """Ask the model itself whether it can serve (Triton's
        ``TRITONBACKEND_ModelInstanceReady``; e.g. a python model's own ``is_ready()``).

        Called from a worker thread by the model-readiness endpoints only (HTTP
        ``/v2/models/<m>/ready``, gRPC ``ModelReady``), never per request; may block (bound
        it yourself). Return None when ready, else why not: the model is then NOT READY
        there (as in Triton: any instance not ready makes the model not ready). Default:
        None (nothing to ask)."""
        return None

    @property
    def restarts(self) -> int:
        """How many times the instance recovered by starting again since it loaded (e.g. a
        python model's worker process restarted after dying); shown on the status page.
        0 by default: instances that never restart need not override it."""
        return 0


#: ``--backend-config`` keys every backend may be given (Triton's global backend settings).
GLOBAL_CONFIG_KEYS = frozenset({"default-max-batch-size"})


class Backend(abc.ABC):
    """A backend: creates :class:`ModelInstance` objects for models that name it.

    :cvar name: the ``backend:`` value models use in config.pbtxt (``onnxruntime``...).
    :cvar platforms: ``platform:`` values this backend also serves (``onnxruntime_onnx``...).
    :cvar default_model_filename: the file looked for in a version folder when the config
        names none (``model.onnx``...); also used to recognise models with no config.pbtxt.
    """

    name: ClassVar[str]
    platforms: ClassVar[tuple[str, ...]] = ()
    default_model_filename: ClassVar[str | None] = None
    #: True when the backend reports a missing model file itself, at load (with its own
    #: message, e.g. Triton's python backend); False: the core refuses the version first.
    reports_missing_model_file: ClassVar[bool] = False
    #: Default instance count for KIND_CPU groups that give none (Triton uses 2 for some).
    default_cpu_instance_count: ClassVar[int] = 1
    #: The ``--backend-config=<name>,<key>=<value>`` keys this backend reads, besides
    #: :data:`GLOBAL_CONFIG_KEYS`: the server refuses to start with any other key under this
    #: backend's name. ``None`` (the default): not declared, every key is passed on.
    config_keys: ClassVar[frozenset[str] | None] = None

    def __init__(self, config: Mapping[str, str]) -> None:
        """``config`` holds the ``--backend-config=<name>,<key>=<value>`` settings."""
        self.config = dict(config)

    def auto_complete_config(self, ctx: AutoCompleteContext) -> None:  # noqa: B027
        """Fill in what config.pbtxt leaves out, from the model file (Triton's auto-complete).

        Modify ``ctx.config`` in place; raise a TritonXError when the config contradicts the
        model. Not called with ``--disable-auto-complete-config``.
        """

    def check_notes(self, ctx: AutoCompleteContext) -> dict[str, str]:
        """What ``tritonx check`` reports about a model beyond its config (optional).

        Called by ``tritonx check`` only, after the config was completed and validated
        (``ctx.config`` is the completed config, ``ctx.check_only`` is True), on the folder
        the load would use, from a worker thread. Return short notes, e.g. ``{"environment":
        "cached (/path)"}``: ``tritonx check`` shows them in its table (``name: value``) and
        as ``"notes"`` in its JSON. Read only: change neither the config nor the model's
        folder, and build, download or install nothing. Raise a TritonXError for what the load
        would refuse; ``tritonx check`` reports it as the model's error. The default: no notes.
        """
        return {}

    @abc.abstractmethod
    def load(self, ctx: LoadContext) -> ModelInstance:
        """Load one instance of one model version; called from that instance's worker thread."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Called once when the server shuts down, after every instance is unloaded."""


__all__ = [
    "GLOBAL_CONFIG_KEYS",
    "AutoCompleteContext",
    "Backend",
    "ComputeTimer",
    "InstanceSpec",
    "LoadContext",
    "ModelInstance",
    "compute_timer",
]
