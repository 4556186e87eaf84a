"""tritonx plugin: Triton's ``checksum`` repository agent.

Registered through the ``tritonx`` entry point ``repoagent_checksum``. A model whose
config.pbtxt names the agent is checked before it loads::

    model_repository_agents {
      agents [ { name: "checksum",
                 parameters { key: "MD5:1/model.onnx" value: "<lowercase hex digest>" } } ]
    }
"""

from __future__ import annotations

import tritonx
from tritonx_repoagent_checksum.agent import ALGORITHMS, ChecksumAgent, file_digest

__all__ = ["ALGORITHMS", "ChecksumAgent", "file_digest", "tritonx_register_repoagents"]
__version__ = "0.1.0"


@tritonx.hookimpl
def tritonx_register_repoagents(registry: tritonx.RepoAgentRegistry) -> None:
    """Register :class:`ChecksumAgent` (agent ``checksum``)."""
    registry.add(ChecksumAgent)
