"""Stopping ``tritonx serve`` is quiet: Ctrl-C or SIGTERM sent to its whole process group (as a
terminal or a container runtime sends them) reaches the Python models' workers too, which
ignore it as Triton's stub does, so the server stops them itself: no worker traceback, no
``KeyboardInterrupt``, no worker death reported, exit status 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tritonx.testing import ModelRepositoryBuilder


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_process_group_stops_the_server_quietly(
    model_repository: ModelRepositoryBuilder, add_model, sig: signal.Signals
) -> None:
    add_model("add_sub", "add_sub", **ADD_SUB_IO)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonx",
            "serve",
            "--model-repository",
            str(model_repository.root),
            "--http-port=0",
            "--grpc-port=0",
            "--metrics-port=0",
        ],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell job's
    )
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the start-up log, line by line
        line = proc.stderr.readline()
        lines.append(line)
        if "Started Metrics Service" in line or not line:
            break
    assert "Started Metrics Service" in lines[-1], "".join(lines)
    os.killpg(proc.pid, sig)
    rest = proc.stderr.read()
    assert proc.wait(60) == 0, rest
    assert f"Signal ({int(sig)}) received." in rest
    assert "successfully unloaded 'add_sub' version 1" in rest
    for noise in ("Traceback", "KeyboardInterrupt", "not healthy", "Process tritonx-python"):
        assert noise not in rest, rest


ADD_SUB_IO = {
    "inputs": [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
    "outputs": [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
}
