"""``tritonx-sagemaker-serve``: start tritonx in a SageMaker container as Triton's
``docker/sagemaker/serve`` starts tritonserver.

It reads the environment SageMaker (and the endpoint's owner) sets, and replaces itself with
``tritonx serve`` with the same flags Triton's script passes:

* ``SAGEMAKER_MULTI_MODEL=true``: a multi-model endpoint; the server starts with an empty
  repository (``/tmp/sagemaker``) and ``/ping`` is liveness; models arrive through
  ``POST /models``. Otherwise a single-model endpoint over ``/opt/ml/model``: the model is
  ``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME`` (its folder must exist), or the folder's only model
  (a warning says so); ``/ping`` is readiness.
* ``SAGEMAKER_BIND_TO_PORT``, ``SAGEMAKER_SAFE_PORT_RANGE``: the frontend's port, and the
  range the other listeners must keep to.
* ``SAGEMAKER_TRITON_*``: the settings Triton's script reads (see :data:`FLAG_VARIABLES` and
  :data:`UNSUPPORTED`). A ``SAGEMAKER_TRITON_*`` variable that tritonx does not know or
  cannot honour stops the start with a message naming it; the other ``SAGEMAKER_*``
  variables are the platform's and are left alone, as Triton's script does.

``--model-dir``, ``--multi-model-repository`` and ``--models-root`` move the folders SageMaker
uses (``/opt/ml/model``, ``/tmp/sagemaker``, ``/opt/ml/models``), for trying it outside a
container; ``--print-command`` prints the command instead of running it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping, Sequence

from tritonx_frontend_sagemaker.contract import INFERENCE_TYPES, PING_MODES

SINGLE_MODEL_DIR = "/opt/ml/model"
MULTI_MODEL_REPOSITORY = "/tmp/sagemaker"

#: ``SAGEMAKER_TRITON_*`` variables passed on as one flag each, with the value as given.
FLAG_VARIABLES: Mapping[str, str] = {
    "SAGEMAKER_TRITON_METRICS_PORT": "--metrics-port",
    "SAGEMAKER_TRITON_GRPC_PORT": "--grpc-port",
    "SAGEMAKER_TRITON_LOG_INFO": "--log-info",
    "SAGEMAKER_TRITON_LOG_WARNING": "--log-warning",
    "SAGEMAKER_TRITON_LOG_ERROR": "--log-error",
}

#: ``SAGEMAKER_TRITON_*`` variables the script reads for itself or the frontend reads.
OWN_VARIABLES = frozenset(
    {
        "SAGEMAKER_TRITON_OVERRIDE_PING_MODE",
        "SAGEMAKER_TRITON_PING_MODE",
        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME",
        "SAGEMAKER_TRITON_INFERENCE_TYPE",
        "SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING",
        "SAGEMAKER_TRITON_ALLOW_GRPC",
        "SAGEMAKER_TRITON_ALLOW_METRICS",
        "SAGEMAKER_TRITON_THREAD_COUNT",
        "SAGEMAKER_TRITON_LOG_VERBOSE",
        "SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE",
        "SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE",
        "SAGEMAKER_TRITON_TENSORFLOW_VERSION",
        "SAGEMAKER_TRITON_ADDITIONAL_ARGS",
    }
)

#: ``SAGEMAKER_TRITON_*`` variables of Triton's script that tritonx cannot honour.
UNSUPPORTED: Mapping[str, str] = {
    "SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT": (
        "--buffer-manager-thread-count: tritonx has no buffer manager thread pool to size"
    ),
    "SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT": (
        "--model-load-gpu-limit: tritonx does not measure GPU memory at load "
        "(--model-memory-budget bounds host memory)"
    ),
}


class ServeError(Exception):
    """The environment cannot be served: the message says why (printed, exit status 1)."""


def _model_folders(repository: str) -> list[str]:
    """The folders directly in ``repository`` (not following links, as ``find -type d``)."""
    try:
        with os.scandir(repository) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except OSError as exc:
        raise ServeError(f"ERROR: cannot read the model directory {repository}: {exc}") from None


def serve_command(
    environ: Mapping[str, str],
    *,
    model_dir: str = SINGLE_MODEL_DIR,
    multi_model_repository: str = MULTI_MODEL_REPOSITORY,
    models_root: str | None = None,
) -> tuple[list[str], dict[str, str], list[str]]:
    """The ``tritonx serve`` command for ``environ``, the environment to run it with, and the
    lines to print first (Triton's script's notices and warnings).

    :param models_root: the multi-model endpoint's ``models_root`` (None: its default).
    :raises ServeError: a setting it cannot serve, with Triton's message where Triton's
        script has one.
    """
    notes: list[str] = []
    env = dict(environ)
    _check_variables(env)
    is_mme = _is_multi_model(env)
    ping_mode = env.get("SAGEMAKER_TRITON_OVERRIDE_PING_MODE") or ("live" if is_mme else "ready")
    if ping_mode not in PING_MODES:
        raise ServeError(
            f"ERROR: invalid SAGEMAKER_TRITON_OVERRIDE_PING_MODE '{ping_mode}'. "
            "Must be one of: ready, live"
        )
    env["SAGEMAKER_TRITON_PING_MODE"] = ping_mode
    repository = model_dir
    if is_mme:
        os.makedirs(multi_model_repository, exist_ok=True)
        repository = multi_model_repository
        notes.append(
            f'Triton is running in SageMaker MME mode. Using Triton ping mode: "{ping_mode}"'
        )
    frontend: dict[str, str] = {"allow": "true"}
    args = [f"--model-repository={repository}", *_server_flags(env, frontend)]
    additional = env.get("SAGEMAKER_TRITON_ADDITIONAL_ARGS", "").split()
    inference_type = env.get("SAGEMAKER_TRITON_INFERENCE_TYPE", "")
    if inference_type and inference_type not in INFERENCE_TYPES:
        raise ServeError(
            f"ERROR: Invalid SAGEMAKER_TRITON_INFERENCE_TYPE '{inference_type}'\n"
            "       Must be one of: infer, generate, generate_stream"
        )
    if not is_mme:
        args.append(f"--load-model={_single_model(repository, env, notes)}")
    if models_root is not None:
        frontend["models_root"] = models_root

    command = [sys.executable, "-m", "tritonx", "serve", *_frontend_flags(frontend)]
    command += ["--allow-http=false", "--model-control-mode=explicit", *args, *additional]
    return command, env, notes


def _check_variables(env: Mapping[str, str]) -> None:
    """Refuse a ``SAGEMAKER_TRITON_*`` variable tritonx does not know or cannot honour."""
    unknown = sorted(
        name
        for name in env
        if name.startswith("SAGEMAKER_TRITON_")
        and name not in OWN_VARIABLES
        and name not in FLAG_VARIABLES
        and name not in UNSUPPORTED
    )
    if unknown:
        raise ServeError(
            f"ERROR: unknown setting(s) {', '.join(unknown)}: tritonx-sagemaker-serve reads "
            + ", ".join(sorted({*OWN_VARIABLES, *FLAG_VARIABLES}))
        )
    for name, why in UNSUPPORTED.items():
        if env.get(name):
            raise ServeError(f"ERROR: {name} is not supported by tritonx ({why})")


def _is_multi_model(env: Mapping[str, str]) -> bool:
    """``SAGEMAKER_MULTI_MODEL``: a multi-model endpoint (``true``) or not."""
    multi = env.get("SAGEMAKER_MULTI_MODEL", "")
    if multi not in ("", "true", "false"):
        raise ServeError(f"ERROR: SAGEMAKER_MULTI_MODEL must be true or false, got '{multi}'")
    return multi == "true"


def _server_flags(env: Mapping[str, str], frontend: dict[str, str]) -> list[str]:
    """The flags Triton's script passes from the environment (and the frontend's settings
    it sets, into ``frontend``)."""
    # (Triton's script passes the variable's value as --model-namespacing's, despite its name)
    namespacing = env.get("SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING") or "true"
    args = [f"--model-namespacing={namespacing}"]
    if env.get("SAGEMAKER_BIND_TO_PORT"):
        frontend["port"] = env["SAGEMAKER_BIND_TO_PORT"]
    if env.get("SAGEMAKER_SAFE_PORT_RANGE"):
        args.append(f"--sagemaker-safe-port-range={env['SAGEMAKER_SAFE_PORT_RANGE']}")
    args.append(f"--allow-grpc={env.get('SAGEMAKER_TRITON_ALLOW_GRPC') or 'false'}")
    args.append(f"--allow-metrics={env.get('SAGEMAKER_TRITON_ALLOW_METRICS') or 'false'}")
    for name in ("SAGEMAKER_TRITON_METRICS_PORT", "SAGEMAKER_TRITON_GRPC_PORT"):
        if env.get(name):
            args.append(f"{FLAG_VARIABLES[name]}={env[name]}")
    if env.get("SAGEMAKER_TRITON_THREAD_COUNT"):
        frontend["thread_count"] = env["SAGEMAKER_TRITON_THREAD_COUNT"]
    args.append(f"--log-verbose={env.get('SAGEMAKER_TRITON_LOG_VERBOSE') or 'true'}")
    for name in ("SAGEMAKER_TRITON_LOG_INFO", "SAGEMAKER_TRITON_LOG_WARNING"):
        if env.get(name):
            args.append(f"{FLAG_VARIABLES[name]}={env[name]}")
    if env.get("SAGEMAKER_TRITON_LOG_ERROR"):
        args.append(
            f"{FLAG_VARIABLES['SAGEMAKER_TRITON_LOG_ERROR']}={env['SAGEMAKER_TRITON_LOG_ERROR']}"
        )
    shm_default = env.get("SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE") or "16777216"
    shm_growth = env.get("SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE") or "1048576"
    args.append(f"--backend-config=python,shm-default-byte-size={shm_default}")
    args.append(f"--backend-config=python,shm-growth-byte-size={shm_growth}")
    if env.get("SAGEMAKER_TRITON_TENSORFLOW_VERSION"):
        version = env["SAGEMAKER_TRITON_TENSORFLOW_VERSION"]
        args.append(f"--backend-config=tensorflow,version={version}")
    return args


def _single_model(repository: str, env: dict[str, str], notes: list[str]) -> str:
    """The model a single-model endpoint loads (``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME``, else
    the repository's only folder, recorded in ``env`` with a warning in ``notes``)."""
    if os.path.isfile(os.path.join(repository, "config.pbtxt")):
        raise ServeError(
            "ERROR: Incorrect directory structure.\n"
            "       Model directory needs to contain the top level folder"
        )
    default_model = env.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", "")
    if default_model:
        if not os.path.isdir(os.path.join(repository, default_model)):
            raise ServeError(
                "ERROR: Directory with provided SAGEMAKER_TRITON_DEFAULT_MODEL_NAME "
                f"{default_model} does not exist"
            )
        return default_model
    folders = _model_folders(repository)
    if not folders:
        raise ServeError("ERROR: No model found in model repository")
    if len(folders) > 1:
        raise ServeError(
            "ERROR: More than 1 model directory found in model repository.\n"
            "       Either provide a single directory or set "
            "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME to run the ensemble backend.\n"
            f"       Directories found in model repository: {' '.join(folders)}"
        )
    notes.append(
        "WARNING: No SAGEMAKER_TRITON_DEFAULT_MODEL_NAME provided.\n"
        f"         Starting with the only existing model directory {folders[0]}"
    )
    env["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] = folders[0]
    return folders[0]


def _frontend_flags(settings: Mapping[str, str]) -> list[str]:
    """The frontend's settings as ``tritonx serve`` flags: Triton's SageMaker flags, and
    ``--frontend-config sagemaker,<key>=<value>`` for tritonx's own keys."""
    names = {"allow": "--allow-sagemaker", "port": "--sagemaker-port"}
    names["thread_count"] = "--sagemaker-thread-count"
    return [
        f"{names[key]}={value}" if key in names else f"--frontend-config=sagemaker,{key}={value}"
        for key, value in settings.items()
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: build the command from the environment and run it in place of
    this process (``--print-command``: print it)."""
    parser = argparse.ArgumentParser(
        prog="tritonx-sagemaker-serve",
        description="Start tritonx as Triton's SageMaker container does (docker/sagemaker/"
        "serve), from the SAGEMAKER_* environment.",
    )
    parser.add_argument(
        "--model-dir",
        default=SINGLE_MODEL_DIR,
        help=f"the single-model endpoint's model folder (default {SINGLE_MODEL_DIR})",
    )
    parser.add_argument(
        "--multi-model-repository",
        default=MULTI_MODEL_REPOSITORY,
        help="the empty repository a multi-model endpoint starts with "
        f"(default {MULTI_MODEL_REPOSITORY})",
    )
    parser.add_argument(
        "--models-root",
        default=None,
        help="where the multi-model endpoint's model folders are (default /opt/ml/models)",
    )
    parser.add_argument(
        "--print-command", action="store_true", help="print the command instead of running it"
    )
    options = parser.parse_args(argv)
    try:
        command, env, notes = serve_command(
            os.environ,
            model_dir=options.model_dir,
            multi_model_repository=options.multi_model_repository,
            models_root=None
            if options.models_root is None
            else os.path.abspath(options.models_root),
        )
    except ServeError as exc:
        print(exc, file=sys.stderr)
        return 1
    for note in notes:
        print(note, file=sys.stderr)
    if options.print_command:
        print(shlex.join(command))
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, env)
    return 0  # pragma: no cover (execve does not return)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
