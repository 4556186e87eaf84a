"""tritonx: a Triton-compatible inference server in Python, composed from plugins.

The plugin interface: plugin markers and base classes, the request/response types, the errors,
and the in-process :class:`Server`. Names resolve on first use (a module ``__getattr__``), so
importing one interface module (``tritonx.errors``, ``tritonx.types``, ``tritonx.backend``)
loads neither the server nor aiohttp nor grpc.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tritonx.backend import (
        AutoCompleteContext,
        Backend,
        ComputeTimer,
        InstanceSpec,
        LoadContext,
        ModelInstance,
        compute_timer,
    )
    from tritonx.batching import concat_inputs, split_outputs
    from tritonx.cache import ResponseCache
    from tritonx.config import EXAMPLE_REPOSITORY, EditableModelConfig, ModelConfig, ServerSettings
    from tritonx.datatypes import DataType
    from tritonx.errors import Code, PluginError, TritonXError
    from tritonx.frontend import AiohttpFrontend, Frontend, KServeHTTP
    from tritonx.handle import ServerHandle
    from tritonx.hookspecs import hookimpl
    from tritonx.metrics import MetricSink
    from tritonx.registry import (
        BackendRegistry,
        CacheRegistry,
        FrontendRegistry,
        MetricSinkRegistry,
        RepoAgentRegistry,
        RepositoryRegistry,
    )
    from tritonx.repoagent import AgentContext, RepoAgent
    from tritonx.repository import Repository
    from tritonx.server import Server
    from tritonx.types import (
        REQUEST_RELEASE_ALL,
        REQUEST_RELEASE_RESCHEDULE,
        SEQUENCE_END,
        SEQUENCE_START,
        InferenceRequest,
        InferenceResponse,
        ModelEvent,
        ModelMetadata,
        ModelState,
        RepositoryEntry,
        ResponseSender,
        ServerMetadata,
        TensorSpec,
    )

#: Where each name of :data:`__all__` is defined.
_HOMES: dict[str, str] = {
    "AgentContext": "tritonx.repoagent",
    "AiohttpFrontend": "tritonx.frontend",
    "AutoCompleteContext": "tritonx.backend",
    "Backend": "tritonx.backend",
    "BackendRegistry": "tritonx.registry",
    "CacheRegistry": "tritonx.registry",
    "Code": "tritonx.errors",
    "ComputeTimer": "tritonx.backend",
    "DataType": "tritonx.datatypes",
    "EXAMPLE_REPOSITORY": "tritonx.config",
    "EditableModelConfig": "tritonx.config",
    "Frontend": "tritonx.frontend",
    "FrontendRegistry": "tritonx.registry",
    "KServeHTTP": "tritonx.frontend",
    "InferenceRequest": "tritonx.types",
    "InferenceResponse": "tritonx.types",
    "InstanceSpec": "tritonx.backend",
    "LoadContext": "tritonx.backend",
    "MetricSink": "tritonx.metrics",
    "MetricSinkRegistry": "tritonx.registry",
    "ModelConfig": "tritonx.config",
    "ModelEvent": "tritonx.types",
    "ModelInstance": "tritonx.backend",
    "ModelMetadata": "tritonx.types",
    "ModelState": "tritonx.types",
    "PluginError": "tritonx.errors",
    "REQUEST_RELEASE_ALL": "tritonx.types",
    "REQUEST_RELEASE_RESCHEDULE": "tritonx.types",
    "RepoAgent": "tritonx.repoagent",
    "RepoAgentRegistry": "tritonx.registry",
    "Repository": "tritonx.repository",
    "RepositoryEntry": "tritonx.types",
    "RepositoryRegistry": "tritonx.registry",
    "ResponseCache": "tritonx.cache",
    "ResponseSender": "tritonx.types",
    "SEQUENCE_END": "tritonx.types",
    "SEQUENCE_START": "tritonx.types",
    "Server": "tritonx.server",
    "ServerHandle": "tritonx.handle",
    "ServerMetadata": "tritonx.types",
    "ServerSettings": "tritonx.config",
    "TensorSpec": "tritonx.types",
    "TritonXError": "tritonx.errors",
    "compute_timer": "tritonx.backend",
    "concat_inputs": "tritonx.batching",
    "hookimpl": "tritonx.hookspecs",
    "split_outputs": "tritonx.batching",
}


def __getattr__(name: str) -> Any:
    """Import the interface module that defines ``name`` (once) and return it."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tritonx' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "EXAMPLE_REPOSITORY",
    "REQUEST_RELEASE_ALL",
    "REQUEST_RELEASE_RESCHEDULE",
    "SEQUENCE_END",
    "SEQUENCE_START",
    "AgentContext",
    "AiohttpFrontend",
    "AutoCompleteContext",
    "Backend",
    "BackendRegistry",
    "CacheRegistry",
    "Code",
    "ComputeTimer",
    "DataType",
    "EditableModelConfig",
    "Frontend",
    "FrontendRegistry",
    "InferenceRequest",
    "InferenceResponse",
    "InstanceSpec",
    "KServeHTTP",
    "LoadContext",
    "MetricSink",
    "MetricSinkRegistry",
    "ModelConfig",
    "ModelEvent",
    "ModelInstance",
    "ModelMetadata",
    "ModelState",
    "PluginError",
    "RepoAgent",
    "RepoAgentRegistry",
    "Repository",
    "RepositoryEntry",
    "RepositoryRegistry",
    "ResponseCache",
    "ResponseSender",
    "Server",
    "ServerHandle",
    "ServerMetadata",
    "ServerSettings",
    "TensorSpec",
    "TritonXError",
    "compute_timer",
    "concat_inputs",
    "hookimpl",
    "split_outputs",
]
