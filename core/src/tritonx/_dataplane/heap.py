"""Giving the C heap's free memory back to the system (glibc's ``malloc_trim``).

``tritonx serve`` raises glibc's trim threshold (``cli._tune_malloc``) so that the buffers of
steady traffic stay mapped; after a burst of large, short-lived allocations that the server
will not need again (a refused large gRPC message, written TENSORS traces) the freed memory
would then stay resident. :func:`trim_heap` hands it back, in a worker thread, one trim at a
time, for every part of the server that knows such a moment.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import sys
from collections.abc import Callable

log = logging.getLogger("tritonx.heap")


def _libc(function: str) -> Callable[..., int] | None:
    """glibc's ``function`` (None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), function, None) if name else None
    except OSError:
        return None


_malloc_trim = _libc("malloc_trim")
_mallopt = _libc("mallopt")
_pending = False
#: trims under way (a task must be referenced until it ends)
_trims: set[asyncio.Task[None]] = set()


def trim_heap(delay: float = 0.0) -> None:
    """Trim the heap in a worker thread, ``delay`` seconds from now (at most one trim pending
    or running; nothing without glibc or outside a running event loop)."""
    global _pending
    if _malloc_trim is None or _pending:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    _pending = True
    trim = _malloc_trim

    async def run() -> None:
        global _pending
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            await asyncio.to_thread(trim, 0)
        except Exception:  # pragma: no cover - never fatal
            log.debug("malloc_trim failed", exc_info=True)
        finally:
            _pending = False

    _trims.add(task := loop.create_task(run()))
    task.add_done_callback(_trims.discard)


async def trim_heap_now() -> None:
    """Trim the heap in a worker thread and wait for it (nothing without glibc): the caller
    measures the resident memory next (:mod:`tritonx._core.residency`)."""
    trim = _malloc_trim
    if trim is None:
        return
    try:
        await asyncio.to_thread(trim, 0)
    except Exception:  # pragma: no cover - never fatal
        log.debug("malloc_trim failed", exc_info=True)


def unmap_large_blocks(threshold: int = 1 << 20) -> bool:
    """Make glibc map every block of ``threshold`` bytes or more on its own, and unmap it
    when freed (``M_MMAP_THRESHOLD``, which also stops glibc raising the threshold after a
    large free): the memory of a large buffer goes back to the system as soon as it is
    freed, whichever thread freed it. What a memory budget needs (an unloaded model's
    weights must leave the resident set); it costs page faults on large allocations.
    Returns False without glibc."""
    if _mallopt is None:
        return False
    m_mmap_threshold = -3
    return bool(_mallopt(m_mmap_threshold, threshold))
