"""Per-model Python requirements: a model's own packages, layered on top of the server's Python.

A ``requirements.txt`` in a python model's folder (beside config.pbtxt), or the file its
``TRITONX_REQUIREMENTS`` parameter names, is installed with ``uv pip install --target <dir>``
(``pip install --target`` when uv is not installed) into a folder of a cache shared by every
model, version and instance with the same requirements, and by servers that share the cache.
The model's workers then run under the server's own interpreter with that folder first on
``sys.path`` (:class:`~tritonx_backend_python.process.WorkerEnv`).

A cached environment is named by a hash of the requirements file's bytes, the interpreter
(``sys.version``, the real path of ``sys.executable``, the platform) and the installer. A build
holds ``<hash>.lock`` (``flock``) and installs into a temporary sibling folder renamed to
``<hash>`` when complete, so a folder named by its hash is always whole; a failed build leaves
``<hash>.failed`` (its message, for ``tritonx check``) and is tried again at the next load.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx_backend_python.process import ENV_PARAMETER, WorkerEnv, env_python

__all__ = [
    "CACHE_DIR_KEY",
    "DEFAULT_REQUIREMENTS",
    "REQUIREMENTS_PARAMETER",
    "EnvironmentCache",
    "EnvironmentStatus",
    "Installer",
    "Requirements",
    "default_cache_dir",
    "find_requirements",
    "worker_env",
]

#: config.pbtxt parameter naming the model's requirements file (relative to the model folder).
REQUIREMENTS_PARAMETER = "TRITONX_REQUIREMENTS"
#: the requirements file a model folder may hold when the parameter is not set
DEFAULT_REQUIREMENTS = "requirements.txt"
#: ``--backend-config=python,<key>=<dir>``: where the environments are cached
CACHE_DIR_KEY = "requirements-cache-dir"
#: substituted by the model's folder in the parameter, as in ``EXECUTION_ENV_PATH``
MODEL_DIR_VARIABLE = "$$TRITON_MODEL_DIRECTORY"
#: a failed build's installer output keeps at most this many lines (head and tail)
MAX_OUTPUT_LINES = 30
#: a file inside a built environment saying what it was built from
MANIFEST = ".tritonx-environment.json"

log = logging.getLogger("tritonx.backend.python")


@dataclass(frozen=True)
class Requirements:
    """A model's requirements file.

    :param path: the file (resolved: symbolic links followed).
    :param explicit: named by ``TRITONX_REQUIREMENTS`` (not the folder's ``requirements.txt``).
    """

    path: Path
    explicit: bool


def find_requirements(
    parameters: Mapping[str, str], model_dir: Path, model: str
) -> Requirements | None:
    """The model's requirements file: the one ``TRITONX_REQUIREMENTS`` names, else the model
    folder's ``requirements.txt``; ``None`` when it has neither, or when its
    ``EXECUTION_ENV_PATH`` (its own interpreter) makes a ``requirements.txt`` moot.

    :raises TritonXError: INVALID_ARG when the parameter names a file outside the model's
        folder (configs may come from clients, through the load API) or no file, or when the
        model names requirements and an ``EXECUTION_ENV_PATH`` both.
    """
    text = parameters.get(REQUIREMENTS_PARAMETER, "").strip()
    if not text:
        default = model_dir / DEFAULT_REQUIREMENTS
        if ENV_PARAMETER in parameters or not default.is_file():
            return None
        return Requirements(default.resolve(), explicit=False)
    if ENV_PARAMETER in parameters:
        raise invalid_arg(
            f"python model '{model}' gives both {ENV_PARAMETER} (its own interpreter) and "
            f"{REQUIREMENTS_PARAMETER} (packages layered on the server's interpreter): give one"
        )
    folder = model_dir.resolve()
    path = (folder / text.replace(MODEL_DIR_VARIABLE, str(model_dir))).resolve()
    if not path.is_relative_to(folder):
        raise invalid_arg(
            f"parameter {REQUIREMENTS_PARAMETER} of python model '{model}' must name a file "
            f"inside the model's folder, got '{text}'"
        )
    if not path.is_file():
        raise invalid_arg(
            f"parameter {REQUIREMENTS_PARAMETER} of python model '{model}' names no file: "
            f"'{text}' ({path})"
        )
    return Requirements(path, explicit=True)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tritonx/python-envs``, or ``~/.cache/tritonx/python-envs``."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".cache"
    return root / "tritonx" / "python-envs"


@dataclass(frozen=True)
class Installer:
    """The program that installs requirements into a folder: uv, else pip.

    :param name: ``uv`` or ``pip``.
    :param version: its version (part of an environment's hash).
    :param program: the uv executable (``None`` for pip, run as ``python -m pip``).
    """

    name: str
    version: str
    program: str | None = None

    @classmethod
    def find(cls) -> Installer:
        """uv when its Python package is installed, else pip."""
        try:
            import uv

            return cls("uv", importlib.metadata.version("uv"), uv.find_uv_bin())
        except (ImportError, FileNotFoundError, importlib.metadata.PackageNotFoundError):
            pass
        try:
            version = importlib.metadata.version("pip")
        except importlib.metadata.PackageNotFoundError:
            version = "not installed"
        return cls("pip", version)

    def command(self, target: Path, requirements: Path) -> list[str]:
        """The command installing ``requirements`` into ``target`` for this interpreter."""
        if self.program is not None:
            return [
                self.program, "pip", "install", "--target", str(target), "-r", str(requirements),
                "--python", sys.executable, "--compile-bytecode", "--color", "never", "--no-progress",
                "--quiet",
            ]  # fmt: skip
        return [
            sys.executable, "-m", "pip", "install", "--target", str(target), "-r",
            str(requirements), "--disable-pip-version-check", "--no-input", "--no-color",
            "--progress-bar", "off",
        ]  # fmt: skip

    def describe(self) -> str:
        """``uv pip install`` / ``pip install``."""
        return "uv pip install" if self.program is not None else "pip install"


_installer_lock = threading.Lock()


@functools.cache
def _installer() -> Installer:
    """:meth:`Installer.find`, once. ``sysconfig``'s variables are read first under a lock:
    Python 3.11 fills them in without one, so a thread reading them while another fills them
    in may see some missing (uv's ``find_uv_bin`` reads ``EXE``)."""
    with _installer_lock:
        sysconfig.get_config_vars()
        return Installer.find()


def trim_output(text: str, max_lines: int = MAX_OUTPUT_LINES) -> str:
    """An installer's output, short enough for a load error: its non-empty lines, the first
    few and the last ones when there are too many (the line naming the requirement that
    cannot be installed comes last, with uv and pip)."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if len(lines) > max_lines:
        head = max_lines // 5
        tail = max_lines - head
        lines = [*lines[:head], f"... ({len(lines) - max_lines} lines left out)", *lines[-tail:]]
    return "\n".join(line if len(line) <= 1000 else line[:1000] + " ..." for line in lines)


@dataclass(frozen=True)
class EnvironmentStatus:
    """What the cache holds for one requirements file (``tritonx check``; builds nothing).

    :param state: ``cached`` (built), ``to build`` (not in the cache) or ``failing`` (not in
        the cache, and its last build failed; the next load tries again).
    :param key: the environment's hash.
    :param path: its folder (exists when ``cached``).
    :param message: the last build's error when ``failing``.
    """

    state: str
    key: str
    path: Path
    message: str = ""

    def describe(self) -> str:
        """``cached (<path>)``, ``to build at load (<hash>)`` or ``failing (<hash>: <the
        error's last line>)``."""
        if self.state == "cached":
            return f"cached ({self.path})"
        if self.state == "failing":
            last = self.message.strip().splitlines()[-1:] or ["its last build failed"]
            return f"failing ({self.key}: {last[0].strip()})"
        return f"to build at load ({self.key})"


class EnvironmentCache:
    """The folder of built environments, one subfolder per hash.

    :param root: the cache folder (created at the first build).
    :param installer: what builds them (default: :meth:`Installer.find`, looked up when first
        needed).
    """

    def __init__(self, root: Path, installer: Installer | None = None) -> None:
        self.root = root
        self._installer = installer

    @property
    def installer(self) -> Installer:
        """What builds the environments (uv, else pip)."""
        if self._installer is None:
            self._installer = _installer()
        return self._installer

    @classmethod
    def from_config(cls, backend_config: Mapping[str, str]) -> EnvironmentCache:
        """The cache ``--backend-config=python,requirements-cache-dir=<dir>`` names (default:
        :func:`default_cache_dir`)."""
        text = backend_config.get(CACHE_DIR_KEY, "").strip()
        return cls(Path(text).expanduser() if text else default_cache_dir())

    def key(self, requirements: bytes) -> str:
        """The hash naming the environment of these requirements, for this interpreter and
        installer."""
        identity = {
            "requirements": hashlib.sha256(requirements).hexdigest(),
            "python": sys.version,
            "executable": os.path.realpath(sys.executable),
            "platform": sysconfig.get_platform(),
            "installer": f"{self.installer.name} {self.installer.version}",
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]

    def status(self, requirements: Path) -> EnvironmentStatus:
        """What the cache holds for ``requirements`` (reads, never builds)."""
        key = self.key(_read(requirements))
        path = self.root / key
        if path.is_dir():
            return EnvironmentStatus("cached", key, path)
        failed = self.root / f"{key}.failed"
        try:
            record = json.loads(failed.read_text(encoding="utf-8"))
            return EnvironmentStatus("failing", key, path, str(record.get("message", "")))
        except (OSError, ValueError, AttributeError):
            return EnvironmentStatus("to build", key, path)

    def ensure(self, requirements: Path, model: str) -> Path:
        """The environment of ``requirements``, built first unless the cache holds it.

        :param model: names the model in the log and in errors.
        :raises TritonXError: INTERNAL, with the installer's output, when the build fails.
        """
        data = _read(requirements)
        key = self.key(data)
        final = self.root / key
        if final.is_dir():  # only ever appears whole (renamed from a finished build)
            log.info("python model '%s': using the cached environment %s", model, final)
            return final
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TritonXError(
                f"python model '{model}': cannot create the environment cache {self.root}: {exc}",
                Code.INTERNAL,
            ) from exc
        with self._locked(key, model):
            if final.is_dir():  # built by another model, or another server, meanwhile
                log.info("python model '%s': using the cached environment %s", model, final)
                return final
            self._build(requirements, data, key, model)
        return final

    @contextlib.contextmanager
    def _locked(self, key: str, model: str) -> Iterator[None]:
        """Hold ``<hash>.lock``: one build of an environment at a time, across threads and
        processes (``flock``: released when the holder dies)."""
        fd = os.open(self.root / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info(
                    "python model '%s': waiting for the build of its environment (%s) under way",
                    model,
                    key,
                )
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _build(self, requirements: Path, data: bytes, key: str, model: str) -> None:
        """Install into a temporary sibling and rename it to ``<hash>`` (lock held)."""
        for leftover in self.root.glob(f"{key}.tmp-*"):  # a killed build's: never used
            shutil.rmtree(leftover, ignore_errors=True)
        temp = self.root / f"{key}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        log.info(
            "python model '%s': building its environment from %s (%s)", model, requirements, key
        )
        started = time.monotonic()
        try:
            self._install(requirements, temp, model)
            manifest = {
                "requirements": data.decode("utf-8", errors="replace"),
                "source": str(requirements),
                "python": sys.version,
                "executable": os.path.realpath(sys.executable),
                "installer": f"{self.installer.name} {self.installer.version}",
                "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            (temp / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
            os.rename(temp, self.root / key)
        except TritonXError as exc:
            shutil.rmtree(temp, ignore_errors=True)
            self._record_failure(key, exc.message)
            raise
        except OSError as exc:
            shutil.rmtree(temp, ignore_errors=True)
            raise TritonXError(
                f"python model '{model}': building its environment in {self.root} failed: {exc}",
                Code.INTERNAL,
            ) from exc
        with contextlib.suppress(OSError):
            (self.root / f"{key}.failed").unlink(missing_ok=True)
        log.info(
            "python model '%s': environment built in %.2f s (%s)",
            model,
            time.monotonic() - started,
            self.root / key,
        )

    def _install(self, requirements: Path, target: Path, model: str) -> None:
        """Run the installer; raise its output when it fails."""
        target.mkdir()
        command = self.installer.command(target, requirements)
        environ = {**os.environ, "NO_COLOR": "1", "PIP_NO_COLOR": "1"}
        try:
            done = subprocess.run(
                command,
                cwd=requirements.parent,
                env=environ,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                check=False,
            )
        except OSError as exc:
            raise TritonXError(
                f"python model '{model}': cannot run {self.installer.describe()} to install "
                f"{requirements}: {exc}",
                Code.INTERNAL,
            ) from exc
        if done.returncode != 0:
            output = trim_output(done.stderr) or trim_output(done.stdout) or "(no output)"
            raise TritonXError(
                f"python model '{model}': installing its requirements ({requirements}) failed: "
                f"{self.installer.describe()} exited with code {done.returncode}:\n{output}",
                Code.INTERNAL,
            )

    def _record_failure(self, key: str, message: str) -> None:
        """Write ``<hash>.failed`` (for ``tritonx check``; the next load builds again)."""
        record = {"message": message, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        temp = self.root / f"{key}.failed.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            temp.write_text(json.dumps(record, indent=2), encoding="utf-8")
            os.replace(temp, self.root / f"{key}.failed")
        except OSError:
            log.warning("could not record the failed build %s in %s", key, self.root)
            with contextlib.suppress(OSError):
                temp.unlink()


def _read(requirements: Path) -> bytes:
    try:
        return requirements.read_bytes()
    except OSError as exc:
        raise invalid_arg(f"cannot read the requirements file {requirements}: {exc}") from exc


def worker_env(
    parameters: Mapping[str, str], model_dir: Path, model: str, cache: EnvironmentCache
) -> WorkerEnv | None:
    """How the model's workers start: under its ``EXECUTION_ENV_PATH`` interpreter, or the
    server's interpreter with its requirements' environment first on ``sys.path`` (built now
    unless cached), or ``None`` (forked from the forkserver)."""
    env = parameters.get(ENV_PARAMETER)
    requirements = find_requirements(parameters, model_dir, model)
    if env:
        if (model_dir / DEFAULT_REQUIREMENTS).is_file():
            log.info(
                "python model '%s': %s is not installed: the model runs in its own %s",
                model,
                DEFAULT_REQUIREMENTS,
                ENV_PARAMETER,
            )
        return WorkerEnv(python=env_python(env, model_dir))
    if requirements is None:
        return None
    return WorkerEnv(site_dir=str(cache.ensure(requirements.path, model)))
