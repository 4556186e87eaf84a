"""``make_app``: the aiohttp application serving Triton's HTTP/REST protocol."""

from __future__ import annotations

from aiohttp import web

from tritonx.config import ServerSettings
from tritonx.dataplane import DataPlane
from tritonx.http.routes import DATAPLANE_KEY, SETTINGS_KEY, setup_routes


def make_app(dataplane: DataPlane, settings: ServerSettings | None = None) -> web.Application:
    """An aiohttp application for ``dataplane`` (``--http-*`` flags come from ``settings``).

    Bodies are read by the handlers themselves (limited by ``http_max_input_size``), so
    aiohttp's own ``client_max_size`` is not what limits them.
    """
    settings = settings or dataplane.settings
    app = web.Application(client_max_size=settings.http_max_input_size)
    app[DATAPLANE_KEY] = dataplane
    app[SETTINGS_KEY] = settings
    setup_routes(app)
    return app
