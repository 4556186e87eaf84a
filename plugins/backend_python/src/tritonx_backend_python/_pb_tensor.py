"""``pb_utils`` tensors: :class:`Tensor`, the BYTES encoding, Triton's type tables and
conversions, and the by-name lookups of tensors and config entries.

Part of the split of :mod:`tritonx_backend_python.pb_utils`, which re-exports these names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tritonx_backend_python import _dlpack, _ipc
from tritonx_backend_python._pb_base import TritonModelException, refused, text_arg

if TYPE_CHECKING:
    from tritonx_backend_python._pb_request import InferenceRequest, InferenceResponse

#: Config type names → numpy types (Triton's table; no BF16, which numpy lacks).
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType enum values, by protocol datatype name
_TRITON_TYPE_CODE = {
    "BOOL": 1,
    "UINT8": 2,
    "UINT16": 3,
    "UINT32": 4,
    "UINT64": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FP16": 10,
    "FP32": 11,
    "FP64": 12,
    "BYTES": 13,
    "BF16": 14,
}
_CODE_TO_NUMPY = {
    1: np.bool_,
    2: np.uint8,
    3: np.uint16,
    4: np.uint32,
    5: np.uint64,
    6: np.int8,
    7: np.int16,
    8: np.int32,
    9: np.int64,
    10: np.float16,
    11: np.float32,
    12: np.float64,
    13: np.object_,
}


# ---------------------------------------------------------------------- tensors

# how Triton's pybind layer writes these signatures in its TypeError
_TENSOR_SIGNATURE = "c_python_backend_utils.Tensor(arg0: str, arg1: numpy.ndarray)"
_FROM_DLPACK_SIGNATURE = "(arg0: str, arg1: object) -> c_python_backend_utils.Tensor"
# Triton's text (src/pb_tensor.cc: a line continued inside the literal keeps the next
# line's indent)
_NOT_DLPACK = (
    "Provided tensor is not supported. Tensor must be a DLPack capsule         or have "
    "`__dlpack__` and `__dlpack_device__` attributes"
)


class Tensor:
    """A named tensor; ``Tensor(name, numpy_array)``. BYTES tensors are object arrays."""

    # The backend's runner and worker read a tensor through these slots (plain slots, not
    # properties or methods: every tensor that crosses to or from the server is read so);
    # they are not part of Triton's ``pb_utils`` API, which reads it through the methods.
    __slots__ = {
        "backend_array": "The data as the backend holds it (BF16: its uint16 bits; never "
        "refused, unlike ``as_numpy()``), for the backend.",
        "backend_datatype": 'The Triton datatype name (``"FP32"``, ``"BYTES"``, ``"BF16"``'
        "...), for the backend.",
        "backend_name": "The tensor's name (what ``name()`` returns), for the backend.",
    }

    def __init__(self, name: str, data: Any, *, datatype: str | None = None) -> None:
        if type(name) is not str:
            name = text_arg(name, _TENSOR_SIGNATURE, (name, data))
        if not isinstance(data, np.ndarray):  # pybind's py::array: a numpy array only
            raise refused(_TENSOR_SIGNATURE, (name, data))
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        array = data
        if datatype is None:
            try:
                datatype = _ipc.datatype_of(array)
            except TypeError as exc:
                raise TritonModelException(str(exc)) from None
        if datatype == "BF16" and array.dtype != np.uint16:
            array = array.view(np.uint16)
        self.backend_name = name
        self.backend_array = array
        self.backend_datatype = datatype

    def name(self) -> str:
        """The tensor's name."""
        return self.backend_name

    def as_numpy(self) -> np.ndarray:
        """The data as a numpy array; BF16 is refused as Triton refuses it (numpy has no
        bfloat16): use ``to_dlpack()`` / ``from_dlpack()``."""
        if self.backend_datatype == "BF16":
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. Use "
                "to_dlpack() and from_dlpack() instead."
            )
        return self.backend_array

    def triton_dtype(self) -> int:
        """The ``TRITONSERVER_DataType`` code (13 for BYTES, 14 for BF16...)."""
        return _TRITON_TYPE_CODE[self.backend_datatype]

    def shape(self) -> list[int]:
        """The tensor's shape."""
        return list(self.backend_array.shape)

    def is_cpu(self) -> bool:
        """Always True: tritonx python models see CPU tensors."""
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule of the data (not for BYTES tensors)."""
        if self.backend_datatype == "BYTES":
            raise TritonModelException("DLPack does not have support for string tensors.")
        if self.backend_datatype == "BF16":
            return _dlpack.export_bf16(self.backend_array)
        return self.backend_array.__dlpack__()

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU, device 0

    @staticmethod
    def from_dlpack(name: str, dlpack: Any) -> Tensor:
        """A tensor from any object with ``__dlpack__`` (torch, numpy, ...) or a capsule;
        a bfloat16 one becomes a BF16 tensor."""
        if type(name) is not str:
            name = text_arg(name, _FROM_DLPACK_SIGNATURE, (name, dlpack), "from_dlpack")
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        source = dlpack
        if type(dlpack).__name__ == "PyCapsule":
            source = type("_Capsule", (), {})()
            source.__dlpack__ = lambda stream=None: dlpack
            source.__dlpack_device__ = lambda: (1, 0)
        elif not hasattr(dlpack, "__dlpack__") or not hasattr(dlpack, "__dlpack_device__"):
            raise TritonModelException(_NOT_DLPACK)
        try:
            array = np.from_dlpack(source)
        except (BufferError, TypeError, ValueError, RuntimeError):
            capsule = dlpack.__dlpack__() if hasattr(dlpack, "__dlpack__") else dlpack
            bits = _dlpack.import_bf16(capsule)
            if bits is None:
                raise
            return Tensor(name, bits, datatype="BF16")
        return Tensor(name, array)

    def __repr__(self) -> str:
        shape = list(self.backend_array.shape)
        return f"Tensor({self.backend_name!r}, {self.backend_datatype}, shape={shape})"


def serialize_byte_tensor(input_tensor: np.ndarray) -> np.ndarray | None:
    """Triton's BYTES wire encoding of an array, as a 1-D uint8 array (None if empty)."""
    if input_tensor.size == 0:
        return None
    if input_tensor.dtype != object and input_tensor.dtype.type != np.bytes_:
        raise TritonModelException("cannot serialize bytes tensor: invalid datatype")
    return np.frombuffer(_ipc.serialize_bytes(input_tensor), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    """Decode Triton's BYTES wire encoding into a 1-D object array of ``bytes``."""
    return _ipc.deserialize_bytes(encoded_tensor)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input tensor named ``name``, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The response's output tensor named ``name``, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``input`` entry of a config dict with this name, or None."""
    for entry in model_config.get("input", ()):
        if entry["name"] == name:
            return entry
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``output`` entry of a config dict with this name, or None."""
    for entry in model_config.get("output", ()):
        if entry["name"] == name:
            return entry
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether the config dict sets ``model_transaction_policy { decoupled: true }``."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def triton_to_numpy_type(data_type: int) -> Any:
    """numpy type for a ``TRITONSERVER_DataType`` / config enum code (None if unknown)."""
    return _CODE_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """The ``TRITONSERVER_DataType`` code for a numpy type (None if unsupported)."""
    if data_type in (np.object_, np.bytes_):
        return 13
    for code, np_type in _CODE_TO_NUMPY.items():
        if data_type == np_type:
            return code
    return None


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """numpy type for a config type name such as ``"TYPE_FP32"``."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]
