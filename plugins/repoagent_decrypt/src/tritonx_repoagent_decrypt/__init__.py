"""tritonx plugin: the ``decrypt`` repository agent and the ``tritonx encrypt-model`` command.

Registered through the ``tritonx`` entry point ``repoagent_decrypt``. A model folder made by
``tritonx encrypt-model`` (AES-GCM, the ``cryptography`` library) is decrypted into a private
temporary folder for its load and wiped when it unloads or the load fails.
"""

from __future__ import annotations

import click

import tritonx
from tritonx_repoagent_decrypt.agent import DecryptAgent, read_key, temp_root
from tritonx_repoagent_decrypt.cli import encrypt_model_command
from tritonx_repoagent_decrypt.crypto import CryptoError, decrypt_model, encrypt_model, parse_key

__all__ = [
    "CryptoError",
    "DecryptAgent",
    "decrypt_model",
    "encrypt_model",
    "encrypt_model_command",
    "parse_key",
    "read_key",
    "temp_root",
    "tritonx_register_commands",
    "tritonx_register_repoagents",
]
__version__ = "0.1.0"


@tritonx.hookimpl
def tritonx_register_repoagents(registry: tritonx.RepoAgentRegistry) -> None:
    """Register :class:`DecryptAgent` (agent ``decrypt``)."""
    registry.add(DecryptAgent)


@tritonx.hookimpl
def tritonx_register_commands(cli: click.Group) -> None:
    """Add ``tritonx encrypt-model``."""
    cli.add_command(encrypt_model_command)
