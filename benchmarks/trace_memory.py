"""Resident memory of a server that a client makes trace every request with its tensors
(issue 29).

Starts ``tritonx serve`` as a subprocess with a trace file configured and tracing off
(``--trace-config triton,file=<tmp>/trace.json``: the usual start-up setting), with one ONNX
model, ``big_identity`` (FP32 ``[-1]``, no batching). Then, as any unauthenticated client
could:

1. ``--warmup`` untraced requests of the same size (so that the allocator's pools and the
   transports' buffers are warm), then the server's resident memory (``VmRSS`` of
   ``/proc/<pid>/status``): **start**;
2. ``update_trace_settings(trace_level=["TENSORS"], trace_rate="1", trace_count="-1")``
   (``tritonclient.http``);
3. ``--requests`` requests (default 400) of ``--tensor-kib`` KiB (default 256) of random FP32
   values, one at a time, binary HTTP; then the resident memory again: **after**.

The figure is after - start. Before the trace buffers were bounded, every trace (the JSON text
of its input and output tensors) stayed in memory until shutdown, as Triton does with
``log_frequency`` 0; now at most ``tritonx._dataplane.trace.MAX_HELD_BYTES`` of them are held and the rest
are already in the trace file. The script also prints what the trace file held before the
server stopped (bytes on disk).

    python benchmarks/trace_memory.py                  # ~1 min on 2 cores
    python benchmarks/trace_memory.py --requests 100 --tensor-kib 64
    python benchmarks/trace_memory.py -- --log-verbose 1

Arguments after ``--`` go to ``tritonx serve``. The exit status is 1 when after - start is
more than ``--limit-mb`` (default 20).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from serving import serve

MIB = 1024 * 1024


def build_repository(root: Path) -> Path:
    """``big_identity``: ONNX ``Identity`` on FP32 ``[-1]``, no batching, one instance."""
    from onnx import TensorProto

    from tritonx_backend_onnx.models import identity

    repo = root / "models"
    (repo / "big_identity" / "1").mkdir(parents=True)
    (repo / "big_identity" / "1" / "model.onnx").write_bytes(identity(TensorProto.FLOAT, [-1]))
    (repo / "big_identity" / "config.pbtxt").write_text(
        'name: "big_identity"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]\n'
        "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
    )
    return repo


def rss_mib(pid: int) -> float:
    """``VmRSS`` of ``pid`` in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise KeyError("VmRSS")


def on_disk(trace_file: Path) -> int:
    """Bytes of the trace file and its indexed siblings (``<file>.<n>``)."""
    return sum(p.stat().st_size for p in trace_file.parent.glob(trace_file.name + "*"))


def main() -> int:
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--tensor-kib", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--limit-mb", type=float, default=20.0)
    args = parser.parse_args(argv)

    import tritonclient.http as httpclient

    root = Path(tempfile.mkdtemp(prefix="tritonx-trace-memory-"))
    try:
        repo = build_repository(root)
        trace_file = root / "trace.json"
        flags = ["--trace-config", f"triton,file={trace_file}", *extra]
        rng = np.random.default_rng(0)
        data = rng.standard_normal(args.tensor_kib * 1024 // 4).astype(np.float32)
        with serve(repo, flags, root / "server.log") as served:
            pid, port = served.pid, served.http_port
            client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")

            def infer() -> None:
                inp = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
                inp.set_data_from_numpy(data, binary_data=True)
                out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
                client.infer("big_identity", [inp], outputs=[out])

            for _ in range(args.warmup):
                infer()
            start = rss_mib(pid)
            client.update_trace_settings(
                settings={"trace_level": ["TENSORS"], "trace_rate": "1", "trace_count": "-1"}
            )
            began = time.monotonic()
            for _ in range(args.requests):
                infer()
            seconds = time.monotonic() - began
            after = rss_mib(pid)
            written = on_disk(trace_file)
            client.close()
        growth = after - start
        print(
            f"{args.requests} TENSORS-traced requests of {args.tensor_kib} KiB in {seconds:.1f} s: "
            f"RSS {start:.1f} MiB -> {after:.1f} MiB ({growth:+.1f} MiB); "
            f"trace file(s) before shutdown: {written / MIB:.1f} MiB, "
            f"after: {on_disk(trace_file) / MIB:.1f} MiB"
        )
        return 0 if growth * MIB <= args.limit_mb * 1e6 else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
