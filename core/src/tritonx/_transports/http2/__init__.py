"""HTTP/2 server connections framed by hand (RFC 9113, RFC 7541), for the event-loop gRPC
engine.

:mod:`~tritonx._transports.http2.frames` holds the frame types, flags, error codes and frame writers;
:mod:`~tritonx._transports.http2.hpack` the header-block decoder (bounded) and the literal encoding of
answers; :mod:`~tritonx._transports.http2.connection` one connection (framing, flow control, settings,
streams and every per-connection bound, :class:`~tritonx._transports.http2.connection.Options`).

This package knows nothing of gRPC: an application (the gRPC call layer,
:mod:`tritonx._transports.grpc.engine`) is handed each stream's request headers, body bytes and end, and
answers through the stream (:class:`~tritonx._transports.http2.connection.Application`,
:class:`~tritonx._transports.http2.connection.StreamHandler`).
"""
