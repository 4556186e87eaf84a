"""Transport-neutral helpers for reading and writing Triton's wire forms.

Both transports (and the core's validation) use these, so the strings clients see are the
same over HTTP and gRPC: version strings from URLs and messages, Triton's ``[-1,16]`` shape
form and the ``[request id: <id>]`` error prefix.
"""

from __future__ import annotations

from collections.abc import Iterable

from tritonx.errors import invalid_arg


def parse_version(text: str | None) -> int | None:
    """A version string from a URL or message: "" → None (latest), else a non-negative int."""
    if not text:
        return None
    # only plain decimal digits: int() would also take "1_0", " 1", "+1" or non-ASCII digits
    # (and no more than 18 of them: no int64 has more, and int() refuses past 4300)
    digits = text.isascii() and text.isdigit() and len(text) <= 18
    value = int(text) if digits else -1
    if value < 0:
        raise invalid_arg(
            f"failed to parse model version '{text}', expected a non-negative integer"
        )
    return value


def request_prefix(request_id: str) -> str:
    """Triton's ``[request id: <id>] `` prefix (``<id_unknown>`` when the id is empty)."""
    return f"[request id: {request_id or '<id_unknown>'}] "


def dims_str(shape: Iterable[int]) -> str:
    """Triton's ``DimsListToString``: ``[-1,16]``."""
    return "[" + ",".join(str(d) for d in shape) + "]"


__all__ = [
    "dims_str",
    "parse_version",
    "request_prefix",
]
