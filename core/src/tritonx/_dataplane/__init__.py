"""The data plane, under the request pipeline: :class:`~tritonx._dataplane.dataplane.DataPlane`
(the one object transports reach the models through), and what each request may carry with
it: shared-memory regions, traces and their settings, forwarded headers, per-model statistics,
the classification extension, and giving the C heap's memory back.

Private: plugins use :mod:`tritonx.pipeline`, :mod:`tritonx.handle` and :mod:`tritonx.wire`.
"""
