"""Registries: a platform or URL scheme two registered classes claim aborts start-up with an
error naming both; one class may claim its own keys again."""

from __future__ import annotations

from pathlib import Path

import pytest

import tritonx
from tritonx.errors import PluginError
from tritonx.registry import BackendRegistry, CacheRegistry, RepositoryRegistry


def backend(name: str, *platforms: str) -> type[tritonx.Backend]:
    return type(name, (tritonx.Backend,), {"name": name, "platforms": platforms})


def repository(name: str, *schemes: str) -> type[tritonx.Repository]:
    def localize(self: tritonx.Repository, model: str) -> Path:
        raise AssertionError

    methods = {"list_models": list, "stamp": id, "localize": localize}
    return type(name, (tritonx.Repository,), {"name": name, "schemes": schemes, **methods})


def test_backend_platforms() -> None:
    registry = BackendRegistry()
    acme = registry.add(backend("acme", "acme_plan", "acme_v2"))
    registry.add(acme)  # the same class again
    assert registry.backend_for_platform("acme_v2") == "acme"
    assert registry.backend_for_platform("other") is None
    with pytest.raises(
        PluginError, match=r"^duplicate platform 'acme_plan': served by backend 'acme' and 'zed'$"
    ):
        registry.add(backend("zed", "acme_plan"))


def test_repository_schemes() -> None:
    registry = RepositoryRegistry()
    registry.add(repository("mem", "mem", "memory"))
    assert registry.for_url("memory://bank") is registry.get("mem")
    assert registry.for_url("s3://bucket") is None
    with pytest.raises(
        PluginError, match=r"^duplicate repository scheme 'mem': served by 'mem' and 'other'$"
    ):
        registry.add(repository("other", "mem"))


def test_a_class_of_another_kind_is_refused() -> None:
    with pytest.raises(PluginError, match="is not a subclass of ResponseCache"):
        CacheRegistry().add(backend("acme"))  # type: ignore[arg-type]
