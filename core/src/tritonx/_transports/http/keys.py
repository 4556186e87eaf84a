"""The application keys the HTTP handlers read (set by :func:`tritonx._transports.http.app.make_app`)."""

from __future__ import annotations

from aiohttp import web

from tritonx._dataplane.dataplane import DataPlane
from tritonx._dataplane.header_forward import HeaderForward
from tritonx.config import ServerSettings
from tritonx.pipeline import Pipeline

DATAPLANE_KEY = web.AppKey("dataplane", DataPlane)
SETTINGS_KEY = web.AppKey("settings", ServerSettings)
#: ``--http-header-forward-pattern`` compiled (absent: nothing is forwarded)
FORWARD_KEY = web.AppKey("header_forward", HeaderForward)
#: The inference pipeline of this application's requests (set by ``setup_routes``).
PIPELINE_KEY = web.AppKey("pipeline", Pipeline)

#: The request key under which a frontend's request handed over by
#: :meth:`tritonx.frontend.KServeHTTP.handle` carries the core application it is served by
#: (its own ``request.app`` is the frontend's).
SERVING_APP = web.RequestKey("serving_app", web.Application)


def serving_app(request: web.Request) -> web.Application:
    """The application whose keys serve ``request``: the core's for a request a frontend
    handed over, else the one it arrived at."""
    app = request.get(SERVING_APP)
    return request.app if app is None else app


__all__ = [
    "DATAPLANE_KEY",
    "FORWARD_KEY",
    "PIPELINE_KEY",
    "SERVING_APP",
    "SETTINGS_KEY",
    "serving_app",
]
