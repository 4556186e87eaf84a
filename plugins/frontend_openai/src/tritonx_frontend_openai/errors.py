"""OpenAI's error answers: ``{"error": {"message", "type", "param", "code"}}`` with OpenAI's
HTTP status codes, and the mapping from tritonx's (Triton's) error codes to them."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tritonx.errors import Code, TritonXError

#: Triton's error codes as OpenAI answers them: (HTTP status, error type, error code).
_FROM_TRITON: dict[Code, tuple[int, str, str | None]] = {
    Code.INVALID_ARG: (400, "invalid_request_error", None),
    Code.UNSUPPORTED: (400, "invalid_request_error", "unsupported"),
    Code.NOT_FOUND: (404, "invalid_request_error", "model_not_found"),
    Code.ALREADY_EXISTS: (409, "invalid_request_error", None),
    Code.CANCELLED: (499, "invalid_request_error", "cancelled"),
    Code.UNAVAILABLE: (503, "server_error", "service_unavailable"),
    Code.INTERNAL: (500, "server_error", None),
    Code.UNKNOWN: (500, "server_error", None),
}


class OpenAIError(Exception):
    """An error answered as OpenAI does.

    :param status: the HTTP status.
    :param message: what the client reads.
    :param type: OpenAI's error type (``invalid_request_error``, ``authentication_error``,
        ``server_error``...).
    :param param: the request field at fault, if one is.
    :param code: OpenAI's machine-readable code (``model_not_found``, ``invalid_api_key``...).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON body (also the payload of a stream's error event)."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self, headers: dict[str, str] | None = None) -> web.Response:
        """The HTTP answer."""
        return web.Response(
            status=self.status,
            body=orjson.dumps(self.body()),
            content_type="application/json",
            headers=headers,
        )


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    """A 400 ``invalid_request_error``."""
    return OpenAIError(400, message, param=param, code=code)


def model_not_found(model: str) -> OpenAIError:
    """OpenAI's 404 for a model id it does not serve."""
    return OpenAIError(
        404,
        f"The model '{model}' does not exist",
        param="model",
        code="model_not_found",
    )


def from_triton(error: BaseException) -> OpenAIError:
    """A tritonx error (the model's, or the server's: queue full, exiting...) as OpenAI's
    answer; anything else is a 500 ``server_error``."""
    if isinstance(error, OpenAIError):
        return error
    if not isinstance(error, TritonXError):
        return OpenAIError(500, str(error) or type(error).__name__, type="server_error")
    status, kind, code = _FROM_TRITON.get(error.code, (500, "server_error", None))
    return OpenAIError(status, error.message, type=kind, code=code)


__all__ = ["OpenAIError", "from_triton", "invalid", "model_not_found"]
