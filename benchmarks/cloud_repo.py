"""The cloud-repository row of ``run.py``: time to ready of ``tritonx serve`` with N tiny ONNX
models (add_sub INT32 [16]) from an S3 store (moto's server on loopback, reached with
``s3://127.0.0.1:<port>/bench/models``) against the same models on local disk, in the same
run. Time to ready is from the process start to the first 200 of ``/v2/health/ready``, so it
includes listing, downloading every model into its private folder and loading it.

Needs the ``repo_cloud`` entry point (``pip install -e plugins/repo_cloud[s3]``) and
``moto[server]``; without them the row is left out, saying why.

Alone: ``python benchmarks/cloud_repo.py --models 100``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: tritonx's ports for this row (the moto server takes a free one)
PORTS = (28950, 28951, 28952)
IO_INT32 = (
    'input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 16 ] }, '
    '{ name: "INPUT1", data_type: TYPE_INT32, dims: [ 16 ] } ]\n'
    'output [ { name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 16 ] }, '
    '{ name: "OUTPUT1", data_type: TYPE_INT32, dims: [ 16 ] } ]\n'
)
ONE = "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
BUCKET = "bench"


def unavailable() -> str:
    """Why the row cannot run here ("" when it can)."""
    names = {ep.name for ep in importlib.metadata.entry_points(group="tritonx")}
    if "repo_cloud" not in names:
        return "the repo_cloud entry point is not installed (pip install -e plugins/repo_cloud[s3])"
    if _moto_server() is None:
        return "moto_server is not installed (pip install 'moto[server]')"
    try:
        import boto3  # noqa: F401
    except ImportError:
        return "boto3 is not installed"
    return ""


def _moto_server() -> str | None:
    local = Path(sys.executable).parent / "moto_server"
    return str(local) if local.exists() else shutil.which("moto_server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _upload(repo: Path, endpoint: str) -> None:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    for path in sorted(repo.rglob("*")):
        if path.is_file():
            key = f"models/{path.relative_to(repo).as_posix()}"
            client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())


def points(
    work: Path,
    log_dir: Path,
    count: int,
    *,
    point: Callable[..., Any],
    process: Callable[..., Any],
    tritonx_cmd: Callable[..., list[str]],
    write_model: Callable[..., None],
) -> list[Any]:
    """One point: ``extra`` = {"local_s", "s3_s"} (seconds from start to ready)."""
    why = unavailable()
    if why:
        print(f"cloud repository row left out: {why}", file=sys.stderr)
        return []
    from onnx import TensorProto

    from tritonx_backend_onnx.models import add_sub

    repo = work / "cloud-local"
    onnx_bytes = add_sub(TensorProto.INT32, ("batch", 16))
    for i in range(count):
        write_model(
            repo,
            f"m{i:03d}",
            f'platform: "onnxruntime_onnx"\nmax_batch_size: 16\n{IO_INT32}{ONE}',
            {"model.onnx": onnx_bytes},
        )
    result = point("cloud", "tritonx", "-", f"{count} tiny models", 0)
    with process(tritonx_cmd(repo, PORTS), PORTS[0], log_dir / "cloud-local.log") as (_, ready):
        local_s = ready
    port = _free_port()
    moto = subprocess.Popen(
        [str(_moto_server()), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    mount = work / "cloud-mount"
    mount.mkdir()
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    saved["TRITON_AWS_MOUNT_DIRECTORY"] = os.environ.get("TRITON_AWS_MOUNT_DIRECTORY")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or moto.poll() is not None:
                    result.error = "moto_server did not start"
                    return [result]
                time.sleep(0.05)
        _upload(repo, f"http://127.0.0.1:{port}")
        os.environ.update(
            AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench",
            TRITON_AWS_MOUNT_DIRECTORY=str(mount),
        )
        url = f"s3://127.0.0.1:{port}/{BUCKET}/models"
        cmd = tritonx_cmd(repo, PORTS)
        cmd[cmd.index("--model-repository") + 1] = url
        with process(cmd, PORTS[0], log_dir / "cloud-s3.log") as (_, ready):
            s3_s = ready
        result.extra = {"local_s": round(local_s, 2), "s3_s": round(s3_s, 2)}
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        moto.terminate()
        moto.wait(10)
    return [result]


def table_row(p: Any) -> str:
    """The row of run.py's table."""
    if p.error:
        return f"| cloud | tritonx | - | {p.model} | - | error: {p.error[:60]} | - | - | - | | |"
    local_s, s3_s = p.extra.get("local_s", 0.0), p.extra.get("s3_s", 0.0)
    ratio = f"{s3_s / local_s:.2f}x" if local_s and s3_s else "-"
    return (
        f"| cloud | tritonx | - | {p.model} | - | - | - | - | - | ready: S3 (moto) {s3_s} s, "
        f"local disk {local_s} s | {ratio} local disk |"
    )


def main(argv: list[str] | None = None) -> int:
    import run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=100)
    args = parser.parse_args(argv)
    why = unavailable()
    if why:
        print(why, file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="tritonx-bench-cloud-"))
    try:
        found = points(
            work,
            work,
            args.models,
            point=run.Point,
            process=run.process,
            tritonx_cmd=run.tritonx_cmd,
            write_model=run.write_model,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(run.table(found))
    return 1 if any(p.error for p in found) else 0


if __name__ == "__main__":
    sys.exit(main())
