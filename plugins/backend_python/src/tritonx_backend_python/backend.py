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
from pathlib import Path
from typing import Any

from tritonx.backend import AutoCompleteContext, Backend, LoadContext, ModelInstance
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.parameters import parse_bool
from tritonx_backend_python import _ipc
from tritonx_backend_python.environment import (
    CONFIG_KEYS,
    REQUIREMENTS_PARAMETER,
    EnvironmentCache,
    Requirements,
    find_requirements,
    worker_env,
)
from tritonx_backend_python.inprocess import InProcessInstance, auto_complete_here
from tritonx_backend_python.process import ENV_PARAMETER, WorkerEnv, WorkerProcess, env_python
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
    "REQUIREMENTS_PARAMETER",
    "TIMEOUT_PARAMETER",
    "InProcessInstance",
    "PythonBackend",
    "WorkerInstance",
]

#: config.pbtxt parameter choosing where instances run: ``process`` (default) or ``in_process``.
MODE_PARAMETER = "TRITONX_EXECUTION_MODE"
MODES = ("process", "in_process")

log = logging.getLogger("tritonx.backend.python")

#: ``--backend-config=python,<key>=true``: start a new worker process when one dies (tritonx's
#: self-healing); by default a dead worker stays dead until its model is loaded again, as
#: Triton's stub does
RESTART_KEY = "restart-dead-stubs"

#: Triton python_backend ``--backend-config`` keys that size its shared-memory region and
#: message queue, which tritonx does not have: accepted (command lines written for Triton keep
#: working) with a warning that they change nothing.
NO_EFFECT = frozenset({"shm-default-byte-size", "shm-growth-byte-size", "shm-message-queue-size"})

#: how the error of a throw-away worker's auto-complete starts (what follows is the model's
#: exception, ``TypeName: message``, or why the worker died)
AUTO_COMPLETE_FAILED = "Failed to initialize Python stub for auto-complete: "


