"""The worker process that runs one instance of a python model (Triton's "stub").

The server starts it (through a forkserver, a model's own packages layered first when it has
requirements; or as ``python -m tritonx_backend_python._stub <fd> <data fd>`` for models with
their own ``EXECUTION_ENV_PATH``, or under the server's interpreter with a model's packages
first, :mod:`~tritonx_backend_python.process`) with one end of two
Unix socket pairs (:class:`~tritonx_backend_python._ipc.Channel`: messages, and the
descriptors of their shared-memory segments). The worker's main thread reads its work
(init, execute, finalize) from the data socket itself and runs the model through a
:class:`~tritonx_backend_python.runner.ModelRunner`; the result of a non-decoupled batch goes
back on the same socket, straight to the server thread waiting for it. Everything else
(:mod:`~tritonx_backend_python.messages`: BLS calls, logs, metrics, decoupled responses) goes on
the control socket, whose reader thread delivers BLS replies and metric values to an
``execute`` that waits for them. If the server goes away, or ``initialize`` fails, the worker
exits.

Only the standard library, numpy and this package's ``_ipc``/``messages``/``runner``/``pb_utils``
(and ``_pb_runtime``, to install the worker's runtime) are imported here.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import queue
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, NoReturn

from tritonx_backend_python import _ipc, _pb_runtime, _sitedir, pb_utils
from tritonx_backend_python import messages as m
from tritonx_backend_python.runner import (
    MODULE_NAME,
    Deliver,
    ExecuteFailed,
    ModelRunner,
    auto_complete,
    exception_text,
    rescheduled,
)


class StubRuntime(pb_utils.Runtime):
    """pb_utils' services inside a worker: everything goes to the server as messages."""

    def __init__(self, conn: _ipc.Channel, writer: _ipc.ShmWriter, model_dir: str) -> None:
        self.conn = conn
        self.writer = writer
        self.model_dir = model_dir
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        #: how many messages were sent (a batch result on the data socket carries it, so the
        #: server handles a batch's logs and metric updates before answering its requests)
        self.sent = 0
        self._waiting: dict[int, queue.SimpleQueue[Any]] = {}

    def send(self, message: m.Message) -> None:
        """Send one message to the server (thread-safe)."""
        with self._send_lock:
            m.send(self.conn, message)
            self.sent += 1

    def _box(self) -> tuple[int, queue.SimpleQueue[Any]]:
        call_id = next(self._ids)
        box: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._waiting[call_id] = box
        return call_id, box

    def infer(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        segment, descs = _ipc.pack_tensors(
            ((t.backend_name, t.backend_array, t.backend_datatype) for t in request.inputs()),
            self.writer,
        )
        call_id, box = self._box()
        parent = request.trace().backend_parent
        self.send(
            m.BlsCall(
                call_id,
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
                decoupled,
                parent if isinstance(parent, int) else 0,
            )
        )
        if not decoupled:
            response, _final = box.get()
            self._waiting.pop(call_id, None)
            return response
        iterator = pb_utils.ResponseIterator(functools.partial(self._cancel_bls, call_id))
        # as Triton's InferRequest::Exec, the call returns once its first response is there:
        # an ``async_exec`` stays awaiting until then, never holding the model's event loop
        # in a ``for`` over a stream that has not started
        response, final = box.get()
        iterator.backend_put(response, final)
        if final:
            self._waiting.pop(call_id, None)
            return iterator

        def pump() -> None:
            while True:
                response, final = box.get()
                iterator.backend_put(response, final)
                if final:
                    self._waiting.pop(call_id, None)
                    return

        threading.Thread(target=pump, daemon=True, name=f"bls-{call_id}").start()
        return iterator

    def _cancel_bls(self, call_id: int) -> None:
        """``cancel()`` on a decoupled BLS call's iterator: the server cancels its request."""
        self._rpc("cancel_bls", call=call_id)

    def deliver_bls(self, reply: m.BlsReply) -> None:
        """A BLS reply arrived (reader thread)."""
        box = self._waiting.get(reply.call_id)
        if box is not None:
            box.put((m.decode_response(reply.response), reply.final))

    def log(self, level: int, message: str) -> None:
        self.send(m.Log(level, message))

    def metric_family(self, name: str, description: str, kind: int) -> None:
        self.send(m.NewMetricFamily(name, description, kind))

    def metric_op(
        self, family: str, labels: tuple[tuple[str, str], ...], op: str, value: Any
    ) -> float | None:
        if op != "value":
            self.send(m.MetricUpdate(family, labels, op, value))
            return None
        result: float | None = self._rpc("metric_value", family=family, labels=labels)
        return result

    def control(self, op: str, **kwargs: Any) -> Any:
        return self._rpc(op, **kwargs)

    def is_cancelled(self, key: int) -> bool:
        """Ask the server whether request ``key`` was cancelled (only when the model asks)."""
        return bool(self._rpc("cancelled", key=key))

    def _rpc(self, op: str, **kwargs: Any) -> Any:
        call_id, box = self._box()
        self.send(m.RpcCall(call_id, op, kwargs))
        value, error = box.get()
        self._waiting.pop(call_id, None)
        if error is not None:
            raise pb_utils.TritonModelException(error)
        return value

    def deliver_rpc(self, reply: m.RpcReply) -> None:
        """An RPC reply arrived (reader thread)."""
        box = self._waiting.get(reply.call_id)
        if box is not None:
            box.put((reply.value, reply.error))


class Worker:
    """One model instance in this process."""

    def __init__(self, conn: _ipc.Channel, data: _ipc.Channel) -> None:
        self.conn = conn
        self.data = data
        self.runtime: StubRuntime | None = None
        self.runner: ModelRunner | None = None

    # -------------------------------------------------------------- plumbing

    def reader(self) -> None:
        """Receive the replies to BLS calls and RPCs on the control socket. The server gone →
        exit."""
        conn = self.conn
        while True:
            try:
                message = m.recv(conn)
            except (EOFError, OSError):
                self.server_gone()
            if self.runtime is not None:
                if type(message) is m.BlsReply:
                    self.runtime.deliver_bls(message)
                elif type(message) is m.RpcReply:
                    self.runtime.deliver_rpc(message)
                elif type(message) is m.ReadyCheck:
                    threading.Thread(
                        target=self.check_ready, args=(message.call_id,), daemon=True
                    ).start()

    def check_ready(self, call_id: int) -> None:
        """Answer a :class:`~messages.ReadyCheck` with the model's ``is_ready()`` (its own
        thread: the reader goes on delivering BLS replies meanwhile)."""
        runner = self.runner
        assert runner is not None
        self.send(m.ReadyAnswer(call_id, runner.readiness()))

    def server_gone(self) -> NoReturn:
        """The server is gone: exit (the segments go with the process: they have no name)."""
        os._exit(0)

    def send(self, message: m.Message) -> None:
        if self.runtime is not None:
            self.runtime.send(message)
        else:
            m.send(self.conn, message)

    # -------------------------------------------------------------- commands

    def serve(self) -> None:
        """The main loop: run commands until ``finalize`` (or a failed ``initialize``)."""
        threading.Thread(target=self.reader, daemon=True, name="stub-reader").start()
        data = self.data
        while True:
            try:
                message = m.recv(data)
            except (EOFError, OSError):
                self.server_gone()
            try:
                match message:
                    case m.Execute():
                        self.execute(message)
                    case m.Init():
                        if not self.init(message):
                            return
                    case m.AutoComplete():
                        self.auto_complete(message)
                    case m.Finalize():
                        self.finalize()
                        return
            except (SystemExit, KeyboardInterrupt) as exc:
                code = exc.code if isinstance(exc, SystemExit) else 1
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code if isinstance(code, int) else 1)

    def auto_complete(self, message: m.AutoComplete) -> None:
        try:
            path = Path(message.model_path)
            config = auto_complete(path, triton_module_name(path), json.loads(message.config))
        except Exception as exc:
            self.send(m.AutoCompleted(None, exception_text(exc)))
        else:
            self.send(m.AutoCompleted(json.dumps(config), None))

    def init(self, message: m.Init) -> bool:
        """Load the model; False when that failed (the worker then exits)."""
        writer = _ipc.ShmWriter(message.shm_prefix, str(os.getpid()))
        model_path = Path(message.model_path)
        self.runtime = StubRuntime(self.conn, writer, str(model_path.parent))
        _pb_runtime.set_process_runtime(self.runtime)
        sys.modules[MODULE_NAME] = pb_utils
        self.runner = ModelRunner(message.args["model_instance_name"], message.decoupled)
        try:
            if message.debug is not None:
                start_debugger(*message.debug)
            self.runner.initialize(model_path, triton_module_name(model_path), dict(message.args))
        except Exception as exc:
            self.send(m.InitFailed(exception_text(exc), traceback.format_exc()))
            return False
        model = self.runner.model
        self.send(m.Ready(os.getpid(), callable(getattr(model, "is_ready", None))))
        return True

    def finalize(self) -> None:
        if self.runner is not None:
            try:
                self.runner.finalize()
            except Exception:
                self.send(m.Log(pb_utils.LogLevel.ERROR, traceback.format_exc()))
        self.send(m.Finalized())

    def _requests(self, message: m.Execute) -> list[pb_utils.InferenceRequest]:
        per_request: list[list[pb_utils.Tensor]] = [[] for _ in message.requests]
        for (index, name), array, datatype in _ipc.unpack_tensors(message.segment, message.tensors):
            per_request[index].append(pb_utils.Tensor(name, array, datatype=datatype))
        runtime = self.runtime
        assert runtime is not None
        requests: list[pb_utils.InferenceRequest] = []
        for inputs, (key, rid, corr, flags, timeout, params, requested) in zip(
            per_request, message.requests, strict=True
        ):
            request = pb_utils.InferenceRequest(
                request_id=rid,
                correlation_id=corr,
                inputs=inputs,
                requested_output_names=requested,
                model_name="",
                flags=flags,
                timeout=timeout,
                parameters=params,
                trace=pb_utils.InferenceTrace(key),
            )
            request.backend_cancelled = functools.partial(runtime.is_cancelled, key)
            requests.append(request)
        return requests

    def execute(self, message: m.Execute) -> None:
        runner, runtime = self.runner, self.runtime
        assert runner is not None and runtime is not None
        writer = runtime.writer
        requests = self._requests(message)
        deliver: Deliver | None = None
        if runner.decoupled:
            keys = [meta[0] for meta in message.requests]

            def send(index: int, response: pb_utils.InferenceResponse | None, final: bool) -> None:
                runtime.send(m.Send(keys[index], m.encode_response(response, writer), final))

            deliver = send
        try:
            responses = runner.execute(requests, deliver)
            again = rescheduled(requests)
        except ExecuteFailed as exc:
            details = "".join(traceback.format_exception(exc.__cause__ or exc))
            self.send(m.Log(pb_utils.LogLevel.ERROR, f"{exc}\n{details}"))
            # the requests answered before the failure keep their response (as in Triton)
            responses = exc.responses(len(requests))
            if responses is None:
                self.done(m.Done(message.batch_id, None, [], None, str(exc), runtime.sent))
                return
            again = ()
        if responses is None:
            self.done(m.Done(message.batch_id, None, [], None, None, runtime.sent, again))
            return
        tensors, metas = _outputs(responses)
        segment, descs = _ipc.pack_tensors(tensors, writer)
        # the inputs' segment goes back to the server before it reads the result, so that
        # its next request can reuse it (an output may be an input array)
        del requests, responses, tensors
        self.done(m.Done(message.batch_id, segment, descs, metas, None, runtime.sent, again))

    def done(self, message: m.Done) -> None:
        """A batch's result: on the data socket, read by the server thread that waits for it;
        a decoupled model's on the control socket, after the responses it sent."""
        runner = self.runner
        assert runner is not None
        if runner.decoupled:
            self.send(message)
        else:
            m.send(self.data, message)


