"""Giving the memory of large rejected inference messages back to the system.

A rejected request's message is freed as soon as its status is sent (nothing refers to it
any more), but glibc keeps the freed memory: grpc receives a message in many heap slices,
spread over its threads' malloc arenas, and a free chunk below the top of a heap is never
returned by itself (``tritonx serve`` also raises the trim threshold, so that large messages
do not page-fault on every request). Three rejected 200 MiB messages so left 300-700 MB of
free but resident memory behind.

The inference RPCs' deserializers (:func:`measuring`) note the size of a message larger
than :data:`LARGE_MESSAGE_BYTES`; when such a request is rejected (:func:`rejected`), a
``malloc_trim(0)`` runs in a worker thread shortly after the call ends
(:func:`tritonx._dataplane.heap.trim_heap`: at most one at a time; a few milliseconds). Accepted requests are left alone: their memory serves the next
one. Without glibc this does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from tritonx._dataplane.heap import trim_heap

#: Messages larger than this are worth trimming the heap for when they are rejected.
LARGE_MESSAGE_BYTES = 32 << 20
#: Seconds between a rejection and the trim (the call ends and its message is freed first).
TRIM_DELAY = 0.2

#: Size of the large inference message being handled in this context (0: none).
_message_bytes: ContextVar[int] = ContextVar("tritonx_grpc_message_bytes", default=0)


def measuring(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``deserialize``, noting in the call's context whether the message is large."""

    def measured(data: bytes) -> Any:
        size = len(data)
        if size > LARGE_MESSAGE_BYTES or _message_bytes.get():
            _message_bytes.set(size if size > LARGE_MESSAGE_BYTES else 0)
        return deserialize(data)

    return measured


def rejected() -> None:
    """The request handled in this context was refused: if its message was large, trim the
    heap once the call is over."""
    if _message_bytes.get():
        trim_heap(TRIM_DELAY)
