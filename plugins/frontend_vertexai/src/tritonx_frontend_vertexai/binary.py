"""The binary form of an inference request on the Vertex AI port.

Vertex AI does not pass custom headers such as ``Inference-Header-Content-Length`` to the
container, so Triton's Vertex AI server reads the size of a binary request's JSON header from
its content type instead::

    Content-Type: application/vnd.vertex-ai-triton.binary+json;json-header-size=<n>

A request whose content type does not contain that type is JSON only (the whole body is the
header). :func:`json_header_size` applies tritonserver's rules and messages
(``VertexAiAPIServer::GetInferenceHeaderLength``).
"""

from __future__ import annotations

from tritonx.errors import invalid_arg

#: The content type of a binary request, up to its header size.
BINARY_CONTENT_TYPE = "application/vnd.vertex-ai-triton.binary+json;json-header-size="

_INT32_MAX = 2**31 - 1
#: The characters C's ``isspace`` skips before a number.
_C_SPACE = " \t\n\v\f\r"


def json_header_size(content_type: str | None, content_length: int | None) -> int | None:
    """The JSON header's size in bytes of a binary request, or None for a JSON request.

    :param content_type: the request's ``Content-Type`` as sent.
    :param content_length: the body's size (None when it is not known before it is read:
        the size is then checked against the body by the server as it reads it).
    :raises tritonx.TritonXError: INVALID_ARG (400) with Triton's message when the binary
        type is not at the start of the content type, the size is not a number or does
        not fit 32 bits, or it is negative or larger than the body.
    """
    if content_type is None:
        return None
    position = content_type.find(BINARY_CONTENT_TYPE)
    if position < 0:
        return None
    if position != 0:
        raise invalid_arg(
            f"expect MIME type for binary data starts with '{BINARY_CONTENT_TYPE}', got: "
            f"{content_type}"
        )
    rest = content_type[len(BINARY_CONTENT_TYPE) :]
    value = _leading_int(rest)
    if value is None:
        raise invalid_arg(f"Unable to parse inference header size, got: {rest}")
    if not -_INT32_MAX - 1 <= value <= _INT32_MAX:
        raise invalid_arg(
            f"Unable to parse inference header size, value is out of range, got: {rest}"
        )
    if value < 0 or (content_length is not None and value > content_length):
        upper = content_length if content_length is not None else "<body size>"
        raise invalid_arg(f"inference header size should be in range (0, {upper}), got: {rest}")
    return value


def _leading_int(text: str) -> int | None:
    """The integer ``text`` starts with, as C++ ``std::stoi`` reads it (leading white space
    and a sign allowed, leading zeros skipped, anything after the digits ignored); None when
    there is none. At most 32 significant digits are read: any longer number is out of range
    anyway."""
    index = len(text) - len(text.lstrip(_C_SPACE))
    sign = 1
    if index < len(text) and text[index] in "+-":
        sign = -1 if text[index] == "-" else 1
        index += 1
    start = index
    while index < len(text) and text[index] == "0":
        index += 1
    end = index
    while end < len(text) and end - index < 32 and "0" <= text[end] <= "9":
        end += 1
    if end == start:
        return None
    return sign * int(text[index:end] or "0")


__all__ = ["BINARY_CONTENT_TYPE", "json_header_size"]
