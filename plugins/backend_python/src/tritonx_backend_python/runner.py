"""Running one ``TritonPythonModel``: import, ``initialize``, ``execute`` (plain, ``async def``
and decoupled), ``finalize``, with Triton's checks and error messages.

:class:`ModelRunner` is shared by the worker process (``_stub``) and in-process instances
(``inprocess``); they differ only in how requests arrive and where responses go. Like
``_ipc`` this module needs only the standard library, numpy and ``pb_utils`` (with
``_pb_runtime``, for the runtime in force around each call).

What it needs of pb_utils' objects beyond Triton's API are their ``backend_*`` names: a
request's ``backend_sender``, ``backend_cancelled`` and ``backend_release_flags``, a sender's
``backend_taken``, ``backend_count_final()`` and ``backend_close()``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from tritonx_backend_python import _pb_config, _pb_runtime, pb_utils

#: The module name ``model.py`` files import pb_utils by.
MODULE_NAME = "triton_python_backend_utils"

#: ``deliver(request index, response or None, final)``: where a decoupled model's responses go.
Deliver = Callable[[int, pb_utils.InferenceResponse | None, bool], None]
Sender = Callable[[pb_utils.InferenceResponse | None, bool], None]

_NO_BINDING: AbstractContextManager[None] = contextlib.nullcontext()

#: the file in a model's requirements environment saying what it was built from (its
#: ``"source"``: the requirements file), written by :mod:`~tritonx_backend_python.environment`
ENVIRONMENT_MANIFEST = ".tritonx-environment.json"


def exception_text(exc: BaseException) -> str:
    """``TypeName: message``, the way Triton's stub reports Python exceptions."""
    return f"{type(exc).__name__}: {exc}"


def failure_message(subject: str, message: str) -> str:
    """Triton's error for requests that failed in the backend, e.g. ``Failed to process the
    request(s) for model 'add_sub_0', message: ValueError: ...``; ``subject`` is ``model
    '<instance>'`` or ``model instance '<instance>'``."""
    return f"Failed to process the request(s) for {subject}, message: {message}"


class ExecuteFailed(Exception):
    """``execute`` raised or returned something Triton rejects; ``str()`` is Triton's message
    and ``__cause__`` the original exception.

    ``answered``: the responses that the senders of a non-decoupled model's requests had sent
    with their final flag before the failure, by request index. Triton delivers those and
    fails only the other requests: its backend sends the failure to the requests whose
    response factory is still open (``closed_requests_``, python_backend
    ``src/python_be.cc``), so the later error only reaches the log.
    """

    def __init__(
        self, message: str, answered: dict[int, pb_utils.InferenceResponse] | None = None
    ) -> None:
        super().__init__(message)
        self.answered = answered or {}

    def responses(self, count: int) -> list[pb_utils.InferenceResponse] | None:
        """One response per request of the batch (``count`` of them): its sender's response
        where it had sent one, else the failure; ``None`` when no request was answered (the
        whole batch fails)."""
        if not self.answered:
            return None
        error = pb_utils.TritonError(str(self))
        return [
            self.answered[i] if i in self.answered else pb_utils.InferenceResponse(error=error)
            for i in range(count)
        ]


