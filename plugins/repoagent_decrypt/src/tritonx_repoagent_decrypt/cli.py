"""``tritonx encrypt-model SRC DST --key-file K``: make an encrypted model folder."""

from __future__ import annotations

import os
from pathlib import Path

import click
from google.protobuf import text_format

from tritonx.proto import model_config_pb2
from tritonx_repoagent_decrypt.crypto import CryptoError, encrypt_model, new_key_text, parse_key


def _add_agent(config_path: Path, key_file: Path, key_env: str | None) -> bool:
    """Append a ``decrypt`` agent to the config unless it names one; True if it did."""
    config = model_config_pb2.ModelConfig()
    if config_path.exists():
        text_format.Parse(config_path.read_text(), config)
    if any(a.name == "decrypt" for a in config.model_repository_agents.agents):
        return False
    agent = config.model_repository_agents.agents.add(name="decrypt")
    if key_env:
        agent.parameters["key_env"] = key_env
    else:
        agent.parameters["key_file"] = str(key_file)
    config_path.write_text(text_format.MessageToString(config))
    return True


@click.command("encrypt-model")
@click.argument("src", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("dst", type=click.Path(path_type=Path))
@click.option(
    "--key-file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The key: 16, 24 or 32 bytes as hex or base64 text.",
)
@click.option(
    "--generate-key",
    is_flag=True,
    default=False,
    help="Write a new random AES-256 key to --key-file (which must not exist, mode 0600).",
)
@click.option(
    "--key-env",
    default=None,
    metavar="NAME",
    help="Name the key by this environment variable (key_env) in DST's config instead of "
    "by --key-file's path (key_file).",
)
def encrypt_model_command(
    src: Path, dst: Path, key_file: Path, generate_key: bool, key_env: str | None
) -> None:
    """Encrypt the model folder SRC into the new folder DST for the 'decrypt' agent.

    Every file but config.pbtxt (and configs/*.pbtxt) becomes <file>.enc (AES-GCM); the
    config stays readable, as the agent list must be, and gets a 'decrypt' agent entry if it
    has none (written with key_file, or key_env with --key-env).
    """
    key_file = key_file.expanduser().absolute()
    if generate_key:
        try:
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise click.ClickException(
                f"--generate-key: '{key_file}' already exists; not overwriting a key"
            ) from None
        with os.fdopen(fd, "w") as f:
            f.write(new_key_text() + "\n")
    try:
        key = parse_key(key_file.read_bytes())
        encrypted = encrypt_model(src, dst, key)
    except OSError as exc:
        raise click.ClickException(f"{exc.filename}: {exc.strerror}") from exc
    except CryptoError as exc:
        raise click.ClickException(str(exc)) from exc
    added = _add_agent(dst / "config.pbtxt", key_file, key_env)
    click.echo(f"encrypted {len(encrypted)} files of '{src}' into '{dst}'")
    if added:
        click.echo(f"added a 'decrypt' agent to '{dst / 'config.pbtxt'}'")
