"""tritonx: a Triton-compatible inference server in Python, composed from plugins.

The public API: plugin markers and base classes, the request/response types, the errors, and
the in-process :class:`Server`.
"""

from __future__ import annotations

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
from tritonx.config import EditableModelConfig, ModelConfig, ServerSettings
from tritonx.datatypes import DataType
from tritonx.errors import Code, PluginError, TritonXError
from tritonx.frontend import AiohttpFrontend, Frontend
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

__all__ = [
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