def _outputs(
    responses: list[pb_utils.InferenceResponse],
) -> tuple[list[tuple[m.BatchKey, Any, str]], list[m.ResponseMeta]]:
    """A batch's output tensors (keyed by response index and name) and per-response metadata
    (error, parameters)."""
    tensors: list[tuple[m.BatchKey, Any, str]] = []
    metas: list[m.ResponseMeta] = []
    for index, response in enumerate(responses):
        err = response.error()
        metas.append(
            ((err.message(), err.code()) if err is not None else None, response.parameters())
        )
        tensors.extend(
            ((index, t.backend_name), t.backend_array, t.backend_datatype)
            for t in response.output_tensors()
        )
    return tensors, metas


def triton_module_name(model_path: Path) -> str:
    """The module name Triton's stub imports a model file as: ``<version folder>.<file stem>``
    (``1.model``), the version folder being a package."""
    return f"{model_path.parent.name}.{model_path.stem}"


def start_debugger(host: str, port: int, wait: bool) -> None:
    """Listen for a debugger (debugpy, DAP) on ``host:port`` and, with ``wait``, block until
    one has attached (``TRITONX_DEBUG_MODEL``, :mod:`tritonx_backend_python.debug`).

    :raises RuntimeError: debugpy is missing from this Python, or cannot listen there.
    """
    try:
        import debugpy
    except ImportError:
        raise RuntimeError(
            "TRITONX_DEBUG_MODEL names this model but debugpy is not installed in its Python "
            "(pip install 'tritonx-backend-python[debug]', or add debugpy to the model's "
            "environment)"
        ) from None
    try:
        debugpy.listen((host, port))
    except Exception as exc:  # debugpy raises RuntimeError, OSError...
        raise RuntimeError(f"debugpy could not listen on {host}:{port}: {exc}") from exc
    if wait:
        debugpy.wait_for_client()


