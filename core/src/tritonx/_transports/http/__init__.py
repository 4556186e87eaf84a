"""The HTTP/REST frontend (KServe v2 + Triton extensions) over aiohttp: a thin adapter over
:class:`tritonx._dataplane.dataplane.DataPlane`."""
