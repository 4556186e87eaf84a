"""``tritonx._dataplane.shared_memory`` without a server: leases, deferred unregister, and a view that
outlives its region's unregister (it keeps the mapping; nothing reads freed memory)."""

from __future__ import annotations

import gc
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm

from tritonx._dataplane.shared_memory import MemoryKind, SharedMemoryManager, SharedMemoryUse
from tritonx.errors import Code, TritonXError


@pytest.fixture
def region() -> Iterator[tuple[str, Any]]:
    key = f"/tritonx-unit-{uuid.uuid4().hex[:10]}"
    handle = shm.create_shared_memory_region("u", key, 64)
    shm.set_shared_memory_region(handle, [np.arange(16, dtype=np.int32)])
    try:
        yield key, handle
    finally:
        shm.destroy_shared_memory_region(handle)


def test_unregister_waits_for_the_last_lease(region: tuple[str, Any]) -> None:
    key, _ = region
    manager = SharedMemoryManager(allow_client_shm=True)
    manager.register_system("r", key, 0, 64)
    first, second = SharedMemoryUse(manager), SharedMemoryUse(manager)
    first.input("r", 0, 64)
    manager.unregister(MemoryKind.SYSTEM, "r")
    assert [s.name for s in manager.status(MemoryKind.SYSTEM)] == ["r"]  # still in use
    second.output("OUT", "r", 0, 64)  # and still usable, as in tritonserver
    first.release()
    first.release()  # idempotent
    assert [s.name for s in manager.status(MemoryKind.SYSTEM)] == ["r"]
    second.release()
    assert manager.status(MemoryKind.SYSTEM) == []
    with pytest.raises(TritonXError) as info:
        manager.lease("r", 0, 4)
    assert info.value.code is Code.NOT_FOUND


def test_a_view_kept_past_unregister_keeps_the_mapping(region: tuple[str, Any]) -> None:
    """A model that keeps an input array after its request: the region unregisters, the
    array still reads the mapping (unmapped only once the array is gone)."""
    key, handle = region
    manager = SharedMemoryManager(allow_client_shm=True)
    manager.register_system("r", key, 0, 64)
    use = SharedMemoryUse(manager)
    kept = np.frombuffer(use.input("r", 0, 64), np.int32)
    assert not kept.flags.writeable
    use.release()
    manager.unregister(MemoryKind.SYSTEM, "r")
    assert manager.status(MemoryKind.SYSTEM) == []
    shm.set_shared_memory_region(handle, [np.full(16, 5, np.int32)])
    assert kept.tolist() == [5] * 16  # the same memory, still mapped
    del kept
    gc.collect()


def test_output_writes_and_size_check(region: tuple[str, Any]) -> None:
    key, handle = region
    manager = SharedMemoryManager(allow_client_shm=True)
    manager.register_system("r", key, 0, 64)
    use = SharedMemoryUse(manager)
    use.output("OUT", "r", 32, 32)
    use.write_output("OUT", np.arange(8, dtype=">i4"))  # big-endian in, little-endian out
    assert shm.get_contents_as_numpy(handle, np.int32, [8], offset=32).tolist() == list(range(8))
    with pytest.raises(TritonXError) as info:
        use.write_output("OUT", np.zeros(9, np.int32))
    assert info.value.code is Code.INTERNAL
    assert "(32 bytes) should be at least 36 bytes" in info.value.message
    use.release()
    manager.close()
    assert manager.status(MemoryKind.SYSTEM) == []


def test_without_a_registry_every_region_is_unknown() -> None:
    with pytest.raises(TritonXError) as info:
        SharedMemoryUse(None).input("r", 0, 4)
    assert (info.value.code, info.value.message) == (
        Code.NOT_FOUND,
        "Unable to find shared memory region: 'r'",
    )
