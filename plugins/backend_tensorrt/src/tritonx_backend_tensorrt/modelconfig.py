"""Model-config work of the TensorRT backend, on a plain description of an engine's I/O.

:class:`EngineIO` lists what ``ICudaEngine`` reports for each I/O tensor; everything here
(auto-complete, checking a config against an engine, optimization-profile selection,
parameters) works on it without TensorRT, so it is tested on machines without a GPU.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError, invalid_arg

log = logging.getLogger("tritonx.backend.tensorrt")

#: TensorRT ``DataType`` member names -> Triton config datatypes (Triton's table).
TRT_TO_CONFIG = {
    "FLOAT": "TYPE_FP32",
    "HALF": "TYPE_FP16",
    "INT8": "TYPE_INT8",
    "UINT8": "TYPE_UINT8",
    "BF16": "TYPE_BF16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "BOOL": "TYPE_BOOL",
}


@dataclass(frozen=True)
class EngineIO:
    """One I/O tensor of an engine.

    :param name: the tensor name.
    :param is_input: input (True) or output.
    :param trt_type: the TensorRT ``DataType`` member name (``FLOAT``, ``HALF``...).
    :param dims: the engine's shape, -1 for dynamic dimensions.
    :param profiles: for inputs, ``(min, opt, max)`` shapes per optimization profile.
    :param is_shape_tensor: a shape tensor (``isShapeInferenceIO``).
    :param linear: whether the I/O format is ``LINEAR``.
    """

    name: str
    is_input: bool
    trt_type: str
    dims: tuple[int, ...]
    profiles: tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = ()
    is_shape_tensor: bool = False
    linear: bool = True

    @property
    def config_type(self) -> str:
        return TRT_TO_CONFIG.get(self.trt_type, "TYPE_INVALID")


def profile_index(name: str) -> int:
    """Triton's ``GetProfileIndex``: an instance group's ``profile`` entry as an index."""
    if not name:
        raise invalid_arg("profile name must not be empty")
    try:
        return int(name)
    except ValueError:
        raise invalid_arg(f"unable to parse '{name}': not an integer profile index") from None


def group_profiles(config: Any, group_name: str | None = None) -> list[tuple[str, int]]:
    """``(name, index)`` of the profiles an instance group selects (``[("default", 0)]``
    when it names none); all groups' profiles when ``group_name`` is None."""
    out: list[tuple[str, int]] = []
    for group in config.instance_group:
        if group_name is not None and group.name != group_name:
            continue
        out.extend((p, profile_index(p)) for p in group.profile)
    return out or [("default", 0)]


def check_profiles(
    model: str, instance: str, profiles: Sequence[tuple[str, int]], count: int
) -> None:
    """Every selected profile must exist in the engine (Triton's message)."""
    for name, index in profiles:
        if not 0 <= index < count:
            raise invalid_arg(
                f"Can not set the specified optimization profile {name}[{index}] for {instance}. "
                f"Expected optimization profile index range 0-{count - 1}"
            )


def max_batch_size(io: Sequence[EngineIO], profiles: Sequence[int]) -> int:
    """The largest batch the selected profiles accept: per profile the smallest maximum first
    dimension over the inputs; 0 when some input's first dimension is not dynamic."""
    inputs = [t for t in io if t.is_input and not t.is_shape_tensor]
    if not inputs or any(not t.dims or t.dims[0] != -1 for t in inputs):
        return 0
    outputs = [t for t in io if not t.is_input]
    if any(not t.dims or t.dims[0] != -1 for t in outputs):
        return 0
    best = 0
    for p in profiles:
        per = min((t.profiles[p][2][0] for t in inputs if p < len(t.profiles)), default=0)
        best = max(best, per)
    return best


def _scheduler(config: Mapping[str, Any]) -> bool:
    return any(
        k in config for k in ("dynamic_batching", "sequence_batching", "ensemble_scheduling")
    )


def auto_complete(
    config: Mapping[str, Any], io: Sequence[EngineIO], profile_count: int
) -> dict[str, Any]:
    """Triton's TensorRT auto-complete on a config in JSON form; returns the completed copy.

    Fills ``max_batch_size`` (from the selected profiles), ``dynamic_batching`` when it is > 1
    and no scheduler is set, and every input/output (or the missing ``data_type`` / ``dims`` of
    listed ones) from the engine.
    """
    out = copy.deepcopy(dict(config))
    name = out.get("name", "")
    profiles = _selected_profiles(out, name, profile_count)
    hint, shaped = _batching_hint(out, io, name)
    _complete_max_batch_size(out, name, max_batch_size(io, profiles or [0]), hint, shaped)
    batching = int(out.get("max_batch_size", 0)) > 0
    if int(out["max_batch_size"]) > 1 and not _scheduler(out):
        out["dynamic_batching"] = {}
    for kind in ("input", "output"):
        _complete_io(
            out, kind, [_reference(t, batching) for t in io if t.is_input == (kind == "input")]
        )
    return out


