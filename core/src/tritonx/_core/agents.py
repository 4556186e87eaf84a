"""Repository agents around one model's load and unload, in Triton's order.

``on_load`` runs in config order, each agent seeing the folder the previous one returned; the
first failure stops the chain. ``on_load_complete`` / ``on_load_fail`` then run in reverse
order over the agents that ran; ``on_unload`` runs in config order and ``on_unload_complete``
in reverse. Agents are synchronous and run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonx.errors import TritonXError, invalid_arg
from tritonx.registry import RepoAgentRegistry
from tritonx.repoagent import AgentContext, RepoAgent

log = logging.getLogger("tritonx.agents")


class AgentLoadError(TritonXError):
    """An agent's LOAD action failed. Triton runs the agents while it polls the model, so the
    load API answers "failed to poll from model repository" (``load_request.poll_failed``)."""


class AgentChain:
    """The agents a model's config names, with the folder their LOAD actions produced."""

    def __init__(
        self, model_name: str, config: Any, agents: list[tuple[RepoAgent, dict[str, str]]]
    ) -> None:
        self.model_name = model_name
        self.config = config
        self.agents = agents
        self._ran: list[tuple[RepoAgent, dict[str, str], Path]] = []

    @classmethod
    def resolve(cls, model_name: str, config: Any, registry: RepoAgentRegistry) -> AgentChain:
        """The chain for ``config.model_repository_agents`` (unknown names are INVALID_ARG)."""
        agents: list[tuple[RepoAgent, dict[str, str]]] = []
        for spec in config.model_repository_agents.agents:
            agent_cls = registry.get(spec.name)
            if agent_cls is None:
                raise invalid_arg(
                    f"unable to find repository agent '{spec.name}' for model '{model_name}'; "
                    "install a tritonx plugin that provides it"
                )
            agents.append((agent_cls(), dict(spec.parameters)))
        return cls(model_name, config, agents)

    def __bool__(self) -> bool:
        return bool(self.agents)

    def _ctx(self, folder: Path, params: dict[str, str]) -> AgentContext:
        return AgentContext(self.model_name, folder, self.config, params)

    async def load(self, model_dir: Path) -> Path:
        """Run every ``on_load``; returns the folder to load the model from. On a failure
        the agents that ran get ``on_load_fail`` (reverse order) and the error is raised."""
        folder = model_dir
        self._ran = []
        for agent, params in self.agents:
            ctx = self._ctx(folder, params)
            self._ran.append((agent, params, folder))
            try:
                replaced = await asyncio.to_thread(agent.on_load, ctx)
            except Exception as exc:
                err = TritonXError.wrap(exc)
                log.error(
                    "repository agent '%s' failed for '%s': %s", agent.name, self.model_name, err
                )
                await self.load_failed()
                raise AgentLoadError(err.message, err.code) from exc
            if replaced is not None:
                folder = Path(replaced)
        return folder

    async def load_completed(self) -> None:
        """``on_load_complete`` in reverse order."""
        await self._reverse(lambda a: a.on_load_complete)

    async def load_failed(self) -> None:
        """``on_load_fail`` in reverse order over the agents whose ``on_load`` ran."""
        await self._reverse(lambda a: a.on_load_fail)
        self._ran = []

    async def unload(self) -> None:
        """``on_unload`` in config order."""
        for agent, params, folder in self._ran:
            await self._call(agent, agent.on_unload, self._ctx(folder, params))

    async def unload_completed(self) -> None:
        """``on_unload_complete`` in reverse order."""
        await self._reverse(lambda a: a.on_unload_complete)
        self._ran = []

    async def _reverse(self, action: Callable[[RepoAgent], Callable[[AgentContext], Any]]) -> None:
        for agent, params, folder in reversed(self._ran):
            await self._call(agent, action(agent), self._ctx(folder, params))

    async def _call(
        self, agent: RepoAgent, hook: Callable[[AgentContext], Any], ctx: AgentContext
    ) -> None:
        try:
            await asyncio.to_thread(hook, ctx)
        except Exception:
            log.exception("repository agent '%s' failed for '%s'", agent.name, self.model_name)
