"""The facts of SageMaker's serving contract as Triton's SageMaker server implements them:
environment variables, the binary content type, error bodies, and which failures SageMaker
is told are "out of memory" (507).

Nothing here touches the server; the frontend (:mod:`tritonx_frontend_sagemaker.frontend`)
and the multi-model endpoint (:mod:`tritonx_frontend_sagemaker.mme`) use it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web

from tritonx.errors import Code, TritonXError, invalid_arg

#: The content type of a request or response whose JSON header is followed by binary tensor
#: data; the JSON header's size in bytes follows the ``=``.
BINARY_MIME_TYPE = "application/vnd.sagemaker-triton.binary+json;json-header-size="

#: The KServe v2 header that carries the JSON header's size on the HTTP port.
HEADER_LENGTH = "Inference-Header-Content-Length"

#: The header SageMaker sets to the model a multi-model endpoint request is for.
TARGET_MODEL_HEADER = "X-Amzn-SageMaker-Target-Model"

#: Triton's model name when SAGEMAKER_TRITON_DEFAULT_MODEL_NAME is not set: /invocations then
#: answers that this model is not found.
UNSPECIFIED_MODEL = "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"

PING_MODES = ("ready", "live")
INFERENCE_TYPES = ("infer", "generate", "generate_stream")

#: Substrings of an error message that Triton answers 507 (SageMaker: "insufficient
#: storage", load the model elsewhere) instead of 400, in its multi-model endpoint's loads
#: and invokes (``SageMakerMMECheckOOMError``: any error, whatever its message quotes).
OOM_MESSAGES = (
    "CUDA out of memory",
    "CUDA_OUT_OF_MEMORY",
    "Out of memory",
    "Out Of Memory",
    "out of memory",
    "MemoryError",
    "OutOfMemory",
    "OOM",
    "Dst tensor is not initialized",
    "Src tensor is not initialized",
    "CNMEM_STATUS_OUT_OF_MEMORY",
    "CUDNN_STATUS_NOT_INITIALIZED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_NOT_INITIALIZED",
    "Failed to allocate memory",
    "failed to allocate memory",
    "No space left on device",
)

#: tritonx's own "no room" refusals (``--max-loaded-models``, ``--model-memory-budget``):
#: a model that does not fit, answered 507 like Triton's out-of-memory errors.
NO_ROOM_MARKERS = ("--max-loaded-models", "--model-memory-budget")

INT32_MAX = 2**31 - 1


def is_out_of_memory(error: TritonXError | str) -> bool:
    """Whether SageMaker is told 507 for ``error``: one of Triton's out-of-memory messages,
    or tritonx's refusal of a load that the model budgets have no room for."""
    if isinstance(error, TritonXError):
        if error.code is Code.UNAVAILABLE and any(m in error.message for m in NO_ROOM_MARKERS):
            return True
        error = error.message
    return any(marker in error for marker in OOM_MESSAGES)


def error_response(message: str, status: int) -> web.Response:
    """Triton's error body, ``{"error": "<message>"}``, with ``status``."""
    body = json.dumps({"error": message}, separators=(",", ":")).encode()
    return web.Response(body=body, status=status, content_type="application/json")


def empty_response(status: int) -> web.Response:
    """An answer without a body (Triton's 404 of an unknown multi-model endpoint model, its
    400 of an unknown path, its 200 of a load or an unload)."""
    return web.Response(status=status)


def _stoi(text: str) -> int:
    """C++ ``std::stoi``: leading white space, an optional sign and decimal digits; anything
    after the digits is ignored. :raises ValueError: no digits ("invalid_argument");
    :raises OverflowError: outside int32 ("out_of_range")."""
    i = 0
    while i < len(text) and text[i] in " \t\n\v\f\r":
        i += 1
    start = i
    if i < len(text) and text[i] in "+-":
        i += 1
    digits = i
    while i < len(text) and "0" <= text[i] <= "9":
        i += 1
    if i == digits:
        raise ValueError(text)
    significant = text[digits:i].lstrip("0")
    if len(significant) > 11:  # (more digits than any int32: no need to convert them)
        raise OverflowError(text)
    value = int(text[start:digits] + (significant or "0"))
    if not -(2**31) <= value <= INT32_MAX:
        raise OverflowError(text)
    return value