def _selected_profiles(out: Mapping[str, Any], name: str, profile_count: int) -> list[int]:
    """The profile indexes the config's instance groups select, each checked against the
    engine's ``profile_count``."""
    profiles = [
        profile_index(p) for g in out.get("instance_group", []) for p in g.get("profile", [])
    ]
    for p in profiles:
        if not 0 <= p < profile_count:
            raise TritonXError(
                f"unable to autofill for '{name}', configuration specified invalid profile {p} "
                f". Number of profiles supported by TensorRT engine: {profile_count}",
                Code.INTERNAL,
            )
    return profiles


def _batching_hint(
    out: Mapping[str, Any], io: Sequence[EngineIO], name: str
) -> tuple[bool | None, int]:
    """Whether the listed inputs and outputs hint at batching (None: no hint), from their
    dims against the engine's (a ragged one hints it), and how many list dims."""
    by_name = {t.name: t for t in io}
    hint: bool | None = None
    shaped = 0
    for kind in ("input", "output"):
        for item in out.get(kind, []):
            dims = (item.get("reshape") or {}).get("shape") or item.get("dims") or []
            if item.get("allow_ragged_batch"):
                hint = True
                continue
            engine = by_name.get(item.get("name", ""))
            if engine is None or engine.is_input != (kind == "input"):
                allowed = ", ".join(t.name for t in io if t.is_input == (kind == "input"))
                raise invalid_arg(
                    f"unexpected inference {kind} '{item.get('name', '')}', allowed {kind}s "
                    f"are: {allowed}"
                )
            if dims:
                shaped += 1
                batch = len(engine.dims) == len(dims) + 1
                if hint is not None and hint != batch:
                    raise TritonXError(
                        f"unable to autofill for '{name}', model tensor configurations are "
                        "contradicting each other in terms of whether batching is supported",
                        Code.INTERNAL,
                    )
                hint = batch
    return hint, shaped


def _complete_max_batch_size(
    out: dict[str, Any], name: str, engine_max: int, hint: bool | None, shaped: int
) -> None:
    """Set ``max_batch_size`` when the config has none (the engine's, 0 when the listed dims
    say the model does not batch); refuse one the engine cannot run."""
    if hint and engine_max == 0:
        raise TritonXError(
            f"autofill failed for model '{name}': model tensor shape configuration hints for "
            "dynamic batching but the underlying engine doesn't support batching.",
            Code.INTERNAL,
        )
    if shaped and not hint:
        engine_max = 0
    configured = int(out.get("max_batch_size", 0) or 0)
    if configured == 0:
        out["max_batch_size"] = engine_max
    elif configured > engine_max:
        raise TritonXError(
            f"autofill failed for model '{name}': configuration specified max-batch "
            f"{configured} but TensorRT engine only supports max-batch {engine_max}",
            Code.INTERNAL,
        )


def _complete_io(out: dict[str, Any], kind: str, reference: list[dict[str, Any]]) -> None:
    """Fill the config's ``kind`` (``input`` or ``output``) list from the engine's
    ``reference`` entries: the whole list when empty, else the listed entries' missing
    ``data_type`` and ``dims``."""
    listed = out.get(kind) or []
    if not listed:
        out[kind] = reference
        return
    refs = {r["name"]: r for r in reference}
    for item in listed:
        ref = refs.get(item.get("name", ""))
        if ref is None:
            continue
        if item.get("data_type", "TYPE_INVALID") in ("", "TYPE_INVALID"):
            item["data_type"] = ref["data_type"]
        if not item.get("dims"):
            item["dims"] = ref["dims"]
            if "reshape" in ref:
                item["reshape"] = ref["reshape"]


def _reference(t: EngineIO, batching: bool) -> dict[str, Any]:
    dims = list(t.dims[1:] if batching else t.dims)
    item: dict[str, Any] = {"name": t.name.split(" ")[0], "data_type": t.config_type}
    if t.is_shape_tensor:
        item["dims"] = [t.dims[0] - 1 if batching else t.dims[0]] if t.dims else []
        item["is_shape_tensor"] = True
    elif dims:
        item["dims"] = dims
    else:
        item["dims"] = [1]
        item["reshape"] = {"shape": []}
    if not t.linear:
        item["is_non_linear_format_io"] = True
    return item


