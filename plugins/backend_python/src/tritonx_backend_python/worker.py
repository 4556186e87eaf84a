"""A model instance whose model runs in its own worker process (Triton's stub model).

:class:`WorkerInstance` owns one :class:`~tritonx_backend_python.process.WorkerProcess`: it
sends :mod:`~tritonx_backend_python.messages` to it and a reader thread handles what comes
back (batch results, decoupled responses, and the model's BLS, control, metric and log
requests, answered through the :class:`~tritonx_backend_python.bridge.ServerBridge`).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tritonx.backend import LoadContext, ModelInstance
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.types import InferenceRequest, InferenceResponse
from tritonx_backend_python import _ipc
from tritonx_backend_python import messages as m
from tritonx_backend_python.bridge import ServerBridge
from tritonx_backend_python.convert import (
    bls_core_request,
    core_error,
    initialize_args,
    input_datatypes,
    parameters_json,
    parameters_of,
    to_core_output,
    to_core_response,
    wire_response,
)
from tritonx_backend_python.metrics import labels_of
from tritonx_backend_python.process import ENV_PARAMETER, WorkerProcess, describe_exit, env_python
from tritonx_backend_python.runner import failure_message

log = logging.getLogger("tritonx.backend.python")


#: How long a worker may take to exit by itself after ``finalize`` (then it is killed).
FINALIZE_GRACE_S = 5.0
#: How long a worker whose ``initialize`` failed may take to exit (it exits at once).
INIT_FAILED_GRACE_S = 2.0


class WorkerInstance(ModelInstance):
    """A model instance living in its own worker process.

    :param ctx: the load context.
    :param stub_timeout: how long ``initialize`` / ``finalize`` may take (seconds).
    :param shm_prefix: the file-name prefix of shared-memory segments.
    :param workers: the backend's set of live worker processes; this one joins it.
    """

    _seq = itertools.count()

    def __init__(
        self,
        ctx: LoadContext,
        stub_timeout: float,
        shm_prefix: str,
        workers: weakref.WeakSet[WorkerProcess] | None = None,
    ) -> None:
        self.ctx = ctx
        self.name = ctx.instance.name
        self.decoupled = ctx.config.decoupled
        self.bridge = ServerBridge(ctx.server, ctx.logger)
        self.timeout = stub_timeout
        self.writer = _ipc.ShmWriter(shm_prefix, f"{os.getpid()}w{next(self._seq)}")
        self._datatypes = input_datatypes(ctx.config)
        self._outputs = [io.name for io in ctx.config.outputs]
        self._send_lock = threading.Lock()
        self._keys = itertools.count(1)
        self._batches: dict[int, concurrent.futures.Future[m.Done]] = {}
        self._open: dict[int, InferenceRequest] = {}
        self._control: concurrent.futures.Future[m.Message] | None = None
        self._dead: str = ""
        self._closing = False
        env = ctx.parameters.get(ENV_PARAMETER)
        self.proc = WorkerProcess(self.name, env_python(env, ctx.model_dir) if env else None)
        if workers is not None:
            workers.add(self.proc)
        self._reader = threading.Thread(
            target=self._read, name=f"tritonx-python-reader-{self.name}", daemon=True
        )
        self._reader.start()
        init = m.Init(str(ctx.model_path), initialize_args(ctx), self.decoupled, shm_prefix)
        reply = self._command(init, "initialize")
        if not isinstance(reply, m.Ready):
            self._shutdown(INIT_FAILED_GRACE_S)
            if isinstance(reply, m.InitFailed):
                log.error("initializing '%s' failed:\n%s", self.name, reply.traceback)
                error = reply.error
            else:
                error = f"unexpected answer from the worker: {reply!r}"
            raise TritonXError(f"Failed to initialize Python stub: {error}", Code.INTERNAL)

    # -------------------------------------------------------------- plumbing

    def _send(self, message: m.Message) -> None:
        data = m.dumps(message)
        with self._send_lock:
            self.proc.conn.send_bytes(data)

    def _command(self, message: m.Message, what: str) -> m.Message:
        """Send a control message and wait for the worker's answer."""
        future: concurrent.futures.Future[m.Message] = concurrent.futures.Future()
        self._control = future
        try:
            self._send(message)
            return future.result(self.timeout)
        except concurrent.futures.TimeoutError:
            self._shutdown(0)
            raise TritonXError(
                f"Stub process '{self.name}' did not {what} within {self.timeout:g} s "
                "(stub-timeout-seconds)",
                Code.INTERNAL,
            ) from None
        except (OSError, EOFError) as exc:
            self._shutdown(0)
            raise TritonXError(
                f"Stub process '{self.name}' is not healthy: {exc}", Code.INTERNAL
            ) from None

    def _read(self) -> None:
        recv = self.proc.conn.recv_bytes
        while True:
            try:
                message = m.loads(recv())
            except (EOFError, OSError):
                self._died()
                return
            try:
                self._dispatch(message)
            except Exception:
                log.exception("python model '%s': handling a worker message failed", self.name)

    def _dispatch(self, message: m.Message) -> None:
        match message:
            case m.Done():
                future = self._batches.pop(message.batch_id, None)
                if future is not None:
                    future.set_result(message)
            case m.Send():
                self._deliver(message)
            case m.BlsCall():
                self._bls(message)
            case m.RpcCall():
                self._rpc(message)
            case m.Log():
                self.bridge.log(message.level, message.message)
            case m.NewMetricFamily():
                self.bridge.metrics.family(message.name, message.description, message.kind)
            case m.MetricUpdate():
                self.bridge.metrics.op(
                    message.family, labels_of(message.labels), message.op, message.value
                )
            case _:
                control = self._control
                if control is not None and not control.done():
                    control.set_result(message)

    def _failure(self) -> str:
        return failure_message(f"model instance '{self.name}'", self._dead)

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
        error = TritonXError(self._failure(), Code.INTERNAL)
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

    def _deliver(self, message: m.Send) -> None:
        request = self._open.get(message.key)
        if request is None or request.response_sender is None:
            return
        if message.final:
            self._open.pop(message.key, None)
        response = None
        if message.response is not None:
            response = to_core_response(m.decode_response(message.response))
        try:
            request.response_sender.send(response, final=message.final)
        except TritonXError as exc:
            log.warning("python model '%s': %s", self.name, exc.message)

    def _reply(self, message: m.Message) -> None:
        try:
            self._send(message)
        except (OSError, EOFError, ValueError):
            pass  # the worker is gone; _died handles the rest

    def _bls(self, call: m.BlsCall) -> None:
        call_id, writer = call.call_id, self.writer
        try:
            inputs = {
                n: _ipc.as_object_bytes(a) if a.dtype == object else a
                for n, a, _ in _ipc.unpack_tensors(call.segment, call.tensors)
            }
            request = bls_core_request(
                call.model_name,
                call.model_version,
                inputs,
                call.requested,
                call.request_id,
                call.correlation_id,
                call.flags,
                call.timeout,
                call.parameters,
            )
        except Exception as exc:
            self._reply(m.BlsReply(call_id, wire_response(TritonXError.wrap(exc), writer), True))
            return

        def emit(response: InferenceResponse | TritonXError, final: bool) -> None:
            self._reply(m.BlsReply(call_id, wire_response(response, writer), final))

        try:
            self.bridge.submit(self.bridge.infer(request, call.decoupled, emit))
        except TritonXError as exc:
            emit(exc, True)

    def _rpc(self, call: m.RpcCall) -> None:
        call_id, op, kwargs = call.call_id, call.op, call.kwargs
        if op == "metric_value":
            try:
                value = self.bridge.metric_value(kwargs["family"], kwargs["labels"])
                self._reply(m.RpcReply(call_id, value, None))
            except TritonXError as exc:
                self._reply(m.RpcReply(call_id, None, exc.message))
            return

        async def run() -> None:
            try:
                value = await self.bridge.control(op, kwargs)
                self._reply(m.RpcReply(call_id, value, None))
            except Exception as exc:
                self._reply(m.RpcReply(call_id, None, str(exc)))

        try:
            self.bridge.submit(run())
        except TritonXError as exc:
            self._reply(m.RpcReply(call_id, None, exc.message))

    # -------------------------------------------------------------- ModelInstance

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse] | None:
        """Hand the batch to the worker and wait for its answer."""
        if self._dead:
            raise TritonXError(self._failure(), Code.UNAVAILABLE)
        tensors: list[tuple[m.BatchKey, np.ndarray, str]] = []
        metas: list[m.RequestMeta] = []
        keys: list[int] = []
        for index, request in enumerate(requests):
            key = next(self._keys)
            keys.append(key)
            for name, array in request.inputs.items():
                datatype = self._datatypes.get(name) or _ipc.datatype_of(array)
                tensors.append(((index, name), array, datatype))
            metas.append(
                (
                    key,
                    request.id,
                    request.correlation_id,
                    request.flags,
                    request.timeout_us,
                    parameters_json(request.parameters),
                    list(request.requested_outputs or self._outputs),
                )
            )
            if self.decoupled:
                self._open[key] = request
        segment, descs = _ipc.pack_tensors(tensors, self.writer)
        batch_id = keys[0]
        future: concurrent.futures.Future[m.Done] = concurrent.futures.Future()
        self._batches[batch_id] = future
        try:
            self._send(m.Execute(batch_id, segment, descs, metas))
        except (OSError, ValueError):
            pass  # the reader notices the death and fails the future
        if self._dead and not future.done():
            future.set_exception(TritonXError(self._failure(), Code.INTERNAL))
        try:
            done = future.result()
        finally:
            self._batches.pop(batch_id, None)
        if done.error is not None:
            for key in keys:
                self._open.pop(key, None)
            raise TritonXError(done.error, Code.INTERNAL)
        if done.responses is None:
            return None
        outputs: list[dict[str, np.ndarray]] = [{} for _ in requests]
        for (index, name), array, datatype in _ipc.unpack_tensors(done.segment, done.tensors):
            outputs[index][name] = to_core_output(array, datatype)
        return [
            InferenceResponse(
                outputs=outputs[index] if err is None else {},
                error=core_error(err),
                parameters=parameters_of(params),
            )
            for index, (err, params) in enumerate(done.responses)
        ]

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
            self._command(m.Finalize(), "finalize")
        except TritonXError as exc:
            log.warning("python model '%s': %s", self.name, exc.message)
        self._shutdown(FINALIZE_GRACE_S)

    def _shutdown(self, grace: float) -> None:
        """Stop the worker (waiting up to ``grace`` seconds for it to exit by itself), its
        reader and its shared-memory segments."""
        self._closing = True
        self.proc.stop(grace)
        self.proc.close()
        if self._reader is not threading.current_thread():
            self._reader.join(5)
        self.writer.cleanup()


