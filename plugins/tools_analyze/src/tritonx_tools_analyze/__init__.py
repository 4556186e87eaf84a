"""``tritonx analyze``: a built-in model analyzer (config sweep under load, best config, report).

The plugin only adds the command (``tritonx_register_commands``); the sweep itself runs a
``tritonx serve`` subprocess in explicit mode per variant and loads the variant through the
load API with a ``config`` override.
"""

from __future__ import annotations

import click

import tritonx

__all__ = ["tritonx_register_commands"]


@tritonx.hookimpl
def tritonx_register_commands(cli: click.Group) -> None:
    """Add ``tritonx analyze``."""
    from tritonx_tools_analyze.cli import analyze

    cli.add_command(analyze)
