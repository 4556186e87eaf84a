"""The ``python`` backend: serves Triton python_backend ``model.py`` files.

Each instance runs in its own worker process by default (:class:`WorkerInstance`), like
Triton's stub processes; ``parameters { key: "TRITONX_EXECUTION_MODE" value: { string_value:
"in_process" } }`` runs it in the server process instead (:class:`InProcessInstance`).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import hashlib
import inspect
import itertools
import json
import logging
import multiprocessing
import os
import pickle
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from google.protobuf import json_format

from tritonx.backend import AutoCompleteContext, Backend, LoadContext, ModelInstance
from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.types import InferenceRequest, InferenceResponse
from tritonx_backend_python import _ipc, _stub, pb_utils
from tritonx_backend_python.metrics import CustomMetrics, collector_for, labels_of

if TYPE_CHECKING:
    from tritonx.dataplane import DataPlane

log = logging.getLogger("tritonx.backend.python")

#: config.pbtxt parameter choosing where instances run: ``process`` (default) or ``in_process``.
MODE_PARAMETER = "TRITONX_EXECUTION_MODE"
#: config.pbtxt parameter naming a per-model Python environment (folder or conda-pack tarball).
ENV_PARAMETER = "EXECUTION_ENV_PATH"
MODES = ("process", "in_process")

_CODES = [
    Code.UNKNOWN,
    Code.INTERNAL,
    Code.NOT_FOUND,
    Code.INVALID_ARG,
    Code.UNAVAILABLE,
    Code.UNSUPPORTED,
    Code.ALREADY_EXISTS,
    Code.CANCELLED,
]
_PB_CODE = {code: i for i, code in enumerate(_CODES)}
_PY_LEVEL = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}


# ---------------------------------------------------------------------- conversions


def core_error(error: tuple[str, int] | pb_utils.TritonError | None) -> TritonXError | None:
    """A pb_utils error (or its wire form) as a TritonXError."""
    if error is None:
        return None
    if isinstance(error, pb_utils.TritonError):
        message, code = error.message(), error.code()
    else:
        message, code = error
    return TritonXError(message, _CODES[code] if 0 <= code < len(_CODES) else Code.INTERNAL)


def to_core_output(array: np.ndarray, datatype: str) -> np.ndarray:
    """An output array as the core holds it (BYTES: object arrays of ``bytes``)."""
    if datatype == "BYTES":
        return _ipc.as_object_bytes(array)
    if datatype == "BF16" and array.dtype != np.uint16:
        return array.view(np.uint16)
    return array


def to_core_response(response: pb_utils.InferenceResponse) -> InferenceResponse:
    """A pb_utils response as a core response."""
    err = core_error(response.error())
    outputs = {t.name(): to_core_output(t._array, t._datatype) for t in response.output_tensors()}
    params = json.loads(response.parameters() or "{}")
    return InferenceResponse(outputs=outputs, error=err, parameters=params)


def from_core_response(response: InferenceResponse) -> pb_utils.InferenceResponse:
    """A core response (e.g. of a BLS call) as a pb_utils response."""
    if response.error is not None:
        return pb_utils.InferenceResponse(error=_pb_error(response.error))
    tensors = [pb_utils.Tensor(name, arr) for name, arr in response.outputs.items()]
    return pb_utils.InferenceResponse(tensors, parameters=dict(response.parameters) or None)


def _pb_error(error: TritonXError) -> pb_utils.TritonError:
    return pb_utils.TritonError(error.message, _PB_CODE.get(error.code, 1))


def _input_datatypes(config: ModelConfig) -> dict[str, str]:
    return {io.name: io.datatype.value for io in config.inputs}


def bls_core_request(
    model_name: str,
    model_version: int,
    inputs: dict[str, np.ndarray],
    requested: Sequence[str],
    request_id: str,
    correlation_id: int | str,
    flags: int,
    timeout: int,
    parameters: str,
) -> InferenceRequest:
    """The core request a BLS ``pb_utils.InferenceRequest`` stands for."""
    return InferenceRequest(
        model_name=model_name,
        inputs=inputs,
        model_version=None if model_version is None or model_version < 0 else model_version,
        id=request_id,
        parameters=json.loads(parameters or "{}"),
        requested_outputs=tuple(requested) if requested else None,
        correlation_id=correlation_id,
        flags=flags,
        timeout_us=timeout,
    )


def initialize_args(ctx: LoadContext) -> dict[str, str]:
    """The ``args`` dict Triton passes to ``TritonPythonModel.initialize``."""
    return {
        "model_config": json.dumps(ctx.config.to_json_dict()),
        "model_instance_kind": ctx.instance.kind.removeprefix("KIND_"),
        "model_instance_name": ctx.instance.name,
        "model_instance_device_id": str(ctx.instance.device_id),
        "model_repository": str(ctx.model_dir),
        "model_version": str(ctx.version),
        "model_name": ctx.model_name,
    }


def _find_loop(ctx: LoadContext) -> asyncio.AbstractEventLoop | None:
    """The server's event loop (BLS calls run the data plane's coroutines on it)."""
    if ctx.loop is not None:
        return ctx.loop
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class ServerBridge:
    """What a model reaches of the server: BLS on the data plane, logs, metrics, control."""

    def __init__(
        self,
        dataplane: DataPlane | None,
        loop: asyncio.AbstractEventLoop | None,
        logger: logging.Logger,
    ) -> None:
        self.dataplane = dataplane
        self.loop = loop
        self.logger = logger
        registry = getattr(dataplane, "metrics_registry", None)
        self.metrics: CustomMetrics = collector_for(registry)

    def _check(self) -> tuple[DataPlane, asyncio.AbstractEventLoop]:
        if self.dataplane is None or self.loop is None:
            raise TritonXError("BLS is unavailable: the model was not loaded by a server")
        return self.dataplane, self.loop

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        """Run a coroutine on the server's loop."""
        _, loop = self._check()
        return asyncio.run_coroutine_threadsafe(coro, loop)

    async def infer(
        self,
        request: InferenceRequest,
        decoupled: bool,
        emit: Callable[[InferenceResponse | TritonXError, bool], Any],
    ) -> None:
        """Run a BLS request; ``emit(response or error, final)`` for each response."""
        dataplane, _ = self._check()
        try:
            if not decoupled:
                emit(await dataplane.infer(request), True)
                return
            async for response in dataplane.infer_stream(request):
                emit(response, response.final)
                if response.final:
                    return
            emit(InferenceResponse(), True)
        except Exception as exc:
            emit(TritonXError.wrap(exc), True)

    async def control(self, op: str, kwargs: dict[str, Any]) -> Any:
        """``load`` / ``unload`` / ``ready`` / ``metric_value`` requested by a model."""
        dataplane, _ = self._check()
        name = kwargs.get("model_name", "")
        if op == "ready":
            version = kwargs.get("model_version") or None
            return dataplane.model_ready(name, int(version) if version else None)
        if op == "load":
            params: dict[str, object] = {}
            if kwargs.get("config"):
                params["config"] = kwargs["config"]
            for key, value in (kwargs.get("files") or {}).items():
                params[key] = value
            await dataplane.load_model(name, params or None)
            return None
        if op == "unload":
            await dataplane.unload_model(name, bool(kwargs.get("unload_dependents")))
            return None
        raise TritonXError(f"Unknown model loader request kind '{op}'")

    def metric_value(self, family: str, labels: Any) -> float | None:
        """The value of one custom metric."""
        return self.metrics.op(family, labels_of(labels), "value", None)

    def log(self, level: int, message: str) -> None:
        """A model's log line, into the server's log."""
        self.logger.log(_PY_LEVEL.get(level, logging.INFO), "%s", message)