def import_model(model_path: Path, module_name: str) -> Any:
    """Import ``model.py`` (its folder and the model folder go on ``sys.path``, as in Triton)
    and return its ``TritonPythonModel`` class.

    A dotted ``module_name`` (``1.model``, Triton's name for the model module of version 1)
    makes the version folder a package of the part before the last dot, so the model's
    relative imports (``from .helper import x``) find its other modules, as under Triton.
    """
    for folder in (str(model_path.parent), str(model_path.parent.parent)):
        if folder not in sys.path:
            sys.path.append(folder)
    if not model_path.exists():
        raise pb_utils.TritonModelException(f"Python model file not found in '{model_path}'")
    _ModelFolders.install(model_path.parent.parent)
    package, _, _ = module_name.rpartition(".")
    if package:
        _version_package(package, model_path.parent)
    spec = importlib.util.spec_from_file_location(
        module_name, model_path, loader=_SourceLoader(module_name, str(model_path))
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        hint = _requirements_hint(model_path.parent.parent)
        if not hint:
            raise
        raise _with_hint(exc, hint) from exc
    cls = getattr(module, "TritonPythonModel", None)
    if cls is None:
        raise pb_utils.TritonModelException(
            f"Python model '{model_path}' does not define class 'TritonPythonModel'"
        )
    return cls


def _requirements_hint(model_dir: Path) -> str:
    """What to say of an import that failed in a model's requirements environment (the
    first folder of ``sys.path`` holding :data:`ENVIRONMENT_MANIFEST`): the model's packages
    are those of that folder and the server's, so its requirements file may miss one; "" out
    of such an environment. The file is named when the environment was built from a file of
    ``model_dir`` (models with the same requirements share one environment)."""
    for folder in sys.path:
        try:
            with open(os.path.join(folder or ".", ENVIRONMENT_MANIFEST), encoding="utf-8") as f:
                source = str(json.load(f).get("source", ""))
        except (OSError, ValueError, AttributeError):
            continue
        inside = source and Path(source).is_relative_to(model_dir.resolve())
        named = source if inside else "the model's requirements file"
        return (
            f"(the model runs in its own environment {folder}, installed from {named}, on top "
            "of the server's packages: check that it lists this package)"
        )
    return ""


def _with_hint(exc: ImportError, hint: str) -> ImportError:
    """``exc`` of the same type with ``hint`` after its message (``name`` and ``path`` kept)."""
    text = f"{exc} {hint}"
    try:
        return type(exc)(text, name=exc.name, path=exc.path)
    except TypeError:  # a subclass with a constructor of its own
        return ImportError(text, name=exc.name, path=exc.path)


class _SourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles a model's own module from its source at every import, never reading or
    writing ``__pycache__``: a cached ``.pyc`` is trusted while the source's mtime (whole
    seconds) and size match, so a rewrite of the same size within a second (a reload) would
    run the old code."""

    def get_code(self, fullname: str) -> Any:
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


class _ModelFolders(importlib.abc.MetaPathFinder):
    """Finds the modules of model folders as the path finder does, with a :class:`_SourceLoader`
    for their ``.py`` files (the model's helpers are then as fresh as ``model.py``)."""

    _instance: _ModelFolders | None = None

    def __init__(self) -> None:
        self.roots: set[Path] = set()

    @classmethod
    def install(cls, root: Path) -> None:
        """Serve the modules found under ``root`` (a model's folder) from now on."""
        if cls._instance is None:
            cls._instance = cls()
            # just before the path finder: built-in and frozen modules keep precedence
            finders = sys.meta_path
            at = next(
                (i for i, f in enumerate(finders) if f is importlib.machinery.PathFinder),
                len(finders),
            )
            finders.insert(at, cls._instance)
        cls._instance.roots.add(root.resolve())

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if (
            spec is None
            or spec.origin is None
            or not isinstance(spec.loader, importlib.machinery.SourceFileLoader)
        ):
            return spec
        origin = Path(spec.origin).resolve()
        if any(origin.is_relative_to(root) for root in self.roots):
            spec.loader = _SourceLoader(fullname, spec.origin)
        return spec


def _version_package(name: str, folder: Path) -> None:
    """Register ``name`` as the package whose modules are the files of ``folder``."""
    existing = sys.modules.get(name)
    if existing is not None and list(getattr(existing, "__path__", ())) == [str(folder)]:
        return
    init = folder / "__init__.py"
    if init.is_file():  # a regular package: its __init__ runs first, as on import
        spec = importlib.util.spec_from_file_location(
            name,
            init,
            loader=_SourceLoader(name, str(init)),
            submodule_search_locations=[str(folder)],
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    sys.modules[name] = importlib.util.module_from_spec(spec)


def forget_modules(module_name: str) -> None:
    """Drop a model module imported by :func:`import_model`, its version package and the
    package's other modules from ``sys.modules``."""
    package, _, _ = module_name.rpartition(".")
    sys.modules.pop(module_name, None)
    if package:
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            sys.modules.pop(name, None)


def auto_complete(model_path: Path, module_name: str, config: dict[str, Any]) -> dict[str, Any]:
    """Import ``model.py`` as ``module_name`` and run its ``auto_complete_config`` (if any)
    on a config dict (Triton's JSON form)."""
    sys.modules.setdefault(MODULE_NAME, pb_utils)
    fn = getattr(import_model(model_path, module_name), "auto_complete_config", None)
    if fn is None:
        return config
    return _pb_config.auto_completed(fn(pb_utils.ModelConfig(config)), config)


#: What :meth:`ModelRunner.execute` lists for a request the model rescheduled (its answer
#: comes from a later execution): an empty response the server does not deliver.
RESCHEDULED = pb_utils.InferenceResponse()


def rescheduled(requests: list[pb_utils.InferenceRequest]) -> tuple[int, ...]:
    """The indexes of the requests ``execute`` released with
    ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` (``request.set_release_flags``)."""
    flag = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
    return tuple(i for i, request in enumerate(requests) if request.backend_release_flags & flag)


class BackendCheckFailed(pb_utils.TritonModelException):
    """A check Triton's backend makes on what ``execute`` returned: its message is reported
    as it is (no exception type in front), as Triton's stub reports its own exceptions."""


class _Answers:
    """What the response senders of one non-decoupled ``execute`` call have sent: each
    request's response and whether its final flag came."""

    def __init__(self) -> None:
        self.responses: dict[int, pb_utils.InferenceResponse] = {}
        self.final: set[int] = set()
        self.changed = threading.Condition()

    def send(self, index: int, response: pb_utils.InferenceResponse | None, final: bool) -> None:
        with self.changed:
            if response is not None:
                self.responses[index] = response
            if final:
                self.final.add(index)
                self.changed.notify_all()

    def delivered(self) -> dict[int, pb_utils.InferenceResponse]:
        """The responses sent with their final flag so far, by request index."""
        with self.changed:
            return {i: self.responses[i] for i in self.final if i in self.responses}

    def wait(self, index: int) -> pb_utils.InferenceResponse | None:
        """The request's response once its final flag came (a sender always sends a response
        before the final flag of a non-decoupled model)."""
        with self.changed:
            self.changed.wait_for(lambda: index in self.final)
            return self.responses.get(index)


#: the error of a request whose ``execute`` returned None for it and never took its sender
NO_RESPONSE = (
    "the model returned None for the request and did not take its response sender "
    "(request.get_response_sender()): no response can come"
)


def check_execute_result(
    name: str, decoupled: bool, requests: list[pb_utils.InferenceRequest], result: Any
) -> list[pb_utils.InferenceResponse | None] | None:
    """Triton's checks on what ``execute`` returned: one entry per request (``None`` where
    the request is answered through its response sender), or ``None`` for decoupled models.

    A response returned for a request counts as that request's final response, as in
    Triton: a request whose sender already sent its response, or its final flag, fails the
    call (``Unable to send response. ...``)."""
    if decoupled:
        if result is not None:
            raise BackendCheckFailed(
                f"Python model '{name}' is using the decoupled mode and the execute "
                "function must return None."
            )
        return None
    if result is None:
        return [None] * len(requests)
    if not isinstance(result, list):
        raise BackendCheckFailed(
            f"Expected a list in the execute return, found type '{type(result)}'."
        )
    if len(result) != len(requests):
        raise BackendCheckFailed(
            "Number of InferenceResponse objects do not match the number of "
            f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, and "
            f"InferenceResponse(s) size is:{len(result)}\n"
        )
    for request, response in zip(requests, result, strict=True):
        if response is None:
            continue
        if request.backend_release_flags == pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise BackendCheckFailed(
                "Expected a None object in the execute function return list for reschduled "
                f"request, found type '{type(response)}'."
            )
        if not isinstance(response, pb_utils.InferenceResponse):
            raise BackendCheckFailed(
                "Expected an 'InferenceResponse' object in the execute function return "
                f"list, found type '{type(response)}'."
            )
        sender = request.backend_sender
        if sender is not None:
            try:
                sender.backend_count_final(response)
            except pb_utils.TritonModelException as exc:
                raise BackendCheckFailed(str(exc)) from None
    return list(result)


class ModelRunner:
    """One ``TritonPythonModel`` instance and the calls into it.

    :param name: the instance name (Triton's error messages use it).
    :param decoupled: whether the model is decoupled.
    :param runtime: the pb_utils runtime to make current around each call (in-process
        models); ``None`` where one runtime serves the whole process (a worker).
    """

    def __init__(self, name: str, decoupled: bool, runtime: pb_utils.Runtime | None = None) -> None:
        self.name = name
        self.decoupled = decoupled
        self.runtime = runtime
        self.model: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _bound(self) -> AbstractContextManager[None]:
        return _NO_BINDING if self.runtime is None else _pb_runtime.bound_runtime(self.runtime)

    def _submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Run a coroutine of the model on its background event loop (started on first use);
        it inherits the current context, so the bound runtime too."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, daemon=True, name="model-loop").start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _wait(self, result: Any) -> Any:
        return self._submit(result).result() if inspect.iscoroutine(result) else result

    def initialize(self, model_path: Path, module_name: str, args: dict[str, str]) -> None:
        """Import ``model.py`` as ``module_name``, create the model and call ``initialize``
        (awaited when it is a coroutine); its exceptions propagate."""
        with self._bound():
            cls = import_model(model_path, module_name)
            self.model = cls()
            init = getattr(self.model, "initialize", None)
            if init is not None:
                self._wait(init(args))
            _pb_runtime.current().bls_open = True

    def execute(
        self, requests: list[pb_utils.InferenceRequest], deliver: Deliver | None = None
    ) -> list[pb_utils.InferenceResponse] | None:
        """Call ``execute`` on ``requests``: one response per request, or ``None`` for decoupled
        models, whose responses go to ``deliver``.

        :raises ExecuteFailed: ``execute`` raised or returned something wrong (every request's
            sender is closed then).
        """
        decoupled = self.decoupled
        answers = None if decoupled else _Answers()
        for index, request in enumerate(requests):
            if decoupled:
                assert deliver is not None
                send: Sender = functools.partial(deliver, index)
            else:
                assert answers is not None
                send = functools.partial(answers.send, index)
            # the server's answer itself, not the request's method: a sender that refers to its
            # request would keep it (and its input tensors' shared memory) until a garbage
            # collection
            request.backend_sender = pb_utils.InferenceResponseSender(
                send, decoupled, request.backend_cancelled
            )
        # the runtime is bound without a context manager: this is the per-request path
        runtime = self.runtime
        token = _pb_runtime.bind(runtime) if runtime is not None else None
        try:
            result = self.model.execute(requests)
            if inspect.iscoroutine(result):
                future = self._submit(result)
                if decoupled:
                    future.add_done_callback(functools.partial(self._async_done, requests))
                    result = None
                else:
                    result = future.result()
            listed = check_execute_result(self.name, decoupled, requests, result)
        except Exception as exc:
            for request in requests:
                if request.backend_sender is not None:
                    request.backend_sender.backend_close()
            answered = answers.delivered() if answers is not None else None
            raise ExecuteFailed(self._failure(exc), answered) from exc
        finally:
            if token is not None:
                _pb_runtime.unbind(token)
        if listed is None:
            return None
        assert answers is not None
        return [
            response
            if response is not None
            else RESCHEDULED
            if request.backend_release_flags & pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
            else self._sent(request, index, answers)
            for index, (request, response) in enumerate(zip(requests, listed, strict=True))
        ]

    @staticmethod
    def _sent(
        request: pb_utils.InferenceRequest, index: int, answers: _Answers
    ) -> pb_utils.InferenceResponse:
        """The response a non-decoupled request gets through its sender (before or after
        ``execute`` returned): waits for the sender's final flag."""
        sender = request.backend_sender
        if sender is None or not (sender.backend_taken or sender.closed):
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(NO_RESPONSE))
        response = answers.wait(index)
        assert response is not None
        return response

    def _failure(self, exc: BaseException) -> str:
        text = str(exc) if isinstance(exc, BackendCheckFailed) else exception_text(exc)
        return failure_message(f"model '{self.name}'", text)

    def _async_done(
        self, requests: list[pb_utils.InferenceRequest], future: concurrent.futures.Future[Any]
    ) -> None:
        """A decoupled ``async def execute`` ended: if it raised, fail every request it left
        open."""
        if future.cancelled():
            exc: BaseException | None = concurrent.futures.CancelledError()
        else:
            exc = future.exception()
        if exc is None:
            return
        # Triton's stub logs the coroutine's traceback (Stub::BackgroundFutureDone)
        with self._bound():
            pb_utils.Logger.log_error("".join(traceback.format_exception(exc)))
        error = pb_utils.TritonError(self._failure(exc))
        for request in requests:
            sender = request.backend_sender
            if sender is not None and not sender.closed:
                try:
                    sender.send(
                        pb_utils.InferenceResponse(error=error),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                    )
                except pb_utils.TritonModelException:
                    pass  # closed meanwhile

    def readiness(self) -> str | None:
        """The model's own ``is_ready()`` (awaited when a coroutine): None when it returned
        True, else why the model is not ready, in the texts of Triton's python backend
        (``RunUserModelReadinessCheck``): False, a non-boolean, the exception's text."""
        check = getattr(self.model, "is_ready", None)
        if check is None:
            return None
        try:
            with self._bound():
                result = self._wait(check())
        except Exception as exc:
            return exception_text(exc)
        if result is True:
            return None
        if result is False:
            return f"Model '{self.name}' is not ready (user-defined check failed)."
        return "is_ready() must return a boolean value"

    def finalize(self) -> None:
        """Call ``finalize`` (if the model has one) and stop the background loop; its
        exceptions propagate."""
        try:
            with self._bound():
                _pb_runtime.current().bls_open = False
            fin = getattr(self.model, "finalize", None)
            if fin is not None:
                with self._bound():
                    self._wait(fin())
        finally:
            self.close()

    def close(self) -> None:
        """Stop the background event loop, if one was started."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop = None