def run_forked(conn: socket.socket, data: socket.socket, site_dir: str | None = None) -> None:
    """Entry point of a forkserver-started worker; ``site_dir``: the model's own packages
    (none of which the forkserver has imported), put first on ``sys.path``."""
    if site_dir is not None:
        _sitedir.layer(site_dir)
    run(_ipc.Channel(conn.detach()), _ipc.Channel(data.detach()))


def report_modules(conn: Any) -> None:
    """Send the top-level names of the modules this (forked) process has imported."""
    conn.send(sorted({name.partition(".")[0] for name in sys.modules}))
    conn.close()


def run(conn: _ipc.Channel, data: _ipc.Channel) -> None:
    """Run the worker on its control connection and data channel.

    ``sys.argv`` is ``[""]``, as in Triton's stub (an embedded interpreter started with no
    arguments): the server's command line (which a forkserver child would inherit) never
    reaches a model that parses arguments or calls ``unittest.main()`` at import. SIGINT and
    SIGTERM are ignored, as Triton's stub skips them: the server stops its workers.
    """
    sys.argv = [""]
    # as Triton's stub (pb_stub.cc SignalHandler): Ctrl-C or SIGTERM to the server's process
    # group is the server's to handle; it stops its workers itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Worker(conn, data).serve()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    """``python -m tritonx_backend_python._stub <fd> <data fd>``: a worker in another
    interpreter."""
    args = sys.argv[1:] if argv is None else argv
    run(_ipc.Channel(int(args[0])), _ipc.Channel(int(args[1])))


if __name__ == "__main__":
    main()
