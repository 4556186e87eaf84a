"""Client shared memory (Triton's system and CUDA shared-memory extensions).

One :class:`SharedMemoryManager` per server (owned by the data plane, used by both
transports) keeps the regions clients registered, as tritonserver's ``SharedMemoryManager``
(server ``src/shared_memory_manager.cc``) does, with its messages and error codes:

* a **system** region is a POSIX shared-memory object (``shm_open(key)``, what
  ``tritonclient.utils.shared_memory`` creates) mapped from ``offset`` for ``byte_size``
  bytes; the descriptor is closed right after the mapping. Only a regular file qualifies
  (``shm_open`` follows no symbolic link; a FIFO or a device node there is refused), and
  keys with Triton's reserved prefix are refused. The server's own shared memory (the Python
  backend's segments between the server and its worker processes) is nameless (``memfd``):
  no key reaches it;
* a **CUDA** region is a ``cudaIpcMemHandle_t`` opened with ``cudaIpcOpenMemHandle`` on its
  device, through the ``cuda-python`` package (imported only when a client registers one).
  Tensors are copied device to host for inputs and host to device for outputs (backends
  run on host arrays). Without that package or without a CUDA device, registering answers
  Triton's "GPUs not supported" error.

Region names share one namespace across both kinds. A request uses regions through a
:class:`SharedMemoryUse`: each tensor in shared memory takes a lease on its region
(Triton's ``GetMemoryInfo`` checks and messages) that the transport releases once the
response is written. Unregistering a region a request still uses only marks it: it stays
listed and usable until its last lease is released, then it is unmapped (Triton's
``awaiting_unregister``). Inputs in system regions are read-only numpy views on the mapping
(no copy); a view that outlives its request (kept by a model) keeps the mapping alive,
because a mapping with live views is never unmapped (Python's buffer protocol refuses it):
the memory is released when the last view goes.

The regions themselves (their kinds, mapping and copies, and the CUDA calls) are
:mod:`tritonx._dataplane.shm_regions`.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import logging
import mmap
import os
import stat
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numpy as np

from tritonx._dataplane.shm_regions import (
    CUDA_IPC_HANDLE_SIZE,
    CudaRegion,
    CudaRuntime,
    CudaUnavailable,
    MemoryKind,
    Region,
    RegionStatus,
    SystemRegion,
)
from tritonx.datatypes import serialize_bytes_tensor
from tritonx.errors import Code, TritonXError, invalid_arg, not_found

log = logging.getLogger("tritonx.shared_memory")

#: tritonserver's ``kClientShmDisabledErrorStr`` (UNSUPPORTED: HTTP 501, gRPC UNIMPLEMENTED).
CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
#: Keys of the Python backend's own regions in tritonserver
#: (``kTritonSharedMemoryRegionPrefix``); clients may not register them, as in tritonserver.
#: (tritonx's Python backend creates no named region: its segments have no key at all.)
RESERVED_KEY_PREFIX = "triton_python_backend_shm_region_"
#: ``SIZE_MAX`` of a 64-bit tritonserver: offsets and sizes wrap at it.
SIZE_MAX = 2**64 - 1


def disabled_error() -> TritonXError:
    """Triton's answer to register/unregister when ``--allow-client-shm`` is false."""
    return TritonXError(CLIENT_SHM_DISABLED, Code.UNSUPPORTED)


# ---------------------------------------------------------------------------------- manager


def _validate_key(name: str, key: str) -> None:
    """tritonserver's ``ValidateSharedMemoryKey``."""
    stripped = key.lstrip("/")
    if not stripped:
        raise invalid_arg(
            f"cannot register shared memory region '{name}' - invalid shm key '{key}'"
        )
    if stripped.startswith(RESERVED_KEY_PREFIX):
        raise invalid_arg(
            f"cannot register shared memory region '{name}' with key '{key}' as the key "
            f"contains the reserved prefix '{RESERVED_KEY_PREFIX}'"
        )


def _shm_open(key: str) -> int:
    """``shm_open(key, O_RDWR)`` as tritonserver calls it (the libc call
    ``multiprocessing.shared_memory`` uses, so both agree on names)."""
    import _posixshmem  # CPython's binding of shm_open, present on every POSIX build

    try:
        return int(_posixshmem.shm_open(key, os.O_RDWR, 0o600))
    except ValueError as exc:  # a NUL character in the key: no such object
        raise OSError(errno.EINVAL, str(exc)) from None


