"""The response-cache rows of ``run.py``: one model with ``response_cache { enable: true }``
hit by perf_analyzer with the same input on every request (``--input-data zero``), against
the same model without the cache, both served by one ``tritonx serve --cache-config
local,size=...`` so the ratio is what a hit saves (or costs) in this run.

Two models: add_sub (ONNX INT32 [16], ~0.1 ms of compute: the ratio is the cache's own cost
against a trivial execution) and the ResNet-18-shaped CNN (1x3x224x224 FP32, ~20 ms: the
ratio is what a hit saves on a real model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PORTS = (28940, 28941, 28942)
#: --cache-config local,size=... (a few hundred entries of either model; every request hits one)
CACHE_BYTES = 64 * 1024 * 1024
ONE = "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
CACHED = "response_cache { enable: true }\n"
ORT_THREADS = (
    'parameters { key: "intra_op_thread_count", value: { string_value: "2" } }\n'
    'parameters { key: "inter_op_thread_count", value: { string_value: "1" } }\n'
)


def build(work: Path, write_model: Callable[..., None], smoke: bool) -> tuple[Path, list[str]]:
    """A repository with ``<model>_cached`` and ``<model>_nocache`` of each model; the model
    names measured."""
    from onnx import TensorProto

    from tritonx_backend_onnx.models import add_sub, resnet18

    repo = work / "cache-repo"
    int32_io = (
        'input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 16 ] }, '
        '{ name: "INPUT1", data_type: TYPE_INT32, dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 16 ] }, '
        '{ name: "OUTPUT1", data_type: TYPE_INT32, dims: [ 16 ] } ]\n'
    )
    cnn_io = (
        'input [ { name: "input", data_type: TYPE_FP32, dims: [ 3, 224, 224 ] } ]\n'
        'output [ { name: "logits", data_type: TYPE_FP32, dims: [ 1000 ] } ]\n'
    )
    models = {
        "add_sub": (
            f"max_batch_size: 16\n{int32_io}dynamic_batching {{ }}\n{ONE}",
            add_sub(TensorProto.INT32, ("batch", 16)),
        ),
    }
    if not smoke:
        models["cnn"] = (
            f"max_batch_size: 16\n{cnn_io}dynamic_batching {{ max_queue_delay_microseconds: "
            f"2000 }}\n{ONE}{ORT_THREADS}",
            resnet18(),
        )
    names: list[str] = []
    for base, (config, onnx) in models.items():
        for suffix, extra in (("_nocache", ""), ("_cached", CACHED)):
            write_model(
                repo,
                base + suffix,
                f'platform: "onnxruntime_onnx"\n{config}{extra}',
                {"model.onnx": onnx},
            )
            names.append(base + suffix)
    return repo, names


def points(
    work: Path,
    log_dir: Path,
    window_ms: int,
    concurrencies: Sequence[int],
    protocols: Sequence[str],
    *,
    smoke: bool,
    point: Callable[..., Any],
    measure: Callable[..., Any],
    process: Callable[..., Any],
    tritonx_cmd: Callable[..., list[str]],
    write_model: Callable[..., None],
) -> list[Any]:
    """The rows: each model without and with the cache, per protocol and concurrency.

    ``point``, ``measure`` (perf_analyzer), ``process``, ``tritonx_cmd`` and ``write_model``
    are run.py's.
    """
    repo, names = build(work, write_model, smoke)
    rows: list[Any] = []
    cmd = tritonx_cmd(repo, PORTS, "--cache-config", f"local,size={CACHE_BYTES}")
    with process(cmd, PORTS[0], log_dir / "cache.log"):
        for proto in protocols:
            url = f"127.0.0.1:{PORTS[0] if proto == 'http' else PORTS[1]}"
            for c in concurrencies:
                for model in names:
                    rows.append(
                        measure(
                            point("cache", "tritonx", proto, model, c),
                            url,
                            window_ms,
                            log_dir,
                            extra=("--input-data", "zero"),
                        )
                    )
    return rows


def ratio_row(p: Any, by: dict[tuple[str, str, str, int], Any]) -> tuple[str, str]:
    """(ratio, vs) for a cache row of the table: a cached model against itself uncached."""
    if not p.model.endswith("_cached"):
        return "", ""
    base = by.get(
        (p.target, p.protocol, p.model.removesuffix("_cached") + "_nocache", p.concurrency)
    )
    if base is None or not base.infer_per_s or not p.infer_per_s:
        return "", ""
    return (
        f"{p.infer_per_s / base.infer_per_s:.2f}x",
        "the same model without the cache (every request a hit)",
    )