class PythonBackend(Backend):
    """Backend ``python``: Triton python_backend models (``model.py``).

    ``--backend-config=python,<key>=<value>`` keys: ``execution-mode`` (``process`` or
    ``in_process``: the default for models that set no ``TRITONX_EXECUTION_MODE``),
    ``stub-timeout-seconds`` (default 30), ``restart-dead-stubs`` (default false, as Triton:
    an instance whose worker process died answers ``Stub process '<instance>' is not
    healthy.`` until its model is loaded again; true starts a new worker at once, backing off
    while they keep dying), ``shm-region-prefix-name`` (the label of the
    shared-memory segments in ``/proc/<pid>/fd``: they have no file name, so no client can
    register them), and for models with their own requirements
    (:mod:`~tritonx_backend_python.environment`, :mod:`~tritonx_backend_python.reqfile`):
    ``requirements-cache-dir`` (where their environments are cached, a folder servers may
    share; default: this server's own, removed at exit), ``requirements-index-urls`` (the
    URLs, separated by commas, that a requirements file may name with ``--index-url``,
    ``--extra-index-url`` or ``--find-links``; default none), ``requirements-allowed-options``
    (further installer options a requirements file may use, from ``--pre``,
    ``--prefer-binary``, ``--require-hashes``, ``--only-binary``, ``--no-binary``,
    ``--trusted-host``, ``--use-feature``, ``--config-settings``, ``--global-option``; default
    none) and ``requirements-install-timeout-seconds`` (default 600: a longer install is
    killed and the load fails).
    """

    name = "python"
    default_model_filename = "model.py"
    reports_missing_model_file = True
    config_keys = frozenset(
        {
            "execution-mode",
            "stub-timeout-seconds",
            RESTART_KEY,
            "shm-region-prefix-name",
            *CONFIG_KEYS,
            *NO_EFFECT,
        }
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
        self.restart_dead = parse_bool(RESTART_KEY, self.config.get(RESTART_KEY, "false"))
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
        #: the environments of models with their own requirements
        self.environments = EnvironmentCache.from_config(self.config)
        #: ``tritonx check``: the model files its auto-complete imported (no import check again)
        self._imported: set[str] = set()
        log.info("python backend: %s", _ipc.describe_segments())

    def mode(self, parameters: dict[str, str]) -> str:
        """Where a model's instances run: ``process`` or ``in_process``."""
        mode = parameters.get(MODE_PARAMETER, "").strip() or self.default_mode
        if mode not in MODES:
            raise invalid_arg(
                f"parameter {MODE_PARAMETER} must be one of {', '.join(MODES)}, got '{mode}'"
            )
        return mode

    def requirements(
        self, parameters: dict[str, str], model_dir: Path, model: str
    ) -> Requirements | None:
        """The model's requirements file, if it has one (see
        :func:`~tritonx_backend_python.environment.find_requirements`).

        :raises TritonXError: INVALID_ARG also when the model asks to run ``in_process``: a
            model in the server's process cannot have packages of its own.
        """
        found = find_requirements(parameters, model_dir, model)
        if found is not None and parameters.get(MODE_PARAMETER, "").strip() == "in_process":
            source = f"parameter {REQUIREMENTS_PARAMETER}" if found.explicit else found.path.name
            raise invalid_arg(
                f"python model '{model}' has its own requirements ({source}) and "
                f"{MODE_PARAMETER} 'in_process': a model running in the server's process "
                "cannot have packages of its own; run it in 'process' mode or remove its "
                "requirements"
            )
        return found

    def _in_process(self, parameters: dict[str, str], requirements: Requirements | None) -> bool:
        """Whether the instances run in this process (EXECUTION_ENV_PATH and requirements
        need a worker process: the server-wide default mode gives way to them)."""
        return (
            self.mode(parameters) == "in_process"
            and ENV_PARAMETER not in parameters
            and requirements is None
        )

    def auto_complete_config(self, ctx: AutoCompleteContext) -> None:
        """Run the model's ``auto_complete_config`` (when it defines one) on the config."""
        check_stub_name(ctx.config.name or ctx.model_dir.name)
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
        model = config.name or ctx.model_dir.name
        requirements = self.requirements(parameters, ctx.model_dir, model)
        before = config.to_dict()
        if self._in_process(parameters, requirements):
            after = auto_complete_here(path, before)
        elif requirements is not None and ctx.check_only:
            after = self._auto_complete_checking(ctx, requirements, before)
        else:
            python = worker_env(parameters, ctx.model_dir, model, self.environments)
            after = auto_complete_in_worker(path, before, python, self.stub_timeout)
        if ctx.check_only:
            self._imported.add(str(path))
        if after == before:
            return
        try:
            config.update_from_dict(after)
        except TritonXError as exc:
            raise invalid_arg(
                f"auto-complete of model '{config.name}' produced an invalid config: {exc.message}"
            ) from exc

    def _auto_complete_checking(
        self, ctx: AutoCompleteContext, requirements: Requirements, before: dict[str, Any]
    ) -> dict[str, Any]:
        """``tritonx check``'s auto-complete of a model with requirements: in its environment
        when cached, else (nothing is built) in the server's, saying so if that fails."""
        assert ctx.model_path is not None
        model = ctx.config.name or ctx.model_dir.name
        status = self.environments.status(requirements.path, ctx.model_dir, model)
        if status.state == "cached":
            python = WorkerEnv(site_dir=str(status.path))
            return auto_complete_in_worker(ctx.model_path, before, python, self.stub_timeout)
        try:
            return auto_complete_in_worker(ctx.model_path, before, None, self.stub_timeout)
        except TritonXError as exc:
            raise invalid_arg(
                f"{exc.message} (auto-complete ran without the model's environment from "
                f"{requirements.path}, which is {status.state}: `tritonx check` builds "
                "nothing; serving the model builds it)"
            ) from exc

    def check_notes(self, ctx: AutoCompleteContext) -> dict[str, str]:
        """``environment``: whether the model's requirements are installed: ``cached
        (<path>)``, ``to build at load (<hash>)`` or ``failing (<hash>: <error>)`` (its last
        build failed; the load tries again). No note for a model without requirements.

        And what the load would refuse: requirements that are not cached must resolve (the
        installer's dry run under the same rules: nothing is installed; an index that cannot
        be reached fails too), and ``model.py`` must import (:meth:`_check_import`).
        """
        parameters = ctx.config.view().parameters
        model = ctx.config.name or ctx.model_dir.name
        requirements = self.requirements(parameters, ctx.model_dir, model)
        notes: dict[str, str] = {}
        site_dir = None
        if requirements is not None:
            status = self.environments.status(requirements.path, ctx.model_dir, model)
            if status.state == "cached":
                site_dir = str(status.path)
            else:
                self.environments.resolve(requirements.path, model, ctx.model_dir)
            notes["environment"] = status.describe()
        note = self._check_import(ctx, model, requirements, site_dir)
        if note:
            notes["import"] = note
        return notes

    def _check_import(
        self,
        ctx: AutoCompleteContext,
        model: str,
        requirements: Requirements | None,
        site_dir: str | None,
    ) -> str:
        """``tritonx check``: import the model file in a throw-away worker (its
        ``auto_complete_config`` runs there when it has one, ``initialize`` never), in the
        model's environment (``site_dir``, when cached; its ``EXECUTION_ENV_PATH``), unless
        its auto-complete imported it already. A note when the import could not be checked
        (a missing module of a model whose environment is not built yet), "" when it passed.

        :raises TritonXError: INVALID_ARG with the model's exception (``TypeName: message``).
        """
        path = ctx.model_path
        if path is None or not path.is_file() or str(path) in self._imported:
            return ""
        parameters = ctx.config.view().parameters
        python: WorkerEnv | None = None
        if ENV_PARAMETER in parameters:
            python = WorkerEnv(python=env_python(parameters[ENV_PARAMETER], ctx.model_dir))
        elif site_dir is not None:
            python = WorkerEnv(site_dir=site_dir)
        try:
            auto_complete_in_worker(path, ctx.config.to_dict(), python, self.stub_timeout)
        except TritonXError as exc:
            detail = exc.message.removeprefix(AUTO_COMPLETE_FAILED)
            if (
                requirements is not None
                and site_dir is None
                and detail.startswith(("ModuleNotFoundError: ", "ImportError: "))
            ):
                return (
                    f"not checked: {detail.splitlines()[0]} without the model's environment, "
                    "which is to build at load"
                )
            raise invalid_arg(f"python model '{model}': importing {path} failed: {detail}") from exc
        return ""

    def load(self, ctx: LoadContext) -> ModelInstance:
        """Start one instance: a worker process, or the model in this process."""
        check_stub_name(ctx.instance.name)
        if ctx.model_path is None:
            raise invalid_arg(f"python model '{ctx.model_name}' names no model file")
        if not ctx.model_path.is_file():
            # Triton's stub checks this before it starts Python (and logs it at INFO)
            message = (
                f"Failed to preinitialize Python stub: Python model file not found in "
                f"'{ctx.model_path}'"
            )
            ctx.logger.info("%s", message)
            raise TritonXError(message, Code.INTERNAL)
        requirements = self.requirements(ctx.parameters, ctx.model_dir, ctx.model_name)
        if self._in_process(ctx.parameters, requirements):
            if execution_timeout(ctx.parameters) is not None:
                raise invalid_arg(
                    f"parameter {TIMEOUT_PARAMETER} of model '{ctx.model_name}' needs "
                    f"{MODE_PARAMETER} 'process': only a worker process can be stopped in the "
                    "middle of execute()"
                )
            return InProcessInstance(ctx)
        return WorkerInstance(
            ctx,
            self.stub_timeout,
            self.shm_prefix,
            self.environments,
            self.workers,
            self.closed,
            self.restart_dead,
        )

    def close(self) -> None:
        """Kill any worker still running (normally all were unloaded already; an execute()
        that outlived the server's exit timeout still holds one) and restart none."""
        self.closed.set()
        for worker in list(self.workers):
            worker.kill()
        self.environments.close()


#: Characters Triton's python backend refuses in the names its stubs are started with (its
#: ``INVALID_CHARS``: model and instance names reach a command line there).
INVALID_NAME_CHARS = frozenset(";|&$`<>()[]{}\\\"'*?~#!")


def check_stub_name(name: str) -> None:
    """Triton's ``IsValidIdentifier`` on a model's (auto-complete) or instance's name: a name
    holding a shell metacharacter fails the load, as Triton's stub launcher fails it."""
    if not name or not INVALID_NAME_CHARS.isdisjoint(name):
        raise invalid_arg("Invalid stub name: contains invalid characters")
