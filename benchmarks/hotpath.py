"""CPU per call of the transports' per-request conversions, in-process (no sockets, no
threads), for the add_sub request perf_analyzer sends (INT32 [1, 16] x 2 in and out):

    python benchmarks/hotpath.py

HTTP: decoding a binary body (JSON header + raw tensors) and a JSON body, encoding the
response (binary and JSON outputs, headers included); gRPC: parsing and decoding a
``ModelInferRequest``, encoding and serializing the ``ModelInferResponse``. Each figure is
the best of 5 runs of N calls, in microseconds of process CPU time: steadier than a
socket benchmark on a shared machine, for comparing two versions of these modules.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np

from tritonx._transports.grpc import decode as grpc_decode
from tritonx._transports.grpc import encode as grpc_encode
from tritonx._transports.http.decode import decode_infer_request
from tritonx._transports.http.encode import encode_answer
from tritonx.proto import service_pb2
from tritonx.types import InferenceResponse

LIMIT = 1 << 26


def best_us(fn: Callable[[], object], calls: int, runs: int = 5) -> float:
    """The best of ``runs`` runs of ``calls`` calls, CPU microseconds per call."""
    for _ in range(min(calls, 1000)):
        fn()
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - start) / calls * 1e6)
    return best


def cases() -> dict[str, Callable[[], object]]:
    """The measured calls, by name."""
    tensor = np.arange(16, dtype=np.int32).reshape(1, 16)
    names_in, names_out = ("INPUT0", "INPUT1"), ("OUTPUT0", "OUTPUT1")
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": n,
                    "datatype": "INT32",
                    "shape": [1, 16],
                    "parameters": {"binary_data_size": 64},
                }
                for n in names_in
            ],
            "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in names_out],
        }
    ).encode()
    body = bytearray(header + tensor.tobytes() * 2)
    json_body = json.dumps(
        {
            "inputs": [
                {"name": n, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
                for n in names_in
            ]
        }
    ).encode()
    binary = decode_infer_request(body, len(header), "add_sub", None, LIMIT, None)
    as_json = decode_infer_request(json_body, None, "add_sub", None, LIMIT, None)
    response = InferenceResponse(
        model_name="add_sub",
        model_version=1,
        outputs={"OUTPUT0": tensor + 1, "OUTPUT1": tensor - 1},
    )

    def no_labels(name: str) -> None:
        return None

    request = service_pb2.ModelInferRequest(model_name="add_sub")
    for n in names_in:
        request.inputs.add(name=n, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(tensor.tobytes())
    for n in names_out:
        request.outputs.add(name=n)
    wire = request.SerializeToString()
    grpc_decoded = grpc_decode.decode_infer_request(request, None)

    def grpc_encode_call() -> bytes:
        msg = service_pb2.ModelInferResponse()
        grpc_encode.encode_infer_response(msg, response, grpc_decoded, None, None)
        return msg.SerializeToString()

    return {
        "http decode binary": lambda: decode_infer_request(
            body, len(header), "add_sub", None, LIMIT, None
        ),
        "http decode json": lambda: decode_infer_request(json_body, None, "add_sub", None, LIMIT),
        "http encode binary": lambda: encode_answer(response, binary, None, no_labels, "identity"),
        "http encode json": lambda: encode_answer(response, as_json, None, no_labels, "identity"),
        "grpc parse + decode": lambda: grpc_decode.decode_infer_request(
            service_pb2.ModelInferRequest.FromString(wire), None, offload=True
        ),
        "grpc encode + serialize": grpc_encode_call,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args(argv)
    for name, fn in cases().items():
        print(f"{name:26s} {best_us(fn, args.calls):6.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
