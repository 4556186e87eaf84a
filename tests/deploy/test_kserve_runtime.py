"""The KServe ServingRuntime's container command, run as written (ports and /mnt/models mapped
to this machine), answers the Open Inference Protocol (v2) paths KServe routes to, over REST and
gRPC, with the real tritonclient."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml

from tritonx.testing import ModelRepositoryBuilder

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("filename", ["servingruntime.yaml", "clusterservingruntime.yaml"])
def test_runtime_command_serves_the_v2_protocol(
    filename: str,
    model_repository: ModelRepositoryBuilder,
    echo_env: dict[str, str],
    tmp_path: Path,
) -> None:
    def free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    runtime = yaml.safe_load((ROOT / "deploy" / "kserve" / filename).read_text())
    (c,) = runtime["spec"]["containers"]
    assert c["command"][0] == "tritonx"
    model_repository.add_identity("densenet", dims=[1], max_batch_size=4)
    ports = {"--http-port": free_port(), "--grpc-port": free_port(), "--metrics-port": free_port()}
    argv = [sys.executable, "-m", "tritonx", *c["command"][1:]]
    for arg in c["args"]:
        flag, _, value = arg.partition("=")
        if flag == "--model-store":
            assert value == "/mnt/models"  # where KServe's storage initializer puts storageUri
            value = str(model_repository.root)
        elif flag in ports:
            value = str(ports[flag])
        argv.append(f"{flag}={value}")
    argv += ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1"]
    log = tmp_path / "runtime.log"
    proc = subprocess.Popen(argv, env=echo_env, stderr=log.open("w"), stdout=subprocess.DEVNULL)
    try:
        http = httpclient.InferenceServerClient(f"127.0.0.1:{ports['--http-port']}")
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            try:
                if http.is_server_ready():
                    break
            except Exception:
                pass
            time.sleep(0.2)
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{ports['--grpc-port']}")
        data = np.array([[3.0]], np.float32)
        for client, lib in ((http, httpclient), (grpc, grpcclient)):
            assert client.is_server_live() and client.is_server_ready()
            assert client.is_model_ready("densenet")
            metadata = client.get_model_metadata("densenet")
            name = metadata["name"] if isinstance(metadata, dict) else metadata.name
            assert name == "densenet"
            tensor = lib.InferInput("INPUT0", [1, 1], "FP32")
            tensor.set_data_from_numpy(data)
            assert client.infer("densenet", [tensor]).as_numpy("OUTPUT0").tolist() == [[3.0]]
        grpc.close()
        # the readiness probe KServe's pod uses
        probe = c["readinessProbe"]["httpGet"]
        assert probe["port"] == 8080 and flag_port(c["args"], "--http-port") == 8080
        url = f"http://127.0.0.1:{ports['--http-port']}{probe['path']}"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
        http.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()


def flag_port(args: list[str], flag: str) -> int:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]
    return int(value)
