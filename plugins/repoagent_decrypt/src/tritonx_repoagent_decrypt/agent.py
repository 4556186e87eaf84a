"""The ``decrypt`` agent: a model folder made by ``tritonx encrypt-model`` is decrypted into a
private temporary folder that the model is loaded from, and wiped when it unloads.

Parameters (exactly one of the two key sources)::

    model_repository_agents { agents [ { name: "decrypt",
        parameters { key: "key_env" value: "MODEL_KEY" } } ] }          # key in $MODEL_KEY
    ... parameters { key: "key_file" value: "/etc/tritonx/model.key" }   # absolute path

The private folders live under ``<temp root>/tritonx-decrypt-<uid>/`` (mode 0700), the temp
root being ``$TRITONX_TMPDIR`` or the system's temporary folder; each load gets its own
``<model>-XXXXXXXX/<model>/`` folder (0700), logged at INFO level.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tritonx import AgentContext, RepoAgent
from tritonx.errors import Code, TritonXError
from tritonx_repoagent_decrypt.crypto import CryptoError, decrypt_model, parse_key

log = logging.getLogger("tritonx.repoagent.decrypt")

#: the environment variable naming tritonx's temporary root (default: the system's)
TMPDIR_ENV = "TRITONX_TMPDIR"
PARAMETERS = ("key_env", "key_file")
#: The longest key file read (a key is 44-64 characters of base64 or hex).
KEY_FILE_LIMIT = 4096


def temp_root() -> Path:
    """The folder holding every decrypted model folder of this user (created 0700; refused if
    it is a symlink, belongs to another user or is open to others)."""
    base = Path(os.environ.get(TMPDIR_ENV) or tempfile.gettempdir())
    root = base / f"tritonx-decrypt-{os.getuid()}"
    try:
        root.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    info = os.lstat(root)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.getuid()
        or stat.S_IMODE(info.st_mode) & 0o077
    ):
        raise TritonXError(
            f"unsafe decrypt folder '{root}': it must be a directory owned by this user with "
            "mode 0700",
            Code.INTERNAL,
        )
    return root


def read_key(model: str, parameters: Mapping[str, str]) -> bytes:
    """The key named by the agent's parameters (``key_env`` or ``key_file``)."""
    params = dict(parameters)
    unknown = sorted(set(params) - set(PARAMETERS))
    if unknown:
        raise TritonXError(
            f"decrypt agent of model '{model}': unknown parameter '{unknown[0]}' (known: "
            "key_env, key_file)",
            Code.INVALID_ARG,
        )
    given = [p for p in PARAMETERS if params.get(p)]
    if len(given) != 1:
        raise TritonXError(
            f"decrypt agent of model '{model}' needs a key: set exactly one of the parameters "
            "'key_env' (an environment variable holding the key) or 'key_file' (the absolute "
            "path of a key file)",
            Code.INVALID_ARG,
        )
    try:
        if given[0] == "key_env":
            var = params["key_env"]
            text = os.environ.get(var)
            if not text:
                raise TritonXError(
                    f"decrypt agent of model '{model}': environment variable '{var}' (key_env) "
                    "is not set",
                    Code.INVALID_ARG,
                )
            return parse_key(text)
        path = Path(params["key_file"]).expanduser()
        if not path.is_absolute():
            raise TritonXError(
                f"decrypt agent of model '{model}': key_file '{path}' must be an absolute path",
                Code.INVALID_ARG,
            )
        try:
            with path.open("rb") as f:  # a key is short: never read more than a page of it
                data = f.read(KEY_FILE_LIMIT + 1)
        except OSError as exc:
            raise TritonXError(
                f"decrypt agent of model '{model}': cannot read key_file '{path}': {exc.strerror}",
                Code.INVALID_ARG,
            ) from exc
        if len(data) > KEY_FILE_LIMIT:
            raise TritonXError(
                f"decrypt agent of model '{model}': key_file '{path}' is longer than "
                f"{KEY_FILE_LIMIT} bytes: not a key file",
                Code.INVALID_ARG,
            )
        return parse_key(data)
    except CryptoError as exc:
        raise TritonXError(
            f"decrypt agent of model '{model}': bad key ({given[0]}): {exc}", Code.INVALID_ARG
        ) from exc


class DecryptAgent(RepoAgent):
    """Decrypts the model into a private folder on LOAD; wipes it on LOAD_FAIL and
    UNLOAD_COMPLETE."""

    name = "decrypt"

    def __init__(self) -> None:
        self.folder: Path | None = None

    def on_load(self, ctx: AgentContext) -> Path | None:
        key = read_key(ctx.model_name, ctx.parameters)
        holder = Path(tempfile.mkdtemp(prefix=f"{ctx.model_name}-", dir=temp_root()))
        self.folder = holder
        target = holder / ctx.model_name
        try:
            target.mkdir(mode=0o700)
            written = decrypt_model(ctx.model_dir, target, key)
        except CryptoError as exc:
            self._wipe(ctx.model_name)
            raise TritonXError(
                f"decrypt agent of model '{ctx.model_name}': {exc}", Code.INVALID_ARG
            ) from exc
        except BaseException:
            self._wipe(ctx.model_name)
            raise
        log.info("model '%s': decrypted %d files into %s", ctx.model_name, len(written), target)
        return target

    def on_load_fail(self, ctx: AgentContext) -> None:
        self._wipe(ctx.model_name)

    def on_unload_complete(self, ctx: AgentContext) -> None:
        self._wipe(ctx.model_name)

    def _wipe(self, model: str) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            log.info("model '%s': removed decrypted folder %s", model, self.folder)
            self.folder = None
