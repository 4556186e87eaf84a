"""The few CUDA runtime calls the backend needs, through NVIDIA's ``cuda-python`` bindings.

Imported lazily by :func:`load_runtime` (``cuda.bindings.runtime``, or ``cuda.cudart`` of
older releases); nothing here runs at import time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tritonx.errors import Code, TritonXError


def load_runtime() -> Any:
    """The CUDA runtime module of cuda-python; UNAVAILABLE naming the package when missing."""
    try:
        from cuda.bindings import runtime

        return runtime
    except ImportError:
        pass
    try:
        from cuda import cudart

        return cudart
    except ImportError as exc:
        raise TritonXError(
            "the tensorrt backend needs NVIDIA's CUDA runtime bindings: pip install cuda-python "
            f"({exc})",
            Code.UNAVAILABLE,
        ) from exc


class Cuda:
    """CUDA runtime calls that raise INTERNAL on errors."""

    def __init__(self, runtime: Any) -> None:
        self._rt = runtime

    def _check(self, result: Any, what: str) -> Any:
        err, *rest = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            name = self._rt.cudaGetErrorString(err)
            text = name[1].decode() if isinstance(name, tuple) else str(name)
            raise TritonXError(f"{what} failed: {text}", Code.INTERNAL)
        return rest[0] if len(rest) == 1 else rest

    def device_count(self) -> int:
        return int(self._check(self._rt.cudaGetDeviceCount(), "cudaGetDeviceCount"))

    def set_device(self, device: int) -> None:
        self._check(self._rt.cudaSetDevice(device), f"cudaSetDevice({device})")

    def stream(self) -> Any:
        return self._check(self._rt.cudaStreamCreate(), "cudaStreamCreate")

    def destroy_stream(self, stream: Any) -> None:
        self._check(self._rt.cudaStreamDestroy(stream), "cudaStreamDestroy")

    def synchronize(self, stream: Any) -> None:
        self._check(self._rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")

    def malloc(self, nbytes: int) -> int:
        return int(self._check(self._rt.cudaMalloc(max(nbytes, 1)), "cudaMalloc"))

    def free(self, pointer: int) -> None:
        self._check(self._rt.cudaFree(pointer), "cudaFree")

    def to_device(self, pointer: int, array: np.ndarray, stream: Any) -> None:
        if array.nbytes:
            self._check(
                self._rt.cudaMemcpyAsync(
                    pointer,
                    array.ctypes.data,
                    array.nbytes,
                    self._rt.cudaMemcpyKind.cudaMemcpyHostToDevice,
                    stream,
                ),
                "cudaMemcpyAsync (host to device)",
            )

    def to_host(self, array: np.ndarray, pointer: int, stream: Any) -> None:
        if array.nbytes:
            self._check(
                self._rt.cudaMemcpyAsync(
                    array.ctypes.data,
                    pointer,
                    array.nbytes,
                    self._rt.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                    stream,
                ),
                "cudaMemcpyAsync (device to host)",
            )


class DeviceBuffer:
    """A device allocation reused across executions; grows (never shrinks) on demand."""

    def __init__(self, cuda: Cuda) -> None:
        self._cuda = cuda
        self.pointer = 0
        self.capacity = 0

    def ensure(self, nbytes: int) -> int:
        if nbytes > self.capacity:
            if self.pointer:
                self._cuda.free(self.pointer)
            self.pointer = self._cuda.malloc(nbytes)
            self.capacity = max(nbytes, 1)
        return self.pointer

    def release(self) -> None:
        if self.pointer:
            self._cuda.free(self.pointer)
        self.pointer = 0
        self.capacity = 0
