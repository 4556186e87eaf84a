"""``make_app``: the aiohttp application serving Triton's HTTP/REST protocol."""

from __future__ import annotations

import ssl

from aiohttp import web

from tritonx._dataplane.dataplane import DataPlane
from tritonx._dataplane.header_forward import HeaderForward
from tritonx._runtime.security import listener_tls_files
from tritonx._transports.http.routes import DATAPLANE_KEY, FORWARD_KEY, SETTINGS_KEY, setup_routes
from tritonx.config import ServerSettings


def make_app(dataplane: DataPlane, settings: ServerSettings | None = None) -> web.Application:
    """An aiohttp application for ``dataplane`` (``--http-*`` flags come from ``settings``).

    Bodies are read by the handlers themselves (limited by ``http_max_input_size``), so
    aiohttp's own ``client_max_size`` is not what limits them. ``http_restricted_api`` puts
    the header check in front of the routes (nothing is checked when it is empty). The
    settings are checked by :func:`tritonx._runtime.settings_check.validate_settings` beforehand.
    """
    settings = settings or dataplane.settings
    forward = HeaderForward.of(
        settings.http_header_forward_pattern, "--http-header-forward-pattern"
    )
    app = web.Application(client_max_size=settings.http_max_input_size)
    app[DATAPLANE_KEY] = dataplane
    app[SETTINGS_KEY] = settings
    if forward is not None:
        app[FORWARD_KEY] = forward
    setup_routes(app, settings.http_restricted_api)
    return app


def http_ssl_context(settings: ServerSettings) -> ssl.SSLContext | None:
    """The server TLS context of ``--http-use-ssl[-mutual]`` (None: plain HTTP).

    :raises TritonXError: INVALID_ARG when a certificate/key file is missing or not valid.
    """
    files = listener_tls_files(settings, "http")
    return files.context if files is not None else None
