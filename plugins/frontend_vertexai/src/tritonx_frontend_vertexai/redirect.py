"""The ``X-Vertex-Ai-Triton-Redirect`` header: which KServe v2 endpoint a request to the
predict route is sent to instead of the default model's ``infer``.

Vertex AI only forwards ``POST`` requests to one predict route; Triton lets a client name
another endpoint in this header (without the leading ``/``: ``v2/models/m/infer``,
``v2/repository/index``, ``metrics``) and routes it as its HTTP port would, with the method
the endpoint expects. Only what Triton routes is reachable (read-only endpoints, inference,
the repository index): model load and unload and shared-memory registration are refused with
403, anything else with 400.

The header's value comes from the client, so it is checked before it is routed
(:func:`check_redirect`): bounded in length, printable ASCII, and free of anything a URL
parser could read differently from Triton's plain pattern match (``%`` escapes, ``?``,
``#``, ``\\``, empty or dot segments, a leading ``/``). The v2 path handed on is rebuilt from
the matched parts, never taken from the header as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

#: The header naming the endpoint (tritonserver's ``VertexAiAPIServer::redirect_header_``).
REDIRECT_HEADER = "X-Vertex-Ai-Triton-Redirect"

#: The longest header value routed; a longer one is refused with 400.
MAX_REDIRECT_LENGTH = 1024

#: Characters a value may not contain (besides spaces and control characters): they would
#: mean something else once the value is part of a URL.
_UNSAFE = frozenset("%?#\\")

# The patterns of tritonserver's HTTP server (http_server.cc), matched against "/" + value.
_MODEL = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
    r"(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?"
)
_HEALTH = re.compile(r"/v2/health/(live|ready)")
_SHARED_MEMORY = re.compile(
    r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)"
)
_REPOSITORY = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")

#: The model route's actions Triton serves through the redirect: (method, restricted-API
#: category) of each (``""``: the model's metadata).
_MODEL_ACTIONS: dict[str, tuple[str, str]] = {
    "": ("GET", "metadata"),
    "ready": ("GET", "health"),
    "infer": ("POST", "inference"),
    "config": ("GET", "model-config"),
    "stats": ("GET", "statistics"),
}


class RedirectRefused(ValueError):
    """A header value that is not routed at all (too long, or a character or segment that a
    URL parser would read differently); answered 400 with this message."""


@dataclass(frozen=True)
class Redirect:
    """Where a redirected request goes.

    :ivar action: ``kserve``: serve :attr:`path` with :attr:`method` through the server's
        KServe v2 endpoints; ``metrics``: the Prometheus metrics; ``forbidden``: 403 (an
        endpoint Triton refuses through the redirect); ``unknown``: 400 (no such endpoint).
    :ivar path: the v2 path (``/v2/...``), its parts percent-encoded.
    :ivar method: the method the endpoint expects.
    :ivar category: the ``--http-restricted-api`` category that guards it (None: none).
    """

    action: Literal["kserve", "metrics", "forbidden", "unknown"]
    path: str = ""
    method: str = "GET"
    category: str | None = None


def check_redirect(value: str) -> str:
    """Return ``value`` when it may be routed; raise :class:`RedirectRefused` otherwise.

    Refused: longer than :data:`MAX_REDIRECT_LENGTH`; empty; a character that is not
    printable ASCII or is one of ``% ? # \\`` (no escapes, queries or fragments: Triton
    matches the value as it is); a leading ``/`` or an empty segment (``//``, so no
    ``//host`` and no ``scheme://``); a ``.`` or ``..`` segment.
    """
    if len(value) > MAX_REDIRECT_LENGTH:
        raise RedirectRefused(
            f"{REDIRECT_HEADER} is {len(value)} characters long; at most "
            f"{MAX_REDIRECT_LENGTH} are accepted"
        )
    if not value:
        raise RedirectRefused(f"{REDIRECT_HEADER} is empty")
    for char in value:
        if not "!" <= char <= "~" or char in _UNSAFE:
            raise RedirectRefused(
                f"{REDIRECT_HEADER} may hold only printable ASCII characters other than "
                f"'%', '?', '#' and '\\' (a v2 endpoint such as v2/models/<model>/infer), "
                f"got {value!r}"
            )
    for segment in value.split("/"):
        if segment in ("", ".", ".."):
            raise RedirectRefused(
                f"{REDIRECT_HEADER} must be a v2 endpoint without a leading '/', empty, "
                f"'.' or '..' segments (such as v2/models/<model>/infer), got {value!r}"
            )
    return value


def route_redirect(value: str) -> Redirect:
    """Route a header value (checked with :func:`check_redirect` first) as Triton's
    ``VertexAiAPIServer::Handle`` does.

    :raises RedirectRefused: a value that is not routed at all.
    """
    endpoint = "/" + check_redirect(value)
    if endpoint == "/metrics":
        return Redirect("metrics")
    if endpoint == "/v2/models/stats":
        return Redirect("kserve", "/v2/models/stats", "GET", "statistics")
    match = _MODEL.fullmatch(endpoint)
    if match is not None:
        model, version, action = match.group(1), match.group(2), match.group(3) or ""
        served = _MODEL_ACTIONS.get(action)
        if served is not None:
            path = f"/v2/models/{_part(model)}"
            if version is not None:
                path += f"/versions/{version}"
            if action:
                path += f"/{action}"
            return Redirect("kserve", path, *served)
        # generate, generate_stream and trace/setting are not routed (400, as in Triton)
    if endpoint == "/v2":
        return Redirect("kserve", "/v2", "GET", "metadata")
    match = _HEALTH.fullmatch(endpoint)
    if match is not None:
        return Redirect("kserve", f"/v2/health/{match.group(1)}", "GET", "health")
    match = _SHARED_MEMORY.fullmatch(endpoint)
    if match is not None:
        kind, region, action = match.groups()
        if action != "status":  # register / unregister: only the HTTP port changes regions
            return Redirect("forbidden")
        path = f"/v2/{kind}sharedmemory"
        if region is not None:
            path += f"/region/{_part(region)}"
        return Redirect("kserve", path + "/status", "GET", "shared-memory")
    match = _REPOSITORY.fullmatch(endpoint)
    if match is not None:
        repository, action = match.group(1), match.group(2)
        if action != "index":  # load / unload: only the HTTP port changes the models
            return Redirect("forbidden")
        path = "/v2/repository"
        if repository is not None:
            path += f"/{_part(repository)}"
        return Redirect("kserve", path + "/index", "POST", "model-repository")
    return Redirect("unknown")


def _part(text: str) -> str:
    """One path segment, percent-encoded (the server's routes decode it back)."""
    return quote(text, safe="")


__all__ = [
    "MAX_REDIRECT_LENGTH",
    "REDIRECT_HEADER",
    "Redirect",
    "RedirectRefused",
    "check_redirect",
    "route_redirect",
]
