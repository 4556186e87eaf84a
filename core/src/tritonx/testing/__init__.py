"""tritonx's opt-in pytest plugin: ``pytest -p tritonx.testing`` or
``pytest_plugins = ["tritonx.testing"]``.

Fixtures:

* ``plugin_manager``: isolated (no autoload), with the ``identity`` test backend; installed
  first-party plugins are added by name with ``tritonx_plugins`` (override that fixture).
* ``register_plugin(obj)``: registers a plugin object for one test.
* ``model_repository``: a :class:`ModelRepositoryBuilder` on ``tmp_path``.
* ``server_settings``: loopback addresses, ports 0; override to change flags.
* ``server``: an async fixture with a started :class:`tritonx.Server` on the test's loop.
* ``server_thread``: a started server on its own loop thread, for synchronous clients.
* ``http_client`` / ``grpc_client``: tritonclient aio clients connected to ``server``.

Helpers: :func:`serve_repository` (a started server over a repository a test wrote, as an
async context manager), :func:`model_status` (a model's state and reason in the repository
index), :func:`echo_plugin_env` (an environment where the identity backend is an installed
plugin, for ``tritonx`` subprocesses), :func:`listening` (the addresses a ``tritonx serve``
subprocess started its listeners on), :class:`ServeProcess` (a ``tritonx serve`` subprocess on
free loopback ports, its log in a file, ``/metrics`` parsed), :func:`listed_plugins` (what ``tritonx plugins``
lists for a plugin source tree, without installing it) and :func:`free_port`.

And :class:`BackendContract`, the test suite every backend inherits.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pluggy
import pytest

from tritonx._runtime.plugins import make_plugin_manager
from tritonx.config import ServerSettings
from tritonx.server import Server
from tritonx.testing import identity
from tritonx.testing.contract import BackendContract
from tritonx.testing.repository import ModelRepositoryBuilder
from tritonx.testing.serve_process import ServeProcess
from tritonx.testing.server_thread import ServerThread
from tritonx.types import ModelState

__all__ = [
    "BackendContract",
    "ModelRepositoryBuilder",
    "ServeProcess",
    "ServerThread",
    "echo_plugin_env",
    "free_port",
    "listed_plugins",
    "listening",
    "loopback_settings",
    "model_status",
    "restore_logging",
    "serve_repository",
    "shared_memory_objects",
]


#: The module of the ``backend_echo`` plugin :func:`echo_plugin_env` installs: it registers the
#: identity test backend (:mod:`tritonx.testing.identity`).
ECHO_PLUGIN = "from tritonx.testing.identity import tritonx_register_backends  # noqa: F401\n"


def echo_plugin_env(
    folder: Path,
    source: str = ECHO_PLUGIN,
    *,
    plugins: Sequence[str] = ("backend_echo",),
    pythonpath: Sequence[str] = (),
    drop: Sequence[str] = ("TRITONX_",),
) -> dict[str, str]:
    """An environment for a ``tritonx`` subprocess in which ``source`` is an installed plugin
    named ``backend_echo`` (a module and a dist-info folder with its entry point, written to
    ``folder``), selected with ``TRITONX_PLUGINS`` (``plugins``).

    ``PYTHONPATH`` is ``folder``, then ``pythonpath``, then the caller's; variables starting
    with one of ``drop`` are left out (the caller's plugin switches by default)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "backend_echo.py").write_text(source)
    info = folder / "tritonx_backend_echo-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: tritonx-backend-echo\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text("[tritonx]\nbackend_echo = backend_echo\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(tuple(drop))}
    paths = [str(folder), *pythonpath, os.environ.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["TRITONX_PLUGINS"] = ",".join(plugins)
    return env


#: The start-up log line of each listener (``tritonx serve`` logs it as tritonserver does).
_STARTED = re.compile(r"Started (HTTPService|GRPCInferenceService) at (\S+):(\d+)")


def listening(
    proc: subprocess.Popen[str],
    services: Sequence[str] = ("HTTPService", "GRPCInferenceService"),
    timeout: float = 180.0,
) -> tuple[dict[str, str], list[str]]:
    """Read ``proc``'s stderr (text) until each of ``services`` logged ``Started <service> at
    <host>:<port>``; returns ``{service: "host:port"}`` and the lines read. Past ``timeout``
    (a deadline for a hang, generous for a loaded machine; it holds while no line comes), or
    if the process ends first, it is killed and AssertionError carries its log."""
    assert proc.stderr is not None
    found: dict[str, str] = {}
    lines: list[str] = []
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        proc.kill()  # ends a readline() waiting for a line that never comes

    # the deadline holds while readline() waits too: a server that hangs, or logs no more
    # lines without the ones awaited, is killed then, and its log ends
    killer = threading.Timer(timeout, expire)
    killer.daemon = True
    killer.start()
    try:
        while not all(s in found for s in services):
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            match = _STARTED.search(line)
            if match:
                found[match.group(1)] = f"{match.group(2)}:{match.group(3)}"
    finally:
        killer.cancel()
    if expired.is_set() or not all(s in found for s in services):
        proc.kill()
        why = f"did not start within {timeout:g} s" if expired.is_set() else "did not start"
        raise AssertionError(f"tritonx serve {why}:\n" + "".join(lines)[-4000:])
    return found, lines


def listed_plugins(plugin_root: Path, folder: Path) -> dict[str, dict[str, Any]]:
    """What ``tritonx plugins`` lists, by name, for the plugin distribution whose
    ``pyproject.toml`` is in ``plugin_root`` (sources in ``src/``), only its plugins
    selected: the installed distribution, or, when it is not installed, a dist-info with the
    entry points the pyproject declares written to ``folder`` (no pip install needed)."""
    import importlib.metadata
    import tomllib

    project = tomllib.loads((plugin_root / "pyproject.toml").read_text())["project"]
    entry_points: dict[str, str] = project["entry-points"]["tritonx"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
    try:
        importlib.metadata.distribution(project["name"])
    except importlib.metadata.PackageNotFoundError:
        module = project["name"].replace("-", "_")
        info = folder / f"{module}-{project['version']}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
        )
        lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
        (info / "entry_points.txt").write_text("[tritonx]\n" + lines)
        paths = [str(folder), str(plugin_root / "src"), os.environ.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["TRITONX_PLUGINS"] = ",".join(entry_points)
    out = subprocess.run(
        [sys.executable, "-m", "tritonx", "plugins"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    )
    return {p["name"]: p for p in json.loads(out.stdout)}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (for a subprocess that needs its port on the command
    line; another process may take it before it binds)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def loopback_settings(
    repository: Path | str | list[Path] | list[str], **overrides: Any
) -> ServerSettings:
    """Settings for a test server: loopback only, every port chosen by the OS."""
    repos = repository if isinstance(repository, list) else [repository]
    base: dict[str, Any] = {
        "model_repository": tuple(str(r) for r in repos),
        "http_address": "127.0.0.1",
        "grpc_address": "127.0.0.1",
        "metrics_address": "127.0.0.1",
        "http_port": 0,
        "grpc_port": 0,
        "metrics_port": 0,
        "exit_on_error": False,
        "exit_timeout_secs": 10.0,
    }
    base.update(overrides)
    return ServerSettings(**base)


@contextlib.asynccontextmanager
async def serve_repository(
    repo: ModelRepositoryBuilder, plugin_manager: pluggy.PluginManager, **overrides: Any
) -> AsyncIterator[Server]:
    """A started server over ``repo`` (after the test wrote its models), on loopback ports
    chosen by the OS; ``overrides`` are :class:`ServerSettings` fields."""
    async with Server(
        loopback_settings(repo.root, **overrides), plugin_manager=plugin_manager
    ) as server:
        yield server


def model_status(server: Server, name: str) -> tuple[ModelState | None, str]:
    """(state, reason) of model ``name``'s first row in the repository index."""
    rows = [r for r in server.repository_index() if r.name == name]
    assert rows, server.status_table()
    return rows[0].state, rows[0].reason


def shared_memory_objects(pid: int, semaphores: bool = False) -> set[str]:
    """The shared-memory objects process ``pid`` maps or holds open, as anyone who may read
    its ``/proc`` sees them: ``/dev/shm/<name>`` files and nameless ``/memfd:<name>``
    segments; POSIX semaphores (``/dev/shm/sem.*``, e.g. multiprocessing's locks) only with
    ``semaphores``. Empty once the process is gone."""
    found: set[str] = set()
    try:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) == 6:
                found.add(parts[5])
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    except (FileNotFoundError, ProcessLookupError):
        return set()
    paths = {path.removesuffix(" (deleted)") for path in found}
    return {
        path
        for path in paths
        if path.startswith(("/dev/shm/", "/memfd:"))
        and (semaphores or not path.startswith("/dev/shm/sem."))
    }


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """The log settings are the process's: put them back after a test that changes them
    (through ``/v2/logging``, the gRPC ``LogSettings`` or :func:`tritonx._runtime.logs.update`)."""
    from tritonx._runtime import logs

    saved = logs.settings()
    level = logging.getLogger("tritonx").level
    yield
    logs.update(
        info=saved["log_info"],
        warning=saved["log_warning"],
        error=saved["log_error"],
        verbose=saved["log_verbose_level"],
        log_format=saved["log_format"],
    )
    logging.getLogger("tritonx").setLevel(level)


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    """Entry-point names of installed plugins the ``plugin_manager`` fixture loads (none)."""
    return ()


@pytest.fixture
def plugin_manager(tritonx_plugins: tuple[str, ...]) -> pluggy.PluginManager:
    """An isolated plugin manager: the identity test backend plus ``tritonx_plugins``."""
    pm = make_plugin_manager(
        autoload=bool(tritonx_plugins), only=tritonx_plugins or None, extra=[identity]
    )
    return pm


@pytest.fixture
def register_plugin(plugin_manager: pluggy.PluginManager) -> Iterator[Callable[[object], None]]:
    """Register a plugin object for the duration of one test."""
    registered: list[object] = []

    def register(obj: object, name: str | None = None) -> None:
        plugin_manager.register(obj, name=name)
        registered.append(obj)

    yield register
    for obj in registered:
        plugin_manager.unregister(obj)


@pytest.fixture
def model_repository(tmp_path: Path) -> ModelRepositoryBuilder:
    """An empty model repository under ``tmp_path / "models"``."""
    return ModelRepositoryBuilder(tmp_path / "models")


@pytest.fixture
def server_settings(model_repository: ModelRepositoryBuilder) -> ServerSettings:
    """Settings of the ``server`` fixtures (override this fixture to change flags)."""
    return loopback_settings(model_repository.root)


@pytest.fixture
async def server(
    server_settings: ServerSettings, plugin_manager: pluggy.PluginManager
) -> AsyncIterator[Server]:
    """A started server on the test's event loop (use aio clients against it)."""
    async with Server(server_settings, plugin_manager=plugin_manager) as srv:
        yield srv


@pytest.fixture
def server_thread(
    server_settings: ServerSettings, plugin_manager: pluggy.PluginManager
) -> Iterator[ServerThread]:
    """A started server on its own loop thread (use synchronous clients against it)."""
    thread = ServerThread(Server(server_settings, plugin_manager=plugin_manager))
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


@contextlib.asynccontextmanager
async def _aio_client(module: str, url: str) -> AsyncIterator[Any]:
    """``<module>.InferenceServerClient(url)`` (a tritonclient aio module), closed after."""
    client = importlib.import_module(module).InferenceServerClient(url)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def http_client(server: Server) -> AsyncIterator[Any]:
    """``tritonclient.http.aio.InferenceServerClient`` connected to ``server``."""
    async with _aio_client("tritonclient.http.aio", server.http_url) as client:
        yield client


@pytest.fixture
async def grpc_client(server: Server) -> AsyncIterator[Any]:
    """``tritonclient.grpc.aio.InferenceServerClient`` connected to ``server``."""
    async with _aio_client("tritonclient.grpc.aio", server.grpc_url) as client:
        yield client


def installed_plugins() -> set[str]:
    """Names of the installed ``tritonx`` entry points."""
    return {ep.name for ep in importlib.metadata.entry_points(group="tritonx")}
