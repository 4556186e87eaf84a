"""The regions of client shared memory (:mod:`tritonx._dataplane.shared_memory` keeps them):
a :class:`SystemRegion` is a POSIX shared-memory object mapped (inputs read as views on the
mapping, outputs copied in); a :class:`CudaRegion` a ``cudaIpcMemHandle_t`` opened on its
device, its tensors copied device to host and host to device through :class:`CudaRuntime`, the
few ``cuda-python`` calls shared memory needs (imported on first use; :class:`CudaUnavailable`
says why CUDA cannot be used)."""

from __future__ import annotations

import ctypes
import enum
import logging
import mmap
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonx.errors import Code, TritonXError

log = logging.getLogger("tritonx.shared_memory")

#: Bytes of a ``cudaIpcMemHandle_t``.
CUDA_IPC_HANDLE_SIZE = 64


class MemoryKind(enum.Enum):
    """The two kinds of client shared memory."""

    SYSTEM = "system"
    CUDA = "cuda"


@dataclass(frozen=True, slots=True)
class RegionStatus:
    """One registered region, as the status endpoints list it (``key`` and ``offset`` for
    system regions, ``device_id`` for CUDA ones)."""

    name: str
    kind: MemoryKind
    byte_size: int
    key: str = ""
    offset: int = 0
    device_id: int = 0


# ---------------------------------------------------------------------------------- regions


class Region:
    """A registered region; subclasses read and write its bytes."""

    kind: MemoryKind

    def __init__(self, name: str, byte_size: int) -> None:
        self.name = name
        self.byte_size = byte_size
        #: leases held by requests in flight
        self.users = 0
        #: unregistered while in use: removed when the last lease goes
        self.awaiting_unregister = False

    def status(self) -> RegionStatus:
        raise NotImplementedError

    def read(self, offset: int, size: int) -> memoryview:
        """``size`` bytes at ``offset`` (within the region) as a read-only buffer."""
        raise NotImplementedError

    def write(self, offset: int, data: np.ndarray) -> None:
        """Copy ``data`` (a contiguous uint8 array) to ``offset`` (within the region)."""
        raise NotImplementedError

    def close(self) -> None:
        """Unmap / close the region (the manager calls it once, when it is removed)."""
        raise NotImplementedError


class SystemRegion(Region):
    kind = MemoryKind.SYSTEM

    def __init__(self, name: str, key: str, offset: int, byte_size: int, mapped: mmap.mmap):
        super().__init__(name, byte_size)
        self.key = key
        self.offset = offset
        self._mmap = mapped
        # mmap offsets must be page aligned: the mapping starts at the page holding
        # ``offset`` and the region is the part of it from there
        delta = offset % mmap.ALLOCATIONGRANULARITY
        self._view = memoryview(mapped)[delta : delta + byte_size]

    def status(self) -> RegionStatus:
        return RegionStatus(self.name, self.kind, self.byte_size, key=self.key, offset=self.offset)

    def read(self, offset: int, size: int) -> memoryview:
        return self._view[offset : offset + size].toreadonly()

    def write(self, offset: int, data: np.ndarray) -> None:
        target = np.frombuffer(self._view, np.uint8, count=data.size, offset=offset)
        target[...] = data  # numpy copies through a temporary when the two overlap

    def close(self) -> None:
        try:
            self._view.release()
        except BufferError:  # a write in progress holds it: the mmap stays until it ends
            pass
        try:
            self._mmap.close()
        except BufferError:
            # a tensor still views the mapping (a model kept an input): it is unmapped
            # when the last such view is gone, never while one can read it
            log.debug("shared memory region '%s' stays mapped until its views are gone", self.name)


