"""Small serialized DALI pipelines for tests and examples, and an in-process runner.

Imports DALI inside each function. Every pipeline is built with ``device_id=None`` (no GPU
needed to build or serialize, even the GPU one).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


def _dali() -> tuple[Any, Any, Any]:
    return (
        importlib.import_module("nvidia.dali"),
        importlib.import_module("nvidia.dali.fn"),
        importlib.import_module("nvidia.dali.types"),
    )


def serialize(
    define: Callable[[Any, Any], Any],
    *,
    batch_size: int = 8,
    output_dtype: Sequence[Any] | None = None,
    output_ndim: Sequence[int] | None = None,
) -> bytes:
    """``define(fn, types)`` returns the pipeline's output(s); the pipeline, serialized."""
    dali, fn, types = _dali()
    kwargs: dict[str, Any] = {}
    if output_dtype is not None:
        kwargs["output_dtype"] = list(output_dtype)
    if output_ndim is not None:
        kwargs["output_ndim"] = list(output_ndim)
    pipe = dali.Pipeline(batch_size=batch_size, num_threads=1, device_id=None, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pipe:
            outs = define(fn, types)
            pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
        data: bytes = pipe.serialize()
    return data


def arithmetic(batch_size: int = 8, declare: bool = True) -> bytes:
    """``INPUT0`` (FP32, 1-D samples) → ``(INPUT0 * 2, INPUT0 + 1)``; with ``declare`` the
    input's dtype/ndim and the outputs' dtype/ndim are in the pipeline (auto-complete)."""
    _, _, types = _dali()

    def define(fn: Any, types: Any) -> Any:
        if declare:
            x = fn.external_source(device="cpu", name="INPUT0", dtype=types.FLOAT, ndim=1)
        else:
            x = fn.external_source(device="cpu", name="INPUT0")
        return x * 2, x + 1

    if not declare:
        return serialize(define, batch_size=batch_size)
    return serialize(
        define, batch_size=batch_size, output_dtype=[types.FLOAT] * 2, output_ndim=[1, 1]
    )


def decode_resize(size: int = 16, batch_size: int = 8) -> bytes:
    """``IMAGE`` (encoded bytes, UINT8 1-D) → decoded RGB resized to ``size`` x ``size``
    (UINT8 HWC)."""
    _, _, types = _dali()

    def define(fn: Any, types: Any) -> Any:
        x = fn.external_source(device="cpu", name="IMAGE", dtype=types.UINT8, ndim=1)
        image = fn.decoders.image(x, device="cpu", output_type=types.RGB)
        return fn.resize(image, resize_x=size, resize_y=size)

    return serialize(define, batch_size=batch_size, output_dtype=[types.UINT8], output_ndim=[3])


def on_gpu(batch_size: int = 4) -> bytes:
    """``INPUT0`` (FP32 1-D) copied to the GPU and doubled there (needs a KIND_GPU instance)."""
    _, _, types = _dali()

    def define(fn: Any, types: Any) -> Any:
        x = fn.external_source(device="cpu", name="INPUT0", dtype=types.FLOAT, ndim=1)
        return x.gpu() * 2

    return serialize(define, batch_size=batch_size, output_dtype=[types.FLOAT], output_ndim=[1])


def run(
    serialized: bytes, feeds: Mapping[str, Sequence[np.ndarray]], device_id: int | None = None
) -> list[list[np.ndarray]]:
    """Run one iteration of ``serialized`` in-process: ``feeds`` maps each external source to
    its samples; returns each output's samples (the reference the tests compare with)."""
    dali, _, _ = _dali()
    count = len(next(iter(feeds.values())))
    pipe = dali.Pipeline.deserialize(
        serialized_pipeline=serialized,
        batch_size=max(count, 1),
        device_id=device_id,
        prefetch_queue_depth=1,
    )
    pipe.build()
    for name, samples in feeds.items():
        pipe.feed_input(name, list(samples))
    outputs = pipe.run()
    result = []
    for out in outputs:
        if hasattr(out, "as_cpu"):
            out = out.as_cpu()
        result.append([np.array(out[i]) for i in range(len(out))])
    return result
