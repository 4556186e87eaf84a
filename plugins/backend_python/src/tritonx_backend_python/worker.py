"""A model instance whose model runs in its own worker process (Triton's stub model).

:class:`WorkerInstance` owns the current :class:`~tritonx_backend_python.link.WorkerLink`. When
the worker process dies (a crash, ``exit()``, a kill), its requests in flight fail with
Triton's ``Stub process '<instance>' is not healthy.`` and the instance reports itself not
ready (the core then leaves the queue to the other instances). As in Triton's python backend,
the dead worker is not started again: the instance stays not healthy until the model is
loaded again. With ``--backend-config=python,restart-dead-stubs=true``, and always after the
server killed a worker whose ``execute`` ran past ``TRITONX_EXECUTION_TIMEOUT_SECS``, a
restart thread starts a fresh worker and calls ``initialize`` again, backing off when workers
keep dying without serving.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import json
import logging
import math
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tritonx.backend import LoadContext, ModelInstance
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.types import REQUEST_RELEASE_RESCHEDULE, InferenceRequest, InferenceResponse
from tritonx_backend_python import _ipc
from tritonx_backend_python import messages as m
from tritonx_backend_python.bridge import ServerBridge
from tritonx_backend_python.convert import (
    OutputCheck,
    core_error,
    initialize_args,
    input_datatypes,
    parameters_json,
    parameters_of,
)
from tritonx_backend_python.debug import debug_setting
from tritonx_backend_python.environment import EnvironmentCache, worker_env
from tritonx_backend_python.link import WorkerLink, not_healthy
from tritonx_backend_python.loopreader import LoopReader
from tritonx_backend_python.process import WorkerEnv, WorkerProcess, describe_exit

log = logging.getLogger("tritonx.backend.python")

#: config.pbtxt parameter: seconds an ``execute`` may take before its worker is killed.
TIMEOUT_PARAMETER = "TRITONX_EXECUTION_TIMEOUT_SECS"
#: How long a worker may take to exit by itself after ``finalize`` (then it is killed).
FINALIZE_GRACE_S = 5.0
#: How long a worker whose ``initialize`` failed may take to exit (it exits at once).
INIT_FAILED_GRACE_S = 2.0
#: A worker that lived this long, or served a batch, was healthy: its death restarts it at
#: once; otherwise restarts back off (0.5 s, 1 s, 2 s ... up to :data:`MAX_BACKOFF_S`).
STABLE_S = 10.0
FIRST_BACKOFF_S = 0.5
#: seconds a readiness check waits for the model's ``is_ready()`` before it answers not ready
#: (Triton's ``kUserModelReadinessTimeoutMs``; the call goes on, and the next check waits for it)
READY_CHECK_TIMEOUT_S = 5.0
MAX_BACKOFF_S = 30.0


def execution_timeout(parameters: dict[str, str]) -> float | None:
    """The model's ``TRITONX_EXECUTION_TIMEOUT_SECS`` (None when not set)."""
    text = parameters.get(TIMEOUT_PARAMETER, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise invalid_arg(
            f"parameter {TIMEOUT_PARAMETER} must be a number of seconds greater than 0, "
            f"got '{text}'"
        )
    return value


def backoff(failures: int) -> float:
    """Seconds to wait before the restart that follows ``failures`` consecutive deaths."""
    if failures <= 0:
        return 0.0
    return min(FIRST_BACKOFF_S * 2 ** (failures - 1), MAX_BACKOFF_S)


class WorkerInstance(ModelInstance):
    """A model instance living in its own worker process, restarted when that process dies.

    :param ctx: the load context.
    :param stub_timeout: how long ``initialize`` / ``finalize`` may take (seconds).
    :param shm_prefix: the name prefix of shared-memory segments.
    :param environments: the cache of models' own environments (their requirements).
    :param workers: the backend's set of live worker processes; this instance's join it.
    :param closed: set when the backend closes (the server exits): workers are not restarted.
    :param restart_dead: start a new worker when one dies (``restart-dead-stubs``); by
        default only a worker the server killed past the execution timeout is replaced.
    """

    _seq = itertools.count()

    def __init__(
        self,
        ctx: LoadContext,
        stub_timeout: float,
        shm_prefix: str,
        environments: EnvironmentCache,
        workers: weakref.WeakSet[WorkerProcess] | None = None,
        closed: threading.Event | None = None,
        restart_dead: bool = False,
    ) -> None:
        self.ctx = ctx
        self.restart_dead = restart_dead
        self.name = ctx.instance.name
        self.decoupled = ctx.config.decoupled
        self.bridge = ServerBridge(ctx.server, ctx.logger)
        self.timeout = stub_timeout
        self.exec_timeout = execution_timeout(ctx.parameters)
        self.shm_prefix = shm_prefix
        self._workers = workers
        self._closed = closed or threading.Event()
        self._datatypes = input_datatypes(ctx.config)
        self._outputs = [io.name for io in ctx.config.outputs]
        self._check = OutputCheck(ctx.config)
        self._keys = itertools.count(1)
        #: EXECUTION_ENV_PATH's interpreter, or the model's requirements (built now unless cached)
        self._python = worker_env(ctx.parameters, ctx.model_dir, ctx.model_name, environments)
        #: the worker's debugger (TRITONX_DEBUG_MODEL), None without one
        self.debug = debug_setting(ctx.model_name, ctx.instance.index)
        self._init = m.Init(
            str(ctx.model_path),
            initialize_args(ctx),
            self.decoupled,
            shm_prefix,
            None if self.debug is None else (self.debug.host, self.debug.port, self.debug.wait),
        )
        self._cond = threading.Condition()
        #: the worker serving requests; None while it is being restarted
        self._link: WorkerLink | None = None
        #: a worker being started (initialize running)
        self._starting: WorkerLink | None = None
        #: a restart attempt is under way (not backing off): execute waits for it
        self._attempting = False
        self._restarter: threading.Thread | None = None
        self._closing = False
        self._failures = 0
        self._restarts = 0
        self._reason = ""
        self._wake = threading.Event()
        #: batches start from the event loop, which reads their answers itself (not for
        #: decoupled models, whose answers come through the control socket, nor with an
        #: execution timeout, which a thread enforces)
        self.async_execution = not self.decoupled and self.exec_timeout is None
        #: the event loop's reader of the serving worker's data socket
        self._loop_reader: LoopReader | None = None
        link = self._start()
        if not self._install(link):
            raise TritonXError(
                f"Stub process '{self.name}' is not healthy: the worker process (pid "
                f"{link.proc.pid}) {describe_exit(link.exit_code)} right after initialize",
                Code.INTERNAL,
            )

    # -------------------------------------------------------------- starting and restarting

    def _start(self) -> WorkerLink:
        """Start a worker and initialize the model in it.

        :raises TritonXError: Triton's ``Failed to initialize Python stub: ...`` and friends.
        """
        proc = WorkerProcess(self.name, self._python)
        if self._workers is not None:
            self._workers.add(proc)
        link = WorkerLink(self.name, proc, self.bridge, self.shm_prefix, self._check, self._gone)
        with self._cond:
            self._starting = link
            closing = self._closing or self._closed.is_set()
        try:
            if closing:  # unload() may have looked for a starting worker before this one
                raise EOFError("the instance is closing")
            if self.debug is not None:
                log.warning(
                    "python model '%s': instance '%s' (worker pid %d) listens for a debugger "
                    "on %s%s",
                    self.ctx.model_name,
                    self.name,
                    proc.pid,
                    self.debug.address,
                    " and waits for it before initialize" if self.debug.wait else "",
                )
            # a worker waiting for its debugger takes as long as the person debugging
            wait = None if self.debug is not None and self.debug.wait else self.timeout
            reply = link.command(self._init, wait)
        except concurrent.futures.TimeoutError:
            link.shutdown(0)
            raise TritonXError(
                f"Stub process '{self.name}' did not initialize within {self.timeout:g} s "
                "(stub-timeout-seconds)",
                Code.INTERNAL,
            ) from None
        except EOFError:
            link.shutdown(0)
            # Triton's text for a stub that died before answering its initialization
            log.error(
                "python model instance '%s': the worker process (pid %d) %s during initialize",
                self.name,
                proc.pid,
                describe_exit(link.exit_code),
            )
            raise TritonXError(
                f"Stub process '{self.name}' is not healthy.", Code.INTERNAL
            ) from None
        finally:
            with self._cond:
                self._starting = None
        if not isinstance(reply, m.Ready):
            link.shutdown(INIT_FAILED_GRACE_S)
            if isinstance(reply, m.InitFailed):
                log.error("initializing '%s' failed:\n%s", self.name, reply.traceback)
                error = reply.error
            else:
                error = f"unexpected answer from the worker: {reply!r}"
            raise TritonXError(f"Failed to initialize Python stub: {error}", Code.INTERNAL)
        link.probes = reply.probes
        return link

    def _install(self, link: WorkerLink) -> bool:
        """Make ``link`` the serving worker; False if it is gone already. (Its death from
        now on reaches :meth:`_gone` as the serving worker's.)"""
        with self._cond:
            if link.gone:
                return False
            self._link = link
            self._reason = ""
            self._attempting = False
            self._cond.notify_all()
            return True

    def _gone(self, link: WorkerLink) -> TritonXError | None:
        """The process of ``link`` ended (its reader thread): stop serving on it, and restart
        it when :attr:`restart_dead` or the link wants it (not when its end was asked for).
        Returns the error its requests fail with."""
        with self._cond:
            if self._closed.is_set() or self._closing:
                if link is self._link and not link.expected:
                    self._link = None
                return TritonXError(
                    f"the worker process of model instance '{self.name}' was stopped: the "
                    "model is being unloaded",
                    Code.UNAVAILABLE,
                )
            if link is not self._link:
                return None  # a worker that never served (a failed start)
            self._link = None
            if link.served or time.monotonic() - link.started >= STABLE_S:
                self._failures = 0
            cause = link.cause or (
                f"the worker process (pid {link.proc.pid}) {describe_exit(link.exit_code)}"
            )
            restarting = self.restart_dead or link.restart_wanted
            if not restarting:
                # Triton's backend starts no new stub: the instance stays not healthy (its
                # TRITONBACKEND_ModelInstanceReady text) until the model is loaded again
                self._reason = not_healthy(self.name).message
                self._attempting = False
                self._cond.notify_all()
            else:
                self._reason = f"Stub process '{self.name}' is not healthy: {cause}; restarting it"
                self._attempting = backoff(self._failures) == 0
                restarter = threading.Thread(
                    target=self._restart, name=f"tritonx-python-restart-{self.name}", daemon=True
                )
                self._restarter = restarter
                # started before unload() can see it: it joins it (a thread not started yet
                # cannot be joined); the thread waits for this lock before it does anything
                restarter.start()
        if restarting:
            log.error("python model '%s': %s", self.ctx.model_name, self._reason)
        else:
            log.error(
                "python model '%s': Stub process '%s' is not healthy: %s; it is not started "
                "again (as in Triton) until the model is loaded again "
                "(--backend-config=python,restart-dead-stubs=true restarts dead workers)",
                self.ctx.model_name,
                self.name,
                cause,
            )
        return None

    def _restart(self) -> None:
        """Start workers until one initializes (backing off between failures) or the instance
        closes."""
        while True:
            with self._cond:
                if self._closing or self._closed.is_set():
                    break
                delay = backoff(self._failures)
                self._failures += 1
                attempt = self._failures
            if delay:
                log.warning(
                    "python model '%s': restarting instance '%s' in %g s (restart %d)",
                    self.ctx.model_name,
                    self.name,
                    delay,
                    attempt,
                )
                if self._sleep(delay):
                    break
            with self._cond:
                if self._closing or self._closed.is_set():
                    break
                self._attempting = True
            try:
                link = self._start()
            except Exception as exc:  # TritonXError, or e.g. OSError from fork
                text = exc.message if isinstance(exc, TritonXError) else f"{exc!r}"
                with self._cond:
                    self._attempting = False
                    self._reason = (
                        f"Stub process '{self.name}' is not healthy: restarting it failed: {text}"
                    )
                    self._cond.notify_all()
                log.error(
                    "python model '%s': restart %d of instance '%s' failed: %s",
                    self.ctx.model_name,
                    attempt,
                    self.name,
                    text,
                )
                continue
            if not self._install(link):
                with self._cond:
                    self._attempting = False
                    self._cond.notify_all()
                log.error(
                    "python model '%s': restart %d of instance '%s' failed: the worker "
                    "process %s right after initialize",
                    self.ctx.model_name,
                    attempt,
                    self.name,
                    describe_exit(link.exit_code),
                )
                continue
            with self._cond:
                self._restarts += 1
            log.info(
                "python model '%s': instance '%s' restarted (worker pid %d, restart %d)",
                self.ctx.model_name,
                self.name,
                link.proc.pid,
                attempt,
            )
            return
        with self._cond:
            self._attempting = False
            self._cond.notify_all()

    def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; True when the instance closed meanwhile."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self._wake.wait(min(left, 0.25)) or self._closed.is_set():
                return True
        return False

    def _usable(self) -> WorkerLink:
        """The worker to run a batch on (waiting for a restart under way)."""
        with self._cond:
            while self._link is None and self._attempting and not self._closing:
                self._cond.wait()
            link = self._link
        if link is None:
            raise not_healthy(self.name)
        return link

    # -------------------------------------------------------------- ModelInstance

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse] | None:
        """Hand the batch to the worker and wait for its answer."""
        link = self._usable()
        batch_id, keys, future = self._send(link, requests)
        failed = True
        try:
            try:
                done = self._wait(link, future)
                failed = done.error is not None
            except TritonXError as exc:  # shared by every request the worker had: a copy
                raise TritonXError(exc.message, exc.code) from None
        finally:
            link.finish(batch_id, keys, failed)
        return self._responses(done, requests)

    def execute_async(
        self, requests: Sequence[InferenceRequest]
    ) -> asyncio.Future[Sequence[InferenceResponse] | None]:
        """Hand the batch to the worker from the event loop; the loop reads the answer when
        the data socket becomes readable (no thread in between)."""
        loop = asyncio.get_running_loop()
        link = self._link
        if link is None:
            raise not_healthy(self.name)
        reader = self._reader_for(link, loop)
        batch_id, keys, future = self._send(link, requests)
        result: asyncio.Future[Sequence[InferenceResponse] | None] = loop.create_future()

        def settle(done: m.Done | None, error: BaseException | None) -> None:
            link.finish(
                batch_id, keys, error is not None or (done is not None and done.error is not None)
            )
            if result.done():
                return
            if error is not None:
                if isinstance(error, TritonXError):  # shared by every request in flight
                    error = TritonXError(error.message, error.code)
                result.set_exception(error)
                return
            assert done is not None
            try:
                result.set_result(self._responses(done, requests))
            except Exception as exc:
                result.set_exception(exc)

        def gone(worker_future: asyncio.Future[m.Done]) -> None:
            exc = worker_future.exception() if not worker_future.cancelled() else None
            settle(None, exc or not_healthy(self.name))

        def answered() -> None:
            try:
                received = reader.channel.recv_ready()
                if received is None:  # the rest of the answer is on its way
                    return
                reader.answer = None
                done = link.done_message(*received)
            except Exception as exc:
                reader.answer = None
                self._drop_reader(reader)
                if not isinstance(exc, (EOFError, ConnectionError)):  # garbage on it: end it
                    link.unreadable(exc)
                # the link's reader thread fails the batch once it has seen the worker go
                asyncio.wrap_future(future, loop=loop).add_done_callback(gone)
                return
            if link.caught_up(done):
                settle(done, None)
                return
            # logs / metric updates sent before the answer are not handled yet: wait for them
            waited = loop.run_in_executor(None, link.wait_caught_up, done)
            waited.add_done_callback(lambda _: settle(done, None))

        reader.expect(answered)
        return result

    def _send(
        self, link: WorkerLink, requests: Sequence[InferenceRequest]
    ) -> tuple[int, list[int], concurrent.futures.Future[m.Done]]:
        """Send the batch to the worker: its id, its requests' keys and its future."""
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
        segment, descs = _ipc.pack_tensors(tensors, link.writer)
        batch_id = keys[0]
        try:
            future = link.submit(
                m.Execute(batch_id, segment, descs, metas), requests, keys, self.decoupled
            )
        except TritonXError as exc:  # the worker is gone already: nobody reads the segment
            if segment is not None:
                segment.discard()
            raise TritonXError(exc.message, exc.code) from None
        return batch_id, keys, future

    def _responses(
        self, done: m.Done, requests: Sequence[InferenceRequest]
    ) -> list[InferenceResponse] | None:
        """The core's responses from the worker's answer to ``requests``."""
        if done.error is not None:
            raise TritonXError(done.error, Code.INTERNAL)
        again = done.rescheduled
        for index in again:  # the core runs them again (iterative sequences)
            requests[index].release_flags = REQUEST_RELEASE_RESCHEDULE
        if done.responses is None:
            return None
        outputs: list[list[tuple[str, np.ndarray, str]]] = [[] for _ in requests]
        for (index, name), array, datatype in _ipc.unpack_tensors(done.segment, done.tensors):
            outputs[index].append((name, array, datatype))
        responses: list[InferenceResponse] = []
        for index, (request, tensors_, (err, params)) in enumerate(
            zip(requests, outputs, done.responses, strict=True)
        ):
            if again and index in again:
                responses.append(InferenceResponse())  # answered by a later execution
                continue
            if err is not None:
                responses.append(
                    InferenceResponse(error=core_error(err), parameters=parameters_of(params))
                )
                continue
            checked = self._check.check(tensors_, request.requested_outputs)
            responses.append(InferenceResponse(outputs=checked, parameters=parameters_of(params)))
        return responses

    def _reader_for(self, link: WorkerLink, loop: asyncio.AbstractEventLoop) -> LoopReader:
        """The loop's reader of ``link``'s data socket (one per worker; on the loop)."""
        held = self._loop_reader
        if held is not None and held.link is link:
            return held
        if held is not None:
            held.close()
        self._loop_reader = LoopReader(link, loop)
        return self._loop_reader

    def _drop_reader(self, reader: LoopReader) -> None:
        if self._loop_reader is reader:
            self._loop_reader = None
        reader.close()

    def _wait(self, link: WorkerLink, future: concurrent.futures.Future[m.Done]) -> m.Done:
        """The batch's answer (a decoupled model's comes through the link's reader thread,
        any other's is read here); past the execution timeout the worker is killed (its
        requests then fail with the timeout error, raised here)."""
        if not self.decoupled:
            done = link.wait_done(future, self.exec_timeout)
            if done is not None:
                return done
        else:
            try:
                return future.result(self.exec_timeout)
            except concurrent.futures.TimeoutError:
                pass
        seconds = f"{self.exec_timeout:g}"
        error = TritonXError(
            f"execute() of model '{self.ctx.model_name}' timed out after {seconds} s on "
            f"instance '{self.name}' ({TIMEOUT_PARAMETER}); its worker process was killed and is "
            "being restarted",
            Code.INTERNAL,
        )
        log.error("python model '%s': %s", self.ctx.model_name, error.message)
        link.restart_wanted = True  # the server's own doing, not a stub that died
        link.abort(error, f"execute() timed out after {seconds} s; the worker process was killed")
        try:
            return future.result(30.0)  # raises the error once the reader saw the worker go
        except concurrent.futures.TimeoutError:
            raise error from None

    def is_ready(self) -> bool:
        """False once the worker process died: until a new one serves (``restart-dead-stubs``,
        the execution timeout), else until the model is loaded again."""
        return self._link is not None

    def not_ready_reason(self) -> str:
        """Why the instance cannot serve ("" while it can)."""
        return "" if self._link is not None else self._reason

    @property
    def restarts(self) -> int:
        """How many times a new worker process took over after the previous one died."""
        return self._restarts

    def probe_ready(self) -> str | None:
        """Triton's instance readiness: the worker alive (else ``Stub process '<instance>'
        is not healthy.``), and the model's own ``is_ready()`` when it defines one (one call
        at a time, each check waiting :data:`READY_CHECK_TIMEOUT_S` at most, as Triton's
        backend: :meth:`~tritonx_backend_python.link.WorkerLink.check_ready`)."""
        link = self._link
        if self._closing:
            return None  # being unloaded (a reload swapped it out): not a failure
        if link is None or link.gone:
            return f"Stub process '{self.name}' is not healthy."
        if not link.probes:
            return None
        return link.check_ready(READY_CHECK_TIMEOUT_S)

    def abort(self) -> bool:
        """Kill the worker process (and one being started) at once, restarting none: the
        core's unload (or the server's exit) timed out while ``execute`` or ``finalize``
        still ran. The batch in flight fails with Triton's error for a stub that died
        (``Stub process '<instance>' is not healthy.``); :meth:`unload` follows."""
        with self._cond:
            self._closing = True
            links = [link for link in (self._link, self._starting) if link is not None]
            self._cond.notify_all()
        self._wake.set()
        for link in links:
            if link.gone:
                continue
            log.error(
                "python model '%s': instance '%s' is still running when the time to unload "
                "it is up: killing its worker process (pid %d)",
                self.ctx.model_name,
                self.name,
                link.proc.pid,
            )
            link.abort(not_healthy(self.name), "killed: the model's unload timed out")
        return True

    def unload(self) -> None:
        """Call the model's ``finalize`` and stop the worker (a restart under way is ended)."""
        with self._cond:
            self._closing = True
            starting, restarter = self._starting, self._restarter
            self._cond.notify_all()
        self._wake.set()
        if starting is not None:
            starting.abort(not_healthy(self.name), "the model is being unloaded")
        if restarter is not None:
            restarter.join(self.timeout + 5)
        with self._cond:
            link, self._link = self._link, None
        reader, self._loop_reader = self._loop_reader, None
        if reader is not None:  # (on the instance thread: the loop closes it)
            reader.close_threadsafe()
        if link is None:
            return
        if not link.gone:
            link.expected = True
            try:
                link.command(m.Finalize(), self.timeout)
            except concurrent.futures.TimeoutError:
                log.warning(
                    "python model '%s': Stub process '%s' did not finalize within %g s "
                    "(stub-timeout-seconds)",
                    self.ctx.model_name,
                    self.name,
                    self.timeout,
                )
            except EOFError:
                pass
        link.shutdown(FINALIZE_GRACE_S)


def auto_complete_in_worker(
    model_path: Path, config: dict[str, Any], python: WorkerEnv | str | None, timeout: float
) -> dict[str, Any]:
    """Run the model's ``auto_complete_config`` in a throw-away worker (``python``: its
    :class:`~tritonx_backend_python.process.WorkerEnv`, the interpreter of its
    ``EXECUTION_ENV_PATH``, or ``None``); the completed config."""
    proc = WorkerProcess(f"{config.get('name', '?')}-autocomplete", python)
    grace = 2.0
    try:
        proc.data.send_bytes(m.dumps(m.AutoComplete(str(model_path), json.dumps(config))))
        if not proc.conn.poll(timeout):
            grace = 0.0
            raise invalid_arg(
                f"auto-complete of model '{config.get('name')}' timed out after {timeout:g} s"
            )
        reply = m.loads(proc.conn.recv_bytes())
        proc.data.send_bytes(m.dumps(m.Finalize()))
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
