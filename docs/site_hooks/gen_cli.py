"""Generators of the CLI pages: the real ``--help`` of each ``tritonx`` command, the table of
``tritonx serve``'s flags (:data:`tritonx._runtime.cli_options.SERVE_OPTIONS`, as the command
holds them) and the table of the tritonserver flags tritonx refuses, with why
(:data:`~tritonx._runtime.cli_options.NOT_IMPLEMENTED_FLAGS`).

The help texts are those of the installed ``tritonx`` command, run as a user runs it
(``python -m tritonx``, so the commands plugins add are there too), 100 columns wide.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import click

from tritonx._runtime.cli_options import NOT_IMPLEMENTED_FLAGS, TRITONX_ONLY

#: the width the help texts are printed at (as the README's CLI reference was)
COLUMNS = "100"

#: tritonserver's meaning of the serve flags whose help text is empty (click prints no help
#: for them; their names say most of it), from tritonserver's command_line_parser.cc
TRITON_MEANINGS: dict[str, str] = {
    "--http-address": "Address the HTTP listener binds.",
    "--http-port": "Port of the HTTP listener.",
    "--grpc-address": "Address the gRPC listener binds.",
    "--grpc-port": "Port of the gRPC listener.",
    "--grpc-keepalive-time": "Milliseconds after which a keepalive ping is sent.",
    "--grpc-keepalive-timeout": "Milliseconds the keepalive ping's sender waits for its "
    "acknowledgement.",
    "--grpc-http2-max-pings-without-data": "Pings that may be sent while no data or header "
    "frame is sent.",
    "--grpc-http2-min-recv-ping-interval-without-data": "Least milliseconds expected between "
    "received pings while no data is sent.",
    "--grpc-http2-max-ping-strikes": "Bad pings tolerated before GOAWAY closes the connection.",
    "--metrics-port": "Port of the metrics listener.",
    "--metrics-interval-ms": "Milliseconds between metric collections.",
    "--rate-limit": "Rate limiting mode.",
    "--log-format": "Log line format.",
}

_SENTENCE_END = re.compile(r"(?<=[.])\s+(?=[A-Z0-9\[])")


#: the commands whose help the pages show
COMMANDS: tuple[tuple[str, ...], ...] = (
    (),
    ("serve",),
    ("check",),
    ("plugins",),
    ("analyze",),
    ("encrypt-model",),
)
#: one interpreter prints every command's help, each after this line: ``tritonx``'s own
#: ``main`` (its plugins' commands added) runs once per command, as ``tritonx ... --help``
_SEPARATOR = "\x00--- tritonx help ---\x00"
_PRINT_ALL = f"""
import contextlib, sys
from tritonx.cli import main
for command in {COMMANDS!r}:
    print({_SEPARATOR!r}, flush=True)
    with contextlib.suppress(SystemExit):
        main([*command, "--help"])
    sys.stdout.flush()
"""
_helps: dict[tuple[str, ...], str] = {}


def command_help(*command: str) -> str:
    """The ``--help`` text of ``tritonx <command...>`` in a fenced block."""
    if not _helps:
        env = {**os.environ, "COLUMNS": COLUMNS}
        done = subprocess.run(
            [sys.executable, "-c", _PRINT_ALL],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=120,
        )
        texts = done.stdout.split(_SEPARATOR + "\n")[1:]
        _helps.update(zip(COMMANDS, texts, strict=True))
    return "```text\n" + _helps[command].rstrip("\n") + "\n```\n"


def main_help() -> str:
    """``tritonx --help``: the commands."""
    return command_help()


def serve_help() -> str:
    """``tritonx serve --help``."""
    return command_help("serve")


def check_help() -> str:
    """``tritonx check --help``."""
    return command_help("check")


def plugins_help() -> str:
    """``tritonx plugins --help``."""
    return command_help("plugins")


def analyze_help() -> str:
    """``tritonx analyze --help`` (the ``tritonx-tools-analyze`` plugin's command)."""
    return command_help("analyze")


def encrypt_model_help() -> str:
    """``tritonx encrypt-model --help`` (the ``tritonx-repoagent-decrypt`` plugin's command)."""
    return command_help("encrypt-model")


def first_sentence(text: str) -> str:
    """The first sentence of a help text (without the "(tritonx only)" mark)."""
    text = " ".join(text.replace(TRITONX_ONLY, ".").split())
    sentence = _SENTENCE_END.split(text, maxsplit=1)[0]
    return sentence if sentence.endswith(".") else sentence + "."


def _cell(text: str) -> str:
    """``text`` as plain text in a Markdown table cell (no HTML tag, emphasis or column)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for char in "|*_`":
        text = text.replace(char, "\\" + char)
    return text


def _default(option: click.Option) -> str:
    default = option.default
    if not option.show_default or default in (None, "", ()) or option.multiple:
        return ""
    if isinstance(default, bool):
        default = "true" if default else "false"
    return f"`{default}`"


def triton_flags() -> str:
    """A table of ``tritonx serve``'s flags: what each does (its help text's first sentence),
    its default, and whether the flag is tritonx's own (:func:`refused_flags` is the table of
    the tritonserver flags tritonx refuses)."""
    from tritonx.cli import serve  # the command as built, the refused flags hidden in it

    rows = ["| Flag | What it does | Default | Note |", "|---|---|---|---|"]
    for param in serve.params:
        if not isinstance(param, click.Option) or param.hidden or not param.opts:
            continue
        if param.opts[0] == "--help":
            continue
        flag = param.opts[0]
        help_text = param.help or TRITON_MEANINGS.get(flag, "")
        what = first_sentence(help_text) if help_text else ""
        if "Loop engine" in help_text:
            what = what.rstrip(".") + " (`--grpc-engine=loop`)."
        aliases = "".join(f" (or `{alias}`)" for alias in param.opts[1:])
        own = "tritonx only" if "tritonx only" in help_text else ""
        rows.append(f"| `{flag}`{aliases} | {_cell(what)} | {_default(param)} | {own} |")
    return "\n".join(rows) + "\n"


def refused_flags() -> str:
    """The table of the refused tritonserver flags alone, each with its reason."""
    lines = ["| Refused flag | Why |", "|---|---|"]
    lines += [
        f"| `{flag}` | {_cell(reason[0].upper() + reason[1:])}. |"
        for flag, reason in NOT_IMPLEMENTED_FLAGS.items()
    ]
    return "\n".join(lines) + "\n"
