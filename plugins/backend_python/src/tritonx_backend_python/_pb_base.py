"""The ground every part of ``pb_utils`` stands on: Triton's constants, the two error types a
model sees (:class:`TritonModelException`, :class:`TritonError`), and the checks requests and
responses share on what a model passes them (names, parameters).

Part of the split of :mod:`tritonx_backend_python.pb_utils`, which re-exports the public
names; the helpers without an underscore here are for the other ``_pb_*`` modules, not part
of Triton's API.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

# ---------------------------------------------------------------------- constants

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_GPU = 2


# ---------------------------------------------------------------------- errors


class TritonModelException(Exception):
    """Raise from ``initialize``/``execute``/``finalize`` to fail them with a message."""


_ERROR_SIGNATURE = (
    "TritonError(message: str, code: TritonError.__ErrorCode = TritonError.__ErrorCode.INTERNAL)"
)


class TritonError:
    """An error carried by an :class:`InferenceResponse` (``TritonError(message, code)``)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        if type(message) is not str or type(code) is not int:
            args = (message, code)
            message = text_arg(message, _ERROR_SIGNATURE, args)
            if not is_int(code):
                raise refused(_ERROR_SIGNATURE, args)
        self._message = message
        self._code = int(code)

    def message(self) -> str:
        """The error message."""
        return self._message

    def code(self) -> int:
        """One of the ``TritonError`` code constants."""
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"

    def __str__(self) -> str:
        return self._message


# ---------------------------------------------------------------------- argument checks

# Triton's pb_utils is a pybind11 module: an argument it cannot convert to the C++ type of
# the parameter (a str, a numpy array, a list of Tensors, an int...) fails the call with
# pybind's TypeError before the constructor runs. These helpers give the same: cheap checks
# on the common types first, the text built only when an argument is refused.


def refused(signature: str, args: Sequence[Any], *, function: str = "") -> TypeError:
    """pybind11's TypeError for a call whose arguments do not convert: ``signature`` as
    pybind writes it (``Tensor(arg0: str, arg1: numpy.ndarray)``); ``function``: the
    function's name when it is not a constructor."""
    if function:
        head = f"{function}(): incompatible function arguments"
    else:
        head = "__init__(): incompatible constructor arguments"
    invoked = ", ".join(repr(arg) for arg in args)
    return TypeError(
        f"{head}. The following argument types are supported:\n    1. {signature}\n\n"
        f"Invoked with: {invoked}"
    )


def is_int(value: Any) -> bool:
    """Whether pybind converts ``value`` to a C++ integer (an int, or what has
    ``__index__``, such as numpy integers; never a float or a str)."""
    if type(value) is int or isinstance(value, int):
        return True
    return not isinstance(value, (float, str, bytes)) and hasattr(type(value), "__index__")


def text_arg(value: Any, signature: str, args: Sequence[Any], function: str = "") -> str:
    """``value`` as pybind converts it to a ``std::string`` (a str, or bytes decoded as
    UTF-8); anything else refused with pybind's TypeError."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            pass
    raise refused(signature, args, function=function)


def is_sequence(value: Any) -> bool:
    """Whether pybind converts ``value`` to a ``std::vector`` (a sequence, not a str or
    bytes)."""
    if type(value) is list or type(value) is tuple:
        return True
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def as_text(value: Any) -> Any:
    """A name given as ``bytes`` (e.g. read from a BYTES tensor) as ``str``, as the C++
    bindings of python_backend accept it."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def check_parameters(parameters: Any) -> str:
    """Request or response ``parameters`` (a dict, a JSON string or None) as a JSON string,
    with Triton's checks and error texts."""
    if parameters is None:
        return "{}"
    if isinstance(parameters, str):
        return parameters
    if not isinstance(parameters, dict):
        # Triton's text names the C++ type it wanted (typeid(py::dict).name() under GCC)
        raise TritonModelException(f"Expect N8pybind114dictE, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return json.dumps(parameters)
