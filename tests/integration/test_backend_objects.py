"""One backend object per backend name, however many of its models load at once: models are
completed in worker threads side by side, and each asks for its backend."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

import tritonx
from tritonx import Server
from tritonx.testing import ModelRepositoryBuilder, loopback_settings
from tritonx.testing.identity import IdentityBackend


class CountedBackend(IdentityBackend):
    """The identity backend under another name, counting its objects. Its constructor
    waits (up to a second) for a second one to start: two models that each created one would
    overlap here for sure."""

    name = "counted"
    created: ClassVar[list[CountedBackend]] = []
    changed: ClassVar[threading.Condition] = threading.Condition()

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        with CountedBackend.changed:
            CountedBackend.created.append(self)
            CountedBackend.changed.notify_all()
            # another constructor, if there is one (the 1 s passes only when there is none)
            CountedBackend.changed.wait_for(lambda: len(CountedBackend.created) > 1, 1.0)


class CountedPlugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(CountedBackend)


async def test_models_loading_together_share_one_backend_object(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: Any,
    register_plugin: Callable[[object], None],
) -> None:
    register_plugin(CountedPlugin())
    CountedBackend.created.clear()
    names = [f"m{i}" for i in range(8)]
    for name in names:
        model_repository.add(
            name,
            backend="counted",
            inputs=[("INPUT0", "FP32", [1])],
            outputs=[("OUTPUT0", "FP32", [1])],
        )
    async with Server(loopback_settings(model_repository.root), plugin_manager=plugin_manager) as s:
        assert all(s.model_ready(name) for name in names)
    assert len(CountedBackend.created) == 1
