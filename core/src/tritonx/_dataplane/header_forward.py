"""``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: the headers of an
inference request (HTTP) or the metadata of its call (gRPC) whose name the pattern matches
become string parameters of the request, as Triton's frontends forward them; a model reads
them as it reads any request parameter (``request.parameters()`` in a ``model.py``).

As in Triton: the pattern is a regular expression searched in the header's name, case
insensitive (unless it starts with ``(?-i)``); a matching header named after a reserved
parameter, or starting with ``triton_``, fails the request with INVALID_ARG. Used by
:func:`tritonx._transports.http.routes.infer` and :mod:`tritonx._transports.grpc.servicer` (``ModelInfer`` and each
request of a ``ModelStreamInfer`` call).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from tritonx.errors import invalid_arg

#: Parameter names Triton keeps for itself (``kReservedParameterKeys``): never forwarded.
RESERVED_PARAMETER_KEYS = frozenset(
    {
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "priority",
        "timeout",
        "headers",
        "binary_data_output",
    }
)

_CASE_SENSITIVE = "(?-i)"


class HeaderForward:
    """A compiled ``--*-header-forward-pattern``.

    :param pattern: the regular expression.
    :param flag: the flag it came from (named in the error).
    :raises TritonXError: INVALID_ARG when ``pattern`` is not a valid regular expression.
    """

    __slots__ = ("_search",)

    def __init__(self, pattern: str, flag: str) -> None:
        if pattern.startswith(_CASE_SENSITIVE):
            source = pattern[len(_CASE_SENSITIVE) :]
        else:
            source = "(?i)" + pattern
        try:
            self._search = re.compile(source).search
        except re.error as exc:
            raise invalid_arg(
                f"{flag}: '{pattern}' is not a valid regular expression: {exc.msg}"
            ) from None

    @classmethod
    def of(cls, pattern: str, flag: str) -> HeaderForward | None:
        """The compiled pattern, or None when ``pattern`` is empty (nothing is forwarded)."""
        return cls(pattern, flag) if pattern else None

    def apply(self, headers: Iterable[tuple[str, str | bytes]], parameters: dict[str, Any]) -> None:
        """Add the matching ``(name, value)`` headers to ``parameters`` as strings.

        :raises TritonXError: INVALID_ARG for a matching header with a reserved name.
        """
        search = self._search
        for name, value in headers:
            if search(name) is None:
                continue
            if name in RESERVED_PARAMETER_KEYS or name.startswith("triton_"):
                raise invalid_arg(
                    f"Header '{name}' is reserved for Triton usage and cannot be forwarded."
                )
            parameters[name] = value if isinstance(value, str) else value.decode("utf-8", "replace")
