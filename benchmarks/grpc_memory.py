"""Memory and CPU of large and compressed gRPC ``ModelInfer`` messages (issue 29).

Runs ``tritonx serve`` as a subprocess (gRPC on loopback) with two ONNX models taking one
FP32 tensor of any length: ``big_sum`` (ReduceSum: a 4-byte response, so only the request
counts) and ``big_identity`` (the response is as large as the request). Then:

* **message**: one ``ModelInfer`` of ``--size-mb`` MB (default 524.288, i.e. 500 MiB) to each
  model, alone on the server; its peak resident memory (``VmHWM`` of ``/proc/<pid>/status``,
  reset through ``/proc/<pid>/clear_refs`` before each request) against the message size,
  and the server's CPU seconds (``utime + stime`` of ``/proc/<pid>/stat``) for the request;
* **bomb**: a gzip-compressed ``ModelInfer`` whose content inflates to ``--bomb-mb`` MB
  (zeros: ~0.1% of that on the wire), sent once alone (status, server CPU seconds, peak
  memory), then ``--concurrent`` at once on as many connections while a ``ServerLive`` call
  (``tritonclient.grpc``) is made every 20 ms: the slowest probe answer is the figure;
* **floor** (only when asked: ``--phases floor``): the same message to a bare grpc.aio
  server whose deserializer only takes its length: what grpc's own receiving holds;
* **small**: ``--small-calls`` sequential ``ModelInfer`` calls to the bundled ``simple``
  add_sub model (INT32 [1,16], ``tritonclient.grpc``): calls per second and server CPU per
  call, the small-request A/B figure.

The large requests are sent pre-serialized through a raw ``grpc`` channel (the client holds
the message once); the compressed ones with the ``h2`` library (the payload is compressed
once, up front, the way a client with ``compression_algorithm="gzip"`` would send it).

    python benchmarks/grpc_memory.py                     # every phase, ~1 min, ~3 GB free
    python benchmarks/grpc_memory.py --phases small      # the A/B figure only
    python benchmarks/grpc_memory.py --phases floor      # grpc.aio's own share
    python benchmarks/grpc_memory.py -- --grpc-max-decompressed-message-size 268435456

Arguments after ``--`` go to ``tritonx serve``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from serving import serve

MB = 1_000_000
TICK = os.sysconf("SC_CLK_TCK")
SERVICE = "/inference.GRPCInferenceService/"


# ------------------------------------------------------------------ server process


def build_repository(root: Path) -> Path:
    """``big_sum`` and ``big_identity`` (ONNX, FP32 [-1], no batching, one instance) and the
    bundled ``simple`` (add_sub, INT32 [16])."""
    from onnx import TensorProto, helper

    from tritonx.config import EXAMPLE_REPOSITORY
    from tritonx_backend_onnx.models import identity, make_model

    reduce_sum = make_model(
        [helper.make_node("ReduceSum", ["INPUT0"], ["OUTPUT0"], keepdims=1)],
        [("INPUT0", TensorProto.FLOAT, [-1])],
        [("OUTPUT0", TensorProto.FLOAT, [1])],
    ).SerializeToString()
    models = {
        "big_sum": (reduce_sum, "[ 1 ]"),
        "big_identity": (identity(TensorProto.FLOAT, [-1]), "[ -1 ]"),
    }
    repo = root / "models"
    repo.mkdir()
    shutil.copytree(EXAMPLE_REPOSITORY / "simple", repo / "simple")  # the small A/B model
    for name, (model, out_dims) in models.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.onnx").write_bytes(model)
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
            'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]\n'
            f'output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: {out_dims} }} ]\n'
            "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
        )
    return repo


def status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def reset_peak(pid: int) -> None:
    """Start a new VmHWM window (Linux: writing 5 to clear_refs resets the peak RSS)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


# ------------------------------------------------------------------ messages


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def request_head(model: str, elements: int) -> bytes:
    """A serialized ModelInferRequest for ``model`` with input INPUT0 FP32 [elements] and no
    data; the data follows as one ``raw_input_contents`` field (see :func:`raw_field`)."""
    from tritonclient.grpc import service_pb2

    msg = service_pb2.ModelInferRequest(model_name=model)
    msg.inputs.add(name="INPUT0", datatype="FP32", shape=[elements])
    return msg.SerializeToString()


def raw_field(size: int) -> bytes:
    """Tag and length of a ``raw_input_contents`` (field 7) entry of ``size`` bytes."""
    return bytes([7 << 3 | 2]) + varint(size)


def message(model: str, size: int) -> bytes:
    """The whole serialized request, ``size`` bytes of tensor data (every page written)."""
    elements = size // 4
    data = np.full(elements, 1.0, np.float32)
    out = b"".join((request_head(model, elements), raw_field(elements * 4), data.data))
    return out


def gzip_bomb(model: str, size: int) -> bytes:
    """The gzip form of a request of ``size`` bytes of zeros, compressed piece by piece."""
    elements = size // 4
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(request_head(model, elements) + raw_field(elements * 4))]
    zeros = bytes(1 << 24)
    left = elements * 4
    while left:
        piece = min(left, len(zeros))
        parts.append(packer.compress(zeros[:piece]))
        left -= piece
    parts.append(packer.flush())
    return b"".join(parts)


