"""The worker process that runs one instance of a python model (Triton's "stub").

The server starts it (through a forkserver, or as ``python -m tritonx_backend_python._stub
<fd>`` for models with their own ``EXECUTION_ENV_PATH``) with one end of a socket pair. The
worker's main thread runs the model (``initialize``, ``execute``, ``finalize``); a reader
thread receives messages, so BLS replies and metric values reach an ``execute`` that waits
for them. If the server goes away the worker exits.

Only the standard library, numpy and this package's ``_ipc``/``pb_utils`` are imported here.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import itertools
import json
import os
import pickle
import queue
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tritonx_backend_python import _ipc, pb_utils

MODULE_NAME = "triton_python_backend_utils"


def exception_text(exc: BaseException) -> str:
    """``TypeName: message``, the way Triton's stub reports Python exceptions."""
    return f"{type(exc).__name__}: {exc}"


def import_model(model_path: Path, module_name: str) -> Any:
    """Import ``model.py`` (its folder and the model folder go on ``sys.path``, as in Triton)
    and return its ``TritonPythonModel`` class."""
    for folder in (str(model_path.parent), str(model_path.parent.parent)):
        if folder not in sys.path:
            sys.path.append(folder)
    if not model_path.exists():
        raise pb_utils.TritonModelException(f"Python model file not found in '{model_path}'")
    spec = importlib.util.spec_from_file_location(module_name, model_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    cls = getattr(module, "TritonPythonModel", None)
    if cls is None:
        raise pb_utils.TritonModelException(
            f"Python model '{model_path}' does not define class 'TritonPythonModel'"
        )
    return cls


def run_auto_complete(cls: Any, config: dict[str, Any]) -> dict[str, Any]:
    """Call ``TritonPythonModel.auto_complete_config`` (if any) on a config dict."""
    fn = getattr(cls, "auto_complete_config", None)
    if fn is None:
        return config
    wrapped = pb_utils.ModelConfig(config)
    result = fn(wrapped)
    if not isinstance(result, pb_utils.ModelConfig):
        raise pb_utils.TritonModelException(
            "auto_complete_config function must return a pb_utils.ModelConfig object, "
            f"found type '{type(result)}'"
        )
    return result.as_dict()


# ---------------------------------------------------------------------- encoding helpers


def encode_response(response: pb_utils.InferenceResponse | None, writer: _ipc.ShmWriter) -> Any:
    """A response for the wire: (segment, descriptors, error, parameters JSON)."""
    if response is None:
        return None
    err = response.error()
    error = (err.message(), err.code()) if err is not None else None
    segment, descs = _ipc.pack_tensors(
        ((t.name(), t._array, t._datatype) for t in response.output_tensors()), writer
    )
    return (segment, descs, error, response.parameters())


def decode_response(payload: Any) -> pb_utils.InferenceResponse:
    """The inverse of :func:`encode_response`."""
    segment, descs, error, parameters = payload
    tensors = [
        pb_utils.Tensor(name, array, datatype=datatype)
        for name, array, datatype in _ipc.unpack_tensors(segment, descs)
    ]
    err = pb_utils.TritonError(error[0], error[1]) if error is not None else None
    return pb_utils.InferenceResponse(tensors, err, parameters)


# ---------------------------------------------------------------------- the runtime


class StubRuntime(pb_utils.Runtime):
    """pb_utils' services inside a worker: everything goes to the server as messages."""

    def __init__(self, conn: Connection, writer: _ipc.ShmWriter, model_dir: str) -> None:
        self.conn = conn
        self.writer = writer
        self.model_dir = model_dir
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, Any] = {}

    def send(self, message: Any) -> None:
        """Send one message to the server (thread-safe)."""
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with self._send_lock:
            self.conn.send_bytes(data)

    def _call(self, message_head: tuple[Any, ...], *rest: Any) -> Any:
        call_id = next(self._ids)
        box: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._waiting[call_id] = box
        self.send((*message_head, call_id, *rest))
        return call_id, box

    def infer(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        segment, descs = _ipc.pack_tensors(
            ((t.name(), t._array, t._datatype) for t in request.inputs()), self.writer
        )
        payload = (
            request.model_name(),
            request.model_version(),
            segment,
            descs,
            request.requested_output_names(),
            request.request_id(),
            request.correlation_id(),
            request.flags(),
            request.timeout(),
            request.parameters(),
        )
        call_id, box = self._call(("bls",), payload, decoupled)
        if not decoupled:
            response, _final = box.get()
            self._waiting.pop(call_id, None)
            return response
        iterator = pb_utils.ResponseIterator()

        def pump() -> None:
            while True:
                response, final = box.get()
                iterator._put(response, final)
                if final:
                    self._waiting.pop(call_id, None)
                    return

        threading.Thread(target=pump, daemon=True, name=f"bls-{call_id}").start()
        return iterator

    def deliver_bls(self, call_id: int, payload: Any, final: bool) -> None:
        """A BLS reply arrived (reader thread)."""
        box = self._waiting.get(call_id)
        if box is not None:
            box.put((decode_response(payload), final))

    def log(self, level: int, message: str) -> None:
        self.send(("log", level, message))

    def metric_family(self, name: str, description: str, kind: int) -> None:
        self.send(("metric_family", name, description, kind))

    def metric_op(
        self, family: str, labels: tuple[tuple[str, str], ...], op: str, value: Any
    ) -> float | None:
        if op != "value":
            self.send(("metric", family, labels, op, value))
            return None
        return self._rpc("metric_value", family=family, labels=labels)

    def control(self, op: str, **kwargs: Any) -> Any:
        return self._rpc(op, **kwargs)

    def _rpc(self, op: str, **kwargs: Any) -> Any:
        call_id, box = self._call(("rpc",), op, kwargs)
        value, error = box.get()
        self._waiting.pop(call_id, None)
        if error is not None:
            raise pb_utils.TritonModelException(error)
        return value

    def deliver_rpc(self, call_id: int, value: Any, error: str | None) -> None:
        """An RPC reply arrived (reader thread)."""
        box = self._waiting.get(call_id)
        if box is not None:
            box.put((value, error))


# ---------------------------------------------------------------------- the worker


class Worker:
    """One model instance in this process."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.runtime: StubRuntime | None = None
        self.model: Any = None
        self.decoupled = False
        self.name = ""
        self._loop: asyncio.AbstractEventLoop | None = None

    # -------------------------------------------------------------- plumbing

    def reader(self) -> None:
        """Receive messages; route replies, queue work. The server gone → exit."""
        conn = self.conn
        while True:
            try:
                message = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                os._exit(0)
            kind = message[0]
            if kind == "bls_reply" and self.runtime is not None:
                self.runtime.deliver_bls(message[1], message[2], message[3])
            elif kind == "rpc_reply" and self.runtime is not None:
                self.runtime.deliver_rpc(message[1], message[2], message[3])
            else:
                self.work.put(message)

    def send(self, message: Any) -> None:
        if self.runtime is not None:
            self.runtime.send(message)
        else:
            self.conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def loop(self) -> asyncio.AbstractEventLoop:
        """A background event loop for ``async def execute`` models."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, daemon=True, name="model-loop").start()
        return self._loop

    # -------------------------------------------------------------- commands

    def serve(self) -> None:
        """The main loop: run commands until ``finalize``."""
        threading.Thread(target=self.reader, daemon=True, name="stub-reader").start()
        while True:
            message = self.work.get()
            kind = message[0]
            try:
                if kind == "init":
                    self.init(message[1])
                elif kind == "auto_complete":
                    self.auto_complete(message[1])
                elif kind == "execute":
                    self.execute(message[1], message[2])
                elif kind == "finalize":
                    self.finalize()
                    return
            except (SystemExit, KeyboardInterrupt) as exc:
                code = exc.code if isinstance(exc, SystemExit) else 1
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code if isinstance(code, int) else 1)

    def auto_complete(self, options: dict[str, Any]) -> None:
        try:
            sys.modules.setdefault(MODULE_NAME, pb_utils)
            cls = import_model(Path(options["model_path"]), "model")
            config = run_auto_complete(cls, json.loads(options["config"]))
            self.send(("auto_complete_ok", json.dumps(config)))
        except Exception as exc:
            self.send(("auto_complete_error", exception_text(exc)))

    def init(self, options: dict[str, Any]) -> None:
        writer = _ipc.ShmWriter(options["shm_prefix"], str(os.getpid()))
        model_path = Path(options["model_path"])
        self.runtime = StubRuntime(self.conn, writer, str(model_path.parent))
        pb_utils._set_process_runtime(self.runtime)
        sys.modules[MODULE_NAME] = pb_utils
        self.decoupled = bool(options["decoupled"])
        self.name = options["args"]["model_instance_name"]
        try:
            cls = import_model(model_path, model_path.stem)
            self.model = cls()
            init = getattr(self.model, "initialize", None)
            if init is not None:
                result = init(dict(options["args"]))
                if inspect.iscoroutine(result):
                    asyncio.run_coroutine_threadsafe(result, self.loop()).result()
        except Exception as exc:
            self.send(("init_error", exception_text(exc), traceback.format_exc()))
            return
        self.send(("init_ok", os.getpid()))

    def finalize(self) -> None:
        fin = getattr(self.model, "finalize", None)
        try:
            if fin is not None:
                result = fin()
                if inspect.iscoroutine(result):
                    asyncio.run_coroutine_threadsafe(result, self.loop()).result()
        except Exception:
            self.send(("log", pb_utils.LogLevel.ERROR, traceback.format_exc()))
        self.send(("finalized",))

    def _requests(self, payload: Any) -> list[pb_utils.InferenceRequest]:
        batch_segment, batch_descs, metas = payload
        tensors = _ipc.unpack_tensors(batch_segment, batch_descs)
        per_request: list[list[pb_utils.Tensor]] = [[] for _ in metas]
        for (index, name), array, datatype in tensors:
            per_request[index].append(pb_utils.Tensor(name, array, datatype=datatype))
        requests = []
        for inputs, meta in zip(per_request, metas, strict=True):
            key, rid, corr, flags, timeout, params, requested = meta
            request = pb_utils.InferenceRequest(
                request_id=rid,
                correlation_id=corr,
                inputs=inputs,
                requested_output_names=requested,
                flags=flags,
                timeout=timeout,
                parameters=params,
            )
            request._key = key  # type: ignore[attr-defined]
            requests.append(request)
        return requests

    def execute(self, batch_id: int, payload: Any) -> None:
        assert self.runtime is not None
        runtime = self.runtime
        writer = runtime.writer
        requests = self._requests(payload)
        via_sender: dict[int, pb_utils.InferenceResponse] = {}
        for index, request in enumerate(requests):
            key = request._key  # type: ignore[attr-defined]
            if self.decoupled:

                def deliver(
                    response: pb_utils.InferenceResponse | None, final: bool, key: int = key
                ) -> None:
                    runtime.send(("send", key, encode_response(response, writer), final))

            else:

                def deliver(
                    response: pb_utils.InferenceResponse | None, final: bool, index: int = index
                ) -> None:
                    if response is not None:
                        via_sender[index] = response

            request._sender = pb_utils.InferenceResponseSender(deliver, self.decoupled)
        error: str | None = None
        result: Any = None
        try:
            result = self.model.execute(requests)
            if inspect.iscoroutine(result):
                future = asyncio.run_coroutine_threadsafe(result, self.loop())
                if self.decoupled:
                    future.add_done_callback(lambda f: self._async_done(f, requests))
                    result = None
                else:
                    result = future.result()
            responses = check_execute_result(
                self.name, self.decoupled, requests, result, via_sender
            )
        except Exception as exc:
            error = (
                f"Failed to process the request(s) for model '{self.name}', message: "
                f"{exception_text(exc)}"
            )
            self.send(("log", pb_utils.LogLevel.ERROR, f"{error}\n{traceback.format_exc()}"))
            for request in requests:
                if request._sender is not None:
                    request._sender._close()
            self.send(("done", batch_id, None, error))
            return
        if responses is None:
            self.send(("done", batch_id, None, None))
            return
        tensors = []
        metas = []
        for index, response in enumerate(responses):
            err = response.error()
            metas.append(
                ((err.message(), err.code()) if err is not None else None, response.parameters())
            )
            tensors.extend(
                ((index, t.name()), t._array, t._datatype) for t in response.output_tensors()
            )
        segment, descs = _ipc.pack_tensors(tensors, writer)
        self.send(("done", batch_id, (segment, descs, metas), None))

    def _async_done(self, future: Any, requests: list[pb_utils.InferenceRequest]) -> None:
        exc = future.exception()
        if exc is None:
            return
        message = (
            f"Failed to process the request(s) for model '{self.name}', message: "
            f"{exception_text(exc)}"
        )
        for request in requests:
            sender = request._sender
            if sender is not None and not sender.closed:
                try:
                    sender.send(
                        pb_utils.InferenceResponse(error=pb_utils.TritonError(message)),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                    )
                except pb_utils.TritonModelException:
                    pass