class CudaRegion(Region):
    kind = MemoryKind.CUDA

    def __init__(
        self, name: str, device_id: int, byte_size: int, pointer: int, cuda: CudaRuntime
    ) -> None:
        super().__init__(name, byte_size)
        self.device_id = device_id
        self.pointer = pointer
        self._cuda = cuda

    def status(self) -> RegionStatus:
        return RegionStatus(self.name, self.kind, self.byte_size, device_id=self.device_id)

    def read(self, offset: int, size: int) -> memoryview:
        host = np.empty(size, np.uint8)
        if size:
            try:
                self._cuda.to_host(self.device_id, host, self.pointer + offset)
            except RuntimeError as exc:
                raise self._copy_error(exc) from None
        return host.data.toreadonly()

    def write(self, offset: int, data: np.ndarray) -> None:
        if data.size:
            try:
                self._cuda.to_device(self.device_id, self.pointer + offset, data)
            except RuntimeError as exc:
                raise self._copy_error(exc) from None

    def _copy_error(self, exc: RuntimeError) -> TritonXError:
        return TritonXError(
            f"failed to copy CUDA shared memory region '{self.name}': {exc}", Code.INTERNAL
        )

    def close(self) -> None:
        self._cuda.close_ipc(self.device_id, self.pointer)


# ---------------------------------------------------------------------------------- CUDA


class CudaUnavailable(Exception):
    """CUDA cannot be used here (the reason is the message)."""


class CudaRuntime:
    """The few CUDA runtime/driver calls shared memory needs, through ``cuda-python``
    (``cuda.bindings``, or the older ``cuda.cudart`` layout); imported on first use."""

    def __init__(self) -> None:
        try:
            from cuda.bindings import driver, runtime
        except ImportError:
            try:
                from cuda import cuda as driver  # cuda-python < 12.6
                from cuda import cudart as runtime
            except ImportError:
                raise CudaUnavailable(
                    "the 'cuda-python' package is not installed on the server"
                ) from None
        self.rt: Any = runtime
        self.drv: Any = driver
        err, count = runtime.cudaGetDeviceCount()
        if err != runtime.cudaError_t.cudaSuccess:
            name = getattr(err, "name", str(err))
            raise CudaUnavailable(f"no usable CUDA device on the server: {name}")
        if not count:
            raise CudaUnavailable("no CUDA device is visible to the server")
        self.device_count = int(count)

    def check(self, result: Any, what: str) -> Any:
        """The values of a cuda-python call's result tuple; raises on a CUDA error."""
        err, *values = result if isinstance(result, tuple) else (result,)
        if err != self.rt.cudaError_t.cudaSuccess:
            _, text = self.rt.cudaGetErrorString(err)
            detail = text.decode() if isinstance(text, bytes) else str(text)
            raise RuntimeError(f"{what}: {detail}")
        return values[0] if len(values) == 1 else values

    def open_ipc(self, raw_handle: bytes, device_id: int) -> tuple[int, int]:
        """Open ``raw_handle`` on ``device_id``: (device pointer, allocation size)."""
        rt = self.rt
        self.check(rt.cudaSetDevice(device_id), "cudaSetDevice")
        handle = rt.cudaIpcMemHandle_t()
        ctypes.memmove(handle.getPtr(), raw_handle, CUDA_IPC_HANDLE_SIZE)
        flags = getattr(rt, "cudaIpcMemLazyEnablePeerAccess", 1)
        pointer = int(self.check(rt.cudaIpcOpenMemHandle(handle, flags), "cudaIpcOpenMemHandle"))
        try:
            err, _base, size = self.drv.cuMemGetAddressRange(self.drv.CUdeviceptr(pointer))
            if err != self.drv.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuMemGetAddressRange failed: {err}")
        except BaseException:
            self.close_ipc(device_id, pointer)
            raise
        return pointer, int(size)

    def close_ipc(self, device_id: int, pointer: int) -> None:
        self.check(self.rt.cudaSetDevice(device_id), "cudaSetDevice")
        self.check(self.rt.cudaIpcCloseMemHandle(pointer), "cudaIpcCloseMemHandle")

    def to_host(self, device_id: int, host: np.ndarray, pointer: int) -> None:
        rt = self.rt
        self.check(rt.cudaSetDevice(device_id), "cudaSetDevice")
        kind = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self.check(rt.cudaMemcpy(host.ctypes.data, pointer, host.nbytes, kind), "cudaMemcpy")

    def to_device(self, device_id: int, pointer: int, host: np.ndarray) -> None:
        rt = self.rt
        self.check(rt.cudaSetDevice(device_id), "cudaSetDevice")
        kind = rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self.check(rt.cudaMemcpy(pointer, host.ctypes.data, host.nbytes, kind), "cudaMemcpy")
