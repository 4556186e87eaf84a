"""The ``python`` backend: serves Triton python_backend ``model.py`` files.

Each instance runs in its own worker process by default (:class:`WorkerInstance`), like
Triton's stub processes; ``parameters { key: "TRITONX_EXECUTION_MODE" value: { string_value:
"in_process" } }`` runs it in the server process instead (:class:`InProcessInstance`).

The pieces: ``runner`` drives a ``TritonPythonModel`` (both modes), ``worker`` / ``process`` /
``messages`` / ``_ipc`` / ``_stub`` are the worker-process mode, ``inprocess`` the other,
``bridge`` is what models reach of the server, ``convert`` maps pb_utils objects to the core's.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

from tritonx.backend import AutoCompleteContext, Backend, LoadContext, ModelInstance
from tritonx.errors import TritonXError, invalid_arg
from tritonx_backend_python import _ipc
from tritonx_backend_python.inprocess import InProcessInstance, auto_complete_here
from tritonx_backend_python.process import ENV_PARAMETER, WorkerProcess, env_python
from tritonx_backend_python.worker import (
    TIMEOUT_PARAMETER,
    WorkerInstance,
    auto_complete_in_worker,
    execution_timeout,
)

__all__ = [
    "ENV_PARAMETER",
    "MODES",
    "MODE_PARAMETER",
    "TIMEOUT_PARAMETER",
    "InProcessInstance",
    "PythonBackend",
    "WorkerInstance",
]

#: config.pbtxt parameter choosing where instances run: ``process`` (default) or ``in_process``.
MODE_PARAMETER = "TRITONX_EXECUTION_MODE"
MODES = ("process", "in_process")

log = logging.getLogger("tritonx.backend.python")

#: Triton python_backend ``--backend-config`` keys that size its shared-memory region and
#: message queue, which tritonx does not have: accepted (command lines written for Triton keep
#: working) with a warning that they change nothing.
NO_EFFECT = frozenset({"shm-default-byte-size", "shm-growth-byte-size", "shm-message-queue-size"})


class PythonBackend(Backend):
    """Backend ``python``: Triton python_backend models (``model.py``).

    ``--backend-config=python,<key>=<value>`` keys: ``execution-mode`` (``process`` or
    ``in_process``: the default for models that set no ``TRITONX_EXECUTION_MODE``),
    ``stub-timeout-seconds`` (default 30) and ``shm-region-prefix-name`` (the label of the
    shared-memory segments in ``/proc/<pid>/fd``: they have no file name, so no client can
    register them).
    """

    name = "python"
    default_model_filename = "model.py"
    config_keys = frozenset(
        {"execution-mode", "stub-timeout-seconds", "shm-region-prefix-name", *NO_EFFECT}
    )

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.default_mode = self.config.get("execution-mode", "process")
        if self.default_mode not in MODES:
            raise invalid_arg(
                f"python backend: execution-mode must be one of {', '.join(MODES)}, got "
                f"'{self.default_mode}'"
            )
        self.stub_timeout = float(self.config.get("stub-timeout-seconds", "30"))
        self.shm_prefix = self.config.get("shm-region-prefix-name", _ipc.DEFAULT_PREFIX)
        for key in sorted(NO_EFFECT & self.config.keys()):
            log.warning(
                "python backend: --backend-config=python,%s has no effect in tritonx: tensors "
                "cross in shared-memory segments each side keeps and reuses (up to %d MiB per "
                "worker and per instance), messages through sockets",
                key,
                _ipc.POOL_LIMIT >> 20,
            )
        #: this backend's live worker processes
        self.workers: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()
        #: set by :meth:`close`: dying workers are not restarted any more
        self.closed = threading.Event()
        log.info("python backend: %s", _ipc.describe_segments())

    def mode(self, parameters: dict[str, str]) -> str:
        """Where a model's instances run: ``process`` or ``in_process``."""
        mode = parameters.get(MODE_PARAMETER, "").strip() or self.default_mode
        if mode not in MODES:
            raise invalid_arg(
                f"parameter {MODE_PARAMETER} must be one of {', '.join(MODES)}, got '{mode}'"
            )
        return mode

    def _in_process(self, parameters: dict[str, str]) -> bool:
        return self.mode(parameters) == "in_process" and ENV_PARAMETER not in parameters

    def auto_complete_config(self, ctx: AutoCompleteContext) -> None:
        """Run the model's ``auto_complete_config`` (when it defines one) on the config."""
        path = ctx.model_path
        if path is None or not path.is_file():
            return
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        if "auto_complete_config" not in source:
            return  # nothing to run: skip starting a worker for it
        config = ctx.config
        parameters = config.view().parameters
        before = config.to_dict()
        if self._in_process(parameters):
            after = auto_complete_here(path, before)
        else:
            env = parameters.get(ENV_PARAMETER)
            python = env_python(env, ctx.model_dir) if env else None
            after = auto_complete_in_worker(path, before, python, self.stub_timeout)
        if after == before:
            return
        try:
            config.update_from_dict(after)
        except TritonXError as exc:
            raise invalid_arg(
                f"auto-complete of model '{config.name}' produced an invalid config: {exc.message}"
            ) from exc

    def load(self, ctx: LoadContext) -> ModelInstance:
        """Start one instance: a worker process, or the model in this process."""
        if ctx.model_path is None:
            raise invalid_arg(f"python model '{ctx.model_name}' names no model file")
        if self._in_process(ctx.parameters):
            if execution_timeout(ctx.parameters) is not None:
                raise invalid_arg(
                    f"parameter {TIMEOUT_PARAMETER} of model '{ctx.model_name}' needs "
                    f"{MODE_PARAMETER} 'process': only a worker process can be stopped in the "
                    "middle of execute()"
                )
            return InProcessInstance(ctx)
        return WorkerInstance(ctx, self.stub_timeout, self.shm_prefix, self.workers, self.closed)

    def close(self) -> None:
        """Kill any worker still running (normally all were unloaded already; an execute()
        that outlived the server's exit timeout still holds one) and restart none."""
        self.closed.set()
        for worker in list(self.workers):
            worker.kill()
