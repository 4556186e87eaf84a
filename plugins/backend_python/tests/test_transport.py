"""How requests reach a worker process: large tensors cross through shared memory in both
directions, never through the worker's sockets (counted by the kernel: the bytes the worker
and this process read with system calls, ``rchar`` in ``/proc/<pid>/io``; shared memory is
mapped, not read), over HTTP and gRPC."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient

from tritonx.testing import ModelRepositoryBuilder

ELEMENTS = 1 << 20  # FP32: 4 MiB
MODEL_PY = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            pid = np.array([os.getpid()], dtype=np.int64)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", data + 1), pb_utils.Tensor("PID", pid)]
                )
            )
        return responses
"""

pytestmark = pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/<pid>/io")


@pytest.fixture
def server_settings(model_repository: ModelRepositoryBuilder) -> object:
    from tritonx.testing import loopback_settings

    model_repository.add(
        "big",
        backend="python",
        inputs=[("IN", "FP32", [ELEMENTS])],
        outputs=[("OUT", "FP32", [ELEMENTS]), ("PID", "INT64", [1])],
        versions={1: {"model.py": MODEL_PY}},
    )
    return loopback_settings(model_repository.root)


def io_bytes(pid: int) -> tuple[int, int]:
    """(bytes read, bytes written) by process ``pid`` through read/write-like system calls."""
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(fields["rchar"]), int(fields["wchar"])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_a_4mb_tensor_moves_no_bytes_through_the_worker_sockets(
    server: object,
    http_client: httpclient.InferenceServerClient,
    grpc_client: grpcclient.InferenceServerClient,
    protocol: str,
) -> None:
    data = np.random.default_rng(0).random(ELEMENTS, dtype=np.float32)
    client, module = (http_client, httpclient) if protocol == "http" else (grpc_client, grpcclient)

    async def infer() -> tuple[np.ndarray, int]:
        tensor = module.InferInput("IN", [ELEMENTS], "FP32")
        tensor.set_data_from_numpy(data)
        result = await client.infer("big", [tensor])
        return result.as_numpy("OUT"), int(result.as_numpy("PID")[0])

    _, pid = await infer()
    assert pid != os.getpid()
    before, here_before = io_bytes(pid), io_bytes(os.getpid())[0]
    rounds = 5
    for _ in range(rounds):
        out, same = await infer()
        assert same == pid
        np.testing.assert_array_equal(out, data + 1)
    read = io_bytes(pid)[0] - before[0]
    here = io_bytes(os.getpid())[0] - here_before
    tensor_bytes = rounds * ELEMENTS * 4  # 20 MiB each way
    # server -> worker: the worker read only the messages from its sockets (a few hundred
    # bytes per request; its inputs are mapped, not read)
    assert read < rounds * 4096, read
    # worker -> server: the server reads the worker's sockets with read(2) (counted; its
    # HTTP and gRPC sockets are read with recv, which is not), and read no output from them
    assert here < tensor_bytes // 20, here
