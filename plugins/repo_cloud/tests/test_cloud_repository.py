"""Cloud model repositories against real emulators (moto's S3 server, gcp-storage-emulator,
Azurite), through the in-process server and the real tritonclient: load, poll-reload and
unload, alone and mixed with a local repository; unchanged models are not downloaded again
(counted with ``tritonx_repo_cloud.transfers``); start-up errors in Triton's words."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pluggy
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient

Bucket = Any  # conftest.Bucket (conftest modules are not importable under importlib mode)

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

import tritonx_repo_cloud  # noqa: E402
from tritonx import Server  # noqa: E402
from tritonx.errors import PluginError, TritonXError  # noqa: E402
from tritonx.testing import ModelRepositoryBuilder, loopback_settings  # noqa: E402
from tritonx_backend_onnx.models import make_model  # noqa: E402
from tritonx_repo_cloud import transfers  # noqa: E402

MOUNT_ENVS = (
    "TRITON_AWS_MOUNT_DIRECTORY",
    "TRITON_GCS_MOUNT_DIRECTORY",
    "TRITON_AZURE_MOUNT_DIRECTORY",
)
IO = (
    'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] }, '
    '{ name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
    'output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
    "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
)
A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([10, 20, 30, 40], dtype=np.float32)
RESULTS = {"Add": A + B, "Mul": A * B, "Sub": A - B}


def onnx_model(op: str) -> bytes:
    """OUTPUT0 = INPUT0 <op> INPUT1, FP32 [4]."""
    f32 = TensorProto.FLOAT
    return make_model(
        [helper.make_node(op, ["INPUT0", "INPUT1"], ["OUTPUT0"])],
        [("INPUT0", f32, [4]), ("INPUT1", f32, [4])],
        [("OUTPUT0", f32, [4])],
    ).SerializeToString()


def config(name: str) -> bytes:
    return f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n{IO}'.encode()


def put_model(bucket: Bucket, name: str, op: str) -> None:
    bucket.put(f"{name}/config.pbtxt", config(name))
    bucket.put(f"{name}/1/model.onnx", onnx_model(op))


def local_model(repo: ModelRepositoryBuilder, name: str, op: str) -> None:
    repo.add(name, config=config(name).decode(), versions={1: {"model.onnx": onnx_model(op)}})


async def infer(client: Any, name: str) -> np.ndarray:
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    inputs = []
    for input_name, value in (("INPUT0", A), ("INPUT1", B)):
        tensor = module.InferInput(input_name, [4], "FP32")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    result = await client.infer(name, inputs)
    return np.asarray(result.as_numpy("OUTPUT0"))


def copies(mount: Path) -> list[str]:
    """The model folders localized under the mount directory (``<tmp>/<model>``)."""
    return sorted(p.name for holder in mount.iterdir() for p in holder.iterdir())


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    return ("backend_onnx",)


@pytest.fixture
def cloud_plugins(
    plugin_manager: pluggy.PluginManager, register_plugin: Callable[[object], None]
) -> pluggy.PluginManager:
    """The ONNX backend (entry point) and this plugin (registered as an object: its entry
    point exists only once the distribution is installed)."""
    register_plugin(tritonx_repo_cloud)
    return plugin_manager


@pytest.fixture
def mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Triton's TRITON_*_MOUNT_DIRECTORY: where local copies are made (checked empty after)."""
    folder = tmp_path / "mount"
    folder.mkdir()
    for env in MOUNT_ENVS:
        monkeypatch.setenv(env, str(folder))
    return folder


# ----------------------------------------------------------------------------- serving