def binary_header_size(content_type: str | None, content_length: int | None) -> int | None:
    """The JSON header size a request's ``Content-Type`` declares in SageMaker's binary form
    (``application/vnd.sagemaker-triton.binary+json;json-header-size=<n>``), or None when it
    is not that form (the whole body is JSON).

    ``content_length``: the body's size when known (``Content-Length``); the size is checked
    against it as Triton does. Triton's messages for a malformed value.

    :raises TritonXError: INVALID_ARG.
    """
    if not content_type:
        return None
    position = content_type.find(BINARY_MIME_TYPE)
    if position < 0:
        return None
    if position != 0:
        raise invalid_arg(
            f"expect MIME type for binary data starts with '{BINARY_MIME_TYPE}', "
            f"got: {content_type}"
        )
    rest = content_type[len(BINARY_MIME_TYPE) :]
    try:
        size = _stoi(rest)
    except OverflowError:
        raise invalid_arg(
            f"Unable to parse inference header size, value is out of range, got: {rest}"
        ) from None
    except ValueError:
        raise invalid_arg(f"Unable to parse inference header size, got: {rest}") from None
    if size < 0 or (content_length is not None and size > content_length):
        shown = content_length if content_length is not None else "<body size>"
        raise invalid_arg(f"inference header size should be in range (0, {shown}), got: {rest}")
    return size


def restriction_refusal(
    restrictions: Mapping[str, tuple[str, str]], category: str, request: web.Request
) -> web.Response | None:
    """Triton's 403 when ``--http-restricted-api`` restricts ``category`` and the request
    lacks the header it names (with its value); None when the request may go on."""
    rule = restrictions.get(category)
    if rule is None or request.headers.get(rule[0]) == rule[1]:
        return None
    return error_response(f"This API is restricted, expecting header '{rule[0]}'", 403)


@dataclass(frozen=True)
class Environment:
    """What Triton's SageMaker server reads from its environment.

    :ivar ping_mode: ``SAGEMAKER_TRITON_PING_MODE``: ``ready`` (default; ``/ping`` is the
        server's readiness) or ``live`` (its liveness).
    :ivar default_model: ``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME``, the model ``/invocations``
        serves (Triton's placeholder name when unset).
    :ivar inference_type: ``SAGEMAKER_TRITON_INFERENCE_TYPE``: what ``/invocations`` is:
        ``infer`` (default; KServe v2 inference), ``generate`` or ``generate_stream``
        (Triton's generate extension).
    """

    ping_mode: str = "ready"
    default_model: str = UNSPECIFIED_MODEL
    inference_type: str = "infer"

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> Environment:
        """Read the variables from ``environ`` (default: the process's).

        :raises TritonXError: INVALID_ARG for a value Triton does not know (tritonx refuses
            it at start instead of treating it as the default).
        """
        env = os.environ if environ is None else environ
        ping_mode = env.get("SAGEMAKER_TRITON_PING_MODE", "ready")
        if ping_mode not in PING_MODES:
            raise invalid_arg(
                f"invalid SAGEMAKER_TRITON_PING_MODE '{ping_mode}': must be one of: ready, live"
            )
        inference_type = env.get("SAGEMAKER_TRITON_INFERENCE_TYPE", "infer")
        if inference_type not in INFERENCE_TYPES:
            raise invalid_arg(
                f"Invalid SAGEMAKER_TRITON_INFERENCE_TYPE '{inference_type}'. "
                "Must be one of: infer, generate, generate_stream"
            )
        default_model = env.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", UNSPECIFIED_MODEL)
        return cls(ping_mode, default_model or UNSPECIFIED_MODEL, inference_type)
