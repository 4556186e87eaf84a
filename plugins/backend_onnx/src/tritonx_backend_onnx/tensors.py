"""Tensor plumbing between tritonx (numpy, BYTES as object arrays of ``bytes``, BF16 as
``uint16`` bits) and ONNX Runtime (strings as ``str``, BF16 as ``OrtValue``).

Nothing here imports onnxruntime at module level: the ``ort`` module is passed in.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonx.errors import invalid_arg

#: ONNX Runtime's type strings → Triton config datatypes.
ORT_TO_CONFIG: dict[str, str] = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
    "tensor(bfloat16)": "TYPE_BF16",
}

#: ``onnx.TensorProto.BFLOAT16`` (the element type ``OrtValue`` needs for BF16 tensors).
ONNX_BFLOAT16 = 16


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One graph input or output as the session describes it.

    :param name: the tensor's name in the graph.
    :param ort_type: ONNX Runtime's type string (``tensor(float)``...).
    :param dims: the shape, with -1 for every symbolic or unknown dimension.
    """

    name: str
    ort_type: str
    dims: tuple[int, ...]

    @property
    def config_type(self) -> str | None:
        """The Triton config datatype (``TYPE_FP32``...), None for unsupported types."""
        return ORT_TO_CONFIG.get(self.ort_type)

    @property
    def type_label(self) -> str:
        """The datatype for messages: the config name, or the ONNX Runtime type string."""
        return self.config_type or self.ort_type


def tensor_info(node: Any) -> TensorInfo:
    """A :class:`TensorInfo` from an ``onnxruntime.NodeArg``."""
    shape = node.shape if isinstance(node.shape, (list, tuple)) else []
    dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in shape)
    return TensorInfo(node.name, node.type, dims)


def bytes_to_ort(array: np.ndarray, name: str) -> np.ndarray:
    """A BYTES tensor (object array of ``bytes``) as the ``str`` object array ORT wants.

    ORT stores strings as UTF-8, so elements that are not valid UTF-8 are INVALID_ARG.
    """
    out = np.empty(array.shape, dtype=object)
    flat = out.reshape(-1)
    for i, item in enumerate(array.reshape(-1)):
        if isinstance(item, str):
            flat[i] = item
            continue
        try:
            flat[i] = bytes(item).decode("utf-8")
        except UnicodeDecodeError:
            raise invalid_arg(
                f"input '{name}': element {i} is not valid UTF-8; ONNX string tensors hold text"
            ) from None
        except TypeError:
            flat[i] = str(item)
    return out


def ort_to_bytes(array: np.ndarray) -> np.ndarray:
    """An ORT string output (object array of ``str``) as a tritonx BYTES tensor."""
    out = np.empty(array.shape, dtype=object)
    flat = out.reshape(-1)
    for i, item in enumerate(array.reshape(-1)):
        flat[i] = item.encode("utf-8") if isinstance(item, str) else bytes(item)
    return out


def bf16_to_ort(ort: Any, array: np.ndarray) -> Any:
    """A BF16 tensor (``uint16`` bits) as an ``OrtValue`` of element type bfloat16."""
    bits = np.ascontiguousarray(array, dtype=np.uint16)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, ONNX_BFLOAT16)


def ortvalue_to_numpy(value: Any) -> np.ndarray:
    """An output ``OrtValue`` as numpy: BF16 becomes ``uint16`` bits (numpy has no bfloat16)."""
    if value.data_type() != "tensor(bfloat16)":
        return np.asarray(value.numpy())
    shape = tuple(value.shape())
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.zeros(shape, dtype=np.uint16)
    buffer = (ctypes.c_uint16 * count).from_address(value.data_ptr())
    return np.ctypeslib.as_array(buffer).reshape(shape).copy()


def fit_shape(array: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """``array`` reshaped to ``dims`` when the model's shape differs but the size agrees.

    Covers configured ``reshape``s and scalar outputs reported as ``[1]`` (Triton does the
    same); ``dims`` with more than one -1 are left alone.
    """
    if array.shape == dims or dims.count(-1) > 1:
        return array
    known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
    if -1 in dims:
        if known == 0 or array.size % known:
            return array
    elif array.size != known:
        return array
    return array.reshape(dims)
