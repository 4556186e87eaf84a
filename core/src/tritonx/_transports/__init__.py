"""The wire protocols, the outermost layer: each turns bytes from a client into calls of the
request pipeline (:mod:`tritonx.pipeline`) and its answers back into bytes.

* ``http/``: KServe v2 over HTTP/1.1 (aiohttp, with a fast path that frames ``/infer``
  itself), ``/metrics`` and the status page;
* ``grpc/``: the ``GRPCInferenceService`` servicer and its two engines (grpc.aio, and the
  event-loop engine on ``http2/``);
* ``http2/``: HTTP/2 framing, flow control and its bounds; knows nothing of gRPC.

Private: nothing here is part of the plugin interface (a frontend plugin uses
:mod:`tritonx.frontend` and :mod:`tritonx.pipeline`).
"""
