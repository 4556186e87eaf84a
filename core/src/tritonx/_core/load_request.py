"""The repository load API's parameters: a ``config`` override and ``file:`` overrides.

``LoadRequest.parse`` checks them with Triton's messages; ``write_override_dir`` puts the
override files in a fresh temporary model folder (no path may leave it).
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonx._core.model_config import parse_config_json
from tritonx.errors import Code, TritonXError, invalid_arg

log = logging.getLogger("tritonx.lifecycle")


@dataclass
class LoadRequest:
    """What a load call asks for beyond the model's name.

    :param config: the ``config`` override (a parsed ModelConfig message) or None.
    :param files: ``file:<path>`` overrides, path → content.
    """

    config: Any = None
    files: dict[str, bytes] = field(default_factory=dict)

    @property
    def overrides(self) -> bool:
        return self.config is not None or bool(self.files)

    @classmethod
    def parse(cls, name: str, parameters: Mapping[str, Any] | None) -> LoadRequest:
        """Check the model name and the parameters of Triton's load request.

        Triton reads the parameters while it polls the model: the load API answers any error
        raised here as :func:`poll_failed` (``ModelManager.load``)."""
        check_model_name(name)
        config_json: str | None = None
        files: dict[str, bytes] = {}
        for key, value in (parameters or {}).items():
            if key == "config":
                if not isinstance(value, str):
                    raise invalid_arg(
                        f"Unrecognized load parameter '{key}' with type '{_type_name(value)}'"
                    )
                config_json = value
            elif key.startswith("file:"):
                files[key[5:]] = _file_bytes(key, value)
            else:
                raise invalid_arg(
                    f"Unrecognized load parameter '{key}' with type '{_type_name(value)}'"
                )
        if files and config_json is None:
            raise invalid_arg("Load parameter 'config' must be specified for model file override")
        config = None if config_json is None else parse_config_json(config_json)
        return cls(config, files)


def check_model_name(name: str) -> None:
    """Refuse empty names and names that are paths (Triton's ``ValidateModelName``: ``..``
    or a ``/``; a backend may refuse more, as the python backend's stub names)."""
    trimmed = name.strip()
    if not trimmed:
        raise invalid_arg("Model name cannot be empty. Please enter a valid name to deploy.")
    if trimmed == ".." or "/" in trimmed:
        raise invalid_arg(
            f"invalid model name '{name}', model name must not contain path traversal characters"
        )


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    return "string" if isinstance(value, str) else type(value).__name__


def _file_bytes(key: str, value: object) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError as exc:
            raise invalid_arg(f"file parameter '{key}' is not valid base64: {exc}") from exc
    raise invalid_arg(f"Unrecognized load parameter '{key}' with type '{_type_name(value)}'")


def poll_failed(name: str, reason: str) -> TritonXError:
    """Triton's answer to a load whose model folder could not be prepared (file overrides,
    a repository agent's LOAD action): INTERNAL "failed to load '<m>', failed to poll from
    model repository". Triton only logs the reason; tritonx logs it and appends it too."""
    log.error("Poll failed for model directory '%s': %s", name, reason)
    return TritonXError(
        f"failed to load '{name}', failed to poll from model repository: {reason}", Code.INTERNAL
    )


def write_override_dir(name: str, files: Mapping[str, bytes]) -> Path:
    """A temporary model folder ``<tmp>/tritonx-override-*/<name>`` holding the override files.

    As Triton: a path is joined below the folder (a leading ``/`` is re-rooted there), then
    normalized with symlinks resolved; one that leaves the folder, or whose parent exists as a
    file, or that the filesystem refuses (a component longer than NAME_MAX), fails the load
    with :func:`poll_failed` and nothing is written outside the folder.
    """
    root = Path(tempfile.mkdtemp(prefix="tritonx-override-"))
    model_dir = root / name
    model_dir.mkdir()
    base = model_dir.resolve()
    try:
        for rel, data in files.items():
            key = f"file:{rel}"
            try:
                target = Path(os.path.realpath(os.path.join(base, rel.lstrip("/"))))
                if base not in target.parents:
                    raise poll_failed(
                        name,
                        f"Invalid file parameter '{key}' with normalized path '{target}' must "
                        "stay within model directory.",
                    )
                if target.parent.exists():
                    if not target.parent.is_dir():
                        raise poll_failed(
                            name,
                            f"Invalid file parameter '{key}', directory has been created as a file",
                        )
                else:
                    target.parent.mkdir(parents=True)
                target.write_bytes(data)
            except OSError as exc:
                raise poll_failed(name, f"Invalid file parameter '{rel}': {exc}") from exc
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return model_dir


def remove_override_dir(model_dir: Path | None) -> None:
    """Remove a folder made by :func:`write_override_dir` (with its temporary parent)."""
    if model_dir is not None:
        shutil.rmtree(model_dir.parent, ignore_errors=True)
