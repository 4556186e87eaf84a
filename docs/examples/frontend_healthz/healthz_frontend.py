"""``healthz``: a plain-text health check and model summary on a port of its own.

A load balancer or a person with ``curl`` reads it; nothing on that port runs inference, so it
can be opened where the inference ports are not. A :class:`tritonx.AiohttpFrontend` example::

    tritonx serve --model-repository models --frontend-config healthz,allow=true

* ``GET /healthz``: ``200`` when every checked model is ready, ``503`` when one is not; one
  line per model either way (``<model> READY`` or ``<model> NOT READY <reason>``).
* ``GET /models``: the repository index as text, one line per model version.

``--frontend-config healthz,models=a,b`` checks only the models ``a`` and ``b`` (default:
every model in the repository); ``port=`` and ``address=`` place it (default port 8003).
"""

from __future__ import annotations

from aiohttp import web

import tritonx


@tritonx.hookimpl
def tritonx_register_frontends(registry: tritonx.FrontendRegistry) -> None:
    """Register the ``healthz`` frontend."""
    registry.add(HealthzFrontend)


class HealthzFrontend(tritonx.AiohttpFrontend):
    """The server's health as text; it only reads the server's state through its handle."""

    name = "healthz"
    title = "Health summary"
    default_port = 8003
    config_keys = {"models": "the models /healthz checks, comma-separated (default: every model)"}

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/models", self.models)
        return app

    def checked_models(self, index: list[tritonx.RepositoryEntry]) -> list[str]:
        """The models ``/healthz`` checks: the ``models`` setting, or every model of
        ``index``."""
        named = [m for m in self.config.get("models", "").split(",") if m]
        return named or sorted({row.name for row in index})

    async def healthz(self, request: web.Request) -> web.Response:
        index = self.server.repository_index()  # (reads the repositories: once a request)
        reasons = {row.name: row.reason for row in index if row.reason}
        lines, healthy = [], True
        for model in self.checked_models(index):
            if self.server.model_ready(model):
                lines.append(f"{model} READY")
            else:
                healthy = False
                lines.append(f"{model} NOT READY {reasons.get(model, '')}".rstrip())
        return web.Response(text="\n".join(lines) + "\n", status=200 if healthy else 503)

    async def models(self, request: web.Request) -> web.Response:
        lines = [
            f"{row.name} {row.version or '-'} {row.state.value if row.state else '-'}"
            for row in self.server.repository_index()
        ]
        return web.Response(text="".join(f"{line}\n" for line in lines))
