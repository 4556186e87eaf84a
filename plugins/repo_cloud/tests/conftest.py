"""Real object-store emulators for the cloud repository tests, each started once per session
on a free loopback port and stopped at the end:

* S3: moto's server mode (``moto_server``, from ``moto[server]``);
* GCS: ``gcp-storage-emulator`` (in memory);
* Azure: Azurite's blob service (npm ``azurite``, run with node; installed into
  ``$TRITONX_AZURITE_DIR`` (default ``~/.cache/tritonx/azurite``) by ``.ci/run``, or by the
  fixture with npm when missing).

Test data is written with each store's own SDK (boto3, google-cloud-storage,
azure-storage-blob), not with the fsspec code under test. A store that cannot start is
skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: Azurite's well-known development account (public, documented by Microsoft)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
AZURITE_DIR = Path(
    os.environ.get("TRITONX_AZURITE_DIR") or Path.home() / ".cache" / "tritonx" / "azurite"
)
BIN = Path(sys.executable).parent
STORES = ("s3", "s3_endpoint_env", "gcs", "azure")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(
    proc: subprocess.Popen[bytes], port: int, what: str, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout:.0f} s")


def start(cmd: list[str], port: int, what: str, **kwargs: Any) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
    try:
        wait_listening(proc, port, what)
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def which(name: str) -> str | None:
    local = BIN / name
    return str(local) if local.exists() else shutil.which(name)


def azurite_blob() -> tuple[str | None, str]:
    """The ``azurite-blob`` command (installed with npm into AZURITE_DIR if missing), or None
    and why not."""
    found = shutil.which("azurite-blob")
    if found:
        return found, ""
    local = AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"
    if local.exists():
        return str(local), ""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return None, "Azurite needs node and npm (Debian: apt-get install nodejs npm)"
    AZURITE_DIR.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["npm", "install", "--prefix", str(AZURITE_DIR), "--no-audit", "--no-fund", "azurite@3"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0 or not local.exists():
        return None, f"npm install azurite failed: {done.stderr.strip()[-300:]}"
    return str(local), ""


# ----------------------------------------------------------------------------- emulators


@dataclass
class Emulator:
    """A running store emulator: its endpoint and the environment a client of it needs."""

    kind: str
    endpoint: str
    env: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="session")
def s3_emulator() -> Iterator[Emulator]:
    pytest.importorskip("s3fs")
    pytest.importorskip("boto3")
    command = which("moto_server")
    if command is None:
        pytest.skip("moto_server not found: pip install 'moto[server]'")
    port = free_port()
    proc = start([command, "-H", "127.0.0.1", "-p", str(port)], port, "moto_server")
    try:
        yield Emulator(
            "s3",
            f"127.0.0.1:{port}",
            {
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1",
            },
        )
    finally:
        stop(proc)


@dataclass
class AuthS3:
    """A moto S3 server that checks signatures, with one IAM user allowed everything."""

    endpoint: str
    key_id: str
    secret: str


@pytest.fixture(scope="session")
def s3_auth_emulator() -> Iterator[AuthS3]:
    """moto_server with ``INITIAL_NO_AUTH_ACTION_COUNT=3``: the first three requests create
    the user, its key and its policy; every later one must be signed with a known key."""
    pytest.importorskip("s3fs")
    boto3 = pytest.importorskip("boto3")
    command = which("moto_server")
    if command is None:
        pytest.skip("moto_server not found: pip install 'moto[server]'")
    port = free_port()
    proc = start(
        [command, "-H", "127.0.0.1", "-p", str(port)],
        port,
        "moto_server",
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"},
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="bootstrap",
            aws_secret_access_key="bootstrap",
        )
        iam.create_user(UserName="reader")
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        policy = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}'
        iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=policy)
        yield AuthS3(f"127.0.0.1:{port}", key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[Emulator]:
    pytest.importorskip("gcsfs")
    pytest.importorskip("google.cloud.storage")
    command = which("gcp-storage-emulator")
    if command is None:
        pytest.skip("gcp-storage-emulator not found: pip install gcp-storage-emulator")
    port = free_port()
    proc = start(
        [command, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "-q"],
        port,
        "gcp-storage-emulator",
    )
    try:
        url = f"http://127.0.0.1:{port}"
        yield Emulator("gcs", url, {"STORAGE_EMULATOR_HOST": url})
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def azure_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    pytest.importorskip("adlfs")
    pytest.importorskip("azure.storage.blob")
    command, why = azurite_blob()
    if command is None:
        pytest.skip(why)
    port = free_port()
    proc = start(
        [
            command,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--silent",
            "--skipApiVersionCheck",
            "--disableTelemetry",
        ],
        port,
        "azurite-blob",
        cwd=tmp_path_factory.mktemp("azurite"),
    )
    try:
        endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
        connection = (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
        )
        yield Emulator("azure", endpoint, {"AZURE_STORAGE_CONNECTION_STRING": connection})
    finally:
        stop(proc)


# ----------------------------------------------------------------------------- buckets


class Bucket:
    """A fresh bucket (container) in one emulator, written with the store's own SDK.

    :ivar url: the repository URL of ``prefix`` in it, in Triton's form for the store.
    """

    def __init__(self, emulator: Emulator, kind: str, prefix: str = "models") -> None:
        self.emulator = emulator
        self.kind = kind
        self.name = f"b{uuid.uuid4().hex[:12]}"
        self.prefix = prefix
        if kind == "s3":  # Triton's s3://host:port/bucket/path form
            self.url = f"s3://{emulator.endpoint}/{self.name}/{prefix}"
        elif kind == "s3_endpoint_env":  # plain s3://bucket/path + AWS_ENDPOINT_URL
            self.url = f"s3://{self.name}/{prefix}"
        elif kind == "gcs":
            self.url = f"gs://{self.name}/{prefix}"
        else:
            self.url = f"as://{AZURITE_ACCOUNT}/{self.name}/{prefix}"
        self.env = dict(emulator.env)
        if kind == "s3_endpoint_env":
            self.env["AWS_ENDPOINT_URL"] = f"http://{emulator.endpoint}"
        self._client = self._connect()
        self.create()

    def _connect(self) -> Any:
        if self.kind.startswith("s3"):
            import boto3

            return boto3.client(
                "s3",
                endpoint_url=f"http://{self.emulator.endpoint}",
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
                region_name="us-east-1",
            )
        if self.kind == "gcs":
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage

            return storage.Client(
                project="test",
                credentials=AnonymousCredentials(),
                client_options={"api_endpoint": self.emulator.endpoint},
            )
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(
            self.emulator.env["AZURE_STORAGE_CONNECTION_STRING"]
        )

    def create(self) -> None:
        if self.kind.startswith("s3"):
            self._client.create_bucket(Bucket=self.name)
        elif self.kind == "gcs":
            self._client.create_bucket(self.name)
        else:
            self._client.create_container(self.name)

    def model_url(self, model: str) -> str:
        return f"{self.url}/{model}"

    def put(self, key: str, data: bytes, public: bool = False) -> None:
        """Write one object (``key`` relative to the repository prefix); ``public``: S3's
        ``public-read`` ACL (readable by unsigned requests)."""
        full = f"{self.prefix}/{key}"
        if self.kind.startswith("s3"):
            extra = {"ACL": "public-read"} if public else {}
            self._client.put_object(Bucket=self.name, Key=full, Body=data, **extra)
        elif self.kind == "gcs":
            self._client.bucket(self.name).blob(full).upload_from_string(data)
        else:
            self._client.get_blob_client(self.name, full).upload_blob(data, overwrite=True)

    def put_folder(self, key: str) -> None:
        """An empty folder as the store's tools write one: a ``key/`` object (S3, GCS), a
        blob flagged ``hdi_isfolder`` (Azure)."""
        if self.kind == "azure":
            full = f"{self.prefix}/{key}"
            blob = self._client.get_blob_client(self.name, full)
            blob.upload_blob(b"", overwrite=True, metadata={"hdi_isfolder": "true"})
        else:
            self.put(f"{key}/", b"")

    def drop(self) -> None:
        """Delete every object and the bucket itself."""
        self.delete("")
        if self.kind.startswith("s3"):
            self._client.delete_bucket(Bucket=self.name)
        elif self.kind == "gcs":
            self._client.bucket(self.name).delete()
        else:
            self._client.delete_container(self.name)

    def keys(self, under: str = "") -> list[str]:
        """Object keys below the repository prefix (relative to it)."""
        start = f"{self.prefix}/{under}"
        if self.kind.startswith("s3"):
            found = self._client.list_objects_v2(Bucket=self.name, Prefix=start)
            names = [o["Key"] for o in found.get("Contents", [])]
        elif self.kind == "gcs":
            names = [b.name for b in self._client.list_blobs(self.name, prefix=start)]
        else:
            container = self._client.get_container_client(self.name)
            names = [b.name for b in container.list_blobs(name_starts_with=start)]
        return [n[len(self.prefix) + 1 :] for n in names]

    def delete(self, under: str) -> None:
        """Delete every object below ``under`` (relative to the repository prefix)."""
        for key in self.keys(under):
            full = f"{self.prefix}/{key}"
            if self.kind.startswith("s3"):
                self._client.delete_object(Bucket=self.name, Key=full)
            elif self.kind == "gcs":
                self._client.bucket(self.name).blob(full).delete()
            else:
                self._client.get_blob_client(self.name, full).delete_blob()

    def upload(self, folder: Path, under: str = "") -> None:
        """Copy a local model repository (or model folder) under the prefix."""
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder).as_posix()
            key = f"{under}/{rel}" if under else rel
            if path.is_file():
                self.put(key, path.read_bytes())


@pytest.fixture
def make_bucket(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Any:
    """``make_bucket(kind)``: a fresh bucket in one store (``STORES``), its environment set."""

    def make(kind: str) -> Bucket:
        fixture = "s3_emulator" if kind.startswith("s3") else f"{kind}_emulator"
        emulator: Emulator = request.getfixturevalue(fixture)
        made = Bucket(emulator, kind)
        for key, value in made.env.items():
            monkeypatch.setenv(key, value)
        return made

    return make


@pytest.fixture(params=STORES)
def bucket(request: pytest.FixtureRequest, make_bucket: Any) -> Bucket:
    """A fresh bucket in each store in turn (S3 twice: Triton's ``s3://host:port/bucket``
    form, and ``s3://bucket`` with ``AWS_ENDPOINT_URL``), its environment set."""
    made: Bucket = make_bucket(request.param)
    return made