@pytest.mark.parametrize("with_local", [True, False], ids=["with_local", "alone"])
async def test_poll_mode_loads_reloads_and_unloads(
    with_local: bool,
    bucket: Bucket,
    model_repository: ModelRepositoryBuilder,
    cloud_plugins: pluggy.PluginManager,
    mount: Path,
) -> None:
    put_model(bucket, "changing", "Add")
    put_model(bucket, "steady", "Sub")
    local_model(model_repository, "local", "Mul")
    repos = [bucket.url, model_repository.root] if with_local else [bucket.url]
    settings = loopback_settings(
        repos,
        model_control_mode="poll",
        repository_poll_secs=3600,  # polled by hand below
        exit_on_error=True,
    )
    async with Server(settings, plugin_manager=cloud_plugins) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            assert await client.is_server_ready()
            np.testing.assert_array_equal(await infer(client, "changing"), RESULTS["Add"])
            np.testing.assert_array_equal(await infer(client, "steady"), RESULTS["Sub"])
            if with_local:
                np.testing.assert_array_equal(await infer(client, "local"), RESULTS["Mul"])
            else:
                assert not await client.is_model_ready("local")
            assert copies(mount) == ["changing", "steady"]
            first = transfers(bucket.model_url("changing"))
            assert (first.localized, first.files_downloaded, first.files_reused) == (1, 2, 0)
            steady = transfers(bucket.model_url("steady"))
            assert steady.localized == 1

            # nothing changed: a poll downloads nothing
            await server.poll_repository()
            assert transfers(bucket.model_url("changing")) == first
            assert transfers(bucket.model_url("steady")) == steady

            # the model file changes in the bucket: reloaded; only that file is fetched
            bucket.put("changing/1/model.onnx", onnx_model("Mul"))
            await server.poll_repository()
            np.testing.assert_array_equal(await infer(client, "changing"), RESULTS["Mul"])
            after = transfers(bucket.model_url("changing"))
            assert after.localized == 2
            assert after.files_downloaded == first.files_downloaded + 1
            assert after.files_reused == 1  # config.pbtxt, unchanged, taken from the old copy
            assert transfers(bucket.model_url("steady")) == steady  # not downloaded again
            assert copies(mount) == ["changing", "steady"]  # the old copy was released

            # a new model appears, one disappears
            put_model(bucket, "added", "Sub")
            bucket.delete("steady")
            await server.poll_repository()
            np.testing.assert_array_equal(await infer(client, "added"), RESULTS["Sub"])
            assert not await client.is_model_ready("steady")
            assert copies(mount) == ["added", "changing"]
            index = {m["name"]: m for m in await client.get_model_repository_index()}
            assert index["steady"]["state"] == "UNAVAILABLE"
            if with_local:
                np.testing.assert_array_equal(await infer(client, "local"), RESULTS["Mul"])
                assert index["local"]["state"] == "READY"
            else:
                assert "local" not in index
        finally:
            await client.close()
    assert list(mount.iterdir()) == []  # every copy removed at shutdown


async def test_the_poll_timer_picks_up_a_change(
    make_bucket: Callable[[str], Bucket],
    cloud_plugins: pluggy.PluginManager,
    mount: Path,
) -> None:
    """--repository-poll-secs=1: the server's own poll loop reloads the changed model and
    leaves the other one alone."""
    store = make_bucket("gcs")
    put_model(store, "changing", "Add")
    put_model(store, "steady", "Sub")
    settings = loopback_settings([store.url], model_control_mode="poll", repository_poll_secs=1)
    async with Server(settings, plugin_manager=cloud_plugins) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            np.testing.assert_array_equal(await infer(client, "changing"), RESULTS["Add"])
            store.put("changing/1/model.onnx", onnx_model("Mul"))
            deadline = asyncio.get_running_loop().time() + 30
            while not np.array_equal(await infer(client, "changing"), RESULTS["Mul"]):
                assert asyncio.get_running_loop().time() < deadline, "no reload in 30 s"
                await asyncio.sleep(0.2)
            await asyncio.sleep(2.5)  # two more polls with nothing changed
            assert transfers(store.model_url("changing")).localized == 2
            assert transfers(store.model_url("steady")).localized == 1
            np.testing.assert_array_equal(await infer(client, "steady"), RESULTS["Sub"])
        finally:
            await client.close()


async def test_explicit_mode_load_and_unload_through_grpc(
    bucket: Bucket,
    model_repository: ModelRepositoryBuilder,
    cloud_plugins: pluggy.PluginManager,
    mount: Path,
) -> None:
    put_model(bucket, "remote", "Add")
    local_model(model_repository, "local", "Sub")
    settings = loopback_settings([model_repository.root, bucket.url], model_control_mode="explicit")
    async with Server(settings, plugin_manager=cloud_plugins) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            index = await client.get_model_repository_index(as_json=True)
            assert sorted(m["name"] for m in index["models"]) == ["local", "remote"]
            assert list(mount.iterdir()) == []  # listing downloads nothing
            await client.load_model("remote")
            await client.load_model("local")
            np.testing.assert_array_equal(await infer(client, "remote"), RESULTS["Add"])
            np.testing.assert_array_equal(await infer(client, "local"), RESULTS["Sub"])
            assert copies(mount) == ["remote"]
            await client.load_model("remote")  # unchanged: a no-op, nothing downloaded
            assert transfers(bucket.model_url("remote")).localized == 1
            await client.unload_model("remote")
            assert not await client.is_model_ready("remote")
            assert list(mount.iterdir()) == []  # released on unload
            bucket.put("remote/1/model.onnx", onnx_model("Mul"))
            await client.load_model("remote")
            np.testing.assert_array_equal(await infer(client, "remote"), RESULTS["Mul"])
            assert transfers(bucket.model_url("remote")).localized == 2
        finally:
            await client.close()
    assert list(mount.iterdir()) == []