def validate(config: ModelConfig, io: Sequence[EngineIO], instance: str) -> None:
    """Refuse a config that contradicts the engine, and what this backend does not run
    (shape tensors, non-linear I/O formats, unsupported datatypes)."""
    name = config.name
    inputs = {t.name: t for t in io if t.is_input}
    outputs = {t.name: t for t in io if not t.is_input}
    if len(config.inputs) > len(inputs):
        raise invalid_arg(
            f"unable to load model '{name}', configuration expects {len(config.inputs)} inputs, "
            f"model provides at most {len(inputs)}"
        )
    for kind, ios, engine in (
        ("input", config.inputs, inputs),
        ("output", config.outputs, outputs),
    ):
        for item in ios:
            t = engine.get(item.name)
            if t is None:
                raise invalid_arg(
                    f"unexpected inference {kind} '{item.name}', allowed {kind}s are: "
                    + ", ".join(engine)
                )
            if t.config_type == "TYPE_INVALID":
                raise invalid_arg(
                    f"unsupported datatype {t.trt_type} for {kind} '{item.name}' for model '{name}'"
                )
            if t.config_type != item.datatype.config_name:
                raise invalid_arg(
                    f"unexpected datatype {item.datatype.config_name} for {kind} '{item.name}' "
                    f"for model '{name}', the engine's is {t.config_type}"
                )
            if t.is_shape_tensor:
                raise TritonXError(
                    f"{kind} '{item.name}' for model '{name}' is a shape tensor: shape tensors "
                    "are not supported by tritonx's tensorrt backend",
                    Code.UNSUPPORTED,
                )
            if not t.linear:
                raise TritonXError(
                    f"{kind} '{item.name}' for model '{name}' uses a non-linear IO format, "
                    "which tritonx's tensorrt backend does not support",
                    Code.UNSUPPORTED,
                )
            dims = item.reshape if item.reshape is not None else item.dims
            full = ((-1, *dims) if config.max_batch_size > 0 else tuple(dims)) or (1,)
            engine_dims = t.dims or (1,)
            if len(full) != len(engine_dims) or any(
                e != -1 and c != -1 and e != c for e, c in zip(engine_dims, full, strict=True)
            ):
                raise invalid_arg(
                    f"model '{name}', tensor '{item.name}': the model expects shape "
                    f"{_shape(t.dims)} but the model configuration specifies {_shape(full)}"
                )
    configured = {io_.name for io_ in config.inputs} | {io_.name for io_ in config.outputs}
    for t in io:
        if t.name not in configured:
            raise invalid_arg(
                f"expected configuration for {'input' if t.is_input else 'output'} '{t.name}' "
                f"for {instance}"
            )


def _shape(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def select_profile(
    shapes: Mapping[str, tuple[int, ...]],
    io: Sequence[EngineIO],
    profiles: Sequence[tuple[str, int]],
) -> int:
    """The first selected profile whose ``[min, max]`` ranges hold every input shape."""
    inputs = {t.name: t for t in io if t.is_input}
    for _, index in profiles:
        fits = True
        for name, shape in shapes.items():
            t = inputs.get(name)
            if t is None or index >= len(t.profiles):
                continue
            low, _, high = t.profiles[index]
            if len(shape) != len(low) or any(
                s < lo or s > hi for s, lo, hi in zip(shape, low, high, strict=True)
            ):
                fits = False
                break
        if fits:
            return index
    listed = " ".join(f"{n}[{i}]" for n, i in profiles)
    raise invalid_arg(
        f"failed to find any Optimization Profile among [ {listed}] to support the requested "
        "dimensions (or shape values), proceeding with first profile."
    )


ALLOCATION_STRATEGIES = ("STATIC", "ON_PROFILE_CHANGE")


def read_parameters(config: ModelConfig, instance: str) -> str:
    """The ``execution_context_allocation_strategy`` (Triton's values); parameters and
    optimizations this backend cannot honour are refused."""
    params = config.parameters
    strategy = params.get("execution_context_allocation_strategy", "STATIC")
    if strategy not in ALLOCATION_STRATEGIES:
        raise invalid_arg(
            f"Invalid value for 'execution_context_allocation_strategy': '{strategy}' for model "
            f"instance '{instance}'. Supported values are 'STATIC' and 'ON_PROFILE_CHANGE'."
        )
    if params.get("enable_multi_device", "").lower() in ("1", "true"):
        raise TritonXError(
            f"model '{config.name}': TensorRT Multi-Device (enable_multi_device) is not "
            "supported by tritonx's tensorrt backend",
            Code.UNSUPPORTED,
        )
    cuda = config.raw.optimization.cuda
    refused = [
        field
        for field, on in (
            ("graphs", cuda.graphs),
            ("graph_spec", len(cuda.graph_spec) > 0),
            ("busy_wait_events", cuda.busy_wait_events),
            ("output_copy_stream", cuda.output_copy_stream),
        )
        if on
    ]
    if refused:
        raise TritonXError(
            f"model '{config.name}': optimization.cuda {', '.join(refused)} "
            "is not supported by tritonx's tensorrt backend (CUDA graphs and extra copy "
            "streams are not implemented)",
            Code.UNSUPPORTED,
        )
    return strategy
