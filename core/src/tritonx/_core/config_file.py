"""Reading a ``config.pbtxt``: a regular file of bounded size, parsed with protobuf's text
format (Triton's messages: the file, line and column of a syntax error)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from tritonx.errors import invalid_arg
from tritonx.proto import model_config_pb2

#: The largest ``config.pbtxt`` read (a real one is kilobytes; a model folder may come from
#: someone else: the SageMaker multi-model endpoint, a cloud repository)
MAX_CONFIG_BYTES = 16 << 20


def read_config_file(path: Path) -> Any:
    """Parse a ``config.pbtxt``; syntax errors name the file, line and column.

    Only a regular file of at most :data:`MAX_CONFIG_BYTES` is read (a FIFO would block the
    loading thread for ever, ``/dev/zero`` would fill the memory); symlinks are followed, as
    Triton follows them.
    """
    config = model_config_pb2.ModelConfig()
    try:
        text = _read_regular_file(path, MAX_CONFIG_BYTES).decode("utf-8")
    except OSError as exc:
        raise invalid_arg(f"failed to read model configuration '{path}': {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise invalid_arg(f"failed to read model configuration '{path}': {exc}") from exc
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise invalid_arg(f"failed to parse model configuration {path}: line {exc}") from exc
    return config


def _read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes.

    :raises OSError: it cannot be opened or read, is not a regular file, or is larger (the
        error's ``strerror`` says which).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once
    with os.fdopen(fd, "rb") as file:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes")
    return data


__all__ = ["MAX_CONFIG_BYTES", "read_config_file"]
