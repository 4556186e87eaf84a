"""HTTP/2 server connections framed by hand (RFC 9113, RFC 7541), for the event-loop gRPC
engine.

:mod:`~tritonx._transports.http2.frames` holds the frame types, flags, error codes and frame writers;
:mod:`~tritonx._transports.http2.hpack` the header-block decoder (bounded) and the literal encoding of
answers; :mod:`~tritonx._transports.http2.connection` one connection (framing, flow control, settings,
streams and every per-connection bound, :class:`~tritonx._transports.http2.options.Options`),
built in layers: :mod:`~tritonx._transports.http2.options` (the bounds),
:mod:`~tritonx._transports.http2.streams` (streams, writing and sending under the client's windows),
:mod:`~tritonx._transports.http2.policing` (the reset budget, ping strikes, keepalive, age),
:mod:`~tritonx._transports.http2.inbound` (the client's frames but header blocks) and
:mod:`~tritonx._transports.http2.fields` (a request's header checks); ``connection`` adds the
asyncio callbacks, the frame dispatcher and the header blocks, and is what an application imports.

This package knows nothing of gRPC: an application (the gRPC call layer,
:mod:`tritonx._transports.grpc.engine`) is handed each stream's request headers, body bytes and end, and
answers through the stream (:class:`~tritonx._transports.http2.connection.Application`,
:class:`~tritonx._transports.http2.connection.StreamHandler`).
"""
