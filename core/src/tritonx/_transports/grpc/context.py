"""The context a gRPC method handler is given: :class:`CallContext`.

Both gRPC engines serve the same handlers (:mod:`tritonx._transports.grpc.servicer`,
:mod:`tritonx._transports.grpc.receive`, :mod:`tritonx._transports.grpc.health`): grpc.aio hands them its
``grpc.aio.ServicerContext``, the event-loop engine its own
:class:`tritonx._transports.grpc.calls.Context`. :class:`CallContext` is the part of
``ServicerContext`` the handlers use, and so what the loop engine's context must provide;
a handler that needs another method adds it here first (and to the loop engine).

The parameters are positional-only: handlers pass them by position, and the two contexts
name some of them differently. grpc ships no type stubs, so only the loop engine's
context is checked against this by mypy; ``tests/unit/grpc/test_context.py`` checks both
at run time (every member present, the same arity, async where this is async).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeAlias

import grpc

#: call metadata as handlers see and give it: ``(key, value)`` pairs, keys in lower case,
#: the values of ``-bin`` keys as bytes
MetadataPairs: TypeAlias = Sequence[tuple[str, str | bytes]]


class CallContext(Protocol):
    """What tritonx's gRPC handlers call on their context (``grpc.aio.ServicerContext``'s
    methods of the same names)."""

    def invocation_metadata(self) -> MetadataPairs | None:
        """The metadata the client sent with the call (gRPC's own headers left out)."""
        ...

    def set_code(self, code: grpc.StatusCode, /) -> None:
        """The call's status code, sent when the handler returns."""
        ...

    def set_details(self, details: str, /) -> None:
        """The call's status message, sent when the handler returns."""
        ...

    def set_compression(self, compression: grpc.Compression, /) -> None:
        """Compress the call's response messages with ``compression`` (when the client
        accepts it)."""
        ...

    async def send_initial_metadata(self, initial_metadata: MetadataPairs, /) -> None:
        """Send the response headers now, with ``initial_metadata`` (tritonx sends none:
        grpc.aio compresses a unary response only once they were sent on their own)."""
        ...

    def set_trailing_metadata(self, trailing_metadata: MetadataPairs, /) -> None:
        """Metadata sent with the call's status."""
        ...

    def add_done_callback(self, callback: Callable[[Any], None], /) -> None:
        """Call ``callback`` (with the context) once the call has ended."""
        ...

    def peer(self) -> str:
        """The client's address as grpc writes it (``ipv4:127.0.0.1:5000``): one per
        connection."""
        ...
