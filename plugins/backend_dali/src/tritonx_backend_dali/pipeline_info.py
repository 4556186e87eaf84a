"""What a serialized DALI pipeline declares, read from its protobuf without importing DALI.

A ``model.dali`` file is DALI's ``PipelineDef`` protobuf message (``Pipeline.serialize()``).
Triton's DALI backend asks DALI for the same facts (``ListInputs``, ``GetInputType``,
``GetDeclaredOutputType``, ...); reading the message directly keeps ``tritonx check`` and
auto-complete free of DALI and of any device. Field numbers (DALI's ``dali.proto``):

* ``PipelineDef``: 1 num_threads, 2 max batch size, 5 op (repeated ``OpDef``),
  7 pipeline outputs (repeated ``InputOutput``), 8 device id;
* ``OpDef``: 1 operator schema name, 2 inputs, 3 outputs, 4 arguments, 5 instance name;
* ``InputOutput``: 1 name, 2 device, 5 declared dtype, 6 declared ndim (pipeline outputs);
* ``Argument``: 1 name, 2 type, 3 floats, 4 ints, 5 strings, 6 bools.
"""

from __future__ import annotations

from dataclasses import dataclass

#: DALI's ``DALIDataType`` values → Triton's config datatypes (Triton's ``to_triton_config``).
DALI_TO_TRITON: dict[int, str] = {
    0: "TYPE_UINT8",
    1: "TYPE_UINT16",
    2: "TYPE_UINT32",
    3: "TYPE_UINT64",
    4: "TYPE_INT8",
    5: "TYPE_INT16",
    6: "TYPE_INT32",
    7: "TYPE_INT64",
    8: "TYPE_FP16",
    9: "TYPE_FP32",
    10: "TYPE_FP64",
    11: "TYPE_BOOL",
}
#: ``DALIDataType.NO_TYPE``: the pipeline does not declare the type.
NO_TYPE = -1


class NotAPipeline(ValueError):
    """The bytes are not a serialized DALI pipeline."""


@dataclass(frozen=True)
class IOInfo:
    """A pipeline input (an ``fn.external_source``) or output: name, DALI dtype (``NO_TYPE``
    when not declared), number of dimensions per sample (None when not declared), device."""

    name: str
    dtype: int = NO_TYPE
    ndim: int | None = None
    device: str = "cpu"

    @property
    def triton_type(self) -> str | None:
        """The config datatype (``TYPE_...``), None when the pipeline declares none."""
        if self.dtype == NO_TYPE:
            return None
        return DALI_TO_TRITON.get(self.dtype, "TYPE_INVALID")


@dataclass(frozen=True)
class PipelineInfo:
    """The declared interface of a serialized pipeline."""

    max_batch_size: int
    num_threads: int
    inputs: tuple[IOInfo, ...]
    outputs: tuple[IOInfo, ...]
    #: operators that run on the GPU (``device="gpu"`` or ``"mixed"``), as written in Python
    gpu_operators: tuple[str, ...]


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(buf):
            raise NotAPipeline("truncated varint")
        byte = buf[i]
        i += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, i
        if shift > 63:
            raise NotAPipeline("varint too long")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one protobuf message (wire format)."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise NotAPipeline("field number 0")
        value: int | bytes
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            length, i = _varint(buf, i)
            if i + length > len(buf):
                raise NotAPipeline("truncated field")
            value, i = bytes(buf[i : i + length]), i + length
        elif wire == 1:
            value, i = bytes(buf[i : i + 8]), i + 8
        elif wire == 5:
            value, i = bytes(buf[i : i + 4]), i + 4
        else:
            raise NotAPipeline(f"unsupported wire type {wire}")
        out.append((field, value))
    if i != len(buf):
        raise NotAPipeline("truncated message")
    return out


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise NotAPipeline("a string field holds a number")
    try:
        return value.decode()
    except UnicodeDecodeError as exc:
        raise NotAPipeline("a string field is not UTF-8") from exc


