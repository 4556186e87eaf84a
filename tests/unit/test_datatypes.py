import numpy as np
import pytest

from tritonx.datatypes import DataType, deserialize_bytes_tensor, serialize_bytes_tensor
from tritonx.errors import Code, TritonXError


def test_protocol_and_config_names() -> None:
    assert DataType.from_protocol("FP32").numpy_dtype == np.float32
    assert DataType.from_config("TYPE_STRING") is DataType.BYTES
    assert DataType.BYTES.config_name == "TYPE_STRING"
    assert DataType.BF16.itemsize == 2 and DataType.BYTES.itemsize == 0
    assert DataType.from_numpy(np.dtype(object)) is DataType.BYTES
    assert DataType.from_numpy(np.dtype(np.int8)) is DataType.INT8


def test_unknown_datatype_is_invalid_arg() -> None:
    with pytest.raises(TritonXError) as err:
        DataType.from_protocol("FP128")
    assert err.value.code is Code.INVALID_ARG


def test_bytes_roundtrip() -> None:
    arr = np.array([b"a", b"", "h\u00e9", b"\x00\x01"], dtype=object)
    wire = serialize_bytes_tensor(arr)
    assert wire[:5] == b"\x01\x00\x00\x00a"
    back = deserialize_bytes_tensor(wire, 4)
    assert list(back) == [b"a", b"", "h\u00e9".encode(), b"\x00\x01"]


@pytest.mark.parametrize("wire", [b"\x01\x00", b"\x05\x00\x00\x00ab"])
def test_truncated_bytes(wire: bytes) -> None:
    with pytest.raises(TritonXError, match="truncated"):
        deserialize_bytes_tensor(wire)


def test_bytes_count_mismatch() -> None:
    with pytest.raises(TritonXError, match="expected 3 string elements but got 1"):
        deserialize_bytes_tensor(b"\x01\x00\x00\x00a", 3)
