"""Who may call which API: OpenAI's API keys (``Authorization: Bearer <key>``) and Triton's
``--openai-restricted-api`` header restrictions, by API group (``inference``,
``model-repository``).

A request belongs to a group by its path alone, whatever its method: ``HEAD`` (which aiohttp
answers on every ``GET`` route), ``OPTIONS`` and methods a route does not serve are checked
like the route's own, so a request without a key learns nothing (not even whether a model
exists) from a protected path."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from tritonx_frontend_openai.errors import OpenAIError
from tritonx_frontend_openai.options import API_GROUPS, Options

#: OpenAI's message when no key was sent
NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization "
    "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
)
#: OpenAI's message for a key it does not know (the key itself is not repeated)
BAD_KEY = "Incorrect API key provided."


class Auth:
    """The checks of one frontend.

    :param options: the frontend's settings (keys, protected groups, restrictions).
    :param base_path: the path the API is served under (``/v1``).
    """

    def __init__(self, options: Options, base_path: str) -> None:
        self.keys = tuple(k.encode() for k in options.api_keys)
        self.key_groups = options.auth_apis if self.keys else frozenset()
        self.restricted: Mapping[str, tuple[str, str]] = options.restricted
        self.endpoints = [
            (group, base_path + path) for group, paths in API_GROUPS.items() for path in paths
        ]

    @property
    def active(self) -> bool:
        """Whether any request is checked."""
        return bool(self.key_groups or self.restricted)

    def group(self, path: str) -> str | None:
        """The API group of a request to ``path`` (its prefix, as Triton matches them; any
        method), or None (no API: not checked)."""
        for group, prefix in self.endpoints:
            if path.startswith(prefix):
                return group
        return None

    def check(self, path: str, headers: Mapping[str, str]) -> None:
        """Raise OpenAI's 401 unless a request to ``path`` (any method) may call its API."""
        group = self.group(path)
        if group is None:
            return
        restriction = self.restricted.get(group)
        if restriction is not None:
            name, value = restriction
            sent = headers.get(name)
            if sent is None or not hmac.compare_digest(sent.encode(), value.encode()):
                raise OpenAIError(
                    401,
                    f"This API is restricted, expecting header '{name}' with valid value",
                    type="authentication_error",
                    code="invalid_auth",
                )
        if group in self.key_groups:
            self._check_key(headers.get("authorization"))

    def _check_key(self, authorization: str | None) -> None:
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise OpenAIError(401, NO_KEY, code=None)
        sent = token.encode()
        matched = False
        for key in self.keys:  # every key compared: the time does not tell which matched
            matched |= hmac.compare_digest(sent, key)
        if not matched:
            raise OpenAIError(401, BAD_KEY, code="invalid_api_key")


__all__ = ["BAD_KEY", "NO_KEY", "Auth"]
