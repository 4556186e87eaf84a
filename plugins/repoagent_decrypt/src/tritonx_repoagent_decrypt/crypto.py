"""The encrypted model folder format: AES-GCM, one ``.enc`` file per model file.

An encrypted folder keeps ``config.pbtxt`` (and ``configs/*.pbtxt``) in plain text: Triton
reads the agent list from the config before any agent runs. Every other file ``<rel>``
becomes ``<rel>.enc``::

    MAGIC (9 bytes) | nonce (12 bytes) | ciphertext (as long as the file) | tag (16 bytes)

The associated data is ``<rel>`` (UTF-8, ``/``-separated), so a file renamed or moved within
the folder fails authentication. Files are streamed in chunks, never read whole.

A key is 16, 24 or 32 bytes (AES-128/192/256) written as hex or base64 text.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import shutil
from pathlib import Path, PurePosixPath

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

MAGIC = b"TRXAESGCM"
NONCE_SIZE = 12
TAG_SIZE = 16
SUFFIX = ".enc"
CHUNK = 1 << 20
KEY_SIZES = (16, 24, 32)


class CryptoError(Exception):
    """A key, file or folder that cannot be used; the message names it."""


def parse_key(text: str | bytes) -> bytes:
    """A key from its hex or base64 text (surrounding whitespace ignored)."""
    raw = text.decode("ascii", "replace") if isinstance(text, bytes) else text
    raw = raw.strip()
    if not raw:
        raise CryptoError("the key is empty")
    if len(raw) in (2 * n for n in KEY_SIZES):
        try:
            return bytes.fromhex(raw)
        except ValueError:
            pass
    try:
        key = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) not in KEY_SIZES:
        raise CryptoError(
            "the key must be 16, 24 or 32 bytes written as hex (32, 48 or 64 hex digits) or base64"
        )
    return key


def new_key_text() -> str:
    """A new random AES-256 key as 64 hex digits."""
    return secrets.token_hex(32)


def is_plain_config(rel: PurePosixPath) -> bool:
    """Whether ``rel`` (relative to the model folder) stays plain: the model's config."""
    parts = rel.parts
    return parts == ("config.pbtxt",) or (
        len(parts) == 2 and parts[0] == "configs" and rel.suffix == ".pbtxt"
    )


def encrypt_file(src: Path, dst: Path, key: bytes, rel: str) -> None:
    """Write ``src`` encrypted to ``dst``; ``rel`` is its path in the model folder."""
    nonce = secrets.token_bytes(NONCE_SIZE)
    enc = Cipher(algorithms.AES(key), modes.GCM(nonce)).encryptor()
    enc.authenticate_additional_data(rel.encode())
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fout.write(MAGIC + nonce)
        while chunk := fin.read(CHUNK):
            fout.write(enc.update(chunk))
        fout.write(enc.finalize())
        fout.write(enc.tag)


def decrypt_file(src: Path, dst: Path, key: bytes, rel: str) -> None:
    """Write ``src`` (an ``.enc`` file) decrypted to ``dst``; ``rel`` is the plaintext's path
    in the model folder. A wrong key or a modified file raises :class:`CryptoError` (and
    ``dst`` is removed)."""
    size = src.stat().st_size
    header = len(MAGIC) + NONCE_SIZE
    name = f"{rel}{SUFFIX}"
    if size < header + TAG_SIZE:
        raise CryptoError(f"'{name}' is not a tritonx encrypted file (too short)")
    with open(src, "rb") as fin:
        if fin.read(len(MAGIC)) != MAGIC:
            raise CryptoError(f"'{name}' is not a tritonx encrypted file (bad header)")
        nonce = fin.read(NONCE_SIZE)
        fin.seek(size - TAG_SIZE)
        tag = fin.read(TAG_SIZE)
        fin.seek(header)
        dec = Cipher(algorithms.AES(key), modes.GCM(nonce, tag)).decryptor()
        dec.authenticate_additional_data(rel.encode())
        remaining = size - header - TAG_SIZE
        try:
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fout:
                while remaining > 0:
                    chunk = fin.read(min(CHUNK, remaining))
                    if not chunk:
                        raise CryptoError(f"'{name}' is truncated")
                    remaining -= len(chunk)
                    fout.write(dec.update(chunk))
                fout.write(dec.finalize())
        except InvalidTag:
            dst.unlink(missing_ok=True)
            raise CryptoError(
                f"failed to decrypt '{name}': wrong key or the file was modified "
                "(AES-GCM authentication failed)"
            ) from None
        except BaseException:
            dst.unlink(missing_ok=True)
            raise


def _walk(folder: Path) -> list[PurePosixPath]:
    """Every entry below ``folder`` (relative, sorted); symlinks are refused."""
    found: list[PurePosixPath] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        for entry in sorted(dirnames) + sorted(filenames):
            path = Path(dirpath) / entry
            rel = PurePosixPath(path.relative_to(folder).as_posix())
            if path.is_symlink():
                raise CryptoError(f"'{rel}' is a symbolic link; encrypted folders have none")
            found.append(rel)
        dirnames.sort()
    return sorted(found)


def encrypt_model(src: Path, dst: Path, key: bytes) -> list[PurePosixPath]:
    """Encrypt the model folder ``src`` into the new folder ``dst``; returns what was
    encrypted (paths of the plaintext files)."""
    if not src.is_dir():
        raise CryptoError(f"'{src}' is not a model folder")
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise CryptoError(f"'{dst}' already exists and is not an empty folder")
    entries = _walk(src)
    dst.mkdir(parents=True, exist_ok=True)
    encrypted: list[PurePosixPath] = []
    for rel in entries:
        source = src / rel
        if source.is_dir():
            (dst / rel).mkdir(exist_ok=True)
        elif is_plain_config(rel):
            shutil.copyfile(source, dst / rel)
        else:
            encrypt_file(source, dst / f"{rel}{SUFFIX}", key, str(rel))
            encrypted.append(rel)
    return encrypted


def decrypt_model(src: Path, dst: Path, key: bytes) -> list[PurePosixPath]:
    """Decrypt the encrypted folder ``src`` into the existing private folder ``dst``;
    returns the plaintext files written (relative paths)."""
    written: list[PurePosixPath] = []
    for rel in _walk(src):
        source = src / rel
        if source.is_dir():
            (dst / rel).mkdir(mode=0o700, exist_ok=True)
        elif is_plain_config(rel):
            shutil.copyfile(source, dst / rel)
        elif rel.name.endswith(SUFFIX) and len(rel.name) > len(SUFFIX):
            plain = rel.with_name(rel.name[: -len(SUFFIX)])
            decrypt_file(source, dst / plain, key, str(plain))
            written.append(plain)
        else:
            raise CryptoError(
                f"'{rel}' is not encrypted (no '{SUFFIX}' suffix): every file of an encrypted "
                "model folder but its config is (tritonx encrypt-model)"
            )
    return written
