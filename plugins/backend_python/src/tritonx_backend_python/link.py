"""One worker process of a model instance, seen from the server: the sockets to it, what is in
flight on it, the thread that reads what it sends, and how its end is noticed.

A :class:`WorkerLink` lives as long as its process. The work of the worker's main thread
(init, execute, finalize) goes on the data socket; the instance thread that sent a
non-decoupled batch reads that batch's result from the same socket itself (one process
ping-pong, no relay thread). The reader thread dispatches what the worker's other threads send
on the control socket (decoupled responses and results, BLS / control / metric / log /
cancellation requests, the answers to init and finalize); a watcher thread waits for the process to end, so a death is noticed at once even
when a process the model forked still holds the worker's end of the socket. When the worker
is gone, everything in flight on it fails with one error (Triton's ``Stub process '<instance>'
is not healthy.`` unless the link was told otherwise) and the instance is told
(``on_gone``), before the requests learn of it.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

from tritonx.errors import Code, TritonXError
from tritonx.types import InferenceRequest, InferenceResponse
from tritonx_backend_python import _ipc
from tritonx_backend_python import messages as m
from tritonx_backend_python.bridge import ServerBridge
from tritonx_backend_python.convert import OutputCheck, bls_core_request, wire_response
from tritonx_backend_python.metrics import labels_of
from tritonx_backend_python.process import WorkerProcess

log = logging.getLogger("tritonx.backend.python")

#: How long the reader may take to drain the socket once the process has ended (then it is
#: woken: a process the model forked may still hold the worker's end).
EOF_GRACE_S = 0.5

_seq = itertools.count()


def not_healthy(instance: str) -> TritonXError:
    """Triton's error for the requests of a stub process that died."""
    return TritonXError(f"Stub process '{instance}' is not healthy.", Code.INTERNAL)