class SharedMemoryManager:
    """The server's registry of client shared-memory regions (thread-safe: requests may be
    decoded in worker threads).

    :param allow_client_shm: ``--allow-client-shm``; the transports refuse register and
        unregister with :func:`disabled_error` when it is false (status stays allowed).
    """

    def __init__(self, allow_client_shm: bool = False) -> None:
        self.allow_client_shm = allow_client_shm
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()
        self._cuda: CudaRuntime | None = None
        self._cuda_error = ""

    # ------------------------------------------------------------------ registration

    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes at ``offset`` of the POSIX shared-memory object ``key``
        as region ``name``.

        :raises TritonXError: INVALID_ARG for a reserved or empty key, a range beyond the
            object or an empty range; ALREADY_EXISTS for a name in use; INTERNAL when the
            object cannot be opened or is not a regular file.
        """
        _validate_key(name, key)
        with self._lock:
            if name in self._regions:
                raise TritonXError(
                    f"shared memory region '{name}' already in manager", Code.ALREADY_EXISTS
                )
            try:
                fd = _shm_open(key)
            except OSError:
                raise TritonXError(
                    f"Unable to open shared memory region: '{key}'", Code.INTERNAL
                ) from None
            try:
                try:
                    info = os.fstat(fd)
                except OSError:
                    info = None
                if info is None or not stat.S_ISREG(info.st_mode):
                    # a FIFO or device node in /dev/shm is no client's shared memory
                    raise TritonXError(f"Invalid shared memory region: '{key}'", Code.INTERNAL)
                size = info.st_size
                if offset > SIZE_MAX or byte_size > SIZE_MAX or offset + byte_size > size:
                    raise invalid_arg(
                        f"failed to register shared memory region '{name}': invalid args"
                    )
                if byte_size == 0:  # mmap of 0 bytes fails with EINVAL in tritonserver
                    raise invalid_arg(
                        f"failed to register shared memory region '{name}': unable to process "
                        "address spaceInvalid argument"
                    )
                start = offset - offset % mmap.ALLOCATIONGRANULARITY
                try:
                    mapped = mmap.mmap(
                        fd,
                        offset - start + byte_size,
                        mmap.MAP_SHARED,
                        mmap.PROT_READ | mmap.PROT_WRITE,
                        offset=start,
                    )
                except OSError as exc:
                    raise invalid_arg(
                        f"failed to register shared memory region '{name}': unable to process "
                        f"address space{exc.strerror or exc}"
                    ) from None
            finally:
                os.close(fd)
            self._regions[name] = SystemRegion(name, key, offset, byte_size, mapped)

    def cuda_available(self) -> bool:
        """Whether CUDA regions can be registered (cuda-python and a device are present);
        probes once."""
        try:
            self._cuda_runtime()
        except CudaUnavailable:
            return False
        return True

    def _cuda_runtime(self) -> CudaRuntime:
        if self._cuda is None:
            if self._cuda_error:
                raise CudaUnavailable(self._cuda_error)
            try:
                self._cuda = CudaRuntime()
            except CudaUnavailable as exc:
                self._cuda_error = str(exc)
                raise
            except Exception as exc:  # a broken CUDA install: say so, never crash
                self._cuda_error = f"the CUDA runtime failed to initialize ({exc})"
                raise CudaUnavailable(self._cuda_error) from None
        return self._cuda

    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        """Open the CUDA IPC handle ``raw_handle`` (a 64-byte ``cudaIpcMemHandle_t``) on
        ``device_id`` as region ``name`` of ``byte_size`` bytes.

        :raises TritonXError: INVALID_ARG "... GPUs not supported" when CUDA is not usable
            here, INVALID_ARG for a handle that does not open or a size beyond the
            allocation, ALREADY_EXISTS for a name in use.
        """
        with self._lock:
            if name in self._regions:
                raise TritonXError(
                    f"shared memory region '{name}' already in manager", Code.ALREADY_EXISTS
                )
        try:
            cuda = self._cuda_runtime()
        except CudaUnavailable as exc:
            raise invalid_arg(
                f"failed to register CUDA shared memory region: '{name}', GPUs not supported "
                f"({exc})"
            ) from None
        if len(raw_handle) != CUDA_IPC_HANDLE_SIZE:
            raise invalid_arg("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
        if not 0 <= device_id < cuda.device_count:
            log.error("failed to open CUDA IPC handle: no CUDA device %d", device_id)
            raise invalid_arg("failed to register shared memory region: invalid args")
        try:
            pointer, size = cuda.open_ipc(raw_handle, device_id)
        except Exception as exc:  # the detail is logged, the client gets Triton's text
            log.error("failed to open CUDA IPC handle: %s", exc)
            raise invalid_arg("failed to register shared memory region: invalid args") from None
        if byte_size > size:
            cuda.close_ipc(device_id, pointer)
            raise invalid_arg(f"failed to register shared memory region '{name}': invalid args")
        with self._lock:
            if name in self._regions:  # registered meanwhile by another request
                cuda.close_ipc(device_id, pointer)
                raise TritonXError(
                    f"shared memory region '{name}' already in manager", Code.ALREADY_EXISTS
                )
            self._regions[name] = CudaRegion(name, device_id, byte_size, pointer, cuda)

    # ------------------------------------------------------------------ status / unregister

    def status(self, kind: MemoryKind, name: str = "") -> list[RegionStatus]:
        """Every region of ``kind`` (by name), or the one named ``name``.

        :raises TritonXError: NOT_FOUND for an unknown name or one of the other kind.
        """
        with self._lock:
            if not name:
                return [r.status() for _, r in sorted(self._regions.items()) if r.kind is kind]
            region = self._regions.get(name)
        if region is None:
            label = "cuda" if kind is MemoryKind.CUDA else "system"
            raise not_found(f"Unable to find {label} shared memory region: '{name}'")
        if region.kind is not kind:
            if region.kind is MemoryKind.CUDA:
                raise not_found(
                    f"The region named '{name}' is registered as CUDA shared memory, not "
                    "system shared memory"
                )
            raise not_found(
                f"The region named '{name}' is registered as system shared memory, not CUDA "
                "shared memory"
            )
        return [region.status()]

    def unregister(self, kind: MemoryKind, name: str = "") -> None:
        """Remove region ``name`` of ``kind`` (every region of ``kind`` when ``name`` is
        empty); a region in use is removed when its last request finishes. Unknown names
        and regions of the other kind are left alone (no error, as tritonserver)."""
        with self._lock:
            names = [name] if name else [n for n, r in self._regions.items() if r.kind is kind]
            closing: list[Region] = []
            for region_name in names:
                region = self._regions.get(region_name)
                if region is None or region.kind is not kind:
                    continue
                if region.users:
                    region.awaiting_unregister = True
                    log.debug(
                        "shared memory region '%s' will be unregistered after in-flight "
                        "requests complete",
                        region_name,
                    )
                    continue
                del self._regions[region_name]
                closing.append(region)
        failed = [r.name for r in closing if not _close(r)]
        if failed:
            label = "cuda" if kind is MemoryKind.CUDA else "system"
            raise TritonXError(
                f"Failed to unregister the following {label} shared memory regions: "
                + "".join(f"{n} ," for n in failed),
                Code.INTERNAL,
            )

    def close(self) -> None:
        """Unregister every region (server shutdown)."""
        for kind in MemoryKind:
            try:
                self.unregister(kind)
            except TritonXError as exc:
                log.warning("%s", exc.message)

    # ------------------------------------------------------------------ use by requests

    def lease(self, name: str, offset: int, byte_size: int) -> Lease:
        """Take a lease on ``byte_size`` bytes at ``offset`` of region ``name`` for one
        request (tritonserver's ``GetMemoryInfo``); release it with :meth:`Lease.release`.

        ``offset`` and ``byte_size`` are unsigned 64-bit values as clients send them
        (negative gRPC int64 values wrap, as in tritonserver).

        :raises TritonXError: NOT_FOUND for an unknown region, INVALID_ARG for a range
            outside it.
        """
        offset %= 2**64
        byte_size %= 2**64
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise not_found(f"Unable to find shared memory region: '{name}'")
            if offset >= region.byte_size:
                raise invalid_arg(f"Invalid offset for shared memory region: '{name}'")
            if byte_size > SIZE_MAX - offset:
                raise invalid_arg(
                    f"Integer overflow detected: byte_size ({byte_size}) + offset ({offset}) "
                    f"exceeds maximum value ({SIZE_MAX}) for region '{name}'"
                )
            if offset + byte_size > region.byte_size:
                raise invalid_arg(f"Invalid offset + byte size for shared memory region: '{name}'")
            region.users += 1
        return Lease(self, region, offset, byte_size)

    def _release(self, region: Region) -> None:
        with self._lock:
            region.users -= 1
            if region.users or not region.awaiting_unregister:
                return
            if self._regions.get(region.name) is region:
                del self._regions[region.name]
        if not _close(region):
            log.warning("failed to unregister shared memory region '%s'", region.name)


def _close(region: Region) -> bool:
    try:
        region.close()
    except Exception as exc:  # munmap / cudaIpcCloseMemHandle failed
        log.debug("closing shared memory region '%s': %s", region.name, exc)
        return False
    return True


# ---------------------------------------------------------------------------------- requests


class Lease:
    """One request's hold on a range of a region (from :meth:`SharedMemoryManager.lease`)."""

    __slots__ = ("_manager", "_region", "byte_size", "offset", "released")

    def __init__(
        self, manager: SharedMemoryManager, region: Region, offset: int, byte_size: int
    ) -> None:
        self._manager = manager
        self._region = region
        self.offset = offset
        self.byte_size = byte_size
        self.released = False

    @property
    def region_name(self) -> str:
        return self._region.name

    def read(self) -> memoryview:
        """The leased bytes, read-only (a view on a system region, a host copy of a CUDA
        one)."""
        return self._region.read(self.offset, self.byte_size)

    def write(self, data: np.ndarray) -> None:
        """Copy ``data`` (contiguous uint8, at most :attr:`byte_size` bytes) to the range."""
        self._region.write(self.offset, data)

    def release(self) -> None:
        """Give the lease back (idempotent); the region is unmapped now if it was
        unregistered meanwhile and this was its last lease."""
        if not self.released:
            self.released = True
            self._manager._release(self._region)


class SharedMemoryUse:
    """The regions one inference request reads inputs from and writes outputs to.

    Transports create it while decoding (:meth:`input`, :meth:`output`), write the outputs
    with :meth:`write_output` while encoding, and call :meth:`release` when the response is
    sent (or the request failed), whatever happened.
    """

    __slots__ = ("_leases", "manager", "outputs")

    def __init__(self, manager: SharedMemoryManager | None) -> None:
        #: the server's registry (None for a frontend used without one: no region exists)
        self.manager = manager
        self._leases: list[Lease] = []
        #: output name → where it goes
        self.outputs: dict[str, Lease] = {}

    def _lease(self, region: str, offset: int, byte_size: int) -> Lease:
        if self.manager is None:
            raise not_found(f"Unable to find shared memory region: '{region}'")
        lease = self.manager.lease(region, offset, byte_size)
        self._leases.append(lease)
        return lease

    def input(self, region: str, offset: int, byte_size: int) -> memoryview:
        """The bytes of an input in shared memory (read-only; no copy for system regions)."""
        return self._lease(region, offset, byte_size).read()

    def output(self, name: str, region: str, offset: int, byte_size: int) -> None:
        """Send output ``name`` to shared memory instead of the response."""
        self.outputs[name] = self._lease(region, offset, byte_size)

    def write_output(self, name: str, array: np.ndarray) -> None:
        """Write output ``name`` (little-endian elements, or Triton's length-prefixed BYTES
        form for object/string arrays) into its range.

        :raises TritonXError: INTERNAL when the range is too small for it (Triton's text).
        """
        lease = self.outputs[name]
        data = tensor_bytes(array)
        if data.size > lease.byte_size:
            raise TritonXError(
                f"shared memory size specified with the request for output '{name}' "
                f"({lease.byte_size} bytes) should be at least {data.size} bytes to hold the "
                "results",
                Code.INTERNAL,
            )
        if data.size:
            lease.write(data)

    def release(self) -> None:
        """Release every lease (idempotent)."""
        for lease in self._leases:
            lease.release()


def tensor_bytes(array: np.ndarray) -> np.ndarray:
    """An output's wire bytes as a contiguous uint8 array (a view when the array is already
    contiguous little-endian; BYTES tensors serialized)."""
    if array.dtype.kind in "OSU":
        return np.frombuffer(serialize_bytes_tensor(array), np.uint8)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def decode_raw_handle(b64: str) -> bytes:
    """The bytes of an HTTP CUDA register request's ``raw_handle.b64`` (empty when it is
    not base64: :meth:`SharedMemoryManager.register_cuda` then refuses it)."""
    try:
        return base64.b64decode(b64)
    except ValueError:
        return b""


class Decoded(Protocol):
    """A transport's decoded request: what it holds of shared memory."""

    shm: SharedMemoryUse | None


D = TypeVar("D", bound=Decoded)


async def decode_in_thread(decode: Callable[..., D], *args: Any) -> D:
    """``decode(*args)`` in a worker thread. Should the caller be cancelled while it runs,
    the regions the decoded request leased are released when the thread is done (nothing
    else will ever see that request)."""
    task = asyncio.ensure_future(asyncio.to_thread(decode, *args))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_release_orphan)
        raise


def _release_orphan(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is None:
        use = task.result().shm
        if use is not None:
            use.release()


__all__ = [
    "CLIENT_SHM_DISABLED",
    "CUDA_IPC_HANDLE_SIZE",
    "Lease",
    "MemoryKind",
    "RegionStatus",
    "SharedMemoryManager",
    "SharedMemoryUse",
    "decode_in_thread",
    "decode_raw_handle",
    "disabled_error",
    "tensor_bytes",
]
