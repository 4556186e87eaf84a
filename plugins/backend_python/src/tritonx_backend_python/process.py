"""Worker processes: starting them (forkserver, a model's own interpreter, or the server's
interpreter with a model's own packages first), reaping and killing them, and saying how they
ended."""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonx.errors import invalid_arg
from tritonx_backend_python import _ipc, _stub

#: config.pbtxt parameter naming a per-model Python environment (folder or conda-pack tarball).
ENV_PARAMETER = "EXECUTION_ENV_PATH"

_forkserver_lock = threading.Lock()
_live_workers: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()

#: ``python -c`` program of a worker whose model has its own packages (a folder built from its
#: requirements): the folder goes first on ``sys.path`` before anything else is imported
#: (:func:`tritonx_backend_python._sitedir.layer`; the package imports nothing of the server),
#: the server's packages stay behind it; then the stub runs.
_LAYERED_STUB = """\
import sys
site_dir, package_root, *fds = sys.argv[1:]
if package_root not in sys.path:
    sys.path.append(package_root)
from tritonx_backend_python._sitedir import layer
layer(site_dir)
from tritonx_backend_python._stub import main
main(fds)
"""


@dataclass(frozen=True)
class WorkerEnv:
    """The Python a worker runs under, when not the forkserver's.

    :param python: the interpreter of the model's ``EXECUTION_ENV_PATH``.
    :param site_dir: a folder of packages (the model's requirements, built by
        :mod:`~tritonx_backend_python.environment`) put first on ``sys.path`` of a worker
        running under the server's own interpreter (a fresh one: the forkserver has imported
        numpy already).
    """

    python: str | None = None
    site_dir: str | None = None


def top_level_names(site_dir: str) -> set[str] | None:
    """The names a folder of packages can be imported by (packages, modules, extension
    modules), or ``None`` when it holds ``.pth`` files (which may import anything)."""
    names: set[str] = set()
    for entry in os.scandir(site_dir):
        name = entry.name
        if name.endswith(".pth"):
            return None
        if entry.is_dir():
            if not name.endswith((".dist-info", ".egg-info", ".data")) and name.isidentifier():
                names.add(name)
        elif name.endswith((".py", ".so", ".pyd")):
            names.add(name.split(".", 1)[0])
    return names


@functools.cache
def _forkserver_modules() -> frozenset[str]:
    """The top-level names of every module the forkserver has imported (numpy, the stub and
    what they import): a forked worker has them already, whatever comes first on its path."""
    ctx = _context()
    reader, writer = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_stub.report_modules, args=(writer,), daemon=True)
    with _forkserver_lock, _main_module_hidden():
        process.start()
    writer.close()
    try:
        names: list[str] = reader.recv()
    finally:
        reader.close()
        process.join()
    return frozenset(names)


_forkable: dict[str, bool] = {}


