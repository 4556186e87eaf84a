"""Typed registries that plugins fill from their ``tritonx_register_*`` hooks."""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import ClassVar, Generic, TypeVar

from tritonx.backend import GLOBAL_CONFIG_KEYS, Backend
from tritonx.cache import ResponseCache
from tritonx.errors import PluginError, invalid_arg
from tritonx.frontend import Frontend
from tritonx.metrics import MetricSink
from tritonx.repoagent import RepoAgent
from tritonx.repository import Repository, url_scheme

T = TypeVar("T")


@lru_cache(maxsize=1)
def _packages_distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def distribution_of(module: str) -> str:
    """The installed distribution that provides ``module`` (``"?"`` when unknown)."""
    top = module.split(".")[0]
    dists = _packages_distributions().get(top)
    if dists:
        return dists[0]
    return "?" if top in sys.modules else f"? ({top})"


class Registry(Generic[T]):
    """Name → class registry; a second class under a taken name is a :class:`PluginError`."""

    kind: str = "item"
    #: the class every registered class must subclass (subclasses set it; or pass ``base``)
    base: ClassVar[type] = object

    def __init__(self, base: type | None = None) -> None:
        self._base = base if base is not None else self.base
        self._items: dict[str, type[T]] = {}
        #: name -> plugin name that registered it (set by the plugin manager while it calls hooks)
        self.owners: dict[str, str] = {}
        self._current_plugin: str | None = None

    def add(self, cls: type[T]) -> type[T]:
        """Register ``cls`` under its ``name`` class attribute; returns ``cls`` (decorator use)."""
        if not isinstance(cls, type) or not issubclass(cls, self._base):
            raise PluginError(f"{cls!r} is not a subclass of {self._base.__name__}")
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise PluginError(f"{cls.__module__}.{cls.__qualname__} has no 'name'")
        self._check_free(name, cls)
        self._items[name] = cls
        if self._current_plugin is not None:
            self.owners[name] = self._current_plugin
        return cls

    def _check_free(self, name: str, cls: type) -> None:
        other = self._items.get(name)
        if other is not None and other is not cls:
            raise PluginError(
                f"duplicate {self.kind} name '{name}': registered by "
                f"{other.__module__}.{other.__qualname__} (distribution "
                f"'{distribution_of(other.__module__)}') and by {cls.__module__}.{cls.__qualname__}"
                f" (distribution '{distribution_of(cls.__module__)}')"
            )

    def get(self, name: str) -> type[T] | None:
        return self._items.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[tuple[str, type[T]]]:
        return sorted(self._items.items())


class _Aliases:
    """Other keys a registered class serves (a backend's platforms, a repository's URL
    schemes), each owned by one registered name.

    :param what: the key's kind, for errors (``platform``).
    :param owner_kind: what an owner is called in errors, with a trailing space, or ``""``.
    """

    def __init__(self, what: str, owner_kind: str = "") -> None:
        self.what, self.owner_kind = what, owner_kind
        self._owners: dict[str, str] = {}

    def claim(self, keys: Iterable[str], name: str) -> None:
        """Give ``keys`` to ``name``; a key another name owns is a :class:`PluginError`."""
        for key in keys:
            owner = self._owners.get(key)
            if owner is not None and owner != name:
                raise PluginError(
                    f"duplicate {self.what} '{key}': served by {self.owner_kind}'{owner}' "
                    f"and '{name}'"
                )
            self._owners[key] = name

    def owner(self, key: str) -> str | None:
        return self._owners.get(key)


class BackendRegistry(Registry[Backend]):
    """Backends by ``backend:`` name, and by the ``platform:`` strings they also serve."""

    kind = "backend"
    base = Backend

    def __init__(self) -> None:
        super().__init__()
        self._platforms = _Aliases("platform", "backend ")

    def add(self, cls: type[Backend]) -> type[Backend]:
        super().add(cls)
        self._platforms.claim(cls.platforms, cls.name)
        return cls

    def backend_for_platform(self, platform: str) -> str | None:
        """The backend name serving ``platform``, if a registered backend declared it."""
        return self._platforms.owner(platform)

    def check_config(self, backend_config: Mapping[str, Mapping[str, str]]) -> None:
        """Refuse ``--backend-config=<name>,<key>=...`` keys that backend ``<name>`` does not
        read (when it declares :attr:`~tritonx.backend.Backend.config_keys`), and global
        ``--backend-config=<key>=...`` keys (given to every backend) that no registered
        backend reads (when every one declares its keys).

        :raises TritonXError: INVALID_ARG naming the key and the keys that are read.
        """
        for name, section in backend_config.items():
            if not name:
                self._check_global(section)
                continue
            cls = self.get(name)
            if cls is None or cls.config_keys is None:
                continue
            known = cls.config_keys | GLOBAL_CONFIG_KEYS
            unknown = sorted(set(section) - known)
            if unknown:
                raise invalid_arg(
                    f"--backend-config={name},{unknown[0]}: backend '{name}' has no setting "
                    f"'{unknown[0]}' (its settings: {', '.join(sorted(known))})"
                )

    def _check_global(self, section: Mapping[str, str]) -> None:
        known = set(GLOBAL_CONFIG_KEYS)
        for _, cls in self.items():
            if cls.config_keys is None:  # it may read any key
                return
            known |= cls.config_keys
        unknown = sorted(set(section) - known)
        if unknown:
            raise invalid_arg(
                f"--backend-config={unknown[0]}: no installed backend has a setting "
                f"'{unknown[0]}' (the settings they read: {', '.join(sorted(known))}; "
                "a backend's own: --backend-config=<backend>,<key>=<value>)"
            )

    def platforms_of(self, name: str) -> tuple[str, ...]:
        cls = self.get(name)
        return tuple(cls.platforms) if cls else ()


class RepoAgentRegistry(Registry[RepoAgent]):
    kind = "repository agent"
    base = RepoAgent


class CacheRegistry(Registry[ResponseCache]):
    kind = "cache"
    base = ResponseCache


class MetricSinkRegistry(Registry[MetricSink]):
    kind = "metric sink"
    base = MetricSink


class FrontendRegistry(Registry[Frontend]):
    kind = "frontend"
    base = Frontend


class RepositoryRegistry(Registry[Repository]):
    """Repository implementations by name, and by the URL schemes they serve."""

    kind = "repository"
    base = Repository

    def __init__(self) -> None:
        super().__init__()
        self._schemes = _Aliases("repository scheme")

    def add(self, cls: type[Repository]) -> type[Repository]:
        super().add(cls)
        self._schemes.claim(cls.schemes, cls.name)
        return cls

    def for_url(self, url: str) -> type[Repository] | None:
        """The implementation serving ``url``'s scheme, if one is registered."""
        name = self._schemes.owner(url_scheme(url))
        return self.get(name) if name is not None else None

    def schemes_of(self, name: str) -> tuple[str, ...]:
        cls = self.get(name)
        return tuple(cls.schemes) if cls else ()


__all__ = [
    "BackendRegistry",
    "CacheRegistry",
    "FrontendRegistry",
    "MetricSinkRegistry",
    "Registry",
    "RepoAgentRegistry",
    "RepositoryRegistry",
    "distribution_of",
]