def _io(value: int | bytes) -> IOInfo:
    if not isinstance(value, bytes):
        raise NotAPipeline("an input/output is not a message")
    name, device, dtype, ndim = "", "cpu", NO_TYPE, None
    for field, item in _fields(value):
        if field == 1:
            name = _text(item)
        elif field == 2:
            device = _text(item)
        elif field == 5 and isinstance(item, int):
            dtype = _signed(item)
        elif field == 6 and isinstance(item, int):
            ndim = _signed(item)
    if not name:
        raise NotAPipeline("an input/output has no name")
    return IOInfo(name, dtype, None if ndim is None or ndim < 0 else ndim, device)


def _argument(value: bytes) -> tuple[str, list[int | bytes]]:
    name = ""
    values: list[int | bytes] = []
    for field, item in _fields(value):
        if field == 1:
            name = _text(item)
        elif field in (3, 4, 5, 6):
            values.append(item)
    return name, values


def parse_pipeline(serialized: bytes) -> PipelineInfo:
    """The interface of a serialized DALI pipeline; :class:`NotAPipeline` when it is not one."""
    if not serialized:
        raise NotAPipeline("the file is empty")
    max_batch_size = num_threads = -1
    inputs: list[IOInfo] = []
    outputs: list[IOInfo] = []
    gpu_ops: list[str] = []
    ops = 0
    for field, value in _fields(serialized):
        if field == 1 and isinstance(value, int):
            num_threads = _signed(value)
        elif field == 2 and isinstance(value, int):
            max_batch_size = _signed(value)
        elif field == 7:
            outputs.append(_io(value))
        elif field == 5:
            if not isinstance(value, bytes):
                raise NotAPipeline("an operator is not a message")
            ops += 1
            schema, inst_name, display, device = "", "", "", "cpu"
            op_outputs: list[IOInfo] = []
            args: dict[str, list[int | bytes]] = {}
            for op_field, item in _fields(value):
                if op_field == 1:
                    schema = _text(item)
                elif op_field == 3:
                    op_outputs.append(_io(item))
                elif op_field == 4 and isinstance(item, bytes):
                    arg, values = _argument(item)
                    args[arg] = values
                elif op_field == 5:
                    inst_name = _text(item)
            if not schema:
                raise NotAPipeline("an operator has no schema name")
            if args.get("device") and isinstance(args["device"][0], bytes):
                device = _text(args["device"][0])
            if args.get("_display_name") and isinstance(args["_display_name"][0], bytes):
                display = _text(args["_display_name"][0])
            module = ""
            if args.get("_module") and isinstance(args["_module"][0], bytes):
                module = _text(args["_module"][0])
            if device in ("gpu", "mixed") or any(o.device == "gpu" for o in op_outputs):
                label = f"{module}.{display}" if module and display else schema
                gpu_ops.append(f"{label} (device={device!r})")
            if schema == "ExternalSource":
                dtype_arg = args.get("dtype", [])
                ndim_arg = args.get("ndim", [])
                name = inst_name or (op_outputs[0].name if op_outputs else "")
                ndim = _signed(ndim_arg[0]) if ndim_arg and isinstance(ndim_arg[0], int) else None
                inputs.append(
                    IOInfo(
                        name=name,
                        dtype=(
                            _signed(dtype_arg[0])
                            if dtype_arg and isinstance(dtype_arg[0], int)
                            else NO_TYPE
                        ),
                        ndim=None if ndim is None or ndim < 0 else ndim,
                        device=device,
                    )
                )
    if ops == 0 or not outputs or max_batch_size <= 0:
        raise NotAPipeline("no operators, outputs or batch size")
    return PipelineInfo(
        max_batch_size=max_batch_size,
        num_threads=num_threads,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        gpu_operators=tuple(dict.fromkeys(gpu_ops)),
    )