def auto_complete_in_worker(
    model_path: Path, config: dict[str, Any], python: str | None, timeout: float
) -> dict[str, Any]:
    """Run the model's ``auto_complete_config`` in a throw-away worker (``python``: the
    interpreter of its ``EXECUTION_ENV_PATH``, or ``None``); the completed config."""
    proc = WorkerProcess(f"{config.get('name', '?')}-autocomplete", python)
    grace = 2.0
    try:
        proc.conn.send_bytes(m.dumps(m.AutoComplete(str(model_path), json.dumps(config))))
        if not proc.conn.poll(timeout):
            grace = 0.0
            raise invalid_arg(
                f"auto-complete of model '{config.get('name')}' timed out after {timeout:g} s"
            )
        reply = m.loads(proc.conn.recv_bytes())
        proc.conn.send_bytes(m.dumps(m.Finalize()))
    except (EOFError, OSError) as exc:
        code = proc.exitcode(wait=2.0)
        raise invalid_arg(
            f"Failed to initialize Python stub for auto-complete: the worker process "
            f"{describe_exit(code)} ({exc or 'connection closed'})"
        ) from None
    finally:
        proc.stop(grace)
        proc.close()
    if not isinstance(reply, m.AutoCompleted) or reply.config is None:
        error = reply.error if isinstance(reply, m.AutoCompleted) else repr(reply)
        raise invalid_arg(f"Failed to initialize Python stub for auto-complete: {error}")
    completed: dict[str, Any] = json.loads(reply.config)
    return completed
