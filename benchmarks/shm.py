"""The system shared-memory rows of ``run.py``: a 4 MB FP32 identity model (ONNX ``Identity``,
1,048,576 elements, no batching) driven by perf_analyzer over binary HTTP and gRPC, then over
the same protocols with ``--shared-memory system`` (inputs and outputs in POSIX shared memory
registered with the server; only the request and response metadata cross the socket).

One ``tritonx serve --allow-client-shm=true`` serves every row, so the ratio (shared memory /
tensors on the wire, same protocol, same concurrency) is measured in one run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PORTS = (28950, 28951, 28952)
MODEL = "identity_4mb"
ELEMENTS = 1 << 20  # FP32: 4 MiB per tensor
#: the ``model`` of the shared-memory rows (the model served is the same)
SHM_SUFFIX = " (shm)"
ONE = "instance_group [ { count: 1, kind: KIND_CPU } ]\n"


def build(work: Path, write_model: Callable[..., None]) -> Path:
    """A repository with the 4 MB identity model."""
    from onnx import TensorProto

    from tritonx_backend_onnx.models import identity

    repo = work / "shm-repo"
    config = (
        'platform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        f'input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ {ELEMENTS} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ {ELEMENTS} ] }} ]\n{ONE}'
    )
    write_model(repo, MODEL, config, {"model.onnx": identity(TensorProto.FLOAT, [ELEMENTS])})
    return repo


def points(
    work: Path,
    log_dir: Path,
    window_ms: int,
    concurrencies: Sequence[int],
    protocols: Sequence[str],
    *,
    point: Callable[..., Any],
    measure: Callable[..., Any],
    process: Callable[..., Any],
    tritonx_cmd: Callable[..., list[str]],
    write_model: Callable[..., None],
) -> list[Any]:
    """The rows: per protocol and concurrency, tensors on the wire then in shared memory.

    ``point``, ``measure`` (perf_analyzer), ``process``, ``tritonx_cmd`` and ``write_model``
    are run.py's.
    """
    repo = build(work, write_model)
    rows: list[Any] = []
    cmd = tritonx_cmd(repo, PORTS, "--allow-client-shm", "true")
    with process(cmd, PORTS[0], log_dir / "shm.log"):
        for proto in protocols:
            url = f"127.0.0.1:{PORTS[0] if proto == 'http' else PORTS[1]}"
            for c in concurrencies:
                wire = point("shm", "tritonx", proto, MODEL, c)
                rows.append(measure(wire, url, window_ms, log_dir))
                shared = measure(
                    point("shm", "tritonx", proto, MODEL, c),
                    url,
                    window_ms,
                    log_dir,
                    extra=(
                        "--shared-memory",
                        "system",
                        "--output-shared-memory-size",
                        str(ELEMENTS * 4),
                    ),
                )
                shared.model = MODEL + SHM_SUFFIX  # measured on MODEL, listed apart
                rows.append(shared)
    return rows


def ratio_row(p: Any, by: dict[tuple[str, str, str, int], Any]) -> tuple[str, str]:
    """(ratio, vs) for a shared-memory row: against the same protocol with tensors on the
    wire (binary HTTP body / gRPC raw contents)."""
    if not p.model.endswith(SHM_SUFFIX):
        return "", ""
    base = by.get((p.target, p.protocol, p.model.removesuffix(SHM_SUFFIX), p.concurrency))
    if base is None or not base.infer_per_s or not p.infer_per_s:
        return "", ""
    wire = "binary HTTP" if p.protocol == "http" else "gRPC raw contents"
    return f"{p.infer_per_s / base.infer_per_s:.2f}x", f"the same tensors over {wire}"
