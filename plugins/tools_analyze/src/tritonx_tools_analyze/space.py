"""The config space: variants of a model's config, applied as Triton JSON ModelConfig dicts.

A :class:`Variant` names the fields it changes (instance count, ``max_batch_size``, dynamic
batching with its queue delay and preferred sizes, backend thread parameters); everything
else stays as the model's own ``config.pbtxt`` has it. The same :func:`apply` makes the load
API's ``config`` override and the ``config.pbtxt`` written for the best variant.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format

from tritonx.proto import model_config_pb2

#: Backend parameters that set thread counts, by backend (what the backend reads).
THREAD_PARAMETERS: dict[str, tuple[str, ...]] = {
    "onnxruntime": ("intra_op_thread_count", "inter_op_thread_count"),
}


@dataclass(frozen=True)
class Variant:
    """One point of the config space; ``None`` fields keep the model's own value."""

    name: str
    instance_count: int | None = None
    max_batch_size: int | None = None
    #: None: as configured; False: no dynamic batching; True: dynamic batching
    dynamic_batching: bool | None = None
    queue_delay_us: int | None = None
    preferred_batch_sizes: tuple[int, ...] | None = None
    #: backend parameters (thread counts), ``(key, value)`` pairs
    parameters: tuple[tuple[str, str], ...] = field(default=())

    @property
    def is_default(self) -> bool:
        """True for the model's own config (loaded without an override)."""
        return (
            self.instance_count is None
            and self.max_batch_size is None
            and self.dynamic_batching is None
            and not self.parameters
        )

    def describe(self) -> dict[str, Any]:
        """The changed fields, for the results table."""
        return {
            "instance_count": self.instance_count,
            "max_batch_size": self.max_batch_size,
            "dynamic_batching": self.dynamic_batching,
            "queue_delay_us": self.queue_delay_us,
            "preferred_batch_sizes": list(self.preferred_batch_sizes or ()),
            "parameters": dict(self.parameters),
        }


def apply(config: dict[str, Any], variant: Variant) -> dict[str, Any]:
    """A copy of ``config`` (a JSON ModelConfig, proto field names) with ``variant`` applied."""
    out = copy.deepcopy(config)
    if variant.instance_count is not None:
        group = dict((out.get("instance_group") or [{"kind": "KIND_CPU"}])[0])
        group["count"] = variant.instance_count  # one group: its kind (and devices) kept
        out["instance_group"] = [group]
    if variant.max_batch_size is not None:
        out["max_batch_size"] = variant.max_batch_size
    if variant.dynamic_batching is False:
        out.pop("dynamic_batching", None)
    elif variant.dynamic_batching:
        batching: dict[str, Any] = {}
        if variant.queue_delay_us:
            batching["max_queue_delay_microseconds"] = variant.queue_delay_us
        if variant.preferred_batch_sizes:
            batching["preferred_batch_size"] = list(variant.preferred_batch_sizes)
        out["dynamic_batching"] = batching
    if variant.parameters:
        params = dict(out.get("parameters") or {})
        for key, value in variant.parameters:
            params[key] = {"string_value": value}
        out["parameters"] = params
    return out


def read_config(model_dir: Path) -> dict[str, Any]:
    """The model's ``config.pbtxt`` as a JSON ModelConfig dict (``{}`` when it has none).

    :raises click.UsageError: (through the caller) for a config that does not parse.
    """
    path = model_dir / "config.pbtxt"
    if not path.is_file():
        return {}
    message = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def to_pbtxt(config: dict[str, Any]) -> str:
    """``config`` (a JSON ModelConfig dict) as config.pbtxt text."""
    message = json_format.ParseDict(config, model_config_pb2.ModelConfig())
    return text_format.MessageToString(message)


def variants(
    normalized: dict[str, Any], *, exhaustive: bool, cpu_count: int | None = None
) -> list[Variant]:
    """The variants to measure, the model's own config first.

    :param normalized: the config the server reports for the loaded model (after
        auto-complete), which tells the batching limit, scheduler and backend.
    :param exhaustive: the full product (instances 1-4, batch limits, queue delays,
        preferred sizes, thread counts); else a quick subset (instances 1-2, batching off or
        with a short delay, threads as configured or 1 per instance).
    """
    cpus = cpu_count or os.cpu_count() or 1
    mbs = int(normalized.get("max_batch_size", 0) or 0)
    backend = str(normalized.get("backend") or "")
    # sequence/ensemble schedulers are not dynamic-batching candidates
    can_batch = mbs > 0 and not (
        "sequence_batching" in normalized or "ensemble_scheduling" in normalized
    )
    thread_keys = THREAD_PARAMETERS.get(backend, ())
    if exhaustive:
        counts: list[int] = [1, 2, 3, 4]
        limits: list[int | None] = [None, *(s for s in (mbs * 2, mbs * 4) if can_batch)]
        delays = [0, 100, 1000, 5000]
        threads = sorted({1, 2, cpus}) if thread_keys else []
    else:
        counts = [1, 2]
        limits = [None]
        delays = [100]
        threads = [1] if thread_keys else []
    # None: as the model has it (its own dynamic batching settings, when it has some)
    batching: list[tuple[bool | None, int | None, tuple[int, ...] | None]] = [(None, None, None)]
    if can_batch:
        batching += [(False, None, None)] + [(True, d, None) for d in delays]
        if exhaustive:
            batching += [(True, 100, (max(1, mbs // 2), mbs))]
    thread_options: list[tuple[tuple[str, str], ...]] = [()]
    for n in threads:
        thread_options.append(((thread_keys[0], str(n)), *((k, "1") for k in thread_keys[1:])))
    out = [Variant("default")]
    # a variant that gives the same config as the model's own, or as an earlier variant, is
    # measured once
    seen = {json.dumps(normalized, sort_keys=True)}
    for count, limit, (db, delay, preferred), params in itertools.product(
        counts, limits, batching, thread_options
    ):
        parts = [f"{count}inst"]
        if limit is not None:
            parts.append(f"mbs{limit}")
        if db is False:
            parts.append("nobatch")
        elif db:
            parts.append(f"dyn{delay}us")
            if preferred:
                parts.append("pref" + "-".join(map(str, preferred)))
        if params:
            parts.append(f"thr{params[0][1]}")
        variant = Variant(
            "_".join(parts),
            instance_count=count,
            max_batch_size=limit,
            dynamic_batching=db,
            queue_delay_us=delay,
            preferred_batch_sizes=preferred,
            parameters=params,
        )
        key = json.dumps(apply(normalized, variant), sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        out.append(variant)
    return out
