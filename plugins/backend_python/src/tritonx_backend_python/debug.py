"""Debugging a ``model.py``: a model's worker processes under ``debugpy`` (the server's side:
which workers, where; the worker starts debugpy before importing the model, in
:meth:`tritonx_backend_python._stub.Worker.init`).

The operator names the models in the server's environment (never in a model's config, which
a client may send with the load API, so no client can open a debugger port)::

    TRITONX_DEBUG_MODEL=preprocess            # port 5678 for its first instance
    TRITONX_DEBUG_MODEL=preprocess:5700,ranker:5710
    TRITONX_DEBUG_WAIT=1                      # initialize() waits for the debugger

Instance ``k`` of a model (its index within the model, :attr:`tritonx.backend.InstanceSpec.index`)
listens on ``port + k``, on the loopback interface only; a restarted worker listens on its
instance's port again. With ``TRITONX_DEBUG_WAIT`` the worker waits for a debugger to attach
before importing ``model.py``, so breakpoints in ``initialize`` hit; the load then waits as
long as that takes (``stub-timeout-seconds`` does not apply to it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tritonx.errors import invalid_arg

#: the environment variable naming the models to debug: ``name[:port][,name[:port]...]``
MODELS_VARIABLE = "TRITONX_DEBUG_MODEL"
#: ``1``/``true``/``yes``: workers wait for the debugger before loading the model
WAIT_VARIABLE = "TRITONX_DEBUG_WAIT"
#: debugpy's customary port, for a model named without one
DEFAULT_PORT = 5678
#: debuggers listen here only: whoever connects can run any code in the worker
HOST = "127.0.0.1"

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


@dataclass(frozen=True, slots=True)
class DebugSetting:
    """Where one worker's debugger listens, and whether the worker waits for it."""

    host: str
    port: int
    wait: bool

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def debug_setting(model: str, instance_index: int) -> DebugSetting | None:
    """The debugger of instance ``instance_index`` of ``model``, or ``None`` when the
    environment does not name the model.

    :raises TritonXError: INVALID_ARG when the variables are malformed.
    """
    text = os.environ.get(MODELS_VARIABLE, "").strip()
    if not text:
        return None
    port: int | None = None
    for item in (part.strip() for part in text.split(",")):
        name, sep, port_text = item.rpartition(":") if ":" in item else (item, "", "")
        if not name:
            raise invalid_arg(f"{MODELS_VARIABLE}: '{item}' names no model")
        if name != model:
            continue
        if sep:
            try:
                port = int(port_text)
            except ValueError:
                port = -1
            if not 0 < port < 65536:
                raise invalid_arg(
                    f"{MODELS_VARIABLE}: the port of model '{name}' must be a number from 1 "
                    f"to 65535, got '{port_text}'"
                )
        else:
            port = DEFAULT_PORT
    if port is None:
        return None
    if port + instance_index > 65535:
        raise invalid_arg(
            f"{MODELS_VARIABLE}: instance {instance_index} of model '{model}' would listen on "
            f"port {port + instance_index}, past 65535"
        )
    wait_text = os.environ.get(WAIT_VARIABLE, "").strip().lower()
    if wait_text not in _TRUE | _FALSE:
        raise invalid_arg(f"{WAIT_VARIABLE} must be 1 or 0 (true/false), got '{wait_text}'")
    return DebugSetting(HOST, port + instance_index, wait_text in _TRUE)
