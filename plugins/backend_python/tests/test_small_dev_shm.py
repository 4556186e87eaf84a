"""Python models do not depend on ``/dev/shm``: a real ``tritonx serve`` runs in a private
mount namespace whose ``/dev/shm`` is Docker's default, a 64 MB tmpfs, and a 256 MB FP32
tensor goes through a Python identity model (in the worker process) and back, exactly; the
same with a read-only ``/dev/shm`` (nothing can be created there, as if it were absent).

Tensors between the server and its workers cross in nameless ``memfd`` segments (their
memory is not on any mount), so only the machine's memory limits them. Under Triton the same
request fails until the operator remounts ``/dev/shm`` larger. The namespace needs root and
``unshare``: elsewhere the test is skipped, saying why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tritonx.testing import ModelRepositoryBuilder, listening

MiB = 1 << 20
#: the tensor: 256 MiB of FP32
ELEMENTS = 64 * MiB
SHM_SIZE = "64m"

IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(
                        "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    )
                ]
            )
            for r in requests
        ]
"""


def _private_mounts_refused() -> str:
    """Why a private mount namespace with its own ``/dev/shm`` cannot be made here ("" when
    it can)."""
    if os.geteuid() != 0:
        return "mounting a tmpfs on /dev/shm in a private mount namespace needs root"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount -t tmpfs -o size={SHM_SIZE} tmpfs /dev/shm"],
        capture_output=True,
        text=True,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"this machine refuses a private mount namespace: {probe.stderr.strip()}"
    return ""


pytestmark = pytest.mark.skipif(bool(_private_mounts_refused()), reason=_private_mounts_refused())


def _shm_mount(pid: int) -> tuple[str, str]:
    """The filesystem type and options of ``/dev/shm`` as process ``pid`` sees it (the last
    mount on that path: the one on top)."""
    found: tuple[str, str] | None = None
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/dev/shm":
            after = fields[fields.index("-") + 1 :]
            found = after[0], after[2]
    assert found is not None, f"process {pid} has no /dev/shm mount"
    return found


@pytest.mark.parametrize(
    ("mount_options", "elements", "size_option"),
    [
        # Docker's default: 64 MB, and a tensor of 256 MB
        (f"size={SHM_SIZE}", ELEMENTS, "size=65536k"),
        # nothing can be written there at all (as good as absent)
        ("ro,size=1m", 4 * MiB, "size=1024k"),
    ],
    ids=["64MB", "read-only"],
)
def test_a_large_tensor_through_a_python_model_with_a_small_dev_shm(
    model_repository: ModelRepositoryBuilder, mount_options: str, elements: int, size_option: str
) -> None:
    model_repository.add(
        "identity_fp32",
        backend="python",
        inputs=[("INPUT0", "FP32", [-1])],
        outputs=[("OUTPUT0", "FP32", [-1])],
        versions={1: {"model.py": IDENTITY}},
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONX_")}
    env["TRITONX_PLUGINS"] = "backend_python"
    serve = [
        sys.executable, "-m", "tritonx", "serve",
        f"--model-repository={model_repository.root}",
        "--http-address=127.0.0.1", "--http-port=0",
        "--grpc-address=127.0.0.1", "--grpc-port=0",
        "--allow-metrics=false",
        f"--http-max-input-size={ELEMENTS * 4 + MiB}",
    ]  # fmt: skip
    script = f'mount -t tmpfs -o {mount_options} tmpfs /dev/shm && exec "$@"'
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *serve],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        found, lines = listening(proc)
        fstype, options = _shm_mount(proc.pid)
        assert fstype == "tmpfs" and size_option in options.split(","), (fstype, options)
        assert any("memfd" in line and "/dev/shm" in line for line in lines), "".join(lines)

        data = np.arange(elements, dtype=np.float32)
        client = httpclient.InferenceServerClient(found["HTTPService"], network_timeout=300)
        inp = httpclient.InferInput("INPUT0", [elements], "FP32")
        inp.set_data_from_numpy(data, binary_data=True)
        out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
        result = client.infer("identity_fp32", [inp], outputs=[out])
        answer = result.as_numpy("OUTPUT0")
        assert answer is not None and answer.shape == data.shape
        assert np.array_equal(answer, data)
        del answer, result
        # the server is still serving
        assert client.is_model_ready("identity_fp32")
        client.close()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
