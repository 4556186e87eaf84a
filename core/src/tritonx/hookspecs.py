"""Every hook a tritonx plugin can implement, and the markers to declare them.

Hooks run **once, at start-up, synchronously**; nothing goes through pluggy per request.
A plugin is a module (exposed through the ``tritonx`` entry-point group) with functions marked
``@tritonx.hookimpl`` whose names are hooks below. Implementations may take a subset of the
arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import pluggy

PROJECT = "tritonx"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

if TYPE_CHECKING:
    import click

    from tritonx.registry import (
        BackendRegistry,
        CacheRegistry,
        FrontendRegistry,
        MetricSinkRegistry,
        RepoAgentRegistry,
        RepositoryRegistry,
    )
    from tritonx.types import ModelEvent


class StartedServer(Protocol):
    """The running server as :func:`tritonx_server_started` sees it: a
    :class:`tritonx.Server` (its addresses below, and its in-process API)."""

    #: the base URL of each started frontend plugin, by name
    frontend_urls: dict[str, str]

    @property
    def http_url(self) -> str:
        """``host:port`` of the HTTP listener."""
        ...

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the gRPC listener."""
        ...

    @property
    def metrics_url(self) -> str:
        """``host:port`` of the metrics listener."""
        ...


# ------------------------------------------------------------------ registration (start-up)


@hookspec
def tritonx_register_backends(registry: BackendRegistry) -> None:
    """Add :class:`tritonx.Backend` subclasses. Called once while the server starts.

    :param registry: call ``registry.add(MyBackend)``. The class's ``name`` must equal the
        ``backend:`` value models use in config.pbtxt and its ``platforms`` the ``platform:``
        values it serves. A name already taken stops start-up with an error naming both
        distributions.
    """


@hookspec
def tritonx_register_repoagents(registry: RepoAgentRegistry) -> None:
    """Add :class:`tritonx.RepoAgent` subclasses (named in ``model_repository_agents``).

    :param registry: call ``registry.add(MyAgent)``; ``MyAgent.name`` is the agent name.
    """


@hookspec
def tritonx_register_caches(registry: CacheRegistry) -> None:
    """Add :class:`tritonx.ResponseCache` subclasses (selected with ``--cache-config``).

    :param registry: call ``registry.add(MyCache)``; ``MyCache.name`` is the cache name.
    """


@hookspec
def tritonx_register_metric_sinks(registry: MetricSinkRegistry) -> None:
    """Add :class:`tritonx.MetricSink` subclasses.

    :param registry: call ``registry.add(MySink)``; ``MySink.name`` is the sink name.
    """


@hookspec
def tritonx_register_frontends(registry: FrontendRegistry) -> None:
    """Add :class:`tritonx.Frontend` subclasses: protocols served on listeners of their own,
    started with the server when ``--frontend-config <name>,...`` names them (see
    :mod:`tritonx.frontend`, with a complete example).

    :param registry: where to ``add`` them.
    """


@hookspec
def tritonx_register_repositories(registry: RepositoryRegistry) -> None:
    """Add :class:`tritonx.Repository` subclasses, chosen by ``--model-repository`` URL scheme.

    :param registry: call ``registry.add(MyRepository)``; ``MyRepository.schemes`` lists the
        URL schemes it serves (``"s3"`` for ``s3://...``). The local file system (plain paths,
        ``file://``) is the built-in ``local`` repository, registered the same way.
    """


# ------------------------------------------------------------------ command line


@hookspec
def tritonx_register_commands(cli: click.Group) -> None:
    """Add subcommands to the ``tritonx`` command (e.g. ``tritonx onnx-inspect``).

    :param cli: the top-level click group; call ``cli.add_command(...)`` or decorate with
        ``@cli.command()``.
    """


# ------------------------------------------------------------------ notifications (cold path)


@hookspec
def tritonx_server_started(server: StartedServer) -> None:
    """The server finished starting: models are loaded and listeners bound.

    :param server: the running :class:`tritonx.Server` (its ``http_url``, ``grpc_url``,
        ``metrics_url`` and in-process API).
    """


@hookspec
def tritonx_model_event(event: ModelEvent) -> None:
    """A model version changed state (LOADING, READY, UNLOADING, UNAVAILABLE).

    Called from the event loop thread; keep it quick.

    :param event: the model name, version, new state and, for UNAVAILABLE, the reason.
    """


__all__ = [
    "PROJECT",
    "StartedServer",
    "hookimpl",
    "hookspec",
    "tritonx_model_event",
    "tritonx_register_backends",
    "tritonx_register_caches",
    "tritonx_register_commands",
    "tritonx_register_frontends",
    "tritonx_register_metric_sinks",
    "tritonx_register_repoagents",
    "tritonx_register_repositories",
    "tritonx_server_started",
]