class WorkerLink:
    """A worker process of instance ``name`` and the socket to it.

    :param on_gone: called once from the reader thread when the process is gone, before the
        requests in flight fail; it may return the error they fail with instead of the default.
    """

    def __init__(
        self,
        name: str,
        proc: WorkerProcess,
        bridge: ServerBridge,
        shm_prefix: str,
        check: OutputCheck,
        on_gone: Callable[[WorkerLink], TritonXError | None],
    ) -> None:
        self.name = name
        self.proc = proc
        self.bridge = bridge
        self.check = check
        self.writer = _ipc.ShmWriter(shm_prefix, f"{os.getpid()}w{next(_seq)}")
        self.started = time.monotonic()
        #: whether a batch ran to completion on this worker
        self.served = False
        #: set once the process is gone, with its exit status (negative: the signal)
        self.gone = False
        self.exit_code: int | None = None
        #: what the requests in flight failed with (set by :meth:`abort`, or when gone)
        self.error: TritonXError | None = None
        #: why the process ended, for the log and the repository index (set by :meth:`abort`)
        self.cause = ""
        #: the process was stopped on purpose (finalize, unload): not a crash
        self.expected = False
        self._on_gone = on_gone
        self._send_lock = threading.Lock()
        self._data_lock = threading.Lock()
        #: messages of the control socket dispatched so far (see :meth:`wait_done`)
        self._dispatched = 0
        self._dispatch_cond = threading.Condition()
        self._lock = threading.Lock()
        self._batches: dict[int, concurrent.futures.Future[m.Done]] = {}
        #: the batch executing now: (key of its first request, its requests)
        self._running: tuple[int, Sequence[InferenceRequest]] | None = None
        #: decoupled requests still open, by key
        self._open: dict[int, InferenceRequest] = {}
        #: the core requests of the decoupled BLS calls still answering, by call id
        self._bls_calls: dict[int, InferenceRequest] = {}
        self._control: concurrent.futures.Future[m.Message] | None = None
        #: the model defines ``is_ready()`` (set from its Ready message)
        self.probes = False
        #: ``is_ready()`` calls not answered yet, by call id (see :meth:`check_ready`)
        self._ready_checks: dict[int, concurrent.futures.Future[str | None]] = {}
        self._ready_ids = itertools.count(1)
        self._ready_lock = threading.Lock()
        #: the last ``is_ready()`` call (in flight until its future is done)
        self._ready_call: concurrent.futures.Future[str | None] | None = None
        #: the server killed this worker on purpose (its execute() ran past the execution
        #: timeout): its instance starts a new one whatever ``restart-dead-stubs`` says
        self.restart_wanted = False
        self._reader = threading.Thread(
            target=self._read, name=f"tritonx-python-reader-{name}", daemon=True
        )
        self._watcher = threading.Thread(
            target=self._watch, name=f"tritonx-python-watch-{name}", daemon=True
        )
        self._reader.start()
        self._watcher.start()

    # -------------------------------------------------------------- sending

    def send(self, message: m.Message) -> None:
        """Send a message (raises OSError / ValueError once the worker is gone; its segment
        is then free again)."""
        with self._send_lock:
            m.send(self.proc.conn, message)

    def send_work(self, message: m.Message) -> None:
        """Send work to the worker's main thread (raises OSError / ValueError once the worker
        is gone; its segment is then free again)."""
        with self._data_lock:
            m.send(self.proc.data, message)

    def check_ready(self, timeout: float) -> str | None:
        """The model's own ``is_ready()`` (None: ready), or why it is not, asked as Triton's
        backend asks it (``RunUserModelReadinessCheck``): one call at a time, whose answer a
        check waits for at most ``timeout`` seconds. A check that comes while a call is in
        flight (one that timed out included) makes no new call: it waits for that one's
        answer. The answer is not kept: the next check calls again."""
        call_id = 0
        with self._ready_lock:  # (calls are settled under it too)
            call = self._ready_call
            joined = call is not None and not call.done()
            if call is None or call.done():
                call_id = next(self._ready_ids)
                call = self._ready_call = concurrent.futures.Future()
                self._ready_checks[call_id] = call
        if joined:
            log.debug(
                "python model instance '%s': a readiness check joins the is_ready() call in flight",
                self.name,
            )
        else:
            try:
                self.send(m.ReadyCheck(call_id))
            except (OSError, EOFError, ValueError):
                self._answer_ready(call_id, EOFError("the worker process is gone"))
        try:
            return call.result(timeout)
        except concurrent.futures.TimeoutError:  # Triton's texts (UNAVAILABLE there)
            if joined:
                return "Timed out waiting for in-flight is_ready() response"
            return "Timed out waiting for user-defined is_ready() response"
        except EOFError:
            if joined:
                return "Stub process is not healthy while waiting for is_ready()"
            return "Stub process is not healthy while waiting for user-defined is_ready() response"

    def _answer_ready(self, call_id: int, answer: str | BaseException | None) -> None:
        """Settle the ``is_ready()`` call ``call_id`` (an exception: it cannot be answered)."""
        with self._ready_lock:
            call = self._ready_checks.pop(call_id, None)
            if call is None or call.done():
                return
            if isinstance(answer, BaseException):
                call.set_exception(answer)
            else:
                call.set_result(answer)

    def _reply(self, message: m.Message) -> None:
        try:
            self.send(message)
        except (OSError, EOFError, ValueError):
            pass  # the worker is gone (nobody will read the segment: it is free again)

    def command(self, message: m.Message, timeout: float | None) -> m.Message:
        """Send a control message (Init, Finalize) and wait for the answer.

        :raises concurrent.futures.TimeoutError: no answer within ``timeout`` seconds.
        :raises EOFError: the worker is gone.
        """
        future: concurrent.futures.Future[m.Message] = concurrent.futures.Future()
        with self._lock:
            if self.gone:
                raise EOFError("the worker process is gone")
            self._control = future
        try:
            self.send_work(message)
        except (OSError, ValueError) as exc:
            raise EOFError(str(exc)) from None
        return future.result(timeout)

    def submit(
        self,
        message: m.Execute,
        requests: Sequence[InferenceRequest],
        keys: Sequence[int],
        decoupled: bool,
    ) -> concurrent.futures.Future[m.Done]:
        """Hand a batch to the worker; the future gets its :class:`~messages.Done` (or the
        error everything in flight failed with)."""
        future: concurrent.futures.Future[m.Done] = concurrent.futures.Future()
        with self._lock:
            if self.gone:  # the reader may not have set its error yet
                raise self.error or not_healthy(self.name)
            self._batches[message.batch_id] = future
            self._running = (keys[0], requests)
            if decoupled:
                for key, request in zip(keys, requests, strict=True):
                    self._open[key] = request
        try:
            self.send_work(message)
        except (OSError, ValueError):
            pass  # the reader notices the death and fails the future
        return future

    def wait_done(
        self, future: concurrent.futures.Future[m.Done], timeout: float | None
    ) -> m.Done | None:
        """Read the result of the non-decoupled batch sent last from the data socket (only
        the thread that submitted it calls this); ``None`` past ``timeout`` seconds.

        :raises TritonXError: the worker is gone (what the requests in flight failed with).
        """
        data = self.proc.data
        try:
            if timeout is not None and not data.poll(timeout):
                return None
            done = self.done_message(*data.recv())
        except (EOFError, OSError):
            return future.result(30.0)  # the reader fails it once it has seen the worker go
        except Exception as exc:  # not an answer: the worker is killed (the reader fails it)
            self.unreadable(exc)
            return future.result(30.0)
        if not self.caught_up(done):
            self.wait_caught_up(done)
        return done

    def done_message(self, data: bytes, fds: Sequence[int] = ()) -> m.Done:
        """The :class:`~messages.Done` read from the data socket (``fds``: the descriptors
        that came with it).

        :raises ValueError: it is something else (any other exception: it is no message).
        """
        message = m.loads(data, fds)
        if type(message) is not m.Done:
            raise ValueError(f"expected the answer to a batch, got {type(message).__name__}")
        self.served = True
        return message

    def caught_up(self, done: m.Done) -> bool:
        """Whether the control messages the worker sent before ``done`` (logs, metric
        updates) are handled."""
        return self._dispatched >= done.sent

    def wait_caught_up(self, done: m.Done) -> None:
        """Wait (up to 5 s) until :meth:`caught_up` or the worker is gone."""
        with self._dispatch_cond:
            self._dispatch_cond.wait_for(lambda: self._dispatched >= done.sent or self.gone, 5.0)

    def finish(self, batch_id: int, keys: Sequence[int], failed: bool) -> None:
        """The batch ``batch_id`` is over (``failed``: its decoupled requests are closed)."""
        with self._lock:
            self._batches.pop(batch_id, None)
            self._running = None
            if failed:
                for key in keys:
                    self._open.pop(key, None)

    def request(self, key: int) -> InferenceRequest | None:
        """The request ``key`` if it is executing or still open."""
        running = self._running
        if running is not None:
            index = key - running[0]
            if 0 <= index < len(running[1]):
                return running[1][index]
        return self._open.get(key)

    def is_cancelled(self, key: int) -> bool:
        """Whether the request ``key`` (executing or still open) was cancelled."""
        request = self.request(key)
        return request is not None and request.is_cancelled()

    # -------------------------------------------------------------- ending

    def unreadable(self, exc: BaseException) -> None:
        """What came on the data socket is no answer (``exc`` says why): kill the worker;
        the batch in flight fails with Triton's "not healthy" error, saying why."""
        log.error(
            "python model instance '%s': unreadable answer from its worker: %r", self.name, exc
        )
        self.abort(
            TritonXError(
                f"Stub process '{self.name}' is not healthy: its answer could not be read ({exc})",
                Code.INTERNAL,
            ),
            f"its answer could not be read ({exc})",
        )

    def abort(self, error: TritonXError, cause: str) -> None:
        """Kill the worker: everything in flight fails with ``error``; ``cause`` says why."""
        with self._lock:
            if not self.gone:
                self.error, self.cause = error, cause
        self.proc.kill()

    def shutdown(self, grace: float) -> None:
        """Stop the worker on purpose (waiting up to ``grace`` seconds for it to exit by
        itself), its threads and its shared-memory segments."""
        self.expected = True
        self.proc.stop(grace)
        if self._reader is not threading.current_thread():
            self._reader.join(5)
        self.proc.close()
        self.writer.cleanup()

    def _watch(self) -> None:
        self.proc.wait_exit()
        self._reader.join(EOF_GRACE_S)
        if self._reader.is_alive():
            self.proc.interrupt()

    # -------------------------------------------------------------- receiving

    def _read(self) -> None:
        conn = self.proc.conn
        while True:
            try:
                message = m.recv(conn)
            except (EOFError, OSError):
                break
            except Exception:
                log.exception("python model instance '%s': unreadable worker message", self.name)
                self.proc.kill()
                break
            try:
                self._dispatch(message)
            except Exception:
                log.exception(
                    "python model instance '%s': handling a worker message failed", self.name
                )
            with self._dispatch_cond:
                self._dispatched += 1
                self._dispatch_cond.notify_all()
        with self._dispatch_cond:
            self._dispatch_cond.notify_all()
        self._gone()

    def _gone(self) -> None:
        code = self.proc.exitcode(wait=2.0)
        if code is None:  # the socket broke but the process lives on: end it
            self.proc.kill()
            code = self.proc.exitcode()
        with self._lock:
            self.gone = True
            self.exit_code = code
        # the worker's segments went with it: let go of this side's (before a restart begins)
        self.writer.cleanup()
        _ipc.forget(str(self.proc.pid))  # this process's mappings of the worker's segments
        error = self._on_gone(self)
        with self._lock:
            if self.error is None:
                self.error = error or not_healthy(self.name)
            error = self.error
            batches, self._batches = self._batches, {}
            requests, self._open = self._open, {}
            control, self._control = self._control, None
        for future in batches.values():
            if not future.done():
                future.set_exception(error)
        for request in requests.values():
            sender = request.response_sender
            if sender is not None and not sender.is_closed:
                try:
                    sender.send(InferenceResponse.failed(error), final=True)
                except TritonXError:
                    pass  # closed meanwhile
        if control is not None and not control.done():
            control.set_exception(EOFError("the worker process is gone"))
        for call_id in list(self._ready_checks):
            self._answer_ready(call_id, EOFError("the worker process is gone"))
        self.proc.kill()  # reaps it and forgets it (it is gone already)
        self.proc.interrupt()  # wakes an instance thread still reading the data socket
        self.proc.close()

    def _dispatch(self, message: m.Message) -> None:
        match message:
            case m.Done():
                future = self._batches.get(message.batch_id)
                self.served = True
                if future is not None and not future.done():
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
            case m.ReadyAnswer():
                self._answer_ready(message.call_id, message.reason)
            case _:
                control = self._control
                if control is not None and not control.done():
                    control.set_result(message)

    def _deliver(self, message: m.Send) -> None:
        request = self._open.get(message.key)
        if request is None or request.response_sender is None:
            return
        if message.final:
            with self._lock:
                self._open.pop(message.key, None)
        response = None
        if message.response is not None:
            response = self.check.response(
                m.decode_response(message.response), request.requested_outputs
            )
        try:
            request.response_sender.send(response, final=message.final)
        except TritonXError as exc:
            log.warning("python model instance '%s': %s", self.name, exc.message)

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

        if call.decoupled:
            self._bls_calls[call_id] = request

        def emit(response: InferenceResponse | TritonXError, final: bool) -> None:
            if final:
                self._bls_calls.pop(call_id, None)
            if self.gone:
                return
            self._reply(m.BlsReply(call_id, wire_response(response, writer), final))

        parent = self.request(call.parent) if call.parent else None
        try:
            self.bridge.submit(self.bridge.infer(request, call.decoupled, emit, parent))
        except TritonXError as exc:
            emit(exc, True)

    def _rpc(self, call: m.RpcCall) -> None:
        call_id, op, kwargs = call.call_id, call.op, call.kwargs
        if op == "cancelled":
            self._reply(m.RpcReply(call_id, self.is_cancelled(kwargs["key"]), None))
            return
        if op == "cancel_bls":
            bls = self._bls_calls.get(kwargs["call"])
            if bls is not None:
                bls.cancel()
            self._reply(m.RpcReply(call_id, None, None))
            return
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