# ---------------------------------------------------------------------- worker processes

_forkserver_lock = threading.Lock()
_live_workers: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()


def _context() -> Any:
    """The multiprocessing context workers start from: a forkserver that has imported numpy
    and the stub already, so a worker starts in milliseconds (plain ``fork`` would copy the
    server's threads and locks; ``spawn`` takes ~150 ms per worker)."""
    with _forkserver_lock:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["numpy", "tritonx_backend_python._stub"])
        return ctx


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Keep multiprocessing from re-running the embedding program's ``__main__`` in workers.

    A forkserver child normally imports the parent's main module (by path or name) before
    running its target; workers only need the stub, and a script that embeds
    ``tritonx.Server`` without an ``if __name__ == "__main__":`` guard would start again
    inside every worker.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    missing = object()
    saved = {key: getattr(main, key, missing) for key in ("__file__", "__spec__")}
    try:
        main.__spec__ = None
        if saved["__file__"] is not missing:
            del main.__file__
        yield
    finally:
        for key, value in saved.items():
            if value is not missing:
                setattr(main, key, value)


@atexit.register
def _kill_workers() -> None:
    for worker in list(_live_workers):
        worker.kill()


class WorkerProcess:
    """A worker process and the socket to it (forkserver child or env subprocess)."""

    def __init__(self, name: str, env_python: str | None = None) -> None:
        self.name = name
        self._popen: subprocess.Popen[bytes] | None = None
        self._process: Any = None
        if env_python is None:
            ctx = _context()
            parent, child = ctx.Pipe(duplex=True)
            self._process = ctx.Process(
                target=_stub.run, args=(child,), name=f"tritonx-python-{name}", daemon=False
            )
            with _forkserver_lock, _main_module_hidden():
                self._process.start()
            child.close()
            self.conn: Connection = parent
            self.pid: int = self._process.pid
        else:
            ours, theirs = socket.socketpair()
            package_root = str(Path(_stub.__file__).resolve().parents[1])
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (package_root, env.get("PYTHONPATH", "")) if p
            )
            env_bin = str(Path(env_python).parent)
            env["PATH"] = os.pathsep.join((env_bin, env.get("PATH", "")))
            self._popen = subprocess.Popen(
                [env_python, "-m", "tritonx_backend_python._stub", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                env=env,
                close_fds=True,
            )
            theirs.close()
            self.conn = Connection(ours.detach())
            self.pid = self._popen.pid
        _live_workers.add(self)

    def exitcode(self, wait: float = 0.0) -> int | None:
        """The exit status (negative: killed by that signal), None while running."""
        if self._popen is not None:
            try:
                return self._popen.wait(wait) if wait else self._popen.poll()
            except subprocess.TimeoutExpired:
                return None
        if wait:
            self._process.join(wait)
        return self._process.exitcode

    def kill(self) -> None:
        """Kill the process (SIGKILL) and reap it."""
        try:
            if self._popen is not None:
                if self._popen.poll() is None:
                    self._popen.kill()
                self._popen.wait(5)
            elif self._process.exitcode is None:
                self._process.kill()
                self._process.join(5)
        except Exception:  # already gone
            pass
        _live_workers.discard(self)


def describe_exit(code: int | None) -> str:
    """``exited with code 3`` / ``was killed by signal 11 (SIGSEGV)``."""
    if code is None:
        return "stopped responding"
    if code < 0:
        try:
            signame = signal.Signals(-code).name
        except ValueError:
            signame = "unknown"
        return f"was killed by signal {-code} ({signame})"
    return f"exited with code {code}"


def _env_python(path_text: str, model_dir: Path) -> str:
    """The interpreter of an ``EXECUTION_ENV_PATH`` (a folder, or a conda-pack tarball that is
    unpacked once into the temp folder)."""
    path = Path(path_text.replace("$$TRITON_MODEL_DIRECTORY", str(model_dir)))
    if path.is_file():
        stat = path.stat()
        digest = hashlib.sha1(f"{path.resolve()}:{stat.st_mtime_ns}:{stat.st_size}".encode())
        target = Path(tempfile.gettempdir()) / "tritonx-python-envs" / digest.hexdigest()[:16]
        if not (target / ".complete").exists():
            target.mkdir(parents=True, exist_ok=True)
            with tarfile.open(path) as tar:
                tar.extractall(target, filter="data")
            (target / ".complete").touch()
        path = target
    for candidate in ("bin/python3", "bin/python", "python.exe"):
        if (path / candidate).exists():
            return str(path / candidate)
    raise invalid_arg(f"{ENV_PARAMETER} '{path_text}' holds no Python interpreter (bin/python)")


class WorkerInstance(ModelInstance):
    """A model instance living in its own worker process."""

    _seq = itertools.count()

    def __init__(self, ctx: LoadContext, backend: PythonBackend) -> None:
        self.ctx = ctx
        self.name = ctx.instance.name
        self.decoupled = ctx.config.decoupled
        self.bridge = ServerBridge(ctx.dataplane, _find_loop(ctx), ctx.logger)
        self.timeout = backend.stub_timeout
        self.writer = _ipc.ShmWriter(backend.shm_prefix, f"{os.getpid()}w{next(self._seq)}")
        self._datatypes = _input_datatypes(ctx.config)
        self._outputs = [io.name for io in ctx.config.outputs]
        self._send_lock = threading.Lock()
        self._keys = itertools.count(1)
        self._batches: dict[int, concurrent.futures.Future[Any]] = {}
        self._open: dict[int, InferenceRequest] = {}
        self._control: concurrent.futures.Future[Any] | None = None
        self._dead: str = ""
        self._closing = False
        env = ctx.parameters.get(ENV_PARAMETER)
        python = _env_python(env, ctx.model_dir) if env else None
        self.proc = WorkerProcess(self.name, python)
        backend.workers.add(self.proc)
        self._reader = threading.Thread(
            target=self._read, name=f"tritonx-python-reader-{self.name}", daemon=True
        )
        self._reader.start()
        options = {
            "model_path": str(ctx.model_path),
            "args": initialize_args(ctx),
            "decoupled": self.decoupled,
            "shm_prefix": backend.shm_prefix,
        }
        reply = self._command(("init", options), "initialize")
        if reply[0] == "init_error":
            self._shutdown()
            log.error("initializing '%s' failed:\n%s", self.name, reply[2])
            raise TritonXError(f"Failed to initialize Python stub: {reply[1]}", Code.INTERNAL)

    # -------------------------------------------------------------- plumbing

    def _send(self, message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with self._send_lock:
            self.conn_send(data)

    def conn_send(self, data: bytes) -> None:
        """Write one framed message to the worker."""
        self.proc.conn.send_bytes(data)

    def _command(self, message: Any, what: str) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._control = future
        try:
            self._send(message)
            return future.result(self.timeout)
        except concurrent.futures.TimeoutError:
            self._shutdown()
            raise TritonXError(
                f"Stub process '{self.name}' did not {what} within {self.timeout:g} s "
                "(stub-timeout-seconds)",
                Code.INTERNAL,
            ) from None
        except (OSError, EOFError) as exc:
            raise TritonXError(
                f"Stub process '{self.name}' is not healthy: {exc}", Code.INTERNAL
            ) from None

    def _read(self) -> None:
        conn = self.proc.conn
        while True:
            try:
                message = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                self._died()
                return
            try:
                self._dispatch(message)
            except Exception:
                log.exception("python model '%s': handling a worker message failed", self.name)

    def _dispatch(self, message: Any) -> None:
        kind = message[0]
        if kind == "done":
            future = self._batches.pop(message[1], None)
            if future is not None:
                future.set_result(message)
        elif kind == "send":
            self._deliver(message[1], message[2], message[3])
        elif kind == "bls":
            self._bls(message[1], message[2], message[3])
        elif kind == "rpc":
            self._rpc(message[1], message[2], message[3])
        elif kind == "log":
            self.bridge.log(message[1], message[2])
        elif kind == "metric_family":
            self.bridge.metrics.family(message[1], message[2], message[3])
        elif kind == "metric":
            self.bridge.metrics.op(message[1], labels_of(message[2]), message[3], message[4])
        elif self._control is not None and not self._control.done():
            self._control.set_result(message)

    def _died(self) -> None:
        code = self.proc.exitcode(wait=2.0)
        if self._closing:
            self._dead = "unloaded"
        else:
            self._dead = (
                f"Stub process '{self.name}' is not healthy: the worker process (pid "
                f"{self.proc.pid}) {describe_exit(code)}; the model is unavailable until it is "
                "loaded again"
            )
            log.error("python model '%s': %s", self.ctx.model_name, self._dead)
        error = TritonXError(
            f"Failed to process the request(s) for model instance '{self.name}', message: "
            f"{self._dead}",
            Code.INTERNAL,
        )
        for future in list(self._batches.values()):
            if not future.done():
                future.set_exception(error)
        self._batches.clear()
        for request in list(self._open.values()):
            sender = request.response_sender
            if sender is not None and not sender.is_closed:
                try:
                    sender.send(InferenceResponse.failed(error), final=True)
                except TritonXError:
                    pass
        self._open.clear()
        if self._control is not None and not self._control.done():
            self._control.set_exception(EOFError(self._dead))
        self.writer.cleanup()
        _ipc.ShmWriter(self.writer.prefix, str(self.proc.pid)).cleanup()

    def _deliver(self, key: int, payload: Any, final: bool) -> None:
        request = self._open.get(key)
        if request is None or request.response_sender is None:
            return
        if final:
            self._open.pop(key, None)
        response = None
        if payload is not None:
            response = to_core_response(_stub.decode_response(payload))
        try:
            request.response_sender.send(response, final=final)
        except TritonXError as exc:
            log.warning("python model '%s': %s", self.name, exc.message)

    def _reply(self, message: Any) -> None:
        try:
            self._send(message)
        except (OSError, EOFError, ValueError):
            pass  # the worker is gone; _died handles the rest

    def _bls(self, call_id: int, payload: Any, decoupled: bool) -> None:
        (name, version, segment, descs, requested, rid, corr, flags, timeout, params) = payload
        try:
            inputs = {n: arr for n, arr, _ in _ipc.unpack_tensors(segment, descs)}
            inputs = {
                n: _ipc.as_object_bytes(a) if a.dtype == object else a for n, a in inputs.items()
            }
            request = bls_core_request(
                name, version, inputs, requested, rid, corr, flags, timeout, params
            )
        except Exception as exc:
            self._reply(("bls_reply", call_id, self._encode(TritonXError.wrap(exc)), True))
            return

        def emit(response: InferenceResponse | TritonXError, final: bool) -> None:
            self._reply(("bls_reply", call_id, self._encode(response), final))

        try:
            self.bridge.submit(self.bridge.infer(request, decoupled, emit))
        except TritonXError as exc:
            emit(exc, True)

    def _encode(self, response: InferenceResponse | TritonXError) -> Any:
        if isinstance(response, TritonXError):
            return (None, [], (response.message, _PB_CODE.get(response.code, 1)), "{}")
        if response.error is not None:
            err = response.error
            return (None, [], (err.message, _PB_CODE.get(err.code, 1)), "{}")
        tensors = [(n, a, _ipc.datatype_of(a)) for n, a in response.outputs.items()]
        segment, descs = _ipc.pack_tensors(tensors, self.writer)
        return (segment, descs, None, json.dumps(response.parameters or {}))

    def _rpc(self, call_id: int, op: str, kwargs: dict[str, Any]) -> None:
        if op == "metric_value":
            try:
                value = self.bridge.metric_value(kwargs["family"], kwargs["labels"])
                self._reply(("rpc_reply", call_id, value, None))
            except TritonXError as exc:
                self._reply(("rpc_reply", call_id, None, exc.message))
            return

        async def run() -> None:
            try:
                value = await self.bridge.control(op, kwargs)
                self._reply(("rpc_reply", call_id, value, None))
            except Exception as exc:
                self._reply(("rpc_reply", call_id, None, str(exc)))

        try:
            self.bridge.submit(run())
        except TritonXError as exc:
            self._reply(("rpc_reply", call_id, None, exc.message))

    # -------------------------------------------------------------- ModelInstance

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse] | None:
        """Hand the batch to the worker and wait for its answer."""
        if self._dead:
            raise TritonXError(
                f"Failed to process the request(s) for model instance '{self.name}', "
                f"message: {self._dead}",
                Code.UNAVAILABLE,
            )
        tensors = []
        metas = []
        keys = []
        for index, request in enumerate(requests):
            key = next(self._keys)
            keys.append(key)
            for name, array in request.inputs.items():
                datatype = self._datatypes.get(name) or _ipc.datatype_of(array)
                tensors.append(((index, name), array, datatype))
            requested = list(request.requested_outputs or self._outputs)
            metas.append(
                (
                    key,
                    request.id,
                    request.correlation_id,
                    request.flags,
                    request.timeout_us,
                    json.dumps(request.parameters),
                    requested,
                )
            )
            if self.decoupled:
                self._open[key] = request
        segment, descs = _ipc.pack_tensors(tensors, self.writer)
        batch_id = keys[0]
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._batches[batch_id] = future
        try:
            self._send(("execute", batch_id, (segment, descs, metas)))
        except (OSError, ValueError):
            pass  # the reader notices the death and fails the future
        if self._dead:
            self._died_late(future)
        try:
            _, _, payload, error = future.result()
        finally:
            self._batches.pop(batch_id, None)
        if error is not None:
            for key in keys:
                self._open.pop(key, None)
            raise TritonXError(error, Code.INTERNAL)
        if payload is None:
            return None
        out_segment, out_descs, out_metas = payload
        outputs: list[dict[str, np.ndarray]] = [{} for _ in requests]
        for (index, name), array, datatype in _ipc.unpack_tensors(out_segment, out_descs):
            outputs[index][name] = to_core_output(array, datatype)
        responses = []
        for index, (err, params) in enumerate(out_metas):
            responses.append(
                InferenceResponse(
                    outputs=outputs[index] if err is None else {},
                    error=core_error(err),
                    parameters=json.loads(params or "{}"),
                )
            )
        return responses

    def _died_late(self, future: concurrent.futures.Future[Any]) -> None:
        if not future.done():
            future.set_exception(
                TritonXError(
                    f"Failed to process the request(s) for model instance '{self.name}', "
                    f"message: {self._dead}",
                    Code.INTERNAL,
                )
            )

    def is_ready(self) -> bool:
        """False once the worker process is gone."""
        return not self._dead

    def not_ready_reason(self) -> str:
        """Why the instance cannot serve ("" while it can)."""
        return self._dead

    def unload(self) -> None:
        """Call the model's ``finalize`` and stop the worker."""
        if self._dead:
            self.proc.kill()
            return
        self._closing = True
        try:
            self._command(("finalize",), "finalize")
        except TritonXError as exc:
            log.warning("python model '%s': %s", self.name, exc.message)
        self._shutdown()

    def _shutdown(self) -> None:
        self._closing = True
        if self.proc.exitcode(wait=5.0) is None:
            self.proc.kill()
        else:
            _live_workers.discard(self.proc)
        try:
            self.proc.conn.close()
        except OSError:
            pass
        self._reader.join(5)
        self.writer.cleanup()


# ---------------------------------------------------------------------- in-process instances


class InProcessRuntime(pb_utils.Runtime):
    """pb_utils' services for a model running inside the server process."""

    def __init__(self, bridge: ServerBridge, model_dir: str) -> None:
        self.bridge = bridge
        self.model_dir = model_dir

    def infer(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        inputs = {t.name(): to_core_output(t._array, t._datatype) for t in request.inputs()}
        core = bls_core_request(
            request.model_name(),
            request.model_version(),
            inputs,
            request.requested_output_names(),
            request.request_id(),
            request.correlation_id(),
            request.flags(),
            request.timeout(),
            request.parameters(),
        )
        iterator = pb_utils.ResponseIterator()

        def emit(response: InferenceResponse | TritonXError, final: bool) -> None:
            if isinstance(response, TritonXError):
                iterator._put(pb_utils.InferenceResponse(error=_pb_error(response)), final)
            else:
                iterator._put(from_core_response(response), final)

        try:
            future = self.bridge.submit(self.bridge.infer(core, decoupled, emit))
        except TritonXError as exc:
            emit(exc, True)
            future = None
        if decoupled:
            return iterator
        if future is not None:
            future.result()
        return next(iterator)

    def log(self, level: int, message: str) -> None:
        self.bridge.log(level, message)

    def metric_family(self, name: str, description: str, kind: int) -> None:
        self.bridge.metrics.family(name, description, kind)

    def metric_op(
        self, family: str, labels: tuple[tuple[str, str], ...], op: str, value: Any
    ) -> float | None:
        return self.bridge.metrics.op(family, labels, op, value)

    def control(self, op: str, **kwargs: Any) -> Any:
        return self.bridge.submit(self.bridge.control(op, kwargs)).result()


class InProcessInstance(ModelInstance):
    """A model instance running in the server process, on the core's instance thread."""

    _seq = itertools.count()

    def __init__(self, ctx: LoadContext) -> None:
        self.ctx = ctx
        self.name = ctx.instance.name
        self.decoupled = ctx.config.decoupled
        self.bridge = ServerBridge(ctx.dataplane, _find_loop(ctx), ctx.logger)
        assert ctx.model_path is not None
        self.runtime = InProcessRuntime(self.bridge, str(ctx.model_path.parent))
        self._outputs = [io.name for io in ctx.config.outputs]
        self._datatypes = _input_datatypes(ctx.config)
        self._loop: asyncio.AbstractEventLoop | None = None
        sys.modules.setdefault(_stub.MODULE_NAME, pb_utils)
        module_name = f"tritonx_python_model_{ctx.model_name}_{ctx.version}_{next(self._seq)}"
        try:
            with pb_utils._bound_runtime(self.runtime):
                cls = _stub.import_model(ctx.model_path, module_name)
                self.model = cls()
                init = getattr(self.model, "initialize", None)
                if init is not None:
                    self._await(init(initialize_args(ctx)))
        except Exception as exc:
            raise TritonXError(
                f"Failed to initialize Python stub: {_stub.exception_text(exc)}", Code.INTERNAL
            ) from exc
        finally:
            self._module_name = module_name

    def _await(self, result: Any, background: bool = False) -> Any:
        if not inspect.iscoroutine(result):
            return result
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, daemon=True).start()
        future = asyncio.run_coroutine_threadsafe(result, self._loop)
        return future if background else future.result()

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse] | None:
        """Run the model's ``execute`` on this thread."""
        pb_requests: list[pb_utils.InferenceRequest] = []
        via_sender: dict[int, pb_utils.InferenceResponse] = {}
        for index, request in enumerate(requests):
            inputs = [
                pb_utils.Tensor(name, array, datatype=self._datatypes.get(name))
                for name, array in request.inputs.items()
            ]
            pb = pb_utils.InferenceRequest(
                request_id=request.id,
                correlation_id=request.correlation_id,
                inputs=inputs,
                requested_output_names=list(request.requested_outputs or self._outputs),
                flags=request.flags,
                timeout=request.timeout_us,
                parameters=json.dumps(request.parameters),
            )
            pb._sender = pb_utils.InferenceResponseSender(
                self._deliverer(request, index, via_sender), self.decoupled
            )
            pb_requests.append(pb)
        try:
            with pb_utils._bound_runtime(self.runtime):
                result = self.model.execute(pb_requests)
                if inspect.iscoroutine(result):
                    if self.decoupled:
                        self._await(result, background=True).add_done_callback(
                            lambda f: self._async_failed(f, pb_requests)
                        )
                        result = None
                    else:
                        result = self._await(result)
            responses = _stub.check_execute_result(
                self.name, self.decoupled, pb_requests, result, via_sender
            )
        except Exception as exc:
            for pb in pb_requests:
                if pb._sender is not None:
                    pb._sender._close()
            raise TritonXError(
                f"Failed to process the request(s) for model '{self.name}', message: "
                f"{_stub.exception_text(exc)}",
                Code.INTERNAL,
            ) from exc
        if responses is None:
            return None
        return [to_core_response(r) for r in responses]

    def _deliverer(
        self,
        request: InferenceRequest,
        index: int,
        via_sender: dict[int, pb_utils.InferenceResponse],
    ) -> Callable[[pb_utils.InferenceResponse | None, bool], None]:
        if not self.decoupled:

            def keep(response: pb_utils.InferenceResponse | None, final: bool) -> None:
                if response is not None:
                    via_sender[index] = response

            return keep
        sender = request.response_sender
        assert sender is not None

        def deliver(response: pb_utils.InferenceResponse | None, final: bool) -> None:
            sender.send(to_core_response(response) if response is not None else None, final=final)

        return deliver

    def _async_failed(self, future: Any, requests: list[pb_utils.InferenceRequest]) -> None:
        exc = future.exception()
        if exc is None:
            return
        message = (
            f"Failed to process the request(s) for model '{self.name}', message: "
            f"{_stub.exception_text(exc)}"
        )
        for pb in requests:
            if pb._sender is not None and not pb._sender.closed:
                pb._sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(message)),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )

    def unload(self) -> None:
        """Call the model's ``finalize``."""
        fin = getattr(self.model, "finalize", None)
        try:
            if fin is not None:
                with pb_utils._bound_runtime(self.runtime):
                    self._await(fin())
        except Exception:
            log.exception("finalize of python model '%s' failed", self.name)
        finally:
            sys.modules.pop(self._module_name, None)
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)


