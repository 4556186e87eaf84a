"""The ``parameters`` of an OpenVINO model, read as Triton's openvino backend reads them, plus
``INFERENCE_PRECISION_HINT`` (this backend's own).

Pure Python: nothing here imports openvino, so the rules are testable on their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tritonx.errors import invalid_arg

#: Every key this backend reads; any other ``parameters`` key is refused (Triton ignores them).
KNOWN_KEYS = (
    "PERFORMANCE_HINT",
    "NUM_STREAMS",
    "INFERENCE_NUM_THREADS",
    "COMPILATION_NUM_THREADS",
    "HINT_BF16",
    "INFERENCE_PRECISION_HINT",
    "CPU_EXTENSION_PATH",
    "TARGET_DEVICE",
    "RESHAPE_IO_LAYERS",
    "ENABLE_BATCH_PADDING",
    "SKIP_OV_DYNAMIC_BATCHSIZE",
)

#: ``INFERENCE_PRECISION_HINT`` values (OpenVINO element type names).
PRECISIONS = ("f32", "bf16", "f16")

#: The precision used when the model says nothing: OpenVINO's CPU plugin would pick bf16 on
#: CPUs with AMX/AVX512-BF16, which changes FP32 results.
DEFAULT_PRECISION = "f32"

_YES = ("yes", "true", "on", "1")
_NO = ("no", "false", "off", "0")


def _flag(key: str, value: str) -> bool:
    """Triton reads these flags as ``YES`` (any case) or not; here anything other than a clear
    yes/no (``YES``/``NO``, ``true``/``false``, ``on``/``off``, ``1``/``0``) is refused."""
    v = value.strip().lower()
    if v in _YES:
        return True
    if v in _NO:
        return False
    raise invalid_arg(f"expected the parameter '{key}' to be YES or NO, got {value}")


def _count(key: str, value: str) -> int:
    v = value.strip()
    if not v.isdigit():
        raise invalid_arg(
            f"expected the parameter '{key}' to be a non-negative number, got {v.lower()}"
        )
    return int(v)


@dataclass
class OpenVINOSettings:
    """What an instance is compiled with.

    :param properties: OpenVINO properties for ``compile_model`` (``PERFORMANCE_HINT``,
        ``NUM_STREAMS``, ``INFERENCE_NUM_THREADS``, ``COMPILATION_NUM_THREADS``,
        ``INFERENCE_PRECISION_HINT``).
    :param device: the OpenVINO device (``TARGET_DEVICE``, default ``CPU``).
    :param cpu_extension: a shared library of custom operations (``CPU_EXTENSION_PATH``).
    :param reshape_io: reshape the model's inputs to the config's dims (``RESHAPE_IO_LAYERS``).
    :param batch_padding: pad batches to ``max_batch_size`` (``ENABLE_BATCH_PADDING``).
    :param static_batch: compile with a fixed batch of ``max_batch_size`` instead of a dynamic
        batch dimension (``SKIP_OV_DYNAMIC_BATCHSIZE``, implied by ``ENABLE_BATCH_PADDING``).
    """

    properties: dict[str, Any] = field(default_factory=dict)
    device: str = "CPU"
    cpu_extension: str = ""
    reshape_io: bool = False
    batch_padding: bool = False
    static_batch: bool = False


def parse_settings(parameters: Mapping[str, str]) -> OpenVINOSettings:
    """Read ``parameters`` (config.pbtxt ``parameters`` as strings) into settings.

    Values are checked with Triton's messages; unknown keys are INVALID_ARG with Triton's
    "not yet supported" message.
    """
    s = OpenVINOSettings()
    for key in parameters:
        if key not in KNOWN_KEYS:
            raise invalid_arg(f"the parameter '{key}' is not yet supported by openvino backend")
    p = {k: v for k, v in parameters.items()}
    for key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
        if p.get(key, "") != "":
            s.properties[key] = _count(key, p[key])
    if p.get("NUM_STREAMS", "") != "":
        v = p["NUM_STREAMS"].strip().lower()
        if v in ("auto", "numa"):
            s.properties["NUM_STREAMS"] = v.upper()
        elif v.isdigit():
            s.properties["NUM_STREAMS"] = int(v)
        else:
            raise invalid_arg(
                f"expected the parameter 'NUM_STREAMS' to be either AUTO/NUMA/<int_value>, got {v}"
            )
    if p.get("PERFORMANCE_HINT", "") != "":
        v = p["PERFORMANCE_HINT"].strip().lower()
        if v not in ("latency", "throughput", "cumulative_throughput"):
            raise invalid_arg(
                "expected the parameter 'PERFORMANCE_HINT' to be "
                f"LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got {v}"
            )
        s.properties["PERFORMANCE_HINT"] = v.upper()
    precision = DEFAULT_PRECISION
    if p.get("HINT_BF16", "") != "":
        v = p["HINT_BF16"].strip().lower()
        if v != "yes":
            raise invalid_arg(f"expected the parameter 'HINT_BF16' to be YES, got {v}")
        precision = "bf16"
    if p.get("INFERENCE_PRECISION_HINT", "") != "":
        v = p["INFERENCE_PRECISION_HINT"].strip().lower()
        if v not in PRECISIONS:
            raise invalid_arg(
                "expected the parameter 'INFERENCE_PRECISION_HINT' to be one of "
                f"{', '.join(PRECISIONS)}, got {v}"
            )
        if "HINT_BF16" in p and v != "bf16":
            raise invalid_arg(
                f"the parameters 'HINT_BF16' and 'INFERENCE_PRECISION_HINT' ({v}) contradict "
                "each other"
            )
        precision = v
    s.properties["INFERENCE_PRECISION_HINT"] = precision
    if p.get("TARGET_DEVICE", "").strip():
        s.device = p["TARGET_DEVICE"].strip().upper()
    s.cpu_extension = p.get("CPU_EXTENSION_PATH", "").strip()
    for key, attr in (
        ("RESHAPE_IO_LAYERS", "reshape_io"),
        ("ENABLE_BATCH_PADDING", "batch_padding"),
        ("SKIP_OV_DYNAMIC_BATCHSIZE", "static_batch"),
    ):
        if p.get(key, "").strip():
            setattr(s, attr, _flag(key, p[key]))
    if s.batch_padding:
        s.static_batch = True
    return s