async def test_two_cloud_stores_and_local_in_one_server(
    make_bucket: Callable[[str], Bucket],
    model_repository: ModelRepositoryBuilder,
    cloud_plugins: pluggy.PluginManager,
    mount: Path,
) -> None:
    stores = [make_bucket(kind) for kind in ("s3", "gcs", "azure")]
    for i, store in enumerate(stores):
        put_model(store, f"m{i}", "Add")
    put_model(stores[0], "shared", "Mul")
    put_model(stores[1], "shared", "Mul")
    local_model(model_repository, "local", "Sub")
    settings = loopback_settings(
        [*(s.url for s in stores), model_repository.root], model_control_mode="poll"
    )
    async with Server(settings, plugin_manager=cloud_plugins) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            for i in range(len(stores)):
                np.testing.assert_array_equal(await infer(client, f"m{i}"), RESULTS["Add"])
            np.testing.assert_array_equal(await infer(client, "local"), RESULTS["Sub"])
            # a name in two repositories is not served (Triton's rule), whatever the store
            index = {m["name"]: m for m in await client.get_model_repository_index()}
            assert index["shared"]["state"] == "UNAVAILABLE"
            assert index["shared"]["reason"] == "model appears in two or more repositories"
        finally:
            await client.close()


async def test_log_lines_tell_what_was_downloaded(
    make_bucket: Callable[[str], Bucket],
    cloud_plugins: pluggy.PluginManager,
    mount: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = make_bucket("s3")
    put_model(store, "m", "Add")
    caplog.set_level(logging.INFO, logger="tritonx.repo_cloud")
    settings = loopback_settings([store.url], model_control_mode="poll")
    async with Server(settings, plugin_manager=cloud_plugins) as server:
        await server.poll_repository()
    localized = [r.getMessage() for r in caplog.records if "localized model 'm'" in r.getMessage()]
    assert len(localized) == 1, localized
    assert f"from {store.url}/m into {mount}" in localized[0]
    assert "2 files downloaded" in localized[0]
    assert any("released model 'm'" in r.getMessage() for r in caplog.records)


async def test_empty_version_folder_markers_become_folders(
    bucket: Bucket,
    plugin_manager: pluggy.PluginManager,
    register_plugin: Callable[[object], None],
    mount: Path,
) -> None:
    """An identity model has an empty version folder: stores keep it as a folder marker."""
    register_plugin(tritonx_repo_cloud)
    bucket.put(
        "echo/config.pbtxt",
        b'name: "echo"\nbackend: "identity"\nmax_batch_size: 0\n'
        b'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
        b'output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]\n',
    )
    bucket.put_folder("echo/1")
    settings = loopback_settings([bucket.url], exit_on_error=True)
    async with Server(settings, plugin_manager=plugin_manager) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            tensor = httpclient.InferInput("INPUT0", [4], "FP32")
            tensor.set_data_from_numpy(A)
            result = await client.infer("echo", [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A)
            assert (mount / next(mount.iterdir()) / "echo" / "1").is_dir()
        finally:
            await client.close()


async def test_a_bucket_gone_during_poll_mode_unloads_its_models_only(
    make_bucket: Callable[[str], Bucket],
    model_repository: ModelRepositoryBuilder,
    cloud_plugins: pluggy.PluginManager,
    mount: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As Triton's poll: the models of a repository that cannot be listed count as removed."""
    store = make_bucket("s3")
    put_model(store, "remote", "Add")
    local_model(model_repository, "local", "Sub")
    settings = loopback_settings(
        [store.url, model_repository.root], model_control_mode="poll", repository_poll_secs=3600
    )
    async with Server(settings, plugin_manager=cloud_plugins) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            np.testing.assert_array_equal(await infer(client, "remote"), RESULTS["Add"])
            store.drop()
            await server.poll_repository()
            assert not await client.is_model_ready("remote")
            np.testing.assert_array_equal(await infer(client, "local"), RESULTS["Sub"])
            assert await client.is_server_live()
            assert list(mount.iterdir()) == []
        finally:
            await client.close()
    assert f"failed to read model repository {store.url}" in caplog.text
    assert "Exception: 'NoSuchBucket'" in caplog.text


# ----------------------------------------------------------------------------- errors


async def start_fails(url: str, plugins: pluggy.PluginManager) -> str:
    with pytest.raises((TritonXError, PluginError)) as info:
        async with Server(loopback_settings([url]), plugin_manager=plugins):
            pass
    return str(info.value.message if hasattr(info.value, "message") else info.value)


MISSING_BUCKET = {
    "s3": "Unable to create S3 filesystem client. Check account credentials. "
    "Exception: 'NoSuchBucket' Message: 'The specified bucket does not exist'",
    "s3_endpoint_env": "Unable to create S3 filesystem client. Check account credentials. "
    "Exception: 'NoSuchBucket' Message: 'The specified bucket does not exist'",
    "gcs": "Could not get MetaData for bucket with name {name}x : "
    "The specified bucket does not exist.",
    "azure": "Failed to get contents of directory models:The specified container does not exist.",
}


async def test_missing_bucket_fails_start_up(
    bucket: Bucket, cloud_plugins: pluggy.PluginManager
) -> None:
    scheme, rest = bucket.url.split("://", 1)
    url = bucket.url.replace(f"/{bucket.name}/", f"/{bucket.name}x/")
    if bucket.kind in ("s3_endpoint_env", "gcs"):
        url = f"{scheme}://{rest.replace(bucket.name, bucket.name + 'x', 1)}"
    message = await start_fails(url, cloud_plugins)
    assert MISSING_BUCKET[bucket.kind].format(name=bucket.name) in message


async def test_missing_folder_fails_start_up(
    bucket: Bucket, cloud_plugins: pluggy.PluginManager
) -> None:
    put_model(bucket, "m", "Add")
    url = bucket.url + "/nope"
    message = await start_fails(url, cloud_plugins)
    assert message == f"directory or file does not exist at {url}"


async def test_s3_credentials_are_checked_by_the_store(
    s3_auth_emulator: Any,
    cloud_plugins: pluggy.PluginManager,
    monkeypatch: pytest.MonkeyPatch,
    mount: Path,
) -> None:
    import boto3

    auth = s3_auth_emulator
    writer = boto3.client(
        "s3",
        endpoint_url=f"http://{auth.endpoint}",
        region_name="us-east-1",
        aws_access_key_id=auth.key_id,
        aws_secret_access_key=auth.secret,
    )
    writer.create_bucket(Bucket="signed")
    writer.put_object(Bucket="signed", Key="models/m/config.pbtxt", Body=config("m"))
    writer.put_object(Bucket="signed", Key="models/m/1/model.onnx", Body=onnx_model("Add"))
    url = f"s3://{auth.endpoint}/signed/models"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG0")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    message = await start_fails(url, cloud_plugins)
    assert message == (
        "Unable to create S3 filesystem client. Check account credentials. "
        "Exception: 'InvalidAccessKeyId' Message: 'The AWS Access Key Id you provided does "
        "not exist in our records.'"
    )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", auth.key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", auth.secret)
    async with Server(loopback_settings([url]), plugin_manager=cloud_plugins) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            np.testing.assert_array_equal(await infer(client, "m"), RESULTS["Add"])
        finally:
            await client.close()


async def test_s3_without_credentials_reads_anonymously(
    make_bucket: Callable[[str], Bucket],
    cloud_plugins: pluggy.PluginManager,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    mount: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As Triton's client, which sends unsigned requests when it finds no credentials."""
    store = make_bucket("s3")
    store.put("m/config.pbtxt", config("m"), public=True)
    store.put("m/1/model.onnx", onnx_model("Add"), public=True)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    caplog.set_level(logging.INFO, logger="tritonx.repo_cloud")
    async with Server(loopback_settings([store.url]), plugin_manager=cloud_plugins) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            np.testing.assert_array_equal(await infer(client, "m"), RESULTS["Add"])
        finally:
            await client.close()
    assert f"no AWS credentials found: reading {store.url} anonymously" in caplog.text


async def test_gcs_credential_file_that_is_not_one_fails_start_up(
    make_bucket: Callable[[str], Bucket],
    cloud_plugins: pluggy.PluginManager,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_bucket("gcs")
    bad = tmp_path / "credentials.json"
    bad.write_text('{"type": "nothing we know"}')
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(bad))
    message = await start_fails(store.url, cloud_plugins)
    assert message.startswith("Unable to create GCS client. Check account credentials.")


async def test_azure_wrong_key_fails_start_up(
    make_bucket: Callable[[str], Bucket],
    cloud_plugins: pluggy.PluginManager,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_bucket("azure")
    put_model(store, "m", "Add")
    good = store.env["AZURE_STORAGE_CONNECTION_STRING"]
    wrong = good.replace("AccountKey=Eby8", "AccountKey=Xby8")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", wrong)
    message = await start_fails(store.url, cloud_plugins)
    assert message.startswith("Failed to get contents of directory models:")
    assert "authenticate" in message


async def test_azure_connection_string_for_another_account_is_refused(
    make_bucket: Callable[[str], Bucket], cloud_plugins: pluggy.PluginManager
) -> None:
    store = make_bucket("azure")
    url = store.url.replace("as://devstoreaccount1/", "as://otheraccount/")
    message = await start_fails(url, cloud_plugins)
    assert "is in account 'otheraccount' but AZURE_STORAGE_CONNECTION_STRING" in message


async def test_unsupported_azure_auth_type_is_refused(
    make_bucket: Callable[[str], Bucket],
    cloud_plugins: pluggy.PluginManager,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_bucket("azure")
    monkeypatch.setenv("AZURE_STORAGE_AUTH_TYPE", "managed_identity")
    message = await start_fails(store.url, cloud_plugins)
    assert "AZURE_STORAGE_AUTH_TYPE='managed_identity' is not supported" in message


async def test_triton_credential_file_is_refused(
    cloud_plugins: pluggy.PluginManager, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(tmp_path / "cred.json"))
    message = await start_fails("s3://bucket/models", cloud_plugins)
    assert "TRITON_CLOUD_CREDENTIAL_PATH" in message and "not supported" in message


async def test_object_that_leaves_the_model_folder_fails_that_model_only(
    make_bucket: Callable[[str], Bucket],
    cloud_plugins: pluggy.PluginManager,
    mount: Path,
) -> None:
    store = make_bucket("s3")
    put_model(store, "good", "Add")
    put_model(store, "evil", "Add")
    store.put("evil/1/../../../escape.txt", b"x")
    async with Server(loopback_settings([store.url]), plugin_manager=cloud_plugins) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            np.testing.assert_array_equal(await infer(client, "good"), RESULTS["Add"])
            assert not await client.is_model_ready("evil")
            index = {m["name"]: m for m in await client.get_model_repository_index()}
            assert "has a path that leaves the model folder" in index["evil"]["reason"]
        finally:
            await client.close()
    assert not (mount / "escape.txt").exists()


@pytest.mark.parametrize(
    ("url", "module", "extra"),
    [
        ("s3://bucket/models", "s3fs", "s3"),
        ("gs://b/m", "gcsfs", "gcs"),
        ("as://a/c/m", "adlfs", "azure"),
    ],
)
async def test_a_store_without_its_library_names_the_extra(
    url: str,
    module: str,
    extra: str,
    cloud_plugins: pluggy.PluginManager,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As on a machine where only another extra was installed (the import fails)."""
    for name in list(sys.modules):
        if name == module or name.startswith(module + "."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # makes `import <module>` fail
    message = await start_fails(url, cloud_plugins)
    assert f"repositories need {module}: pip install 'tritonx-repo-cloud[{extra}]'" in message


def test_copies_never_released_are_removed_at_exit(
    make_bucket: Callable[[str], Bucket], mount: Path
) -> None:
    """A process that localizes and exits without releasing (the core's offline model check
    does) leaves no copy behind."""
    store = make_bucket("s3")
    put_model(store, "m", "Add")
    code = (
        "import sys\n"
        "from tritonx_repo_cloud import S3Repository\n"
        "path = S3Repository(sys.argv[1], {}).localize('m')\n"
        "assert (path / '1' / 'model.onnx').is_file()\n"
        "print(path)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, store.url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).name == "m"
    assert list(mount.iterdir()) == []