def check_execute_result(
    name: str,
    decoupled: bool,
    requests: list[pb_utils.InferenceRequest],
    result: Any,
    via_sender: dict[int, pb_utils.InferenceResponse],
) -> list[pb_utils.InferenceResponse] | None:
    """Triton's checks on what ``execute`` returned; the responses to send back."""
    if decoupled:
        if result is not None:
            raise pb_utils.TritonModelException(
                f"Python model '{name}' is using the decoupled mode and the execute "
                "function must return None."
            )
        return None
    if result is None and via_sender:
        result = [None] * len(requests)
    if not isinstance(result, list):
        raise pb_utils.TritonModelException(
            f"Expected a list in the execute return, found type '{type(result)}'."
        )
    if len(result) != len(requests):
        raise pb_utils.TritonModelException(
            "Number of InferenceResponse objects do not match the number of "
            f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, and "
            f"InferenceResponse(s) size is:{len(result)}\n"
        )
    out: list[pb_utils.InferenceResponse] = []
    for index, response in enumerate(result):
        if response is None:
            response = via_sender.get(index)
            if response is None:
                response = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("the model returned no response for the request")
                )
        elif not isinstance(response, pb_utils.InferenceResponse):
            raise pb_utils.TritonModelException(
                "Expected an 'InferenceResponse' object in the execute function return "
                f"list, found type '{type(response)}'."
            )
        out.append(response)
    return out


def run(conn: Connection) -> None:
    """Entry point of a forkserver-started worker."""
    Worker(conn).serve()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    """``python -m tritonx_backend_python._stub <fd>``: a worker in another interpreter."""
    args = sys.argv[1:] if argv is None else argv
    run(Connection(int(args[0])))


if __name__ == "__main__":
    main()