def forkable(site_dir: str) -> bool:
    """Whether a worker whose model has the packages of ``site_dir`` can be forked from the
    forkserver (milliseconds) with the folder put first on its path, instead of starting a
    fresh interpreter (a few hundred milliseconds): when none of the folder's packages is one
    the forkserver has imported already (a numpy of the model's own needs a fresh one, or the
    server's would be used) and no ``.pth`` file needs running."""
    known = _forkable.get(site_dir)
    if known is None:
        names = top_level_names(site_dir)
        stdlib: frozenset[str] = getattr(sys, "stdlib_module_names", frozenset())
        known = names is not None and not (names & (_forkserver_modules() | stdlib))
        _forkable[site_dir] = known
    return known


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
    """A worker process and its two Unix sockets (forkserver child or env subprocess):
    ``conn`` carries the messages of the worker's other threads (BLS, logs, metrics,
    decoupled responses) and their replies, ``data`` the work of its main thread (init,
    execute, finalize) and the results of non-decoupled batches, read by the thread waiting
    for them. Both carry the descriptors of the shared-memory segments beside the messages.

    :param name: names the process (``tritonx-python-<name>``).
    :param env: how the worker starts: a :class:`WorkerEnv`, or the interpreter of the
        model's ``EXECUTION_ENV_PATH``; ``None`` forks the worker from the forkserver.
    """

    def __init__(self, name: str, env: WorkerEnv | str | None = None) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._popen: subprocess.Popen[bytes] | None = None
        self._process: Any = None
        if isinstance(env, str):
            env = WorkerEnv(python=env)
        forked_site_dir = None
        if env is not None and env.python is None and env.site_dir is not None:
            if forkable(env.site_dir):  # the model's packages, layered in a forked worker
                forked_site_dir, env = env.site_dir, None
        if env is None or (env.python is None and env.site_dir is None):
            ctx = _context()
            ours, theirs = socket.socketpair()
            data_ours, data_theirs = socket.socketpair()
            self._process = ctx.Process(
                target=_stub.run_forked,
                args=(theirs, data_theirs, forked_site_dir),
                name=f"tritonx-python-{name}",
                daemon=False,
            )
            with _forkserver_lock, _main_module_hidden():
                self._process.start()
            theirs.close()
            data_theirs.close()
            self.conn = _ipc.Channel(ours.detach())
            self.data = _ipc.Channel(data_ours.detach())
            self.pid: int = self._process.pid
        else:
            ours, theirs = socket.socketpair()
            data_ours, data_theirs = socket.socketpair()
            package_root = str(Path(_stub.__file__).resolve().parents[1])
            environ = dict(os.environ)
            fds = [theirs.fileno(), data_theirs.fileno()]
            if env.site_dir is not None:  # the server's interpreter, the model's packages first
                argv = [sys.executable, "-c", _LAYERED_STUB, env.site_dir, package_root]
            else:
                assert env.python is not None
                environ["PYTHONPATH"] = os.pathsep.join(
                    p for p in (package_root, environ.get("PYTHONPATH", "")) if p
                )
                argv = [env.python, "-m", "tritonx_backend_python._stub"]
                env_bin = str(Path(env.python).parent)
                environ["PATH"] = os.pathsep.join((env_bin, environ.get("PATH", "")))
            self._popen = subprocess.Popen(
                [*argv, *map(str, fds)], pass_fds=fds, env=environ, close_fds=True
            )
            theirs.close()
            data_theirs.close()
            self.conn = _ipc.Channel(ours.detach())
            self.data = _ipc.Channel(data_ours.detach())
            self.pid = self._popen.pid
        _live_workers.add(self)

    def exitcode(self, wait: float = 0.0) -> int | None:
        """The exit status (negative: killed by that signal), None while running; ``wait``:
        seconds to wait for the end first."""
        if self._popen is not None:
            try:
                return self._popen.wait(wait) if wait else self._popen.poll()
            except subprocess.TimeoutExpired:
                return None
        if wait:
            multiprocessing.connection.wait([self._process.sentinel], wait)
        with self._lock:  # the exit status is read once from the sentinel: one reader at a time
            code: int | None = self._process.exitcode
        return code

    def wait_exit(self) -> None:
        """Block until the process has ended (without reaping it)."""
        if self._popen is not None:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
            return
        multiprocessing.connection.wait([self._process.sentinel])

    def stop(self, grace: float) -> None:
        """Wait up to ``grace`` seconds for the process to exit by itself, then kill it."""
        if grace > 0 and self.exitcode(wait=grace) is not None:
            _live_workers.discard(self)
        else:
            self.kill()

    def kill(self) -> None:
        """Kill the process (SIGKILL) and reap it."""
        try:
            if self.exitcode() is None:
                if self._popen is not None:
                    self._popen.kill()
                else:
                    self._process.kill()
            self.exitcode(wait=5.0)
        except Exception:  # already gone
            pass
        _live_workers.discard(self)

    def interrupt(self) -> None:
        """Wake the threads blocked reading the connections (they read EOF), even when a
        process the model forked still holds the worker's ends of the sockets."""
        socks = []
        for conn in (self.data, self.conn):  # both held before either is shut down
            try:
                socks.append(socket.socket(fileno=os.dup(conn.fileno())))
            except (OSError, ValueError):
                continue
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            finally:
                sock.close()

    def close(self) -> None:
        """Close the connections to the process."""
        for conn in (self.conn, self.data):
            try:
                conn.close()
            except OSError:
                pass


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


def env_python(path_text: str, model_dir: Path) -> str:
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
