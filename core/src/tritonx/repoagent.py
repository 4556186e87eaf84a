"""Repository agents: code that runs around a model's load and unload (checksum, decrypt).

Agents are named in config.pbtxt::

    model_repository_agents { agents [ { name: "checksum", parameters { key: "MD5:1/model.onnx" value: "..." } } ] }

The core calls them in Triton's order: ``on_load`` in config order (the first raise stops the
chain and fails the load), then ``on_load_complete`` or ``on_load_fail`` in reverse order;
``on_unload`` in config order and ``on_unload_complete`` in reverse. Agents are synchronous
(file IO, hashing) and run in a worker thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tritonx.proto import model_config_pb2


@dataclass(frozen=True)
class AgentContext:
    """What an agent sees.

    :param model_name: the model being loaded or unloaded.
    :param model_dir: the model's folder as the agent chain stands (a previous agent may have
        replaced it).
    :param config: the model config message from config.pbtxt.
    :param parameters: this agent's ``parameters`` from the config.
    """

    model_name: str
    model_dir: Path
    config: model_config_pb2.ModelConfig
    parameters: Mapping[str, str]


class RepoAgent:
    """Base class of repository agents; override the actions you need.

    :cvar name: the agent name used in ``model_repository_agents``.

    A complete example: ``docs/examples/repoagent_config`` (an agent that rewrites the config).
    """

    name: ClassVar[str]

    def on_load(self, ctx: AgentContext) -> Path | None:
        """Before the model loads. Return a folder to load the model from instead, or None.

        Raise a TritonXError to fail the load.
        """
        return None

    def on_load_complete(self, ctx: AgentContext) -> None:
        """After the model loaded successfully."""

    def on_load_fail(self, ctx: AgentContext) -> None:
        """After the load failed (also when a later agent's ``on_load`` raised)."""

    def on_unload(self, ctx: AgentContext) -> None:
        """Before the model unloads."""

    def on_unload_complete(self, ctx: AgentContext) -> None:
        """After the model unloaded."""


__all__ = [
    "AgentContext",
    "RepoAgent",
]
