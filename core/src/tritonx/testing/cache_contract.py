"""``ResponseCacheContract``: the test suite every response cache plugin inherits.

A cache's test module subclasses it and provides a ``cache`` fixture returning a fresh,
empty instance (closed by the fixture)::

    class TestMyCache(ResponseCacheContract):
        @pytest.fixture
        async def cache(self):
            cache = MyCache({"size": "1048576"})
            yield cache
            await cache.close()

The suite checks: a miss, then the response stored (outputs and parameters, numeric and
BYTES tensors) comes back for its key and only for it; a stored response is a copy; keys are
scoped (:data:`tritonx.cache.SCOPE_BYTES`): ``evict_model`` of one scope drops that scope's
entries when :attr:`ResponseCacheContract.drops_on_evict` (keeps them otherwise) and never
touches another scope's; evicting a scope the cache never saw is harmless.
"""

from __future__ import annotations

import hashlib
from typing import ClassVar

import numpy as np

from tritonx.cache import SCOPE_BYTES, ResponseCache
from tritonx.types import InferenceResponse


def scoped_key(scope: bytes, request: int) -> bytes:
    """A key as the server builds it: ``scope`` then a 32-byte request digest."""
    assert len(scope) == SCOPE_BYTES
    return scope + hashlib.sha256(str(request).encode()).digest()


def scope_of(name: str) -> bytes:
    """A scope (what the server derives from a model load) for tests."""
    return hashlib.sha256(name.encode()).digest()[:SCOPE_BYTES]


def response(value: int) -> InferenceResponse:
    return InferenceResponse(
        outputs={
            "OUTPUT0": np.full(4, value, np.int32),
            "OUTPUT1": np.array([str(value).encode(), b"\x00\xff"], dtype=np.object_),
        },
        parameters={"p": value},
    )


def assert_is(got: InferenceResponse | None, value: int) -> None:
    assert got is not None
    assert got.outputs["OUTPUT0"].tolist() == [value] * 4
    assert got.outputs["OUTPUT0"].dtype == np.int32
    assert got.outputs["OUTPUT1"].tolist() == [str(value).encode(), b"\x00\xff"]
    assert got.parameters.get("p") == value


class ResponseCacheContract:
    """Inherited tests for a :class:`tritonx.ResponseCache` (see the module docstring).

    :cvar drops_on_evict: whether ``evict_model`` drops the scope's entries (the default
        implementation keeps them: a cache shared by servers may).
    """

    drops_on_evict: ClassVar[bool] = True

    async def test_miss_then_hit_for_that_key_only(self, cache: ResponseCache) -> None:
        scope = scope_of("m:1")
        assert await cache.get(scoped_key(scope, 1)) is None
        await cache.put(scoped_key(scope, 1), response(1))
        assert_is(await cache.get(scoped_key(scope, 1)), 1)
        assert await cache.get(scoped_key(scope, 2)) is None
        assert await cache.get(scoped_key(scope_of("m:2"), 1)) is None

    async def test_stored_response_is_a_copy(self, cache: ResponseCache) -> None:
        key = scoped_key(scope_of("m:1"), 1)
        stored = response(1)
        await cache.put(key, stored)
        stored.outputs["OUTPUT0"][:] = 9
        assert_is(await cache.get(key), 1)

    async def test_evict_model_drops_that_scope_only(self, cache: ResponseCache) -> None:
        old, new, other = scope_of("m:1 old files"), scope_of("m:1 new files"), scope_of("n:1")
        for scope, value in ((old, 1), (new, 2), (other, 3)):
            for request in range(3):
                await cache.put(scoped_key(scope, request), response(value))
        await cache.evict_model("m", 1, old)
        for request in range(3):
            got = await cache.get(scoped_key(old, request))
            if self.drops_on_evict:
                assert got is None
            else:
                assert_is(got, 1)
            assert_is(await cache.get(scoped_key(new, request)), 2)
            assert_is(await cache.get(scoped_key(other, request)), 3)

    async def test_evict_unknown_scope_is_harmless(self, cache: ResponseCache) -> None:
        key = scoped_key(scope_of("m:1"), 1)
        await cache.put(key, response(1))
        await cache.evict_model("never", 7, scope_of("never:7"))
        await cache.evict_model("never", 7, scope_of("never:7"))
        assert_is(await cache.get(key), 1)
