"""Per-model Python requirements: a model's own packages, layered on top of the server's Python.

A ``requirements.txt`` in a python model's folder (beside config.pbtxt), or the file its
``TRITONX_REQUIREMENTS`` parameter names, is read under the operator's rules
(:mod:`~tritonx_backend_python.reqfile`: what it may name, which installer options and index
URLs), the local packages it names are copied into a fresh folder, and the result is installed
with ``uv pip install --target <dir>`` (``pip install --target`` when uv is not installed) into
a folder of a cache shared by every model, version and instance with the same requirements. The
cache is the server's own (under the temp folder, removed when the server exits) unless
``--backend-config=python,requirements-cache-dir=<dir>`` names one, which servers may share.
The model's workers then run under the server's own interpreter with that folder first on
``sys.path`` (:class:`~tritonx_backend_python.process.WorkerEnv`).

A cached environment is named by a hash of everything the install reads: the lines given to
the installer (the requirements file and those it includes, with the index URLs and options
they use), the content of every local wheel, sdist and folder they name, the installer's own
settings (``UV_*`` / ``PIP_*`` variables, its configuration files), the interpreter
(``sys.version``, the real path of ``sys.executable``, the platform) and the installer. A build
holds ``<hash>.lock`` (``flock``) and installs into a temporary sibling folder renamed to
``<hash>`` when complete, so a folder named by its hash is always whole; an install that
outlives ``requirements-install-timeout-seconds`` is killed with everything it started; a
failed build leaves ``<hash>.failed`` (its message, for ``tritonx check``) and is tried again at
the next load.
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
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx_backend_python.process import ENV_PARAMETER, WorkerEnv, env_python
from tritonx_backend_python.reqfile import (
    ALLOWED_OPTIONS_KEY,
    INDEX_URLS_KEY,
    INSTALL_TIMEOUT_KEY,
    InstallPolicy,
    Plan,
    digest,
    read_plan,
    stage,
)
from tritonx_backend_python.runner import ENVIRONMENT_MANIFEST

__all__ = [
    "ALLOWED_OPTIONS_KEY",
    "CACHE_DIR_KEY",
    "CONFIG_KEYS",
    "DEFAULT_REQUIREMENTS",
    "INDEX_URLS_KEY",
    "INSTALL_TIMEOUT_KEY",
    "REQUIREMENTS_PARAMETER",
    "EnvironmentCache",
    "EnvironmentStatus",
    "InstallPolicy",
    "Installer",
    "Requirements",
    "find_requirements",
    "installer_settings",
    "worker_env",
]

#: config.pbtxt parameter naming the model's requirements file (relative to the model folder).
REQUIREMENTS_PARAMETER = "TRITONX_REQUIREMENTS"
#: the requirements file a model folder may hold when the parameter is not set
DEFAULT_REQUIREMENTS = "requirements.txt"
#: ``--backend-config=python,<key>=<dir>``: where the environments are cached (a folder servers
#: may share; default: the server's own, under the temp folder)
CACHE_DIR_KEY = "requirements-cache-dir"
#: every ``--backend-config=python,...`` key of this module
CONFIG_KEYS = frozenset({CACHE_DIR_KEY, INDEX_URLS_KEY, ALLOWED_OPTIONS_KEY, INSTALL_TIMEOUT_KEY})
#: the name of a server's own cache folder starts with this (under the temp folder)
PER_SERVER_PREFIX = "tritonx-python-envs-"
#: substituted by the model's folder in the parameter, as in ``EXECUTION_ENV_PATH``
MODEL_DIR_VARIABLE = "$$TRITON_MODEL_DIRECTORY"
#: a failed build's installer output keeps at most this many lines (head and tail)
MAX_OUTPUT_LINES = 30
#: a file inside a built environment saying what it was built from (a model whose import
#: fails in it is told of its requirements file)
MANIFEST = ENVIRONMENT_MANIFEST

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

    :raises TritonXError: INVALID_ARG when the parameter (or the folder's
        ``requirements.txt``, a symbolic link) names a file outside the model's folder
        (configs may come from clients, through the load API) or no file, or when the model
        names requirements and an ``EXECUTION_ENV_PATH`` both.
    """
    text = parameters.get(REQUIREMENTS_PARAMETER, "").strip()
    if not text:
        default = model_dir / DEFAULT_REQUIREMENTS
        if ENV_PARAMETER in parameters or not (default.is_file() or default.is_symlink()):
            return None
        resolved = default.resolve()
        if not resolved.is_relative_to(model_dir.resolve()) or not resolved.is_file():
            raise invalid_arg(
                f"python model '{model}': its {DEFAULT_REQUIREMENTS} must be a file inside the "
                "model's folder (symbolic links followed)"
            )
        return Requirements(resolved, explicit=False)
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

    def command(self, target: Path, requirements: Path, dry_run: bool = False) -> list[str]:
        """The command installing ``requirements`` into ``target`` for this interpreter
        (``dry_run``: resolving them, installing nothing)."""
        dry = ["--dry-run"] if dry_run else []
        if self.program is not None:
            return [
                self.program, "pip", "install", *dry, "--target", str(target), "-r",
                str(requirements), "--python", sys.executable, "--compile-bytecode", "--color",
                "never", "--no-progress", "--quiet",
            ]  # fmt: skip
        return [
            sys.executable, "-m", "pip", "install", *dry, "--target", str(target), "-r",
            str(requirements), "--disable-pip-version-check", "--no-input", "--no-color",
            "--progress-bar", "off",
        ]  # fmt: skip

    def describe(self, dry_run: bool = False) -> str:
        """``uv pip install`` / ``pip install`` (with ``--dry-run``)."""
        name = "uv pip install" if self.program is not None else "pip install"
        return f"{name} --dry-run" if dry_run else name


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

    :param root: the cache folder (created at the first build); ``None``: a folder of this
        server's own under the temp folder, created at the first build and removed by
        :meth:`close`.
    :param installer: what builds them (default: :meth:`Installer.find`, looked up when first
        needed).
    :param policy: what requirements files may ask of the installer, and its timeout.
    """

    def __init__(
        self,
        root: Path | None = None,
        installer: Installer | None = None,
        policy: InstallPolicy | None = None,
    ) -> None:
        self._root = None if root is None else root.absolute()  # the installer runs elsewhere
        self._own_root = root is None
        self._root_lock = threading.Lock()
        self._installer = installer
        self.policy = policy or InstallPolicy()

    @property
    def installer(self) -> Installer:
        """What builds the environments (uv, else pip)."""
        if self._installer is None:
            self._installer = _installer()
        return self._installer

    @property
    def root(self) -> Path:
        """The cache folder (this server's own one is made now if it was not yet)."""
        with self._root_lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix=PER_SERVER_PREFIX))
            return self._root

    @classmethod
    def from_config(cls, backend_config: Mapping[str, str]) -> EnvironmentCache:
        """The cache ``--backend-config=python,requirements-cache-dir=<dir>`` names (default:
        a folder of this server's own), with the install policy of the same settings
        (:meth:`~tritonx_backend_python.reqfile.InstallPolicy.from_config`)."""
        text = backend_config.get(CACHE_DIR_KEY, "").strip()
        return cls(
            Path(text).expanduser() if text else None,
            policy=InstallPolicy.from_config(backend_config),
        )

    def close(self) -> None:
        """Remove this server's own cache folder (not a folder named by
        ``requirements-cache-dir``: other servers may share it)."""
        with self._root_lock:
            root, self._root = (self._root, None) if self._own_root else (None, self._root)
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

    def key(self, plan: Plan, digests: Sequence[str]) -> str:
        """The hash naming the environment of a requirements plan whose local inputs have
        ``digests``: everything the install reads (the lines given to the installer, the
        content of each local file and folder, the installer's own settings) and the
        interpreter it installs for."""
        identity = {
            "layout": 2,
            **plan.identity(digests),
            "python": sys.version,
            "executable": os.path.realpath(sys.executable),
            "platform": sysconfig.get_platform(),
            "installer": f"{self.installer.name} {self.installer.version}",
            "installer-settings": installer_settings(),
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]

    def plan(self, requirements: Path, model_dir: Path, model: str) -> Plan:
        """The requirements file read under the policy (refusals raise INVALID_ARG)."""
        return read_plan(requirements, model_dir, self.policy, model)

    def status(
        self, requirements: Path, model_dir: Path | None = None, model: str = ""
    ) -> EnvironmentStatus:
        """What the cache holds for ``requirements`` of the model in ``model_dir`` (default:
        the file's folder); reads, never builds.

        :raises TritonXError: INVALID_ARG when the requirements break the rules.
        """
        model_dir = requirements.parent if model_dir is None else model_dir
        model = model or model_dir.name
        plan = self.plan(requirements, model_dir, model)
        key = self.key(plan, [digest(i, model_dir, model) for i in plan.inputs])
        with self._root_lock:
            root = self._root
        if root is None:  # this server's own folder, not made yet
            return EnvironmentStatus("to build", key, Path(tempfile.gettempdir()) / key)
        path = root / key
        if path.is_dir():
            return EnvironmentStatus("cached", key, path)
        failed = root / f"{key}.failed"
        try:
            record = json.loads(failed.read_text(encoding="utf-8"))
            return EnvironmentStatus("failing", key, path, str(record.get("message", "")))
        except (OSError, ValueError, AttributeError):
            return EnvironmentStatus("to build", key, path)

    def resolve(self, requirements: Path, model: str, model_dir: Path) -> None:
        """Resolve ``requirements`` of the model in ``model_dir`` without installing anything
        (``tritonx check``): the installer's dry run on the staged file, under the same rules
        and timeout as a build; the cache is neither read nor written.

        :raises TritonXError: INVALID_ARG when the requirements break the rules; INTERNAL,
            with the installer's output, when they cannot be resolved (a package or version
            no index has, an index that cannot be reached) or the dry run times out.
        """
        plan = self.plan(requirements, model_dir, model)
        staging = Path(tempfile.mkdtemp(prefix="tritonx-python-resolve-"))
        try:
            stage(plan, model_dir, staging, model)
            self._install(staging, requirements, staging / "target", model, dry_run=True)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def ensure(self, requirements: Path, model: str, model_dir: Path | None = None) -> Path:
        """The environment of ``requirements`` of the model in ``model_dir`` (default: the
        file's folder), built first unless the cache holds it.

        The local packages the file names are copied (and hashed as they are copied) into a
        fresh folder the installer reads them from: what is installed is what the key covers,
        and the model's folder is left alone.

        :param model: names the model in the log and in errors.
        :raises TritonXError: INVALID_ARG when the requirements break the rules; INTERNAL,
            with the installer's output, when the build fails or times out.
        """
        model_dir = requirements.parent if model_dir is None else model_dir
        plan = self.plan(requirements, model_dir, model)
        root = self.root
        key = self.key(plan, [digest(i, model_dir, model) for i in plan.inputs])
        if (root / key).is_dir():  # only ever appears whole (renamed from a finished build)
            log.info("python model '%s': using the cached environment %s", model, root / key)
            return root / key
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TritonXError(
                f"python model '{model}': cannot create the environment cache {root}: {exc}",
                Code.INTERNAL,
            ) from exc
        staging = Path(tempfile.mkdtemp(prefix="tritonx-python-install-"))
        try:
            # the key of what was copied: the files may have changed since they were hashed
            digests = stage(plan, model_dir, staging, model)
            key = self.key(plan, digests)
            final = root / key
            with self._locked(root, key, model):
                if final.is_dir():  # built by another model, or another server, meanwhile
                    log.info("python model '%s': using the cached environment %s", model, final)
                    return final
                self._build(root, staging, plan, digests, key, requirements, model)
            return final
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    @contextlib.contextmanager
    def _locked(self, root: Path, key: str, model: str) -> Iterator[None]:
        """Hold ``<hash>.lock``: one build of an environment at a time, across threads and
        processes (``flock``: released when the holder dies)."""
        fd = os.open(root / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
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

    def _build(
        self,
        root: Path,
        staging: Path,
        plan: Plan,
        digests: Sequence[str],
        key: str,
        requirements: Path,
        model: str,
    ) -> None:
        """Install into a temporary sibling and rename it to ``<hash>`` (lock held)."""
        for leftover in root.glob(f"{key}.tmp-*"):  # a killed build's: never used
            shutil.rmtree(leftover, ignore_errors=True)
        temp = root / f"{key}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        log.info(
            "python model '%s': building its environment from %s (%s)", model, requirements, key
        )
        started = time.monotonic()
        try:
            self._install(staging, requirements, temp, model)
            manifest = {
                "requirements": plan.identity(digests),
                "files": plan.files,
                "source": str(requirements),
                "python": sys.version,
                "executable": os.path.realpath(sys.executable),
                "installer": f"{self.installer.name} {self.installer.version}",
                "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            (temp / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
            os.rename(temp, root / key)
        except TritonXError as exc:
            shutil.rmtree(temp, ignore_errors=True)
            self._record_failure(root, key, exc.message)
            raise
        except OSError as exc:
            shutil.rmtree(temp, ignore_errors=True)
            raise TritonXError(
                f"python model '{model}': building its environment in {root} failed: {exc}",
                Code.INTERNAL,
            ) from exc
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        with contextlib.suppress(OSError):
            (root / f"{key}.failed").unlink(missing_ok=True)
        log.info(
            "python model '%s': environment built in %.2f s (%s)",
            model,
            time.monotonic() - started,
            root / key,
        )

    def _install(
        self, staging: Path, requirements: Path, target: Path, model: str, dry_run: bool = False
    ) -> None:
        """Run the installer on the staged requirements, in the staging folder (a model's
        ``uv.toml`` or ``pyproject.toml`` is no configuration of it), killing it (and what it
        started) past the policy's timeout; raise its output when it fails. ``dry_run``:
        resolve them only (``tritonx check``)."""
        target.mkdir()
        command = self.installer.command(target, staging / "requirements.txt", dry_run)
        program = self.installer.describe(dry_run)
        doing = "resolving" if dry_run else "installing"
        environ = {**os.environ, "NO_COLOR": "1", "PIP_NO_COLOR": "1"}
        timeout = self.policy.timeout
        try:
            process = subprocess.Popen(
                command,
                cwd=staging,
                env=environ,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,  # its own process group: killed whole on a timeout
            )
        except OSError as exc:
            raise TritonXError(
                f"python model '{model}': cannot run {program} to install {requirements}: {exc}",
                Code.INTERNAL,
            ) from exc
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise TritonXError(
                f"python model '{model}': {doing} its requirements ({requirements}) timed "
                f"out after {timeout:g} s (--backend-config=python,{INSTALL_TIMEOUT_KEY}): "
                f"{program} was killed and nothing was kept",
                Code.INTERNAL,
            ) from None
        except BaseException:
            _kill_group(process)
            raise
        if process.returncode != 0:
            output = trim_output(stderr) or trim_output(stdout) or "(no output)"
            raise TritonXError(
                f"python model '{model}': {doing} its requirements ({requirements}) failed: "
                f"{program} exited with code {process.returncode}:\n{output}",
                Code.INTERNAL,
            )

    def _record_failure(self, root: Path, key: str, message: str) -> None:
        """Write ``<hash>.failed`` (for ``tritonx check``; the next load builds again)."""
        record = {"message": message, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        temp = root / f"{key}.failed.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            temp.write_text(json.dumps(record, indent=2), encoding="utf-8")
            os.replace(temp, root / f"{key}.failed")
        except OSError:
            log.warning("could not record the failed build %s in %s", key, root)
            with contextlib.suppress(OSError):
                temp.unlink()


def _kill_group(process: subprocess.Popen[str]) -> None:
    """Kill an installer and every process it started (its process group), and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired, OSError, ValueError):
        process.communicate(timeout=10)  # a child outside the group may hold the pipes
    if process.poll() is None:
        process.kill()
        process.wait()


#: the environment variables of the installers that change nothing in what they install
_NO_EFFECT_SETTINGS = frozenset(
    {"UV_CACHE_DIR", "PIP_CACHE_DIR", "UV_NO_PROGRESS", "PIP_PROGRESS_BAR", "PIP_NO_COLOR"}
)


def installer_settings() -> dict[str, str]:
    """The operator's installer settings that a build depends on (part of the cache key):
    the ``UV_*`` and ``PIP_*`` environment variables, and the digests of the user's and
    system's uv and pip configuration files that exist."""
    settings = {
        name: value
        for name, value in os.environ.items()
        if name.startswith(("UV_", "PIP_")) and name not in _NO_EFFECT_SETTINGS
    }
    for path in _installer_config_files():
        with contextlib.suppress(OSError):
            settings[f"file {path}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return settings


def _installer_config_files() -> list[Path]:
    """Where uv and pip read their settings from (user, system, the interpreter's prefix)."""
    home = Path.home()
    config_home = Path(os.environ.get("XDG_CONFIG_HOME", "") or home / ".config")
    config_dirs = [Path(d) for d in os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":") if d]
    paths = [
        config_home / "uv" / "uv.toml",
        *(d / "uv" / "uv.toml" for d in config_dirs),
        Path("/etc/uv/uv.toml"),
        config_home / "pip" / "pip.conf",
        home / ".pip" / "pip.conf",
        *(d / "pip" / "pip.conf" for d in config_dirs),
        Path("/etc/pip.conf"),
        Path(sys.prefix) / "pip.conf",
    ]
    for variable in ("UV_CONFIG_FILE", "PIP_CONFIG_FILE"):
        if os.environ.get(variable):
            paths.append(Path(os.environ[variable]))
    return [p for p in paths if p.is_file()]


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
    return WorkerEnv(site_dir=str(cache.ensure(requirements.path, model, model_dir)))