def send_compressed(port: int, payload: bytes, algorithm: str = "gzip") -> tuple[str, str]:
    """One ModelInfer call carrying ``payload`` as a compressed message; (status, message)."""
    import h2.config
    import h2.connection
    import h2.events

    sock = socket.create_connection(("127.0.0.1", port))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    conn.send_headers(
        stream,
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", SERVICE + "ModelInfer"),
            (":authority", f"127.0.0.1:{port}"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-encoding", algorithm),
            ("grpc-accept-encoding", "identity,deflate,gzip"),
        ],
    )
    body = memoryview(b"\x01" + len(payload).to_bytes(4, "big") + payload)
    sent = 0
    result: dict[str, str] = {}
    closed = False
    try:
        while not closed:
            while sent < len(body):
                room = min(conn.local_flow_control_window(stream), conn.max_outbound_frame_size)
                if room <= 0:
                    break
                chunk = body[sent : sent + room]
                sent += len(chunk)
                conn.send_data(stream, chunk.tobytes(), end_stream=sent == len(body))
            sock.sendall(conn.data_to_send())
            data = sock.recv(1 << 16)
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    for key, value in event.headers:
                        result[key.decode() if isinstance(key, bytes) else key] = (
                            value.decode() if isinstance(value, bytes) else value
                        )
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, stream)
                elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                    closed = True
                elif isinstance(event, h2.events.ConnectionTerminated):
                    closed = True
            sock.sendall(conn.data_to_send())
    finally:
        sock.close()
    return result.get("grpc-status", "?"), urllib.parse.unquote(result.get("grpc-message", ""))


STATUS_NAMES = {"0": "OK", "8": "RESOURCE_EXHAUSTED", "13": "INTERNAL", "2": "UNKNOWN"}


# ------------------------------------------------------------------ phases


