"""Errors with Triton's status codes.

Every error that can reach a client is a :class:`TritonXError` carrying one of Triton's
codes (``TRITONSERVER_Error_Code``). Transports map the code to an HTTP status or a gRPC
status; nothing in the core knows about either.
"""

from __future__ import annotations

import enum


class Code(enum.Enum):
    """Triton's error codes (the HTTP and gRPC status each maps to live in the transports'
    ``errors`` modules)."""

    UNKNOWN = "UNKNOWN"
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"

    @property
    def label(self) -> str:
        """Triton's text for the code, as in ``Status::AsString()`` ("Invalid argument")."""
        return _LABELS[self]


_LABELS = {
    Code.UNKNOWN: "Unknown",
    Code.INTERNAL: "Internal",
    Code.NOT_FOUND: "Not found",
    Code.INVALID_ARG: "Invalid argument",
    Code.UNAVAILABLE: "Unavailable",
    Code.UNSUPPORTED: "Unsupported",
    Code.ALREADY_EXISTS: "Already exists",
    Code.CANCELLED: "Cancelled",
}


class TritonXError(Exception):
    """An error with one of Triton's codes; ``str(err)`` is the message clients see."""

    def __init__(self, message: str, code: Code = Code.INTERNAL) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def __repr__(self) -> str:
        return f"TritonXError({self.message!r}, {self.code.name})"

    def as_string(self) -> str:
        """``"<Code label>: <message>"``, the form Triton uses for model-state reasons."""
        return f"{self.code.label}: {self.message}"

    @classmethod
    def wrap(cls, exc: BaseException) -> TritonXError:
        """Return ``exc`` itself if it is a TritonXError, else an INTERNAL error around it."""
        if isinstance(exc, TritonXError):
            return exc
        return cls(str(exc) or type(exc).__name__, Code.INTERNAL)


def invalid_arg(message: str) -> TritonXError:
    return TritonXError(message, Code.INVALID_ARG)


def not_found(message: str) -> TritonXError:
    return TritonXError(message, Code.NOT_FOUND)


def unavailable(message: str) -> TritonXError:
    return TritonXError(message, Code.UNAVAILABLE)


def unsupported(message: str) -> TritonXError:
    return TritonXError(message, Code.UNSUPPORTED)


class NotLoaded(TritonXError):
    """A lookup found model ``name`` not loaded while models load on demand
    (``--model-load-on-demand``): the caller awaits ``DataPlane.loaded`` (which loads it)
    and looks again. Should it reach a client, its message is Triton's unknown-model error.
    """

    def __init__(self, name: str) -> None:
        super().__init__(f"Request for unknown model: '{name}' is not found", Code.NOT_FOUND)
        self.name = name


class PluginError(TritonXError):
    """A plugin could not be registered (duplicate name, bad class, unknown hook)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Code.INTERNAL)


__all__ = [
    "Code",
    "NotLoaded",
    "PluginError",
    "TritonXError",
    "invalid_arg",
    "not_found",
    "unavailable",
    "unsupported",
]
