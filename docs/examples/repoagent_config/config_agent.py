"""``config_override``: a repository agent that rewrites a model's config before it loads.

Each of the agent's parameters is a config field and the text-format value to set it to (a
repeated or message field is replaced, not appended to or merged into)::

    model_repository_agents { agents [ { name: "config_override", parameters [
      { key: "max_batch_size" value: "8" },
      { key: "dynamic_batching" value: "{ max_queue_delay_microseconds: 100 }" } ] } ] }

The model then loads from a copy of its folder whose ``config.pbtxt`` is the config the
server read (``configs/<name>.pbtxt`` with ``--model-config-name``) with those fields set;
the original folder is never changed, and the copy is removed once the model is unloaded or
its load failed. A :class:`tritonx.RepoAgent` example.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from google.protobuf import text_format

import tritonx
from tritonx.errors import invalid_arg
from tritonx.proto import model_config_pb2


@tritonx.hookimpl
def tritonx_register_repoagents(registry: tritonx.RepoAgentRegistry) -> None:
    """Register the ``config_override`` agent."""
    registry.add(ConfigOverrideAgent)


class ConfigOverrideAgent(tritonx.RepoAgent):
    """One instance serves one load of one model (the server creates it per load)."""

    name = "config_override"

    def __init__(self) -> None:
        self.copy: Path | None = None

    def on_load(self, ctx: tritonx.AgentContext) -> Path:
        config = model_config_pb2.ModelConfig()
        config.CopyFrom(ctx.config)
        for field, value in ctx.parameters.items():
            if field not in config.DESCRIPTOR.fields_by_name:
                raise invalid_arg(f"config_override: the model config has no field {field}")
            config.ClearField(field)  # set, not appended to (repeated) or merged (messages)
            try:
                text_format.Merge(f"{field}: {value}", config)
            except text_format.ParseError as exc:
                raise invalid_arg(f"config_override: cannot set {field} to {value}: {exc}") from exc
        self.copy = Path(tempfile.mkdtemp(prefix="tritonx-config-override-")) / ctx.model_name
        shutil.copytree(ctx.model_dir, self.copy, ignore=_other_configs(ctx.model_dir))
        (self.copy / "config.pbtxt").write_text(text_format.MessageToString(config))
        return self.copy

    def on_load_fail(self, ctx: tritonx.AgentContext) -> None:
        self._remove_copy()

    def on_unload_complete(self, ctx: tritonx.AgentContext) -> None:
        self._remove_copy()

    def _remove_copy(self) -> None:
        if self.copy is not None:
            shutil.rmtree(self.copy.parent, ignore_errors=True)
            self.copy = None


def _other_configs(model_dir: Path) -> Callable[[str, list[str]], list[str]]:
    """Leave the model's ``configs/`` folder out of the copy: it loads from ``config.pbtxt``."""
    return lambda folder, _names: ["configs"] if Path(folder) == model_dir else []
