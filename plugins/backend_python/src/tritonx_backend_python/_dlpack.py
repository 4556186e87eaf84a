"""DLPack for BF16 tensors, which numpy cannot export or import (it has no bfloat16): a
``dltensor`` capsule over a BF16 tensor's bits (``uint16`` array) with DLPack's bfloat16 type,
and the bits of a BF16 capsule another framework exported (e.g. torch's ``bfloat16``).

Triton's ``Tensor.as_numpy()`` refuses BF16 and points to ``to_dlpack()`` / ``from_dlpack()``;
this module makes those work on CPU with only the standard library and numpy.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

#: DLPack's type code of bfloat16 (``kDLBfloat``) and its CPU device (``kDLCPU``)
BFLOAT = 4
CPU = 1
_NAME = b"dltensor"
_USED = b"used_dltensor"


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [
    ("dl_tensor", _Tensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _Deleter),
]

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

#: what an exported capsule keeps alive (the array, its shape, the struct), by the struct's
#: address, until its consumer (or the capsule's destructor) calls the deleter
_alive: dict[int, tuple[Any, ...]] = {}
_lock = threading.Lock()


@_Deleter
def _delete(managed: Any) -> None:
    with _lock:
        _alive.pop(ctypes.addressof(managed.contents), None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_gone(capsule: int) -> None:
    # a capsule nobody consumed still owns its tensor
    if _api.PyCapsule_IsValid(capsule, _NAME):
        address = _api.PyCapsule_GetPointer(capsule, _NAME)
        with _lock:
            _alive.pop(address, None)


def export_bf16(bits: np.ndarray) -> Any:
    """A ``dltensor`` capsule of BF16 data held as its ``uint16`` bits (CPU, C order)."""
    array = np.ascontiguousarray(bits, dtype=np.uint16)
    shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
    managed = _Managed()
    tensor = managed.dl_tensor
    tensor.data = array.ctypes.data if array.size else None
    tensor.device = _Device(CPU, 0)
    tensor.ndim = array.ndim
    tensor.dtype = _DataType(BFLOAT, 16, 1)
    tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = None  # C order
    tensor.byte_offset = 0
    managed.deleter = _delete
    address = ctypes.addressof(managed)
    with _lock:
        _alive[address] = (array, shape, managed)
    return _api.PyCapsule_New(address, _NAME, ctypes.cast(_capsule_gone, ctypes.c_void_p))


def import_bf16(capsule: Any) -> np.ndarray | None:
    """The ``uint16`` bits (a copy) of a BF16 CPU ``dltensor`` capsule, which this consumes;
    None when the capsule holds another type (it is then left as it is)."""
    address = id(capsule)  # the object's address (CPython); the caller holds it
    if not _api.PyCapsule_IsValid(address, _NAME):
        raise ValueError("not a DLPack capsule (or one consumed already)")
    managed = _Managed.from_address(_api.PyCapsule_GetPointer(address, _NAME))
    tensor = managed.dl_tensor
    if tensor.dtype.code != BFLOAT or tensor.dtype.bits != 16 or tensor.dtype.lanes != 1:
        return None
    if tensor.device.device_type != CPU:
        raise ValueError("only CPU tensors can be converted")
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    count = int(np.prod(shape, dtype=np.int64))
    start = (tensor.data or 0) + tensor.byte_offset
    if tensor.strides and count:
        strides = tuple(tensor.strides[i] * 2 for i in range(tensor.ndim))
        extent = sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + 2
        raw = np.frombuffer(ctypes.string_at(start, extent), dtype=np.uint8)
        bits = np.lib.stride_tricks.as_strided(raw.view(np.uint16), shape, strides).copy()
    elif count:
        bits = np.frombuffer(ctypes.string_at(start, count * 2), dtype=np.uint16).reshape(shape)
        bits = bits.copy()
    else:
        bits = np.zeros(shape, np.uint16)
    _api.PyCapsule_SetName(address, _USED)
    if managed.deleter:
        managed.deleter(ctypes.pointer(managed))
    return bits