# ---------------------------------------------------------------------- the backend


class PythonBackend(Backend):
    """Backend ``python``: Triton python_backend models (``model.py``).

    ``--backend-config=python,<key>=<value>`` keys: ``execution-mode`` (``process`` or
    ``in_process``: the default for models that set no ``TRITONX_EXECUTION_MODE``),
    ``stub-timeout-seconds`` (default 30) and ``shm-region-prefix-name``.
    """

    name = "python"
    default_model_filename = "model.py"

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
        #: this backend's live worker processes
        self.workers: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()

    def mode(self, parameters: dict[str, str]) -> str:
        """Where a model's instances run: ``process`` or ``in_process``."""
        mode = parameters.get(MODE_PARAMETER, "").strip() or self.default_mode
        if mode not in MODES:
            raise invalid_arg(
                f"parameter {MODE_PARAMETER} must be one of {', '.join(MODES)}, got '{mode}'"
            )
        return mode

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
        parameters = {k: v.string_value for k, v in config.parameters.items()}
        before = ModelConfig(config).to_json_dict()
        if self.mode(parameters) == "in_process" and ENV_PARAMETER not in parameters:
            after = self._auto_complete_here(path, before)
        else:
            after = self._auto_complete_in_worker(path, before, parameters, ctx.model_dir)
        if after == before:
            return
        completed = type(config)()
        try:
            json_format.ParseDict(after, completed)
        except json_format.ParseError as exc:
            raise invalid_arg(
                f"auto-complete of model '{config.name}' produced an invalid config: {exc}"
            ) from exc
        config.CopyFrom(completed)

    def _auto_complete_here(self, path: Path, config: dict[str, Any]) -> dict[str, Any]:
        sys.modules.setdefault(_stub.MODULE_NAME, pb_utils)
        name = f"tritonx_python_autocomplete_{next(WorkerInstance._seq)}"
        try:
            cls = _stub.import_model(path, name)
            return _stub.run_auto_complete(cls, json.loads(json.dumps(config)))
        except Exception as exc:
            raise invalid_arg(
                f"Failed to initialize Python stub for auto-complete: {_stub.exception_text(exc)}"
            ) from exc
        finally:
            sys.modules.pop(name, None)

    def _auto_complete_in_worker(
        self, path: Path, config: dict[str, Any], parameters: dict[str, str], model_dir: Path
    ) -> dict[str, Any]:
        env = parameters.get(ENV_PARAMETER)
        proc = WorkerProcess(
            f"{config.get('name', '?')}-autocomplete", _env_python(env, model_dir) if env else None
        )
        try:
            options = {"model_path": str(path), "config": json.dumps(config)}
            proc.conn.send_bytes(pickle.dumps(("auto_complete", options)))
            if not proc.conn.poll(self.stub_timeout):
                raise invalid_arg(
                    f"auto-complete of model '{config.get('name')}' timed out after "
                    f"{self.stub_timeout:g} s"
                )
            reply = pickle.loads(proc.conn.recv_bytes())
            proc.conn.send_bytes(pickle.dumps(("finalize",)))
        except (EOFError, OSError) as exc:
            code = proc.exitcode(wait=2.0)
            raise invalid_arg(
                f"Failed to initialize Python stub for auto-complete: the worker process "
                f"{describe_exit(code)} ({exc or 'connection closed'})"
            ) from None
        finally:
            deadline = time.monotonic() + 2
            while proc.exitcode() is None and time.monotonic() < deadline:
                time.sleep(0.005)
            proc.kill()
            proc.conn.close()
        if reply[0] != "auto_complete_ok":
            raise invalid_arg(f"Failed to initialize Python stub for auto-complete: {reply[1]}")
        return json.loads(reply[1])

    def load(self, ctx: LoadContext) -> ModelInstance:
        """Start one instance: a worker process, or the model in this process."""
        if ctx.model_path is None:
            raise invalid_arg(f"python model '{ctx.model_name}' names no model file")
        if self.mode(ctx.parameters) == "in_process" and ENV_PARAMETER not in ctx.parameters:
            return InProcessInstance(ctx)
        return WorkerInstance(ctx, self)

    def close(self) -> None:
        """Kill any worker still running (normally all were unloaded already)."""
        for worker in list(self.workers):
            worker.kill()