def phase_message(pid: int, port: int, size: int) -> list[dict[str, Any]]:
    import grpc

    rows = []
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        call = channel.unary_unary(
            SERVICE + "ModelInfer", request_serializer=None, response_deserializer=len
        )
        for model in ("big_sum", "big_identity"):
            payload = message(model, size)
            time.sleep(1.0)  # let the server settle (freed memory, idle loop)
            base_kb = status_kb(pid, "VmRSS")
            reset_peak(pid)
            cpu = cpu_seconds(pid)
            start = time.perf_counter()
            got = call(payload, timeout=600)
            wall = time.perf_counter() - start
            cpu = cpu_seconds(pid) - cpu
            peak_kb = status_kb(pid, "VmHWM")
            del payload
            rows.append(
                {
                    "phase": "message",
                    "model": model,
                    "message_mb": round(size / MB, 1),
                    "response_mb": round(got / MB, 1),
                    "rss_before_mb": round(base_kb * 1024 / MB),
                    "peak_rss_mb": round(peak_kb * 1024 / MB),
                    "peak_over_message": round(peak_kb * 1024 / size, 2),
                    "growth_over_message": round((peak_kb - base_kb) * 1024 / size, 2),
                    "server_cpu_s": round(cpu, 2),
                    "wall_s": round(wall, 2),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


#: A bare grpc.aio server (run by :func:`phase_floor`): ModelInfer's deserializer takes the
#: message grpc hands over and only measures it; its options are tritonx's for message sizes.
BARE_SERVER = """
import asyncio, sys, grpc
async def main():
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 2**31 - 1)])
    async def infer(request, context):
        return b""
    handler = grpc.unary_unary_rpc_method_handler(infer, request_deserializer=len)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService", {"ModelInfer": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()
asyncio.run(main())
"""


def phase_floor(size: int) -> list[dict[str, Any]]:
    """The same message to a bare grpc.aio server that does nothing with it: what grpc's
    own receiving costs before any tritonx code runs."""
    import grpc

    proc = subprocess.Popen(
        [sys.executable, "-c", BARE_SERVER], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        options = [("grpc.max_send_message_length", -1)]
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
            call = channel.unary_unary(SERVICE + "ModelInfer", request_serializer=None)
            call(b"", timeout=60)  # warm-up
            payload = message("big_sum", size)
            time.sleep(1.0)
            base_kb = status_kb(proc.pid, "VmRSS")
            reset_peak(proc.pid)
            cpu = cpu_seconds(proc.pid)
            call(payload, timeout=600)
            cpu = cpu_seconds(proc.pid) - cpu
            peak_kb = status_kb(proc.pid, "VmHWM")
            del payload
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    row = {
        "phase": "floor",
        "model": "bare grpc.aio",
        "message_mb": round(size / MB, 1),
        "rss_before_mb": round(base_kb * 1024 / MB),
        "peak_rss_mb": round(peak_kb * 1024 / MB),
        "peak_over_message": round(peak_kb * 1024 / size, 2),
        "growth_over_message": round((peak_kb - base_kb) * 1024 / size, 2),
        "server_cpu_s": round(cpu, 2),
    }
    print(json.dumps(row), flush=True)
    return [row]


def probe_loop(port: int, stop: threading.Event, latencies: list[float]) -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        while not stop.is_set():
            start = time.perf_counter()
            client.is_server_live(client_timeout=60)
            latencies.append(time.perf_counter() - start)
            stop.wait(0.02)
    finally:
        client.close()


def phase_bomb(pid: int, port: int, size: int, concurrent: int) -> list[dict[str, Any]]:
    payload = gzip_bomb("big_sum", size)
    rows = []
    time.sleep(1.0)
    base_kb = status_kb(pid, "VmRSS")
    reset_peak(pid)
    cpu = cpu_seconds(pid)
    start = time.perf_counter()
    code, text = send_compressed(port, payload)
    wall = time.perf_counter() - start
    cpu = cpu_seconds(pid) - cpu
    rows.append(
        {
            "phase": "bomb",
            "concurrent": 1,
            "wire_kb": round(len(payload) / 1000),
            "inflated_mb": round(size / MB),
            "status": STATUS_NAMES.get(code, code),
            "message": text[:160],
            "server_cpu_s": round(cpu, 2),
            "wall_s": round(wall, 2),
            "peak_growth_mb": round((status_kb(pid, "VmHWM") - base_kb) * 1024 / MB),
        }
    )
    print(json.dumps(rows[-1]), flush=True)

    time.sleep(1.0)
    base_kb = status_kb(pid, "VmRSS")
    reset_peak(pid)
    latencies: list[float] = []
    stop = threading.Event()
    prober = threading.Thread(target=probe_loop, args=(port, stop, latencies))
    prober.start()
    while not latencies:  # the probe's channel is up before the messages go
        time.sleep(0.01)
    baseline = len(latencies)
    results: list[tuple[str, str]] = []
    cpu = cpu_seconds(pid)
    start = time.perf_counter()
    senders = [
        threading.Thread(target=lambda: results.append(send_compressed(port, payload)))
        for _ in range(concurrent)
    ]
    for thread in senders:
        thread.start()
    for thread in senders:
        thread.join()
    wall = time.perf_counter() - start
    cpu = cpu_seconds(pid) - cpu
    stop.set()
    prober.join()
    during = latencies[baseline:] or [float("nan")]
    rows.append(
        {
            "phase": "bomb",
            "concurrent": concurrent,
            "wire_kb": round(concurrent * len(payload) / 1000),
            "inflated_mb": round(size / MB),
            "status": ",".join(sorted({STATUS_NAMES.get(c, c) for c, _ in results})),
            "server_cpu_s": round(cpu, 2),
            "wall_s": round(wall, 2),
            "peak_growth_mb": round((status_kb(pid, "VmHWM") - base_kb) * 1024 / MB),
            "probes": len(during),
            "probe_max_ms": round(max(during) * 1000, 1),
            "probe_p50_ms": round(sorted(during)[len(during) // 2] * 1000, 1),
        }
    )
    print(json.dumps(rows[-1]), flush=True)
    return rows


def phase_small(pid: int, port: int, calls: int) -> list[dict[str, Any]]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
        inputs.append(tensor)
    try:
        for _ in range(200):  # warm-up
            client.infer("simple", inputs)
        cpu = cpu_seconds(pid)
        start = time.perf_counter()
        for _ in range(calls):
            client.infer("simple", inputs)
        wall = time.perf_counter() - start
        cpu = cpu_seconds(pid) - cpu
    finally:
        client.close()
    row = {
        "phase": "small",
        "model": "simple",
        "calls": calls,
        "calls_per_s": round(calls / wall),
        "server_cpu_us_per_call": round(cpu / calls * 1e6),
    }
    print(json.dumps(row), flush=True)
    return [row]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=524.288)
    parser.add_argument("--bomb-mb", type=float, default=419.0)
    parser.add_argument("--concurrent", type=int, default=4)
    parser.add_argument("--small-calls", type=int, default=3000)
    parser.add_argument("--phases", default="message,bomb,small")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("serve_args", nargs="*", help="after --: tritonx serve arguments")
    args = parser.parse_args()
    phases = set(args.phases.split(","))
    rows: list[dict[str, Any]] = []
    size = int(args.size_mb * MB) // 4 * 4
    if "floor" in phases:
        rows += phase_floor(size)
    if phases & {"message", "bomb", "small"}:
        with tempfile.TemporaryDirectory(prefix="grpc-memory-") as tmp:
            repo = build_repository(Path(tmp))
            with serve(repo, args.serve_args, Path(tmp) / "server.log", stop_wait=30) as served:
                pid, port = served.pid, served.grpc_port
                if "message" in phases:
                    rows += phase_message(pid, port, size)
                if "bomb" in phases:
                    bomb = int(args.bomb_mb * MB) // 4 * 4
                    rows += phase_bomb(pid, port, bomb, args.concurrent)
                if "small" in phases:
                    rows += phase_small(pid, port, args.small_calls)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
