"""Restricted API categories and TLS material, shared by the HTTP and gRPC frontends.

Restricted APIs follow tritonserver (server ``src/restricted_features.h``,
``src/command_line_parser.cc`` ``ParseRestrictedFeatureOption``): every endpoint belongs to
one category; a category may be tied to one ``<key>=<value>`` header and a request to it
without that header (value compared exactly) is refused. TLS files are PEM, read once at
start-up; unlike tritonserver (which silently uses an empty certificate for a file it cannot
read) a missing or unreadable file stops the start-up with a message naming the flag.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonx.errors import invalid_arg

#: tritonserver's ``RESTRICTED_CATEGORY_NAMES``, in its order.
RESTRICTED_CATEGORIES: tuple[str, ...] = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)

#: tritonserver's ``kRestrictedProtocolHeaderTemplate``: the gRPC metadata key of a
#: restriction is this prefix followed by the configured key.
GRPC_RESTRICTED_HEADER_PREFIX = "triton-grpc-protocol-"

#: category → (header key, expected value)
Restrictions = Mapping[str, tuple[str, str]]


def parse_restricted_option(values: Sequence[str], option: str, feature_type: str) -> Restrictions:
    """Parse repeated ``--<option>=<category>[,<category>...]:<key>=<value>`` values.

    ``feature_type`` is ``"api"`` (HTTP) or ``"protocol"`` (gRPC), as in tritonserver's
    messages. The key is what the user gave (the gRPC prefix is added by the frontend).

    :raises ValueError: with tritonserver's message for a malformed value, an unknown
        category or a category given in two groups.
    """
    out: dict[str, tuple[str, str]] = {}
    for arg in values:
        # ParseGenericConfigOption(arg, ":", "="): the first ':' ends the categories, the
        # first '=' after it ends the key; none of the three parts may be empty.
        colon = arg.find(":")
        equals = arg.find("=", colon + 1) if colon >= 0 else -1
        names, key, value = arg[:colon], arg[colon + 1 : equals], arg[equals + 1 :]
        if colon < 0 or equals < 0 or not names or not key or not value:
            raise ValueError(
                f"--{option} option format is '<config name>:<setting>=<value>'. Got {arg}"
            )
        for feature in names.split(","):
            if feature not in RESTRICTED_CATEGORIES:
                raise ValueError(f"unknown restricted {feature_type} '{feature}' ")
            if feature in out:
                raise ValueError(
                    f"restricted {feature_type} '{feature}' can not be specified in multiple "
                    "config groups"
                )
            out[feature] = (key, value)
    return out


def check_restrictions(restrictions: Restrictions, setting: str) -> None:
    """Validate a ``ServerSettings`` restriction mapping (the in-process API's form).

    :raises TritonXError: INVALID_ARG for an unknown category or an empty key/value.
    """
    for category, rule in restrictions.items():
        if category not in RESTRICTED_CATEGORIES:
            raise invalid_arg(
                f"{setting}: unknown restricted category '{category}' (allowed: "
                f"{', '.join(RESTRICTED_CATEGORIES)})"
            )
        if (
            not isinstance(rule, (tuple, list))
            or len(rule) != 2
            or not all(isinstance(part, str) and part for part in rule)
        ):
            raise invalid_arg(
                f"{setting}: the restriction of '{category}' must be a (key, value) pair of "
                "non-empty strings"
            )


def open_repository_api_warnings(settings: Any) -> list[str]:
    """Warnings for a model-repository API that any client can reach from another host.

    In explicit mode a load request may carry the model's files, a Python ``model.py``
    included, so a client that reaches it runs code as the server's user. That is Triton's
    default and stays allowed; this names each listener (HTTP, gRPC) that serves the API
    unrestricted on an address other than loopback, for the server to log at start.
    """
    if settings.model_control_mode != "explicit":
        return []
    warnings = []
    for enabled, frontend, address, restrictions, flag in (
        (
            settings.allow_http,
            "HTTP",
            settings.http_address,
            settings.http_restricted_api,
            "--http-restricted-api",
        ),
        (
            settings.allow_grpc,
            "gRPC",
            settings.grpc_address,
            settings.grpc_restricted_protocol,
            "--grpc-restricted-protocol",
        ),
    ):
        if enabled and "model-repository" not in restrictions and not _is_loopback(address):
            warnings.append(
                f"the model repository API is unrestricted on {frontend} {address}: any client "
                "that reaches it can load a model with files of its own (a Python model.py "
                f"runs as this server's user). Restrict it with {flag}="
                "model-repository:<key>=<value>, or listen on loopback only "
                "(docs: guides/security.md)"
            )
    return warnings


def _is_loopback(address: str) -> bool:
    """Whether a listen address accepts loopback connections only (a name: localhost only)."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


# ---------------------------------------------------------------------------------- TLS


@dataclass(frozen=True)
class TlsFiles:
    """One listener's TLS settings, read and checked: the PEM bytes (``root`` empty when not
    given) and a server ``ssl.SSLContext`` built from them (client certificates required and
    verified against the root when ``mutual``)."""

    cert: bytes
    key: bytes
    root: bytes
    mutual: bool
    context: ssl.SSLContext


def _read(path: str, flag: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise invalid_arg(f"{flag}: cannot read '{path}': {exc.strerror or exc}") from None
    if not data.strip():
        raise invalid_arg(f"{flag}: '{path}' is empty")
    return data


def _no_password() -> bytes:
    return b""  # an encrypted key fails to load instead of prompting on the terminal


def load_tls_files(
    prefix: str, *, use_ssl: bool, mutual: bool, server_cert: str, server_key: str, root_cert: str
) -> TlsFiles | None:
    """Read and check the PEM files of ``--<prefix>-use-ssl[-mutual]``; None when TLS is off.

    Mutual TLS implies TLS (tritonserver: it "preempts --grpc-use-ssl") and needs the root
    certificate client certificates are verified against. The certificate and key must be
    PEM and match (an encrypted key is refused), the root must hold PEM certificates.

    :raises TritonXError: INVALID_ARG naming the flag at fault.
    """
    if not (use_ssl or mutual):
        return None
    switch = f"--{prefix}-use-ssl-mutual" if mutual else f"--{prefix}-use-ssl"
    required = [(f"--{prefix}-server-cert", server_cert), (f"--{prefix}-server-key", server_key)]
    if mutual:
        required.append((f"--{prefix}-root-cert", root_cert))
    missing = [flag for flag, value in required if not value]
    if missing:
        raise invalid_arg(f"{switch} requires {' and '.join(missing)}")
    cert = _read(server_cert, f"--{prefix}-server-cert")
    key = _read(server_key, f"--{prefix}-server-key")
    root = _read(root_cert, f"--{prefix}-root-cert") if root_cert else b""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(server_cert, server_key, password=_no_password)
    except (ssl.SSLError, ValueError) as exc:
        raise invalid_arg(
            f"--{prefix}-server-cert / --{prefix}-server-key: '{server_cert}' and "
            f"'{server_key}' are not a matching PEM certificate and unencrypted private key "
            f"({exc})"
        ) from None
    if root:
        try:
            context.load_verify_locations(cadata=root.decode("ascii", "replace"))
        except (ssl.SSLError, ValueError) as exc:
            raise invalid_arg(
                f"--{prefix}-root-cert: '{root_cert}' holds no PEM certificate ({exc})"
            ) from None
    context.verify_mode = ssl.CERT_REQUIRED if mutual else ssl.CERT_NONE
    return TlsFiles(cert=cert, key=key, root=root, mutual=mutual, context=context)


def listener_tls_files(settings: Any, prefix: str) -> TlsFiles | None:
    """:func:`load_tls_files` of listener ``prefix`` (``http`` or ``grpc``): its
    ``<prefix>_use_ssl[_mutual]`` and PEM file settings."""
    return load_tls_files(
        prefix,
        use_ssl=getattr(settings, f"{prefix}_use_ssl"),
        mutual=getattr(settings, f"{prefix}_use_ssl_mutual"),
        server_cert=getattr(settings, f"{prefix}_server_cert"),
        server_key=getattr(settings, f"{prefix}_server_key"),
        root_cert=getattr(settings, f"{prefix}_root_cert"),
    )
